package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/forewarn/forewarn/relay"
)

// runRelay is 'forewarn relay': the metadata relay of one host.
func runRelay(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := relay.DefaultConfig()
	fs := flag.NewFlagSet("forewarn relay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Func("listen", "`NETWORK=HOST:PORT[@DEVICE]`: listen where the host's VMs of NETWORK reach their metadata service (169.254.169.254:80), bound to interface DEVICE when given; repeat for each network", func(v string) error {
		l, err := relay.ParseListener(v)
		if err != nil {
			return fmt.Errorf("%s", serveMessage(err))
		}
		cfg.Listeners = append(cfg.Listeners, l)
		return nil
	})
	fs.Func("server", "`URL[,URL...]`: the relay listeners of the Forewarn servers (https://HOST:PORT), any replica; the relay moves to the next when one fails", appendList(&cfg.Servers))
	fs.StringVar(&cfg.CertFile, "cert", "", "PEM `file` of this relay's client certificate (its Common Name or a DNS name is its name in the servers' --relays file)")
	fs.StringVar(&cfg.KeyFile, "key", "", "PEM `file` of this relay's private key")
	fs.StringVar(&cfg.CAFile, "ca", "", "PEM `file` of the authority that signed the servers' certificates")
	fs.StringVar(&cfg.MetricsAddr, "metrics-addr", cfg.MetricsAddr, "listen address of GET /metrics (\"\" for none)")
	fs.IntVar(&cfg.MaxConnsPerSource, "max-conns-per-source", cfg.MaxConnsPerSource, "open connections per VM address on each listener; excess connections get 503")
	fs.IntVar(&cfg.MaxConns, "max-conns", cfg.MaxConns, "open connections on each listener")
	fs.IntVar(&cfg.MaxUpstreamConns, "max-upstream-conns", cfg.MaxUpstreamConns, "connections to each server: HTTP/2 ones, shared by every request, and the short ones")
	fs.IntVar(&cfg.ShortConns, "short-conns", cfg.ShortConns, "of --max-upstream-conns, how many may carry requests the server answers at once, one at a time over HTTP/1.1 (lower latency than HTTP/2; 0: none)")
	fs.DurationVar(&cfg.RetryFor, "retry-for", cfg.RetryFor, "how long a request keeps trying the servers once they fail before the VM gets 502")
	fs.DurationVar(&cfg.HeaderTimeout, "header-timeout", cfg.HeaderTimeout, "time a VM's request headers may take to arrive")
	fs.DurationVar(&cfg.BodyTimeout, "body-timeout", cfg.BodyTimeout, "time a VM's request body may take to arrive after its headers")
	fs.DurationVar(&cfg.IdleTimeout, "idle-timeout", cfg.IdleTimeout, "close a VM's kept-alive connection after this long without a request")
	fs.DurationVar(&cfg.WriteTimeout, "write-timeout", cfg.WriteTimeout, "close a VM's connection that takes no 64 KiB of an answer for this long")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout, "how long requests in flight may take to finish on shutdown")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "forewarn relay: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	r, err := relay.New(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "forewarn relay: %s\n", serveMessage(err))
		return 1
	}
	for i, l := range cfg.Listeners {
		fmt.Fprintf(stdout, "relay listening on %s for network %s\n", r.Addrs()[i], l.Network)
	}
	if a := r.MetricsAddr(); a != nil {
		fmt.Fprintf(stdout, "metrics listening on %s\n", a)
	}
	if err := r.Run(ctx); err != nil {
		fmt.Fprintf(stderr, "forewarn relay: %v\n", err)
		return 1
	}
	return 0
}

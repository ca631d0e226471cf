package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"

	"github.com/forewarn/forewarn"
	fwserver "github.com/forewarn/forewarn/server"
)

// ServeConfig configures 'forewarn serve': the server package's Config,
// which the flags fill in.
type ServeConfig = fwserver.Config

// defaultServeConfig returns the defaults the flags start from.
func defaultServeConfig() ServeConfig { return fwserver.DefaultConfig() }

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := defaultServeConfig()
	fs := flag.NewFlagSet("forewarn serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.MetadataAddr, "metadata-addr", cfg.MetadataAddr, "listen address of the metadata API that VMs call")
	fs.StringVar(&cfg.AdminAddr, "admin-addr", cfg.AdminAddr, "listen address of the operator API (off loopback it requires --admin-token-file)")
	fs.StringVar(&cfg.AdminTokenFile, "admin-token-file", "", "file holding the operator API's bearer token, generated with mode 0600 if missing")
	fs.Func("admin-allowed-hosts", "names, comma-separated, by which the operator API may be reached besides its own address and localhost (a reverse proxy's name, say); requests for other hosts get 421", appendList(&cfg.AdminAllowedHosts))
	fs.StringVar(&cfg.RelayAddr, "relay-addr", "", "listen address of the relay listener, where 'forewarn relay' on each host forwards its VMs' requests over mutual TLS (needs --relay-cert, --relay-key, --relay-ca and --relays)")
	fs.StringVar(&cfg.RelayCertFile, "relay-cert", "", "PEM `file` of the relay listener's certificate")
	fs.StringVar(&cfg.RelayKeyFile, "relay-key", "", "PEM `file` of the relay listener's private key")
	fs.StringVar(&cfg.RelayCAFile, "relay-ca", "", "PEM `file` of the authority that signs the relays' client certificates")
	fs.StringVar(&cfg.RelaysFile, "relays", "", "YAML `file` mapping each relay's certificate name to the networks it may speak for, e.g. 'host-a: [blue, green]'")
	fs.StringVar(&cfg.NeutronAddr, "neutron-addr", "", "listen address of the neutron listener (plain HTTP), where OpenStack's neutron metadata agents forward their instances' requests as to Nova's metadata API; keep it on the management network (needs --neutron-secret-file)")
	fs.StringVar(&cfg.NeutronSecretFile, "neutron-secret-file", "", "`file` holding neutron's metadata_proxy_shared_secret, which signs each request's X-Instance-ID (mode 0600)")
	fs.Func("neutron-proxies", "`CIDR[,CIDR...]` of the addresses neutron's metadata agents connect from; other sources get 403 (default: any source, which lets in whoever replays a signed request)", func(v string) error {
		for p := range strings.SplitSeq(v, ",") {
			if p = strings.TrimSpace(p); p == "" {
				continue
			}
			pfx, err := parsePrefix(p)
			if err != nil {
				return err
			}
			cfg.NeutronProxies = append(cfg.NeutronProxies, pfx)
		}
		return nil
	})
	fs.Func("webhook", "`URL` (http or https) that receives every session's host and session transitions as signed CloudEvents; repeatable (needs --webhook-secret-file)", func(v string) error {
		cfg.Webhooks = append(cfg.Webhooks, v)
		return nil
	})
	fs.StringVar(&cfg.WebhookSecretFile, "webhook-secret-file", "", "`file` holding the secret (at least 16 bytes, mode 0600) that signs webhook deliveries (HMAC-SHA256); without it, sessions may not name webhooks")
	fs.StringVar(&cfg.DataDir, "data", cfg.DataDir, "directory of the embedded store and the audit log, created if missing")
	fs.StringVar(&cfg.Store, "store", cfg.Store, "where state is kept: bolt (embedded, one server), etcd (several replicas share it) or mem (in memory, kept nowhere)")
	fs.Func("etcd-endpoints", "etcd client URLs, comma-separated (with --store etcd)", appendList(&cfg.EtcdEndpoints))
	fs.StringVar(&cfg.EtcdPrefix, "etcd-prefix", cfg.EtcdPrefix, "key prefix of the fleet's state in etcd; replicas of one fleet share it")
	fs.DurationVar(&cfg.EtcdTimeout, "etcd-timeout", cfg.EtcdTimeout, "bound of every etcd call; a write that cannot reach a quorum in it gets 503")
	fs.DurationVar(&cfg.LeaderTTL, "leader-ttl", cfg.LeaderTTL, "lease of the leader, whole seconds: a dead leader is replaced this long after")
	fs.StringVar(&cfg.ReplicaName, "replica-name", "", "this replica's name in 'forewarn cluster status' (default: the host name)")
	fs.StringVar(&cfg.FleetFile, "fleet", "", "fleet `file` (YAML or JSON) applied to the inventory at start, adding or replacing the VMs it names; without it, an empty store gets the default fleet (an Azure, a GCE and an EC2 VM named after the host, each answering every caller of its API)")
	fs.BoolVar(&cfg.AllowShortNotice, "allow-short-notice", false, "accept notices below the per-type minimums (testing and development)")
	fs.DurationVar(&cfg.DisableAfter, "disable-after", cfg.DisableAfter, "disable a VM's scheduled events after this long without a request")
	fs.DurationVar(&cfg.FirstCallDelay, "first-call-delay", 0, "delay the answer to the call that enables a VM's scheduled events (the real service takes up to 2m)")
	fs.Float64Var(&cfg.RateLimit, "rate-limit", cfg.RateLimit, "Azure requests per second per VM; excess requests get 429 (0 disables)")
	fs.Float64Var(&cfg.AWSRateLimit, "aws-rate-limit", cfg.AWSRateLimit, "EC2 requests per second per VM; excess requests get 429 (0 disables)")
	fs.Float64Var(&cfg.GCERateLimit, "gce-rate-limit", cfg.GCERateLimit, "GCE requests per second per VM; excess requests get 429 (0 disables; a held wait_for_change counts once, when made)")
	fs.IntVar(&cfg.MemoryHeadroom, "memory-headroom", cfg.MemoryHeadroom, "MiB of garbage the server lets pile up above its live heap before it collects (0: Go's own pacing, which lets the heap double)")
	fs.IntVar(&cfg.RequestHistory, "request-history", cfg.RequestHistory, "recent metadata requests kept per VM for 'forewarn vm show' (about 32 bytes each; 0 keeps none, only the counts 'forewarn report' shows)")
	fs.IntVar(&cfg.MaxLongPolls, "max-long-polls", cfg.MaxLongPolls, "held GCE wait_for_change requests per VM; excess requests get 503 (0: no cap)")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout, "how long in-flight requests may take to finish on shutdown")
	fs.DurationVar(&cfg.HeaderTimeout, "header-timeout", cfg.HeaderTimeout, "time a request's headers may take to arrive; a new connection silent this long is closed")
	fs.DurationVar(&cfg.BodyTimeout, "body-timeout", cfg.BodyTimeout, "time a request's body may take to arrive after its headers")
	fs.DurationVar(&cfg.IdleTimeout, "idle-timeout", cfg.IdleTimeout, "close a kept-alive connection after this long without a request")
	fs.DurationVar(&cfg.WriteTimeout, "write-timeout", cfg.WriteTimeout, "close a connection whose client takes no 64 KiB of an answer for this long (a held long-poll, which writes nothing, is not affected)")
	fs.IntVar(&cfg.MaxConnsPerSource, "max-conns-per-source", cfg.MaxConnsPerSource, "open metadata API connections per VM address; excess connections get 503 and are closed (0: --max-long-polls + 16)")
	fs.IntVar(&cfg.MaxConns, "max-conns", cfg.MaxConns, "open metadata API connections in all; once reached, a new connection closes one of the source holding the most, if it holds 2 more (0: sized from the limit on open files)")
	fs.IntVar(&cfg.MaxStrangerConns, "max-stranger-conns", cfg.MaxStrangerConns, "open metadata API connections from addresses of no VM, together (4 each)")
	fs.IntVar(&cfg.AdminMaxConnsPerSource, "admin-max-conns-per-source", cfg.AdminMaxConnsPerSource, "open operator API connections per address (4 for a fleet VM's address, a quarter of --admin-max-conns for all of them)")
	fs.IntVar(&cfg.AdminMaxConns, "admin-max-conns", cfg.AdminMaxConns, "open operator API connections in all")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "forewarn serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if err := Serve(ctx, cfg, log, stdout); err != nil {
		fmt.Fprintf(stderr, "forewarn serve: %s\n", serveMessage(err))
		return 1
	}
	return 0
}

// Serve runs the metadata and operator APIs until ctx ends, then shuts
// down cleanly. It prints one line per listener to out once both listen.
func Serve(ctx context.Context, cfg ServeConfig, log *slog.Logger, out io.Writer) error {
	cfg.Logger = log
	s, err := fwserver.New(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "metadata API listening on %s\noperator API listening on %s\n", s.MetadataAddr(), s.AdminAddr())
	if a := s.RelayAddr(); a != nil {
		fmt.Fprintf(out, "relay listener on %s\n", a)
	}
	if a := s.NeutronAddr(); a != nil {
		fmt.Fprintf(out, "neutron listener on %s\n", a)
	}
	return s.Run(ctx)
}

// parsePrefix parses an address prefix (10.0.0.0/24) or a single
// address (10.0.0.5, its own prefix), with its host bits cleared.
func parsePrefix(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not an address or a CIDR prefix", s)
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an address or a CIDR prefix", s)
	}
	return p.Masked(), nil
}

// serveMessage returns the text to show for an error of Serve: the
// message of a refusal (a *forewarn.Error, written for the operator), or
// the error's own text, whose wrapping says where it came from.
func serveMessage(err error) string {
	if fe, ok := err.(*forewarn.Error); ok {
		return fe.Message
	}
	return err.Error()
}

// appendList returns a flag.Func that appends each of a comma-separated
// list's non-empty items, spaces trimmed, to dst.
func appendList(dst *[]string) func(string) error {
	return func(v string) error {
		for item := range strings.SplitSeq(v, ",") {
			if item = strings.TrimSpace(item); item != "" {
				*dst = append(*dst, item)
			}
		}
		return nil
	}
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/forewarn/forewarn/agent"
)

// AgentConfig configures 'forewarn agent': the agent itself and the
// listener of its health and metrics endpoints.
type AgentConfig struct {
	agent.Config
	// Listen is the address of /healthz and /metrics; empty disables them.
	Listen string
	// ShutdownTimeout bounds how long the health listener may take to
	// stop.
	ShutdownTimeout time.Duration
}

// defaultAgentConfig returns the defaults the flags start from.
func defaultAgentConfig() AgentConfig {
	return AgentConfig{
		Config: agent.Config{
			Provider:       agent.ProviderAuto,
			HandlerTimeout: agent.DefaultHandlerTimeout,
		},
		Listen:          "127.0.0.1:9469",
		ShutdownTimeout: 5 * time.Second,
	}
}

// Validate reports whether c can run.
func (c *AgentConfig) Validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	if c.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Listen); err != nil {
			return fmt.Errorf("--listen %q: %v", c.Listen, err)
		}
	}
	return nil
}

func runAgent(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := defaultAgentConfig()
	var types string
	var exec, webhooks, onClear stringsFlag
	fs := flag.NewFlagSet("forewarn agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.Provider, "provider", cfg.Provider, "metadata `API`: azure, gce, aws, or auto (probe the endpoint)")
	fs.StringVar(&cfg.Endpoint, "endpoint", "", "metadata service `URL` (default http://169.254.169.254 for azure; $GCE_METADATA_HOST, else http://metadata.google.internal, for gce; $AWS_EC2_METADATA_SERVICE_ENDPOINT, else http://169.254.169.254, for aws)")
	fs.StringVar(&cfg.VM, "vm", "", "this VM's `name` as events' Resources show it (default: read from the metadata service)")
	fs.Var(&exec, "exec", "`command` run with /bin/sh -c for each event, the event as JSON on stdin and in FOREWARN_* variables; repeatable")
	fs.Var(&webhooks, "webhook", "`URL` POSTed each event as JSON after the commands; a non-2xx answer is a failure; repeatable")
	fs.Var(&onClear, "on-clear", "`command` run when an event the agent acted on is over, with the same input as --exec; repeatable")
	fs.StringVar(&types, "types", "", "comma-separated event `types` to act on (default every type but Freeze, UPCOMING_MAINTENANCE and REBALANCE_RECOMMENDATION)")
	fs.DurationVar(&cfg.Lead, "lead", 0, "run the handlers this long before NotBefore instead of at once")
	fs.DurationVar(&cfg.HandlerTimeout, "handler-timeout", cfg.HandlerTimeout, "kill a handler (its process group) after this long and count it failed")
	fs.BoolVar(&cfg.Approve, "approve", false, "approve an Azure event once all its handlers succeeded (Terminate: this VM's own; other types: when this VM is the first of Resources); gce and aws have no approval")
	fs.StringVar(&cfg.StateFile, "state", "", "`file` remembering handled events, so a restart does not handle them again")
	fs.BoolVar(&cfg.DryRun, "dry-run", false, "log the handlers and approvals that would run, without running them")
	fs.DurationVar(&cfg.PollInterval, "poll-interval", 0, "how often to poll the Azure or EC2 API (0: the client's default, 1s)")
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "`address` of /healthz and /metrics; \"\" disables them")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "forewarn agent: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	cfg.Exec, cfg.Webhooks, cfg.OnClear = exec, webhooks, onClear
	for t := range strings.SplitSeq(types, ",") {
		if t = strings.TrimSpace(t); t != "" {
			cfg.Types = append(cfg.Types, t)
		}
	}
	cfg.Logger = slog.New(slog.NewJSONHandler(stderr, nil))
	if err := Agent(ctx, cfg, stdout); err != nil {
		fmt.Fprintf(stderr, "forewarn agent: %v\n", err)
		return 1
	}
	return 0
}

// Agent runs the node agent until ctx ends. With a listen address it
// serves /healthz and /metrics there and prints "agent listening on
// ADDR" to out once it listens.
func Agent(ctx context.Context, cfg AgentConfig, out io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	a, err := agent.New(cfg.Config)
	if err != nil {
		return err
	}
	if cfg.Listen == "" {
		return a.Run(ctx)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	srv := &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Fprintf(out, "agent listening on %s\n", ln.Addr())

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runc := make(chan error, 1)
	go func() { runc <- a.Run(rctx) }()
	var runErr, serveErr error
	select {
	case runErr = <-runc:
	case serveErr = <-errc:
		cancel()
		runErr = <-runc
	}
	sctx, scancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil && runErr == nil {
		runErr = err
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("--listen: %w", serveErr)
	}
	return runErr
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/scenario"
)

const scenarioRunSynopsis = "FILE [--serve [--metadata-addr ADDR] [--admin-addr ADDR] | --server URL] [--junit FILE] [--wait-for-clients D]"

const scenarioUsage = `usage: forewarn scenario <command> [arguments]

commands:
  run  ` + scenarioRunSynopsis + `
       play the scenario's timeline against a server and check what its
       clients did; exit 0 when every expectation holds, 1 when one fails,
       2 for a bad scenario file

Run 'forewarn scenario run -h' for its flags. docs/scenarios.md has the file's keys.
`

// runScenario runs 'forewarn scenario ...' and returns the exit code.
func runScenario(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, scenarioUsage)
		return 2
	}
	switch args[0] {
	case "run":
		return scenarioRun(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, scenarioUsage)
		return 0
	}
	fmt.Fprintf(stderr, "forewarn: unknown scenario command %q\n\n%s", args[0], scenarioUsage)
	return 2
}

// scenarioRun parses the flags and the file, then plays it with package
// scenario: exit code 0 when every expectation holds, 1 when one fails
// or the run cannot go on, 2 for a usage error or a bad scenario file.
func scenarioRun(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("scenario run", scenarioRunSynopsis)
	var (
		serve                 bool
		junit, mdAddr, adAddr string
		wait                  durationFlag
	)
	c.fs.BoolVar(&serve, "serve", false, "run a fresh server in this process (temporary store, --allow-short-notice) and print its addresses")
	c.fs.StringVar(&mdAddr, "metadata-addr", "127.0.0.1:0", "with --serve: the metadata API's listen `address`")
	c.fs.StringVar(&adAddr, "admin-addr", "127.0.0.1:0", "with --serve: the operator API's listen `address`")
	c.fs.StringVar(&junit, "junit", "", "write the results as JUnit XML to `file`")
	c.fs.Var(&wait, "wait-for-clients", "before the timeline, wait up to `duration` for every VM the scenario names to call its API")
	var code int
	exit := c.run(args, stderr, func(pos []string) (err error) {
		defer func() {
			// A mistake in the file: exit 2, naming file, line and key.
			if se := (*scenario.Error)(nil); errors.As(err, &se) {
				fmt.Fprintf(stderr, "forewarn: %s\n", err)
				code, err = 2, nil
			}
		}()
		file, err := oneArg(pos, "scenario file")
		if err != nil {
			return err
		}
		if serve && c.server != "" {
			return usagef("give --serve or --server, not both")
		}
		if !serve && (mdAddr != "127.0.0.1:0" || adAddr != "127.0.0.1:0") {
			return usagef("--metadata-addr and --admin-addr need --serve")
		}
		sc, err := scenario.Load(file)
		if err != nil {
			return err
		}
		var target scenario.Target
		if serve {
			cl, stop, err := serveScenario(ctx, sc, mdAddr, adAddr, stdout)
			if err != nil {
				return err
			}
			defer stop()
			target = scenario.Target{Client: cl, Fresh: true}
		} else {
			target = scenario.Target{Client: c.client()}
		}
		res, err := sc.Run(ctx, target, scenario.WithOutput(stdout), scenario.WithWaitForClients(wait.d))
		if err != nil {
			return err
		}
		if junit != "" {
			b, err := res.JUnit()
			if err != nil {
				return err
			}
			if err := os.WriteFile(junit, b, 0o644); err != nil {
				return fmt.Errorf("write JUnit report: %w", err)
			}
		}
		if !res.Passed() {
			code = 1
		}
		return nil
	})
	if exit != 0 {
		return exit
	}
	return code
}

// serveScenario starts a fresh server in this process for sc, as
// 'forewarn serve' with a temporary store, --allow-short-notice and an
// operator token, prints its addresses to out, and returns a client of
// its operator API. stop shuts it down and removes its store.
func serveScenario(ctx context.Context, sc *scenario.Scenario, mdAddr, adAddr string, out io.Writer) (cl *admin.Client, stop func(), err error) {
	dir, err := os.MkdirTemp("", "forewarn-scenario")
	if err != nil {
		return nil, nil, err
	}
	cfg := defaultServeConfig()
	cfg.MetadataAddr, cfg.AdminAddr, cfg.DataDir = mdAddr, adAddr, filepath.Join(dir, "data")
	cfg.AllowShortNotice, cfg.AdminTokenFile = true, filepath.Join(dir, "token")
	cfg.Fleet = sc.Fleet() // nil: the default fleet
	sctx, cancel := context.WithCancel(ctx)
	lines := newAddrWriter(out)
	done := make(chan error, 1)
	go func() {
		done <- Serve(sctx, cfg, slog.New(slog.DiscardHandler), lines)
	}()
	stop = func() {
		cancel()
		<-done
		os.RemoveAll(dir)
	}
	select {
	case <-lines.ready:
	case err := <-done:
		cancel()
		os.RemoveAll(dir)
		if err == nil {
			err = errors.New("the server stopped before listening")
		}
		return nil, nil, fmt.Errorf("serve: %w", err)
	}
	tok, err := os.ReadFile(cfg.AdminTokenFile)
	if err != nil {
		stop()
		return nil, nil, err
	}
	cl = admin.NewClient("http://"+lines.admin, &http.Client{Timeout: requestTimeout})
	cl.Token = strings.TrimSpace(string(tok))
	return cl, stop, nil
}

// addrWriter passes Serve's output on and learns the listeners'
// addresses from it.
type addrWriter struct {
	mu              sync.Mutex
	w               io.Writer
	buf             []byte
	metadata, admin string
	ready           chan struct{}
	announced       bool // the addresses were printed and ready closed
}

func newAddrWriter(w io.Writer) *addrWriter { return &addrWriter{w: w, ready: make(chan struct{})} }

func (a *addrWriter) Write(b []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.buf = append(a.buf, b...)
	for {
		i := strings.IndexByte(string(a.buf), '\n')
		if i < 0 {
			break
		}
		line := string(a.buf[:i])
		a.buf = a.buf[i+1:]
		if v, ok := strings.CutPrefix(line, "metadata API listening on "); ok {
			a.metadata = v
		}
		if v, ok := strings.CutPrefix(line, "operator API listening on "); ok {
			a.admin = v
		}
		if a.metadata != "" && a.admin != "" && !a.announced {
			a.announced = true
			fmt.Fprintf(a.w, "metadata API listening on %s\noperator API listening on %s\n", a.metadata, a.admin)
			close(a.ready)
		}
	}
	return len(b), nil
}

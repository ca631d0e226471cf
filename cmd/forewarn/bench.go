package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/bench"
)

const benchUsage = `usage: forewarn bench <mode> [flags]

modes:
  poll     polling load from many VMs, Forewarn and the same-run ceiling
  fanout   hold one GCE long-poll per VM, flip them all with one event
  engine   create VMs and pending events, measure memory and deadline firing;
           with --wide, one event naming a whole fleet of each given size
  ha       replicas on an etcd the harness starts, against one bolt server:
           write latency, GET throughput, propagation to long-polls, failover
  inventory  the live inventory on bolt, at each fleet size: fleet apply of N
           VMs, of 1% changed, with prune of half; single PUTs; server RSS
  relay    'forewarn relay' in front of the server, at each fleet size: a GET's
           added latency and CPU against the same GET direct; a long-poll
           fan-out through one relay against direct, and its connections
  session  a maintenance session over every host, in process on bolt, at each
           fleet size: its plan, each step (start a host's events, Done,
           the next host Notifying), the heap as steps go by
  fleet    'forewarn serve' with default flags on a fleet of each size and API:
           its start on an empty store, its restart, its idle RSS (best of
           --runs), and each figure's growth from one size to the next

Every mode takes --json. Run 'forewarn bench <mode> -h' for its flags.
`

// runBench runs 'forewarn bench MODE'.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, benchUsage)
		return 2
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "forewarn bench: %v\n", err)
		return 1
	}
	fs := flag.NewFlagSet("forewarn bench "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	base := fs.String("addr-base", "127.1.0.1", "first source address of the simulated VMs; each VM has its own")
	var run func() (any, error)
	switch args[0] {
	case "poll":
		cfg := bench.PollConfig{Binary: self}
		fs.StringVar(&cfg.API, "api", "azure", "azure (scheduledevents with an event present), gce (maintenance-event) or aws (events/maintenance/scheduled with an event present, an IMDSv2 token on every GET)")
		fs.IntVar(&cfg.VMs, "vms", 64, "simulated VMs, one keep-alive connection each (the -c of wrk)")
		fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "measured time per server, split over the rounds")
		fs.DurationVar(&cfg.Warmup, "warmup", 2*time.Second, "unmeasured warm-up per server")
		fs.IntVar(&cfg.Rounds, "rounds", 4, "alternate Forewarn and the ceiling this many times")
		fs.Float64Var(&cfg.RateLimit, "rate-limit", 0, "the server's --rate-limit, --aws-rate-limit and --gce-rate-limit (0: throttling off)")
		fs.BoolVar(&cfg.Ceiling, "ceiling", true, "also measure a minimal net/http server returning the same bytes")
		fs.StringVar(&cfg.Target, "target", "", "host:port of a running server whose fleet has the VMs at --addr-base (default: start one)")
		fs.StringVar(&cfg.CPUProfile, "cpu-profile", "", "file to write a CPU profile of the Forewarn server to: from the start of the second round (the first with one), for a round's length in whole seconds, at least 1 s; not with --target")
		run = func() (any, error) {
			a, err := netip.ParseAddr(*base)
			cfg.AddrBase = a
			if err != nil {
				return nil, err
			}
			if cfg.API != "azure" && cfg.API != "gce" && cfg.API != "aws" {
				return nil, fmt.Errorf("--api %q is not azure, gce or aws", cfg.API)
			}
			return bench.Poll(ctx, cfg)
		}
	case "fanout":
		cfg := bench.FanoutConfig{Binary: self}
		fs.IntVar(&cfg.Waiters, "waiters", 1000, "GCE VMs, each holding one long-poll")
		fs.DurationVar(&cfg.Settle, "settle", 2*time.Second, "time for the server to hold every waiter before measuring")
		run = func() (any, error) {
			a, err := netip.ParseAddr(*base)
			cfg.AddrBase = a
			if err != nil {
				return nil, err
			}
			return bench.Fanout(ctx, cfg)
		}
	case "engine":
		cfg := bench.EngineConfig{}
		fs.IntVar(&cfg.VMs, "vms", 10000, "VMs in the fleet")
		fs.IntVar(&cfg.Events, "events", 10000, "pending events, spread over the VMs")
		fs.IntVar(&cfg.Fire, "fire", 1000, "deadlines that fire together in each firing measurement")
		fs.IntVar(&cfg.SmallPending, "small-pending", 1000, "pending events of the baseline firing measurement")
		wide := fs.String("wide", "", "fleet sizes, comma-separated (1000,10000,100000): measure one event naming every VM instead")
		var wcfg bench.WideConfig
		fs.IntVar(&wcfg.SetSize, "wide-set", 200, "with --wide: VMs per availability set (0: standalone VMs, -1: one set of the whole fleet)")
		provider := fs.String("wide-provider", "azure", "with --wide: azure (a Freeze), gce (a live migration) or aws (an EC2 system-maintenance)")
		profile := fs.String("cpu-profile", "", "file to write a CPU profile of the whole run to (the engine runs in this process)")
		run = func() (any, error) {
			if *profile != "" {
				f, err := os.Create(*profile)
				if err != nil {
					return nil, err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return nil, err
				}
				defer pprof.StopCPUProfile()
			}
			if *wide == "" {
				return bench.Engine(ctx, cfg)
			}
			for _, f := range strings.Split(*wide, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(f))
				if err != nil {
					return nil, fmt.Errorf("--wide %q: %q is not a number", *wide, f)
				}
				wcfg.Sizes = append(wcfg.Sizes, n)
			}
			wcfg.Provider = forewarn.Provider(*provider)
			return bench.Wide(ctx, wcfg)
		}
	case "ha":
		cfg := bench.HAConfig{Binary: self}
		fs.IntVar(&cfg.Writes, "writes", 300, "sequential operator creates, then as many approvals, per setup (0: skip)")
		fs.IntVar(&cfg.Waiters, "waiters", 1000, "GCE VMs, each holding one long-poll, per propagation run (0: skip)")
		fs.IntVar(&cfg.Kills, "kills", 20, "times the leader is killed with SIGKILL (0: skip)")
		fs.DurationVar(&cfg.LeaderTTL, "leader-ttl", 2*time.Second, "the replicas' --leader-ttl, whole seconds")
		fs.IntVar(&cfg.VMs, "vms", 64, "polling VMs of the GET test, one keep-alive connection each")
		fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "GET test: measured time per server, split over the rounds (0: skip)")
		fs.DurationVar(&cfg.Warmup, "warmup", 2*time.Second, "GET test: unmeasured warm-up per server")
		fs.IntVar(&cfg.Rounds, "rounds", 4, "GET test: alternate Forewarn and the ceiling this many times")
		fs.DurationVar(&cfg.Settle, "settle", 2*time.Second, "time for the servers to hold every waiter before measuring")
		fs.StringVar(&cfg.Etcd, "etcd", "", "etcd binary (default: etcd on PATH, else /usr/bin/etcd)")
		run = func() (any, error) {
			a, err := netip.ParseAddr(*base)
			cfg.AddrBase = a
			if err != nil {
				return nil, err
			}
			return bench.HA(ctx, cfg)
		}
	case "inventory":
		cfg := bench.InventoryConfig{Binary: self}
		sizes := fs.String("sizes", "1000,10000,100000", "fleet sizes, comma-separated: a fresh server for each")
		fs.IntVar(&cfg.SetSize, "set-size", 200, "VMs per availability set (0: standalone VMs, -1: one set of the whole fleet)")
		fs.IntVar(&cfg.PUTs, "puts", 200, "sequential PUT /v1/vms/{name} at each size, every other one adding a VM")
		fs.DurationVar(&cfg.Timeout, "timeout", 2*time.Minute, "bound of each operator request")
		fs.StringVar(&cfg.ProfileDir, "cpu-profile", "", "directory to write a CPU profile of the server during each step to (STEP-N.pprof); slows the server a little")
		fs.DurationVar(&cfg.ProfileFor, "profile-for", 10*time.Second, "with --cpu-profile: length of each profile, whole seconds, from just before its step")
		run = func() (any, error) {
			for _, f := range strings.Split(*sizes, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(f))
				if err != nil {
					return nil, fmt.Errorf("--sizes %q: %q is not a number", *sizes, f)
				}
				cfg.Sizes = append(cfg.Sizes, n)
			}
			return bench.Inventory(ctx, cfg)
		}
	case "relay":
		run = benchRelayFlags(ctx, fs, self, base)
	case "session":
		cfg := bench.SessionConfig{}
		sizes := fs.String("sizes", "1000,10000,100000", "fleet sizes, comma-separated: a fresh engine and store for each")
		fs.IntVar(&cfg.VMsPerHost, "vms-per-host", 100, "VMs on each host")
		fs.IntVar(&cfg.SetSize, "set-size", 10, "half of each host's VMs are in availability sets of this many VMs, one on each of as many consecutive hosts, with a budget of 1 down per set (0: standalone VMs, no budget)")
		fs.IntVar(&cfg.MaxHosts, "max-hosts", 1, "the session's MaxHosts")
		fs.IntVar(&cfg.Steps, "steps", 50, "hosts taken through (started, then Done) at each size (0: every host)")
		fs.IntVar(&cfg.References, "references", 10, "reference rounds, half before the session and half after the steps: CreateAll, StartAll and CompleteAll of one host's events")
		fs.StringVar(&cfg.HeapProfile, "heap-profile", "", "directory to write a heap profile to after the last step of each size (heap-N.pprof)")
		fs.StringVar(&cfg.Store, "store", "bolt", "bolt (a file in a temporary directory) or mem")
		fs.BoolVar(&cfg.Approve, "approve", false, "start a host's events by an approval from each VM instead of one StartAll")
		run = func() (any, error) {
			var err error
			cfg.Sizes, err = parseSizes("--sizes", *sizes)
			if err != nil {
				return nil, err
			}
			return bench.Session(ctx, cfg)
		}
	case "fleet":
		cfg := bench.FleetConfig{Binary: self}
		sizes := fs.String("sizes", "10000,100000", "fleet sizes, comma-separated")
		apis := fs.String("apis", "azure,gce,aws", "the fleets' APIs, comma-separated: azure (one availability set), gce, aws (IMDSv2 required)")
		fs.IntVar(&cfg.Runs, "runs", 3, "measurements of each API and size; the best of each figure is kept")
		fs.DurationVar(&cfg.Settle, "settle", 4*time.Second, "how long the restarted server runs idle before its RSS is read")
		run = func() (any, error) {
			a, err := netip.ParseAddr(*base)
			if err != nil {
				return nil, err
			}
			cfg.AddrBase = a
			if cfg.Sizes, err = parseSizes("--sizes", *sizes); err != nil {
				return nil, err
			}
			for _, api := range strings.Split(*apis, ",") {
				api = strings.TrimSpace(api)
				if api != "azure" && api != "gce" && api != "aws" {
					return nil, fmt.Errorf("--apis %q: %q is not azure, gce or aws", *apis, api)
				}
				cfg.APIs = append(cfg.APIs, api)
			}
			return bench.Fleet(ctx, cfg)
		}
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, benchUsage)
		return 0
	default:
		fmt.Fprintf(stderr, "forewarn bench: unknown mode %q\n\n%s", args[0], benchUsage)
		return 2
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	rep, err := run()
	if err != nil {
		fmt.Fprintf(stderr, "forewarn bench %s: %v\n", args[0], err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
		return 0
	}
	printBench(stdout, rep)
	return 0
}

// printBench prints a report as a human table.
func printBench(w io.Writer, rep any) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	us := func(d time.Duration) string { return fmt.Sprintf("%.0fµs", float64(d)/1e3) }
	switch r := rep.(type) {
	case *bench.PollReport:
		fmt.Fprintf(tw, "poll %s: %d VMs, %v measured per server, %d-byte answer\n", r.Config.API, r.Config.VMs, r.Config.Duration, r.BodyBytes)
		fmt.Fprintln(tw, "SERVER\tREQ/S\tREQUESTS\tERRORS\tP50\tP99\tP99.9\tSERVER CPU\tCPU/REQ")
		runs := []*bench.Run{&r.Forewarn}
		if r.Ceiling != nil {
			runs = append(runs, r.Ceiling)
		}
		for _, x := range runs {
			fmt.Fprintf(tw, "%s\t%.0f\t%d\t%d\t%s\t%s\t%s\t%.2f cores\t%s\n", x.Server, x.Throughput, x.Requests, x.Errors,
				us(x.Latency.P50), us(x.Latency.P99), us(x.Latency.P999), x.ServerCPU, us(x.CPUPerRequest))
		}
		if r.Ceiling != nil {
			fmt.Fprintf(tw, "ratio to the ceiling\t%.3f\n", r.Ratio)
		}
		if r.CPURatio > 0 {
			fmt.Fprintf(tw, "ceiling CPU/REQ ÷ forewarn's\t%.3f\t(target ≥ %.2f: %s)\n", r.CPURatio, bench.CPUTarget, metWord(r.CPUMet))
		}
	case *bench.FanoutReport:
		fmt.Fprintf(tw, "fanout: %d waiters, %d delivered\n", r.Config.Waiters, r.Delivered)
		fmt.Fprintf(tw, "delivery delay\tp50 %s\tp99 %s\tp99.9 %s\tmax %s\n", us(r.Delay.P50), us(r.Delay.P99), us(r.Delay.P999), us(r.Delay.Max))
		fmt.Fprintf(tw, "server memory\tidle %d KiB\theld %d KiB\t%.0f bytes per waiter\n", r.RSSIdle>>10, r.RSSHeld>>10, r.BytesPerWaiter)
	case *bench.EngineReport:
		fmt.Fprintf(tw, "engine: %d VMs, %d pending events\n", r.Config.VMs, r.Config.Events)
		fmt.Fprintf(tw, "create\t%v total\t%s per event\n", r.CreateTime.Round(time.Millisecond), us(r.PerCreate))
		fmt.Fprintf(tw, "memory\t%d MiB for the VMs and events\n", r.MemoryBytes>>20)
		fmt.Fprintf(tw, "per fired deadline\t%s at %d pending\t%s at %d pending\tgrowth %.2fx\n",
			us(r.PerFireSmall), r.Config.SmallPending, us(r.PerFireLarge), r.Config.Events, r.Growth)
	case *bench.HAReport:
		ms := func(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/1e6) }
		if len(r.Writes) > 0 {
			fmt.Fprintln(tw, "OPERATOR WRITES\tOP\tWRITES\tP50\tP99\tMAX")
			for _, x := range r.Writes {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", x.Setup, x.Op, x.Writes, ms(x.Latency.P50), ms(x.Latency.P99), ms(x.Latency.Max))
			}
		}
		if len(r.Get) > 0 {
			fmt.Fprintln(tw, "\nGET THROUGHPUT (AZURE)\tREQ/S\tCEILING REQ/S\tRATIO\tP50\tP99\tSERVER CPU\tERRORS")
			for _, x := range r.Get {
				p := x.Report
				fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.3f\t%.0fµs\t%.0fµs\t%.2f cores\t%d\n", x.Setup, p.Forewarn.Throughput, p.Ceiling.Throughput, p.Ratio,
					float64(p.Forewarn.Latency.P50)/1e3, float64(p.Forewarn.Latency.P99)/1e3, p.Forewarn.ServerCPU, p.Forewarn.Errors+p.Ceiling.Errors)
			}
		}
		if len(r.Propagation) > 0 {
			fmt.Fprintln(tw, "\nPROPAGATION TO LONG-POLLS\tDELIVERED\tCREATE\tFROM ACK P50\tP99\tMAX\tFROM REQUEST P50\tP99\tBEFORE ACK")
			for _, x := range r.Propagation {
				fmt.Fprintf(tw, "%s\t%d/%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", x.Setup, x.Delivered, x.Waiters, ms(x.CreateRequest),
					ms(x.FromAck.P50), ms(x.FromAck.P99), ms(x.FromAck.Max), ms(x.FromRequest.P50), ms(x.FromRequest.P99), x.BeforeAck)
			}
		}
		if f := r.Failover; f != nil {
			fmt.Fprintf(tw, "\nFAILOVER, %d KILLS, LEADER TTL %v\tP50\tP99\tMAX\n", f.Kills, f.LeaderTTL)
			for _, x := range []struct {
				what string
				l    bench.Latency
			}{
				{"kill to a survivor reporting itself leader", f.Leader},
				{"kill to a survivor named leader", f.Elected},
				{"kill to the due event Started", f.Deadline},
				{"its NotBefore to Started", f.Late},
				{"restart to rejoined", f.Rejoin},
			} {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", x.what, ms(x.l.P50), ms(x.l.P99), ms(x.l.Max))
			}
		}
	case *bench.InventoryReport:
		printInventory(tw, r)
	case *bench.RelayReport:
		printRelay(tw, r)
	case *bench.SessionReport:
		printBenchSession(tw, r)
	case *bench.FleetReport:
		fmt.Fprintf(tw, "fleet: 'forewarn serve', default flags, best of %d; targets at 100,000 VMs: idle RSS < %d MB, RSS with one event on every VM < %d MB, restart < %v; growth ≤ %.0f× per 10× VMs\n",
			r.Config.Runs, bench.FleetRSSTarget>>20, bench.FleetEventRSSTarget>>20, bench.FleetRestartTarget, bench.FleetGrowthTarget)
		fmt.Fprintln(tw, "API\tVMS\tSTART\tRESTART\tIDLE RSS\tEVENT\tEVENT RSS\tGROWTH START\tRESTART\tRSS\tEVENT\tEVENT RSS\tMET")
		for _, x := range r.Runs {
			g := "-\t-\t-\t-\t-"
			if x.Growth[0] > 0 {
				g = fmt.Sprintf("%.1f×\t%.1f×\t%.1f×\t%.1f×\t%.1f×", x.Growth[0], x.Growth[1], x.Growth[2], x.Growth[3], x.Growth[4])
			}
			fmt.Fprintf(tw, "%s\t%d\t%.0fms\t%.0fms\t%d MiB\t%.0fms\t%d MiB\t%s\t%s\n", x.API, x.VMs, float64(x.Start)/1e6, float64(x.Restart)/1e6,
				x.IdleRSS>>20, float64(x.Event)/1e6, x.EventRSS>>20, g, metWord(x.Met))
		}
	case *bench.WideReport:
		ms := func(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/1e6) }
		if r.Config.Provider == forewarn.Azure {
			fmt.Fprintf(tw, "one %s request naming every VM (sets of %d): an event per scope group\n", r.Config.Provider, r.Config.SetSize)
		} else {
			fmt.Fprintf(tw, "one %s request naming every VM: an event per VM\n", r.Config.Provider)
		}
		fmt.Fprintln(tw, "VMS\tEVENTS\tDOC\tCREATE\tSTART\tCOMPLETE\tRESTART\tBASE RSS\tPEAK EXTRA RSS\tHEAP EXTRA\tHISTORY/VM")
		for _, x := range r.Runs {
			fmt.Fprintf(tw, "%d\t%d\t%d B\t%s\t%s\t%s\t%s\t%d MiB\t%d MiB\t%d MiB\t%.0f B\n", x.VMs, x.Events, x.DocBytes, ms(x.Create), ms(x.Start), ms(x.Complete), ms(x.Restart),
				x.BaseRSS>>20, x.PeakExtra>>20, x.HeapExtra>>20, x.HistoryPerVM)
		}
		if r.Growth != nil {
			fmt.Fprintf(tw, "growth, last two sizes\tcreate %.1fx\tstart %.1fx\tcomplete %.1fx\trestart %.1fx\n",
				r.Growth["create"], r.Growth["start"], r.Growth["complete"], r.Growth["restart"])
		}
	}
}

// runBenchHop runs the byte-copying TCP proxy that 'bench relay'
// compares the relay against.
func runBenchHop(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("forewarn bench-hop", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	to := fs.String("to", "", "HOST:PORT to forward each connection to, from its caller's address")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *to == "" {
		fmt.Fprintln(stderr, "forewarn bench-hop: give --to HOST:PORT")
		return 2
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(stderr, "forewarn bench-hop: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "hop listening on %s\n", ln.Addr())
	if err := bench.Hop(ctx, ln, *to); err != nil {
		fmt.Fprintf(stderr, "forewarn bench-hop: %v\n", err)
		return 1
	}
	return 0
}

// runBenchCeiling runs the minimal net/http server the poll mode compares
// against: every request gets the same headers and body.
func runBenchCeiling(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("forewarn bench-ceiling", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	bodyFile := fs.String("body", "", "file with the body to return")
	headerFile := fs.String("headers", "", "file with the headers to send, a \"Name: value\" line each (net/http adds Date and Content-Length)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	body, err := os.ReadFile(*bodyFile)
	if err != nil {
		fmt.Fprintf(stderr, "forewarn bench-ceiling: %v\n", err)
		return 1
	}
	header := http.Header{}
	if *headerFile != "" {
		text, err := os.ReadFile(*headerFile)
		if err != nil {
			fmt.Fprintf(stderr, "forewarn bench-ceiling: %v\n", err)
			return 1
		}
		for line := range strings.Lines(string(text)) {
			k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok {
				fmt.Fprintf(stderr, "forewarn bench-ceiling: %s: %q is not a header line\n", *headerFile, line)
				return 1
			}
			// As sent, not canonicalized: the same bytes on the wire.
			header[k] = append(header[k], strings.TrimSpace(v))
		}
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(stderr, "forewarn bench-ceiling: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "ceiling listening on %s\n", ln.Addr())
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// What a handler of its own would do: set each header, then
		// write the body.
		h := w.Header()
		for k, v := range header {
			h[k] = v
		}
		w.Write(body)
	})}
	go func() { <-ctx.Done(); srv.Close() }()
	srv.Serve(ln)
	return 0
}

// printInventory prints an inventory report: the applies, the PUTs and
// the memory, each against its target.
func printInventory(tw *tabwriter.Writer, r *bench.InventoryReport) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/1e6) }
	cpu := func(d time.Duration) string { return fmt.Sprintf("%.0fms", float64(d)/1e6) } // in 10 ms ticks
	mb := func(n int64) string { return fmt.Sprintf("%.0f MB", float64(n)/1e6) }
	t := r.Targets
	sets := fmt.Sprintf("availability sets of %d", r.Config.SetSize)
	switch {
	case r.Config.SetSize == 0:
		sets = "standalone VMs"
	case r.Config.SetSize < 0:
		sets = "one availability set"
	}
	fmt.Fprintf(tw, "inventory on bolt, %s, a fresh server per size started with 4 VMs; targets: each apply ≤ %v, RSS growth ≤ %s, PUT p99 ≤ %v\n",
		sets, t.Apply, mb(t.RSSGrowth), t.PUTP99)
	fmt.Fprintln(tw, "VMS\tAPPLY\tDOC\tADDED\tCHANGED\tREMOVED\tTIME\tSERVER CPU\tDRY RUN\t×DRY RUN\tEXPORT\tRSS BEFORE\tAFTER\tPEAK\tMET")
	for _, x := range r.Runs {
		for _, a := range []struct {
			step string
			s    bench.ApplyStep
		}{{"new", x.Apply}, {"1% changed", x.Change}, {"prune half", x.Prune}} {
			s := a.s
			fmt.Fprintf(tw, "%d\t%s\t%.1f MB\t%d\t%d\t%d\t%s\t%s\t%s\t%.1f\t%s\t%s\t%s\t%s\t%s\n", x.VMs, a.step, float64(s.DocBytes)/1e6,
				s.Added, s.Changed, s.Removed, ms(s.Time), cpu(s.ServerCPU), ms(s.DryRun), float64(s.Time)/float64(max(s.DryRun, 1)), ms(s.Export),
				mb(s.RSSBefore), mb(s.RSSAfter), mb(s.RSSPeak), metWord(s.Met))
		}
	}
	fmt.Fprintln(tw, "\nVMS\tPUTS\tP50\tP99\tMAX\tSERVER CPU/PUT\tGET /healthz P50\tP99\t×P99\tMET")
	for _, x := range r.Runs {
		p := x.PUT
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\t%s\n", x.VMs, p.PUTs, ms(p.Latency.P50), ms(p.Latency.P99), ms(p.Latency.Max), ms(p.ServerCPU),
			ms(p.Reference.P50), ms(p.Reference.P99), float64(p.Latency.P99)/float64(max(p.Reference.P99, 1)), metWord(p.Met))
	}
	fmt.Fprintln(tw, "\nVMS\tRSS AT START\tGROWTH, APPLY OF N\tMET\tPEAK GROWTH, WHOLE RUN")
	for _, x := range r.Runs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", x.VMs, mb(x.RSSStart), mb(x.ApplyGrowth), metWord(x.RSSMet), mb(x.PeakGrowth))
	}
}

// parseSizes parses the comma-separated fleet sizes of the flag name.
func parseSizes(name, list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%s %q: %q is not a number", name, list, f)
		}
		if n < 1 {
			return nil, fmt.Errorf("%s %q: a fleet has at least 1 VM, not %d", name, list, n)
		}
		out = append(out, n)
	}
	return out, nil
}

// printBenchSession prints a session report: the plan and the steps against
// the target and the reference, then the heap over the steps.
func printBenchSession(tw *tabwriter.Writer, r *bench.SessionReport) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/1e6) }
	kb := func(n float64) string { return fmt.Sprintf("%.1f KB", n/1e3) }
	c := r.Config
	how := "StartAll"
	if c.Approve {
		how = "an approval from each VM"
	}
	fmt.Fprintf(tw, "maintenance session on %s, %d VMs a host, sets of %d, max hosts %d, events started with %s; target: plan and each advance ≤ %v\n",
		c.Store, c.VMsPerHost, c.SetSize, c.MaxHosts, how, r.Target)
	fmt.Fprintln(tw, "VMS\tHOSTS\tSTEPS\tCREATE\tPLAN\tREADY P50\tP99\tMAX\tDONE P50\tADVANCE P50\tP99\tMAX\tALLOCS/STEP\tBYTES/STEP\tMET")
	for _, x := range r.Runs {
		steps := strconv.Itoa(x.Steps)
		if x.Advances != x.Steps {
			steps += fmt.Sprintf(" (%d advanced)", x.Advances)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\t%.1f MB\t%s\n", x.VMs, x.Hosts, steps, ms(x.Create), ms(x.Plan),
			ms(x.Ready.P50), ms(x.Ready.P99), ms(x.Ready.Max), ms(x.Done.P50), ms(x.Advance.P50), ms(x.Advance.P99), ms(x.Advance.Max),
			x.AllocsPerStep, x.BytesPerStep/1e6, metWord(x.StepMet))
	}
	fmt.Fprintln(tw, "\nREFERENCE, ONE HOST'S VMS\tEVENTS\tCREATEALL P50\tSTARTALL P50\tCOMPLETEALL P50\tALLOCS/ROUND\tBYTES/ROUND\tADVANCE ÷ (COMPLETE+CREATE)\tREADY ÷ START")
	for _, x := range r.Runs {
		f := x.Reference
		fmt.Fprintf(tw, "%d VMs, %d rounds\t%d\t%s\t%s\t%s\t%.0f\t%.1f MB\t%.2f\t%.2f\n", x.VMs, f.Rounds, f.Events, ms(f.Create.P50), ms(f.Start.P50), ms(f.Complete.P50),
			f.AllocsPerRound, f.BytesPerRound/1e6, x.AdvanceRatio, x.ReadyRatio)
	}
	fmt.Fprintln(tw, "\nVMS\tHEAP AFTER STEP\tAFTER STEP\tGROWTH/STEP\tEVENTS/STEP\tB/EVENT\tBEYOND EVENTS/STEP\tRECORD JSON\tRECORD IN MEMORY\tBOLT FILE\tMET")
	for _, x := range r.Runs {
		m := x.Memory
		fmt.Fprintf(tw, "%d\t%d: %.1f MB\t%d: %.1f MB\t%s\t%.0f\t%.0f\t%s\t%s → %s\t%s → %s\t%.1f → %.1f MB\t%s\n", x.VMs, m.FromStep, float64(m.HeapFrom)/1e6, m.ToStep, float64(m.HeapTo)/1e6,
			kb(m.PerStep), m.EventsPerStep, x.Reference.BytesPerEvent, kb(m.BeyondEvents), kb(float64(m.RecordFrom)), kb(float64(m.RecordTo)),
			kb(float64(m.CloneFrom)), kb(float64(m.CloneTo)), float64(m.FileFrom)/1e6, float64(m.FileTo)/1e6, metWord(x.MemoryMet))
	}
}

// metWord is a report's word for a target met (yes) or not (NO).
func metWord(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}

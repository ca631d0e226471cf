package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"text/tabwriter"
	"time"

	"github.com/forewarn/forewarn/bench"
)

// benchRelayFlags defines the flags of 'forewarn bench relay' on fs and
// returns what runs it once they are parsed; base is --addr-base.
func benchRelayFlags(ctx context.Context, fs *flag.FlagSet, self string, base *string) func() (any, error) {
	cfg := bench.RelayConfig{Binary: self}
	fs.StringVar(&cfg.API, "api", "azure", "the GET of the latency runs: azure (scheduledevents with an event present), gce (maintenance-event) or aws (events/maintenance/scheduled with an event present, an IMDSv2 token on every GET)")
	sizes := fs.String("sizes", "1000,10000,100000", "fleet sizes, comma-separated: a fresh server and relay for each, serving that many GCE VMs directly and as many through the relay")
	fs.IntVar(&cfg.Requests, "requests", 20000, "sequential requests per path from one keep-alive connection, split over the rounds")
	fs.IntVar(&cfg.Conns, "conns", 64, "VMs of the concurrent runs, one keep-alive connection each (the -c of wrk; 0: skip)")
	fs.DurationVar(&cfg.Duration, "duration", 8*time.Second, "measured time per path of the concurrent runs, split over the rounds")
	fs.DurationVar(&cfg.Warmup, "warmup", time.Second, "unmeasured warm-up per path, before the sequential and before the concurrent runs")
	fs.IntVar(&cfg.Rounds, "rounds", 4, "alternate the direct path and the relay this many times")
	fs.IntVar(&cfg.Waiters, "waiters", 10000, "fan-out: at each size N, min(N, this) GCE VMs each hold one long-poll, directly and then through the relay (0: skip)")
	fs.DurationVar(&cfg.Settle, "settle", 2*time.Second, "fan-out: wait this long once the server holds every waiter, before measuring memory and waking them")
	return func() (any, error) {
		a, err := netip.ParseAddr(*base)
		if err != nil {
			return nil, err
		}
		cfg.AddrBase = a
		if cfg.API != "azure" && cfg.API != "gce" && cfg.API != "aws" {
			return nil, fmt.Errorf("--api %q is not azure, gce or aws", cfg.API)
		}
		if cfg.Sizes, err = parseSizes("--sizes", *sizes); err != nil {
			return nil, err // bench.Relay refuses a size below 1
		}
		return bench.Relay(ctx, cfg)
	}
}

// printRelay prints a relay report: the GET on each path, then the
// fan-out, each against its target.
func printRelay(tw *tabwriter.Writer, r *bench.RelayReport) {
	us := func(d time.Duration) string { return fmt.Sprintf("%.0fµs", float64(d)/1e3) }
	cpu := func(d time.Duration) string { return fmt.Sprintf("%.1fµs", float64(d)/1e3) }
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/1e6) }
	c := r.Config
	fmt.Fprintf(tw, "relay: %s GET directly, through 'forewarn relay', and through the reference hop (a TCP proxy that copies bytes, no TLS), each a child process; targets: added p50 < %s (sequential), ≤ %d connections to the server for the fan-out\n",
		c.API, us(bench.RelayAddedP50Target), bench.RelayUpstreamTarget)
	fmt.Fprintln(tw, "VMS\tLOAD\tPATH\tBODY\tREQUESTS\tERRORS\tREQ/S\tP50\tP90\tP99\tP99.9\tSERVER CPU/REQ\tRELAY (HOP) CPU/REQ")
	for _, x := range r.Runs {
		loads := []struct {
			name string
			c    *bench.RelayCompare
		}{{"sequential", &x.Sequential}}
		if x.Concurrent != nil {
			loads = append(loads, struct {
				name string
				c    *bench.RelayCompare
			}{fmt.Sprintf("%d conns", c.Conns), x.Concurrent})
		}
		for _, l := range loads {
			for _, p := range []struct {
				name string
				r    bench.RelayPath
			}{{"direct", l.c.Direct}, {"relay", l.c.Relay}, {"hop", l.c.Hop}} {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%d B\t%d\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\n", x.VMs, l.name, p.name, x.BodyBytes, p.r.Requests, p.r.Errors,
					p.r.Throughput, us(p.r.Latency.P50), us(p.r.Latency.P90), us(p.r.Latency.P99), us(p.r.Latency.P999), cpu(p.r.ServerCPU), cpu(p.r.RelayCPU))
			}
		}
	}
	fmt.Fprintln(tw, "\nVMS\tLOAD\tADDED P50\tADDED P99\tHOP ADDED P50\tRELAY ÷ HOP\tRELAY CPU ÷ SERVER CPU (DIRECT)\tSERVER CPU, RELAYED ÷ DIRECT\tMET")
	for _, x := range r.Runs {
		l := x.Sequential
		fmt.Fprintf(tw, "%d\tsequential\t%s\t%s\t%s\t%.2f\t%.2f\t%.2f\t%s\n", x.VMs, us(l.AddedP50), us(l.AddedP99), us(l.HopAddedP50), l.OverHop,
			l.CPURatio, ratio(l.Relay.ServerCPU, l.Direct.ServerCPU), metWord(x.LatencyMet))
		if l := x.Concurrent; l != nil {
			fmt.Fprintf(tw, "%d\t%d conns\t%s\t%s\t%s\t%.2f\t%.2f\t%.2f\t\n", x.VMs, c.Conns, us(l.AddedP50), us(l.AddedP99), us(l.HopAddedP50), l.OverHop,
				l.CPURatio, ratio(l.Relay.ServerCPU, l.Direct.ServerCPU))
		}
	}
	if c.Waiters == 0 {
		return
	}
	fmt.Fprintln(tw, "\nVMS\tWAITERS\tPATH\tDELIVERED\tP50\tP99\tMAX\tFLIP REQUEST\tSERVER CPU\tRELAY CPU\tSERVER B/WAITER\tRELAY B/WAITER\tUPSTREAM CONNS\tDIALS\t×P50\t×P99\tMET")
	for _, x := range r.Runs {
		f := x.Fanout
		if f == nil {
			continue
		}
		fmt.Fprintf(tw, "%d\t%d\tdirect\t%d\t%s\t%s\t%s\t%s\t%s\t\t%.0f\t\t\t\t\t\t\n", x.VMs, f.Waiters, f.Direct.Delivered, ms(f.Direct.Delay.P50), ms(f.Direct.Delay.P99),
			ms(f.Direct.Delay.Max), ms(f.Direct.FlipRequest), ms(f.Direct.ServerCPU), f.ServerBytesPerDirectWaiter)
		fmt.Fprintf(tw, "%d\t%d\trelay\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\t%.0f\t%d h2 (+%d short)\t%d\t%.2f\t%.2f\t%s\n", x.VMs, f.Waiters, f.Relay.Delivered, ms(f.Relay.Delay.P50), ms(f.Relay.Delay.P99),
			ms(f.Relay.Delay.Max), ms(f.Relay.FlipRequest), ms(f.Relay.ServerCPU), ms(f.Relay.RelayCPU), f.ServerBytesPerRelayWaiter, f.RelayBytesPerWaiter,
			f.UpstreamConns, f.ShortConns, f.UpstreamDials, f.P50Ratio, f.P99Ratio, metWord(f.Met))
	}
}

// ratio returns a over b, or 0 when b is 0.
func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

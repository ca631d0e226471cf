package main

import (
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/forewarn/forewarn/bench"
)

// TestBenchRelay runs 'forewarn bench relay' briefly, as a user would,
// on a fleet of 300 GCE VMs on each path and EC2 latency VMs (a token
// through the relay), and checks what its report says, never how fast
// anything is.
func TestBenchRelay(t *testing.T) {
	out, err := exec.Command(binary, "bench", "relay", "--api", "aws", "--sizes", "300", "--requests", "400", "--conns", "4",
		"--duration", "400ms", "--warmup", "100ms", "--rounds", "2", "--waiters", "300", "--settle", "200ms",
		"--addr-base", "127.88.0.1", "--json").Output()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		t.Fatalf("%v: %s", err, ee.Stderr)
	} else if err != nil {
		t.Fatal(err)
	}
	var rep bench.RelayReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if len(rep.Runs) != 1 {
		t.Fatalf("%d runs, want 1:\n%s", len(rep.Runs), out)
	}
	run := rep.Runs[0]
	if run.VMs != 300 || run.BodyBytes == 0 {
		t.Errorf("run of %d VMs, %d-byte answer", run.VMs, run.BodyBytes)
	}
	if run.Concurrent == nil {
		t.Fatal("no concurrent run")
	}
	for _, l := range []struct {
		name string
		c    *bench.RelayCompare
	}{{"sequential", &run.Sequential}, {"concurrent", run.Concurrent}} {
		for _, p := range []struct {
			name string
			r    bench.RelayPath
		}{{"direct", l.c.Direct}, {"relay", l.c.Relay}, {"hop", l.c.Hop}} {
			r := p.r
			if r.Requests == 0 || r.Errors != 0 || r.Throughput <= 0 || r.Latency.P50 <= 0 || r.Latency.P90 < r.Latency.P50 || r.Latency.P99 < r.Latency.P90 {
				t.Errorf("%s %s: %+v", l.name, p.name, r)
			}
		}
		if l.c.AddedP50 != l.c.Relay.Latency.P50-l.c.Direct.Latency.P50 {
			t.Errorf("%s: added p50 %v is not %v less %v", l.name, l.c.AddedP50, l.c.Relay.Latency.P50, l.c.Direct.Latency.P50)
		}
		if l.c.HopAddedP50 != l.c.Hop.Latency.P50-l.c.Direct.Latency.P50 {
			t.Errorf("%s: the hop's added p50 %v is not %v less %v", l.name, l.c.HopAddedP50, l.c.Hop.Latency.P50, l.c.Direct.Latency.P50)
		}
		if l.c.HopAddedP50 > 0 && l.c.OverHop != float64(l.c.AddedP50)/float64(l.c.HopAddedP50) {
			t.Errorf("%s: relay ÷ hop %v is not %v ÷ %v", l.name, l.c.OverHop, l.c.AddedP50, l.c.HopAddedP50)
		}
	}
	if s := run.Sequential; s.Direct.Requests != 400 || s.Relay.Requests != 400 || s.Hop.Requests != 400 {
		t.Errorf("sequential: %d, %d and %d requests, want 400 each", s.Direct.Requests, s.Relay.Requests, s.Hop.Requests)
	}
	// CPU is read in 10 ms ticks: the concurrent relay run is long enough
	// to show some, and the relay does nothing on the direct path.
	if c := run.Concurrent; c.Relay.RelayCPU <= 0 || c.Relay.ServerCPU <= 0 || c.CPURatio <= 0 {
		t.Errorf("concurrent CPU: relay %v and server %v per relayed request, ratio %v", c.Relay.RelayCPU, c.Relay.ServerCPU, c.CPURatio)
	}
	if c := run.Concurrent; c.Hop.RelayCPU <= 0 || c.Hop.ServerCPU <= 0 {
		t.Errorf("concurrent CPU through the hop: hop %v and server %v per request", c.Hop.RelayCPU, c.Hop.ServerCPU)
	}
	if c := run.Concurrent; c.Direct.RelayCPU > c.Relay.RelayCPU/2 {
		t.Errorf("the relay spent %v per direct request, %v per relayed one", c.Direct.RelayCPU, c.Relay.RelayCPU)
	}
	f := run.Fanout
	if f == nil {
		t.Fatal("no fan-out")
	}
	if f.Waiters != 300 || f.Direct.Delivered != 300 || f.Relay.Delivered != 300 || f.Direct.Delay.P50 <= 0 || f.Relay.Delay.P50 <= 0 || f.P99Ratio <= 0 {
		t.Errorf("fan-out: %+v", f)
	}
	if f.UpstreamConns < 1 || f.UpstreamConns > bench.RelayUpstreamTarget || f.UpstreamDials < f.UpstreamConns || !f.Met {
		t.Errorf("fan-out: %d connections to the server, %d dialed, met %v", f.UpstreamConns, f.UpstreamDials, f.Met)
	}

	// The table of the same report.
	var b strings.Builder
	printBench(&b, &rep)
	for _, want := range []string{"relay: aws GET", "sequential  direct", "4 conns     relay", "sequential  hop", "ADDED P50", "RELAY ÷ HOP", "UPSTREAM CONNS", "yes\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

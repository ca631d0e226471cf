package bench_test

import (
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/forewarn/forewarn/bench"
)

// TestHA runs every measurement of the ha mode at a tiny size, on one
// bolt server and three replicas on an etcd the harness starts, and
// checks that the report is whole and consistent, not how fast anything
// is.
func TestHA(t *testing.T) {
	cfg := bench.HAConfig{Writes: 20, Waiters: 10, Kills: 2, LeaderTTL: time.Second, VMs: 4,
		Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond, Rounds: 2, Settle: 200 * time.Millisecond,
		AddrBase: netip.MustParseAddr("127.3.8.1"), Binary: binary}
	rep, err := bench.HA(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	sane := func(what string, l bench.Latency) {
		t.Helper()
		if l.P50 <= 0 || l.P99 < l.P50 || l.Max < l.P99 {
			t.Errorf("%s: %+v", what, l)
		}
	}

	setups := []string{"bolt, one server", "etcd, one replica", "etcd, spread over three replicas"}
	if len(rep.Writes) != 2*len(setups) {
		t.Fatalf("%d write runs, want %d: %+v", len(rep.Writes), 2*len(setups), rep.Writes)
	}
	for i, w := range rep.Writes {
		if w.Setup != setups[i/2] || w.Op != []string{"create", "approve"}[i%2] || w.Writes != cfg.Writes {
			t.Errorf("write run %d: %+v", i, w)
		}
		sane(w.Setup+" "+w.Op, w.Latency)
	}

	if len(rep.Get) != 2 {
		t.Fatalf("%d GET runs, want 2", len(rep.Get))
	}
	for i, g := range rep.Get {
		p := g.Report
		if !strings.HasPrefix(g.Setup, []string{"bolt", "etcd"}[i]) || p.Forewarn.Requests == 0 || p.Ceiling.Requests == 0 ||
			p.Forewarn.Errors+p.Ceiling.Errors != 0 || p.Ratio <= 0 || p.Forewarn.ServerCPU <= 0 {
			t.Errorf("GET %s: %+v %+v ratio %v", g.Setup, p.Forewarn, p.Ceiling, p.Ratio)
		}
	}

	if len(rep.Propagation) != 4 {
		t.Fatalf("%d propagation runs, want 4", len(rep.Propagation))
	}
	for _, p := range rep.Propagation {
		if p.Waiters != cfg.Waiters || p.Delivered != cfg.Waiters || p.CreateRequest <= 0 || p.BeforeAck < 0 || p.BeforeAck > p.Waiters {
			t.Errorf("propagation %s: %+v", p.Setup, p)
		}
		sane(p.Setup+" from the request", p.FromRequest)
		// From the acknowledgement, a wake-up may come first: negative.
		if p.FromAck.Max < p.FromAck.P50 || p.FromRequest.Max-p.FromAck.Max != p.CreateRequest {
			t.Errorf("propagation %s: from the ack %+v, from the request %+v, create %v", p.Setup, p.FromAck, p.FromRequest, p.CreateRequest)
		}
	}

	f := rep.Failover
	if f == nil || f.Kills != cfg.Kills || len(f.Runs) != cfg.Kills || f.LeaderTTL != cfg.LeaderTTL {
		t.Fatalf("failover: %+v", f)
	}
	for i, k := range f.Runs {
		if k.Killed == "" || k.Leader == "" || k.Leader == k.Killed || k.Elected <= 0 || k.Reported < k.Elected || k.Deadline <= 0 || k.Late < 0 {
			t.Errorf("kill %d: %+v", i+1, k)
		}
	}
	for what, l := range map[string]bench.Latency{"leader": f.Leader, "elected": f.Elected, "deadline": f.Deadline, "rejoin": f.Rejoin} {
		sane("failover "+what, l)
	}
}

// TestHACommand runs 'forewarn bench ha' with only the write measurement,
// as a user would, and reads its table.
func TestHACommand(t *testing.T) {
	out, err := exec.Command(binary, "bench", "ha", "--writes", "3", "--waiters", "0", "--kills", "0", "--duration", "0",
		"--addr-base", "127.3.9.1").CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"OPERATOR WRITES", "bolt, one server", "etcd, one replica", "etcd, spread over three replicas", "approve"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "FAILOVER") || strings.Contains(string(out), "PROPAGATION") {
		t.Errorf("skipped measurements are in the table:\n%s", out)
	}
}

package bench_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/forewarn/forewarn/bench"
)

// TestSession runs the session mode on small fleets and checks that
// every step was taken and the report is whole and consistent: the
// hosts, steps and events, positive times in order, the reference, the
// memory figures, and the met flags as the numbers say. It does not
// hold the targets: performance is measured, not timed in tests.
func TestSession(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  bench.SessionConfig
		// hosts and steps per size; advances is how many steps must
		// have one.
		hosts, steps []int
		advances     []int
	}{
		// Every host of 4 and of 10, on bolt, one at a time: each Done
		// starts the next host, and the last one ends the session.
		{"bolt, every host", bench.SessionConfig{Sizes: []int{400, 1000}, SetSize: 10, References: 2},
			[]int{4, 10}, []int{4, 10}, []int{4, 10}},
		// Two hosts at once, whose sets' budget holds back the hosts of
		// the block under way; VMs approve their own events.
		{"mem, approvals, two hosts", bench.SessionConfig{Sizes: []int{600}, VMsPerHost: 20, SetSize: 10, MaxHosts: 2, Steps: 12, References: 2, Store: "mem", Approve: true},
			[]int{30}, []int{12}, []int{12}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep, err := bench.Session(t.Context(), c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Target != bench.StepTarget || len(rep.Runs) != len(c.cfg.Sizes) {
				t.Fatalf("report: %+v", rep)
			}
			vph := rep.Config.VMsPerHost
			for i, r := range rep.Runs {
				if r.VMs != c.cfg.Sizes[i] || r.Hosts != c.hosts[i] || r.Steps != c.steps[i] {
					t.Errorf("%d VMs: %d hosts, %d steps; want %d, %d", r.VMs, r.Hosts, r.Steps, c.hosts[i], c.steps[i])
				}
				// Every VM of a host is in a scope group of its own (its
				// set has one VM a host): an event each.
				if r.Events != r.Steps*vph || r.Reference.Events != vph || r.Reference.Rounds != 2 {
					t.Errorf("%d VMs: %d events over %d steps, %d a reference round", r.VMs, r.Events, r.Steps, r.Reference.Events)
				}
				if r.Create <= 0 || r.Plan <= 0 {
					t.Errorf("%d VMs: create %v, plan %v", r.VMs, r.Create, r.Plan)
				}
				ref := r.Reference
				for what, l := range map[string]bench.Latency{"ready": r.Ready, "done": r.Done, "advance": r.Advance,
					"reference create": ref.Create, "reference start": ref.Start, "reference complete": ref.Complete} {
					if l.P50 <= 0 || l.P99 < l.P50 || l.Max < l.P99 {
						t.Errorf("%d VMs: %s: %+v", r.VMs, what, l)
					}
				}
				if r.AllocsPerStep <= 0 || r.BytesPerStep <= 0 || ref.AllocsPerRound <= 0 || ref.BytesPerRound <= 0 || ref.BytesPerEvent <= 0 ||
					r.AdvanceRatio <= 0 || r.ReadyRatio <= 0 {
					t.Errorf("%d VMs: allocations or ratios: %+v", r.VMs, r)
				}
				m := r.Memory
				if m.FromStep != min(10, r.Steps/2) || m.ToStep != r.Steps || m.HeapFrom <= 0 || m.HeapTo <= 0 ||
					m.RecordFrom <= 0 || m.RecordTo <= 0 || m.CloneFrom <= 0 || m.CloneTo <= 0 ||
					m.EventsPerStep != float64(vph) || m.BeyondEvents != m.PerStep-m.EventBytesPerStep {
					t.Errorf("%d VMs: memory: %+v", r.VMs, m)
				}
				if onBolt := rep.Config.Store == "bolt"; onBolt != (m.FileFrom > 0 && m.FileTo >= m.FileFrom) {
					t.Errorf("%d VMs on %s: file %d → %d bytes", r.VMs, rep.Config.Store, m.FileFrom, m.FileTo)
				}
				if r.Advances != c.advances[i] {
					t.Errorf("%d VMs: %d advances, want %d", r.VMs, r.Advances, c.advances[i])
				}
				if r.StepMet != (r.Plan <= bench.StepTarget && r.Advance.Max <= bench.StepTarget && r.Advances == r.Steps) || r.MemoryMet != (m.BeyondEvents <= ref.BytesPerEvent) {
					t.Errorf("%d VMs: met %v and %v: %+v", r.VMs, r.StepMet, r.MemoryMet, r)
				}
			}
		})
	}
}

// TestSessionCommand runs 'forewarn bench session' as a user would, in
// both output forms, and with flags it must refuse.
func TestSessionCommand(t *testing.T) {
	out, err := exec.Command(binary, "bench", "session", "--sizes", "200", "--references", "1").CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"maintenance session on bolt", "ADVANCE P50", "REFERENCE, ONE HOST'S VMS", "BEYOND EVENTS/STEP", "200 VMs, 1 rounds"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	out, err = exec.Command(binary, "bench", "session", "--sizes", "300", "--vms-per-host", "50", "--store", "mem", "--steps", "3", "--references", "1", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.SessionReport
	if err := json.Unmarshal(out, &rep); err != nil || len(rep.Runs) != 1 || rep.Runs[0].Hosts != 6 || rep.Runs[0].Steps != 3 || rep.Config.Store != "mem" {
		t.Fatalf("--json: %v %s", err, out)
	}
	for _, args := range [][]string{{"--sizes", "150"}, {"--store", "etcd"}, {"--sizes", "x"}} {
		if out, err := exec.Command(binary, append([]string{"bench", "session"}, args...)...).CombinedOutput(); err == nil {
			t.Errorf("%v succeeded:\n%s", args, out)
		}
	}
}

package bench_test

import (
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/bench"
)

// TestWideEventIsLinear holds one event naming a whole fleet to a cost
// linear in the fleet: the bytes each of create, start, complete and
// restart allocates per VM may not grow with the fleet. It counts bytes,
// not time, so the machine's speed does not matter; a cost quadratic in
// the VMs (every VM's document holding its own copy of the event, every
// VM's view built from every peer's events) grows them eightfold here.
func TestWideEventIsLinear(t *testing.T) {
	const small, large = 250, 2000
	for _, c := range []struct {
		name string
		cfg  bench.WideConfig
	}{
		{"azure standalone", bench.WideConfig{Provider: forewarn.Azure}},
		{"azure one availability set", bench.WideConfig{Provider: forewarn.Azure, SetSize: -1}},
		{"azure sets of 100", bench.WideConfig{Provider: forewarn.Azure, SetSize: 100}},
		{"gce", bench.WideConfig{Provider: forewarn.GCE}},
		{"aws", bench.WideConfig{Provider: forewarn.AWS}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Sizes = []int{small, large}
			rep, err := bench.Wide(t.Context(), c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			a, b := rep.Runs[0], rep.Runs[1]
			// One request makes an event per scope group, and each VM's
			// document names its own group only: under 1 KB but where
			// one availability set holds the whole fleet.
			groups := map[string]int{"azure standalone": large, "azure one availability set": 1, "azure sets of 100": large / 100, "gce": large, "aws": large}[c.name]
			if b.Events != groups {
				t.Errorf("%d events at %d VMs, want %d", b.Events, large, groups)
			}
			if c.cfg.SetSize != -1 && (b.DocBytes <= 0 || b.DocBytes >= 1024 && c.cfg.SetSize == 0) {
				t.Errorf("the last VM's largest document is %d bytes at %d VMs, want 1..1023", b.DocBytes, large)
			}
			t.Logf("%d events; the last VM's largest document %d B at %d VMs, %d B at %d", b.Events, a.DocBytes, small, b.DocBytes, large)
			for i, phase := range []string{"create", "start", "complete", "restart"} {
				per := func(r bench.WideRun) float64 { return float64(r.Alloc[i]) / float64(r.VMs) }
				t.Logf("%s: %.0f B per VM at %d VMs, %.0f at %d", phase, per(a), small, per(b), large)
				if per(b) > 2*per(a) || per(a) <= 0 {
					t.Errorf("%s allocates %.0f B per VM at %d VMs and %.0f at %d: not linear", phase, per(a), small, per(b), large)
				}
			}
			// The history's rings are fixed: the same bytes per VM at
			// every size (within 50 %), under 4,000 once each VM has
			// called (64 slots of 32 B, the ring and its counts, 360 B,
			// its cached writer, its place in the name index).
			if a.HistoryPerVM <= 0 || b.HistoryPerVM > 4000 || b.HistoryPerVM > 1.5*a.HistoryPerVM {
				t.Errorf("history: %.0f B per VM at %d VMs, %.0f at %d", a.HistoryPerVM, small, b.HistoryPerVM, large)
			}
			if a.Create <= 0 || b.Restart <= 0 || b.BaseRSS <= 0 {
				t.Errorf("report: %+v", rep)
			}
		})
	}
}

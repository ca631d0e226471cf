package bench_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/forewarn/forewarn/bench"
)

// TestFleet runs the fleet mode at two small sizes: every figure is
// measured, the growth is the ratio of the two sizes' figures, and the
// targets are judged on the growth alone below 100,000 VMs.
func TestFleet(t *testing.T) {
	rep, err := bench.Fleet(t.Context(), bench.FleetConfig{APIs: []string{"azure", "aws"}, Sizes: []int{100, 400}, Runs: 2,
		Settle: 100 * time.Millisecond, AddrBase: netip.MustParseAddr("127.3.40.1"), Binary: binary})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 4 {
		t.Fatalf("%d runs, want 4: %+v", len(rep.Runs), rep.Runs)
	}
	for i, r := range rep.Runs {
		wantAPI, wantVMs := []string{"azure", "aws"}[i/2], []int{100, 400}[i%2]
		if r.API != wantAPI || r.VMs != wantVMs || r.Start <= 0 || r.Restart <= 0 || r.IdleRSS <= 0 || r.Event <= 0 || r.EventRSS <= 0 {
			t.Errorf("run %d: %+v, want %s at %d VMs with every figure measured", i, r, wantAPI, wantVMs)
			continue
		}
		if i%2 == 0 {
			if r.Growth != [5]float64{} || !r.Met {
				t.Errorf("run %d, the first size: growth %v, met %v; want none, and met", i, r.Growth, r.Met)
			}
			continue
		}
		prev := rep.Runs[i-1]
		want := [5]float64{float64(r.Start) / float64(prev.Start), float64(r.Restart) / float64(prev.Restart), float64(r.IdleRSS) / float64(prev.IdleRSS),
			float64(r.Event) / float64(prev.Event), float64(r.EventRSS) / float64(prev.EventRSS)}
		if r.Growth != want {
			t.Errorf("run %d: growth %v, want %v", i, r.Growth, want)
		}
		met := true
		for _, g := range want {
			met = met && g <= bench.FleetGrowthTarget*4/10
		}
		if r.Met != met {
			t.Errorf("run %d: met %v, want %v for growth %v", i, r.Met, met, want)
		}
	}
}

package bench_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/forewarn/forewarn/bench"
)

// TestInventory runs the inventory mode at 1,000 VMs and checks that
// every step did what it should and the report is whole: the counts
// each apply's answer lists, the VMs each export holds, positive times
// and memory, and the met flags as the numbers and targets say. It does
// not hold the targets themselves: performance is measured, not timed
// in tests.
func TestInventory(t *testing.T) {
	const n, puts = 1000, 20
	rep, err := bench.Inventory(t.Context(), bench.InventoryConfig{Sizes: []int{n}, SetSize: 100, PUTs: puts, Timeout: time.Minute, Binary: binary})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Targets.Apply != bench.ApplyTarget || rep.Targets.RSSGrowth != bench.RSSTarget || rep.Targets.PUTP99 != bench.PUTTarget || len(rep.Runs) != 1 {
		t.Fatalf("report: %+v", rep)
	}
	r := rep.Runs[0]
	const seeds = 4
	for _, c := range []struct {
		step                    string
		s                       bench.ApplyStep
		added, changed, removed int
		vms                     int
	}{
		{"apply", r.Apply, n, 0, 0, n + seeds},
		{"change", r.Change, 0, n / 100, 0, n + seeds},
		{"prune", r.Prune, 0, 0, n / 2, n/2 + seeds + puts/2},
	} {
		s := c.s
		if s.Added != c.added || s.Changed != c.changed || s.Removed != c.removed || s.ExportVMs != c.vms {
			t.Errorf("%s: %d added, %d changed, %d removed, %d VMs exported; want %d, %d, %d, %d",
				c.step, s.Added, s.Changed, s.Removed, s.ExportVMs, c.added, c.changed, c.removed, c.vms)
		}
		if s.DocBytes <= 0 || s.Time <= 0 || s.ServerCPU < 0 || s.DryRun <= 0 || s.Export <= 0 || s.RSSBefore <= 0 || s.RSSAfter <= 0 || s.RSSPeak < s.RSSAfter {
			t.Errorf("%s: %+v", c.step, s)
		}
		if s.Met != (s.Time <= bench.ApplyTarget) {
			t.Errorf("%s: met %v at %v", c.step, s.Met, s.Time)
		}
	}
	p := r.PUT
	if p.PUTs != puts || p.Created != puts/2 || p.RSSPeak < p.RSSAfter || p.RSSBefore <= 0 || p.ServerCPU < 0 {
		t.Errorf("PUT: %+v", p)
	}
	for what, l := range map[string]bench.Latency{"PUT": p.Latency, "reference": p.Reference} {
		if l.P50 <= 0 || l.P99 < l.P50 || l.Max < l.P99 {
			t.Errorf("%s latency: %+v", what, l)
		}
	}
	if p.Met != (p.Latency.P99 <= bench.PUTTarget) {
		t.Errorf("PUT: met %v at p99 %v", p.Met, p.Latency.P99)
	}
	if r.RSSStart <= 0 || r.ApplyGrowth <= 0 || r.PeakGrowth < r.ApplyGrowth || r.RSSMet != (r.ApplyGrowth <= bench.RSSTarget) {
		t.Errorf("memory: start %d, growth for the apply %d, peak growth %d, met %v", r.RSSStart, r.ApplyGrowth, r.PeakGrowth, r.RSSMet)
	}
}

// TestInventoryCommand runs 'forewarn bench inventory' as a user would,
// and reads its table, and its JSON with CPU profiles.
func TestInventoryCommand(t *testing.T) {
	out, err := exec.Command(binary, "bench", "inventory", "--sizes", "100,200", "--puts", "4").CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"inventory on bolt", "1% changed", "prune half", "DRY RUN", "GET /healthz", "PEAK GROWTH"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	dir := t.TempDir()
	out, err = exec.Command(binary, "bench", "inventory", "--sizes", "100", "--puts", "2", "--set-size", "0", "--json",
		"--cpu-profile", dir, "--profile-for", "1s").Output()
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.InventoryReport
	if err := json.Unmarshal(out, &rep); err != nil || len(rep.Runs) != 1 || rep.Runs[0].VMs != 100 || rep.Runs[0].Prune.Removed != 50 {
		t.Fatalf("--json: %v %s", err, out)
	}
	for _, step := range []string{"apply", "change", "prune", "put"} {
		if fi, err := os.Stat(filepath.Join(dir, step+"-100.pprof")); err != nil || fi.Size() == 0 {
			t.Errorf("profile of %s: %v", step, err)
		}
	}
	if out, err := exec.Command(binary, "bench", "inventory", "--sizes", "1").CombinedOutput(); err == nil {
		t.Errorf("a fleet of 1 VM was measured:\n%s", out)
	}
}

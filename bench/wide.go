package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/azure"
	"github.com/forewarn/forewarn/bolt"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/gce"
)

// WideConfig configures a fleet-wide event run: for each size N, an
// N-VM fleet and one event that names every VM.
type WideConfig struct {
	Sizes []int `json:"sizes"`
	// SetSize puts the VMs in availability sets (Azure) of this many VMs
	// each, so every VM also sees the event through its set; 0 leaves
	// them standalone, and a SetSize of N puts the whole fleet in one set.
	SetSize int `json:"setSize"`
	// Provider is forewarn.Azure (a Freeze) or forewarn.GCE (a
	// MIGRATE_ON_HOST_MAINTENANCE).
	Provider forewarn.Provider `json:"provider"`
}

// WideRun is the measurement of one fleet size.
type WideRun struct {
	VMs int `json:"vms"`
	// Create, Start and Complete are the operator calls on the event,
	// each from the call until the store has it and every VM's document
	// is rendered anew. Restart opens the store and starts the engine and
	// the renderers with the event Scheduled.
	Create   time.Duration `json:"create"`
	Start    time.Duration `json:"start"`
	Complete time.Duration `json:"complete"`
	Restart  time.Duration `json:"restart"`
	// BaseRSS is the process's resident memory with the fleet served and
	// no event; PeakExtra is the highest resident memory above it while
	// the event lived (the kernel's high-water mark), and HeapExtra the
	// live heap above the baseline with the event Scheduled.
	BaseRSS   int64 `json:"baseRSS"`
	PeakExtra int64 `json:"peakExtra"`
	HeapExtra int64 `json:"heapExtra"`
}

// WideReport is the result of a fleet-wide event run.
type WideReport struct {
	Config WideConfig `json:"config"`
	Runs   []WideRun  `json:"runs"`
	// Growth is the ratio of each time from the second-largest size to
	// the largest (10k to 100k in the documented run).
	Growth map[string]float64 `json:"growth,omitempty"`
}

// Wide measures one event naming a whole fleet, for each size in turn, on
// the real store (bbolt, in a temporary directory) with the Azure and GCE
// renderers subscribed.
func Wide(ctx context.Context, cfg WideConfig) (*WideReport, error) {
	if len(cfg.Sizes) == 0 {
		return nil, fmt.Errorf("no fleet sizes")
	}
	if cfg.Provider == "" {
		cfg.Provider = forewarn.Azure
	}
	if cfg.Provider != forewarn.Azure && cfg.Provider != forewarn.GCE {
		return nil, fmt.Errorf("provider %q is not azure or gce", cfg.Provider)
	}
	rep := &WideReport{Config: cfg}
	for _, n := range cfg.Sizes {
		if n < 1 {
			return nil, fmt.Errorf("fleet size %d is below 1", n)
		}
		r, err := wideRun(ctx, cfg, n)
		if err != nil {
			return nil, fmt.Errorf("%d VMs: %w", n, err)
		}
		rep.Runs = append(rep.Runs, *r)
	}
	if k := len(rep.Runs); k >= 2 {
		a, b := rep.Runs[k-2], rep.Runs[k-1]
		ratio := func(x, y time.Duration) float64 { return float64(y) / float64(max(x, 1)) }
		rep.Growth = map[string]float64{
			"create": ratio(a.Create, b.Create), "start": ratio(a.Start, b.Start),
			"complete": ratio(a.Complete, b.Complete), "restart": ratio(a.Restart, b.Restart),
		}
	}
	return rep, nil
}

// wideFleet returns n VMs of provider p, in sets of setSize (Azure).
func wideFleet(n, setSize int, p forewarn.Provider) *forewarn.Fleet {
	f := &forewarn.Fleet{VMs: make([]*forewarn.VM, n)}
	for i := range f.VMs {
		vm := &forewarn.VM{Name: fmt.Sprintf("vm%06d", i), Provider: p}
		if p == forewarn.GCE {
			vm.Zone, vm.Project, vm.MachineType = "us-central1-a", "bench", "n2-standard-2"
		} else if setSize > 0 {
			vm.AvailabilitySet = fmt.Sprintf("set%d", i/setSize)
		}
		f.VMs[i] = vm
	}
	return f
}

// served is an engine with both renderers, on a bbolt store.
type served struct {
	store *bolt.Store
	eng   *engine.Engine
}

func serve(ctx context.Context, path string, f *forewarn.Fleet) (*served, error) {
	st, err := bolt.Open(path)
	if err != nil {
		return nil, err
	}
	eng, err := engine.New(ctx, engine.Config{Store: st, Fleet: f, AllowShortNotice: true})
	if err != nil {
		st.Close()
		return nil, err
	}
	azure.NewServer(eng, nil)
	gce.NewServer(eng, nil)
	return &served{store: st, eng: eng}, nil
}

func (s *served) close() {
	s.eng.Close()
	s.store.Close()
}

func wideRun(ctx context.Context, cfg WideConfig, n int) (*WideRun, error) {
	dir, err := os.MkdirTemp("", "forewarn-bench-wide")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "forewarn.db")
	f := wideFleet(n, cfg.SetSize, cfg.Provider)
	s, err := serve(ctx, path, f)
	if err != nil {
		return nil, err
	}
	defer func() { s.close() }()

	r := &WideRun{VMs: n}
	heap0 := inUse()
	debug.FreeOSMemory()
	r.BaseRSS = procStatus("VmRSS")
	resetPeak()

	spec := engine.Spec{Type: forewarn.Freeze, Source: forewarn.User, Notice: time.Hour, Lasts: time.Hour,
		VMs: make([]string, n)}
	if cfg.Provider == forewarn.GCE {
		spec.Type, spec.Source = forewarn.MigrateOnHostMaintenance, ""
	}
	for i, vm := range f.VMs {
		spec.VMs[i] = vm.Name
	}
	t := time.Now()
	ev, err := s.eng.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	r.Create = time.Since(t)
	spec.VMs = nil
	if v := s.eng.View(f.VMs[n-1].Name); len(v.Events) != 1 {
		return nil, fmt.Errorf("the last VM sees %d events, want 1", len(v.Events))
	}
	r.HeapExtra = inUse() - heap0

	s.close()
	t = time.Now()
	if s, err = serve(ctx, path, f); err != nil {
		return nil, err
	}
	r.Restart = time.Since(t)

	t = time.Now()
	if err := s.eng.Start(ctx, ev.ID); err != nil {
		return nil, err
	}
	r.Start = time.Since(t)
	t = time.Now()
	if err := s.eng.Complete(ctx, ev.ID); err != nil {
		return nil, err
	}
	r.Complete = time.Since(t)
	if v := s.eng.View(f.VMs[0].Name); len(v.Events) != 0 {
		return nil, fmt.Errorf("the first VM still sees %d events", len(v.Events))
	}
	r.PeakExtra = procStatus("VmHWM") - r.BaseRSS
	runtime.KeepAlive(f)
	return r, nil
}

// procStatus returns a memory figure of /proc/self/status in bytes, or 0
// where there is no /proc.
func procStatus(key string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// resetPeak resets the kernel's resident high-water mark (VmHWM) to the
// current resident size.
func resetPeak() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/aws"
	"github.com/forewarn/forewarn/azure"
	"github.com/forewarn/forewarn/bolt"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/gce"
	"github.com/forewarn/forewarn/history"
)

// WideConfig configures a fleet-wide event run: for each size N, an
// N-VM fleet and one event that names every VM.
type WideConfig struct {
	Sizes []int `json:"sizes"`
	// SetSize puts the VMs in availability sets (Azure) of this many VMs
	// each, so every VM also sees the event through its set; 0 leaves
	// them standalone, and -1 puts the whole fleet in one set.
	SetSize int `json:"setSize"`
	// Provider is forewarn.Azure (a Freeze), forewarn.GCE (a
	// MIGRATE_ON_HOST_MAINTENANCE) or forewarn.AWS (an EC2
	// system-maintenance).
	Provider forewarn.Provider `json:"provider"`
}

// WideRun is the measurement of one fleet size.
type WideRun struct {
	VMs int `json:"vms"`
	// Events is how many events the one request naming every VM made:
	// one per scope group (engine.CreateAll).
	Events int `json:"events"`
	// DocBytes is the largest document the last VM is served with its
	// event Scheduled, over the three APIs' paths.
	DocBytes int `json:"docBytes"`
	// Create, Start and Complete are the operator calls on the events
	// (CreateAll, StartAll, CompleteAll), each from the call until the
	// store has them and every VM's document is rendered anew. Restart opens the store and starts the engine and
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
	// HistoryPerVM is the live heap, in bytes per VM, of the per-VM
	// request history the server keeps for GET /v1/vms/{name}: every
	// ring full, with distinct paths and approvals recorded.
	HistoryPerVM float64 `json:"historyPerVM"`
	// Alloc is the bytes allocated by each of create, start, complete
	// and restart, in that order: a figure that does not depend on the
	// machine's speed, so a test can hold it linear.
	Alloc [4]int64 `json:"alloc"`
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
// the real store (bbolt, in a temporary directory) with the Azure, GCE and
// EC2 renderers subscribed.
func Wide(ctx context.Context, cfg WideConfig) (*WideReport, error) {
	if len(cfg.Sizes) == 0 {
		return nil, fmt.Errorf("no fleet sizes")
	}
	if cfg.Provider == "" {
		cfg.Provider = forewarn.Azure
	}
	if cfg.Provider != forewarn.Azure && cfg.Provider != forewarn.GCE && cfg.Provider != forewarn.AWS {
		return nil, fmt.Errorf("provider %q is not azure, gce or aws", cfg.Provider)
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
// EC2 VMs get the keys a fleet file's defaults give them.
func wideFleet(n, setSize int, p forewarn.Provider) *forewarn.Fleet {
	f := &forewarn.Fleet{VMs: make([]*forewarn.VM, n)}
	for i := range f.VMs {
		vm := &forewarn.VM{Name: fmt.Sprintf("vm%06d", i), Provider: p}
		if p == forewarn.GCE {
			vm.Zone, vm.Project, vm.MachineType = "us-central1-a", "bench", "n2-standard-2"
		} else if p == forewarn.AWS {
			vm.InstanceID = fmt.Sprintf("i-%017x", i)
			vm.Zone, vm.MachineType, vm.HTTPTokens, vm.HopLimit = "us-east-1a", "m5.large", "optional", 1
		} else if setSize > 0 {
			vm.AvailabilitySet = fmt.Sprintf("set%d", i/setSize)
		} else if setSize < 0 {
			vm.AvailabilitySet = "all"
		}
		f.VMs[i] = vm
	}
	return f
}

// served is an engine with the three renderers, on a bbolt store.
type served struct {
	store *bolt.Store
	eng   *engine.Engine
	docs  [3]admin.Renderer
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
	return &served{store: st, eng: eng,
		docs: [3]admin.Renderer{azure.NewServer(eng, nil), gce.NewServer(eng, nil), aws.NewServer(eng, nil)}}, nil
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
	r.HistoryPerVM = historyPerVM(f)
	heap0 := inUse()
	r.BaseRSS = baseline()

	spec := engine.Spec{Type: forewarn.Freeze, Source: forewarn.User, Notice: time.Hour, Lasts: time.Hour,
		VMs: make([]string, n)}
	switch cfg.Provider {
	case forewarn.GCE:
		spec.Type, spec.Source = forewarn.MigrateOnHostMaintenance, ""
	case forewarn.AWS:
		spec.Type, spec.Source = forewarn.SystemMaintenance, ""
	}
	for i, vm := range f.VMs {
		spec.VMs[i] = vm.Name
	}
	// One request naming every VM: one event per scope group.
	var evs []*forewarn.Event
	r.Create, r.Alloc[0], err = timed(func() (err error) {
		evs, err = s.eng.CreateAll(ctx, spec)
		return err
	})
	if err != nil {
		return nil, err
	}
	spec.VMs = nil
	ids := make([]string, len(evs))
	for i, ev := range evs {
		ids[i] = ev.ID
	}
	r.Events = len(evs)
	evs = nil
	if v := s.eng.View(f.VMs[n-1].Name); len(v.Events) != 1 {
		return nil, fmt.Errorf("the last VM sees %d events, want 1", len(v.Events))
	}
	for _, d := range s.docs {
		for _, doc := range d.Documents(f.VMs[n-1].Name) {
			r.DocBytes = max(r.DocBytes, len(doc))
		}
	}
	r.HeapExtra = inUse() - heap0
	r.PeakExtra = procStatus("VmHWM") - r.BaseRSS

	// The restart builds a second engine beside the first one's garbage,
	// which a real restart, a new process, does not have: its memory is
	// not counted.
	s.close()
	r.Restart, r.Alloc[3], err = timed(func() (err error) {
		s, err = serve(ctx, path, f)
		return err
	})
	if err != nil {
		return nil, err
	}
	base := baseline()
	r.Start, r.Alloc[1], err = timed(func() error { return s.eng.StartAll(ctx, ids) })
	if err != nil {
		return nil, err
	}
	r.Complete, r.Alloc[2], err = timed(func() error { return s.eng.CompleteAll(ctx, ids) })
	if err != nil {
		return nil, err
	}
	if v := s.eng.View(f.VMs[0].Name); len(v.Events) != 0 {
		return nil, fmt.Errorf("the first VM still sees %d events", len(v.Events))
	}
	r.PeakExtra = max(r.PeakExtra, procStatus("VmHWM")-base)
	runtime.KeepAlive(f)
	return r, nil
}

// historyPerVM builds the per-VM request history of f, fills every
// VM's ring, and returns the bytes that allocated per VM, every one of
// which the history keeps (counted as allocated bytes, not as the live
// heap, which the collector's timing makes noisy at small fleets).
func historyPerVM(f *forewarn.Fleet) float64 {
	names := make([]string, len(f.VMs))
	for i, vm := range f.VMs {
		names[i] = vm.Name
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.TotalAlloc
	h := history.New(names, history.DefaultSize)
	w := discard{}
	for _, name := range names {
		for i := range history.DefaultSize {
			hw := h.Start(w, name)
			if i == 0 {
				history.NoteApproved(hw, []string{"01234567-89ab-cdef-0123-456789abcdef"})
			}
			h.Done(hw, history.Azure, "GET", "/metadata/scheduledevents", "2020-07-01")
		}
	}
	runtime.ReadMemStats(&ms)
	per := float64(ms.TotalAlloc-before) / float64(len(names))
	runtime.KeepAlive(h)
	return per
}

// discard is an http.ResponseWriter that keeps nothing.
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

// timed runs f and returns how long it took and how many bytes it
// allocated.
func timed(f func() error) (time.Duration, int64, error) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	a := ms.TotalAlloc
	t := time.Now()
	err := f()
	d := time.Since(t)
	runtime.ReadMemStats(&ms)
	return d, int64(ms.TotalAlloc - a), err
}

// baseline returns memory to the kernel, resets the resident high-water
// mark and returns the resident size.
func baseline() int64 {
	debug.FreeOSMemory()
	resetPeak()
	return procStatus("VmRSS")
}

// procStatus returns the memory figure key of this process in bytes, or
// 0 where there is no /proc.
func procStatus(key string) int64 {
	n, _ := procMemory(os.Getpid(), key)
	return n
}

// resetPeak resets the kernel's resident high-water mark (VmHWM) to the
// current resident size.
func resetPeak() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

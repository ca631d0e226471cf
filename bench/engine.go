package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

// EngineConfig configures an engine-scale run. The engine runs in this
// process on the in-memory store, so what is measured is the engine.
type EngineConfig struct {
	VMs    int `json:"vms"`
	Events int `json:"events"`
	// Fire is how many deadlines fire together in each firing measurement.
	Fire int `json:"fire"`
	// SmallPending is the pending count of the baseline firing measurement.
	SmallPending int `json:"smallPending"`
}

// EngineReport is the result of an engine-scale run.
type EngineReport struct {
	Config     EngineConfig  `json:"config"`
	CreateTime time.Duration `json:"createTime"`
	PerCreate  time.Duration `json:"perCreate"`
	// MemoryBytes is the heap and stacks in use for the VMs and events,
	// after a garbage collection.
	MemoryBytes int64 `json:"memoryBytes"`
	// PerFireSmall and PerFireLarge are the time per fired deadline with
	// SmallPending and with Events pending; Growth is their ratio.
	PerFireSmall time.Duration `json:"perFireSmall"`
	PerFireLarge time.Duration `json:"perFireLarge"`
	Growth       float64       `json:"growth"`
}

func inUse() int64 {
	for range 2 {
		runtime.GC()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse + ms.StackInuse)
}

// Engine creates VMs and pending events, measures their memory and
// creation time, then measures the time per fired deadline with many and
// with few events pending.
func Engine(ctx context.Context, cfg EngineConfig) (*EngineReport, error) {
	cfg.VMs, cfg.Events = max(cfg.VMs, 1), max(cfg.Events, 1)
	cfg.Fire = max(cfg.Fire, 1)
	if cfg.SmallPending == 0 {
		cfg.SmallPending = 1000
	}
	rep := &EngineReport{Config: cfg}
	base := inUse()
	e, fired, err := newScaleEngine(ctx, cfg.VMs)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := pending(ctx, e, cfg.VMs, cfg.Events); err != nil {
		return nil, err
	}
	rep.CreateTime = time.Since(start)
	rep.PerCreate = rep.CreateTime / time.Duration(cfg.Events)
	rep.MemoryBytes = inUse() - base
	if rep.PerFireLarge, err = fireBatch(ctx, e, fired, cfg.VMs, cfg.Fire); err != nil {
		return nil, err
	}
	e.Close()

	small, firedSmall, err := newScaleEngine(ctx, cfg.VMs)
	if err != nil {
		return nil, err
	}
	defer small.Close()
	if err := pending(ctx, small, cfg.VMs, cfg.SmallPending); err != nil {
		return nil, err
	}
	if rep.PerFireSmall, err = fireBatch(ctx, small, firedSmall, cfg.VMs, cfg.Fire); err != nil {
		return nil, err
	}
	rep.Growth = float64(rep.PerFireLarge) / float64(rep.PerFireSmall)
	return rep, nil
}

// newScaleEngine returns an engine over n standalone VMs and a counter of
// the views it publishes.
func newScaleEngine(ctx context.Context, n int) (*engine.Engine, *atomic.Int64, error) {
	f := &forewarn.Fleet{VMs: make([]*forewarn.VM, n)}
	for i := range f.VMs {
		f.VMs[i] = &forewarn.VM{Name: fmt.Sprintf("vm%d", i), Provider: forewarn.Azure}
	}
	e, err := engine.New(ctx, engine.Config{Store: mem.New(), Fleet: f, AllowShortNotice: true})
	if err != nil {
		return nil, nil, err
	}
	fired := new(atomic.Int64)
	e.Subscribe(func(*engine.View) { fired.Add(1) })
	return e, fired, nil
}

// pending creates n far-future events spread over the VMs.
func pending(ctx context.Context, e *engine.Engine, vms, n int) error {
	for i := range n {
		_, err := e.Create(ctx, engine.Spec{Type: forewarn.Freeze, VMs: []string{fmt.Sprintf("vm%d", i%vms)},
			Source: forewarn.User, Notice: 24*time.Hour + time.Duration(i)*time.Second, Lasts: time.Minute})
		if err != nil {
			return err
		}
	}
	return nil
}

// fireBatch creates k events due at the same whole second and returns the
// time per fired deadline: from that second until all k have started.
func fireBatch(ctx context.Context, e *engine.Engine, fired *atomic.Int64, vms, k int) (time.Duration, error) {
	at := time.Now().Truncate(time.Second).Add(3 * time.Second)
	for i := range k {
		_, err := e.Create(ctx, engine.Spec{Type: forewarn.Freeze, VMs: []string{fmt.Sprintf("vm%d", i%vms)},
			// NotBefore rounds up to a whole second: aim just before at.
			Source: forewarn.User, Notice: time.Until(at) - 10*time.Millisecond, Lasts: time.Hour})
		if err != nil {
			return 0, err
		}
	}
	if time.Now().After(at) {
		return 0, fmt.Errorf("creating %d events took past their deadline; lower --fire", k)
	}
	want := fired.Load() + int64(k)
	time.Sleep(time.Until(at))
	deadline := time.Now().Add(time.Minute)
	for fired.Load() < want {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%d of %d deadlines fired in a minute", fired.Load()-want+int64(k), k)
		}
		time.Sleep(100 * time.Microsecond)
	}
	return time.Since(at) / time.Duration(k), nil
}

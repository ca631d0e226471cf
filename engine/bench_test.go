package engine_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

func benchEngine(b *testing.B, vms int) (*engine.Engine, *atomic.Int64) {
	f := &forewarn.Fleet{VMs: make([]*forewarn.VM, vms)}
	for i := range f.VMs {
		f.VMs[i] = &forewarn.VM{Name: fmt.Sprintf("vm%d", i), Provider: forewarn.Azure}
	}
	e, err := engine.New(b.Context(), engine.Config{Store: mem.New(), Fleet: f, AllowShortNotice: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	published := new(atomic.Int64)
	e.Subscribe(func(*engine.View) { published.Add(1) })
	return e, published
}

// BenchmarkSchedule is the schedule path: validate, commit, publish one
// view, arm a timer.
func BenchmarkSchedule(b *testing.B) {
	const vms = 10000
	e, _ := benchEngine(b, vms)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_, err := e.Create(b.Context(), engine.Spec{Type: forewarn.Freeze, VMs: []string{fmt.Sprintf("vm%d", i%vms)},
			Source: forewarn.User, Notice: 24 * time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkFire is the fire path: deadlines fall due together, in
// batches of up to 50,000, with 10,000 other events pending; the time is
// from each batch's instant until every one has started and published
// its view.
func BenchmarkFire(b *testing.B) {
	const vms, batch = 10000, 50000
	e, published := benchEngine(b, vms)
	for i := range vms {
		e.Create(b.Context(), engine.Spec{Type: forewarn.Freeze, VMs: []string{fmt.Sprintf("vm%d", i)},
			Source: forewarn.User, Notice: 48 * time.Hour})
	}
	b.StopTimer()
	for left := b.N; left > 0; left -= batch {
		n := min(left, batch)
		at := time.Now().Truncate(time.Second).Add(2 * time.Second)
		for i := range n {
			if _, err := e.Create(b.Context(), engine.Spec{Type: forewarn.Freeze, VMs: []string{fmt.Sprintf("vm%d", i%vms)},
				Source: forewarn.User, Notice: time.Until(at) - 10*time.Millisecond, Lasts: time.Hour}); err != nil {
				b.Fatal(err)
			}
		}
		if time.Now().After(at) {
			b.Fatalf("creating %d events took past their deadline", n)
		}
		timePublished(b, published, published.Load()+int64(n), at)
	}
}

// timePublished sleeps until at, then times the wait until published
// reaches want.
func timePublished(b *testing.B, published *atomic.Int64, want int64, at time.Time) {
	time.Sleep(time.Until(at))
	b.StartTimer()
	for published.Load() < want {
		time.Sleep(50 * time.Microsecond)
	}
	b.StopTimer()
}

// BenchmarkTerminatesTimeOut is the scale set rule at scale: the
// Terminates of n VMs of one scale set, one event each (each VM is a
// placement group of its own), time out together. The time is from their
// NotBefore until every one has started and published its VM's view.
func BenchmarkTerminatesTimeOut(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("terminates=%d", n), func(b *testing.B) {
			f := &forewarn.Fleet{VMs: make([]*forewarn.VM, n), ScaleSets: []*forewarn.ScaleSet{{Name: "ss", TerminateTimeout: 5 * time.Minute}}}
			names := make([]string, n)
			for i := range f.VMs {
				names[i] = fmt.Sprintf("ss_%d", i)
				f.VMs[i] = &forewarn.VM{Name: names[i], Provider: forewarn.Azure, ScaleSet: "ss", InstanceID: fmt.Sprint(i), PlacementGroup: fmt.Sprintf("pg%d", i)}
			}
			b.StopTimer()
			for range b.N {
				e, err := engine.New(b.Context(), engine.Config{Store: mem.New(), Fleet: f, AllowShortNotice: true})
				if err != nil {
					b.Fatal(err)
				}
				published := new(atomic.Int64)
				e.Subscribe(func(*engine.View) { published.Add(1) })
				at := time.Now().Truncate(time.Second).Add(2 * time.Second)
				evs, err := e.CreateAll(b.Context(), engine.Spec{Type: forewarn.Terminate, VMs: names, Source: forewarn.User, Notice: time.Until(at) - 10*time.Millisecond})
				if err != nil {
					b.Fatal(err)
				}
				if len(evs) != n || time.Now().After(at) {
					b.Fatalf("%d Terminates created by %v, want %d before %v", len(evs), time.Now(), n, at)
				}
				timePublished(b, published, published.Load()+int64(n), at)
				e.Close()
			}
		})
	}
}

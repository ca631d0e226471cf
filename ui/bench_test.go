package ui

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

// benchSizes are the fleet sizes the dashboard benchmarks render.
var benchSizes = []int{1_000, 10_000, 100_000}

// benchEngines holds one engine per size, built on first use and kept
// for the process's other benchmarks.
var benchEngines = map[int]*engine.Engine{}

// benchEngine returns an engine of n Azure VMs in availability sets of
// 200, with one Freeze naming every VM (so all in one update domain: an
// event spans one).
func benchEngine(b testing.TB, n int) *engine.Engine {
	if e := benchEngines[n]; e != nil {
		return e
	}
	f := &forewarn.Fleet{}
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("vm_%06d", i)
		f.VMs = append(f.VMs, &forewarn.VM{Name: names[i], Provider: forewarn.Azure,
			AvailabilitySet: fmt.Sprintf("set_%04d", i/200)})
	}
	e, err := engine.New(context.Background(), engine.Config{Store: mem.New(), Fleet: f, AllowShortNotice: true})
	if err != nil {
		b.Fatal(err)
	}
	for i, name := range names {
		if i%2 == 0 {
			e.NoteRequest(name) // half the fleet has called: both kinds of rows
		}
	}
	if _, err := e.CreateAll(context.Background(), engine.Spec{Type: forewarn.Freeze, VMs: names, Notice: time.Hour}); err != nil {
		b.Fatal(err)
	}
	benchEngines[n] = e
	return e
}

// BenchmarkFleetFragment renders the fleet fragment as a push does:
// reading every VM from the engine, grouping, and executing the
// template, bounded to MaxRows rows.
func BenchmarkFleetFragment(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("vms=%d", n), func(b *testing.B) {
			h := New(Config{Engine: benchEngine(b, n)})
			var buf bytes.Buffer
			b.ReportAllocs()
			for b.Loop() {
				buf.Reset()
				if err := h.renderFleet(&buf, h.eng.VMs(), ""); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(buf.Len()), "bytes/fragment")
		})
	}
}

// BenchmarkFleetRender is BenchmarkFleetFragment without the engine
// read: the dashboard's own share, grouping and the template, on VMs
// read once (as every stream after the first does with a change's
// shared snapshot).
func BenchmarkFleetRender(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("vms=%d", n), func(b *testing.B) {
			h := New(Config{Engine: benchEngine(b, n)})
			vms := h.eng.VMs()
			var buf bytes.Buffer
			b.ReportAllocs()
			for b.Loop() {
				buf.Reset()
				if err := h.renderFleet(&buf, vms, ""); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(buf.Len()), "bytes/fragment")
		})
	}
}

// BenchmarkFleetFragmentFiltered is BenchmarkFleetFragment with a
// filter that matches one VM.
func BenchmarkFleetFragmentFiltered(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("vms=%d", n), func(b *testing.B) {
			h := New(Config{Engine: benchEngine(b, n)})
			var buf bytes.Buffer
			q := fmt.Sprintf("vm_%06d", n-1)
			b.ReportAllocs()
			for b.Loop() {
				buf.Reset()
				if err := h.renderFleet(&buf, h.eng.VMs(), q); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(buf.Len()), "bytes/fragment")
		})
	}
}

// BenchmarkEventsFragment renders the events fragment as a push does:
// copying the events from the engine (one naming every VM) and
// executing the template.
func BenchmarkEventsFragment(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("vms=%d", n), func(b *testing.B) {
			h := New(Config{Engine: benchEngine(b, n)})
			var buf bytes.Buffer
			b.ReportAllocs()
			for b.Loop() {
				buf.Reset()
				if err := h.renderEvents(&buf, h.eng.Events(), time.Now()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(buf.Len()), "bytes/fragment")
		})
	}
}

// TestFleetRenderLinear checks that rendering the fleet fragment, the
// engine read included, allocates no more per VM at 20,000 VMs than at
// 2,000 (a quadratic step would allocate ten times more), and that the
// fragment's size stays bounded.
func TestFleetRenderLinear(t *testing.T) {
	perVM := map[int]float64{}
	for _, n := range []int{2_000, 20_000} {
		h := New(Config{Engine: benchEngine(t, n)})
		var buf bytes.Buffer
		if err := h.renderFleet(&buf, h.eng.VMs(), ""); err != nil { // warm up
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		const runs = 3
		for range runs {
			buf.Reset()
			if err := h.renderFleet(&buf, h.eng.VMs(), ""); err != nil {
				t.Fatal(err)
			}
		}
		runtime.ReadMemStats(&after)
		perVM[n] = float64(after.TotalAlloc-before.TotalAlloc) / runs / float64(n)
		if buf.Len() > 256<<10 {
			t.Errorf("%d VMs: the fleet fragment is %d bytes, want at most 256 KiB", n, buf.Len())
		}
		t.Logf("%d VMs: %.0f bytes allocated per VM, fragment %d bytes", n, perVM[n], buf.Len())
	}
	if r := perVM[20_000] / perVM[2_000]; r > 1.5 {
		t.Fatalf("bytes per VM grew %.2f× from 2,000 to 20,000 VMs, want linear (at most 1.5×)", r)
	}
}

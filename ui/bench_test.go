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
	checkLinear(t, "fleet", 256<<10, func(n int) func(*bytes.Buffer) error {
		h := New(Config{Engine: benchEngine(t, n)})
		return func(buf *bytes.Buffer) error { return h.renderFleet(buf, h.eng.VMs(), "") }
	})
}

// checkLinear fails unless a render, made by renderer for a fleet of n
// VMs, allocates no more than 1.5 times as many bytes per VM at 20,000
// VMs as at 2,000, and writes at most limit bytes.
func checkLinear(t *testing.T, name string, limit int, renderer func(n int) func(*bytes.Buffer) error) {
	t.Helper()
	perVM := map[int]float64{}
	for _, n := range []int{2_000, 20_000} {
		render := renderer(n)
		var buf bytes.Buffer
		if err := render(&buf); err != nil { // warm up
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		const runs = 3
		for range runs {
			buf.Reset()
			if err := render(&buf); err != nil {
				t.Fatal(err)
			}
		}
		runtime.ReadMemStats(&after)
		perVM[n] = float64(after.TotalAlloc-before.TotalAlloc) / runs / float64(n)
		if buf.Len() > limit {
			t.Errorf("%d VMs: the %s fragment is %d bytes, want at most %d KiB", n, name, buf.Len(), limit>>10)
		}
		t.Logf("%d VMs: %.0f bytes allocated per VM, fragment %d bytes", n, perVM[n], buf.Len())
	}
	if r := perVM[20_000] / perVM[2_000]; r > 1.5 {
		t.Fatalf("bytes per VM grew %.2f× from 2,000 to 20,000 VMs, want linear (at most 1.5×)", r)
	}
}

// sessionEngines holds one engine per size and kind of budget with a
// session under way, built on first use.
var sessionEngines = map[sessionBench]*engine.Engine{}

// closeSessionEngines closes the engines sessionEngine made, whose
// session loops run until then.
func closeSessionEngines() {
	for sb, e := range sessionEngines {
		e.Close()
		delete(sessionEngines, sb)
	}
}

// sessionBench is one of the sessions the benchmarks render: over n
// VMs, with percent budgets or counts.
type sessionBench struct {
	n       int
	percent bool
}

// sessionEngine returns an engine of n Azure VMs on hosts of 100, in
// availability sets of 200 (two hosts each) and update domains i%5, all
// of which have called, with one session over every host: at most 10
// hosts at once, and at most half of an availability set and of an
// update domain, as 50% or as counts (100 and 20). Percent budgets cost
// a pass over the fleet for the groups' sizes; counts only the VMs of
// the hosts under way. It returns once 10 hosts (half of them, under
// 2,000 VMs) are Notifying, their VMs' events waiting out an hour's
// notice.
func sessionEngine(b testing.TB, sb sessionBench) *engine.Engine {
	if e := sessionEngines[sb]; e != nil {
		return e
	}
	f := &forewarn.Fleet{}
	for i := range sb.n {
		f.VMs = append(f.VMs, &forewarn.VM{Name: fmt.Sprintf("vm_%06d", i), Provider: forewarn.Azure, Host: fmt.Sprintf("hv_%04d", i/100),
			AvailabilitySet: fmt.Sprintf("set_%04d", i/200), UpdateDomain: i % 5})
	}
	e, err := engine.New(context.Background(), engine.Config{Store: mem.New(), Fleet: f, AllowShortNotice: true})
	if err != nil {
		b.Fatal(err)
	}
	for _, vm := range f.VMs {
		e.NoteRequest(vm.Name)
	}
	spec := forewarn.SessionSpec{MaxHosts: 10, Notice: time.Hour, MaxUnavailable: map[string]forewarn.Budget{
		forewarn.GroupAvailabilitySet: {Count: 100}, forewarn.GroupUpdateDomain: {Count: 20}}}
	if sb.percent {
		spec.MaxUnavailable = map[string]forewarn.Budget{forewarn.GroupAvailabilitySet: {Percent: 50}, forewarn.GroupUpdateDomain: {Percent: 50}}
	}
	for _, h := range e.Hosts() {
		spec.Hosts = append(spec.Hosts, h.Name)
	}
	s, err := e.CreateSession(context.Background(), spec)
	if err != nil {
		b.Fatal(err)
	}
	want := min(10, len(spec.Hosts)/2) // one host of an availability set at a time
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		p, _ := e.SessionProgress(time.Now(), 1)
		if p[0].Session.ID == s.ID && p[0].Underway == want {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%+v: fewer than %d hosts under way after a minute", sb, want)
		}
	}
	sessionEngines[sb] = e
	return e
}

// BenchmarkSessionsFragment renders the sessions fragment of a session
// over every host of the fleet, 10 of them under way (see
// sessionEngine), with budgets as counts and as percents.
func BenchmarkSessionsFragment(b *testing.B) {
	b.Cleanup(closeSessionEngines)
	for _, percent := range []bool{false, true} {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("budgets=%s/vms=%d", map[bool]string{false: "count", true: "percent"}[percent], n), func(b *testing.B) {
				h := New(Config{Engine: sessionEngine(b, sessionBench{n, percent})})
				var buf bytes.Buffer
				b.ReportAllocs()
				for b.Loop() {
					buf.Reset()
					if err := h.renderSessionsAt(&buf, time.Now()); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(buf.Len()), "bytes/fragment")
			})
		}
	}
}

// TestSessionsRenderLinear checks that rendering the sessions fragment,
// the engine reads included, allocates no more per VM at 20,000 VMs
// than at 2,000 (with percent budgets, which read the whole fleet), and
// that the fragment's size stays bounded.
func TestSessionsRenderLinear(t *testing.T) {
	t.Cleanup(closeSessionEngines)
	checkLinear(t, "sessions", 128<<10, func(n int) func(*bytes.Buffer) error {
		h := New(Config{Engine: sessionEngine(t, sessionBench{n, true})})
		return func(buf *bytes.Buffer) error { return h.renderSessionsAt(buf, time.Now()) }
	})
}

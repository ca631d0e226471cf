package azure_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/azure"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/history"
	"github.com/forewarn/forewarn/metrics"
	"github.com/forewarn/forewarn/metrics/metricstest"
)

// discard is a ResponseWriter that keeps its header map between
// requests, so a benchmark counts only the handler's own allocations.
type discard struct {
	h    http.Header
	code int
	n    int
}

func (w *discard) Header() http.Header         { return w.h }
func (w *discard) Write(b []byte) (int, error) { w.n += len(b); return len(b), nil }
func (w *discard) WriteHeader(code int)        { w.code = code }

// BenchmarkGetEvents is the hot path: a VM's GET with an event present.
func BenchmarkGetEvents(b *testing.B) {
	e, h := setup(b)
	if _, err := e.Create(b.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_0"}, Source: forewarn.User}); err != nil {
		b.Fatal(err)
	}
	benchGetEvents(b, h)
}

// BenchmarkGetEventsRecorded is BenchmarkGetEvents with the metrics and
// the per-VM request history on, as 'forewarn serve' runs.
func BenchmarkGetEventsRecorded(b *testing.B) {
	e, h := setup(b)
	h.(*azure.Server).SetMetrics(metrics.New("mem"))
	h.(*azure.Server).SetHistory(history.New(vmNames(e.Fleet()), history.DefaultSize))
	if _, err := e.Create(b.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_0"}, Source: forewarn.User}); err != nil {
		b.Fatal(err)
	}
	benchGetEvents(b, h)
}

// benchGetEvents measures web_0's GET of its events through h.
func benchGetEvents(b *testing.B, h http.Handler) {
	r := httptest.NewRequest("GET", path+"2020-07-01", nil)
	r.RemoteAddr = web0
	r.Header.Set("Metadata", "true")
	w := &discard{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, r)
	}
	if w.code != 200 || w.n == 0 {
		b.Fatalf("status %d", w.code)
	}
}

// BenchmarkGetEventsNotModified is the conditional GET answered 304.
func BenchmarkGetEventsNotModified(b *testing.B) {
	_, h := setup(b)
	first := do(h, req{target: path + "2020-07-01"})
	r := httptest.NewRequest("GET", path+"2020-07-01", nil)
	r.RemoteAddr = web0
	r.Header.Set("Metadata", "true")
	r.Header.Set("If-None-Match", first.Header().Get("ETag"))
	w := &discard{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, r)
	}
	if w.code != 304 {
		b.Fatalf("status %d", w.code)
	}
}

// BenchmarkApprove posts a StartRequests for an event already started,
// the repeated approval every agent in an availability set sends.
func BenchmarkApprove(b *testing.B) {
	e, h := setup(b)
	ev, err := e.Create(b.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_0"}, Source: forewarn.User})
	if err != nil {
		b.Fatal(err)
	}
	body := `{"StartRequests":[{"EventId":"` + ev.ID + `"}]}`
	w := &discard{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest("POST", path+"2020-07-01", strings.NewReader(body))
		r.RemoteAddr = web0
		r.Header.Set("Metadata", "true")
		clear(w.h)
		h.ServeHTTP(w, r)
	}
	if w.code != 200 {
		b.Fatalf("status %d", w.code)
	}
}

// TestGetEventsDoesNotAllocate pins the benchmark's result: the GET
// handler's own code makes no allocation per request, with request
// metrics or without.
func TestGetEventsDoesNotAllocate(t *testing.T) {
	for _, withMetrics := range []bool{false, true} {
		t.Run(fmt.Sprintf("metrics+history=%v", withMetrics), func(t *testing.T) {
			e, h := setup(t)
			var m *metrics.Metrics
			if withMetrics {
				m = metrics.New("mem")
				h.(*azure.Server).SetMetrics(m)
				h.(*azure.Server).SetHistory(history.New(vmNames(e.Fleet()), history.DefaultSize))
			}
			e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_0"}, Source: forewarn.User})
			r := httptest.NewRequest("GET", path+"2020-07-01", nil)
			r.RemoteAddr = web0
			r.Header.Set("Metadata", "true")
			w := &discard{h: http.Header{}}
			h.ServeHTTP(w, r)
			if n := testing.AllocsPerRun(200, func() { clear(w.h); h.ServeHTTP(w, r) }); n != 0 {
				t.Fatalf("%v allocations per GET", n)
			}
			// AllocsPerRun runs the function once more than it counts.
			if !withMetrics {
				return
			}
			if got := metricstest.Value(t, m, "forewarn_metadata_requests_total", "api=azure", "route=scheduledevents", "code=200"); got != 202 {
				t.Errorf("requests counted: %v, want 202", got)
			}
		})
	}
}

// BenchmarkGetEventsRateLimited is BenchmarkGetEvents with throttling on
// at a rate the loop never reaches, so every request pays the limiter.
func BenchmarkGetEventsRateLimited(b *testing.B) {
	e, h := setup(b)
	h.(interface{ SetRateLimit(float64) }).SetRateLimit(1e12)
	if _, err := e.Create(b.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_0"}, Source: forewarn.User}); err != nil {
		b.Fatal(err)
	}
	r := httptest.NewRequest("GET", path+"2020-07-01", nil)
	r.RemoteAddr = web0
	r.Header.Set("Metadata", "true")
	w := &discard{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, r)
	}
	if w.code != 200 {
		b.Fatalf("status %d", w.code)
	}
}

// vmNames returns the names of f's VMs.
func vmNames(f *forewarn.Fleet) []string {
	var out []string
	for _, vm := range f.VMs {
		out = append(out, vm.Name)
	}
	return out
}

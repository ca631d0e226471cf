package gce_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/history"
	"github.com/forewarn/forewarn/metrics"
	"github.com/forewarn/forewarn/metrics/metricstest"
)

// discard keeps its header map between requests, so a benchmark counts
// only the handler's own allocations.
type discard struct {
	h    http.Header
	code int
}

func (w *discard) Header() http.Header         { return w.h }
func (w *discard) Write(b []byte) (int, error) { return len(b), nil }
func (w *discard) WriteHeader(code int)        { w.code = code }

func maintenanceRequest(query string) *http.Request {
	r := httptest.NewRequest("GET", v1+"instance/maintenance-event"+query, nil)
	r.RemoteAddr = vmAddr
	r.Header.Set("Metadata-Flavor", "Google")
	return r
}

// BenchmarkMaintenanceEvent is the GCE hot path: a plain GET of the key.
func BenchmarkMaintenanceEvent(b *testing.B) {
	_, s := setup(b)
	r := maintenanceRequest("")
	w := &discard{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		s.ServeHTTP(w, r)
	}
	if w.code != 200 {
		b.Fatalf("status %d", w.code)
	}
}

// BenchmarkMaintenanceEventStaleETag is a wait_for_change answered at
// once because the client's ETag is stale.
func BenchmarkMaintenanceEventStaleETag(b *testing.B) {
	_, s := setup(b)
	r := maintenanceRequest("?wait_for_change=true&last_etag=0")
	w := &discard{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		s.ServeHTTP(w, r)
	}
	if w.code != 200 {
		b.Fatalf("status %d", w.code)
	}
}

// TestMaintenanceEventDoesNotAllocate pins the benchmark's result, with
// request metrics and without, under a rate limit; and a throttled
// request allocates nothing either.
func TestMaintenanceEventDoesNotAllocate(t *testing.T) {
	for _, withMetrics := range []bool{false, true} {
		t.Run(fmt.Sprintf("metrics+history=%v", withMetrics), func(t *testing.T) {
			e, s := setup(t)
			s.SetRateLimit(1e9)
			var m *metrics.Metrics
			if withMetrics {
				m = metrics.New("mem")
				s.SetMetrics(m)
				s.SetHistory(history.New(vmNames(e.Fleet()), history.DefaultSize))
			}
			for _, q := range []string{"", "?wait_for_change=true&last_etag=0", "?alt=json"} {
				r := maintenanceRequest(q)
				w := &discard{h: http.Header{}}
				s.ServeHTTP(w, r)
				if n := testing.AllocsPerRun(200, func() { clear(w.h); s.ServeHTTP(w, r) }); n != 0 {
					t.Errorf("%q: %v allocations per GET", q, n)
				}
			}
			s.SetRateLimit(1e-9)
			r := maintenanceRequest("")
			w := &discard{h: http.Header{}}
			s.ServeHTTP(w, r) // the one request the budget holds
			if n := testing.AllocsPerRun(200, func() { clear(w.h); s.ServeHTTP(w, r) }); n != 0 || w.code != 429 {
				t.Errorf("throttled: %v allocations per GET, status %d", n, w.code)
			}
			if !withMetrics {
				return
			}
			// Each query: one request, then AllocsPerRun's 201.
			if got := metricstest.Value(t, m, "forewarn_metadata_requests_total", "api=gce", "route=maintenance-event", "code=200"); got != 3*202+1 {
				t.Errorf("requests counted: %v, want %d", got, 3*202+1)
			}
			if got := metricstest.Value(t, m, "forewarn_metadata_throttled_total", "api=gce"); got != 201 {
				t.Errorf("throttled counted: %v, want 201", got)
			}
		})
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

// TestKeysDoNotAllocate checks that once a VM's first request rendered
// what it reads, every key and directory in every form is answered with
// no allocation, as the maintenance keys are.
func TestKeysDoNotAllocate(t *testing.T) {
	_, s := setup(t)
	forms := map[string][]string{
		"instance/name":     {"", "?alt=json"},
		"instance/hostname": {"", "?alt=json"},
		"instance/id":       {"", "?alt=json"},
		"instance/zone":     {"", "?alt=text"},
		"instance/scheduling/on-host-maintenance": {""},
		"project/numeric-project-id":              {"?alt=json"},
		"instance/preempted":                      {"", "?alt=json"},
		"instance/upcoming-maintenance":           {""},
		"instance/scheduling/":                    {"", "?recursive=true", "?recursive=true&alt=text"},
		"project/":                                {"?alt=json", "?recursive=true"},
		"instance/":                               {"", "?alt=json", "?recursive=true", "?recursive=true&alt=text", "?recursive=true&wait_for_change=true&last_etag=0"},
		"":                                        {"", "?recursive=true", "?recursive=true&alt=text"},
	}
	for key, queries := range forms {
		for _, q := range queries {
			r := httptest.NewRequest("GET", v1+key+q, nil)
			r.RemoteAddr = vmAddr
			r.Header.Set("Metadata-Flavor", "Google")
			w := &discard{h: http.Header{}}
			s.ServeHTTP(w, r) // the first: renders what it reads
			if w.code != http.StatusOK && !(key == "instance/upcoming-maintenance" && w.code == http.StatusServiceUnavailable) {
				t.Fatalf("%s%s: status %d", key, q, w.code)
			}
			if n := testing.AllocsPerRun(100, func() { clear(w.h); s.ServeHTTP(w, r) }); n != 0 {
				t.Errorf("%s%s: %v allocations per GET", key, q, n)
			}
		}
	}
}

package metrics_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/forewarn/forewarn/metrics"
	"github.com/forewarn/forewarn/metrics/metricstest"
)

// TestAPIRecordsWhatTheCallerMeasured: Done observes the duration the
// caller measured and counts the status the request was answered with,
// and the Writer goes back to be reused without allocating.
func TestAPIRecordsWhatTheCallerMeasured(t *testing.T) {
	m := metrics.New("mem")
	a := m.API("gce", []string{"maintenance", "other"})
	r := httptest.NewRequest("GET", "/computeMetadata/v1/instance/maintenance-event", nil)
	serve := func(code int, took time.Duration) {
		w := a.Start(httptest.NewRecorder(), r)
		w.WriteHeader(code)
		a.Done(w, 0, took)
	}
	serve(http.StatusOK, 3*time.Second)
	serve(http.StatusTooManyRequests, 2*time.Second)

	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == "forewarn_metadata_request_duration_seconds" {
			for _, mt := range mf.GetMetric() {
				sum += mt.GetHistogram().GetSampleSum()
			}
		}
	}
	if sum != 5 {
		t.Errorf("request durations sum to %vs, want the 5s measured", sum)
	}
	for code, want := range map[string]float64{"200": 1, "429": 1} {
		if got := metricstest.Value(t, m, "forewarn_metadata_requests_total", "api=gce", "route=maintenance", "code="+code); got != want {
			t.Errorf("code %s counted %v times, want %v", code, got, want)
		}
	}
	w := httptest.NewRecorder()
	if n := testing.AllocsPerRun(100, func() {
		mw := a.Start(w, r)
		mw.WriteHeader(http.StatusOK)
		a.Done(mw, 0, time.Millisecond)
	}); n != 0 {
		t.Errorf("a recorded request allocates %v times, want 0", n)
	}
}

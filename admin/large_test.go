package admin_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/history"
	"github.com/forewarn/forewarn/mem"
)

// bigServer returns an operator API over a fleet of n standalone Azure
// VMs, each of which called 3 times, with one event per 100 VMs.
func bigServer(t *testing.T, n int) (*engine.Engine, *admin.Server) {
	t.Helper()
	fleet := &forewarn.Fleet{}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("vm_%06d", i)
		fleet.VMs = append(fleet.VMs, &forewarn.VM{Name: names[i], Provider: forewarn.Azure})
	}
	eng, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: fleet, AllowShortNotice: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	h := history.New(names, 4)
	for _, name := range names {
		for range 3 {
			w := h.Start(httptest.NewRecorder(), name)
			h.Done(w, history.Azure, "GET", "/metadata/scheduledevents", "2017-03-01")
		}
	}
	for i := 0; i < n; i += 100 {
		if _, err := eng.Create(t.Context(), engine.Spec{Type: forewarn.Freeze, VMs: []string{names[i]}, Notice: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	s := admin.NewServer(eng, nil)
	s.History = h
	return eng, s
}

// stuckWriter is the answer's side of a client that stops reading: its
// first Write blocks until release is closed.
type stuckWriter struct {
	header  http.Header
	status  int
	wrote   chan struct{} // closed at the first Write
	release chan struct{}
	once    sync.Once
	body    bytes.Buffer
}

func newStuckWriter() *stuckWriter {
	return &stuckWriter{header: http.Header{}, wrote: make(chan struct{}), release: make(chan struct{})}
}

func (w *stuckWriter) Header() http.Header { return w.header }
func (w *stuckWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}
func (w *stuckWriter) Write(b []byte) (int, error) {
	w.WriteHeader(200)
	w.once.Do(func() { close(w.wrote) })
	<-w.release
	return w.body.Write(b)
}

func get(s http.Handler, w http.ResponseWriter, path string) {
	r := httptest.NewRequest("GET", "http://localhost"+path, nil)
	s.ServeHTTP(w, r)
}

// heapInUse returns the live heap after a collection.
func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestStuckReportHoldsLittle: a report of 20,000 VMs whose reader stops
// reading at its first bytes holds under 1 MiB while it waits; it was
// built whole, and encoded whole, before the first byte (about 30 MB
// here, 125 MB at 100,000 VMs). Once read, it is the report.
func TestStuckReportHoldsLittle(t *testing.T) {
	_, s := bigServer(t, 20_000)
	base := heapInUse()
	w := newStuckWriter()
	done := make(chan struct{})
	go func() { defer close(done); get(s, w, "/v1/report") }()
	<-w.wrote
	held := int64(heapInUse()) - int64(base)
	close(w.release)
	<-done
	if held > 1<<20 {
		t.Errorf("a report stuck at its first write holds %d bytes, want under 1 MiB", held)
	} else {
		t.Logf("a report stuck at its first write holds %d bytes", held)
	}
	var rep struct {
		Generated time.Time
		VMs       []struct {
			Name     string
			Requests int
			Findings []struct{ Kind string }
		}
		Events []struct{ ID string }
	}
	if err := json.Unmarshal(w.body.Bytes(), &rep); err != nil || w.status != 200 || w.header.Get("Content-Type") != "application/json" {
		t.Fatalf("report: %d %s %v", w.status, w.header, err)
	}
	if len(rep.VMs) != 20_000 || len(rep.Events) != 200 || rep.VMs[19_999].Name != "vm_019999" || rep.VMs[0].Requests != 3 || len(rep.VMs[0].Findings) == 0 {
		t.Errorf("report of %d VMs, %d events; the last %+v", len(rep.VMs), len(rep.Events), rep.VMs[len(rep.VMs)-1])
	}
}

// TestLargeAnswersTakeTurns: two VM lists whose readers stopped reading
// hold the two turns of the large answers; a third large answer (VM
// list, event list, report, audit log) waits for a turn, then gets 503
// with Retry-After; small answers go on. A turn freed is taken, and the
// lists are the bytes the whole answer's encoding was.
func TestLargeAnswersTakeTurns(t *testing.T) {
	eng, s := bigServer(t, 2_000)
	admin.SetLargeWait(s, 300*time.Millisecond)
	stuck := []*stuckWriter{newStuckWriter(), newStuckWriter()}
	var wg sync.WaitGroup
	for _, w := range stuck {
		wg.Go(func() { get(s, w, "/v1/vms") })
		<-w.wrote
	}
	busy := errorJSON("unavailable", "the server is busy writing 2 other large answers (the VM list, the host list, the event list, the report, the audit log, dashboard fragments, profiles); try again")
	for _, p := range []string{"/v1/vms", "/v1/events", "/v1/report", "/v1/audit", "/ui/fragment/fleet", "/debug/pprof/"} {
		w := httptest.NewRecorder()
		start := time.Now()
		get(s, w, p)
		if waited := time.Since(start); w.Code != 503 || w.Body.String() != busy || w.Header().Get("Retry-After") != "1" || waited < 300*time.Millisecond {
			t.Errorf("GET %s: %d %s after %s, Retry-After %q; want 503 after 300ms", p, w.Code, w.Body, waited, w.Header().Get("Retry-After"))
		}
	}
	for _, p := range []string{"/healthz", "/v1/vms/vm_000007", "/v1/events/" + eng.Events()[0].ID, "/v1/maintenance"} {
		w := httptest.NewRecorder()
		if get(s, w, p); w.Code != 200 {
			t.Errorf("GET %s while the turns are taken: %d %s", p, w.Code, w.Body)
		}
	}
	close(stuck[0].release)
	var want bytes.Buffer
	json.NewEncoder(&want).Encode(map[string][]engine.VMInfo{"vms": eng.VMs()})
	w := httptest.NewRecorder()
	if get(s, w, "/v1/vms"); w.Code != 200 || w.Body.String() != want.String() {
		t.Errorf("GET /v1/vms once a turn is free: %d, %d bytes, want the %d bytes of the whole list", w.Code, w.Body.Len(), want.Len())
	}
	close(stuck[1].release)
	wg.Wait()
	for _, sw := range stuck {
		if sw.body.String() != want.String() {
			t.Errorf("a stuck list, once read: %d bytes, want %d", sw.body.Len(), want.Len())
		}
	}
	var evs bytes.Buffer
	json.NewEncoder(&evs).Encode(map[string][]*forewarn.Event{"events": eng.Events()})
	w = httptest.NewRecorder()
	if get(s, w, "/v1/events"); w.Code != 200 || w.Body.String() != evs.String() {
		t.Errorf("GET /v1/events: %d, %d bytes, want %d", w.Code, w.Body.Len(), evs.Len())
	}
}

package history_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"testing"

	"github.com/forewarn/forewarn/history"
)

// record records one request of vm through h, answered with status.
func record(h *history.History, vm, path string, status int, note func(http.ResponseWriter)) {
	w := h.Start(httptest.NewRecorder(), vm)
	if note != nil {
		note(w)
	}
	w.WriteHeader(status)
	h.Done(w, history.GCE, "GET", path, "")
}

func TestRingKeepsNewest(t *testing.T) {
	h := history.New([]string{"a"})
	for i := range history.Size + 10 {
		record(h, "a", fmt.Sprintf("/p/%d", i), 200, nil)
	}
	got, ok := h.Entries("a")
	if !ok || len(got) != history.Size {
		t.Fatalf("%d entries (ok %v), want %d", len(got), ok, history.Size)
	}
	for i, e := range got {
		if want := fmt.Sprintf("/p/%d", history.Size+9-i); e.Path != want {
			t.Fatalf("entry %d: path %q, want %q", i, e.Path, want)
		}
	}
}

func TestEntryContent(t *testing.T) {
	h := history.New([]string{"a", "b"})
	w := h.Start(httptest.NewRecorder(), "a")
	_, _ = w.Write([]byte("x"))
	h.Done(w, history.Azure, "GET", "/metadata/scheduledevents", "2020-07-01")
	record(h, "a", "/computeMetadata/v1/instance/maintenance-event", 200, func(w http.ResponseWriter) { history.NotePoll(w, history.Timeout) })
	w = h.Start(httptest.NewRecorder(), "a")
	history.NoteApproved(w, []string{"e1", "e2"})
	h.Done(w, history.Azure, "POST", "/metadata/scheduledevents", "2019-08-01")
	if w := h.Start(httptest.NewRecorder(), "nobody"); w != nil {
		if _, ok := w.(*history.Writer); ok {
			t.Fatal("Start wrapped the writer of a VM not in the fleet")
		}
	}
	got, _ := h.Entries("a")
	if len(got) != 3 {
		t.Fatalf("%d entries, want 3", len(got))
	}
	type short struct {
		API, Method, Path, Version string
		Status                     int
		LongPoll                   bool
		PollEnd                    string
		Approved                   string
	}
	var s []short
	for _, e := range got {
		if e.Time.IsZero() || e.Latency < 0 {
			t.Errorf("entry %+v: no time or a negative latency", e)
		}
		s = append(s, short{e.API, e.Method, e.Path, e.APIVersion, e.Status, e.LongPoll, e.PollEnd, fmt.Sprint(e.Approved)})
	}
	want := []short{
		{"azure", "POST", "/metadata/scheduledevents", "2019-08-01", 200, false, "", "[e1 e2]"},
		{"gce", "GET", "/computeMetadata/v1/instance/maintenance-event", "", 200, true, "timeout", "[]"},
		{"azure", "GET", "/metadata/scheduledevents", "2020-07-01", 200, false, "", "[]"},
	}
	if fmt.Sprint(s) != fmt.Sprint(want) {
		t.Errorf("entries:\n got %v\nwant %v", s, want)
	}
	if !got[0].Time.After(got[2].Time) && !got[0].Time.Equal(got[2].Time) {
		t.Errorf("not newest first: %v then %v", got[0].Time, got[2].Time)
	}
	if b, _ := h.Entries("b"); len(b) != 0 {
		t.Errorf("VM b has %d entries, want 0", len(b))
	}
	if _, ok := h.Entries("nobody"); ok {
		t.Error("Entries of a VM not in the fleet reported ok")
	}
}

func TestConcurrentRecording(t *testing.T) {
	vms := []string{"a", "b", "c", "d"}
	h := history.New(vms)
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 200 {
				vm := vms[(g+i)%len(vms)]
				record(h, vm, fmt.Sprintf("/g/%d", g), 200+g, nil)
				if i%50 == 0 {
					_, _ = h.Entries(vm)
				}
			}
		})
	}
	wg.Wait()
	for _, vm := range vms {
		got, _ := h.Entries(vm)
		if len(got) != history.Size {
			t.Fatalf("%s: %d entries, want %d", vm, len(got), history.Size)
		}
		for _, e := range got {
			if want := fmt.Sprintf("/g/%d", e.Status-200); e.Path != want {
				t.Fatalf("%s: torn entry: path %q with status %d", vm, e.Path, e.Status)
			}
		}
	}
}

// TestBytesPerVM measures the history of 100k VMs: the rings are
// allocated once, when the History is built.
func TestBytesPerVM(t *testing.T) {
	const n = 100_000
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("vm-%06d", i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	h := history.New(names)
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("history of %d VMs: %.0f bytes per VM (%d entries each)", n, per, history.Size)
	if per > 3000 {
		t.Errorf("%.0f bytes per VM, want at most 3000", per)
	}
	runtime.KeepAlive(h)
}

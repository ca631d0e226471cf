package history_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

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
	h := history.New([]string{"a"}, history.DefaultSize)
	for i := range history.DefaultSize + 10 {
		record(h, "a", fmt.Sprintf("/p/%d", i), 200, nil)
	}
	got, ok := h.Entries("a")
	if !ok || len(got) != history.DefaultSize {
		t.Fatalf("%d entries (ok %v), want %d", len(got), ok, history.DefaultSize)
	}
	for i, e := range got {
		if want := fmt.Sprintf("/p/%d", history.DefaultSize+9-i); e.Path != want {
			t.Fatalf("entry %d: path %q, want %q", i, e.Path, want)
		}
	}
}

func TestEntryContent(t *testing.T) {
	h := history.New([]string{"a", "b"}, history.DefaultSize)
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
	h := history.New(vms, history.DefaultSize)
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
		if len(got) != history.DefaultSize {
			t.Fatalf("%s: %d entries, want %d", vm, len(got), history.DefaultSize)
		}
		for _, e := range got {
			if want := fmt.Sprintf("/g/%d", e.Status-200); e.Path != want {
				t.Fatalf("%s: torn entry: path %q with status %d", vm, e.Path, e.Status)
			}
		}
	}
}

// TestBytesPerVM measures the history of 100k VMs that have each made
// a request, and so have a ring (a VM that never calls has none: see
// TestIdleVMsCostLittle).
func TestBytesPerVM(t *testing.T) {
	const n = 100_000
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("vm-%06d", i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	h := history.New(names, history.DefaultSize)
	for _, vm := range names {
		record(h, vm, "/p", 200, nil)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("history of %d VMs: %.0f bytes per VM (%d entries each)", n, per, history.DefaultSize)
	if per > 3000 {
		t.Errorf("%.0f bytes per VM, want at most 3000", per)
	}
	runtime.KeepAlive(h)
	runtime.KeepAlive(names)
}

// TestMadeUpPathsLeaveRoom checks that a VM asking for endless made-up
// paths, each refused, cannot take the room of the paths other VMs are
// answered on: refused requests' strings fill at most half the table.
func TestMadeUpPathsLeaveRoom(t *testing.T) {
	h := history.New([]string{"hostile", "good"}, history.DefaultSize)
	for i := range 5000 {
		record(h, "hostile", fmt.Sprintf("/made/up/%d", i), 404, nil)
		if i == 10 {
			if got, _ := h.Entries("hostile"); got[0].Path != "/made/up/10" {
				t.Errorf("an early made-up path was recorded as %q", got[0].Path)
			}
		}
	}
	got, _ := h.Entries("hostile")
	if got[0].Path != "(other)" {
		t.Errorf("the 5000th made-up path was recorded as %q, want (other)", got[0].Path)
	}
	for i := range 400 {
		record(h, "good", fmt.Sprintf("/computeMetadata/v1/instance/k%d", i), 200, nil)
	}
	got, _ = h.Entries("good")
	for _, e := range got {
		if e.Path == "(other)" {
			t.Fatalf("a path answered 200 was recorded as (other) after a VM's made-up paths")
		}
	}
	if want := "/computeMetadata/v1/instance/k399"; got[0].Path != want {
		t.Errorf("newest path %q, want %q", got[0].Path, want)
	}
}

// TestSize checks the size a History is built with: a ring of that many,
// none for 0 (but the Stats), and at most MaxSize.
func TestSize(t *testing.T) {
	if h := history.New([]string{"a"}, 0); h == nil {
		t.Fatal("New with size 0 returned no History")
	} else {
		record(h, "a", "/p", 200, nil)
		if got, ok := h.Entries("a"); !ok || len(got) != 0 {
			t.Fatalf("size 0: %d entries (ok %v), want none", len(got), ok)
		}
		if st, _ := h.Stats("a"); st.Requests != 1 {
			t.Fatalf("size 0: %d requests counted, want 1", st.Requests)
		}
	}
	var none *history.History
	record(none, "a", "/p", 200, nil) // records nothing, does not panic
	if _, ok := none.Entries("a"); ok {
		t.Error("a nil History has entries")
	}
	for _, c := range []struct{ size, keeps int }{{1, 1}, {5, 5}, {history.MaxSize + 100, history.MaxSize}} {
		h := history.New([]string{"a", "b"}, c.size)
		for i := range c.keeps + 7 {
			record(h, "a", fmt.Sprintf("/p/%d", i%1000), 200, nil)
		}
		got, _ := h.Entries("a")
		if len(got) != c.keeps || got[0].Path != fmt.Sprintf("/p/%d", (c.keeps+6)%1000) {
			t.Errorf("size %d: %d entries, newest %q; want %d", c.size, len(got), got[0].Path, c.keeps)
		}
		if got, _ := h.Entries("b"); len(got) != 0 {
			t.Errorf("size %d: b has %d entries", c.size, len(got))
		}
	}
}

// TestRecordedStringsArePrintable: a VM's path or api-version with
// control characters (a terminal escape sequence, a tab, a newline) or
// bytes that are not UTF-8 is recorded with each shown as '?', so that
// vm show and report cannot write escapes to the operator's terminal.
func TestRecordedStringsArePrintable(t *testing.T) {
	h := history.New([]string{"a"}, history.DefaultSize)
	for _, c := range []struct{ path, version, wantPath, wantVersion string }{
		{"/metadata/\x1b[2J\tx\ny\xff", "2020-07-01\x07", `"/metadata/\x1b[2J\tx\ny\xff"`, `"2020-07-01\a"`},
		// Bidirectional overrides and isolates, zero-width and no-break
		// spaces, line separators: escaped, as the audit log does.
		{"/metadata/\u202eabc", "2020-07-01\u2066x\u2069", `"/metadata/\u202eabc"`, `"2020-07-01\u2066x\u2069"`},
		{"/a\u200bb\u00a0c\u2028d\u0085", "", `"/a\u200bb\u00a0c\u2028d\u0085"`, ""},
		// A quote or a backslash: quoted, so it cannot pass for an escape.
		{`/a"b\c`, "", `"/a\"b\\c"`, ""},
		{"/metadata/scheduledevents", "2020-07-01", "/metadata/scheduledevents", "2020-07-01"},
	} {
		for range 2 { // the same raw string again maps to the same entry
			w := h.Start(httptest.NewRecorder(), "a")
			w.WriteHeader(400)
			h.Done(w, history.Azure, "GET", c.path, c.version)
			got, _ := h.Entries("a")
			if got[0].Path != c.wantPath || got[0].APIVersion != c.wantVersion {
				t.Errorf("%q %q recorded as %q %q, want %q %q", c.path, c.version, got[0].Path, got[0].APIVersion, c.wantPath, c.wantVersion)
			}
		}
	}
}

// TestStartAtDoneAfter: a request recorded with the caller's clock
// readings is entered at the start it was given, with the latency it
// was given; the Start and Done it stands in for measure the same.
func TestStartAtDoneAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := history.New([]string{"a", "b"}, history.DefaultSize)
		start := time.Now().Add(-time.Minute)
		w := h.StartAt(httptest.NewRecorder(), "a", start)
		w.WriteHeader(http.StatusOK)
		h.DoneAfter(w, 1500*time.Microsecond, history.Azure, "GET", "/metadata/scheduledevents", "2020-07-01")

		w = h.Start(httptest.NewRecorder(), "b")
		time.Sleep(1500 * time.Microsecond)
		h.Done(w, history.Azure, "GET", "/metadata/scheduledevents", "2020-07-01")

		for vm, at := range map[string]time.Time{"a": start, "b": time.Now().Add(-1500 * time.Microsecond)} {
			got, _ := h.Entries(vm)
			if len(got) != 1 {
				t.Fatalf("%s: %d entries, want 1", vm, len(got))
			}
			if e := got[0]; !e.Time.Equal(at) || e.Latency != 1500*time.Microsecond || e.Status != http.StatusOK {
				t.Errorf("%s: entry at %v, latency %v, status %d; want %v, 1.5ms, 200", vm, e.Time, e.Latency, e.Status, at)
			}
		}
	})
}

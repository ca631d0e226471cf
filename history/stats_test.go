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

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/history"
)

// call records one request of vm begun now that takes d, noting what
// note notes, answered with status.
func call(h *history.History, vm string, api history.API, version string, status int, d time.Duration, note func(http.ResponseWriter)) {
	w := h.Start(httptest.NewRecorder(), vm)
	if note != nil {
		note(w)
	}
	time.Sleep(d)
	w.WriteHeader(status)
	h.Done(w, api, "GET", "/metadata/scheduledevents", version)
}

// TestStatsGaps checks the calls, times and gaps counted, in a bubble
// where time is exact: gaps run from a request's end to the next one's
// start, a gap while an event is pending counts from the event's
// appearance, and only those over SlowGap count as slow: 7 s does, 6 s,
// SlowGap itself, does not.
func TestStatsGaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := history.New([]string{"a", "b"}, 4)
		t0 := time.Now()
		call(h, "a", history.Azure, "2020-07-01", 200, 100*time.Millisecond, nil) // 0 to 0.1
		time.Sleep(900 * time.Millisecond)
		call(h, "a", history.Azure, "2020-07-01", 200, 0, nil) // 1.0: gap 0.9
		time.Sleep(2 * time.Second)
		ev := &forewarn.Event{ID: "E1", Status: forewarn.Scheduled, Created: time.Now(), NotBefore: time.Now().Add(time.Minute)}
		ref := history.NewRef(ev) // appears at 3.0
		time.Sleep(7 * time.Second)
		call(h, "a", history.Azure, "2020-07-01", 200, 0, func(w http.ResponseWriter) { h.See(w, ref) }) // 10.0: gap 9, pending 7
		time.Sleep(6 * time.Second)
		call(h, "a", history.Azure, "2020-07-01", 200, 0, func(w http.ResponseWriter) { h.See(w, ref) }) // 16.0: gap 6, pending 6
		time.Sleep(time.Second)
		call(h, "a", history.Azure, "2020-07-01", 200, 0, func(w http.ResponseWriter) { h.See(w, ref) }) // 17.0: gap 1

		st, ok := h.Stats("a")
		if !ok {
			t.Fatal("no stats for a")
		}
		at := func(d time.Duration) time.Time { return t0.Add(d).UTC() }
		if st.Requests != 5 || !st.First.Equal(at(0)) || !st.Last.Equal(at(17*time.Second)) || !st.LastEnd.Equal(at(17*time.Second)) {
			t.Errorf("requests %d, first %v, last %v, last end %v", st.Requests, st.First, st.Last, st.LastEnd)
		}
		if st.LongestGap != 9*time.Second || !st.LongestGapEnd.Equal(at(10*time.Second)) {
			t.Errorf("longest gap %v ending %v, want 9s ending at 10s", st.LongestGap, st.LongestGapEnd)
		}
		if st.LongestPendingGap != 7*time.Second || !st.LongestPendingGapEnd.Equal(at(10*time.Second)) {
			t.Errorf("longest pending gap %v ending %v, want 7s ending at 10s", st.LongestPendingGap, st.LongestPendingGapEnd)
		}
		if st.SlowGaps != 1 || history.SlowGap(history.Azure) != 6*time.Second {
			t.Errorf("%d slow gaps over %v, want 1 over 6s (7s; 6s is not over)", st.SlowGaps, history.SlowGap(history.Azure))
		}
		if len(st.APIVersions) != 1 || st.APIVersions[0] != (history.VersionCount{Version: "2020-07-01", Requests: 5}) {
			t.Errorf("api-versions %+v", st.APIVersions)
		}
		seen, ok := h.Seen("E1")
		if !ok || seen.By != "a" || !seen.At.Equal(at(10*time.Second)) || !seen.NotBefore.Equal(ev.NotBefore.UTC()) {
			t.Errorf("E1 seen %+v (ok %v), want by a at 10s with its NotBefore", seen, ok)
		}
		if st, _ := h.Stats("b"); st.Requests != 0 || !st.First.IsZero() {
			t.Errorf("b: %+v, want nothing", st)
		}
	})
}

// TestStatsOverlap checks that a request begun while another is in
// flight ends no gap, and that a held maintenance-event long-poll is
// counted as held until it is done.
func TestStatsOverlap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := history.New([]string{"g"}, 0)
		call(h, "g", history.GCE, "", 200, 0, nil)
		time.Sleep(2 * time.Second)
		poll := h.Start(httptest.NewRecorder(), "g") // 2.0, held to 62.0
		history.NoteLongPoll(poll, true, true)
		history.NoteHeld(poll)
		if st, _ := h.Stats("g"); st.HeldLongPolls != 1 || st.InFlight != 1 {
			t.Errorf("while held: %d held, %d in flight, want 1 and 1", st.HeldLongPolls, st.InFlight)
		}
		time.Sleep(30 * time.Second)
		call(h, "g", history.GCE, "", 200, 0, func(w http.ResponseWriter) { history.NoteLongPoll(w, false, false) }) // 32.0, overlapping
		time.Sleep(30 * time.Second)
		poll.WriteHeader(200)
		h.Done(poll, history.GCE, "GET", "/computeMetadata/v1/instance/maintenance-event", "")
		time.Sleep(time.Second)
		call(h, "g", history.GCE, "", 200, 0, nil) // 63.0: gap 1
		st, _ := h.Stats("g")
		if st.LongestGap != 2*time.Second {
			t.Errorf("longest gap %v, want 2s (a held long-poll is no gap)", st.LongestGap)
		}
		if st.HeldLongPolls != 0 || st.InFlight != 0 || st.MaintenanceLongPolls != 1 || st.NoETag != 1 {
			t.Errorf("after: %d held, %d in flight, %d maintenance-event long-polls, %d without last_etag; want 0, 0, 1, 1",
				st.HeldLongPolls, st.InFlight, st.MaintenanceLongPolls, st.NoETag)
		}
	})
}

// TestStatsCounts checks the counts of refused, throttled and approving
// requests, and that the api-versions kept per VM are bounded.
func TestStatsCounts(t *testing.T) {
	h := history.New([]string{"a"}, 8)
	for range 3 {
		call(h, "a", history.Azure, "2020-07-01", 400, 0, history.NoteNoHeader)
	}
	for range 2 {
		call(h, "a", history.Azure, "2020-07-01", 429, 0, nil)
	}
	for i := range 10 {
		call(h, "a", history.Azure, fmt.Sprintf("2017-0%d-01", i), 400, 0, nil)
	}
	w := h.Start(httptest.NewRecorder(), "a")
	h.NoteApproval(w, "T1", true, false)
	h.NoteApproval(w, "T2", true, true)
	h.NoteApproval(w, "R1", false, false)
	h.Done(w, history.Azure, "POST", "/metadata/scheduledevents", "2020-07-01")
	st, _ := h.Stats("a")
	if st.NoHeader != 3 || st.Throttled != 2 || st.Requests != 16 {
		t.Errorf("no header %d, throttled %d, requests %d; want 3, 2, 16", st.NoHeader, st.Throttled, st.Requests)
	}
	if len(st.APIVersions) != 4 || st.OtherVersions != 7 || st.APIVersions[0].Requests != 6 {
		t.Errorf("api-versions %+v, other %d; want 4 kept (2020-07-01 6 times) and 7 others", st.APIVersions, st.OtherVersions)
	}
	if st.ForeignApprovals != 2 || st.LateApprovals != 1 || st.LastForeign != "T2" || st.LastLate != "T2" {
		t.Errorf("approvals: foreign %d (last %q), late %d (last %q); want 2 (T2), 1 (T2)",
			st.ForeignApprovals, st.LastForeign, st.LateApprovals, st.LastLate)
	}
	if _, ok := h.Seen("R1"); ok {
		t.Error("an unremarkable approval made a mark")
	}
}

// TestStatsConcurrent records from many goroutines and checks that no
// request is lost from the counts.
func TestStatsConcurrent(t *testing.T) {
	h := history.New([]string{"a", "b"}, 16)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for range 500 {
				call(h, []string{"a", "b"}[g%2], history.Azure, "2019-08-01", 429, 0, nil)
			}
		})
	}
	wg.Wait()
	for _, vm := range []string{"a", "b"} {
		if st, _ := h.Stats(vm); st.Requests != 4000 || st.Throttled != 4000 || st.InFlight != 0 {
			t.Errorf("%s: %d requests, %d throttled, %d in flight; want 4000, 4000, 0", vm, st.Requests, st.Throttled, st.InFlight)
		}
	}
}

// TestStatsBytesPerVM measures the accumulators of 100k VMs kept
// without a request history (--request-history 0), each having made a
// request, and so having its ring.
func TestStatsBytesPerVM(t *testing.T) {
	const n = 100_000
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("vm-%06d", i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	h := history.New(names, 0)
	for _, vm := range names {
		call(h, vm, history.Azure, "2020-07-01", 200, 0, nil)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("stats of %d VMs without a history: %.0f bytes per VM", n, per)
	if per > 600 {
		t.Errorf("%.0f bytes per VM, want at most 600", per)
	}
	runtime.KeepAlive(h)
	runtime.KeepAlive(names)
}

// BenchmarkRecord is the per-request cost of the history and its Stats:
// Start, a read of one event (See) and Done, for a GET at an
// api-version, without the handler around them.
func BenchmarkRecord(b *testing.B) {
	h := history.New([]string{"a"}, history.DefaultSize)
	ref := history.NewRef(&forewarn.Event{ID: "E1", Status: forewarn.Scheduled, Created: time.Now(), NotBefore: time.Now().Add(time.Hour)})
	rec := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		w := h.Start(rec, "a")
		h.See(w, ref)
		h.Done(w, history.Azure, "GET", "/metadata/scheduledevents", "2020-07-01")
	}
}

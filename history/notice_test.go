package history_test

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/history"
)

// evRefs is one event as documents show it: its Ref while Scheduled,
// and once Started (at started).
type evRefs struct {
	ev     *forewarn.Event
	sched  *history.Ref
	start  *history.Ref
	onlyAt *history.Ref // a key that shows it only once started
}

// newNotice returns event id, created now with a NotBefore after
// notice, and its Refs; it starts at started.
func newNotice(id string, notice time.Duration, started time.Time) evRefs {
	ev := &forewarn.Event{ID: id, Type: forewarn.Reboot, Status: forewarn.Scheduled, Created: time.Now(), NotBefore: time.Now().Add(notice)}
	s := *ev
	s.Status, s.StartedAt, s.NotBefore = forewarn.Started, started, time.Time{}
	return evRefs{ev: ev, sched: history.NewRef(ev), start: history.NewRef(&s), onlyAt: history.NewStartedRef(&s)}
}

// get records a GET of vm, at once, that reads the events refs refer to.
func get(h *history.History, vm string, refs ...*history.Ref) {
	call(h, vm, history.Azure, "2020-07-01", 200, 0, func(w http.ResponseWriter) {
		for _, r := range refs {
			h.See(w, r)
		}
	})
}

// TestGapOverNoticeOutlivesStart: a gap that overlapped an event's
// notice is counted when it ends, whatever the request that ends it
// reads, for its part before the event started (issue 22.1). Each VM has
// its own Reboot, created at 1 s with a 15-second notice (NotBefore at
// 16 s), and calls again at 4 minutes:
//   - read read it Scheduled at 1.5 s and reads it Started: one slow
//     gap of 14.5 s;
//   - ended read it Scheduled at 1.5 s and reads nothing (it has ended):
//     the same;
//   - never read nothing during the notice and reads it Started: one
//     slow gap of 15 s, and the event read after it started, 3m44s late;
//   - approved read it at 1.5 s and approved it, so it started then: its
//     silence after is no gap while pending;
//   - steady polls every second: nothing;
//   - preempted reads its event at a key that shows it only once
//     started: nothing.
func TestGapOverNoticeOutlivesStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vms := []string{"read", "ended", "never", "approved", "steady", "preempted"}
		h := history.New(vms, 0)
		t0 := time.Now()
		at := func(d time.Duration) time.Time { return t0.Add(d).UTC() }
		for _, vm := range vms {
			get(h, vm)
		}
		time.Sleep(time.Second)
		ns := map[string]evRefs{}
		for _, vm := range vms {
			started := at(16 * time.Second)
			if vm == "approved" {
				started = at(1500 * time.Millisecond)
			}
			ns[vm] = newNotice("E-"+vm, 15*time.Second, started)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			n := ns["steady"]
			for time.Sleep(500 * time.Millisecond); time.Since(t0) < 4*time.Minute+10*time.Second; time.Sleep(time.Second) {
				if time.Since(t0) < 16*time.Second {
					get(h, "steady", n.sched)
				} else {
					get(h, "steady", n.start)
				}
			}
		})
		time.Sleep(500 * time.Millisecond) // 1.5 s
		for _, vm := range []string{"read", "ended", "approved"} {
			get(h, vm, ns[vm].sched)
		}
		w := h.Start(httptest.NewRecorder(), "approved")
		history.NoteApproved(w, []string{ns["approved"].ev.ID})
		h.Done(w, history.Azure, "POST", "/metadata/scheduledevents", "2020-07-01")

		time.Sleep(4*time.Minute - 1500*time.Millisecond) // 4 minutes
		get(h, "read", ns["read"].start)
		get(h, "ended")
		get(h, "never", ns["never"].start)
		get(h, "approved")
		get(h, "preempted", ns["preempted"].onlyAt)
		time.Sleep(time.Second)
		get(h, "never", ns["never"].start) // read again: not first read
		wg.Wait()

		type want struct {
			slow         uint64
			pending, end time.Duration
			late         uint64
		}
		wants := map[string]want{
			"read":      {1, 14500 * time.Millisecond, 4 * time.Minute, 0},
			"ended":     {1, 14500 * time.Millisecond, 4 * time.Minute, 0},
			"never":     {1, 15 * time.Second, 4 * time.Minute, 1},
			"approved":  {0, 500 * time.Millisecond, 1500 * time.Millisecond, 0},
			"steady":    {0, time.Second, 2500 * time.Millisecond, 0},
			"preempted": {0, 0, 0, 0},
		}
		for _, vm := range vms {
			st, _ := h.Stats(vm)
			w := wants[vm]
			end := time.Time{}
			if w.pending > 0 {
				end = at(w.end)
			}
			if st.SlowGaps != w.slow || st.LongestPendingGap != w.pending || !st.LongestPendingGapEnd.Equal(end) || st.ReadsAfterStart != w.late {
				t.Errorf("%s: %d slow gaps, longest while pending %v ending %v, %d read after start; want %d, %v ending %v, %d",
					vm, st.SlowGaps, st.LongestPendingGap, st.LongestPendingGapEnd, st.ReadsAfterStart, w.slow, w.pending, end, w.late)
			}
		}
		st, _ := h.Stats("never")
		if st.LastReadAfterStart != "E-never" || st.LastReadLate != 3*time.Minute+44*time.Second || st.LastReadNotice != 15*time.Second {
			t.Errorf("never: latest read after start %q, %v late, notice %v; want E-never, 3m44s, 15s",
				st.LastReadAfterStart, st.LastReadLate, st.LastReadNotice)
		}
		seen, _ := h.Seen("E-never")
		if seen.LateReaders != 1 || seen.FirstLate != "never" || !seen.FirstLateAt.Equal(at(4*time.Minute)) || seen.By != "never" {
			t.Errorf("E-never seen %+v; want first read by never, late, at 4m", seen)
		}
		if seen, _ := h.Seen("E-read"); seen.LateReaders != 0 || seen.By != "read" {
			t.Errorf("E-read seen %+v; want read in time by read", seen)
		}
		// The window the VM's next gap is checked against: until the start
		// a read showed, or else the NotBefore it read.
		if st, _ := h.Stats("read"); !st.PendingSince.Equal(at(time.Second)) || !st.PendingUntil.Equal(at(16*time.Second)) {
			t.Errorf("read: pending %v to %v, want 1s to 16s", st.PendingSince, st.PendingUntil)
		}
		if st, _ := h.Stats("approved"); !st.PendingSince.IsZero() || !st.PendingUntil.IsZero() {
			t.Errorf("approved: pending %v to %v, want none after its approval", st.PendingSince, st.PendingUntil)
		}
	})
}

// TestSlowGapLeavesRoomForJitter: over a 10-minute notice, a client
// polling every 5 s (many clients' default) whose timer fires up to
// 0.9 s late and whose requests take up to 50 ms is never flagged
// (issue 22.2); one polling every 7 s is, for each of its 85 gaps that
// lie in the notice (the 86th ends 2 s after the event started, 5 s of
// it in the notice).
func TestSlowGapLeavesRoomForJitter(t *testing.T) {
	if history.SlowGap(history.Azure) != 6*time.Second || history.SlowGap(history.GCE) != 6*time.Second || history.SlowGap(history.AWS) != 30*time.Second {
		t.Errorf("SlowGap: %v on Azure, %v on Compute Engine, %v on EC2; want 6s, 6s, 30s",
			history.SlowGap(history.Azure), history.SlowGap(history.GCE), history.SlowGap(history.AWS))
	}
	synctest.Test(t, func(t *testing.T) {
		h := history.New([]string{"five", "seven"}, 0)
		n := newNotice("E1", 10*time.Minute, time.Now().Add(10*time.Minute))
		end := time.Now().Add(11 * time.Minute)
		poll := func(vm string, every time.Duration, rng *rand.Rand) {
			for time.Now().Before(end) {
				ref := n.sched
				if !time.Now().Before(n.ev.NotBefore) {
					ref = n.start
				}
				var latency, late time.Duration
				if rng != nil {
					latency = time.Duration(rng.Int64N(int64(50 * time.Millisecond)))
					late = time.Duration(rng.Int64N(int64(900 * time.Millisecond)))
				}
				call(h, vm, history.Azure, "2020-07-01", 200, latency, func(w http.ResponseWriter) { h.See(w, ref) })
				time.Sleep(every + late)
			}
		}
		var wg sync.WaitGroup
		wg.Go(func() { poll("five", 5*time.Second, rand.New(rand.NewPCG(22, 2))) })
		wg.Go(func() { poll("seven", 7*time.Second, nil) })
		wg.Wait()
		five, _ := h.Stats("five")
		if five.SlowGaps != 0 || five.LongestPendingGap <= 5*time.Second || five.LongestPendingGap >= 6*time.Second || five.Requests < 100 {
			t.Errorf("every 5 s with jitter: %d requests, %d slow gaps, longest while pending %v; want over 100, none, between 5s and 6s",
				five.Requests, five.SlowGaps, five.LongestPendingGap)
		}
		seven, _ := h.Stats("seven")
		if seven.SlowGaps != 85 || seven.LongestPendingGap != 7*time.Second {
			t.Errorf("every 7 s: %d slow gaps, longest while pending %v; want 85, 7s", seven.SlowGaps, seven.LongestPendingGap)
		}
	})
}

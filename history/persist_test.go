package history_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/history"
	"github.com/forewarn/forewarn/mem"
)

// keptFleet is two Azure VMs of no scope.
var keptFleet = &forewarn.Fleet{VMs: []*forewarn.VM{{Name: "a", Provider: forewarn.Azure}, {Name: "b", Provider: forewarn.Azure}}}

// serverOn starts an engine on store and a History following it, as a
// server process does: a restart is another pair on the same store.
func serverOn(t *testing.T, store forewarn.Store) (*engine.Engine, *history.History) {
	t.Helper()
	return serverOnFleet(t, store, keptFleet)
}

// serverOnFleet is serverOn with the fleet fleet.
func serverOnFleet(t *testing.T, store forewarn.Store, fleet *forewarn.Fleet) (*engine.Engine, *history.History) {
	t.Helper()
	e, err := engine.New(t.Context(), engine.Config{Store: store, Fleet: fleet, AllowShortNotice: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	h := history.New(nil, history.DefaultSize)
	h.Follow(e)
	return e, h
}

// refsOf returns the Ref a document shows event id with now.
func refOf(t *testing.T, e *engine.Engine, id string) *history.Ref {
	t.Helper()
	ev, err := e.Event(id)
	if err != nil {
		t.Fatal(err)
	}
	return history.NewRef(ev)
}

// TestKeptAcrossRestart: what the servers counted of each VM and noted
// of each event is the same after a restart on the store; a read before
// the restart counts after it; the time no server ran is no gap.
func TestKeptAcrossRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := mem.New()
		e1, h1 := serverOn(t, store)
		for _, vm := range []string{"a", "b"} {
			e1.NoteRequest(vm) // their scheduled events enabled, as a server notes
			get(h1, vm)
		}
		evs, err := e1.CreateAll(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"a", "b"}, Notice: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 2 || evs[0].Resources[0] != "a" {
			t.Fatalf("events %+v, want a's and b's", evs)
		}
		time.Sleep(time.Second)
		get(h1, "a", refOf(t, e1, evs[0].ID)) // a reads its notice; b does not
		call(h1, "b", history.Azure, "2017-03-01", http.StatusTooManyRequests, 0, nil)
		call(h1, "b", history.Azure, "", http.StatusBadRequest, 0, history.NoteNoHeader)
		time.Sleep(2 * time.Second)
		beforeA, _ := h1.Stats("a")
		beforeB, _ := h1.Stats("b")
		seen, _ := h1.Seen(evs[0].ID)
		e1.Close()

		time.Sleep(30 * time.Second) // no server runs; the events start meanwhile
		e2, h2 := serverOn(t, store)
		afterA, _ := h2.Stats("a")
		afterB, _ := h2.Stats("b")
		if afterA.Requests != beforeA.Requests || afterA.LastEnd != beforeA.LastEnd || afterA.PendingUntil != beforeA.PendingUntil {
			t.Errorf("a after the restart: %+v\nwant as before: %+v", afterA, beforeA)
		}
		if afterB.Requests != 3 || afterB.Throttled != 1 || afterB.NoHeader != 1 || len(afterB.APIVersions) != 2 ||
			afterB.APIVersions[1] != beforeB.APIVersions[1] {
			t.Errorf("b after the restart: %+v\nwant as before: %+v", afterB, beforeB)
		}
		if got, _ := h2.Seen(evs[0].ID); got != seen || got.By != "a" {
			t.Errorf("a's Reboot after the restart: %+v, want %+v", got, seen)
		}

		// a reads its Reboot Started: it read the notice before the
		// restart, and the 30 s no server ran are no gap. b reads its own
		// for the first time: read after its start, its notice unread.
		get(h2, "a", refOf(t, e2, evs[0].ID))
		get(h2, "b", refOf(t, e2, evs[1].ID))
		a, _ := h2.Stats("a")
		b, _ := h2.Stats("b")
		if a.ReadsAfterStart != 0 || a.SlowGaps != 0 || a.LongestPendingGap > 3*time.Second {
			t.Errorf("a: %d reads after the start, %d slow gaps, the longest while pending %v; want none, a gap of 2 s",
				a.ReadsAfterStart, a.SlowGaps, a.LongestPendingGap)
		}
		if b.ReadsAfterStart != 1 {
			t.Errorf("b: %d reads after the start, want 1", b.ReadsAfterStart)
		}
		if s, _ := h2.Seen(evs[1].ID); s.By != "b" || s.LateReaders != 1 {
			t.Errorf("b's Reboot: %+v, want seen by b, late", s)
		}
	})
}

// TestSightingsShared: what one replica notes of an event's readers, the
// others report too.
func TestSightingsShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := mem.New()
		e1, h1 := serverOn(t, store)
		_, h2 := serverOn(t, store)
		e1.NoteRequest("a")
		get(h1, "a")
		ev, err := e1.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"a"}, Notice: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		get(h1, "a", refOf(t, e1, ev.ID))
		synctest.Wait() // the sighting written, and followed
		if s, ok := h2.Seen(ev.ID); !ok || s.By != "a" || !s.At.Equal(time.Now()) {
			t.Errorf("the other replica's report of the Reboot: %+v, %v; want seen by a now", s, ok)
		}
	})
}

// flakyStore is a store whose commits fail while down is set.
type flakyStore struct {
	*mem.Store
	down atomic.Bool
}

func (s *flakyStore) Commit(ctx context.Context, c *forewarn.Change) (int64, error) {
	if s.down.Load() {
		return 0, errors.New("store down")
	}
	return s.Store.Commit(ctx, c)
}

// TestClientRecordKeptAfterFailedWrite: a VM's client record whose write
// failed is still unsaved, and written when the engine closes.
func TestClientRecordKeptAfterFailedWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &flakyStore{Store: mem.New()}
		e1, h1 := serverOn(t, store)
		store.down.Store(true)
		get(h1, "a")
		e1.NoteRequest("a") // its first call: its VM record is written at once
		synctest.Wait()
		if got := h1.Unsaved(); !slices.Equal(got, []string{"a"}) {
			t.Errorf("unsaved after a failed write: %q, want a", got)
		}
		store.down.Store(false)
		e1.Close()

		_, h2 := serverOn(t, store)
		if st, _ := h2.Stats("a"); st.Requests != 1 {
			t.Errorf("a after the restart: %d requests, want 1", st.Requests)
		}
	})
}

// crashStore is a store whose commits take a millisecond, as a disk's,
// until the server crashes: from then on it takes no write, as the store
// of a killed server.
type crashStore struct {
	*mem.Store
	crashed atomic.Bool
}

func (s *crashStore) Commit(ctx context.Context, c *forewarn.Change) (int64, error) {
	time.Sleep(time.Millisecond)
	if s.crashed.Load() {
		return 0, errors.New("the server crashed")
	}
	return s.Store.Commit(ctx, c)
}

// TestKeptAcrossCrash: what the report needs is in the store within 2 s
// of the request, so that a crash (no write once the server is killed)
// loses none of it: 600 VMs, more than the engine queues at once, read
// their Reboot's notice together, and each one's read counts after the
// crash (not a read after the start); two of them count a refused and a
// throttled request after their read, counts that are findings.
func TestKeptAcrossCrash(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 600
		fleet := &forewarn.Fleet{}
		var names []string
		for i := range n {
			name := fmt.Sprintf("vm%03d", i)
			names = append(names, name)
			fleet.VMs = append(fleet.VMs, &forewarn.VM{Name: name, Provider: forewarn.Azure, AvailabilitySet: "as"})
		}
		store := &crashStore{Store: mem.New()}
		e1, h1 := serverOnFleet(t, store, fleet)
		for _, name := range names {
			e1.NoteRequest(name) // their scheduled events enabled, as a server notes
			get(h1, name)
		}
		ev, err := e1.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: names, Notice: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		ref := refOf(t, e1, ev.ID)
		for _, name := range names {
			get(h1, name, ref)
		}
		time.Sleep(time.Second) // what the engine saves at once is saved
		call(h1, "vm000", history.Azure, "", http.StatusBadRequest, 0, history.NoteNoHeader)
		call(h1, "vm001", history.Azure, "2020-07-01", http.StatusTooManyRequests, 0, nil)
		time.Sleep(2 * time.Second)
		store.crashed.Store(true)
		e1.Close()

		time.Sleep(30 * time.Second) // no server runs; the Reboot starts meanwhile
		e2, h2 := serverOnFleet(t, store.Store, fleet)
		ref = refOf(t, e2, ev.ID)
		late := 0
		for _, name := range names {
			get(h2, name, ref)
			if st, _ := h2.Stats(name); st.ReadsAfterStart != 0 {
				late++
			}
		}
		if late != 0 {
			t.Errorf("after the crash, %d of %d VMs read their Reboot only after it started, want none: they read its notice before", late, n)
		}
		if s, _ := h2.Seen(ev.ID); s.By != "vm000" || s.LateReaders != 0 {
			t.Errorf("the Reboot after the crash: %+v, want seen by vm000, no late reader", s)
		}
		if st, _ := h2.Stats("vm000"); st.NoHeader != 1 || st.Requests != 4 {
			t.Errorf("vm000 after the crash: %d requests, %d without the header; want 4, 1", st.Requests, st.NoHeader)
		}
		if st, _ := h2.Stats("vm001"); st.Throttled != 1 || st.Requests != 4 {
			t.Errorf("vm001 after the crash: %d requests, %d throttled; want 4, 1", st.Requests, st.Throttled)
		}
	})
}

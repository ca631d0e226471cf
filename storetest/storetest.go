// Package storetest is the conformance suite that every forewarn.Store
// implementation passes. A backend's tests call Run, and RunDurable when
// the backend keeps its state across a restart:
//
//	func TestStore(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) forewarn.Store { return mem.New() })
//	}
package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
)

// wait bounds how long the suite waits for a watch channel. It is a
// deadline for a failing store, never a sleep.
const wait = 10 * time.Second

// Run runs the conformance suite. Each subtest calls open for a new,
// empty store; the suite closes it when the subtest ends.
func Run(t *testing.T, open func(t *testing.T) forewarn.Store) {
	newStore := func(t *testing.T) forewarn.Store {
		t.Helper()
		s := open(t)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}

	t.Run("EventFields", testEventFields)
	t.Run("EmptyLoad", func(t *testing.T) { testEmptyLoad(t, newStore(t)) })
	t.Run("CommitAndLoad", func(t *testing.T) { testCommitAndLoad(t, newStore(t)) })
	t.Run("EmptyChange", func(t *testing.T) { testEmptyChange(t, newStore(t)) })
	t.Run("Conflict", func(t *testing.T) { testConflict(t, newStore(t)) })
	t.Run("IncarnationBackwards", func(t *testing.T) { testIncarnationBackwards(t, newStore(t)) })
	t.Run("InvalidChange", func(t *testing.T) { testInvalidChange(t, newStore(t)) })
	t.Run("ReplaceByID", func(t *testing.T) { testReplaceByID(t, newStore(t)) })
	t.Run("Deletes", func(t *testing.T) { testDeletes(t, newStore(t)) })
	t.Run("LoadReturnsCopies", func(t *testing.T) { testLoadReturnsCopies(t, newStore(t)) })
	t.Run("CommitCopies", func(t *testing.T) { testCommitCopies(t, newStore(t)) })
	t.Run("VMs", func(t *testing.T) {
		t.Run("RoundTrip", func(t *testing.T) { testVMsRoundTrip(t, newStore(t)) })
		t.Run("Replace", func(t *testing.T) { testVMsReplace(t, newStore(t)) })
		t.Run("Conflict", func(t *testing.T) { testVMsConflict(t, newStore(t)) })
		t.Run("Invalid", func(t *testing.T) { testVMsInvalid(t, newStore(t)) })
		t.Run("LoadReturnsCopies", func(t *testing.T) { testVMsLoadReturnsCopies(t, newStore(t)) })
		t.Run("CommitCopies", func(t *testing.T) { testVMsCommitCopies(t, newStore(t)) })
	})
	t.Run("ScaleSets", func(t *testing.T) { testScaleSets(t, newStore(t)) })
	t.Run("Inventory", func(t *testing.T) { runInventory(t, newStore) })
	t.Run("Sessions", func(t *testing.T) { runSessions(t, newStore) })
	t.Run("SigningKeys", func(t *testing.T) { runSigningKeys(t, newStore) })
	t.Run("Sightings", func(t *testing.T) { runSightings(t, newStore) })
	t.Run("Follow", func(t *testing.T) {
		t.Run("Receives", func(t *testing.T) { testFollowReceives(t, newStore(t)) })
		t.Run("Replays", func(t *testing.T) { testFollowReplays(t, newStore(t)) })
		t.Run("FromCurrent", func(t *testing.T) { testFollowFromCurrent(t, newStore(t)) })
		t.Run("Several", func(t *testing.T) { testFollowSeveral(t, newStore(t)) })
		t.Run("Unread", func(t *testing.T) { testFollowUnread(t, newStore(t)) })
		t.Run("ClosesOnCancel", func(t *testing.T) { testFollowClosesOnCancel(t, newStore(t)) })
		t.Run("ClosesOnClose", func(t *testing.T) { testFollowClosesOnClose(t, newStore(t)) })
	})
	t.Run("Closed", func(t *testing.T) { testClosed(t, newStore(t)) })
	t.Run("ConcurrentCommits", func(t *testing.T) { testConcurrentCommits(t, newStore(t)) })
}

// RunDurable checks that a store keeps its state across Close. open
// opens the store kept in dir, which the suite creates empty; the suite
// opens it several times, closing it in between.
func RunDurable(t *testing.T, open func(t *testing.T, dir string) forewarn.Store) {
	reopen := func(t *testing.T, dir string) forewarn.Store {
		t.Helper()
		s := open(t, dir)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}

	t.Run("Reopen", func(t *testing.T) {
		dir := t.TempDir()
		ctx := t.Context()
		a, b := fullEvent(1), scheduledEvent(2, time.Now())

		s := reopen(t, dir)
		wantRevision(t, commit(t, s, &forewarn.Change{
			Events:       []*forewarn.Event{a, b},
			Incarnations: map[string]int64{"vm-a": 1, "vm-b": 1},
			VMs:          map[string]*forewarn.VMRecord{"vm-a": vmRecord(1), "vm-b": vmRecord(2)},
		}), 1)
		a2 := a.Clone()
		a2.Status, a2.Description = forewarn.Canceled, "canceled by operator"
		nowSeen := &forewarn.VMRecord{LastSeen: time.Now()}
		wantRevision(t, commit(t, s, &forewarn.Change{
			Revision:     1,
			Events:       []*forewarn.Event{a2},
			Deletes:      []string{b.ID},
			Incarnations: map[string]int64{"vm-a": 7},
			VMs:          map[string]*forewarn.VMRecord{"vm-a": nowSeen, "vm-c": {}},
		}), 2)
		wantVMs2 := map[string]*forewarn.VMRecord{"vm-a": nowSeen, "vm-b": vmRecord(2), "vm-c": {}}
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}

		s = reopen(t, dir)
		st := load(t, s)
		wantState(t, st, 2, map[string]int64{"vm-a": 7, "vm-b": 1}, a2)
		wantVMs(t, st, wantVMs2)
		_, err := s.Commit(ctx, &forewarn.Change{Revision: 1})
		wantCode(t, err, forewarn.ECONFLICT)
		_, err = s.Commit(ctx, &forewarn.Change{Revision: 2, Incarnations: map[string]int64{"vm-a": 6}})
		wantCode(t, err, forewarn.EINVALID)
		f := s.Follow(ctx, 2)
		del := &forewarn.Change{Revision: 2, Deletes: []string{a.ID}}
		wantRevision(t, commit(t, s, del), 3)
		wantUpdate(t, recvUpdate(t, f), 3, del)
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}

		s = reopen(t, dir)
		st = load(t, s)
		wantState(t, st, 3, map[string]int64{"vm-a": 7, "vm-b": 1})
		wantVMs(t, st, wantVMs2)

		// Scale set records survive a reopen.
		sets := map[string]*forewarn.ScaleSetRecord{"ss": {TerminateTimeout: 12 * time.Minute}, "vmss": {TerminateTimeout: 5 * time.Minute, TerminateNotifications: true}}
		wantRevision(t, commit(t, s, &forewarn.Change{Revision: 3, ScaleSets: sets}), 4)
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		s = reopen(t, dir)
		wantScaleSets(t, load(t, s), sets)
	})

	t.Run("ReopenInventory", func(t *testing.T) { testInventoryReopen(t, reopen) })
	t.Run("ReopenSessions", func(t *testing.T) { testSessionsReopen(t, reopen) })
	t.Run("ReopenKeysAndSightings", func(t *testing.T) { testKeysReopen(t, reopen) })

	t.Run("ReopenEmpty", func(t *testing.T) {
		dir := t.TempDir()
		if err := reopen(t, dir).Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		s := reopen(t, dir)
		st := load(t, s)
		wantState(t, st, 0, map[string]int64{})
		wantVMs(t, st, map[string]*forewarn.VMRecord{})
		wantRevision(t, commit(t, s, &forewarn.Change{}), 1)
	})
}

// testEventFields fails when Event or Approval grow a field that
// eventDiff does not compare, or VMRecord one that vmDiff does not.
func testEventFields(t *testing.T) {
	if n := reflect.TypeFor[forewarn.Event]().NumField(); n != 19 {
		t.Errorf("forewarn.Event has %d fields, the suite compares 19: update eventDiff and fullEvent", n)
	}
	if n := reflect.TypeFor[forewarn.Approval]().NumField(); n != 2 {
		t.Errorf("forewarn.Approval has %d fields, the suite compares 2: update eventDiff", n)
	}
	if n := reflect.TypeFor[forewarn.VMRecord]().NumField(); n != 4 {
		t.Errorf("forewarn.VMRecord has %d fields, the suite compares 4: update vmDiff and vmRecord", n)
	}
}

func testEmptyLoad(t *testing.T, s forewarn.Store) {
	st := load(t, s)
	if st.Incarnations == nil {
		t.Error("Load on an empty store returned nil Incarnations, want an empty map")
	}
	if st.VMs == nil {
		t.Error("Load on an empty store returned nil VMs, want an empty map")
	}
	wantState(t, st, 0, map[string]int64{})
	wantVMs(t, st, map[string]*forewarn.VMRecord{})
}

func testCommitAndLoad(t *testing.T, s forewarn.Store) {
	a := fullEvent(1)
	b := scheduledEvent(2, time.Now()) // local times with monotonic readings
	rev := commit(t, s, &forewarn.Change{
		Events:       []*forewarn.Event{a, b},
		Incarnations: map[string]int64{"vm-a": 1, "vm-b": 3},
	})
	wantRevision(t, rev, 1)
	wantState(t, load(t, s), 1, map[string]int64{"vm-a": 1, "vm-b": 3}, a, b)

	// Incarnations not named in a change keep their value.
	rev = commit(t, s, &forewarn.Change{Revision: 1, Incarnations: map[string]int64{"vm-a": 2, "vm-c": 1}})
	wantRevision(t, rev, 2)
	wantState(t, load(t, s), 2, map[string]int64{"vm-a": 2, "vm-b": 3, "vm-c": 1}, a, b)
}

func testEmptyChange(t *testing.T, s forewarn.Store) {
	wantRevision(t, commit(t, s, &forewarn.Change{Revision: 0}), 1)
	wantRevision(t, commit(t, s, &forewarn.Change{Revision: 1}), 2)
	wantState(t, load(t, s), 2, map[string]int64{})
}

func testConflict(t *testing.T, s forewarn.Store) {
	a, b := fullEvent(1), scheduledEvent(2, time.Now())
	commit(t, s, &forewarn.Change{Events: []*forewarn.Event{a}, Incarnations: map[string]int64{"vm-a": 1}})

	for _, rev := range []int64{0, 2, -1} {
		_, err := s.Commit(t.Context(), &forewarn.Change{
			Revision:     rev,
			Events:       []*forewarn.Event{b},
			Deletes:      []string{a.ID},
			Incarnations: map[string]int64{"vm-a": 2, "vm-b": 1},
			VMs:          map[string]*forewarn.VMRecord{"vm-a": vmRecord(1)},
		})
		wantCode(t, err, forewarn.ECONFLICT)
	}
	st := load(t, s)
	wantState(t, st, 1, map[string]int64{"vm-a": 1}, a)
	wantVMs(t, st, map[string]*forewarn.VMRecord{})
	wantRevision(t, commit(t, s, &forewarn.Change{Revision: 1}), 2)
}

func testIncarnationBackwards(t *testing.T, s forewarn.Store) {
	a, b := fullEvent(1), scheduledEvent(2, time.Now())
	commit(t, s, &forewarn.Change{Events: []*forewarn.Event{a}, Incarnations: map[string]int64{"vm-a": 5, "vm-b": 2}})

	_, err := s.Commit(t.Context(), &forewarn.Change{
		Revision:     1,
		Events:       []*forewarn.Event{b},
		Deletes:      []string{a.ID},
		Incarnations: map[string]int64{"vm-a": 4, "vm-b": 3, "vm-c": 1},
		VMs:          map[string]*forewarn.VMRecord{"vm-a": vmRecord(1)},
	})
	wantCode(t, err, forewarn.EINVALID)
	st := load(t, s)
	wantState(t, st, 1, map[string]int64{"vm-a": 5, "vm-b": 2}, a)
	wantVMs(t, st, map[string]*forewarn.VMRecord{})

	// The same value, and a higher one, are accepted.
	wantRevision(t, commit(t, s, &forewarn.Change{Revision: 1, Incarnations: map[string]int64{"vm-a": 5}}), 2)
	wantRevision(t, commit(t, s, &forewarn.Change{Revision: 2, Incarnations: map[string]int64{"vm-a": 6}}), 3)
	wantState(t, load(t, s), 3, map[string]int64{"vm-a": 6, "vm-b": 2}, a)
}

func testInvalidChange(t *testing.T, s forewarn.Store) {
	for name, c := range map[string]*forewarn.Change{
		"nil change":   nil,
		"nil event":    {Events: []*forewarn.Event{fullEvent(1), nil}},
		"empty ID":     {Events: []*forewarn.Event{fullEvent(1), {Type: forewarn.Freeze}}},
		"empty VM":     {Events: []*forewarn.Event{fullEvent(1)}, Incarnations: map[string]int64{"": 1}},
		"nil and more": {Events: []*forewarn.Event{nil}, Incarnations: map[string]int64{"vm-a": 1}},
		"nil VM record": {
			Events:       []*forewarn.Event{fullEvent(1)},
			Incarnations: map[string]int64{"vm-a": 1},
			VMs:          map[string]*forewarn.VMRecord{"vm-a": vmRecord(1), "vm-b": nil},
		},
		"empty VM record name": {
			Events: []*forewarn.Event{fullEvent(1)},
			VMs:    map[string]*forewarn.VMRecord{"vm-a": vmRecord(1), "": vmRecord(2)},
		},
	} {
		_, err := s.Commit(t.Context(), c)
		if forewarn.ErrorCode(err) != forewarn.EINVALID {
			t.Errorf("%s: Commit err = %v (code %q), want code %q", name, err, forewarn.ErrorCode(err), forewarn.EINVALID)
		}
	}
	st := load(t, s)
	wantState(t, st, 0, map[string]int64{})
	wantVMs(t, st, map[string]*forewarn.VMRecord{})
}

func testReplaceByID(t *testing.T, s forewarn.Store) {
	a, b := fullEvent(1), fullEvent(2)
	commit(t, s, &forewarn.Change{Events: []*forewarn.Event{a, b}})

	a2 := &forewarn.Event{
		ID:          a.ID,
		Type:        forewarn.Freeze,
		Status:      forewarn.Completed,
		Resources:   []string{"vm-c"},
		NotBefore:   a.NotBefore.Add(time.Hour),
		Duration:    -1,
		Source:      forewarn.Platform,
		Description: "replaced",
		Lasts:       time.Minute,
		Created:     a.Created,
		StartedAt:   a.StartedAt.Add(time.Hour),
		EndedAt:     a.StartedAt.Add(2 * time.Hour),
	}
	wantRevision(t, commit(t, s, &forewarn.Change{Revision: 1, Events: []*forewarn.Event{a2}}), 2)
	wantState(t, load(t, s), 2, map[string]int64{}, a2, b)
}

func testDeletes(t *testing.T, s forewarn.Store) {
	a, b, c := fullEvent(1), fullEvent(2), scheduledEvent(3, time.Now())
	commit(t, s, &forewarn.Change{Events: []*forewarn.Event{a, b, c}})

	wantRevision(t, commit(t, s, &forewarn.Change{Revision: 1, Deletes: []string{b.ID, eventID(99)}}), 2)
	wantState(t, load(t, s), 2, map[string]int64{}, a, c)

	wantRevision(t, commit(t, s, &forewarn.Change{Revision: 2, Deletes: []string{a.ID, c.ID, b.ID}}), 3)
	wantState(t, load(t, s), 3, map[string]int64{})
}

func testLoadReturnsCopies(t *testing.T, s forewarn.Store) {
	a := fullEvent(1)
	commit(t, s, &forewarn.Change{Events: []*forewarn.Event{a}, Incarnations: map[string]int64{"vm-a": 1}})

	st := load(t, s)
	if len(st.Events) != 1 {
		t.Fatalf("Load returned %d events, want 1", len(st.Events))
	}
	e := st.Events[0]
	e.Status = forewarn.Canceled
	e.Resources[0] = "changed"
	e.Approvals[0].By = "changed"
	e.Approvals[0].At = time.Time{}
	st.Events[0] = fullEvent(2)
	st.Incarnations["vm-a"] = 99
	st.Incarnations["vm-z"] = 1

	wantState(t, load(t, s), 1, map[string]int64{"vm-a": 1}, a)
}

func testCommitCopies(t *testing.T, s forewarn.Store) {
	in := fullEvent(1)
	want := in.Clone()
	incs := map[string]int64{"vm-a": 1}
	commit(t, s, &forewarn.Change{Events: []*forewarn.Event{in}, Incarnations: incs})

	in.Status = forewarn.Canceled
	in.Resources[0] = "changed"
	in.Approvals[0].By = "changed"
	incs["vm-a"] = 99

	wantState(t, load(t, s), 1, map[string]int64{"vm-a": 1}, want)
}

func testVMsRoundTrip(t *testing.T, s forewarn.Store) {
	cet := time.FixedZone("CET", 3600)
	vms := map[string]*forewarn.VMRecord{
		"vm-a": vmRecord(1),
		"vm-b": {LastSeen: time.Now()}, // local, with a monotonic reading
		"vm-c": {LastSeen: time.Date(2026, 3, 1, 10, 0, 0, 1, cet)},
		"vm-d": {}, // never seen
	}
	wantRevision(t, commit(t, s, &forewarn.Change{VMs: vms}), 1)
	wantVMs(t, load(t, s), vms)

	// Records not named in a change keep their value, alongside events
	// and incarnations in the same change.
	a := fullEvent(1)
	e := &forewarn.VMRecord{LastSeen: time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)}
	wantRevision(t, commit(t, s, &forewarn.Change{
		Revision:     1,
		Events:       []*forewarn.Event{a},
		Incarnations: map[string]int64{"vm-e": 1},
		VMs:          map[string]*forewarn.VMRecord{"vm-e": e},
	}), 2)
	st := load(t, s)
	wantState(t, st, 2, map[string]int64{"vm-e": 1}, a)
	want := maps.Clone(vms)
	want["vm-e"] = e
	wantVMs(t, st, want)
}

// testScaleSets checks scale set records: a round trip, whole
// replacement, records kept when a change does not name them, copies on
// the way in and out, and refusal of a nil or unnamed record.
func testScaleSets(t *testing.T, s forewarn.Store) {
	if st := load(t, s); st.ScaleSets == nil || len(st.ScaleSets) != 0 {
		t.Fatalf("empty store: ScaleSets %v, want an empty map", st.ScaleSets)
	}
	in := &forewarn.ScaleSetRecord{TerminateTimeout: 7 * time.Minute, TerminateNotifications: true}
	sets := map[string]*forewarn.ScaleSetRecord{"a": in, "b": {TerminateTimeout: 15 * time.Minute}}
	wantRevision(t, commit(t, s, &forewarn.Change{ScaleSets: sets}), 1)
	in.TerminateTimeout = time.Hour // the store kept its own copy
	wantScaleSets(t, load(t, s), map[string]*forewarn.ScaleSetRecord{
		"a": {TerminateTimeout: 7 * time.Minute, TerminateNotifications: true}, "b": {TerminateTimeout: 15 * time.Minute}})

	st := load(t, s)
	st.ScaleSets["a"].TerminateNotifications = false // Load returns copies
	wantRevision(t, commit(t, s, &forewarn.Change{Revision: 1, ScaleSets: map[string]*forewarn.ScaleSetRecord{"b": {}}}), 2)
	wantScaleSets(t, load(t, s), map[string]*forewarn.ScaleSetRecord{
		"a": {TerminateTimeout: 7 * time.Minute, TerminateNotifications: true}, "b": {}})

	for _, c := range []*forewarn.Change{
		{Revision: 2, ScaleSets: map[string]*forewarn.ScaleSetRecord{"": {}}},
		{Revision: 2, ScaleSets: map[string]*forewarn.ScaleSetRecord{"c": nil}},
	} {
		_, err := s.Commit(t.Context(), c)
		wantCode(t, err, forewarn.EINVALID)
	}
	wantRevision(t, load(t, s).Revision, 2)
}

// wantScaleSets checks the scale set records of st.
func wantScaleSets(t *testing.T, st *forewarn.State, want map[string]*forewarn.ScaleSetRecord) {
	t.Helper()
	if len(st.ScaleSets) != len(want) {
		t.Fatalf("ScaleSets %v, want %v", st.ScaleSets, want)
	}
	for name, w := range want {
		if g := st.ScaleSets[name]; g == nil || *g != *w {
			t.Errorf("scale set %s: %+v, want %+v", name, g, w)
		}
	}
}

func testVMsReplace(t *testing.T, s forewarn.Store) {
	commit(t, s, &forewarn.Change{VMs: map[string]*forewarn.VMRecord{"vm-a": vmRecord(1), "vm-b": vmRecord(2)}})

	// A later record replaces the whole earlier one, even with a zero
	// field, and even with an older time.
	wantRevision(t, commit(t, s, &forewarn.Change{Revision: 1, VMs: map[string]*forewarn.VMRecord{"vm-a": {}}}), 2)
	wantVMs(t, load(t, s), map[string]*forewarn.VMRecord{"vm-a": {}, "vm-b": vmRecord(2)})

	wantRevision(t, commit(t, s, &forewarn.Change{Revision: 2, VMs: map[string]*forewarn.VMRecord{"vm-a": vmRecord(3), "vm-b": vmRecord(0)}}), 3)
	wantVMs(t, load(t, s), map[string]*forewarn.VMRecord{"vm-a": vmRecord(3), "vm-b": vmRecord(0)})
}

func testVMsConflict(t *testing.T, s forewarn.Store) {
	commit(t, s, &forewarn.Change{VMs: map[string]*forewarn.VMRecord{"vm-a": vmRecord(1)}})
	for _, rev := range []int64{0, 2} {
		_, err := s.Commit(t.Context(), &forewarn.Change{
			Revision: rev,
			VMs:      map[string]*forewarn.VMRecord{"vm-a": vmRecord(2), "vm-b": vmRecord(2)},
		})
		wantCode(t, err, forewarn.ECONFLICT)
	}
	st := load(t, s)
	wantState(t, st, 1, map[string]int64{})
	wantVMs(t, st, map[string]*forewarn.VMRecord{"vm-a": vmRecord(1)})
}

func testVMsInvalid(t *testing.T, s forewarn.Store) {
	commit(t, s, &forewarn.Change{VMs: map[string]*forewarn.VMRecord{"vm-a": vmRecord(1)}})
	for name, vms := range map[string]map[string]*forewarn.VMRecord{
		"nil record":             {"vm-a": vmRecord(2), "vm-b": vmRecord(2), "vm-c": nil},
		"empty name":             {"vm-a": vmRecord(2), "vm-b": vmRecord(2), "": vmRecord(2)},
		"client record not JSON": {"vm-a": vmRecord(2), "vm-b": {Client: json.RawMessage("{not json")}},
	} {
		_, err := s.Commit(t.Context(), &forewarn.Change{
			Revision:     1,
			Events:       []*forewarn.Event{fullEvent(1)},
			Incarnations: map[string]int64{"vm-a": 1},
			VMs:          vms,
		})
		if forewarn.ErrorCode(err) != forewarn.EINVALID {
			t.Errorf("%s: Commit err = %v (code %q), want code %q", name, err, forewarn.ErrorCode(err), forewarn.EINVALID)
		}
	}
	st := load(t, s)
	wantState(t, st, 1, map[string]int64{})
	wantVMs(t, st, map[string]*forewarn.VMRecord{"vm-a": vmRecord(1)})
}

func testVMsLoadReturnsCopies(t *testing.T, s forewarn.Store) {
	commit(t, s, &forewarn.Change{VMs: map[string]*forewarn.VMRecord{"vm-a": vmRecord(1)}})

	st := load(t, s)
	r := st.VMs["vm-a"]
	if r == nil {
		t.Fatalf("Load returned VMs %v, want vm-a", st.VMs)
	}
	r.LastSeen = time.Time{}
	st.VMs["vm-b"] = vmRecord(2)
	delete(st.VMs, "vm-a")

	wantVMs(t, load(t, s), map[string]*forewarn.VMRecord{"vm-a": vmRecord(1)})
}

func testVMsCommitCopies(t *testing.T, s forewarn.Store) {
	in := vmRecord(1)
	vms := map[string]*forewarn.VMRecord{"vm-a": in}
	commit(t, s, &forewarn.Change{VMs: vms})

	in.LastSeen = in.LastSeen.Add(time.Hour)
	vms["vm-b"] = vmRecord(2)

	wantVMs(t, load(t, s), map[string]*forewarn.VMRecord{"vm-a": vmRecord(1)})
}

// testFollowReceives checks that a follower receives every commit, in
// order, with exactly what it wrote: events, deletes, incarnations, VM
// and scale set records, as Load would return them.
func testFollowReceives(t *testing.T, s forewarn.Store) {
	f := s.Follow(t.Context(), 0)
	a, b := fullEvent(1), scheduledEvent(2, time.Now())
	c1 := &forewarn.Change{
		Events:       []*forewarn.Event{a, b},
		Incarnations: map[string]int64{"vm-a": 1, "vm-b": 3},
		VMs:          map[string]*forewarn.VMRecord{"vm-a": vmRecord(1), "vm-b": {LastSeen: time.Now()}},
		ScaleSets:    map[string]*forewarn.ScaleSetRecord{"ss": {TerminateTimeout: 7 * time.Minute, TerminateNotifications: true}},
	}
	a2 := a.Clone()
	a2.Status, a2.Description = forewarn.Canceled, "canceled by operator"
	c2 := &forewarn.Change{
		Revision:     1,
		Events:       []*forewarn.Event{a2},
		Deletes:      []string{b.ID},
		Incarnations: map[string]int64{"vm-a": 2, "vm-c": 1},
		VMs:          map[string]*forewarn.VMRecord{"vm-c": {}},
		ScaleSets:    map[string]*forewarn.ScaleSetRecord{"ss": {}},
	}
	c3 := &forewarn.Change{Revision: 2}
	for i, c := range []*forewarn.Change{c1, c2, c3} {
		wantRevision(t, commit(t, s, c), int64(i+1))
	}
	for i, c := range []*forewarn.Change{c1, c2, c3} {
		wantUpdate(t, recvUpdate(t, f), int64(i+1), c)
	}
}

// testFollowReplays checks that a follower from an older revision gets
// the commits after it first, then the new ones.
func testFollowReplays(t *testing.T, s forewarn.Store) {
	var changes []*forewarn.Change
	for rev := range int64(3) {
		c := &forewarn.Change{Revision: rev, Events: []*forewarn.Event{fullEvent(int(rev))},
			Incarnations: map[string]int64{"vm-a": rev + 1}}
		commit(t, s, c)
		changes = append(changes, c)
	}
	f1, f0 := s.Follow(t.Context(), 1), s.Follow(t.Context(), 0)
	c4 := &forewarn.Change{Revision: 3, Deletes: []string{eventID(0)}}
	wantRevision(t, commit(t, s, c4), 4)
	changes = append(changes, c4)
	for rev := int64(2); rev <= 4; rev++ {
		wantUpdate(t, recvUpdate(t, f1), rev, changes[rev-1])
	}
	for rev := int64(1); rev <= 4; rev++ {
		wantUpdate(t, recvUpdate(t, f0), rev, changes[rev-1])
	}
}

// testFollowFromCurrent checks that a follower from the loaded revision
// gets only the commits after it.
func testFollowFromCurrent(t *testing.T, s forewarn.Store) {
	commit(t, s, &forewarn.Change{Events: []*forewarn.Event{fullEvent(1)}})
	commit(t, s, &forewarn.Change{Revision: 1, Events: []*forewarn.Event{fullEvent(2)}})
	f := s.Follow(t.Context(), load(t, s).Revision)
	c := &forewarn.Change{Revision: 2, Events: []*forewarn.Event{fullEvent(3)}}
	commit(t, s, c)
	wantUpdate(t, recvUpdate(t, f), 3, c)
}

func testFollowSeveral(t *testing.T, s forewarn.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	f1, f2, f3 := s.Follow(t.Context(), 0), s.Follow(t.Context(), 0), s.Follow(ctx, 0)
	c1 := &forewarn.Change{Events: []*forewarn.Event{fullEvent(1)}}
	commit(t, s, c1)
	for _, f := range []<-chan *forewarn.Update{f1, f2, f3} {
		wantUpdate(t, recvUpdate(t, f), 1, c1)
	}
	cancel()
	waitUpdatesClosed(t, f3)
	c2 := &forewarn.Change{Revision: 1, Incarnations: map[string]int64{"vm-a": 1}}
	commit(t, s, c2)
	for _, f := range []<-chan *forewarn.Update{f1, f2} {
		wantUpdate(t, recvUpdate(t, f), 2, c2)
	}
}

// testFollowUnread checks that commits do not wait for a follower that
// does not read, and that it then gets every one of them.
func testFollowUnread(t *testing.T, s forewarn.Store) {
	const n = 20
	f := s.Follow(t.Context(), 0)
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	var changes []*forewarn.Change
	for rev := range int64(n) {
		c := &forewarn.Change{Revision: rev, Events: []*forewarn.Event{scheduledEvent(int(rev), time.Now())}}
		if _, err := s.Commit(ctx, c); err != nil {
			t.Fatalf("Commit(revision %d) with a follower not reading: %v", rev, err)
		}
		changes = append(changes, c)
	}
	for rev := int64(1); rev <= n; rev++ {
		wantUpdate(t, recvUpdate(t, f), rev, changes[rev-1])
	}
}

func testFollowClosesOnCancel(t *testing.T, s forewarn.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	f := s.Follow(ctx, 0)
	c1 := &forewarn.Change{}
	commit(t, s, c1)
	wantUpdate(t, recvUpdate(t, f), 1, c1)
	cancel()
	waitUpdatesClosed(t, f)
	// Commits after the follower left still succeed.
	wantRevision(t, commit(t, s, &forewarn.Change{Revision: 1}), 2)

	// A follower on a context that has already ended closes too.
	waitUpdatesClosed(t, s.Follow(ctx, 2))
}

func testFollowClosesOnClose(t *testing.T, s forewarn.Store) {
	f := s.Follow(t.Context(), 0)
	c1 := &forewarn.Change{}
	commit(t, s, c1)
	wantUpdate(t, recvUpdate(t, f), 1, c1)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	waitUpdatesClosed(t, f)
	waitUpdatesClosed(t, s.Follow(t.Context(), 1))
}

func testClosed(t *testing.T, s forewarn.Store) {
	commit(t, s, &forewarn.Change{Events: []*forewarn.Event{fullEvent(1)}})
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	_, err := s.Load(t.Context())
	wantCode(t, err, forewarn.EUNAVAILABLE)
	_, err = s.Commit(t.Context(), &forewarn.Change{Revision: 1, Events: []*forewarn.Event{fullEvent(2)}})
	wantCode(t, err, forewarn.EUNAVAILABLE)
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// testConcurrentCommits runs writers that retry on conflict, as the
// engine does, and checks that every change landed exactly once.
func testConcurrentCommits(t *testing.T, s forewarn.Store) {
	const writers, each = 8, 10
	ctx := t.Context()

	// A follower sees every commit in order.
	followed := make(chan []*forewarn.Update, 1)
	f := s.Follow(ctx, 0)
	go func() {
		var got []*forewarn.Update
		for u := range f {
			got = append(got, u)
			if u.Reload || u.Revision >= writers*each {
				break
			}
		}
		followed <- got
	}()

	var (
		mu   sync.Mutex
		revs = make(map[int64]string)
		wg   sync.WaitGroup
	)
	for wr := range writers {
		wg.Go(func() {
			vm := fmt.Sprintf("vm-%d", wr)
			for i := range each {
				e := scheduledEvent(wr*each+i, time.Now())
				e.Resources = []string{vm}
				for {
					st, err := s.Load(ctx)
					if err != nil {
						t.Errorf("writer %d: Load: %v", wr, err)
						return
					}
					rev, err := s.Commit(ctx, &forewarn.Change{
						Revision:     st.Revision,
						Events:       []*forewarn.Event{e},
						Incarnations: map[string]int64{vm: int64(i + 1)},
					})
					if forewarn.ErrorCode(err) == forewarn.ECONFLICT {
						continue
					}
					if err != nil {
						t.Errorf("writer %d: Commit: %v", wr, err)
						return
					}
					mu.Lock()
					if prev, ok := revs[rev]; ok {
						t.Errorf("revision %d returned to both %s and %s", rev, prev, e.ID)
					}
					revs[rev] = e.ID
					mu.Unlock()
					break
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	const total = writers * each
	for rev := int64(1); rev <= total; rev++ {
		if _, ok := revs[rev]; !ok {
			t.Errorf("no commit returned revision %d", rev)
		}
	}
	st := load(t, s)
	if st.Revision != total {
		t.Errorf("Load revision = %d, want %d", st.Revision, total)
	}
	var ids []string
	for _, e := range st.Events {
		ids = append(ids, e.ID)
	}
	slices.Sort(ids)
	var want []string
	for i := range total {
		want = append(want, eventID(i))
	}
	if !slices.Equal(ids, want) {
		t.Errorf("Load returned %d events %v, want %d events %v", len(ids), ids, len(want), want)
	}
	wantIncs := make(map[string]int64)
	for wr := range writers {
		wantIncs[fmt.Sprintf("vm-%d", wr)] = each
	}
	if !maps.Equal(st.Incarnations, wantIncs) {
		t.Errorf("Incarnations = %v, want %v", st.Incarnations, wantIncs)
	}

	select {
	case got := <-followed:
		if len(got) != total {
			t.Fatalf("follower got %d updates, want %d", len(got), total)
		}
		for i, u := range got {
			rev := int64(i + 1)
			if u.Reload || u.Revision != rev || u.Change == nil || u.Change.Revision != rev-1 {
				t.Fatalf("follower's update %d is %+v, want revision %d", i, *u, rev)
			}
			if len(u.Change.Events) != 1 || u.Change.Events[0].ID != revs[rev] || len(u.Change.Incarnations) != 1 {
				t.Errorf("follower's revision %d wrote %v and incarnations %v, want event %s and one incarnation",
					rev, u.Change.Events, u.Change.Incarnations, revs[rev])
			}
		}
	case <-time.After(wait):
		t.Errorf("follower did not see revision %d within %v", total, wait)
	}
}

// eventID returns the n-th test event ID, an upper-case GUID.
func eventID(n int) string { return fmt.Sprintf("0B4A4C61-2A5F-4E0C-9C5B-%012X", n) }

// fullEvent returns a finished event with every field set, times in
// several zones and with nanoseconds.
func fullEvent(n int) *forewarn.Event {
	cet := time.FixedZone("CET", 3600)
	return &forewarn.Event{
		ID:          eventID(n),
		Type:        forewarn.Reboot,
		Status:      forewarn.Completed,
		Resources:   []string{"vm-a", "vm-b"},
		NotBefore:   time.Date(2026, 3, 1, 9, 15, 0, 0, time.UTC),
		Duration:    300,
		Source:      forewarn.User,
		Description: fmt.Sprintf("Host OS update #%d", n),
		Wave:        fmt.Sprintf("wave-%d", n),
		Notice:      20*time.Minute + 750*time.Millisecond,
		Lasts:       5*time.Minute + 250*time.Millisecond,
		Created:     time.Date(2026, 3, 1, 9, 0, 0, 123456789, time.UTC),
		WarnedAt:    time.Date(2026, 3, 1, 10, 9, 1, 987654321, cet),
		StartedAt:   time.Date(2026, 3, 1, 10, 10, 1, 987654321, cet),
		EndedAt:     time.Date(2026, 3, 1, 10, 15, 2, 1, cet),
		ResumedAt:   time.Date(2026, 3, 1, 11, 0, 0, 42, cet),
		Deadline:    time.Date(2026, 3, 8, 9, 15, 0, 7, cet),
		Action:      "hibernate",
		Approvals: []forewarn.Approval{
			{By: "vm-a", At: time.Date(2026, 3, 1, 9, 5, 0, 500, time.UTC)},
			{By: forewarn.Operator, At: time.Date(2026, 3, 1, 10, 10, 1, 0, cet)},
		},
	}
}

// scheduledEvent returns a Scheduled event created at now, with no
// approvals and zero StartedAt and EndedAt.
func scheduledEvent(n int, now time.Time) *forewarn.Event {
	return &forewarn.Event{
		ID:        eventID(n),
		Type:      forewarn.Freeze,
		Status:    forewarn.Scheduled,
		Resources: []string{"vm-a"},
		NotBefore: now.Add(15 * time.Minute),
		Duration:  -1,
		Source:    forewarn.Platform,
		Lasts:     forewarn.Freeze.DefaultLasts(),
		Created:   now,
	}
}

// vmRecord returns the n-th test VM record, last seen at a time in a
// zone other than UTC, with nanoseconds.
func vmRecord(n int) *forewarn.VMRecord {
	cet := time.FixedZone("CET", 3600)
	return &forewarn.VMRecord{LastSeen: time.Date(2026, 3, 1, 10, n, 3, 123456789, cet), Peers: fmt.Sprintf("peers-%d", n),
		Queried: time.Date(2026, 3, 1, 9, n, 7, 987654321, cet), Client: json.RawMessage(fmt.Sprintf(`{"requests":%d,"versions":{"2020-07-01":3}}`, n))}
}

func load(t *testing.T, s forewarn.Store) *forewarn.State {
	t.Helper()
	st, err := s.Load(t.Context())
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return st
}

func commit(t *testing.T, s forewarn.Store, c *forewarn.Change) int64 {
	t.Helper()
	rev, err := s.Commit(t.Context(), c)
	if err != nil {
		t.Fatalf("Commit(revision %d): %v", c.Revision, err)
	}
	return rev
}

func wantRevision(t *testing.T, got, want int64) {
	t.Helper()
	if got != want {
		t.Fatalf("Commit returned revision %d, want %d", got, want)
	}
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if got := forewarn.ErrorCode(err); got != code {
		t.Fatalf("err = %v (code %q), want code %q", err, got, code)
	}
	var e *forewarn.Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v, want a *forewarn.Error", err)
	}
}

// wantState checks every field of st: the revision, the incarnations,
// and exactly the events want, in any order.
func wantState(t *testing.T, st *forewarn.State, rev int64, incs map[string]int64, want ...*forewarn.Event) {
	t.Helper()
	if st.Revision != rev {
		t.Errorf("Revision = %d, want %d", st.Revision, rev)
	}
	if !maps.Equal(st.Incarnations, incs) {
		t.Errorf("Incarnations = %v, want %v", st.Incarnations, incs)
	}
	got := slices.Clone(st.Events)
	want = slices.Clone(want)
	byID := func(a, b *forewarn.Event) int { return strings.Compare(a.ID, b.ID) }
	if slices.Contains(got, nil) {
		t.Fatalf("Events holds nil: %v", got)
	}
	slices.SortFunc(got, byID)
	slices.SortFunc(want, byID)
	if len(got) != len(want) {
		t.Fatalf("Events = %v, want %v", got, want)
	}
	for i := range got {
		if d := eventDiff(want[i], got[i]); d != "" {
			t.Errorf("event %s differs:\n%s", want[i].ID, d)
		}
	}
}

// wantVMs checks that st holds exactly the VM records want, a non-nil map
// even when want is empty.
func wantVMs(t *testing.T, st *forewarn.State, want map[string]*forewarn.VMRecord) {
	t.Helper()
	if st.VMs == nil {
		t.Errorf("VMs is nil, want %v", want)
		return
	}
	for _, vm := range slices.Sorted(maps.Keys(want)) {
		g, ok := st.VMs[vm]
		switch {
		case !ok:
			t.Errorf("VMs lacks %s, want %+v", vm, *want[vm])
		case g == nil:
			t.Errorf("VMs[%s] is nil, want %+v", vm, *want[vm])
		default:
			if d := vmDiff(want[vm], g); d != "" {
				t.Errorf("VM record %s differs:\n%s", vm, d)
			}
		}
	}
	for _, vm := range slices.Sorted(maps.Keys(st.VMs)) {
		if _, ok := want[vm]; !ok {
			t.Errorf("VMs holds %s (%+v), want none", vm, st.VMs[vm])
		}
	}
}

// vmDiff compares every field of two VM records, times by Equal, and
// reports any time that is not in UTC or kept a monotonic clock reading.
// It returns "" when they match.
func vmDiff(want, got *forewarn.VMRecord) string {
	var b strings.Builder
	timeDiff(&b, "LastSeen", want.LastSeen, got.LastSeen)
	if got.Peers != want.Peers {
		fmt.Fprintf(&b, "\tPeers: got %q, want %q\n", got.Peers, want.Peers)
	}
	timeDiff(&b, "Queried", want.Queried, got.Queried)
	if !bytes.Equal(got.Client, want.Client) {
		fmt.Fprintf(&b, "\tClient: got %s, want %s\n", got.Client, want.Client)
	}
	return b.String()
}

// eventDiff compares every field of two events, times by Equal, and
// reports any time that kept a monotonic clock reading. It returns ""
// when they match.
func eventDiff(want, got *forewarn.Event) string {
	var b strings.Builder
	field := func(name string, w, g any) {
		fmt.Fprintf(&b, "\t%s: got %v, want %v\n", name, g, w)
	}
	timeField := func(name string, w, g time.Time) {
		if !g.Equal(w) {
			field(name, w, g)
		}
		if g != g.Round(0) {
			fmt.Fprintf(&b, "\t%s: got %v, which keeps a monotonic clock reading\n", name, g)
		}
	}
	if got.ID != want.ID {
		field("ID", want.ID, got.ID)
	}
	if got.Type != want.Type {
		field("Type", want.Type, got.Type)
	}
	if got.Status != want.Status {
		field("Status", want.Status, got.Status)
	}
	if !slices.Equal(got.Resources, want.Resources) {
		field("Resources", want.Resources, got.Resources)
	}
	timeField("NotBefore", want.NotBefore, got.NotBefore)
	if got.Duration != want.Duration {
		field("Duration", want.Duration, got.Duration)
	}
	if got.Source != want.Source {
		field("Source", want.Source, got.Source)
	}
	if got.Description != want.Description {
		field("Description", want.Description, got.Description)
	}
	if got.Wave != want.Wave {
		field("Wave", want.Wave, got.Wave)
	}
	if got.Notice != want.Notice {
		field("Notice", want.Notice, got.Notice)
	}
	if got.Lasts != want.Lasts {
		field("Lasts", want.Lasts, got.Lasts)
	}
	timeField("Created", want.Created, got.Created)
	timeField("WarnedAt", want.WarnedAt, got.WarnedAt)
	timeField("StartedAt", want.StartedAt, got.StartedAt)
	timeField("EndedAt", want.EndedAt, got.EndedAt)
	timeField("ResumedAt", want.ResumedAt, got.ResumedAt)
	timeField("Deadline", want.Deadline, got.Deadline)
	if got.Action != want.Action {
		field("Action", want.Action, got.Action)
	}
	if len(got.Approvals) != len(want.Approvals) {
		field("Approvals", want.Approvals, got.Approvals)
	} else {
		for i := range got.Approvals {
			if got.Approvals[i].By != want.Approvals[i].By {
				field(fmt.Sprintf("Approvals[%d].By", i), want.Approvals[i].By, got.Approvals[i].By)
			}
			timeField(fmt.Sprintf("Approvals[%d].At", i), want.Approvals[i].At, got.Approvals[i].At)
		}
	}
	return b.String()
}

// wantFull fails t for each field of values (structs) that is zero: the
// suite's full values set every field, so that stores are checked to
// keep each one.
func wantFull(t *testing.T, values ...any) {
	t.Helper()
	for _, v := range values {
		rv := reflect.ValueOf(v)
		for i := range rv.NumField() {
			if rv.Field(i).IsZero() {
				t.Errorf("%s.%s is zero in the suite's full value: set it, so that stores are checked to keep it",
					rv.Type(), rv.Type().Field(i).Name)
			}
		}
	}
}

// mapDiff writes to b how got differs from want, maps of values by name
// in which nil is a removal: a name missing from got, one got holds and
// want does not, a nil against a value, and what differ says of two
// values (lines, or ""). show describes a value; what names its kind.
func mapDiff[T any](b *strings.Builder, what string, want, got map[string]*T, show func(*T) string, differ func(name string, w, g *T) string) {
	showNil := func(v *T) string {
		if v == nil {
			return "nil (removed)"
		}
		return show(v)
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		w := want[name]
		g, ok := got[name]
		switch {
		case !ok:
			fmt.Fprintf(b, "\t%s %q: missing, want %s\n", what, name, showNil(w))
		case g == nil || w == nil:
			if g != w {
				fmt.Fprintf(b, "\t%s %q: got %s, want %s\n", what, name, showNil(g), showNil(w))
			}
		default:
			b.WriteString(differ(name, w, g))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[name]; !ok {
			fmt.Fprintf(b, "\t%s %q: got %s, want none\n", what, name, showNil(got[name]))
		}
	}
}

// commitFollowed commits changes to the empty store s, the first at
// revision 0 and each after against the one before, and checks that a
// follower from 0, following before the first commit, and one from 1,
// following after the last, each receive every commit after theirs
// exactly.
func commitFollowed(t *testing.T, s forewarn.Store, changes ...*forewarn.Change) {
	t.Helper()
	live := s.Follow(t.Context(), 0)
	for i, c := range changes {
		wantRevision(t, commit(t, s, c), int64(i+1))
	}
	replay := s.Follow(t.Context(), 1)
	for i, c := range changes {
		wantUpdate(t, recvUpdate(t, live), int64(i+1), c)
	}
	for i, c := range changes[1:] {
		wantUpdate(t, recvUpdate(t, replay), int64(i+2), c)
	}
}

// recvUpdate returns the next update from f, failing when f is closed or
// stays empty.
func recvUpdate(t *testing.T, f <-chan *forewarn.Update) *forewarn.Update {
	t.Helper()
	select {
	case u, ok := <-f:
		if !ok {
			t.Fatal("Follow channel closed, want an update")
		}
		if u == nil {
			t.Fatal("Follow delivered a nil update")
		}
		return u
	case <-time.After(wait):
		t.Fatalf("no update from Follow within %v", wait)
	}
	return nil
}

// waitUpdatesClosed drains f and fails unless it is closed within wait.
func waitUpdatesClosed(t *testing.T, f <-chan *forewarn.Update) {
	t.Helper()
	timeout := time.After(wait)
	for {
		select {
		case _, ok := <-f:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatalf("Follow channel still open after %v", wait)
		}
	}
}

// wantUpdate checks that u is the commit of c that produced revision
// rev, holding exactly what c wrote, with values as Load returns them.
// (The suite's changes delete only events the store holds, remove only
// definitions and sessions it holds, and never write and delete one
// event at once: etcd's followers learn of a deletion from the key it
// deleted.)
func wantUpdate(t *testing.T, u *forewarn.Update, rev int64, c *forewarn.Change) {
	t.Helper()
	if u.Reload || u.Change == nil {
		t.Fatalf("Follow delivered %+v, want the commit of revision %d", *u, rev)
	}
	if u.Revision != rev || u.Change.Revision != rev-1 {
		t.Fatalf("Follow delivered revision %d against %d, want %d against %d", u.Revision, u.Change.Revision, rev, rev-1)
	}
	got := u.Change
	byID := func(a, b *forewarn.Event) int { return strings.Compare(a.ID, b.ID) }
	ge, we := slices.Clone(got.Events), slices.Clone(c.Events)
	if slices.Contains(ge, nil) {
		t.Fatalf("revision %d: Events holds nil: %v", rev, ge)
	}
	slices.SortFunc(ge, byID)
	slices.SortFunc(we, byID)
	if len(ge) != len(we) {
		t.Errorf("revision %d: Events = %v, want %v", rev, ge, we)
	} else {
		for i := range ge {
			if d := eventDiff(we[i], ge[i]); d != "" {
				t.Errorf("revision %d: event %s differs:\n%s", rev, we[i].ID, d)
			}
		}
	}
	if gd, wd := slices.Sorted(slices.Values(got.Deletes)), slices.Sorted(slices.Values(c.Deletes)); !slices.Equal(gd, wd) {
		t.Errorf("revision %d: Deletes = %q, want %q", rev, gd, wd)
	}
	if !maps.Equal(got.Incarnations, c.Incarnations) {
		t.Errorf("revision %d: Incarnations = %v, want %v", rev, got.Incarnations, c.Incarnations)
	}
	if len(got.VMs) != len(c.VMs) {
		t.Errorf("revision %d: VMs = %v, want %v", rev, got.VMs, c.VMs)
	}
	for vm, w := range c.VMs {
		switch g, ok := got.VMs[vm]; {
		case !ok || g == nil:
			t.Errorf("revision %d: VMs lacks %s, want %+v", rev, vm, *w)
		default:
			if d := vmDiff(w, g); d != "" {
				t.Errorf("revision %d: VM record %s differs:\n%s", rev, vm, d)
			}
		}
	}
	if len(got.ScaleSets) != len(c.ScaleSets) {
		t.Errorf("revision %d: ScaleSets = %v, want %v", rev, got.ScaleSets, c.ScaleSets)
	}
	for name, w := range c.ScaleSets {
		if g := got.ScaleSets[name]; g == nil || *g != *w {
			t.Errorf("revision %d: scale set %s: %+v, want %+v", rev, name, g, w)
		}
	}
	if d := inventoryDiff(c.Inventory, got.Inventory, c.InventorySets, got.InventorySets); d != "" {
		t.Errorf("revision %d: inventory differs:\n%s", rev, d)
	}
	if d := sessionsDiff(c.Sessions, got.Sessions); d != "" {
		t.Errorf("revision %d: sessions differ:\n%s", rev, d)
	}
	if d := keysDiff(c.SigningKeys, got.SigningKeys); d != "" {
		t.Errorf("revision %d: signing keys differ:\n%s", rev, d)
	}
	if d := sightingsDiff(c.Sightings, got.Sightings); d != "" {
		t.Errorf("revision %d: sightings differ:\n%s", rev, d)
	}
}

package storetest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
)

// largeHosts is the size of the suite's large session: a session the
// size of a real one, some 300 KB of JSON.
const largeHosts = 1000

// runSessions runs the cases of maintenance sessions.
func runSessions(t *testing.T, newStore func(t *testing.T) forewarn.Store) {
	t.Run("Fields", testSessionFields)
	t.Run("RoundTrip", func(t *testing.T) { testSessionsRoundTrip(t, newStore(t)) })
	t.Run("Replace", func(t *testing.T) { testSessionsReplace(t, newStore(t)) })
	t.Run("Conflict", func(t *testing.T) { testSessionsConflict(t, newStore(t)) })
	t.Run("Invalid", func(t *testing.T) { testSessionsInvalid(t, newStore(t)) })
	t.Run("Copies", func(t *testing.T) { testSessionsCopies(t, newStore(t)) })
	t.Run("Follow", func(t *testing.T) { testSessionsFollow(t, newStore(t)) })
	t.Run("Large", func(t *testing.T) { testSessionsLarge(t, newStore(t)) })
}

// testSessionFields fails when Session, SessionSpec or SessionHost grow
// a field that fullSession leaves zero (in its spec, and in its host
// "host-2"): the round trip must cover every one.
func testSessionFields(t *testing.T) {
	ses := fullSession("ses-a")
	wantFull(t, *ses, ses.Spec, ses.Hosts[1])
}

// testSessionsRoundTrip checks that an empty store holds no sessions, in
// a non-nil map, and that a session with every field set, times in
// other zones and with monotonic readings among them, and a bare one
// come back as Normalized makes them.
func testSessionsRoundTrip(t *testing.T, s forewarn.Store) {
	if st := load(t, s); st.Sessions == nil || len(st.Sessions) != 0 {
		t.Fatalf("empty store: Sessions %v, want an empty map", st.Sessions)
	}
	a := fullSession("ses-a")
	a.Hosts[0].Started = time.Now() // local, with a monotonic reading
	sessions := map[string]*forewarn.Session{"ses-a": a, "ses-b": {ID: "ses-b"}}
	e := fullEvent(1)
	wantRevision(t, commit(t, s, &forewarn.Change{Events: []*forewarn.Event{e}, Sessions: sessions}), 1)
	st := load(t, s)
	wantSessions(t, st, sessions)
	wantState(t, st, 1, map[string]int64{}, e)
}

// testSessionsReplace checks that a later commit replaces a session
// whole, that a nil value removes it, that removing a session the store
// does not hold is no error, and that a commit that names no session
// leaves them all alone.
func testSessionsReplace(t *testing.T, s forewarn.Store) {
	a, b, c := fullSession("ses-a"), fullSession("ses-b"), fullSession("ses-c")
	wantRevision(t, commit(t, s, &forewarn.Change{Sessions: map[string]*forewarn.Session{"ses-a": a, "ses-b": b, "ses-c": c}}), 1)

	// Fields the replacement leaves zero are zero: no spec's limits,
	// fewer hosts, no reason.
	a2 := &forewarn.Session{
		ID:      "ses-a",
		Spec:    forewarn.SessionSpec{Hosts: []string{"host-9"}},
		State:   forewarn.SessionDone,
		Hosts:   []forewarn.SessionHost{{Name: "host-9", State: forewarn.HostDone, Ended: time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)}},
		Created: a.Created,
		Updated: time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC),
	}
	wantRevision(t, commit(t, s, &forewarn.Change{
		Revision: 1,
		Sessions: map[string]*forewarn.Session{"ses-a": a2, "ses-b": nil, "ses-unknown": nil},
	}), 2)
	wantSessions(t, load(t, s), map[string]*forewarn.Session{"ses-a": a2, "ses-c": c})

	// A removal of what the store does not hold, and of what it no
	// longer holds, is a commit like any other.
	wantRevision(t, commit(t, s, &forewarn.Change{Revision: 2, Sessions: map[string]*forewarn.Session{"ses-b": nil, "ses-z": nil}}), 3)
	wantRevision(t, commit(t, s, &forewarn.Change{
		Revision:     3,
		Events:       []*forewarn.Event{fullEvent(1)},
		Incarnations: map[string]int64{"vm-a": 1},
		Sessions:     map[string]*forewarn.Session{},
	}), 4)
	st := load(t, s)
	wantSessions(t, st, map[string]*forewarn.Session{"ses-a": a2, "ses-c": c})
	wantState(t, st, 4, map[string]int64{"vm-a": 1}, fullEvent(1))

	wantRevision(t, commit(t, s, &forewarn.Change{Revision: 4, Sessions: map[string]*forewarn.Session{"ses-a": nil, "ses-c": nil}}), 5)
	wantSessions(t, load(t, s), map[string]*forewarn.Session{})
}

// testSessionsConflict checks that a change of sessions against a stale
// revision, or one that fails for another reason, is refused and writes
// nothing of itself.
func testSessionsConflict(t *testing.T, s forewarn.Store) {
	a := fullSession("ses-a")
	wantRevision(t, commit(t, s, &forewarn.Change{Sessions: map[string]*forewarn.Session{"ses-a": a}, Incarnations: map[string]int64{"vm-a": 5}}), 1)

	a2 := fullSession("ses-a")
	a2.State, a2.Hosts = forewarn.SessionCancelled, a2.Hosts[:1]
	change := func(rev int64, incs map[string]int64) *forewarn.Change {
		return &forewarn.Change{
			Revision:     rev,
			Events:       []*forewarn.Event{fullEvent(1)},
			Incarnations: incs,
			Sessions:     map[string]*forewarn.Session{"ses-a": a2, "ses-b": fullSession("ses-b")},
		}
	}
	for _, rev := range []int64{0, 2, -1} {
		_, err := s.Commit(t.Context(), change(rev, nil))
		wantCode(t, err, forewarn.ECONFLICT)
		_, err = s.Commit(t.Context(), &forewarn.Change{Revision: rev, Sessions: map[string]*forewarn.Session{"ses-a": nil}})
		wantCode(t, err, forewarn.ECONFLICT)
	}
	_, err := s.Commit(t.Context(), change(1, map[string]int64{"vm-a": 4}))
	wantCode(t, err, forewarn.EINVALID) // vm-a's incarnation would go back
	st := load(t, s)
	wantState(t, st, 1, map[string]int64{"vm-a": 5})
	wantSessions(t, st, map[string]*forewarn.Session{"ses-a": fullSession("ses-a")})

	wantRevision(t, commit(t, s, change(1, nil)), 2)
	wantSessions(t, load(t, s), map[string]*forewarn.Session{"ses-a": a2, "ses-b": fullSession("ses-b")})
}

// testSessionsInvalid checks that a session under a key other than its
// ID is refused with EINVALID, and nothing of its change is written.
func testSessionsInvalid(t *testing.T, s forewarn.Store) {
	wantRevision(t, commit(t, s, &forewarn.Change{Sessions: map[string]*forewarn.Session{"ses-a": fullSession("ses-a")}}), 1)
	for name, sessions := range map[string]map[string]*forewarn.Session{
		"session of another ID": {"ses-b": fullSession("ses-b"), "ses-c": fullSession("ses-d")},
		"session without an ID": {"ses-b": fullSession("ses-b"), "ses-c": {}},
		"empty ID":              {"ses-b": fullSession("ses-b"), "": {}},
		"empty ID, nil":         {"ses-a": nil, "": nil},
	} {
		_, err := s.Commit(t.Context(), &forewarn.Change{Revision: 1, Events: []*forewarn.Event{fullEvent(1)}, Sessions: sessions})
		if forewarn.ErrorCode(err) != forewarn.EINVALID {
			t.Errorf("%s: Commit err = %v (code %q), want code %q", name, err, forewarn.ErrorCode(err), forewarn.EINVALID)
		}
	}
	st := load(t, s)
	wantState(t, st, 1, map[string]int64{})
	wantSessions(t, st, map[string]*forewarn.Session{"ses-a": fullSession("ses-a")})
}

// testSessionsCopies checks that a store keeps its own copy of a session
// committed, and sends its followers one, and that Load returns copies.
func testSessionsCopies(t *testing.T, s forewarn.Store) {
	f := s.Follow(t.Context(), 0)
	in := fullSession("ses-a").Normalized() // a store could keep it as it is
	sessions := map[string]*forewarn.Session{"ses-a": in}
	c := &forewarn.Change{Sessions: sessions}
	commit(t, s, c)
	want := map[string]*forewarn.Session{"ses-a": fullSession("ses-a")}

	mutateSession(in)
	sessions["ses-b"] = fullSession("ses-b")
	wantSessions(t, load(t, s), want)
	u := recvUpdate(t, f)
	wantUpdate(t, u, 1, &forewarn.Change{Sessions: want})

	st := load(t, s)
	mutateSession(st.Sessions["ses-a"])
	delete(st.Sessions, "ses-a")
	st.Sessions["ses-c"] = fullSession("ses-c")
	wantSessions(t, load(t, s), want)
}

// mutateSession changes every part of ses a store could share: fields,
// the slices and maps of its spec, and each host's.
func mutateSession(ses *forewarn.Session) {
	ses.State, ses.Reason = forewarn.SessionCancelled, "changed"
	ses.Created = ses.Created.Add(time.Hour)
	ses.Spec.Hosts[0] = "changed"
	ses.Spec.MaxUnavailable[forewarn.GroupZone] = forewarn.Budget{Count: 99}
	ses.Spec.MaxUnavailable["changed"] = forewarn.Budget{Percent: 1}
	ses.Spec.Windows[0], ses.Spec.Webhooks[0] = "changed", "changed"
	for i := range ses.Hosts {
		h := &ses.Hosts[i]
		h.State, h.Reason = forewarn.HostFailed, "changed"
		h.Started = h.Started.Add(time.Hour)
		if len(h.VMs) > 0 {
			h.VMs[0], h.Events[0] = "changed", "changed"
		}
	}
}

// testSessionsFollow checks that followers, live and replaying, receive
// each commit's sessions and removals exactly, in order, and none from
// a commit that names no session.
func testSessionsFollow(t *testing.T, s forewarn.Store) {
	a2 := fullSession("ses-a")
	a2.State, a2.Reason, a2.Hosts[2].State = forewarn.SessionRunning, "", forewarn.HostNotifying
	a2.Hosts[2].Started = time.Now()
	c1 := &forewarn.Change{Sessions: map[string]*forewarn.Session{"ses-a": fullSession("ses-a"), "ses-b": fullSession("ses-b")}}
	c2 := &forewarn.Change{
		Revision:     1,
		Events:       []*forewarn.Event{fullEvent(1)},
		Incarnations: map[string]int64{"vm-a": 1},
		Sessions:     map[string]*forewarn.Session{"ses-a": a2, "ses-b": nil},
	}
	c3 := &forewarn.Change{Revision: 2, Incarnations: map[string]int64{"vm-a": 2}}
	c4 := &forewarn.Change{Revision: 3, Sessions: map[string]*forewarn.Session{"ses-a": nil, "ses-c": {ID: "ses-c"}}}
	commitFollowed(t, s, c1, c2, c3, c4)
	wantSessions(t, load(t, s), map[string]*forewarn.Session{"ses-c": {ID: "ses-c"}})
}

// testSessionsLarge checks sessions the size of real ones: written,
// replaced and followed whole.
func testSessionsLarge(t *testing.T, s forewarn.Store) {
	a := Session("ses-a", largeHosts)
	if b, err := json.Marshal(a); err != nil || len(b) < 250<<10 {
		t.Fatalf("the suite's large session is %d bytes of JSON (%v), want at least 250 KiB", len(b), err)
	}
	f := s.Follow(t.Context(), 0)
	c1 := &forewarn.Change{Sessions: map[string]*forewarn.Session{"ses-a": a}}
	wantRevision(t, commit(t, s, c1), 1)
	wantSessions(t, load(t, s), c1.Sessions)

	a2 := Session("ses-a", largeHosts)
	for i := range a2.Hosts {
		a2.Hosts[i].State, a2.Hosts[i].Ended = forewarn.HostDone, a2.Hosts[i].ReadyAt.Add(time.Hour)
	}
	c2 := &forewarn.Change{Revision: 1, Sessions: map[string]*forewarn.Session{"ses-a": a2, "ses-b": Session("ses-b", largeHosts)}}
	wantRevision(t, commit(t, s, c2), 2)
	wantSessions(t, load(t, s), c2.Sessions)
	wantUpdate(t, recvUpdate(t, f), 1, c1)
	wantUpdate(t, recvUpdate(t, f), 2, c2)
}

// testSessionsReopen checks that a durable store keeps its sessions
// across Close, and their removals; reopen opens the store kept in dir.
func testSessionsReopen(t *testing.T, reopen func(t *testing.T, dir string) forewarn.Store) {
	dir := t.TempDir()
	s := reopen(t, dir)
	sessions := map[string]*forewarn.Session{"ses-a": fullSession("ses-a"), "ses-b": Session("ses-b", largeHosts), "ses-c": {ID: "ses-c"}}
	wantRevision(t, commit(t, s, &forewarn.Change{Sessions: sessions}), 1)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s = reopen(t, dir)
	wantSessions(t, load(t, s), sessions)
	f := s.Follow(t.Context(), 1)
	a2 := fullSession("ses-a")
	a2.State = forewarn.SessionDone
	c := &forewarn.Change{Revision: 1, Sessions: map[string]*forewarn.Session{"ses-a": a2, "ses-c": nil}}
	wantRevision(t, commit(t, s, c), 2)
	wantUpdate(t, recvUpdate(t, f), 2, c)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s = reopen(t, dir)
	st := load(t, s)
	wantSessions(t, st, map[string]*forewarn.Session{"ses-a": a2, "ses-b": sessions["ses-b"]})
	wantState(t, st, 2, map[string]int64{})
}

// fullSession returns a paused session of three hosts with every field
// set, times in several zones and with nanoseconds: host-1 Done, host-2
// Failed with every field of a host set, host-3 Pending.
func fullSession(id string) *forewarn.Session {
	cet := time.FixedZone("CET", 3600)
	at := func(h, m, ns int) time.Time { return time.Date(2026, 3, 1, h, m, 0, ns, cet) }
	return &forewarn.Session{
		ID: id,
		Spec: forewarn.SessionSpec{
			Hosts:    []string{"host-1", "host-2", "host-3"},
			MaxHosts: 2,
			MaxUnavailable: map[string]forewarn.Budget{
				forewarn.GroupAvailabilitySet: {Count: 1},
				forewarn.GroupZone:            {Percent: 25},
				forewarn.GroupUpdateDomain:    {Count: 2, Percent: 10},
			},
			Delay:        5*time.Minute + 250*time.Millisecond,
			Notice:       20 * time.Minute,
			ReplyTimeout: time.Hour + 1,
			Action:       "Redeploy",
			Windows:      []string{"Sat 02:00-06:00", "Sun 02:00-06:00"},
			Description:  "Host OS update of " + id,
			Webhooks:     []string{"https://hooks.example/forewarn", "https://hooks.example/audit"},
		},
		State: forewarn.SessionPaused,
		Hosts: []forewarn.SessionHost{
			{Name: "host-1", State: forewarn.HostDone, VMs: []string{"vm-a", "vm-b"}, Events: []string{eventID(1), eventID(2)},
				Started: at(9, 0, 1), ReadyAt: at(9, 20, 2), Ended: at(9, 40, 3)},
			{Name: "host-2", State: forewarn.HostFailed, VMs: []string{"vm-c"}, Events: []string{eventID(3)},
				Started: at(9, 45, 4), ReadyAt: at(10, 5, 5), Ended: at(10, 30, 6), Reason: "firmware update failed", VMCount: 3, EventCount: 2},
			{Name: "host-3", State: forewarn.HostPending},
		},
		Created:   time.Date(2026, 3, 1, 7, 59, 0, 123456789, time.UTC),
		Updated:   at(10, 30, 987654321),
		LastEnded: at(10, 30, 6),
		Reason:    "host-2 failed",
	}
}

// Session returns a Running session of n hosts the size of a real one,
// for the stores' tests at scale: about 300 bytes of JSON per host, each
// InMaintenance with three VMs, their events and its times.
func Session(id string, n int) *forewarn.Session {
	start := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	ses := &forewarn.Session{
		ID:      id,
		Spec:    forewarn.SessionSpec{MaxHosts: 10, Description: "Host OS update of " + id},
		State:   forewarn.SessionRunning,
		Hosts:   make([]forewarn.SessionHost, n),
		Created: start,
		Updated: start.Add(time.Hour),
	}
	for i := range n {
		h := forewarn.SessionHost{Name: fmt.Sprintf("host-%06d", i), State: forewarn.HostInMaintenance,
			Started: start.Add(time.Duration(i) * time.Second), ReadyAt: start.Add(time.Duration(i)*time.Second + 15*time.Minute + 123456789)}
		for j := range 3 {
			h.VMs = append(h.VMs, fmt.Sprintf("vm-%06d-%d", i, j))
			h.Events = append(h.Events, eventID(3*i+j))
		}
		ses.Spec.Hosts = append(ses.Spec.Hosts, h.Name)
		ses.Hosts[i] = h
	}
	return ses
}

// wantSessions checks that st holds exactly the sessions want, as
// Normalized makes them, in a non-nil map.
func wantSessions(t *testing.T, st *forewarn.State, want map[string]*forewarn.Session) {
	t.Helper()
	if st.Sessions == nil {
		t.Errorf("Sessions is nil, want %d sessions", len(want))
	}
	if d := sessionsDiff(want, st.Sessions); d != "" {
		t.Errorf("sessions differ:\n%s", d)
	}
}

// sessionsDiff compares sessions, removals (nil values) included, each
// got as it must equal want's Normalized. It returns "" when they match.
func sessionsDiff(want, got map[string]*forewarn.Session) string {
	var b strings.Builder
	show := func(ses *forewarn.Session) string { return fmt.Sprintf("a session of %d hosts", len(ses.Hosts)) }
	mapDiff(&b, "session", want, got, show, func(id string, w, g *forewarn.Session) string {
		return sessionDiff(id, w.Normalized(), g)
	})
	return b.String()
}

// sessionDiff names the fields of got that differ from want, and the
// first few hosts. It returns "" when they are deeply equal.
func sessionDiff(id string, want, got *forewarn.Session) string {
	if reflect.DeepEqual(got, want) {
		return ""
	}
	var b strings.Builder
	gv, wv := reflect.ValueOf(*got), reflect.ValueOf(*want)
	for i := range gv.NumField() {
		name := gv.Type().Field(i).Name
		if name == "Hosts" {
			continue
		}
		if g, w := gv.Field(i).Interface(), wv.Field(i).Interface(); !reflect.DeepEqual(g, w) {
			fmt.Fprintf(&b, "\tsession %q: %s: got %#v, want %#v\n", id, name, g, w)
		}
	}
	if len(got.Hosts) != len(want.Hosts) {
		fmt.Fprintf(&b, "\tsession %q: %d hosts, want %d\n", id, len(got.Hosts), len(want.Hosts))
	}
	shown := 0
	for i := range min(len(got.Hosts), len(want.Hosts)) {
		if !reflect.DeepEqual(got.Hosts[i], want.Hosts[i]) && shown < 3 {
			fmt.Fprintf(&b, "\tsession %q: Hosts[%d]: got %#v, want %#v\n", id, i, got.Hosts[i], want.Hosts[i])
			shown++
		}
	}
	if b.Len() == 0 {
		fmt.Fprintf(&b, "\tsession %q: Hosts: got %#v, want %#v\n", id, got.Hosts, want.Hosts)
	}
	return b.String()
}

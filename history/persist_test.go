package history_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/azure"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/forewarntest"
	"github.com/forewarn/forewarn/history"
	"github.com/forewarn/forewarn/mem"
	"github.com/forewarn/forewarn/report"
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
// of a killed server. It counts the client records written: by VM, and
// by the time of the look that wrote them (when the write began).
type crashStore struct {
	*mem.Store
	crashed atomic.Bool
	mu      sync.Mutex
	saves   map[string]int
	looks   map[time.Time]int
}

func (s *crashStore) Commit(ctx context.Context, c *forewarn.Change) (int64, error) {
	begun := time.Now()
	time.Sleep(time.Millisecond)
	if s.crashed.Load() {
		return 0, errors.New("the server crashed")
	}
	rev, err := s.Store.Commit(ctx, c)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.saves == nil {
		s.saves, s.looks = map[string]int{}, map[time.Time]int{}
	}
	for name, r := range c.VMs {
		if err == nil && r.Client != nil {
			s.saves[name]++
			s.looks[begun.Truncate(time.Second)]++
		}
	}
	return rev, err
}

// counts returns how many client records s took, by VM and by look.
func (s *crashStore) counts() (map[string]int, map[time.Time]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.saves), maps.Clone(s.looks)
}

// azureFleet returns n Azure VMs of one availability set, vm000 on.
func azureFleet(n int) (*forewarn.Fleet, []string) {
	fleet := &forewarn.Fleet{}
	var names []string
	for i := range n {
		name := fmt.Sprintf("vm%03d", i)
		names = append(names, name)
		fleet.VMs = append(fleet.VMs, &forewarn.VM{Name: name, Provider: forewarn.Azure, AvailabilitySet: "as"})
	}
	return fleet, names
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
		fleet, names := azureFleet(n)
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

// flaggedServer starts a server of n Azure VMs on a crashStore.
func flaggedServer(t *testing.T, n int) (*crashStore, *engine.Engine, *history.History, []string) {
	t.Helper()
	fleet, names := azureFleet(n)
	store := &crashStore{Store: mem.New()}
	e, h := serverOnFleet(t, store, fleet)
	return store, e, h, names
}

// TestReadSavedOnce: a VM's first read of an event is saved once, with
// the other VMs' in one write, and a client polling as asked (the
// newest api-version, the header, reads of what it read already) makes
// no further write for a minute.
func TestReadSavedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 200
		store, e, h, names := flaggedServer(t, n)
		for _, name := range names {
			get(h, name)
		}
		ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: names, Notice: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ref := refOf(t, e, ev.ID)
		for range 60 {
			time.Sleep(time.Second)
			for _, name := range names {
				get(h, name, ref)
			}
		}
		saves, looks := store.counts()
		for _, name := range names {
			if saves[name] != 1 {
				t.Errorf("%s's record written %d times, want once", name, saves[name])
			}
		}
		if len(looks) != 1 {
			t.Errorf("records written at %d looks, want 1: %v", len(looks), looks)
		}
	})
}

// TestCountsSavedInTurns: a fleet whose every client counts in a finding
// at each request (all at the preview api-version) has its records
// saved in turns, at most 1,024 at a look, a look a second (the
// engine's maxCountSaves and clientSavePeriod), once each VM's first
// request at it, a new finding, was saved at the first look: while 2,500
// VMs poll, each one's growth at the third look after at the latest,
// about 3 s, plus the writes' time.
func TestCountsSavedInTurns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 2500
		store, _, h, names := flaggedServer(t, n)
		poll := func() { pollPreview(h, names) }
		poll()
		time.Sleep(1500 * time.Millisecond)
		first, looks := store.counts()
		if len(first) != n || len(looks) != 1 {
			t.Fatalf("new findings: %d records written at %d looks, want %d at 1", len(first), len(looks), n)
		}
		t0 := time.Now()
		for range 3 {
			poll()
			time.Sleep(time.Second)
		}
		time.Sleep(100 * time.Millisecond)
		saves, looks := store.counts()
		for _, name := range names {
			if saves[name] == first[name] {
				t.Errorf("%s's record not written again within 3.1 s", name)
				break
			}
		}
		if len(looks) != 4 {
			t.Errorf("records written at %d looks, want 4: %v", len(looks), looks)
		}
		for at, k := range looks {
			if k > 1024 && at.After(t0) {
				t.Errorf("%d records written at %v, over 1,024", k, at.Sub(t0))
			}
		}
	})
}

// pollPreview has each VM of names make a request at the preview
// api-version, which counts in a finding.
func pollPreview(h *history.History, names []string) {
	for _, name := range names {
		call(h, name, history.Azure, azure.PreviewVersion, http.StatusOK, 0, history.NoteCountedVersion)
	}
}

// TestNewFindingSavedAtNextLook: a VM's first count of a finding is
// saved at the engine's next look, however many VMs' counts wait their
// turn: 2,500 VMs poll at the preview, and 10 of them are throttled for
// the first time; each one's record is written at the look that follows.
func TestNewFindingSavedAtNextLook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 2500
		store, _, h, names := flaggedServer(t, n)
		poll := func() { pollPreview(h, names) }
		poll()
		time.Sleep(1500 * time.Millisecond) // the first look, at 1 s: every VM's new finding
		poll()                              // their counts: the next look at 2.5 s
		time.Sleep(500 * time.Millisecond)
		var throttled []string
		for i := 0; i < n; i += n / 10 {
			throttled = append(throttled, names[i])
			call(h, names[i], history.Azure, "2020-07-01", http.StatusTooManyRequests, 0, nil)
		}
		before, _ := store.counts()
		time.Sleep(time.Second) // the look at 2.5 s
		after, _ := store.counts()
		for _, name := range throttled {
			if after[name] == before[name] {
				t.Errorf("%s's first throttled request not written at the next look", name)
			}
		}
	})
}

const reportFleet = `scaleSets:
  - name: ss
vms:
  - {name: web, ip: 127.99.0.2, availabilitySet: web}
  - {name: ss_0, ip: 127.99.0.3, scaleSet: ss, instanceId: "0", placementGroup: pg}
  - {name: ss_1, ip: 127.99.0.4, scaleSet: ss, instanceId: "1", placementGroup: pg}
  - {name: g, ip: 127.99.0.5, provider: gce}
  - {name: late, ip: 127.99.0.6}
  - {name: quiet, ip: 127.99.0.7}
`

// approve records vm's approval of event id through h, foreign (of
// another VM's Terminate) or late (after its NotBefore), and makes it.
func approve(t *testing.T, e *engine.Engine, h *history.History, vm, id string, foreign, late bool) {
	t.Helper()
	w := h.Start(httptest.NewRecorder(), vm)
	if err := e.Approve(t.Context(), vm, []string{id}); err != nil {
		t.Fatal(err)
	}
	history.NoteApproved(w, []string{id})
	h.NoteApproval(w, id, foreign, late)
	h.Done(w, history.Azure, "POST", "/metadata/scheduledevents", "2020-07-01")
}

// TestReportKeptAcrossRestart: the report's findings, every one's
// count and detail, and each event's first reader and when, are the
// same after a graceful restart and after a crash (no write once the
// server is killed) 2 s after the last request: of each kind of finding
// but throttled (a count like the header's) and preview-api-version
// (like api-version-hides-events).
func TestReportKeptAcrossRestart(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(map[bool]string{false: "graceful", true: "crash"}[crash], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { reportAcrossRestart(t, crash) })
		})
	}
}

func reportAcrossRestart(t *testing.T, crash bool) {
	fleet := forewarntest.Fleet(t, reportFleet)
	store := &crashStore{Store: mem.New()}
	e1, h1 := serverOnFleet(t, store, fleet)
	for _, vm := range []string{"web", "ss_0", "ss_1", "late"} {
		e1.NoteRequest(vm) // their scheduled events enabled; quiet's not: its Reboot starts at once
		get(h1, vm)
	}
	create := func(typ forewarn.EventType, vm string, notice, lasts time.Duration) string {
		t.Helper()
		ev, err := e1.Create(t.Context(), engine.Spec{Type: typ, VMs: []string{vm}, Notice: notice, Lasts: lasts})
		if err != nil {
			t.Fatal(err)
		}
		return ev.ID
	}
	freeze := create(forewarn.Freeze, "web", 5*time.Second, time.Minute)
	term := create(forewarn.Terminate, "ss_0", 10*time.Minute, 0)
	late := create(forewarn.Reboot, "late", 20*time.Second, time.Minute)
	quiet := create(forewarn.Reboot, "quiet", 0, time.Second)
	time.Sleep(time.Second)

	// web reads its Freeze, makes 3 requests without the header and 2 at
	// the preview, polls every second until the Freeze started (at 5 s),
	// and approves it at 6 s: late.
	get(h1, "web", refOf(t, e1, freeze))
	for range 3 {
		call(h1, "web", history.Azure, "", http.StatusBadRequest, 0, history.NoteNoHeader)
	}
	for range 2 {
		call(h1, "web", history.Azure, azure.PreviewVersion, http.StatusOK, 0, history.NoteCountedVersion)
	}
	// ss_1 reads ss_0's Terminate at 2017-08-01, which hides it, then at
	// 2020-07-01, and approves it: another VM's.
	call(h1, "ss_1", history.Azure, "2017-08-01", http.StatusOK, 0, history.NoteCountedVersion)
	get(h1, "ss_1", refOf(t, e1, term))
	approve(t, e1, h1, "ss_1", term, true, false)
	// g makes a maintenance-event long-poll without last_etag.
	call(h1, "g", history.GCE, "", http.StatusOK, time.Second, func(w http.ResponseWriter) {
		history.NoteLongPoll(w, true, false)
		history.NotePoll(w, history.Timeout)
	})
	for range 4 {
		time.Sleep(time.Second)
		get(h1, "web", refOf(t, e1, freeze))
	}
	time.Sleep(time.Second)
	approve(t, e1, h1, "web", freeze, false, true)
	// late reads its Reboot at 25 s, started at 20 s: after its start,
	// its notice unread.
	time.Sleep(19 * time.Second)
	get(h1, "late", refOf(t, e1, late))

	before, err := report.Build(e1, h1, time.Now(), "")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]uint64{
		"web":  {report.NoMetadataHeader: 3, report.PreviewAPIVersion: 2, report.LateApproval: 1},
		"ss_1": {report.VersionHidesEvents: 1, report.ApprovedOthersTerminate: 1},
		"g":    {report.LongPollWithoutETag: 1},
		"late": {report.SlowPolling: 1, report.ReadAfterStart: 1},
		freeze: {report.ApprovedAfterNotBefore: 1},
		term:   {report.ApprovedByNonOwner: 1},
		late:   {report.SeenAfterStart: 1},
		quiet:  {report.NeverSeen: 1},
	}
	seenBy := map[string]string{freeze: "web", term: "ss_1", late: "late"}
	wantReport(t, "before", before, want, seenBy)

	time.Sleep(2 * time.Second)
	if crash {
		store.crashed.Store(true)
	}
	e1.Close()
	time.Sleep(time.Minute) // no server runs
	e2, h2 := serverOnFleet(t, store.Store, fleet)
	after, err := report.Build(e2, h2, time.Now(), "")
	if err != nil {
		t.Fatal(err)
	}
	wantReport(t, "after", after, want, seenBy)
	for i, b := range before.VMs {
		if a := after.VMs[i]; !reflect.DeepEqual(a.Findings, b.Findings) {
			t.Errorf("%s after the restart: findings\n%+v\nwant as before\n%+v", b.Name, a.Findings, b.Findings)
		}
	}
	for i, b := range before.Events {
		a := after.Events[i]
		if !reflect.DeepEqual(a.Findings, b.Findings) || a.SeenBy != b.SeenBy || !a.SeenAt.Equal(b.SeenAt) {
			t.Errorf("event %s after the restart: seen by %q at %v, findings\n%+v\nwant as before: %q at %v,\n%+v",
				b.ID, a.SeenBy, a.SeenAt, a.Findings, b.SeenBy, b.SeenAt, b.Findings)
		}
	}
}

// wantReport checks the kinds and counts of rep's findings, of each VM
// and event, against want (none for one not in it), and each event's
// first reader against seenBy.
func wantReport(t *testing.T, when string, rep *report.Report, want map[string]map[string]uint64, seenBy map[string]string) {
	t.Helper()
	kinds := func(fs []report.Finding) map[string]uint64 {
		out := map[string]uint64{}
		for _, f := range fs {
			out[f.Kind] = f.Count
		}
		return out
	}
	for _, v := range rep.VMs {
		if got := kinds(v.Findings); !maps.Equal(got, want[v.Name]) {
			t.Errorf("%s, %s: findings %v, want %v", when, v.Name, got, want[v.Name])
		}
	}
	for _, e := range rep.Events {
		if got := kinds(e.Findings); !maps.Equal(got, want[e.ID]) {
			t.Errorf("%s, event %s (%s): findings %v, want %v", when, e.ID, e.Type, got, want[e.ID])
		}
		if e.SeenBy != seenBy[e.ID] {
			t.Errorf("%s, event %s (%s): seen by %q, want %q", when, e.ID, e.Type, e.SeenBy, seenBy[e.ID])
		}
	}
}

// TestUnsaved: the engine reports unsaved what the report needs from a
// request that makes a VM's record due until the look that writes it
// has written it, and nothing once it has; a failed write keeps it
// unsaved.
func TestUnsaved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &flakyStore{Store: mem.New()}
		e, h := serverOn(t, store)
		if e.Unsaved() {
			t.Fatal("unsaved before any request")
		}
		call(h, "a", history.Azure, "", http.StatusBadRequest, 0, history.NoteNoHeader)
		if !e.Unsaved() {
			t.Fatal("a request without the header: not unsaved")
		}
		time.Sleep(500 * time.Millisecond)
		if !e.Unsaved() {
			t.Error("unsaved no longer half a second after, before the engine looked")
		}
		store.down.Store(true)
		time.Sleep(time.Second)
		synctest.Wait()
		if !e.Unsaved() {
			t.Error("not unsaved after a failed write")
		}
		store.down.Store(false)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if e.Unsaved() {
			t.Error("still unsaved once written")
		}
		if e.ClientRecord("a") == nil {
			t.Error("no record of a in the store")
		}
	})
}

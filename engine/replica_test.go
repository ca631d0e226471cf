package engine_test

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

// history records every version of every event a store commits, in
// revision order, from a follower started before any commit.
type history struct {
	mu   sync.Mutex
	revs []int64
	seq  map[string][]forewarn.Status
}

func follow(t *testing.T, s forewarn.Store) *history {
	h := &history{seq: map[string][]forewarn.Status{}}
	ch := s.Follow(t.Context(), 0)
	go func() {
		for u := range ch {
			if u.Reload {
				t.Error("the history follower was told to reload")
				return
			}
			h.mu.Lock()
			h.revs = append(h.revs, u.Revision)
			for _, ev := range u.Change.Events {
				if s := h.seq[ev.ID]; len(s) == 0 || s[len(s)-1] != ev.Status {
					h.seq[ev.ID] = append(s, ev.Status)
				}
			}
			h.mu.Unlock()
		}
	}()
	return h
}

// TestTwoReplicasShareOneStore runs two engines on one store, as two
// replicas do: a write on either is in the other's views, the two race
// on every deadline (a store of one server makes each its own leader),
// and every transition is still applied exactly once.
func TestTwoReplicasShareOneStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := mem.New()
		h := follow(t, store)
		a := newEngine(t, store, true)
		b := newEngine(t, store, true)

		ev, err := a.Create(t.Context(), engine.Spec{Type: forewarn.Freeze, VMs: []string{"web_0"}, Notice: 10 * time.Second, Lasts: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if v := b.View("web_1"); len(v.Events) != 1 || v.Events[0].ID != ev.ID || v.Incarnation != a.View("web_1").Incarnation {
			t.Fatalf("replica b's view of web_1: %d events at incarnation %d; a's incarnation %d",
				len(v.Events), v.Incarnation, a.View("web_1").Incarnation)
		}
		// Writes on both at once: each is retried after catching up, none
		// lost.
		var wg sync.WaitGroup
		ids := make([]string, 6)
		for i := range ids {
			wg.Go(func() {
				e := a
				if i%2 == 1 {
					e = b
				}
				c, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"db_0"}, Notice: time.Minute})
				if err != nil {
					t.Errorf("create %d: %v", i, err)
					return
				}
				ids[i] = c.ID
			})
		}
		wg.Wait()
		synctest.Wait()
		for _, e := range []*engine.Engine{a, b} {
			if got := len(e.View("db_1").Events); got != len(ids) {
				t.Fatalf("db_1 sees %d events, want %d", got, len(ids))
			}
		}
		// The approval on b starts the Freeze on a at once.
		if err := b.Approve(t.Context(), "web_1", []string{ev.ID}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		wantState(t, a, ev.ID, "web_0", forewarn.Started, b.View("web_0").Incarnation)

		time.Sleep(time.Hour) // every deadline passes; both engines fire each
		synctest.Wait()
		h.mu.Lock()
		defer h.mu.Unlock()
		want := map[string][]forewarn.Status{ev.ID: {forewarn.Scheduled, forewarn.Started, forewarn.Completed}}
		for _, id := range ids {
			want[id] = []forewarn.Status{forewarn.Scheduled, forewarn.Started, forewarn.Completed}
		}
		for id, w := range want {
			if got := h.seq[id]; !slicesEqual(got, w) {
				t.Errorf("event %s went %v, want %v", id, got, w)
			}
		}
		for i, r := range h.revs {
			if r != int64(i+1) {
				t.Fatalf("revisions %v are not 1, 2, 3...", h.revs)
			}
		}
		if a.Revision() != b.Revision() || a.Revision() != h.revs[len(h.revs)-1] {
			t.Fatalf("revisions: a %d, b %d, store %d", a.Revision(), b.Revision(), h.revs[len(h.revs)-1])
		}
		for _, vm := range []string{"web_0", "web_1", "db_0", "db_1"} {
			if a.View(vm).Incarnation != b.View(vm).Incarnation {
				t.Errorf("%s: incarnation %d on a, %d on b", vm, a.View(vm).Incarnation, b.View(vm).Incarnation)
			}
		}
	})
}

func slicesEqual(a, b []forewarn.Status) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestReadOnOneReplicaWarnsOnAnother: a VM reads its maintenance-event
// key on one replica; the leader, another replica that never saw the
// read, learns of it through the store and gives the live migration its
// warning. A read before a maintenance ended does not count for the next.
func TestReadOnOneReplicaWarnsOnAnother(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := mem.New()
		leader := newGCEEngine(t, store)
		other := newGCEEngine(t, store)
		synctest.Wait() // the calls that enabled the VMs are stored
		other.NoteQuery("mig")
		synctest.Wait() // the read is stored
		other.Close()   // one leader left: the other replica was the only reader

		t0 := time.Now()
		ev, err := leader.Create(t.Context(), engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"mig"}, Notice: 3 * time.Minute, Lasts: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		step(2 * time.Minute)
		if got, _ := leader.Event(ev.ID); got.Status != forewarn.Scheduled || !got.WarnedAt.Equal(t0.Add(2*time.Minute)) {
			t.Fatalf("at NotBefore-60s: %s warned %v; want Scheduled, warned at %v", got.Status, got.WarnedAt, t0.Add(2*time.Minute))
		}
		step(2 * time.Minute)
		if got, _ := leader.Event(ev.ID); got.Status != forewarn.Completed {
			t.Fatalf("after the migration: %s", got.Status)
		}
		// No read since it ended: the next migration skips its warning.
		ev2, err := leader.Create(t.Context(), engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"mig"}, Notice: 3 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		step(2 * time.Minute)
		if got, _ := leader.Event(ev2.ID); got.Status != forewarn.Started {
			t.Fatalf("unwatched migration at NotBefore-60s: %s, want Started", got.Status)
		}
		st, err := store.Load(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if r := st.VMs["mig"]; r == nil || !r.Queried.Equal(t0) {
			t.Fatalf("stored record of mig: %+v, want Queried %v", r, t0)
		}
	})
}

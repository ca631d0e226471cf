package engine_test

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

// topoFleet: an availability set over three update domains, a scale set
// in two placement groups, a Spot VM in the availability set, a cloud
// service and a standalone zonal VM.
func topoFleet() *forewarn.Fleet {
	az := func(name string, mod func(*forewarn.VM)) *forewarn.VM {
		vm := &forewarn.VM{Name: name, Provider: forewarn.Azure}
		mod(vm)
		return vm
	}
	return &forewarn.Fleet{
		VMs: []*forewarn.VM{
			az("web_0", func(v *forewarn.VM) { v.AvailabilitySet = "web" }),
			az("web_1", func(v *forewarn.VM) { v.AvailabilitySet, v.UpdateDomain = "web", 1 }),
			az("web_2", func(v *forewarn.VM) { v.AvailabilitySet, v.UpdateDomain = "web", 2 }),
			az("web_3", func(v *forewarn.VM) { v.AvailabilitySet, v.UpdateDomain = "web", 1 }),
			az("spot", func(v *forewarn.VM) { v.AvailabilitySet, v.Spot = "web", true }),
			az("ss_0", func(v *forewarn.VM) { v.ScaleSet, v.InstanceID, v.PlacementGroup = "ss", "0", "pg0" }),
			az("ss_1", func(v *forewarn.VM) { v.ScaleSet, v.InstanceID, v.PlacementGroup = "ss", "1", "pg0" }),
			az("ss_2", func(v *forewarn.VM) { v.ScaleSet, v.InstanceID, v.PlacementGroup = "ss", "2", "pg1" }),
			az("ss_3", func(v *forewarn.VM) { v.ScaleSet, v.InstanceID, v.PlacementGroup, v.Spot = "ss", "3", "pg1", true }),
			az("cs_0", func(v *forewarn.VM) { v.CloudService = "cs" }),
			az("cs_1", func(v *forewarn.VM) { v.CloudService = "cs" }),
			az("zonal", func(v *forewarn.VM) { v.Zone = "1" }),
			az("zonal2", func(v *forewarn.VM) { v.Zone = "1" }),
		},
		ScaleSets: []*forewarn.ScaleSet{{Name: "ss", TerminateTimeout: 10 * time.Minute}},
	}
}

func newTopoEngine(t *testing.T, enable bool) *engine.Engine {
	t.Helper()
	e, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: topoFleet(), DisableAfter: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if enable {
		enableAll(e)
	}
	return e
}

func mustEvent(t *testing.T, e *engine.Engine, id string) *forewarn.Event {
	t.Helper()
	ev, err := e.Event(id)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func wantStatus(t *testing.T, e *engine.Engine, want forewarn.Status, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if got := mustEvent(t, e, id).Status; got != want {
			t.Fatalf("at +%s: event %s is %s, want %s", time.Since(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)), id, got, want)
		}
	}
}

func TestScopes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTopoEngine(t, true)
		sees := func(vm string) []string {
			var out []string
			for _, ev := range e.View(vm).Events {
				out = append(out, ev.Resources...)
			}
			return out
		}
		for _, c := range []struct {
			target string
			seenBy []string
		}{
			{"web_1", []string{"web_0", "web_1", "web_2", "web_3", "spot"}},
			{"ss_0", []string{"ss_0", "ss_1"}}, // one placement group
			{"ss_2", []string{"ss_2", "ss_3"}},
			{"cs_1", []string{"cs_0", "cs_1"}},
			{"zonal", []string{"zonal"}}, // a standalone zonal VM sees only its own
		} {
			ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Freeze, VMs: []string{c.target}})
			if err != nil {
				t.Fatal(err)
			}
			for _, vm := range e.Fleet().VMs {
				got := slices.Contains(sees(vm.Name), c.target)
				if want := slices.Contains(c.seenBy, vm.Name); got != want {
					t.Errorf("%s sees the event of %s: %v, want %v", vm.Name, c.target, got, want)
				}
			}
			if err := e.Approve(t.Context(), "zonal2", []string{ev.ID}); forewarn.ErrorCode(err) != forewarn.ENOTFOUND {
				t.Errorf("approval of %s's event by zonal2: %v", c.target, err)
			}
			if err := e.Cancel(t.Context(), ev.ID); err != nil {
				t.Fatal(err)
			}
		}
		_, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_0", "web_1"}})
		if forewarn.ErrorMessage(err) != `VMs "web_0" (update domain 0) and "web_1" (update domain 1) are in different update domains; one event spans one update domain` {
			t.Fatalf("an event over two update domains: %v", err)
		}
		if _, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_1", "web_3"}}); err != nil {
			t.Fatalf("an event over one update domain: %v", err)
		}
	})
}

func TestWaveOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTopoEngine(t, true)
		t0 := time.Now()
		w, err := e.StartWave(t.Context(), engine.WaveSpec{Scope: "web", Type: forewarn.Reboot, Lasts: 5 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(w.Domains) != 3 || w.Status != "running" || w.Scope != "web" {
			t.Fatalf("wave %+v", w)
		}
		d := w.Domains
		wantVMs := [][]string{{"web_0", "spot"}, {"web_1", "web_3"}, {"web_2"}}
		for i, dom := range d {
			if dom.UpdateDomain != i || !slices.Equal(dom.VMs, wantVMs[i]) {
				t.Fatalf("domain %d: %+v", i, dom)
			}
		}
		wantStatus(t, e, forewarn.Scheduled, d[0].Event)
		wantStatus(t, e, forewarn.Pending, d[1].Event, d[2].Event)
		if len(e.View("web_1").Events) != 1 || e.View("web_1").Events[0].ID != d[0].Event {
			t.Fatal("a Pending event is visible")
		}
		// UD0: 15 minutes notice, 5 minutes of impact.
		step(15 * time.Minute)
		wantStatus(t, e, forewarn.Started, d[0].Event)
		wantStatus(t, e, forewarn.Pending, d[1].Event)
		step(5 * time.Minute)
		wantStatus(t, e, forewarn.Completed, d[0].Event)
		// UD1 is raised when UD0 completes, with its own full notice.
		ud1 := mustEvent(t, e, d[1].Event)
		if ud1.Status != forewarn.Scheduled || !ud1.NotBefore.Equal(t0.Add(35*time.Minute)) {
			t.Fatalf("UD1: %s NotBefore %v", ud1.Status, ud1.NotBefore)
		}
		wantStatus(t, e, forewarn.Pending, d[2].Event)
		// Approval moves UD1 on at once; UD2 waits for UD1's completion.
		if err := e.Approve(t.Context(), "web_3", []string{ud1.ID}); err != nil {
			t.Fatal(err)
		}
		step(5 * time.Minute)
		wantStatus(t, e, forewarn.Completed, d[1].Event)
		wantStatus(t, e, forewarn.Scheduled, d[2].Event)
		step(20 * time.Minute)
		wantStatus(t, e, forewarn.Completed, d[2].Event)
		if ws := e.Waves(); len(ws) != 1 || ws[0].Status != "done" {
			t.Fatalf("waves after the last domain: %+v", ws)
		}
		if _, err := e.StartWave(t.Context(), engine.WaveSpec{Scope: "nope", Type: forewarn.Reboot}); forewarn.ErrorCode(err) != forewarn.ENOTFOUND {
			t.Fatalf("unknown scope: %v", err)
		}
		if _, err := e.StartWave(t.Context(), engine.WaveSpec{Scope: "ss", Type: forewarn.Terminate}); forewarn.ErrorCode(err) != forewarn.EINVALID {
			t.Fatalf("Terminate wave: %v", err)
		}
	})
}

func TestTerminateCoupling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTopoEngine(t, true)
		t0 := time.Now()
		t1, err := e.Delete(t.Context(), "ss_0")
		if err != nil {
			t.Fatal(err)
		}
		if t1.Type != forewarn.Terminate || t1.Source != forewarn.User || !t1.NotBefore.Equal(t0.Add(10*time.Minute)) {
			t.Fatalf("delete raised %+v", t1)
		}
		step(2 * time.Minute)
		t2, err := e.Delete(t.Context(), "ss_1")
		if err != nil {
			t.Fatal(err)
		}
		// ss_1 approves its own; ss_0's is pending: neither starts.
		if err := e.Approve(t.Context(), "ss_1", []string{t2.ID}); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, e, forewarn.Scheduled, t1.ID, t2.ID)
		step(8*time.Minute - time.Second)
		wantStatus(t, e, forewarn.Scheduled, t1.ID, t2.ID)
		// ss_0's times out at +10m: both start together.
		step(time.Second)
		wantStatus(t, e, forewarn.Started, t1.ID, t2.ID)
		if a, b := mustEvent(t, e, t1.ID), mustEvent(t, e, t2.ID); !a.StartedAt.Equal(b.StartedAt) || !a.StartedAt.Equal(t0.Add(10*time.Minute)) {
			t.Fatalf("started at %v and %v", a.StartedAt, b.StartedAt)
		}
		step(5 * time.Minute)
		wantStatus(t, e, forewarn.Completed, t1.ID, t2.ID)
		for _, vm := range e.VMs() {
			if (vm.Name == "ss_0" || vm.Name == "ss_1") != (vm.State == "deleted") {
				t.Errorf("%s is %s", vm.Name, vm.State)
			}
		}
		if !e.View("ss_0").Deleted {
			t.Fatal("ss_0's view is not deleted")
		}
		if _, err := e.Delete(t.Context(), "ss_0"); forewarn.ErrorCode(err) != forewarn.ECONFLICT {
			t.Fatalf("deleting a deleted VM: %v", err)
		}
		if _, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"ss_0"}}); forewarn.ErrorMessage(err) != `VM "ss_0" has been deleted` {
			t.Fatalf("an event for a deleted VM: %v", err)
		}
	})
}

func TestTerminatesWithOneNotBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTopoEngine(t, true)
		a, _ := e.Delete(t.Context(), "ss_0")
		b, _ := e.Delete(t.Context(), "ss_2")
		if !a.NotBefore.Equal(b.NotBefore) {
			t.Fatalf("NotBefore %v and %v", a.NotBefore, b.NotBefore)
		}
		// All must approve: one approval starts nothing.
		if err := e.Approve(t.Context(), "ss_0", []string{a.ID}); err != nil {
			t.Fatal(err)
		}
		step(time.Minute)
		wantStatus(t, e, forewarn.Scheduled, a.ID, b.ID)
		if err := e.Approve(t.Context(), "ss_2", []string{b.ID}); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, e, forewarn.Started, a.ID, b.ID)

		// Without approvals, all start when all have timed out.
		c, _ := e.Delete(t.Context(), "ss_1")
		step(10*time.Minute - time.Second)
		wantStatus(t, e, forewarn.Scheduled, c.ID)
		step(time.Second)
		wantStatus(t, e, forewarn.Started, c.ID)
		// A Spot VM in a scale set is deleted at once, with no Terminate shown.
		d, err := e.Delete(t.Context(), "ss_3")
		if err != nil || d.Status != forewarn.Completed || !e.View("ss_3").Deleted || len(e.View("ss_3").Events) != 0 {
			t.Fatalf("Spot delete: %+v %v", d, err)
		}
		if _, err := e.Delete(t.Context(), "web_0"); forewarn.ErrorCode(err) != forewarn.EINVALID {
			t.Fatalf("delete outside a scale set: %v", err)
		}
	})
}

func TestCancelUnblocksTerminates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTopoEngine(t, true)
		a, _ := e.Delete(t.Context(), "ss_0")
		b, _ := e.Delete(t.Context(), "ss_1")
		if err := e.Approve(t.Context(), "ss_1", []string{b.ID}); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, e, forewarn.Scheduled, b.ID)
		if err := e.Cancel(t.Context(), a.ID); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, e, forewarn.Started, b.ID)
	})
}

func TestSpotEviction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTopoEngine(t, true)
		other, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Freeze, VMs: []string{"web_0", "spot"}})
		if err != nil {
			t.Fatal(err)
		}
		p, err := e.Evict(t.Context(), "spot")
		if err != nil {
			t.Fatal(err)
		}
		if p.Type != forewarn.Preempt || p.Source != forewarn.Platform || !p.NotBefore.Equal(time.Now().Add(30*time.Second)) {
			t.Fatalf("evict raised %+v", p)
		}
		step(30*time.Second - time.Millisecond)
		wantStatus(t, e, forewarn.Scheduled, p.ID)
		step(time.Millisecond)
		wantStatus(t, e, forewarn.Started, p.ID)
		step(2 * time.Minute)
		wantStatus(t, e, forewarn.Completed, p.ID)
		if !e.View("spot").Deleted {
			t.Fatal("the evicted VM is not deleted")
		}
		// It no longer appears in other VMs' events.
		if got := mustEvent(t, e, other.ID).Resources; !slices.Equal(got, []string{"web_0"}) {
			t.Fatalf("resources after the eviction: %v", got)
		}
		if r := e.View("web_1").Events[0].Resources; !slices.Equal(r, []string{"web_0"}) {
			t.Fatalf("web_1 sees resources %v", r)
		}
	})
}

func TestDegrade(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTopoEngine(t, true)
		ev, err := e.Degrade(t.Context(), "zonal", 0)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type != forewarn.Redeploy || ev.Source != forewarn.Platform || !ev.NotBefore.Equal(time.Now().Add(7*24*time.Hour)) {
			t.Fatalf("degrade raised %+v", ev)
		}
		step(7*24*time.Hour - time.Second)
		wantStatus(t, e, forewarn.Scheduled, ev.ID)
		step(time.Second)
		wantStatus(t, e, forewarn.Started, ev.ID)
	})
}

func TestEnablement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTopoEngine(t, false)
		// Nobody listens on a never-polled VM: a Platform event starts at once.
		p, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"zonal"}})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status != forewarn.Started {
			t.Fatalf("Platform event on a never-polled VM: %s", p.Status)
		}
		// A User event keeps its notice.
		u, _ := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"zonal2"}, Source: forewarn.User})
		wantStatus(t, e, forewarn.Scheduled, u.ID)

		if !e.NoteRequest("cs_0") || e.NoteRequest("cs_0") {
			t.Fatal("NoteRequest: the first call enables, the second does not")
		}
		// One enabled VM among the Resources is enough to keep the notice.
		ev, _ := e.Create(t.Context(), engine.Spec{Type: forewarn.Freeze, VMs: []string{"cs_0", "cs_1"}})
		wantStatus(t, e, forewarn.Scheduled, ev.ID)
		if err := e.Cancel(t.Context(), ev.ID); err != nil {
			t.Fatal(err)
		}
		// 24 hours of silence disable it again.
		step(24*time.Hour - time.Second)
		ev, _ = e.Create(t.Context(), engine.Spec{Type: forewarn.Freeze, VMs: []string{"cs_0"}})
		wantStatus(t, e, forewarn.Scheduled, ev.ID)
		e.Cancel(t.Context(), ev.ID)
		step(time.Second)
		ev, _ = e.Create(t.Context(), engine.Spec{Type: forewarn.Freeze, VMs: []string{"cs_0"}})
		wantStatus(t, e, forewarn.Started, ev.ID)
		for _, vm := range e.VMs() {
			if vm.Name == "cs_0" && (vm.Enabled || !vm.LastSeen.Equal(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC))) {
				t.Fatalf("cs_0 after 24h: enabled %v, last seen %v", vm.Enabled, vm.LastSeen)
			}
		}
		if !e.NoteRequest("cs_0") {
			t.Fatal("the call after the silence does not re-enable")
		}
		// A wave over VMs that nobody polls starts each domain at once.
		w, err := e.StartWave(t.Context(), engine.WaveSpec{Scope: "web", Type: forewarn.Freeze, Lasts: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, e, forewarn.Started, w.Domains[0].Event)
	})
}

func TestLastSeenSurvivesRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := mem.New()
		e, err := engine.New(t.Context(), engine.Config{Store: store, Fleet: topoFleet()})
		if err != nil {
			t.Fatal(err)
		}
		e.NoteRequest("zonal")
		synctest.Wait() // the background save
		e.Close()
		st, _ := store.Load(t.Context())
		if r := st.VMs["zonal"]; r == nil || !r.LastSeen.Equal(time.Now()) {
			t.Fatalf("stored record %+v", r)
		}
		step(time.Hour)
		e2, err := engine.New(t.Context(), engine.Config{Store: store, Fleet: topoFleet()})
		if err != nil {
			t.Fatal(err)
		}
		defer e2.Close()
		ev, _ := e2.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"zonal"}})
		if ev.Status != forewarn.Scheduled {
			t.Fatalf("a VM seen an hour before the restart counts as disabled: %s", ev.Status)
		}
	})
}

// TestConcurrentEvictAndDelete: the conflict check and the create are one
// step, so racing callers raise exactly one Preempt or Terminate.
func TestConcurrentEvictAndDelete(t *testing.T) {
	e, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: topoFleet()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	enableAll(e)
	var evicts, deletes atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, err := e.Evict(t.Context(), "spot"); err == nil {
				evicts.Add(1)
			} else if forewarn.ErrorCode(err) != forewarn.ECONFLICT {
				t.Errorf("evict: %v", err)
			}
		})
		wg.Go(func() {
			if _, err := e.Delete(t.Context(), "ss_0"); err == nil {
				deletes.Add(1)
			} else if forewarn.ErrorCode(err) != forewarn.ECONFLICT {
				t.Errorf("delete: %v", err)
			}
		})
	}
	wg.Wait()
	if evicts.Load() != 1 || deletes.Load() != 1 {
		t.Fatalf("%d evictions and %d deletes succeeded, want 1 each", evicts.Load(), deletes.Load())
	}
	if n := len(e.Events()); n != 2 {
		t.Fatalf("%d events, want 2", n)
	}
}

// TestLastSeenSavedOnClose: a first call just before shutdown is still
// stored, so the VM is not taken for one nobody listens on after a restart.
func TestLastSeenSavedOnClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := mem.New()
		e, err := engine.New(t.Context(), engine.Config{Store: store, Fleet: topoFleet(), DisableAfter: 30 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		for _, vm := range []string{"zonal", "zonal2", "cs_0", "cs_1"} {
			e.NoteRequest(vm)
		}
		e.Close()
		st, _ := store.Load(t.Context())
		for _, vm := range []string{"zonal", "zonal2", "cs_0", "cs_1"} {
			if r := st.VMs[vm]; r == nil || !r.LastSeen.Equal(time.Now()) {
				t.Errorf("%s: stored %+v", vm, r)
			}
		}
	})
}

// TestTerminateMandatoryAtTimeout checks seed 004's mandatory delete: a
// Terminate starts at its own NotBefore, to the second, while a later
// delete of its scale set is still pending, and a steady scale-in never
// holds an earlier delete. An approved Terminate still waits for the
// other pending ones until they are approved or time out.
func TestTerminateMandatoryAtTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTopoEngine(t, true)
		t0 := time.Now()
		first, err := e.Delete(t.Context(), "ss_0")
		if err != nil {
			t.Fatal(err)
		}
		step(2 * time.Minute)
		second, err := e.Delete(t.Context(), "ss_1") // NotBefore +12m, never approved
		if err != nil {
			t.Fatal(err)
		}
		step(time.Minute)
		third, err := e.Delete(t.Context(), "ss_2") // NotBefore +13m, approved at once
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Approve(t.Context(), "ss_2", []string{third.ID}); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, e, forewarn.Scheduled, first.ID, second.ID, third.ID)
		step(7*time.Minute - time.Second) // +9m59s
		wantStatus(t, e, forewarn.Scheduled, first.ID, second.ID, third.ID)
		step(time.Second) // +10m: the first times out, whatever the later ones
		wantStatus(t, e, forewarn.Started, first.ID)
		wantStatus(t, e, forewarn.Scheduled, second.ID, third.ID)
		if got := mustEvent(t, e, first.ID); !got.StartedAt.Equal(t0.Add(10 * time.Minute)) {
			t.Fatalf("first started at %v, want %v", got.StartedAt, t0.Add(10*time.Minute))
		}
		step(2*time.Minute - time.Second) // +11m59s: the approved third still waits for the second
		wantStatus(t, e, forewarn.Scheduled, second.ID, third.ID)
		step(time.Second) // +12m: the second times out, and the third goes with it
		wantStatus(t, e, forewarn.Started, second.ID, third.ID)
		for _, c := range []struct {
			id string
			at time.Duration
		}{{second.ID, 12 * time.Minute}, {third.ID, 12 * time.Minute}} {
			if got := mustEvent(t, e, c.id); !got.StartedAt.Equal(t0.Add(c.at)) {
				t.Fatalf("%s started at %v, want +%v", c.id, got.StartedAt.Sub(t0), c.at)
			}
		}
	})
}

// TestTerminateApprovedWaitsForEveryPending checks that an approved
// Terminate waits for every other pending one of its scale set, earlier
// or later, and that the last approval starts them all at once.
func TestTerminateApprovedWaitsForEveryPending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTopoEngine(t, true)
		first, _ := e.Delete(t.Context(), "ss_0")
		step(time.Minute)
		second, _ := e.Delete(t.Context(), "ss_1")
		step(time.Minute)
		third, _ := e.Delete(t.Context(), "ss_2")
		if err := e.Approve(t.Context(), "ss_2", []string{third.ID}); err != nil {
			t.Fatal(err)
		}
		if err := e.Approve(t.Context(), "ss_0", []string{first.ID}); err != nil {
			t.Fatal(err)
		}
		// The second, neither approved nor timed out, holds the earlier
		// first and the later third alike.
		wantStatus(t, e, forewarn.Scheduled, first.ID, second.ID, third.ID)
		step(time.Minute)
		if err := e.Approve(t.Context(), "ss_1", []string{second.ID}); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, e, forewarn.Started, first.ID, second.ID, third.ID)
		for _, id := range []string{first.ID, second.ID, third.ID} {
			if got := mustEvent(t, e, id); !got.StartedAt.Equal(time.Now()) {
				t.Fatalf("%s started at %v, want now", id, got.StartedAt)
			}
		}
	})
}

// TestTerminateApprovedWaitsForLaterPending is issue 22's point 10. Seed
// 004, "Approve all pending deletes": "If there's a pending delete on VM_1
// that isn't approved, and you've approved another terminate event on
// VM_2, then VM_2 isn't deleted until the terminate event for VM_1 is
// approved, or its timeout has elapsed." The seed sets no order between
// the two; until issue 22 only an earlier pending delete held an approved
// one. Here VM_2 (ss_2) is deleted first and VM_1 (ss_0) a minute later:
// VM_2's approval starts nothing and changes no document; VM_1's starts
// both. Without VM_1's approval, VM_2 is deleted at its own timeout, to
// the second, and VM_1 at its own.
func TestTerminateApprovedWaitsForLaterPending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTopoEngine(t, true)
		t0 := time.Now()
		vm2, _ := e.Delete(t.Context(), "ss_2") // NotBefore +10m
		step(time.Minute)
		vm1, _ := e.Delete(t.Context(), "ss_0") // NotBefore +11m
		step(time.Minute)
		inc := e.View("ss_2").Incarnation
		if err := e.Approve(t.Context(), "ss_2", []string{vm2.ID}); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, e, forewarn.Scheduled, vm2.ID, vm1.ID)
		if got := mustEvent(t, e, vm2.ID); !got.NotBefore.Equal(t0.Add(10*time.Minute)) || !got.Approved() {
			t.Fatalf("VM_2's approved Terminate: NotBefore +%v, approved %v", got.NotBefore.Sub(t0), got.Approved())
		}
		if v := e.View("ss_2"); v.Incarnation != inc {
			t.Fatalf("VM_2's approval that starts nothing moved its incarnation %d -> %d", inc, v.Incarnation)
		}
		step(time.Minute) // +3m
		if err := e.Approve(t.Context(), "ss_0", []string{vm1.ID}); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, e, forewarn.Started, vm2.ID, vm1.ID)
		for _, id := range []string{vm2.ID, vm1.ID} {
			if got := mustEvent(t, e, id); !got.StartedAt.Equal(t0.Add(3 * time.Minute)) {
				t.Fatalf("%s started at +%v, want +3m", id, got.StartedAt.Sub(t0))
			}
		}

		// VM_1 never approves: VM_2 goes at its own timeout, VM_1 at its own.
		e = newTopoEngine(t, true)
		t0 = time.Now()
		vm2, _ = e.Delete(t.Context(), "ss_0") // NotBefore +10m
		step(time.Minute)
		vm1, _ = e.Delete(t.Context(), "ss_1") // NotBefore +11m
		if err := e.Approve(t.Context(), "ss_0", []string{vm2.ID}); err != nil {
			t.Fatal(err)
		}
		step(9*time.Minute - time.Second) // +9m59s
		wantStatus(t, e, forewarn.Scheduled, vm2.ID, vm1.ID)
		step(time.Second) // +10m
		wantStatus(t, e, forewarn.Started, vm2.ID)
		wantStatus(t, e, forewarn.Scheduled, vm1.ID)
		step(time.Minute) // +11m
		wantStatus(t, e, forewarn.Started, vm1.ID)
		for id, at := range map[string]time.Duration{vm2.ID: 10 * time.Minute, vm1.ID: 11 * time.Minute} {
			if got := mustEvent(t, e, id); !got.StartedAt.Equal(t0.Add(at)) {
				t.Fatalf("%s started at +%v, want +%v", id, got.StartedAt.Sub(t0), at)
			}
		}
	})
}

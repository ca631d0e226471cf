package engine_test

import (
	"reflect"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

// progressOf returns the progress of session id at now.
func progressOf(t *testing.T, e *engine.Engine, id string) engine.SessionProgress {
	t.Helper()
	all, _ := e.SessionProgress(time.Now(), 0)
	for _, p := range all {
		if p.Session.ID == id {
			return p
		}
	}
	t.Fatalf("no progress of session %s", id)
	return engine.SessionProgress{}
}

// sameHostEvents reports whether a and b are the same: NotBefore is
// compared as an instant, since an event read back from the store
// holds its time in UTC and one made in the bubble holds it in Local.
func sameHostEvents(a, b engine.HostEvents) bool {
	return a.Events == b.Events && a.Started == b.Started && slices.Equal(a.Waiting, b.Waiting) && a.NotBefore.Equal(b.NotBefore)
}

// TestSessionProgress follows one session through its waits, to the
// second: the budget use of the host under way, the next host held by
// its budget, the events a Notifying host waits for, the delay, the
// cap on hosts and the end.
func TestSessionProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newHostEngine(t, mem.New())
		t0 := time.Now()
		id := createSession(t, e, forewarn.SessionSpec{Hosts: []string{"hv1", "hv2", "hv3"}, MaxHosts: 2, Notice: 10 * time.Minute, Delay: 5 * time.Minute,
			MaxUnavailable: map[string]forewarn.Budget{forewarn.GroupAvailabilitySet: {Count: 1}, forewarn.GroupUpdateDomain: {Percent: 50}, forewarn.GroupZone: {Count: 3}}})
		p := progressOf(t, e, id)
		// hv1 has web_0 (web, update domain 0, which holds web_0 and
		// web_2: 50% is 1), g1 and e1, each with an event of its own.
		wantBudgets := []engine.BudgetUse{
			{Kind: forewarn.GroupAvailabilitySet, Budget: forewarn.Budget{Count: 1}, Groups: []engine.GroupUse{{Name: "availabilitySet web", Down: 1, Limit: 1}}},
			{Kind: forewarn.GroupUpdateDomain, Budget: forewarn.Budget{Percent: 50}, Groups: []engine.GroupUse{{Name: "update domain 0 of web", Down: 1, Limit: 1}}},
			{Kind: forewarn.GroupZone, Budget: forewarn.Budget{Count: 3}},
		}
		if p.Underway != 1 || p.MaxHosts != 2 || !reflect.DeepEqual(p.Budgets, wantBudgets) {
			t.Fatalf("underway %d of %d, budgets %+v; want 1 of 2, %+v", p.Underway, p.MaxHosts, p.Budgets, wantBudgets)
		}
		want := engine.HostEvents{Events: 3, Waiting: []string{"e1", "g1", "web_0"}, NotBefore: t0.Add(10 * time.Minute)}
		if got := p.Notifying["hv1"]; !sameHostEvents(got, want) || len(p.Notifying) != 1 {
			t.Fatalf("hv1's events: %+v, want %+v", p.Notifying, want)
		}
		// hv2 holds web_1: availability set web would have 2 down. hv3
		// would too, and is not looked at.
		if wantB := (engine.BlockedHost{Host: "hv2", Group: engine.GroupUse{Name: "availabilitySet web", Down: 2, Limit: 1}}); p.Wait != engine.WaitBudget || p.Blocked != wantB || !p.Next.IsZero() || !p.InWindow {
			t.Fatalf("wait %q %+v, next %v, in window %v; want budget %+v, none, true", p.Wait, p.Blocked, p.Next, p.InWindow, wantB)
		}

		h1 := hostOf(t, e, id, "hv1")
		if err := e.Approve(t.Context(), "g1", []string{eventFor(t, e, h1, "g1").ID}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		want = engine.HostEvents{Events: 3, Started: 1, Waiting: []string{"e1", "web_0"}, NotBefore: t0.Add(10 * time.Minute)}
		if got := progressOf(t, e, id).Notifying["hv1"]; !sameHostEvents(got, want) {
			t.Fatalf("hv1's events after g1 approved: %+v, want %+v", got, want)
		}
		step(10 * time.Minute)
		wantHosts(t, e, id, "Running hv1=InMaintenance hv2=Pending hv3=Pending")
		if p := progressOf(t, e, id); len(p.Notifying) != 0 || p.Wait != engine.WaitBudget || p.Underway != 1 {
			t.Fatalf("hv1 InMaintenance: %+v", p)
		}

		// hv1 done: no VM down, the delay runs 5 minutes.
		if err := e.HostDone(t.Context(), "hv1"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		ended := time.Now()
		p = progressOf(t, e, id)
		if p.Wait != engine.WaitDelay || !p.Until.Equal(ended.Add(5*time.Minute)) || !p.Next.Equal(p.Until) || p.Underway != 0 ||
			len(p.Budgets) != 3 || len(p.Budgets[0].Groups) != 0 {
			t.Fatalf("after hv1 done: wait %q until +%s, next +%s, underway %d, budgets %+v", p.Wait, p.Until.Sub(t0), p.Next.Sub(t0), p.Underway, p.Budgets)
		}
		step(5*time.Minute - time.Second)
		if p := progressOf(t, e, id); p.Wait != engine.WaitDelay {
			t.Fatalf("a second before the delay ends: %q", p.Wait)
		}
		// hv2 and hv3 share availability set web: hv2 starts, hv3 waits.
		step(time.Second)
		wantHosts(t, e, id, "Running hv1=Done hv2=Notifying hv3=Pending")
		if p := progressOf(t, e, id); p.Wait != engine.WaitBudget || p.Blocked.Host != "hv3" || !p.Next.IsZero() {
			t.Fatalf("hv2 under way: %q %+v next %v", p.Wait, p.Blocked, p.Next)
		}

		if err := e.PauseSession(t.Context(), id); err != nil {
			t.Fatal(err)
		}
		if p := progressOf(t, e, id); p.Wait != engine.WaitPaused {
			t.Fatalf("paused: %q", p.Wait)
		}
		if err := e.CancelSession(t.Context(), id); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if p := progressOf(t, e, id); p.Wait != engine.WaitEnded || p.Underway != 0 {
			t.Fatalf("cancelled: %q, %d under way", p.Wait, p.Underway)
		}
	})
}

// TestSessionProgressWaits: a session at its cap of hosts, one outside
// its windows, and one with no host left to start; newest first.
func TestSessionProgressWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newHostEngine(t, mem.New())
		// 2000-01-01 is a Saturday.
		t0 := time.Now()
		capped := createSession(t, e, forewarn.SessionSpec{Hosts: []string{"hv1", "hv2"}, Notice: time.Minute})
		if p := progressOf(t, e, capped); p.Wait != engine.WaitMaxHosts || p.Underway != 1 || p.MaxHosts != 1 || p.Budgets != nil {
			t.Fatalf("capped: %q %d/%d %+v", p.Wait, p.Underway, p.MaxHosts, p.Budgets)
		}
		time.Sleep(time.Second)
		closed := createSession(t, e, forewarn.SessionSpec{Hosts: []string{"hv3"}, Notice: time.Minute, Windows: []string{"Mon 22:00-06:00"}})
		monday := t0.Add(2*24*time.Hour + 22*time.Hour)
		if p := progressOf(t, e, closed); p.Wait != engine.WaitWindow || p.InWindow || !p.Until.Equal(monday) || !p.WindowChange.Equal(monday) || !p.Next.Equal(monday) {
			t.Fatalf("outside its window: %q in %v until %v, change %v, next %v; want window until %v", p.Wait, p.InWindow, p.Until, p.WindowChange, p.Next, monday)
		}
		all, n := e.SessionProgress(time.Now(), 1)
		if n != 2 || len(all) != 1 || all[0].Session.ID != closed {
			t.Fatalf("the newest 1 of %d: %d, want %s", n, len(all), closed)
		}
		step(monday.Sub(time.Now()))
		wantHosts(t, e, closed, "Running hv3=Notifying")
		tuesday := monday.Add(8 * time.Hour)
		if p := progressOf(t, e, closed); p.Wait != engine.WaitLast || !p.InWindow || !p.WindowChange.Equal(tuesday) || !p.Next.Equal(tuesday) {
			t.Fatalf("inside its window: %q in %v, change %v, next %v; want last, closes %v", p.Wait, p.InWindow, p.WindowChange, p.Next, tuesday)
		}
	})
}

// TestHostSummaries: each host with its VM count and where it is in
// the newest session that names it.
func TestHostSummaries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newHostEngine(t, mem.New())
		id := createSession(t, e, forewarn.SessionSpec{Hosts: []string{"hv2"}, Notice: time.Minute})
		want := []engine.HostSummary{
			{Name: "hv1", VMs: 3},
			{Name: "hv2", VMs: 2, Status: engine.HostStatus{Session: id, State: forewarn.HostNotifying, SessionState: forewarn.SessionRunning}},
			{Name: "hv3", VMs: 3},
		}
		if got := e.HostSummaries(); !reflect.DeepEqual(got, want) {
			t.Fatalf("HostSummaries:\n got %+v\nwant %+v", got, want)
		}
	})
}

// TestSessionProgressWindowChange: windows that abut close at the end of
// the last; windows open all day every day never close.
func TestSessionProgressWindowChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newHostEngine(t, mem.New())
		t0 := time.Now() // a Saturday, 00:00
		for _, c := range []struct {
			windows []string
			want    time.Time
		}{
			{[]string{"Sat 12:00-14:00", "Fri-Sat 22:00-12:00", "Sun 02:00-03:00"}, t0.Add(14 * time.Hour)},
			{[]string{"* 00:00-24:00"}, time.Time{}},
		} {
			id := createSession(t, e, forewarn.SessionSpec{Hosts: []string{"hv2"}, Notice: time.Minute, Windows: c.windows})
			if p := progressOf(t, e, id); !p.InWindow || !p.WindowChange.Equal(c.want) || !p.Next.Equal(c.want) {
				t.Errorf("%q: in window %v, change %v, next %v; want true, %v", c.windows, p.InWindow, p.WindowChange, p.Next, c.want)
			}
			if err := e.CancelSession(t.Context(), id); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
	})
}

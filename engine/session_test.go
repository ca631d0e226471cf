package engine_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

// hostFleet: three hosts. Availability set web has web_0 (update domain
// 0) on hv1, web_1 (1) on hv2 and web_2 (0) on hv3; hv1 also has a
// Compute Engine VM and an EC2 VM, hv2 a standalone Azure VM, hv3 a
// standalone one and a Compute Engine VM with a GPU.
func hostFleet() *forewarn.Fleet {
	vm := func(name, host string, last byte, mod func(*forewarn.VM)) *forewarn.VM {
		v := &forewarn.VM{Name: name, Provider: forewarn.Azure, Host: host, IP: netip.AddrFrom4([4]byte{198, 18, 7, last})}
		if mod != nil {
			mod(v)
		}
		return v
	}
	return &forewarn.Fleet{VMs: []*forewarn.VM{
		vm("web_0", "hv1", 1, func(v *forewarn.VM) { v.AvailabilitySet = "web" }),
		vm("g1", "hv1", 2, func(v *forewarn.VM) { v.Provider = forewarn.GCE }),
		vm("e1", "hv1", 3, func(v *forewarn.VM) { v.Provider, v.InstanceID = forewarn.AWS, "i-0123456789abcdef0" }),
		vm("web_1", "hv2", 4, func(v *forewarn.VM) { v.AvailabilitySet, v.UpdateDomain = "web", 1 }),
		vm("a2", "hv2", 5, nil),
		vm("web_2", "hv3", 6, func(v *forewarn.VM) { v.AvailabilitySet = "web" }),
		vm("a3", "hv3", 7, nil),
		vm("gpu", "hv3", 8, func(v *forewarn.VM) { v.Provider, v.GPU = forewarn.GCE, true }),
	}}
}

func newHostEngine(t *testing.T, store forewarn.Store) *engine.Engine {
	t.Helper()
	e, err := engine.New(t.Context(), engine.Config{Store: store, Fleet: hostFleet(), AllowShortNotice: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	enableAll(e)
	return e
}

// hostStates returns each host's state in session id, as "hv1=Notifying".
func hostStates(t *testing.T, e *engine.Engine, id string) string {
	t.Helper()
	s, err := e.Session(id)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, h := range s.Hosts {
		out = append(out, h.Name+"="+string(h.State))
	}
	return string(s.State) + " " + strings.Join(out, " ")
}

func wantHosts(t *testing.T, e *engine.Engine, id, want string) {
	t.Helper()
	if got := hostStates(t, e, id); got != want {
		t.Fatalf("at +%s: %s, want %s", since2000(), got, want)
	}
}

func since2000() time.Duration { return time.Since(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)) }

func createSession(t *testing.T, e *engine.Engine, spec forewarn.SessionSpec) string {
	t.Helper()
	s, err := e.CreateSession(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	return s.ID
}

func hostOf(t *testing.T, e *engine.Engine, id, host string) forewarn.SessionHost {
	t.Helper()
	s, err := e.Session(id)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(s.Hosts, func(h forewarn.SessionHost) bool { return h.Name == host })
	if i < 0 {
		t.Fatalf("no host %s in session %s", host, id)
	}
	return s.Hosts[i]
}

// eventFor returns the one event of host h that names vm.
func eventFor(t *testing.T, e *engine.Engine, h forewarn.SessionHost, vm string) *forewarn.Event {
	t.Helper()
	for _, id := range h.Events {
		ev := mustEvent(t, e, id)
		if slices.Contains(ev.Resources, vm) {
			return ev
		}
	}
	t.Fatalf("host %s has no event for %s", h.Name, vm)
	return nil
}

// TestSessionHostReadyAtLastApproval: each VM of a host gets its
// provider's host maintenance event; the host is Ready, and
// InMaintenance, at the second its last VM approves; Done completes the
// events and ends the session.
func TestSessionHostReadyAtLastApproval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newHostEngine(t, mem.New())
		t0 := time.Now()
		id := createSession(t, e, forewarn.SessionSpec{Hosts: []string{"hv2", "hv1"}, Notice: 10 * time.Minute, Action: "Redeploy"})
		wantHosts(t, e, id, "Running hv2=Notifying hv1=Pending")
		h := hostOf(t, e, id, "hv2")
		if !h.Started.Equal(t0) || !slices.Equal(h.VMs, []string{"a2", "web_1"}) || len(h.Events) != 2 {
			t.Fatalf("hv2 started: %+v", h)
		}
		for _, vm := range h.VMs {
			if ev := eventFor(t, e, h, vm); ev.Type != forewarn.Redeploy || ev.Status != forewarn.Scheduled || !ev.NotBefore.Equal(t0.Add(10*time.Minute)) || !slices.Equal(ev.Resources, []string{vm}) {
				t.Fatalf("%s's event: %+v", vm, ev)
			}
		}
		step(3 * time.Second)
		if err := e.Approve(t.Context(), "web_1", []string{eventFor(t, e, h, "web_1").ID}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		wantHosts(t, e, id, "Running hv2=Notifying hv1=Pending")
		step(4 * time.Second)
		if err := e.Approve(t.Context(), "a2", []string{eventFor(t, e, h, "a2").ID}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		wantHosts(t, e, id, "Running hv2=InMaintenance hv1=Pending")
		if h := hostOf(t, e, id, "hv2"); !h.ReadyAt.Equal(t0.Add(7 * time.Second)) {
			t.Fatalf("hv2 Ready at %v, want +7s", h.ReadyAt.Sub(t0))
		}
		if st := e.HostStatus("hv2"); st.Session != id || st.State != forewarn.HostInMaintenance {
			t.Fatalf("HostStatus(hv2) = %+v", st)
		}
		if err := e.HostDone(t.Context(), "hv1"); forewarn.ErrorCode(err) != forewarn.ECONFLICT {
			t.Fatalf("HostDone of a Pending host: %v", err)
		}
		step(13 * time.Second)
		if err := e.HostDone(t.Context(), "hv2"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		for _, vm := range h.VMs {
			if ev := eventFor(t, e, h, vm); ev.Status != forewarn.Completed || !ev.EndedAt.Equal(t0.Add(20*time.Second)) {
				t.Fatalf("%s's event after Done: %s at %v", vm, ev.Status, ev.EndedAt.Sub(t0))
			}
		}
		// hv1 next: its Azure VM a Redeploy, the Compute Engine VM a live
		// migration, the EC2 VM a system-maintenance.
		wantHosts(t, e, id, "Running hv2=Done hv1=Notifying")
		h1 := hostOf(t, e, id, "hv1")
		types := map[string]forewarn.EventType{"web_0": forewarn.Redeploy, "g1": forewarn.MigrateOnHostMaintenance, "e1": forewarn.SystemMaintenance}
		for vm, want := range types {
			if ev := eventFor(t, e, h1, vm); ev.Type != want {
				t.Fatalf("%s's event is %s, want %s", vm, ev.Type, want)
			}
		}
		// Nobody approves: Ready at NotBefore, to the second.
		step(10*time.Minute - time.Second)
		wantHosts(t, e, id, "Running hv2=Done hv1=Notifying")
		step(time.Second)
		wantHosts(t, e, id, "Running hv2=Done hv1=InMaintenance")
		if h := hostOf(t, e, id, "hv1"); !h.ReadyAt.Equal(t0.Add(20*time.Second + 10*time.Minute)) {
			t.Fatalf("hv1 Ready at %v", h.ReadyAt.Sub(t0))
		}
		if err := e.HostDone(t.Context(), "hv1"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		wantHosts(t, e, id, "Done hv2=Done hv1=Done")
	})
}

// TestSessionBudgets: a session never starts a host whose VMs would take
// a group past its budget; later hosts may go first, and the held one
// starts once the group has room.
func TestSessionBudgets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newHostEngine(t, mem.New())
		// Availability set web is on all three hosts: one at a time.
		id := createSession(t, e, forewarn.SessionSpec{Hosts: []string{"hv1", "hv2", "hv3"}, MaxHosts: 3, Notice: time.Minute,
			MaxUnavailable: map[string]forewarn.Budget{forewarn.GroupAvailabilitySet: {Count: 1}}})
		wantHosts(t, e, id, "Running hv1=Notifying hv2=Pending hv3=Pending")
		step(time.Minute)
		wantHosts(t, e, id, "Running hv1=InMaintenance hv2=Pending hv3=Pending")
		if err := e.HostDone(t.Context(), "hv1"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		wantHosts(t, e, id, "Running hv1=Done hv2=Notifying hv3=Pending")
		if err := e.CancelSession(t.Context(), id); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		wantHosts(t, e, id, "Cancelled hv1=Done hv2=Pending hv3=Pending")

		// One VM per update domain: web_0 (hv1) and web_2 (hv3) share
		// domain 0, so hv3 waits while hv2 (domain 1) goes.
		id = createSession(t, e, forewarn.SessionSpec{Hosts: []string{"hv1", "hv3", "hv2"}, MaxHosts: 3, Notice: time.Minute,
			MaxUnavailable: map[string]forewarn.Budget{forewarn.GroupUpdateDomain: {Count: 1}}})
		wantHosts(t, e, id, "Running hv1=Notifying hv3=Pending hv2=Notifying")
		step(time.Minute)
		if err := e.HostDone(t.Context(), "hv1"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		wantHosts(t, e, id, "Running hv1=Done hv3=Notifying hv2=InMaintenance")

		// A host under way in one session is in no other.
		_, err := e.CreateSession(t.Context(), forewarn.SessionSpec{Hosts: []string{"hv1", "hv3"}})
		if forewarn.ErrorCode(err) != forewarn.ECONFLICT || forewarn.ErrorMessage(err) != `host "hv3" is in session `+id+`, not ended; cancel that session or wait for it` {
			t.Fatalf("a host under way in another session: %v", err)
		}
	})
}

// TestSessionWindows: hosts start only inside the windows; a host under
// way when its window closes goes on, and the next waits for the next
// window, to the second.
func TestSessionWindows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newHostEngine(t, mem.New())
		t0 := time.Now() // 2000-01-01 00:00 UTC, a Saturday
		id := createSession(t, e, forewarn.SessionSpec{Hosts: []string{"hv2", "hv3"}, Notice: time.Minute, Windows: []string{"* 02:00-03:00"}})
		wantHosts(t, e, id, "Running hv2=Pending hv3=Pending")
		step(2*time.Hour - time.Second)
		wantHosts(t, e, id, "Running hv2=Pending hv3=Pending")
		step(time.Second)
		wantHosts(t, e, id, "Running hv2=Notifying hv3=Pending")
		step(70 * time.Minute) // 03:10, the window closed
		if err := e.HostDone(t.Context(), "hv2"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		wantHosts(t, e, id, "Running hv2=Done hv3=Pending")
		step(t0.Add(26*time.Hour - time.Second).Sub(time.Now()))
		wantHosts(t, e, id, "Running hv2=Done hv3=Pending")
		step(time.Second)
		wantHosts(t, e, id, "Running hv2=Done hv3=Notifying")
		if h := hostOf(t, e, id, "hv3"); !h.Started.Equal(t0.Add(26 * time.Hour)) {
			t.Fatalf("hv3 started at %v", h.Started.Sub(t0))
		}
		if _, err := e.CreateSession(t.Context(), forewarn.SessionSpec{Hosts: []string{"hv1"}, Windows: []string{"Mon-Fry 22:00-06:00"}}); forewarn.ErrorCode(err) != forewarn.EINVALID ||
			!strings.HasPrefix(forewarn.ErrorMessage(err), `window "Mon-Fry 22:00-06:00": unknown day "fry"`) {
			t.Fatalf("a bad window: %v", err)
		}
		hooks := make([]string, forewarn.MaxWebhooks+1)
		for i := range hooks {
			hooks[i] = fmt.Sprintf("https://hooks.example/%d", i)
		}
		if _, err := e.CreateSession(t.Context(), forewarn.SessionSpec{Hosts: []string{"hv1"}, Webhooks: hooks}); forewarn.ErrorMessage(err) != "9 webhooks; a session names at most 8" {
			t.Fatalf("too many webhooks: %v", err)
		}
		if _, err := e.CreateSession(t.Context(), forewarn.SessionSpec{Hosts: []string{"hv1"}, Webhooks: []string{"hooks.example/x"}}); forewarn.ErrorMessage(err) != `webhook "hooks.example/x" is not an absolute http:// or https:// URL` {
			t.Fatalf("a relative webhook: %v", err)
		}
	})
}

// TestSessionRemovedVM: a VM removed from the fleet mid-session does not
// hold its host back.
func TestSessionRemovedVM(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newHostEngine(t, mem.New())
		t0 := time.Now()
		id := createSession(t, e, forewarn.SessionSpec{Hosts: []string{"hv2"}, Notice: time.Hour})
		h := hostOf(t, e, id, "hv2")
		step(time.Second)
		if err := e.Approve(t.Context(), "web_1", []string{eventFor(t, e, h, "web_1").ID}); err != nil {
			t.Fatal(err)
		}
		step(time.Second)
		wantHosts(t, e, id, "Running hv2=Notifying")
		if _, err := e.ChangeInventory(t.Context(), engine.InventoryChange{Remove: []string{"a2"}}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		wantHosts(t, e, id, "Running hv2=InMaintenance")
		if h := hostOf(t, e, id, "hv2"); !h.ReadyAt.Equal(t0.Add(2 * time.Second)) {
			t.Fatalf("Ready at %v", h.ReadyAt.Sub(t0))
		}
	})
}

// TestSessionResumesAfterRestart: a new engine on the same store takes
// the session up where it was, and starts no host twice.
func TestSessionResumesAfterRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := mem.New()
		e := newHostEngine(t, store)
		id := createSession(t, e, forewarn.SessionSpec{Hosts: []string{"hv2", "hv3"}, Notice: time.Minute})
		before := len(e.Events())
		e.Close()
		e2 := newHostEngine(t, store)
		synctest.Wait()
		wantHosts(t, e2, id, "Running hv2=Notifying hv3=Pending")
		if n := len(e2.Events()); n != before || n != 2 {
			t.Fatalf("%d events after the restart, %d before; want 2", n, before)
		}
		step(time.Minute)
		if err := e2.HostFail(t.Context(), "hv2", "firmware update failed"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		s, _ := e2.Session(id)
		if s.State != forewarn.SessionPaused || s.Reason != "host hv2 failed: firmware update failed" || s.Hosts[1].State != forewarn.HostPending {
			t.Fatalf("after a failure: %s %q, hv3 %s", s.State, s.Reason, s.Hosts[1].State)
		}
		if err := e2.ResumeSession(t.Context(), id); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		wantHosts(t, e2, id, "Running hv2=Failed hv3=Notifying")
	})
}

// TestSessionHostStatusNewest: HostStatus and HostStatuses give a
// host's newest session, as Sessions orders them: of two created at the
// same instant, the one with the greater ID; the same on a new engine
// that reads them from the store.
func TestSessionHostStatusNewest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := mem.New()
		e := newHostEngine(t, store)
		// Three sessions on hv2 at one instant: each cancelled while hv2
		// has started no event, which leaves it free for the next.
		for range 3 {
			id := createSession(t, e, forewarn.SessionSpec{Hosts: []string{"hv2", "hv3"}, Notice: time.Minute})
			if err := e.CancelSession(t.Context(), id); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		all := e.Sessions()
		if len(all) != 3 || !all[0].Created.Equal(all[2].Created) {
			t.Fatalf("sessions: %d, created %v and %v", len(all), all[0].Created, all[len(all)-1].Created)
		}
		newest := all[2].ID
		for i, e := range []*engine.Engine{e, newHostEngine(t, store)} {
			if st := e.HostStatus("hv2"); st.Session != newest || st.State != forewarn.HostPending || st.SessionState != forewarn.SessionCancelled {
				t.Errorf("engine %d: HostStatus(hv2) = %+v, want Pending in %s, Cancelled", i, st, newest)
			}
			if st := e.HostStatuses(); len(st) != 2 || st["hv3"].Session != newest || st["hv2"] != e.HostStatus("hv2") {
				t.Errorf("engine %d: HostStatuses() = %+v", i, st)
			}
			if st := e.HostStatus("hv1"); st != (engine.HostStatus{}) {
				t.Errorf("engine %d: HostStatus(hv1) = %+v, want none", i, st)
			}
		}
	})
}

// TestSessionTransitions: the transitions of a host, its session and its
// events, in order, the same on the replica that wrote them and on one
// that follows the store.
func TestSessionTransitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := mem.New()
		e := newHostEngine(t, store)
		f := newHostEngine(t, store)
		var got [2][]string
		for i, x := range []*engine.Engine{e, f} {
			x.SubscribeTransitions(func(rev int64, ts []engine.Transition) {
				for _, tr := range ts {
					if tr.Kind != "event" {
						got[i] = append(got[i], tr.Kind+" "+tr.ID+" "+tr.From+">"+tr.To)
					} else {
						got[i] = append(got[i], tr.Kind+" "+tr.Event.Resources[0]+" "+tr.From+">"+tr.To)
					}
				}
			})
		}
		id := createSession(t, e, forewarn.SessionSpec{Hosts: []string{"hv2"}, Notice: time.Minute})
		h := hostOf(t, e, id, "hv2")
		if err := e.Approve(t.Context(), "a2", []string{eventFor(t, e, h, "a2").ID}); err != nil {
			t.Fatal(err)
		}
		step(time.Minute)
		if err := f.HostDone(t.Context(), "hv2"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		want := []string{
			"session " + id + " >Running",
			"event a2 >Scheduled", "event web_1 >Scheduled", "host hv2 Pending>Notifying",
			"event a2 Scheduled>Started",
			"event web_1 Scheduled>Started",
			"host hv2 Notifying>Ready", "host hv2 Ready>InMaintenance",
			"event a2 Started>Completed", "event web_1 Started>Completed", "host hv2 InMaintenance>Done",
			"session " + id + " Running>Done",
		}
		for i, name := range []string{"the writer", "the follower"} {
			if !slices.Equal(got[i], want) {
				t.Errorf("%s's transitions:\n%s\nwant:\n%s", name, strings.Join(got[i], "\n"), strings.Join(want, "\n"))
			}
		}
	})
}

// TestSessionTakeOver: the leader stops with a host InMaintenance; a
// follower says it is Done while no replica leads, then takes the lead.
// The new leader starts the next host at once, though no deadline is
// due and nothing else commits, and its transition subscribers are not
// told of a reload: it skipped no commit.
func TestSessionTakeOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := mem.New()
		l := newHostEngine(t, store)
		c := store.Candidate()
		f := newHostEngine(t, c)
		var reloads []int64
		f.SubscribeTransitions(func(rev int64, ts []engine.Transition) {
			if ts == nil {
				reloads = append(reloads, rev)
			}
		})
		id := createSession(t, l, forewarn.SessionSpec{Hosts: []string{"hv2", "hv3"}, Notice: time.Minute})
		step(time.Minute)
		wantHosts(t, f, id, "Running hv2=InMaintenance hv3=Pending")
		l.Close()
		if err := f.HostDone(t.Context(), "hv2"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		wantHosts(t, f, id, "Running hv2=Done hv3=Pending") // no leader steps it
		c.Win()
		synctest.Wait()
		wantHosts(t, f, id, "Running hv2=Done hv3=Notifying")
		if len(reloads) > 0 {
			t.Errorf("taking the lead told the transition subscribers of reloads at revisions %v", reloads)
		}
	})
}

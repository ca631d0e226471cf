package engine_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

// TestServiceEnablement checks that enablement is per service (seeds 000
// and 003, and 004 for a scale set): while one VM of an availability set,
// a cloud service or a scale set calls the API, a Platform event on a
// silent VM of it keeps its full notice; a standalone VM is its own
// service; after 24 hours of silence the whole service is disabled.
func TestServiceEnablement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTopoEngine(t, false)
		for _, name := range []string{"web_0", "cs_0", "ss_0", "zonal"} {
			e.NoteRequest(name)
		}
		notice := func(vm string) forewarn.Status {
			t.Helper()
			ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Freeze, VMs: []string{vm}})
			if err != nil {
				t.Fatal(err)
			}
			return ev.Status
		}
		// Heard through a peer: the full notice.
		for _, vm := range []string{"web_2", "cs_1", "ss_1"} {
			if st := notice(vm); st != forewarn.Scheduled {
				t.Errorf("%s, silent in an enabled service: %s, want Scheduled", vm, st)
			}
		}
		// Another placement group of the scale set is the same service
		// (seed 004: "enabled for your scale set"); another standalone
		// zonal VM is another service: nobody listens.
		if st := notice("ss_2"); st != forewarn.Scheduled {
			t.Errorf("ss_2, silent in another placement group of an enabled scale set: %s, want Scheduled", st)
		}
		if st := notice("zonal2"); st != forewarn.Started {
			t.Errorf("zonal2, in a silent service: %s, want Started", st)
		}
		enabled := map[string]bool{}
		for _, vm := range e.VMs() {
			enabled[vm.Name] = vm.Enabled
		}
		for vm, want := range map[string]bool{"web_0": true, "web_3": true, "cs_1": true, "ss_1": true, "ss_2": true, "zonal": true, "zonal2": false} {
			if enabled[vm] != want {
				t.Errorf("vm list: %s enabled %v, want %v", vm, enabled[vm], want)
			}
		}
		// 24 hours of silence disable the service.
		time.Sleep(24 * time.Hour)
		if st := notice("web_2"); st != forewarn.Started {
			t.Errorf("web_2 after 24 h of silence: %s, want Started", st)
		}
	})
}

// TestScaleSetIsOneService is issue 22's point 9: a scale set of two
// placement groups was two services, so a Platform event on a VM of the
// silent placement group started at once while the other group polled.
// Seed 004 says Scheduled Events are "enabled for your scale set": the
// event keeps its full notice, to the second, while each VM still sees
// only its own placement group's events. A scale set spanning zones is
// one service per zone (docs/wire-decisions.md), and 24 hours of silence
// disable the whole scale set.
func TestScaleSetIsOneService(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vm := func(name, ss, id, pg, zone string) *forewarn.VM {
			return &forewarn.VM{Name: name, Provider: forewarn.Azure, ScaleSet: ss, InstanceID: id, PlacementGroup: pg, Zone: zone}
		}
		f := &forewarn.Fleet{VMs: []*forewarn.VM{
			vm("ss_0", "ss", "0", "pg0", ""), vm("ss_1", "ss", "1", "pg1", ""),
			vm("zs_0", "zs", "0", "pg0", "1"), vm("zs_1", "zs", "1", "pg1", "1"), vm("zs_2", "zs", "2", "pg2", "2"),
		}}
		e, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: f, DisableAfter: 24 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		t0 := time.Now()
		e.NoteRequest("ss_0") // placement group pg0 polls; pg1 is silent
		e.NoteRequest("zs_0") // zone 1 polls; zone 2 is silent
		freeze := func(name string) *forewarn.Event {
			t.Helper()
			ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Freeze, VMs: []string{name}})
			if err != nil {
				t.Fatal(err)
			}
			return ev
		}
		ev := freeze("ss_1")
		if ev.Status != forewarn.Scheduled || !ev.NotBefore.Equal(t0.Add(15*time.Minute)) {
			t.Fatalf("Freeze on ss_1 (pg1, silent) while ss_0 (pg0) polls: %s, NotBefore %v; want Scheduled at +15m", ev.Status, ev.NotBefore.Sub(t0))
		}
		// Enablement widens nothing: ss_0 does not see pg1's event.
		if got := e.View("ss_0"); len(got.Events) != 0 || got.Incarnation != 1 {
			t.Fatalf("ss_0 (pg0) sees %d events, incarnation %d; want none, 1", len(got.Events), got.Incarnation)
		}
		if got := e.View("ss_1"); len(got.Events) != 1 || got.Events[0].ID != ev.ID {
			t.Fatalf("ss_1 sees %d events, want its Freeze", len(got.Events))
		}
		if ev := freeze("zs_1"); ev.Status != forewarn.Scheduled {
			t.Errorf("zs_1, silent in the polling zone 1: %s, want Scheduled", ev.Status)
		}
		if ev := freeze("zs_2"); ev.Status != forewarn.Started {
			t.Errorf("zs_2, in the silent zone 2: %s, want Started", ev.Status)
		}
		want := map[string]bool{"ss_0": true, "ss_1": true, "zs_0": true, "zs_1": true, "zs_2": false}
		for _, info := range e.VMs() {
			if info.Enabled != want[info.Name] {
				t.Errorf("%s enabled %v, want %v", info.Name, info.Enabled, want[info.Name])
			}
		}
		if n := e.EnabledVMs(); n != 4 {
			t.Errorf("EnabledVMs %d, want 4", n)
		}
		// 24 hours after ss_0's call the whole scale set is disabled.
		time.Sleep(24*time.Hour - time.Since(t0))
		if ev := freeze("ss_1"); ev.Status != forewarn.Started {
			t.Errorf("ss_1 24 h after the scale set's last call: %s, want Started", ev.Status)
		}
	})
}

// TestTerminateNotificationsOff checks the per scale set opt-in: with
// Terminate notifications off, a delete deletes the VM at once with no
// Terminate shown to anyone.
func TestTerminateNotificationsOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := topoFleet()
		f.ScaleSets[0].DisableTerminateNotifications = true
		e, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: f})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		enableAll(e)
		ev, err := e.Delete(t.Context(), "ss_0")
		if err != nil {
			t.Fatal(err)
		}
		if ev.Status != forewarn.Completed || ev.Type != forewarn.Terminate || !e.View("ss_0").Deleted {
			t.Fatalf("delete with notifications off: %s %s, deleted %v", ev.Type, ev.Status, e.View("ss_0").Deleted)
		}
		if v := e.View("ss_1"); len(v.Events) != 0 || v.Incarnation != 1 {
			t.Fatalf("ss_1 saw %d events, incarnation %d", len(v.Events), v.Incarnation)
		}
	})
}

// TestSetScaleSet checks the run-time change of a scale set's Terminate
// timeout and opt-in: it applies to new deletes only, is refused outside
// PT5M..PT15M, and survives a restart over the fleet file's value.
func TestSetScaleSet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := mem.New()
		open := func() *engine.Engine {
			e, err := engine.New(t.Context(), engine.Config{Store: store, Fleet: topoFleet()})
			if err != nil {
				t.Fatal(err)
			}
			enableAll(e)
			return e
		}
		e := open()
		if got := e.ScaleSets(); len(got) != 1 || got[0] != (engine.ScaleSetInfo{Name: "ss", TerminateTimeout: 10 * time.Minute, TerminateNotifications: true, Source: "fleet", VMs: 4}) {
			t.Fatalf("ScaleSets %+v", got)
		}
		before, _ := e.Delete(t.Context(), "ss_0") // NotBefore +10m, from the fleet
		d := func(x time.Duration) *time.Duration { return &x }
		for _, c := range []struct {
			name   string
			change engine.ScaleSetChange
			code   string
		}{
			{"nope", engine.ScaleSetChange{TerminateTimeout: d(10 * time.Minute)}, forewarn.ENOTFOUND},
			{"ss", engine.ScaleSetChange{TerminateTimeout: d(4 * time.Minute)}, forewarn.EINVALID},
			{"ss", engine.ScaleSetChange{TerminateTimeout: d(16 * time.Minute)}, forewarn.EINVALID},
			{"ss", engine.ScaleSetChange{TerminateTimeout: d(10*time.Minute + time.Millisecond)}, forewarn.EINVALID},
			{"ss", engine.ScaleSetChange{}, forewarn.EINVALID},
		} {
			if _, err := e.SetScaleSet(t.Context(), c.name, c.change); forewarn.ErrorCode(err) != c.code {
				t.Errorf("SetScaleSet(%s, %+v): %v, want %s", c.name, c.change, err, c.code)
			}
		}
		info, err := e.SetScaleSet(t.Context(), "ss", engine.ScaleSetChange{TerminateTimeout: d(12 * time.Minute)})
		if err != nil || info.TerminateTimeout != 12*time.Minute || info.Source != "operator" || info.TimeoutISO() != "PT12M" {
			t.Fatalf("SetScaleSet: %+v %v", info, err)
		}
		after, _ := e.Delete(t.Context(), "ss_1")
		if !after.NotBefore.Equal(time.Now().Add(12*time.Minute)) || !mustEvent(t, e, before.ID).NotBefore.Equal(before.NotBefore) {
			t.Fatalf("NotBefore %v (want +12m); the earlier delete's moved to %v", after.NotBefore.Sub(time.Now()), mustEvent(t, e, before.ID).NotBefore)
		}

		// The change outlives a restart, though the fleet still says PT10M.
		e.Close()
		e = open()
		defer e.Close()
		if got := e.ScaleSets(); got[0].TerminateTimeout != 12*time.Minute || got[0].Source != "operator" {
			t.Fatalf("after a restart: %+v", got)
		}
		off := false
		if _, err := e.SetScaleSet(t.Context(), "ss", engine.ScaleSetChange{TerminateNotifications: &off}); err != nil {
			t.Fatal(err)
		}
		ev, err := e.Delete(t.Context(), "ss_2")
		if err != nil || ev.Status != forewarn.Completed {
			t.Fatalf("delete with notifications turned off: %+v %v", ev, err)
		}
		if got := e.ScaleSets(); got[0].TerminateTimeout != 12*time.Minute {
			t.Fatalf("turning notifications off changed the timeout: %+v", got)
		}
	})
}

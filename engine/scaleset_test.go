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
// and 003): while one VM of an availability set, a cloud service or a
// scale set placement group calls the API, a Platform event on a silent
// VM of it keeps its full notice; a standalone VM is its own service;
// after 24 hours of silence the whole service is disabled.
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
		// Another placement group of the scale set, and another standalone
		// zonal VM, are other services: nobody listens.
		for _, vm := range []string{"ss_2", "zonal2"} {
			if st := notice(vm); st != forewarn.Started {
				t.Errorf("%s, in a silent service: %s, want Started", vm, st)
			}
		}
		enabled := map[string]bool{}
		for _, vm := range e.VMs() {
			enabled[vm.Name] = vm.Enabled
		}
		for vm, want := range map[string]bool{"web_0": true, "web_3": true, "cs_1": true, "ss_1": true, "ss_2": false, "zonal": true, "zonal2": false} {
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

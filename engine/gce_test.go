package engine_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

func gceFleet() *forewarn.Fleet {
	g := func(name string, mod func(*forewarn.VM)) *forewarn.VM {
		vm := &forewarn.VM{Name: name, Provider: forewarn.GCE, OnHostMaintenance: "MIGRATE"}
		if mod != nil {
			mod(vm)
		}
		return vm
	}
	return &forewarn.Fleet{VMs: []*forewarn.VM{
		g("mig", nil),
		g("quiet", nil),
		g("gpu", func(v *forewarn.VM) { v.GPU, v.OnHostMaintenance = true, "TERMINATE" }),
		g("term", func(v *forewarn.VM) { v.OnHostMaintenance = "TERMINATE" }),
		g("spot", func(v *forewarn.VM) { v.Spot, v.OnHostMaintenance = true, "TERMINATE" }),
		{Name: "az", Provider: forewarn.Azure},
		{Name: "azspot", Provider: forewarn.Azure, Spot: true},
	}}
}

func newGCEEngine(t *testing.T, store forewarn.Store) *engine.Engine {
	t.Helper()
	e, err := engine.New(t.Context(), engine.Config{Store: store, Fleet: gceFleet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	enableAll(e)
	return e
}

// step sleeps d and lets every timer due by then fire.
func step(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

func TestMigrationWarnedSixtySecondsAhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newGCEEngine(t, mem.New())
		t0 := time.Now()
		e.NoteQuery("mig")
		ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"mig"}, Notice: 10 * time.Minute, Lasts: 2 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		step(9*time.Minute - time.Second)
		v := e.View("mig")
		if got, _ := e.Event(ev.ID); !got.WarnedAt.IsZero() || len(v.Events) != 1 {
			t.Fatalf("warned early: %v", got.WarnedAt)
		}
		step(time.Second)
		got, _ := e.Event(ev.ID)
		// The warning publishes a new view; GCE VMs keep no incarnation.
		select {
		case <-v.Changed():
		default:
			t.Fatal("the warning published no new view")
		}
		if !got.WarnedAt.Equal(t0.Add(9*time.Minute)) || got.Status != forewarn.Scheduled || e.View("mig").Incarnation != 1 {
			t.Fatalf("at NotBefore-60s: %s warned %v, incarnation %d", got.Status, got.WarnedAt, e.View("mig").Incarnation)
		}
		step(time.Minute)
		if got, _ = e.Event(ev.ID); got.Status != forewarn.Started || !got.StartedAt.Equal(t0.Add(10*time.Minute)) {
			t.Fatalf("at NotBefore: %s started %v", got.Status, got.StartedAt)
		}
		step(2 * time.Minute)
		if got, _ = e.Event(ev.ID); got.Status != forewarn.Completed {
			t.Fatalf("after the migration: %s", got.Status)
		}

		// The VM has not read the key since that maintenance ended: the
		// next migration skips its warning and starts at once.
		ev2, err := e.Create(t.Context(), engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"mig"}, Notice: 5 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		warn := time.Now().Add(4 * time.Minute)
		step(4 * time.Minute)
		if got, _ = e.Event(ev2.ID); got.Status != forewarn.Started || !got.StartedAt.Equal(warn) || !got.WarnedAt.Equal(warn) {
			t.Fatalf("unwatched migration: %s started %v warned %v, want Started at %v", got.Status, got.StartedAt, got.WarnedAt, warn)
		}
	})
}

func TestUnwatchedVMSkipsWarning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newGCEEngine(t, mem.New())
		ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"quiet"}, Notice: 3 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		step(2*time.Minute - time.Second)
		if got, _ := e.Event(ev.ID); got.Status != forewarn.Scheduled {
			t.Fatalf("before the warning time: %s", got.Status)
		}
		step(time.Second)
		if got, _ := e.Event(ev.ID); got.Status != forewarn.Started {
			t.Fatalf("never-queried VM at NotBefore-60s: %s, want Started", got.Status)
		}
	})
}

func TestTerminateWarnedAnHourAhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newGCEEngine(t, mem.New())
		_, err := e.Create(t.Context(), engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"gpu"}})
		if forewarn.ErrorMessage(err) != `VM "gpu" cannot be live migrated (it has a GPU or onHostMaintenance TERMINATE); use TERMINATE_ON_HOST_MAINTENANCE` {
			t.Fatalf("MIGRATE on a GPU VM: %v", err)
		}
		if _, err := e.Create(t.Context(), engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"term"}}); forewarn.ErrorCode(err) != forewarn.EINVALID {
			t.Fatalf("MIGRATE on an onHostMaintenance TERMINATE VM: %v", err)
		}
		if _, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"gpu"}}); forewarn.ErrorMessage(err) != `VM "gpu" is a Compute Engine VM; Reboot events are not for Compute Engine VMs` {
			t.Fatalf("Reboot on a GCE VM: %v", err)
		}
		if _, err := e.Create(t.Context(), engine.Spec{Type: forewarn.TerminateOnHostMaintenance, VMs: []string{"az"}}); forewarn.ErrorCode(err) != forewarn.EINVALID {
			t.Fatalf("TERMINATE_ON_HOST_MAINTENANCE on an Azure VM: %v", err)
		}
		if _, err := e.Create(t.Context(), engine.Spec{Type: forewarn.TerminateOnHostMaintenance, VMs: []string{"gpu"}, Notice: 59 * time.Minute}); forewarn.ErrorCode(err) != forewarn.EINVALID {
			t.Fatalf("59m notice for a TERMINATE: %v", err)
		}
		t0 := time.Now()
		ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.TerminateOnHostMaintenance, VMs: []string{"gpu"}, Notice: 3 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		step(2*time.Hour - time.Second)
		if got, _ := e.Event(ev.ID); !got.WarnedAt.IsZero() {
			t.Fatalf("warned early at %v", got.WarnedAt)
		}
		step(time.Second)
		// Terminations are never skipped, watched or not.
		if got, _ := e.Event(ev.ID); !got.WarnedAt.Equal(t0.Add(2*time.Hour)) || got.Status != forewarn.Scheduled {
			t.Fatalf("at NotBefore-60m: %s warned %v", got.Status, got.WarnedAt)
		}
		step(time.Hour)
		if got, _ := e.Event(ev.ID); got.Status != forewarn.Started {
			t.Fatalf("at NotBefore: %s", got.Status)
		}
	})
}

func TestWarningSurvivesRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := mem.New()
		e := newGCEEngine(t, store)
		e.NoteQuery("mig")
		ev, _ := e.Create(t.Context(), engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"mig"}, Notice: 10 * time.Minute})
		step(9*time.Minute + 30*time.Second)
		e.Close()
		e2 := newGCEEngine(t, store)
		got, _ := e2.Event(ev.ID)
		if got.WarnedAt.IsZero() || got.Status != forewarn.Scheduled {
			t.Fatalf("after restart: %s warned %v", got.Status, got.WarnedAt)
		}
		step(30 * time.Second)
		if got, _ = e2.Event(ev.ID); got.Status != forewarn.Started {
			t.Fatalf("at NotBefore after restart: %s", got.Status)
		}
	})
}

func TestEvict(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newGCEEngine(t, mem.New())
		ev, err := e.Evict(t.Context(), "spot")
		if err != nil {
			t.Fatal(err)
		}
		if ev.Status != forewarn.Started || ev.Type != forewarn.Preempt || ev.Source != forewarn.Platform || !e.View("spot").Preempted {
			t.Fatalf("GCE eviction: %+v", ev)
		}
		if _, err := e.Evict(t.Context(), "spot"); forewarn.ErrorCode(err) != forewarn.ECONFLICT {
			t.Fatalf("second eviction: %v", err)
		}
		state := func(name string) string {
			for _, vm := range e.VMs() {
				if vm.Name == name {
					return vm.State
				}
			}
			return ""
		}
		step(30*time.Second - time.Millisecond)
		if s := state("spot"); s != "stopping" {
			t.Fatalf("before 30 s: %s, want stopping", s)
		}
		step(time.Millisecond)
		if s := state("spot"); s != "stopped" || !e.View("spot").Stopped {
			t.Fatalf("after 30 s: %s", s)
		}

		az, err := e.Evict(t.Context(), "azspot")
		if err != nil {
			t.Fatal(err)
		}
		if az.Status != forewarn.Scheduled || !az.NotBefore.Equal(time.Now().Add(30*time.Second)) {
			t.Fatalf("Azure eviction: %s NotBefore %v", az.Status, az.NotBefore)
		}
		if _, err := e.Evict(t.Context(), "mig"); forewarn.ErrorMessage(err) != `VM "mig" is not a Spot or preemptible VM` {
			t.Fatalf("evict of a regular VM: %v", err)
		}
		if _, err := e.Evict(t.Context(), "nope"); forewarn.ErrorCode(err) != forewarn.ENOTFOUND {
			t.Fatalf("evict of an unknown VM: %v", err)
		}
	})
}

// TestStartVM checks that a Compute Engine VM stopped by a preemption
// can be started again: preempted reads false, the VM is running, the
// change survives a restart, and it can be preempted again.
func TestStartVM(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := mem.New()
		e := newGCEEngine(t, store)
		for name, want := range map[string]string{"spot": forewarn.ECONFLICT, "az": forewarn.EINVALID, "nope": forewarn.ENOTFOUND} {
			if _, err := e.StartVM(t.Context(), name); forewarn.ErrorCode(err) != want {
				t.Fatalf("start %s before any preemption: %v, want %s", name, err, want)
			}
		}
		ev, err := e.Evict(t.Context(), "spot")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.StartVM(t.Context(), "spot"); forewarn.ErrorMessage(err) != `VM "spot" is being preempted; start it once it is stopped` {
			t.Fatalf("start while being preempted: %v", err)
		}
		step(30 * time.Second)
		v := e.View("spot")
		if !v.Preempted || !v.Stopped {
			t.Fatalf("after the preemption: preempted %v stopped %v", v.Preempted, v.Stopped)
		}
		info, err := e.StartVM(t.Context(), "spot")
		if err != nil {
			t.Fatal(err)
		}
		if info.State != "running" {
			t.Fatalf("state %q after start", info.State)
		}
		select {
		case <-v.Changed():
		default:
			t.Fatal("the old view was not replaced")
		}
		if v := e.View("spot"); v.Preempted || v.Stopped {
			t.Fatalf("after start: preempted %v stopped %v", v.Preempted, v.Stopped)
		}
		got, _ := e.Event(ev.ID)
		if got.Status != forewarn.Completed || !got.ResumedAt.Equal(time.Now()) {
			t.Fatalf("the Preempt after start: %s resumed %v", got.Status, got.ResumedAt)
		}
		if _, err := e.StartVM(t.Context(), "spot"); forewarn.ErrorMessage(err) != `VM "spot" is running, not stopped` {
			t.Fatalf("second start: %v", err)
		}

		// A restart keeps it running.
		e.Close()
		e = newGCEEngine(t, store)
		if v := e.View("spot"); v.Preempted || v.Stopped {
			t.Fatalf("after a restart: preempted %v stopped %v", v.Preempted, v.Stopped)
		}
		// And it can be preempted again.
		if _, err := e.Evict(t.Context(), "spot"); err != nil {
			t.Fatal(err)
		}
		if v := e.View("spot"); !v.Preempted {
			t.Fatal("second eviction: not preempted")
		}
	})
}

// A stop announced with less notice than its 60-minute lead is warned as
// it is created, not before: warnedAt never precedes created.
func TestWarningNeverPrecedesCreation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: gceFleet(), AllowShortNotice: true})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		enableAll(e)
		t0 := time.Now()
		ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.TerminateOnHostMaintenance, VMs: []string{"gpu"}, Notice: 10 * time.Minute, Lasts: 5 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		got, _ := e.Event(ev.ID)
		if !got.Created.Equal(t0) || !got.WarnedAt.Equal(t0) || got.Status != forewarn.Scheduled {
			t.Fatalf("created %v, warned %v (%s), want both at %v", got.Created, got.WarnedAt, got.Status, t0)
		}
		// The same holds for a live migration announced with 30 s notice.
		e.NoteQuery("mig")
		step(time.Second)
		mig, err := e.Create(t.Context(), engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"mig"}, Notice: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got, _ := e.Event(mig.ID); !got.WarnedAt.Equal(got.Created) || got.WarnedAt.Before(t0.Add(time.Second)) {
			t.Fatalf("migration created %v, warned %v", got.Created, got.WarnedAt)
		}
	})
}

// While a stop for host maintenance is Started, the VM is stopped and
// comes back running; a preemption leaves it stopped.
func TestStartedStateShown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newGCEEngine(t, mem.New())
		state := func(name string) string {
			t.Helper()
			info, err := e.VM(name)
			if err != nil {
				t.Fatal(err)
			}
			return info.State + "/" + info.ReturnsTo
		}
		ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.TerminateOnHostMaintenance, VMs: []string{"term"}, Notice: time.Hour, Lasts: 5 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if got := state("term"); got != "running/" {
			t.Fatalf("scheduled stop: state %s", got)
		}
		step(time.Hour)
		if got, _ := e.Event(ev.ID); got.Status != forewarn.Started {
			t.Fatalf("at NotBefore the stop is %s", got.Status)
		}
		if got := state("term"); got != "stopped/running" {
			t.Fatalf("started stop: state %s, want stopped/running", got)
		}
		step(5 * time.Minute)
		if got := state("term"); got != "running/" {
			t.Fatalf("after the stop: state %s, want running/", got)
		}

		if _, err := e.Evict(t.Context(), "spot"); err != nil {
			t.Fatal(err)
		}
		if got := state("spot"); got != "stopping/stopped" {
			t.Fatalf("preemption started: state %s, want stopping/stopped", got)
		}
		step(30 * time.Second)
		if got := state("spot"); got != "stopped/" {
			t.Fatalf("preemption done: state %s, want stopped/", got)
		}

		// An Azure Reboot shows the VM rebooting while it is Started.
		if _, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"az"}, Started: true, Lasts: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if got := state("az"); got != "rebooting/running" {
			t.Fatalf("started Reboot: state %s, want rebooting/running", got)
		}
	})
}

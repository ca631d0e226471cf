package engine_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

func awsFleet() *forewarn.Fleet {
	a := func(name string, mod func(*forewarn.VM)) *forewarn.VM {
		vm := &forewarn.VM{Name: name, Provider: forewarn.AWS, InstanceID: "i-0123456789abcdef" + name[len(name)-1:],
			Zone: "us-east-1a", MachineType: "m5.large", HTTPTokens: "required", HopLimit: 1}
		if mod != nil {
			mod(vm)
		}
		return vm
	}
	return &forewarn.Fleet{VMs: []*forewarn.VM{
		a("ec2_0", nil),
		a("spot_1", func(v *forewarn.VM) { v.Spot, v.SpotInterruptionBehavior = true, "terminate" }),
		a("stop_2", func(v *forewarn.VM) { v.Spot, v.SpotInterruptionBehavior = true, "stop" }),
		a("hib_3", func(v *forewarn.VM) { v.Spot, v.SpotInterruptionBehavior = true, "hibernate" }),
		a("asg_4", func(v *forewarn.VM) { v.AutoScalingGroup = "web" }),
		a("asg_5", func(v *forewarn.VM) { v.AutoScalingGroup = "web" }),
		{Name: "az", Provider: forewarn.Azure},
	}}
}

func newAWSEngine(t *testing.T) *engine.Engine {
	t.Helper()
	e, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: awsFleet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func eventOf(t *testing.T, e *engine.Engine, id string) *forewarn.Event {
	t.Helper()
	ev, err := e.Event(id)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// TestEC2ScheduledEventLifecycle: an EC2 scheduled event is active from
// its creation, starts at NotBefore, completes Lasts later and then
// appears in the VM's history, not its active events.
func TestEC2ScheduledEventLifecycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newAWSEngine(t)
		t0 := time.Now()
		ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.SystemReboot, VMs: []string{"ec2_0"}, Notice: 48 * time.Hour, Lasts: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if !ev.NotBefore.Equal(t0.Add(48*time.Hour)) || !ev.Deadline.Equal(t0.Add(48*time.Hour+forewarn.EC2Reschedule)) || ev.Action != "" {
			t.Fatalf("created: NotBefore %v Deadline %v Action %q", ev.NotBefore, ev.Deadline, ev.Action)
		}
		v := e.View("ec2_0")
		if len(v.Events) != 1 || v.Events[0].ID != ev.ID || len(v.History) != 0 {
			t.Fatalf("view: %d events, %d history", len(v.Events), len(v.History))
		}
		step(48*time.Hour - time.Second)
		if got := eventOf(t, e, ev.ID); got.Status != forewarn.Scheduled {
			t.Fatalf("before NotBefore: %s", got.Status)
		}
		step(time.Second)
		if got := eventOf(t, e, ev.ID); got.Status != forewarn.Started || !got.StartedAt.Equal(t0.Add(48*time.Hour)) {
			t.Fatalf("at NotBefore: %s at %v", got.Status, got.StartedAt)
		}
		step(10 * time.Minute)
		got := eventOf(t, e, ev.ID)
		v = e.View("ec2_0")
		if got.Status != forewarn.Completed || len(v.Events) != 0 || len(v.History) != 1 || v.History[0].ID != ev.ID || v.Stopped || v.Deleted {
			t.Fatalf("after the window: %s, %d events, %d history, stopped %v deleted %v", got.Status, len(v.Events), len(v.History), v.Stopped, v.Deleted)
		}
	})
}

func TestEC2EventsAreForEC2VMs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newAWSEngine(t)
		for _, c := range []struct {
			spec engine.Spec
			want string
		}{
			{engine.Spec{Type: forewarn.InstanceStop, VMs: []string{"az"}, Notice: 48 * time.Hour}, `VM "az" is an Azure VM; instance-stop events are not for Azure VMs`},
			{engine.Spec{Type: forewarn.Reboot, VMs: []string{"ec2_0"}}, `VM "ec2_0" is an EC2 VM; Reboot events are not for EC2 VMs`},
			{engine.Spec{Type: forewarn.SystemMaintenance, VMs: []string{"ec2_0"}, Notice: time.Hour}, "notice 1h0m0s is below the 24h0m0s minimum for system-maintenance (the server's --allow-short-notice lifts this)"},
			{engine.Spec{Type: forewarn.Terminate, VMs: []string{"ec2_0"}, Started: true}, `VM "ec2_0" is not in an Auto Scaling group; a Terminate is a group's scale-in (use an EC2 scheduled event such as instance-stop)`},
			{engine.Spec{Type: forewarn.Preempt, VMs: []string{"spot_1", "stop_2"}}, `VM "spot_1" is an EC2 Spot VM; EC2 interrupts Spot VMs one at a time (name one VM)`},
		} {
			_, err := e.Create(t.Context(), c.spec)
			if forewarn.ErrorCode(err) != forewarn.EINVALID || forewarn.ErrorMessage(err) != c.want {
				t.Errorf("%s on %v: got %v, want %s", c.spec.Type, c.spec.VMs, err, c.want)
			}
		}
	})
}

func TestEC2Reschedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newAWSEngine(t)
		t0 := time.Now()
		ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.InstanceReboot, VMs: []string{"ec2_0"}, Notice: 48 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ctx := t.Context()
		for _, c := range []struct {
			at   time.Time
			code string
		}{
			{t0.Add(-time.Minute), forewarn.EINVALID},         // the past
			{ev.Deadline.Add(time.Second), forewarn.EINVALID}, // past the deadline
			{t0.Add(72*time.Hour + 500*time.Millisecond), ""}, // later, rounded up
			{ev.Deadline, ""},            // the deadline itself
			{t0.Add(24 * time.Hour), ""}, // earlier again
		} {
			err := e.Reschedule(ctx, ev.ID, c.at)
			if forewarn.ErrorCode(err) != c.code {
				t.Fatalf("reschedule to %v: %v, want code %q", c.at.Sub(t0), err, c.code)
			}
		}
		got := eventOf(t, e, ev.ID)
		if !got.NotBefore.Equal(t0.Add(24*time.Hour)) || !got.Deadline.Equal(ev.Deadline) {
			t.Fatalf("after reschedules: NotBefore %v, Deadline %v", got.NotBefore.Sub(t0), got.Deadline.Sub(t0))
		}
		step(24 * time.Hour)
		if got := eventOf(t, e, ev.ID); got.Status != forewarn.Started || !got.StartedAt.Equal(t0.Add(24*time.Hour)) {
			t.Fatalf("at the new NotBefore: %s at %v", got.Status, got.StartedAt.Sub(t0))
		}
		if err := e.Reschedule(ctx, ev.ID, t0.Add(30*time.Hour)); forewarn.ErrorCode(err) != forewarn.ECONFLICT {
			t.Fatalf("reschedule of a Started event: %v, want conflict", err)
		}
		az, err := engine.New(ctx, engine.Config{Store: mem.New(), Fleet: awsFleet(), AllowShortNotice: true})
		if err != nil {
			t.Fatal(err)
		}
		defer az.Close()
		r, err := az.Create(ctx, engine.Spec{Type: forewarn.Reboot, VMs: []string{"az"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := az.Reschedule(ctx, r.ID, time.Now().Add(time.Hour)); forewarn.ErrorCode(err) != forewarn.EINVALID {
			t.Fatalf("reschedule of an Azure Reboot: %v, want invalid", err)
		}
	})
}

func TestEC2Cancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newAWSEngine(t)
		ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.InstanceRetirement, VMs: []string{"ec2_0"}, Notice: 48 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Cancel(t.Context(), ev.ID); err != nil {
			t.Fatal(err)
		}
		v := e.View("ec2_0")
		if len(v.Events) != 0 || len(v.History) != 1 || v.History[0].Status != forewarn.Canceled {
			t.Fatalf("after cancel: %d events, history %v", len(v.Events), v.History)
		}
		step(49 * time.Hour)
		if got := eventOf(t, e, ev.ID); got.Status != forewarn.Canceled {
			t.Fatalf("a canceled event moved on: %s", got.Status)
		}
	})
}

// TestSpotInterruptionAfterRebalance: evict with a five-minute notice
// gives the rebalance recommendation at once, the interruption notice
// two minutes before the interruption, and then the VM is terminated.
func TestSpotInterruptionAfterRebalance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newAWSEngine(t)
		t0 := time.Now()
		ev, err := e.EvictWith(t.Context(), "spot_1", engine.VMOptions{Notice: 5 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type != forewarn.Preempt || ev.Action != "terminate" || ev.Status != forewarn.Scheduled || !ev.Created.Equal(t0) ||
			!ev.NotBefore.Equal(t0.Add(5*time.Minute)) || !ev.WarnedAt.IsZero() || ev.Lead() != 2*time.Minute {
			t.Fatalf("evicted: %+v", ev)
		}
		if _, err := e.Evict(t.Context(), "spot_1"); forewarn.ErrorCode(err) != forewarn.ECONFLICT {
			t.Fatalf("second evict: %v, want conflict", err)
		}
		step(3*time.Minute - time.Second)
		if got := eventOf(t, e, ev.ID); !got.WarnedAt.IsZero() {
			t.Fatalf("interruption notice early, at %v", got.WarnedAt.Sub(t0))
		}
		step(time.Second)
		if got := eventOf(t, e, ev.ID); !got.WarnedAt.Equal(t0.Add(3*time.Minute)) || got.Status != forewarn.Scheduled {
			t.Fatalf("at NotBefore-2m: %s warned %v", got.Status, got.WarnedAt.Sub(t0))
		}
		step(2 * time.Minute)
		if got := eventOf(t, e, ev.ID); got.Status != forewarn.Started || !e.View("spot_1").Preempted {
			t.Fatalf("at the interruption: %s", got.Status)
		}
		step(30 * time.Second)
		v := e.View("spot_1")
		if got := eventOf(t, e, ev.ID); got.Status != forewarn.Completed || !v.Deleted || v.Stopped {
			t.Fatalf("after the interruption: %s deleted %v stopped %v", got.Status, v.Deleted, v.Stopped)
		}
		if _, err := e.StartVM(t.Context(), "spot_1"); forewarn.ErrorCode(err) != forewarn.ECONFLICT {
			t.Fatalf("start of a terminated VM: %v, want conflict", err)
		}
	})
}

// TestSpotStopAndHibernate: the default notice puts the interruption
// notice beside the rebalance recommendation; a stopped VM can be
// started again; hibernation gets no two-minute warning.
func TestSpotStopAndHibernate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newAWSEngine(t)
		t0 := time.Now()
		stop, err := e.Evict(t.Context(), "stop_2")
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := eventOf(t, e, stop.ID); got.Action != "stop" || !got.WarnedAt.Equal(t0) || !got.NotBefore.Equal(t0.Add(2*time.Minute)) {
			t.Fatalf("stop: action %q warned %v NotBefore %v", got.Action, got.WarnedAt.Sub(t0), got.NotBefore.Sub(t0))
		}
		hib, err := e.EvictWith(t.Context(), "hib_3", engine.VMOptions{Notice: 3 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if hib.Action != "hibernate" || hib.Lead() != 0 {
			t.Fatalf("hibernate: action %q lead %v", hib.Action, hib.Lead())
		}
		step(2*time.Minute + 30*time.Second)
		if v := e.View("stop_2"); !v.Stopped || v.Deleted {
			t.Fatalf("stop_2 after its interruption: stopped %v deleted %v", v.Stopped, v.Deleted)
		}
		if got := eventOf(t, e, hib.ID); got.Status != forewarn.Scheduled || !got.WarnedAt.IsZero() {
			t.Fatalf("hibernation before its time: %s warned %v", got.Status, got.WarnedAt)
		}
		step(30 * time.Second)
		if got := eventOf(t, e, hib.ID); got.Status != forewarn.Started || !got.StartedAt.Equal(t0.Add(3*time.Minute)) {
			t.Fatalf("hibernation at its time: %s at %v", got.Status, got.StartedAt.Sub(t0))
		}
		if _, err := e.StartVM(t.Context(), "stop_2"); err != nil {
			t.Fatalf("start of the stopped VM: %v", err)
		}
		if v := e.View("stop_2"); v.Stopped || v.Preempted {
			t.Fatalf("started again: stopped %v preempted %v", v.Stopped, v.Preempted)
		}
		if _, err := e.EvictWith(t.Context(), "ec2_0", engine.VMOptions{}); forewarn.ErrorCode(err) != forewarn.EINVALID {
			t.Fatalf("evict of an on-demand VM: %v", err)
		}
		if _, err := e.EvictWith(t.Context(), "spot_1", engine.VMOptions{Notice: time.Minute}); forewarn.ErrorCode(err) != forewarn.EINVALID {
			t.Fatalf("evict with less than the two-minute warning: %v", err)
		}
	})
}

// TestAutoScalingScaleIn: vm delete of a group member starts a User
// Terminate at once; the VM is gone when it completes, and leaves its
// other events.
func TestAutoScalingScaleIn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newAWSEngine(t)
		ctx := context.Background()
		t0 := time.Now()
		// Each EC2 VM is a scope group of its own: one event each.
		reboots, err := e.CreateAll(ctx, engine.Spec{Type: forewarn.SystemReboot, VMs: []string{"asg_4", "asg_5"}, Notice: 48 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if len(reboots) != 2 || !slices.Equal(reboots[0].Resources, []string{"asg_4"}) || !slices.Equal(reboots[1].Resources, []string{"asg_5"}) {
			t.Fatalf("reboots: %+v", reboots)
		}
		ev, err := e.DeleteWith(ctx, "asg_4", engine.VMOptions{Lasts: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type != forewarn.Terminate || ev.Status != forewarn.Started || ev.Source != forewarn.User || !ev.StartedAt.Equal(t0) {
			t.Fatalf("scale-in: %+v", ev)
		}
		if _, err := e.Delete(ctx, "asg_4"); forewarn.ErrorCode(err) != forewarn.ECONFLICT {
			t.Fatalf("second delete: %v", err)
		}
		if _, err := e.Delete(ctx, "ec2_0"); forewarn.ErrorCode(err) != forewarn.EINVALID {
			t.Fatalf("delete outside a group: %v", err)
		}
		step(time.Minute)
		v := e.View("asg_4")
		if got := eventOf(t, e, ev.ID); got.Status != forewarn.Completed || !v.Deleted {
			t.Fatalf("after the scale-in: %s deleted %v", got.Status, v.Deleted)
		}
		if got := eventOf(t, e, reboots[0].ID); got.Status != forewarn.Canceled {
			t.Fatalf("the terminated VM's other event is %s, want Canceled", got.Status)
		}
		if got := eventOf(t, e, reboots[1].ID); got.Status != forewarn.Scheduled || !slices.Equal(got.Resources, []string{"asg_5"}) {
			t.Fatalf("the other VM's event: %s %v", got.Status, got.Resources)
		}
		if _, err := e.Create(ctx, engine.Spec{Type: forewarn.InstanceStop, VMs: []string{"asg_4"}, Notice: 48 * time.Hour}); forewarn.ErrorCode(err) != forewarn.EINVALID {
			t.Fatalf("event on a terminated VM: %v", err)
		}
	})
}

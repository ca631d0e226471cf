package engine_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

// wideFleet is n VMs of one scale set placement group.
func wideFleet(n int) *forewarn.Fleet {
	f := &forewarn.Fleet{}
	for i := range n {
		f.VMs = append(f.VMs, &forewarn.VM{Name: fmt.Sprintf("ss_%d", i), Provider: forewarn.Azure, ScaleSet: "ss", InstanceID: fmt.Sprint(i)})
	}
	return f
}

// TestApprovalsOfAWideEvent checks that the VMs of a fleet-wide event
// approving it one by one each succeed, and that the event records the
// first MaxApprovals of them rather than being rewritten once per VM.
func TestApprovalsOfAWideEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 40
		e, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: wideFleet(n)})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		enableAll(e)
		var names []string
		for _, vm := range e.Fleet().VMs {
			names = append(names, vm.Name)
		}
		ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Freeze, VMs: names})
		if err != nil {
			t.Fatal(err)
		}
		inc := e.View(names[n-1]).Incarnation
		for _, name := range names {
			if err := e.Approve(t.Context(), name, []string{ev.ID}); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		got, _ := e.Event(ev.ID)
		var by []string
		for _, a := range got.Approvals {
			by = append(by, a.By)
		}
		if got.Status != forewarn.Started || !slices.Equal(by, names[:engine.MaxApprovals]) {
			t.Fatalf("%s, approved by %v; want Started, approved by the first %d", got.Status, by, engine.MaxApprovals)
		}
		if v := e.View(names[n-1]); v.Incarnation != inc+1 || len(v.Events) != 1 || v.Events[0].Status != forewarn.Started {
			t.Fatalf("last VM: incarnation %d (was %d), events %v", v.Incarnation, inc, v.Events)
		}
		// Visible, without copying the event: every VM of the placement
		// group sees it, and an unknown VM or ID sees nothing.
		if !e.Visible(names[0], ev.ID) || !e.Visible(names[0], strings.ToLower(ev.ID)) || e.Visible("nobody", ev.ID) || e.Visible(names[0], "no-such-id") {
			t.Errorf("Visible is wrong")
		}
	})
}

// TestWideDeleteLeavesOtherEvents checks that a Terminate of many VMs
// removes every one of them from another event that
// names them, and cancels an event left with none.
func TestWideDeleteLeavesOtherEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: wideFleet(10), AllowShortNotice: true})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		enableAll(e)
		all := []string{"ss_0", "ss_1", "ss_2", "ss_3", "ss_4", "ss_5", "ss_6", "ss_7", "ss_8", "ss_9"}
		big, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: all, Notice: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		small, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Freeze, VMs: []string{"ss_1", "ss_2"}, Notice: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		term, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Terminate, VMs: all[:6], Notice: 5 * time.Minute, Lasts: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(6*time.Minute + time.Second)
		synctest.Wait()
		if got, _ := e.Event(term.ID); got.Status != forewarn.Completed {
			t.Fatalf("Terminate %s", got.Status)
		}
		if got, _ := e.Event(big.ID); got.Status != forewarn.Scheduled || !slices.Equal(got.Resources, all[6:]) {
			t.Errorf("big event: %s %v, want Scheduled for %v", got.Status, got.Resources, all[6:])
		}
		if got, _ := e.Event(small.ID); got.Status != forewarn.Canceled || len(got.Resources) != 1 {
			t.Errorf("small event: %s %v, want Canceled with one VM kept", got.Status, got.Resources)
		}
		if v := e.View("ss_7"); len(v.Events) != 1 || v.Events[0].ID != big.ID || !slices.Equal(v.Events[0].Resources, all[6:]) {
			t.Errorf("ss_7 sees %v", v.Events)
		}
		if v := e.View("ss_0"); !v.Deleted {
			t.Errorf("ss_0 not deleted")
		}
	})
}

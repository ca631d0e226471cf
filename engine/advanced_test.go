package engine_test

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestAdvanced checks that Advanced's channel closes on every commit,
// including an approval of a Started event, which changes no document
// and so reaches no subscriber.
func TestAdvanced(t *testing.T) {
	e := newEngine(t, mem.New(), false)
	var views atomic.Int64
	e.Subscribe(func(*engine.View) { views.Add(1) })
	views.Store(0)

	adv := e.Advanced()
	if closed(adv) {
		t.Fatal("Advanced is closed before any change")
	}
	ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"solo"}})
	if err != nil {
		t.Fatal(err)
	}
	if !closed(adv) {
		t.Fatal("Advanced stayed open across a Create")
	}
	if n := views.Load(); n != 1 {
		t.Fatalf("Create published %d views, want 1 (solo's)", n)
	}
	if err := e.Start(t.Context(), ev.ID); err != nil {
		t.Fatal(err)
	}
	adv = e.Advanced()
	views.Store(0)
	if err := e.Approve(t.Context(), "solo", []string{ev.ID}); err != nil {
		t.Fatal(err)
	}
	if !closed(adv) {
		t.Fatal("Advanced stayed open across an approval of a Started event")
	}
	if n := views.Load(); n != 0 {
		t.Fatalf("the approval published %d views, want 0", n)
	}
	if got, _ := e.Event(ev.ID); len(got.Approvals) != 1 || got.Approvals[0].By != "solo" {
		t.Fatalf("approvals %+v, want solo's", got.Approvals)
	}
	if adv = e.Advanced(); closed(adv) {
		t.Fatal("a new Advanced channel is closed with no change after it")
	}
}

// TestAdvancedByDeadline: the channel also closes at a deadline's
// change, and the change is visible once it has.
func TestAdvancedByDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, mem.New(), false)
		synctest.Wait() // the first calls' LastSeen writes
		ch := e.Advanced()
		if closed(ch) {
			t.Fatal("closed before any change")
		}
		ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"solo"}})
		if err != nil {
			t.Fatal(err)
		}
		if !closed(ch) {
			t.Fatal("not closed by Create")
		}
		next := e.Advanced()
		if closed(next) {
			t.Fatal("the next channel is closed already")
		}
		<-next // the deadline: NotBefore, 15 minutes on
		if got := time.Until(ev.NotBefore); got > 0 {
			t.Fatalf("woke %v before NotBefore", got)
		}
		wantState(t, e, ev.ID, "solo", forewarn.Started, 3)
	})
}

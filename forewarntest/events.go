package forewarntest

import (
	"strings"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
)

// Engine returns the server's lifecycle engine, for what the Server's
// own methods do not cover: waves, scale sets, VM views.
func (s *Server) Engine() *engine.Engine { return s.srv.Engine() }

// EventOptions adjust an event that Reboot, Freeze or Redeploy raises;
// zero fields take the defaults.
type EventOptions struct {
	// Notice is the time from now to NotBefore: the type's minimum by
	// default (15 minutes for a Reboot or a Freeze, 10 for a Redeploy).
	Notice time.Duration
	// Lasts is how long the event stays Started: the type's default
	// (5 minutes for a Reboot) by default.
	Lasts time.Duration
	// Source is Platform by default.
	Source forewarn.Source
	// Description is the event's description.
	Description string
	// Started creates the event already Started, as an unplanned event.
	Started bool
}

// Create creates the event spec describes, failing the test if the
// engine refuses it.
func (s *Server) Create(spec engine.Spec) *forewarn.Event {
	s.t.Helper()
	ev, err := s.Engine().Create(s.ctx, spec)
	if err != nil {
		s.t.Fatalf("forewarntest: create a %s event of %s: %s", spec.Type, strings.Join(spec.VMs, ", "), message(err))
		return nil
	}
	return ev
}

// CreateAll creates the events spec describes, one per scope group of
// its VMs (engine.CreateAll: a VM sees its own group's event only),
// failing the test if the engine refuses them. Create refuses a spec of
// several groups.
func (s *Server) CreateAll(spec engine.Spec) []*forewarn.Event {
	s.t.Helper()
	evs, err := s.Engine().CreateAll(s.ctx, spec)
	if err != nil {
		s.t.Fatalf("forewarntest: create %s events of %s: %s", spec.Type, strings.Join(spec.VMs, ", "), message(err))
		return nil
	}
	return evs
}

// raise creates an event of type t on vm.
func (s *Server) raise(t forewarn.EventType, vm string, o EventOptions) *forewarn.Event {
	s.t.Helper()
	return s.Create(engine.Spec{Type: t, VMs: []string{vm}, Notice: o.Notice, Lasts: o.Lasts, Source: o.Source,
		Description: o.Description, Started: o.Started})
}

// Reboot raises a Reboot of the Azure VM vm.
func (s *Server) Reboot(vm string, o EventOptions) *forewarn.Event {
	s.t.Helper()
	return s.raise(forewarn.Reboot, vm, o)
}

// Freeze raises a Freeze of the Azure VM vm.
func (s *Server) Freeze(vm string, o EventOptions) *forewarn.Event {
	s.t.Helper()
	return s.raise(forewarn.Freeze, vm, o)
}

// Redeploy raises a Redeploy of the Azure VM vm.
func (s *Server) Redeploy(vm string, o EventOptions) *forewarn.Event {
	s.t.Helper()
	return s.raise(forewarn.Redeploy, vm, o)
}

// Evict preempts the Spot or preemptible VM vm, as engine.Engine.Evict
// describes for each provider.
func (s *Server) Evict(vm string) *forewarn.Event {
	s.t.Helper()
	ev, err := s.Engine().Evict(s.ctx, vm)
	if err != nil {
		s.t.Fatalf("forewarntest: evict %s: %s", vm, message(err))
		return nil
	}
	return ev
}

// Delete deletes the scale set VM vm, or scales the EC2 VM vm in, as
// engine.Engine.Delete describes. The Terminate it returns has the
// scale set's notice; an EC2 scale-in's is Started at once; that of a
// Spot VM, or of a scale set whose Terminate notifications are off, is
// already Completed: the VM is gone.
func (s *Server) Delete(vm string) *forewarn.Event {
	s.t.Helper()
	ev, err := s.Engine().Delete(s.ctx, vm)
	if err != nil {
		s.t.Fatalf("forewarntest: delete %s: %s", vm, message(err))
		return nil
	}
	return ev
}

// Approve approves the event id on behalf of the VM named by (or of
// forewarn.Operator), as a StartRequest from the VM would.
func (s *Server) Approve(by, id string) {
	s.t.Helper()
	if err := s.Engine().Approve(s.ctx, by, []string{id}); err != nil {
		s.t.Fatalf("forewarntest: approve %s as %s: %s", id, by, message(err))
	}
}

// Start starts the Scheduled event id now, whatever its NotBefore, as
// the operator's 'forewarn event start' does. (The server itself runs
// from NewServer or Start on.)
func (s *Server) Start(id string) {
	s.t.Helper()
	if err := s.Engine().Start(s.ctx, id); err != nil {
		s.t.Fatalf("forewarntest: start %s: %s", id, message(err))
	}
}

// Complete ends the Started event id now.
func (s *Server) Complete(id string) {
	s.t.Helper()
	if err := s.Engine().Complete(s.ctx, id); err != nil {
		s.t.Fatalf("forewarntest: complete %s: %s", id, message(err))
	}
}

// Cancel withdraws the Scheduled (or a wave's Pending) event id.
func (s *Server) Cancel(id string) {
	s.t.Helper()
	if err := s.Engine().Cancel(s.ctx, id); err != nil {
		s.t.Fatalf("forewarntest: cancel %s: %s", id, message(err))
	}
}

// Event returns a copy of the event id as it is now.
func (s *Server) Event(id string) *forewarn.Event {
	s.t.Helper()
	ev, err := s.Engine().Event(id)
	if err != nil {
		s.t.Fatalf("forewarntest: event %s: %s", id, message(err))
		return nil
	}
	return ev
}

// Approved reports whether anyone, a VM or the operator, approved the
// event id. Its Approvals say who and when.
func (s *Server) Approved(id string) bool {
	s.t.Helper()
	ev := s.Event(id)
	return ev != nil && ev.Approved()
}

// Wait waits until the event id has the status want, and returns it
// then. An event that started and completed since the last look counts
// as Started. Wait fails the test at once when the event can no longer
// reach want (it was canceled, or is past it), and after the wait
// timeout (WithWaitTimeout). It wakes at each change of the engine's
// state, not by polling; inside a synctest bubble its timeout is of the
// bubble's clock, so a Wait for an event due in 15 minutes returns at
// once.
func (s *Server) Wait(id string, want forewarn.Status) *forewarn.Event {
	s.t.Helper()
	eng := s.Engine()
	timeout := time.NewTimer(s.waitTimeout)
	defer timeout.Stop()
	for {
		changed := eng.Advanced() // before the look: no change falls between
		ev, err := eng.Event(id)
		if err != nil {
			s.t.Fatalf("forewarntest: wait for event %s to be %s: %s", id, want, message(err))
			return nil
		}
		switch reach(ev, want) {
		case reached:
			return ev
		case unreachable:
			s.t.Fatalf("forewarntest: event %s (%s of %s) is %s: it will not be %s", id, ev.Type,
				strings.Join(ev.Resources, ", "), ev.Status, want)
			return nil
		}
		select {
		case <-changed:
		case <-timeout.C:
			s.t.Fatalf("forewarntest: event %s (%s of %s) is still %s after %s; want %s%s", id, ev.Type,
				strings.Join(ev.Resources, ", "), ev.Status, s.waitTimeout, want, due(ev))
			return nil
		case <-s.ctx.Done():
			s.t.Fatalf("forewarntest: the server closed while waiting for event %s to be %s", id, want)
			return nil
		}
	}
}

// Whether an event has reached a status, may yet, or never will.
const (
	pending = iota
	reached
	unreachable
)

// order ranks the statuses along the lifecycle; Canceled ends it too.
var order = map[forewarn.Status]int{forewarn.Pending: 0, forewarn.Scheduled: 1, forewarn.Started: 2, forewarn.Completed: 3, forewarn.Canceled: 3}

// reach tells whether ev has reached want.
func reach(ev *forewarn.Event, want forewarn.Status) int {
	switch {
	case ev.Status == want:
		return reached
	case want == forewarn.Started && ev.Status == forewarn.Completed && !ev.StartedAt.IsZero():
		return reached // it started, then completed before this look
	case order[ev.Status] >= order[want]:
		return unreachable
	}
	return pending
}

// due says when ev's next deadline is, for a timeout's message.
func due(ev *forewarn.Event) string {
	if at, ok := ev.NextDeadline(); ok {
		return "; its next deadline is " + at.UTC().Format(time.RFC3339) + ", in " + time.Until(at).Round(time.Second).String()
	}
	return "; it has no deadline: an approval, Start or Complete moves it"
}

// message returns the text of an engine error: a forewarn error's
// message, or the error.
func message(err error) string {
	if forewarn.ErrorCode(err) != forewarn.EINTERNAL {
		return forewarn.ErrorMessage(err)
	}
	return err.Error()
}

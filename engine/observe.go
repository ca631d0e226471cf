package engine

import (
	"time"

	"github.com/forewarn/forewarn"
)

// Observer receives the engine's measurements, for metrics. The engine
// calls it with its lock held: its methods must be quick and must not
// call the engine. Events passed to it must not be modified or kept.
type Observer interface {
	// Transition reports that a commit of this engine moved an event of
	// type t from status from to status to; from is "" for an event the
	// commit created. Commits applied from other replicas are not
	// reported, so a fleet's replicas together count each transition once.
	Transition(t forewarn.EventType, from, to forewarn.Status)
	// Approval reports an approval by by (a VM's name, or
	// forewarn.Operator) recorded at at, of ev as it was before the
	// approval.
	Approval(by string, ev *forewarn.Event, at time.Time)
	// DeadlineLag reports how late a deadline timer fired: the time from
	// the deadline it was armed for to the moment it ran.
	DeadlineLag(late time.Duration)
	// Commit reports how long one write to the store took, whatever its
	// result.
	Commit(took time.Duration)
}

// nopObserver is the Observer of an engine configured without one.
type nopObserver struct{}

func (nopObserver) Transition(forewarn.EventType, forewarn.Status, forewarn.Status) {}
func (nopObserver) Approval(string, *forewarn.Event, time.Time)                     {}
func (nopObserver) DeadlineLag(time.Duration)                                       {}
func (nopObserver) Commit(time.Duration)                                            {}

// EventCount is how many of the events the engine holds have one type
// and status.
type EventCount struct {
	Type   forewarn.EventType
	Status forewarn.Status
	N      int
}

// typeStatus keys the engine's event counts.
type typeStatus struct {
	t forewarn.EventType
	s forewarn.Status
}

// count moves the event counts by n for ev's type and status. e.mu must
// be held.
func (e *Engine) count(ev *forewarn.Event, n int) {
	k := typeStatus{ev.Type, ev.Status}
	if e.counts[k] += n; e.counts[k] == 0 {
		delete(e.counts, k)
	}
}

// EventCounts returns how many events, active and ended, the engine
// holds of each type and status, in no particular order; pairs with none
// are left out. Its cost follows the number of pairs, not of events.
func (e *Engine) EventCounts() []EventCount {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]EventCount, 0, len(e.counts))
	for k, n := range e.counts {
		out = append(out, EventCount{Type: k.t, Status: k.s, N: n})
	}
	return out
}

// EnabledVMs returns how many of the fleet's VMs have their scheduled
// events enabled (see VMInfo.Enabled), in time linear in the fleet.
func (e *Engine) EnabledVMs() int {
	now := time.Now()
	cache := map[**forewarn.VM]bool{}
	n := 0
	for _, vm := range e.cur().fleetOf().VMs {
		if e.serviceEnabled(vm, now, cache) {
			n++
		}
	}
	return n
}

// transition is one status change of one event.
type transition struct {
	t        forewarn.EventType
	from, to forewarn.Status
}

// transitions lists the status changes that committing changed makes.
// e.mu must be held, and the old versions still installed.
func (e *Engine) transitions(changed []*forewarn.Event) []transition {
	var out []transition
	for _, c := range changed {
		var from forewarn.Status
		if old := e.events[c.ID]; old != nil {
			from = old.Status
		}
		if from != c.Status {
			out = append(out, transition{c.Type, from, c.Status})
		}
	}
	return out
}

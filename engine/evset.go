package engine

import (
	"iter"

	"github.com/forewarn/forewarn"
)

// evSet is the events of one VM, by ID: the index byVM holds for every
// VM with an event. Most VMs have one, which it holds without a map: a
// fleet-wide GCE or EC2 event makes an event per VM, and a map per VM
// cost 200 bytes each.
type evSet struct {
	one  *forewarn.Event
	more map[string]*forewarn.Event // the others, by ID, once there are two
}

// put adds ev, or replaces the event of its ID.
func (s *evSet) put(ev *forewarn.Event) {
	switch {
	case s.one == nil || s.one.ID == ev.ID:
		s.one = ev
	case s.more != nil:
		s.more[ev.ID] = ev
	default:
		s.more = map[string]*forewarn.Event{ev.ID: ev}
	}
}

// remove drops the event of ID id, and reports whether s is empty then.
func (s *evSet) remove(id string) bool {
	switch {
	case s.one != nil && s.one.ID == id:
		s.one = nil
		for k, ev := range s.more {
			s.one = ev
			delete(s.more, k)
			break
		}
	default:
		delete(s.more, id)
	}
	if len(s.more) == 0 {
		s.more = nil
	}
	return s.one == nil
}

// all yields each event of s.
func (s evSet) all() iter.Seq[*forewarn.Event] {
	return func(yield func(*forewarn.Event) bool) {
		if s.one == nil || !yield(s.one) {
			return
		}
		for _, ev := range s.more {
			if !yield(ev) {
				return
			}
		}
	}
}

// eventsOf yields the events of the VM named name. e.mu must be held.
func (e *Engine) eventsOf(name string) iter.Seq[*forewarn.Event] {
	return e.byVM[name].all()
}

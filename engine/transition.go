package engine

import (
	"maps"
	"slices"
	"time"

	"github.com/forewarn/forewarn"
)

// Transition is one change of state a commit made: an event's status, a
// session's state, or a host's state in a session. Every replica sees
// the same transitions at the same revisions, whichever wrote them.
type Transition struct {
	// Revision is the store revision of the commit; Time when this
	// replica applied it, in UTC.
	Revision int64     `json:"revision"`
	Time     time.Time `json:"time"`
	// Kind is "event", "session" or "host".
	Kind string `json:"kind"`
	// ID is the event's or the session's ID, or the host's name.
	ID string `json:"id"`
	// Session is the session of a host's transition.
	Session string `json:"session,omitempty"`
	// From is the state before ("" for a new event or session), To the
	// state after.
	From string `json:"from,omitempty"`
	To   string `json:"to"`
	// Reason says why a host failed or a session paused.
	Reason string `json:"reason,omitempty"`
	// Event is the event after the change, for an event's transition;
	// Host the host's record, for a host's. Both are the engine's own
	// committed values, shared with every subscriber: they must not be
	// modified.
	Event *forewarn.Event       `json:"event,omitempty"`
	Host  *forewarn.SessionHost `json:"host,omitempty"`
}

// SubscribeTransitions calls fn with the transitions of each commit the
// engine applies from now on, its own and other replicas', in revision
// order (a commit that changes no state is not passed on). After a
// reload, which skips commits, fn gets nil: the subscriber must read the
// state again. fn runs with the engine locked: it must be quick and must
// not call the engine.
func (e *Engine) SubscribeTransitions(fn func(rev int64, ts []Transition)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.tsubs = append(e.tsubs, fn)
}

// noteTransitions computes the transitions of a commit of events and
// sessions at rev, against the state still installed, and passes them
// to the subscribers. e.mu must be held.
func (e *Engine) noteTransitions(rev int64, now time.Time, events []*forewarn.Event, sessions map[string]*forewarn.Session) {
	if len(e.tsubs) == 0 {
		return
	}
	now = now.Round(0).UTC() // the same bytes whatever the server's zone
	// Counted first, so the slice is made once at its size, neither
	// grown by doubling nor made for events that did not change (a
	// fleet-wide EC2 event is 100,000 of them).
	n := 0
	for _, ev := range events {
		if old := e.events[ev.ID]; old == nil || old.Status != ev.Status {
			n++
		}
	}
	ts := make([]Transition, 0, n+len(sessions))
	for _, ev := range events {
		old := e.events[ev.ID]
		if old != nil && old.Status == ev.Status {
			continue
		}
		t := Transition{Revision: rev, Time: now, Kind: "event", ID: ev.ID, To: string(ev.Status), Event: ev}
		if old != nil {
			t.From = string(old.Status)
		}
		ts = append(ts, t)
	}
	for _, id := range slices.Sorted(maps.Keys(sessions)) {
		s, old := sessions[id], e.sessions[id]
		if s == nil {
			continue
		}
		if old == nil || old.State != s.State {
			t := Transition{Revision: rev, Time: now, Kind: "session", ID: id, To: string(s.State), Reason: s.Reason}
			if old != nil {
				t.From = string(old.State)
			}
			ts = append(ts, t)
		}
		for i := range s.Hosts {
			h := &s.Hosts[i]
			var from forewarn.HostState
			if old != nil && i < len(old.Hosts) && old.Hosts[i].Name == h.Name {
				from = old.Hosts[i].State
			}
			if from == h.State || old == nil && h.State == forewarn.HostPending {
				continue
			}
			// A host Ready and InMaintenance in one step passes through
			// Ready: the automation waits for that.
			if h.State == forewarn.HostInMaintenance && from == forewarn.HostNotifying {
				ready := *h // shares h's lists, which nothing writes
				ready.State = forewarn.HostReady
				ts = append(ts, Transition{Revision: rev, Time: now, Kind: "host", ID: h.Name, Session: id, From: string(from),
					To: string(forewarn.HostReady), Host: &ready})
				from = forewarn.HostReady
			}
			ts = append(ts, Transition{Revision: rev, Time: now, Kind: "host", ID: h.Name, Session: id, From: string(from),
				To: string(h.State), Reason: h.Reason, Host: h})
		}
	}
	if len(ts) == 0 {
		return
	}
	for _, fn := range e.tsubs {
		fn(rev, ts)
	}
}

// noteReload tells the transition subscribers that commits were
// skipped. e.mu must be held.
func (e *Engine) noteReload(rev int64) {
	for _, fn := range e.tsubs {
		fn(rev, nil)
	}
}

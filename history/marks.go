package history

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/forewarn/forewarn"
)

// Mark is what the metadata servers note about one event: which VM first
// read a document showing it and when, and the NotBefore it was last
// read with while Scheduled (the engine clears NotBefore once an event
// starts).
type Mark struct {
	id        string
	by        atomic.Int32 // ring index + 1; 0: never read
	at        atomic.Int64 // Unix nanoseconds
	notBefore atomic.Int64 // Unix nanoseconds; 0: unknown
}

// marks holds the Mark of every event a document showed or an approval
// named. Its keys are the IDs of events the engine has (servers create
// Marks only from their rendered documents and from approvals the engine
// accepted), so it grows with the events, never with what clients send.
type marks struct {
	mu sync.Mutex
	m  map[string]*Mark
}

// get returns the Mark of event id, creating it.
func (ms *marks) get(id string) *Mark {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	m := ms.m[id]
	if m == nil {
		m = &Mark{id: id}
		ms.m[id] = m
	}
	return m
}

// lookup returns the Mark of event id, or nil.
func (ms *marks) lookup(id string) *Mark {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return ms.m[id]
}

// Ref is a rendered document's reference to an event it shows: made
// once per document (or per shared rendering of an event), resolved to
// the event's Mark on first use, so that a request that reads the
// document marks the event without a lookup or an allocation. A Ref must
// not be copied after first use.
type Ref struct {
	// ID is the event's ID.
	ID string
	// Since is when the event became visible (Unix nanoseconds) while it
	// is Scheduled, for the gaps of a VM while an event was pending; 0
	// once it has started.
	Since int64
	// NotBefore is the event's NotBefore while Scheduled (Unix
	// nanoseconds), 0 otherwise.
	NotBefore int64
	mark      atomic.Pointer[Mark]
}

// See notes that the request answered through w read a document showing
// the event r refers to: the first such read marks the event seen by the
// request's VM. It does nothing when h is nil or w is not recorded.
func (h *History) See(w http.ResponseWriter, r *Ref) {
	if h == nil {
		return
	}
	hw := find(w)
	if hw == nil {
		return
	}
	m := r.mark.Load()
	if m == nil {
		m = h.marks.get(r.ID)
		r.mark.Store(m)
	}
	if r.NotBefore != 0 && m.notBefore.Load() != r.NotBefore {
		m.notBefore.Store(r.NotBefore)
	}
	if m.by.Load() == 0 && m.by.CompareAndSwap(0, hw.ring.idx+1) {
		m.at.Store(time.Now().UnixNano())
	}
	if r.Since > 0 && (hw.pending == 0 || r.Since < hw.pending) {
		hw.pending = r.Since
	}
}

// Seen is what the servers noted about one event.
type Seen struct {
	// By is the VM that first read a document showing the event, and At
	// when; empty and zero when none did.
	By string
	At time.Time
	// NotBefore is the NotBefore the event was last read with while
	// Scheduled; zero when unknown.
	NotBefore time.Time
}

// Seen returns what the servers noted about event id, and false when
// they noted nothing.
func (h *History) Seen(id string) (Seen, bool) {
	if h == nil {
		return Seen{}, false
	}
	m := h.marks.lookup(id)
	if m == nil {
		return Seen{}, false
	}
	var s Seen
	if by := m.by.Load(); by > 0 && int(by) <= len(h.names) {
		s.By = h.names[by-1]
		if at := m.at.Load(); at != 0 {
			s.At = time.Unix(0, at).UTC()
		}
	}
	if nb := m.notBefore.Load(); nb != 0 {
		s.NotBefore = time.Unix(0, nb).UTC()
	}
	return s, true
}

// NewRef returns a Ref to ev as a document shows it now.
func NewRef(ev *forewarn.Event) *Ref {
	r := &Ref{ID: ev.ID}
	if ev.Status == forewarn.Scheduled {
		r.Since = VisibleSince(ev).UnixNano()
		if !ev.NotBefore.IsZero() {
			r.NotBefore = ev.NotBefore.UnixNano()
		}
	}
	return r
}

// VisibleSince returns about when ev became visible to VMs: when it was
// created, or for a maintenance wave's later update domain, when it was
// scheduled (its notice before its NotBefore, to the second), as far as
// the event itself tells.
func VisibleSince(ev *forewarn.Event) time.Time {
	since := ev.Created
	if ev.Wave != "" && ev.Status == forewarn.Scheduled && ev.Notice > 0 && !ev.NotBefore.IsZero() {
		if s := ev.NotBefore.Add(-ev.Notice - time.Second); s.After(since) {
			since = s
		}
	}
	return since
}

package history

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/forewarn/forewarn"
)

// Mark is what the metadata servers note about one event: which VM first
// read a document showing it and when, the NotBefore it was last read
// with while Scheduled (the engine clears NotBefore once an event
// starts), when it started as a read of it showed, and the VMs that
// first read it only after it started, having missed its notice.
type Mark struct {
	id        string
	notBefore atomic.Int64 // Unix nanoseconds; 0: unknown
	started   atomic.Int64 // Unix nanoseconds; 0: no read showed it started
	// seen reports whether a VM read the event; late counts the VMs that
	// first read it after it started.
	seen atomic.Bool
	late atomic.Int32
	// mu guards the names and times of the first reader (by, at) and of
	// the first late reader (lateBy, lateAt), kept as names: the VM may
	// leave the inventory, and its ring serve another, since.
	mu     sync.Mutex
	by     string
	at     int64 // Unix nanoseconds
	lateBy string
	lateAt int64
	// ms holds m: it tells the keeper of m's changes.
	ms *marks
}

// noteLate notes that the VM named vm first read the event after it
// started, in a request begun at at.
func (m *Mark) noteLate(vm string, at int64) {
	if m.late.Add(1) == 1 {
		m.mu.Lock()
		m.lateBy, m.lateAt = vm, at
		m.mu.Unlock()
	}
	m.ms.noteSighting(m)
}

// marks holds the Mark of every event a document showed or an approval
// named. Its keys are the IDs of events the engine has (servers create
// Marks only from their rendered documents and from approvals the engine
// accepted), so it grows with the events, never with what clients send.
type marks struct {
	mu sync.Mutex
	m  map[string]*Mark
	// note, when set, tells the keeper of a Mark's change.
	note func(*Mark)
}

// get returns the Mark of event id, creating it.
func (ms *marks) get(id string) *Mark {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	m := ms.m[id]
	if m == nil {
		m = &Mark{id: id, ms: ms}
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
	// Since is when the event became visible (Unix nanoseconds), for the
	// gaps of a VM while it was pending (Scheduled); 0 when the document
	// never showed it Scheduled (a key that shows an event only once it
	// has started).
	Since int64
	// NotBefore is the event's NotBefore while Scheduled (Unix
	// nanoseconds), 0 otherwise.
	NotBefore int64
	// Started is when the event started (Unix nanoseconds) once it has:
	// the end of its notice. 0 while it is Scheduled.
	Started int64
	mark    atomic.Pointer[Mark]
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
	changed := false
	if r.NotBefore != 0 && m.notBefore.Load() != r.NotBefore {
		m.notBefore.Store(r.NotBefore)
		changed = true
	}
	if !m.seen.Load() && m.seen.CompareAndSwap(false, true) {
		m.mu.Lock()
		m.by, m.at = hw.ring.name, time.Now().UnixNano()
		m.mu.Unlock()
		changed = true
	}
	if r.Started > 0 && m.started.Load() == 0 {
		m.started.Store(r.Started)
		changed = true
	}
	if changed {
		h.marks.noteSighting(m)
	}
	hw.read = true
	if r.Since > 0 {
		hw.notice(r, m)
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
	// LateReaders counts the VMs that first read the event only after it
	// started, its notice, over their API's SlowGap, passed unread
	// (Stats.ReadsAfterStart); FirstLate is the first of them, and
	// FirstLateAt when its request began.
	LateReaders int
	FirstLate   string
	FirstLateAt time.Time
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
	m.mu.Lock()
	by, at, lateBy, lateAt := m.by, m.at, m.lateBy, m.lateAt
	m.mu.Unlock()
	if by != "" {
		s.By, s.At = by, time.Unix(0, at).UTC()
	}
	if nb := m.notBefore.Load(); nb != 0 {
		s.NotBefore = time.Unix(0, nb).UTC()
	}
	if lateBy != "" {
		s.LateReaders, s.FirstLate = int(m.late.Load()), lateBy
		s.FirstLateAt = time.Unix(0, lateAt).UTC()
	}
	return s, true
}

// NewRef returns a Ref to ev as a document that shows it both Scheduled
// and Started shows it now.
func NewRef(ev *forewarn.Event) *Ref {
	r := &Ref{ID: ev.ID}
	switch ev.Status {
	case forewarn.Scheduled:
		r.Since = VisibleSince(ev).UnixNano()
		if !ev.NotBefore.IsZero() {
			r.NotBefore = ev.NotBefore.UnixNano()
		}
	case forewarn.Started:
		r.Since = VisibleSince(ev).UnixNano()
		r.Started = ev.StartedAt.UnixNano()
	}
	return r
}

// NewStartedRef returns a Ref to ev, Started, for a document that shows
// an event only once it has started (Compute Engine's preempted, EC2's
// target-lifecycle-state): reading it marks the event seen, but the
// document gave no notice that a VM could have read before.
func NewStartedRef(ev *forewarn.Event) *Ref {
	return &Ref{ID: ev.ID, Started: ev.StartedAt.UnixNano()}
}

// VisibleSince returns about when ev became visible to VMs: when it was
// created, or for a maintenance wave's later update domain, when it was
// scheduled (its notice before its NotBefore, or once Started before
// its start, to the second), as far as the event itself tells.
func VisibleSince(ev *forewarn.Event) time.Time {
	since := ev.Created
	due := ev.NotBefore
	if ev.Status == forewarn.Started {
		due = ev.StartedAt
	}
	if ev.Wave != "" && ev.Notice > 0 && !due.IsZero() {
		if s := due.Add(-ev.Notice - time.Second); s.After(since) {
			since = s
		}
	}
	return since
}

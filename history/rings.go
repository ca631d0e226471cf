package history

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/internal/cow"
)

// ring is one VM's recent requests and its Stats. A ring outlives its
// VM: once the VM leaves the inventory and its last request is done, the
// ring is reset and serves a VM added later (see History.Apply).
type ring struct {
	mu    sync.Mutex
	n     uint64 // requests recorded
	slots []slot // made at the VM's first request; empty when none are kept
	st    stats  // guarded by mu
	// name is the VM's. It changes only when the ring is reused, while
	// no request holds it.
	name string
	// state holds the ring's generation (bits genShift and up, bumped at
	// each reuse), whether its VM has left the inventory (retired), and
	// the VM's requests being answered (the low 32 bits). A request
	// joins only a ring of the generation it looked up, not retired, so
	// that a ring is reused only once no request of its former VM holds
	// it.
	state atomic.Uint64
	// w caches a Writer for the VM's next request.
	w atomic.Pointer[Writer]
	// held counts the VM's maintenance-event long-polls held now, and
	// lastEnd is when its latest-ending request ended (Unix nanoseconds).
	held    atomic.Int32
	lastEnd atomic.Int64
	// maintPolls and noETag count wait_for_change requests on
	// maintenance-event, and those without last_etag, as they begin.
	maintPolls, noETag atomic.Int64
}

// The fields of ring.state.
const (
	inflightMask = 1<<32 - 1
	retired      = 1 << 32
	genShift     = 33
	genMask      = 1<<31 - 1
)

// gen returns the generation of a ring state.
func gen(state uint64) uint32 { return uint32(state >> genShift) }

// inflight returns the requests being answered in a ring state.
func inflight(state uint64) int { return int(state & inflightMask) }

// member is a VM's place in History.rings: its ring, of the generation
// the VM has it in.
type member struct {
	r   *ring
	gen uint32
}

// chunkRings is the most rings allocated together: a VM added alone
// costs one ring, and 100,000 VMs added together 98 chunks, not 100,000
// allocations.
const chunkRings = 1024

// History holds the rings of the VMs of a changing inventory: a VM added
// gets a ring, taken from those of VMs that left when one is free, and a
// VM removed leaves its ring to be reused. A nil *History records
// nothing.
type History struct {
	size int
	// rings finds a VM's ring by name, without a lock.
	rings *cow.Map[string, member]
	// mu serializes Apply: it guards free and allocated.
	mu sync.Mutex
	// free holds the rings of VMs that left the inventory, to be reused
	// once no request holds them; allocated counts every ring made.
	free      []*ring
	allocated int
	// strs is the table of paths and api-versions; its map is replaced,
	// never changed, so that readers need no lock.
	strs   atomic.Pointer[table]
	strsMu sync.Mutex
	marks  marks
}

type table struct {
	ids  map[string]uint16
	strs []string
}

// New returns a History that keeps the newest size requests of each VM
// (size is capped at MaxSize), and each one's Stats, for the VMs named
// names to begin with (see Apply and Follow for the others). A size of
// 0 or less keeps no requests, only the Stats.
func New(names []string, size int) *History {
	h := &History{size: min(max(size, 0), MaxSize), rings: cow.New[string, member](cow.String)}
	h.marks.m = map[string]*Mark{}
	h.strs.Store(&table{ids: map[string]uint16{}, strs: []string{"", "(other)"}})
	h.Apply(names, nil)
	return h
}

// Follow makes h follow eng's inventory: the VMs of its fleet now, and
// each one added or removed later, in one Apply per change.
func (h *History) Follow(eng *engine.Engine) {
	if h == nil {
		return
	}
	// Under the engine's lock: a lookup per view, and Apply when the
	// change adds or removes VMs.
	eng.SubscribeBatch(func(vs []*engine.View) {
		var added, removed []string
		for _, v := range vs {
			if v == nil {
				continue
			}
			_, have := h.rings.Load(v.VM.Name)
			switch {
			case v.Removed && have:
				removed = append(removed, v.VM.Name)
			case !v.Removed && !have:
				added = append(added, v.VM.Name)
			}
		}
		h.Apply(added, removed)
	})
}

// Apply drops the VMs named removed, then adds those named added, each
// with a ring and Stats of its own that start empty, even for a VM that
// had one before it was removed. Names already present are left as they
// are, and so are names removed that h does not have. A removed VM's
// ring is reused for a VM added, in this Apply or a later one, once its
// requests in flight are done; new rings are allocated in chunks of up
// to 1024.
func (h *History) Apply(added, removed []string) {
	if h == nil || len(added) == 0 && len(removed) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	es := make([]cow.Entry[string, member], 0, len(added)+len(removed))
	dropped := make(map[string]bool, len(removed))
	for _, name := range removed {
		m, ok := h.rings.Load(name)
		if !ok || dropped[name] {
			continue
		}
		dropped[name] = true
		m.r.state.Or(retired) // no request of m's VM joins it from now on
		h.free = append(h.free, m.r)
		es = append(es, cow.Entry[string, member]{Key: name, Delete: true})
	}
	var names []string
	seen := make(map[string]bool, len(added))
	for _, name := range added {
		if _, ok := h.rings.Load(name); ok && !dropped[name] || seen[name] {
			continue
		}
		seen[name] = true
		names = append(names, name)
	}
	for i, r := range h.take(len(names)) {
		g := r.reset(names[i])
		es = append(es, cow.Entry[string, member]{Key: names[i], Value: member{r: r, gen: g}})
	}
	h.rings.Apply(es)
}

// take returns n rings for new VMs: free rings no request holds, and
// new ones for the rest. h.mu is held.
func (h *History) take(n int) []*ring {
	if n == 0 {
		return nil
	}
	out := make([]*ring, 0, n)
	kept := h.free[:0]
	for _, r := range h.free {
		if len(out) == n || inflight(r.state.Load()) > 0 {
			kept = append(kept, r)
			continue
		}
		out = append(out, r)
	}
	clear(h.free[len(kept):])
	h.free = kept
	for len(out) < n {
		k := min(n-len(out), chunkRings)
		chunk := make([]ring, k)
		for i := range chunk {
			chunk[i].state.Store(retired)
			out = append(out, &chunk[i])
		}
		h.allocated += k
	}
	return out
}

// reset empties r, retired with no request in flight, for the VM named
// name, and returns its new generation. A request that looked r up
// before sees another generation, and leaves it alone.
func (r *ring) reset(name string) uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n > 0 {
		clear(r.slots[:min(r.n, uint64(len(r.slots)))]) // drop what they hold
	}
	r.n, r.st, r.name = 0, stats{}, name
	r.held.Store(0)
	r.lastEnd.Store(0)
	r.maintPolls.Store(0)
	r.noETag.Store(0)
	g := (gen(r.state.Load()) + 1) & genMask
	r.state.Store(uint64(g) << genShift)
	return g
}

// ring returns vm's ring and the generation vm has it in, or nil.
func (h *History) ring(vm string) (*ring, uint32) {
	if h == nil {
		return nil, 0
	}
	m, ok := h.rings.Load(vm)
	if !ok {
		return nil, 0
	}
	return m.r, m.gen
}

// join counts a request in flight on r, of generation g, and returns
// how many were in flight before it; false when r has been retired or
// reused since it was looked up.
func (r *ring) join(g uint32) (int, bool) {
	for {
		s := r.state.Load()
		if gen(s) != g || s&retired != 0 {
			return 0, false
		}
		if r.state.CompareAndSwap(s, s+1) {
			return inflight(s), true
		}
	}
}

// leave counts a request done.
func (r *ring) leave() { r.state.Add(^uint64(0)) }

// lock locks r, when it is still of generation g, and reports whether
// it did.
func (r *ring) lock(g uint32) bool {
	r.mu.Lock()
	if gen(r.state.Load()) != g {
		r.mu.Unlock()
		return false
	}
	return true
}

// Names returns the names of the VMs h has rings for, sorted.
func (h *History) Names() []string {
	if h == nil {
		return nil
	}
	out := make([]string, 0, h.rings.Len())
	h.rings.Range(func(name string, _ member) bool {
		out = append(out, name)
		return true
	})
	slices.Sort(out)
	return out
}

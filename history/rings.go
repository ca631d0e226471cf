package history

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/internal/cow"
)

// ring is one VM's recent requests and its Stats, made at the VM's
// first request. A ring outlives its VM: once the VM leaves the
// inventory and its last request is done, the ring is freed, and reset
// for the next VM to make its first request.
type ring struct {
	mu    sync.Mutex
	n     uint64 // requests recorded
	slots []slot // made with the ring, never changed; empty when none are kept
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
	// stop and restart bound the time no server ran before this one
	// (Unix ns; persist.go): the VM's counts were saved at stop, and
	// taken in from restart. No gap counts that time. Both 0 for a VM
	// with no counts saved.
	stop, restart int64
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

// cell is a VM's place in History.rings, 8 bytes: its ring once it has
// made a request. Its member is nil until then, and left once the VM
// has left the inventory; it is set under History.mu, and read without
// a lock.
type cell struct {
	m atomic.Pointer[member]
}

// member is a VM's ring, of the generation the VM has it in. It does
// not change once set in a cell.
type member struct {
	r   *ring
	gen uint32
}

// left is the member of every VM that left the inventory: it has no
// ring, and gets none.
var left = new(member)

// chunkCells is the most cells allocated together: 100,000 VMs added
// together cost 782 allocations, not 100,000, and a VM that outlives the
// others added with it keeps at most 1 KB of cells.
const chunkCells = 128

// History holds the rings of the VMs of a changing inventory: a VM gets
// a ring at its first request, taken from those of VMs that left when
// one is free, and a VM removed leaves its ring to be reused. A VM that
// never calls costs its name's entry and a cell, no ring. A nil
// *History records nothing.
type History struct {
	size int
	// rings finds a VM's cell, and through it its ring, by name without
	// a lock.
	rings *cow.Map[string, *cell]
	// mu serializes Apply and the setting of cells: it guards free and
	// allocated.
	mu sync.Mutex
	// free holds the rings of VMs that left the inventory that no request
	// holds, to be reused; allocated counts every ring made.
	free      []*ring
	allocated int
	// strs is the table of paths and api-versions; its map is replaced,
	// never changed, so that readers need no lock.
	strs   atomic.Pointer[table]
	strsMu sync.Mutex
	marks  marks
	// keeper keeps the records across restarts; nil for none (persist.go).
	keeper *keeper

	// queue holds the names of the VMs whose records are due for saving,
	// in the order they became due (persist.go), each once while its
	// stats.queued is set; guarded by dueMu, which is taken under a
	// ring's lock, never the other way.
	dueMu sync.Mutex
	queue []string
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
	h := &History{size: min(max(size, 0), MaxSize), rings: cow.New[string, *cell](cow.String)}
	h.marks.m = map[string]*Mark{}
	h.strs.Store(&table{ids: map[string]uint16{}, strs: []string{"", "(other)"}})
	h.Apply(names, nil)
	return h
}

// Follow makes h follow eng's inventory: the VMs of its fleet now, and
// each one added or removed later, in one Apply per change. eng keeps
// what h notes across restarts (see persist.go).
func (h *History) Follow(eng *engine.Engine) {
	if h == nil {
		return
	}
	h.keep(eng)
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
// with Stats of its own that start empty, even for a VM that had some
// before it was removed. Names already present are left as they are,
// and so are names removed that h does not have. A VM added gets its
// ring at its first request (see Start); a removed VM's ring is reused
// for a VM that makes its first request later, once the removed VM's
// requests in flight are done.
func (h *History) Apply(added, removed []string) {
	if h == nil || len(added) == 0 && len(removed) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	es := make([]cow.Entry[string, *cell], 0, len(added)+len(removed))
	dropped := make(map[string]bool, len(removed))
	for _, name := range removed {
		c, ok := h.rings.Load(name)
		if !ok || dropped[name] {
			continue
		}
		dropped[name] = true
		// No request of the VM gets a ring, or joins the one it has,
		// from now on.
		if m := c.m.Swap(left); m != nil {
			h.retire(m.r)
		}
		es = append(es, cow.Entry[string, *cell]{Key: name, Delete: true})
	}
	var cells []cell
	for i, name := range added {
		// A name added twice gets two cells, the second kept: both empty.
		if _, ok := h.rings.Load(name); ok && !dropped[name] {
			continue
		}
		if len(cells) == 0 {
			cells = make([]cell, min(len(added)-i, chunkCells))
		}
		es = append(es, cow.Entry[string, *cell]{Key: name, Value: &cells[0]})
		cells = cells[1:]
	}
	h.rings.Apply(es)
}

// retire marks r, the ring of a VM that left the inventory, so that no
// request joins it, and frees it when no request holds it; else the
// last request to leave it frees it (see release). h.mu is held.
func (h *History) retire(r *ring) {
	if inflight(r.state.Or(retired)) == 0 {
		h.free = append(h.free, r)
	}
}

// release frees r, retired, once its last request has left it.
func (h *History) release(r *ring) {
	h.mu.Lock()
	h.free = append(h.free, r)
	h.mu.Unlock()
}

// first gives vm, of the inventory, its ring at its first request, and
// returns it and its generation, or nil when vm has left the inventory.
// It takes a free ring, or makes one, and sets it in vm's cell unless
// another request did first, or vm has left since; then the ring goes
// back to the free ones. The ring is reset, or made, outside h.mu, so
// that many VMs calling for the first time at once queue only for a
// few pointer moves each.
func (h *History) first(vm string) (*ring, uint32) {
	h.mu.Lock()
	r := h.pop()
	h.mu.Unlock()
	made := r == nil
	if made {
		r = new(ring)
		if h.size > 0 {
			r.slots = make([]slot, h.size)
		}
	}
	g := r.reset(vm) // no one else holds r: it is in no cell, retired or new
	h.restore(r, vm)
	h.mu.Lock()
	defer h.mu.Unlock()
	if made {
		h.allocated++
	}
	// Under h.mu, the map is current: a cell in it is never left (Apply
	// marks a cell left and drops it in one critical section).
	c, ok := h.rings.Load(vm)
	if !ok {
		h.retire(r)
		return nil, 0
	}
	if m := c.m.Load(); m != nil {
		h.retire(r) // another request of vm set its ring first
		return m.r, m.gen
	}
	c.m.Store(&member{r: r, gen: g})
	return r, g
}

// pop returns a free ring, or nil. h.mu is held.
func (h *History) pop() *ring {
	n := len(h.free)
	if n == 0 {
		return nil
	}
	r := h.free[n-1]
	h.free[n-1] = nil
	h.free = h.free[:n-1]
	return r
}

// reset empties r, retired or new, with no request in flight, for the
// VM named name, and returns its new generation. A request that looked
// r up before sees another generation, and leaves it alone.
func (r *ring) reset(name string) uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n > 0 {
		clear(r.slots[:min(r.n, uint64(len(r.slots)))]) // drop what they hold
	}
	r.n, r.st, r.name, r.stop, r.restart = 0, stats{}, name, 0, 0
	r.held.Store(0)
	r.lastEnd.Store(0)
	r.maintPolls.Store(0)
	r.noETag.Store(0)
	g := (gen(r.state.Load()) + 1) & genMask
	r.state.Store(uint64(g) << genShift)
	return g
}

// ring returns vm's ring and the generation vm has it in, and whether
// vm is in the inventory: a nil ring and true for a VM that has made no
// request yet.
func (h *History) ring(vm string) (*ring, uint32, bool) {
	if h == nil {
		return nil, 0, false
	}
	c, ok := h.rings.Load(vm)
	if !ok {
		return nil, 0, false
	}
	switch m := c.m.Load(); m {
	case nil:
		return nil, 0, true
	case left: // vm left the inventory since the lookup
		return nil, 0, false
	default:
		return m.r, m.gen, true
	}
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

// leave counts a request done, and reports whether it was the last
// request on r, retired: r may be freed.
func (r *ring) leave() bool {
	s := r.state.Add(^uint64(0))
	return s&retired != 0 && inflight(s) == 0
}

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

// Names returns the names of the VMs of the inventory h follows, sorted,
// whether they have a ring yet or not.
func (h *History) Names() []string {
	if h == nil {
		return nil
	}
	out := make([]string, 0, h.rings.Len())
	h.rings.Range(func(name string, _ *cell) bool {
		out = append(out, name)
		return true
	})
	slices.Sort(out)
	return out
}

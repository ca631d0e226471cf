// Package slots keeps a metadata server's per-VM state beside the
// inventory: one slot for each VM of its API, made when the VM joins the
// inventory (or moves to the API) and dropped when it leaves, so that a
// request finds its VM's prepared document and throttling state with one
// lock-free load, and a VM that left holds nothing.
package slots

import (
	"runtime"
	"slices"
	"sync"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/internal/cow"
)

// Table maps the names of one API's VMs to their slots, of type *S.
// Loads are lock-free and do not allocate; Update, which the engine's
// subscription calls, is the only writer.
type Table[S any] struct {
	api forewarn.Provider
	m   *cow.Map[string, *S]
	// parallel says set may run for different slots at once.
	parallel bool
}

// New returns an empty Table for the VMs of api.
func New[S any](api forewarn.Provider) *Table[S] {
	return &Table[S]{api: api, m: cow.New[string, *S](cow.String)}
}

// Parallel lets Update call set for different slots at once, on every
// CPU, when a batch is large (a fleet-wide event's): set must then be
// safe to run concurrently for different slots. It returns t. Call it
// before the first Update.
func (t *Table[S]) Parallel() *Table[S] {
	t.parallel = true
	return t
}

// Load returns the slot of the VM named name, or nil when the table holds
// none: no such VM, a VM of another API, or one that left.
func (t *Table[S]) Load(name string) *S {
	s, _ := t.m.Load(name)
	return s
}

// Len returns how many slots the table holds.
func (t *Table[S]) Len() int { return t.m.Len() }

// Range calls f with each slot until f returns false.
func (t *Table[S]) Range(f func(name string, s *S) bool) { t.m.Range(f) }

// Update takes one batch of the engine's views (engine.SubscribeBatch).
// For each view of a VM of the table's API still in the inventory, it
// calls set with the VM's slot: a new one from mk for a VM it holds none
// of, set before anyone can load it. For each VM it holds whose view
// says it left the inventory, or moved to another API, it calls drop
// once the slot can no longer be loaded. The slots made and dropped are
// stored in one write, whatever the batch's size. A batch names each VM
// once at most, as the engine's do.
func (t *Table[S]) Update(vs []*engine.View, mk func() *S, set func(*S, *engine.View), drop func(*S)) {
	parts := 1
	if t.parallel {
		parts = max(1, min(runtime.GOMAXPROCS(0), len(vs)/minPart))
	}
	es := make([][]cow.Entry[string, *S], parts)
	dropped := make([][]*S, parts)
	var wg sync.WaitGroup
	for i := range parts {
		lo, hi := len(vs)*i/parts, len(vs)*(i+1)/parts
		do := func() { es[i], dropped[i] = t.update(vs[lo:hi], mk, set) }
		if i == parts-1 {
			do() // on this goroutine
		} else {
			wg.Go(do)
		}
	}
	wg.Wait()
	t.m.Apply(slices.Concat(es...))
	if drop != nil {
		for _, d := range dropped {
			for _, s := range d {
				drop(s)
			}
		}
	}
}

// minPart is the fewest views a part of a parallel Update takes: below
// it, starting a goroutine costs more than it saves.
const minPart = 4096

// update is Update's work on the views vs, but for storing the slots:
// it returns the entries to store and the slots to drop.
func (t *Table[S]) update(vs []*engine.View, mk func() *S, set func(*S, *engine.View)) (es []cow.Entry[string, *S], dropped []*S) {
	for _, v := range vs {
		name := v.VM.Name
		s := t.Load(name)
		if v.Removed || v.VM.Provider != t.api {
			if s != nil {
				es = append(es, cow.Entry[string, *S]{Key: name, Delete: true})
				dropped = append(dropped, s)
			}
			continue
		}
		if s == nil {
			s = mk()
			es = append(es, cow.Entry[string, *S]{Key: name, Value: s})
		}
		set(s, v)
	}
	return es, dropped
}

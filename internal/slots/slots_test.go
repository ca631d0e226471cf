package slots_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/internal/slots"
)

type slot struct {
	views   []*engine.View
	dropped bool
}

func view(name string, p forewarn.Provider, removed bool) *engine.View {
	return &engine.View{VM: &forewarn.VM{Name: name, Provider: p}, Removed: removed}
}

// TestUpdate: a batch makes the slots of new VMs of the table's API,
// each set before it can be loaded; sets existing ones in place; drops
// those that left the inventory or the API, each once it can no longer
// be loaded; and leaves other APIs' VMs alone.
func TestUpdate(t *testing.T) {
	tb := slots.New[slot](forewarn.GCE)
	made := 0
	mk := func() *slot { made++; return &slot{} }
	set := func(s *slot, v *engine.View) {
		if len(s.views) == 0 && tb.Load(v.VM.Name) != nil {
			t.Errorf("%s: a new slot was loadable before it was set", v.VM.Name)
		}
		s.views = append(s.views, v)
	}
	var dropped []*slot
	drop := func(s *slot) {
		for _, name := range []string{"a", "b", "c"} {
			if tb.Load(name) == s {
				t.Errorf("slot of %s dropped while loadable", name)
			}
		}
		s.dropped = true
		dropped = append(dropped, s)
	}

	tb.Update([]*engine.View{view("a", forewarn.GCE, false), view("b", forewarn.GCE, false), view("c", forewarn.GCE, false),
		view("az", forewarn.Azure, false)}, mk, set, drop)
	if made != 3 || tb.Len() != 3 || tb.Load("az") != nil {
		t.Fatalf("after the first batch: %d made, %d held, az %v", made, tb.Len(), tb.Load("az"))
	}
	a, b, c := tb.Load("a"), tb.Load("b"), tb.Load("c")

	// a changes, b leaves, c becomes an Azure VM, az becomes a GCE VM.
	tb.Update([]*engine.View{view("a", forewarn.GCE, false), view("b", forewarn.GCE, true), view("c", forewarn.Azure, false),
		view("az", forewarn.GCE, false)}, mk, set, drop)
	if made != 4 || tb.Len() != 2 || tb.Load("a") != a || tb.Load("b") != nil || tb.Load("c") != nil || tb.Load("az") == nil {
		t.Fatalf("after the second batch: %d made, %d held", made, tb.Len())
	}
	if len(a.views) != 2 || a.dropped || !b.dropped || !c.dropped || len(dropped) != 2 {
		t.Fatalf("a set %d times, dropped %v; b dropped %v; c dropped %v; %d drops", len(a.views), a.dropped, b.dropped, c.dropped, len(dropped))
	}
	// A removal of a VM the table never held drops nothing.
	tb.Update([]*engine.View{view("x", forewarn.GCE, true), view("az2", forewarn.Azure, true)}, mk, set, drop)
	if len(dropped) != 2 || tb.Len() != 2 {
		t.Fatalf("a removal of unknown VMs dropped %d, holds %d", len(dropped), tb.Len())
	}
	n := 0
	tb.Range(func(string, *slot) bool { n++; return true })
	if n != 2 {
		t.Fatalf("Range saw %d slots, want 2", n)
	}
}

// TestUpdateLarge: a batch of 100,000 VMs, and then the removal of all of
// them, each in one call.
func TestUpdateLarge(t *testing.T) {
	tb := slots.New[slot](forewarn.AWS)
	vs := make([]*engine.View, 100000)
	for i := range vs {
		vs[i] = view(fmt.Sprintf("vm%06d", i), forewarn.AWS, false)
	}
	tb.Update(vs, func() *slot { return &slot{} }, func(s *slot, v *engine.View) { s.views = append(s.views, v) }, nil)
	if tb.Len() != len(vs) || tb.Load("vm099999").views[0] != vs[99999] {
		t.Fatalf("%d slots held, want %d", tb.Len(), len(vs))
	}
	for i := range vs {
		vs[i] = view(vs[i].VM.Name, forewarn.AWS, true)
	}
	tb.Update(vs, nil, nil, nil)
	if tb.Len() != 0 {
		t.Fatalf("%d slots held after every VM left", tb.Len())
	}
}

// TestUpdateParallel: a Parallel table's large batch sets every VM's
// slot exactly once, makes each new one once, and stores them all; its
// removal drops each once. Run with -race, it also checks that set runs
// for different slots only.
func TestUpdateParallel(t *testing.T) {
	tb := slots.New[slot](forewarn.AWS).Parallel()
	const n = 5 * 4096
	vs := make([]*engine.View, n)
	for i := range vs {
		vs[i] = view(fmt.Sprintf("vm%06d", i), forewarn.AWS, false)
	}
	var made, dropped atomic.Int64
	mk := func() *slot { made.Add(1); return &slot{} }
	set := func(s *slot, v *engine.View) { s.views = append(s.views, v) }
	drop := func(s *slot) { s.dropped = true; dropped.Add(1) }
	tb.Update(vs, mk, set, drop)
	if made.Load() != n || tb.Len() != n {
		t.Fatalf("%d made, %d held, want %d", made.Load(), tb.Len(), n)
	}
	for _, v := range vs {
		s := tb.Load(v.VM.Name)
		if s == nil || len(s.views) != 1 || s.views[0] != v {
			t.Fatalf("%s: slot %v", v.VM.Name, s)
		}
	}
	// Every other VM again, and the rest removed.
	for i := range vs {
		vs[i] = view(vs[i].VM.Name, forewarn.AWS, i%2 == 1)
	}
	held := make([]*slot, n)
	for i, v := range vs {
		held[i] = tb.Load(v.VM.Name)
	}
	tb.Update(vs, mk, set, drop)
	if made.Load() != n || dropped.Load() != n/2 || tb.Len() != n/2 {
		t.Fatalf("%d made, %d dropped, %d held", made.Load(), dropped.Load(), tb.Len())
	}
	for i, s := range held {
		if want := 1 + (i+1)%2; len(s.views) != want || s.dropped != (i%2 == 1) {
			t.Fatalf("VM %d: set %d times (want %d), dropped %v", i, len(s.views), want, s.dropped)
		}
	}
}

package slots_test

import (
	"fmt"
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

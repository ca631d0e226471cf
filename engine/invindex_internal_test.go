package engine

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/mem"
)

// TestListFollowsChanges drives an inventory through random adds,
// changes (some moving a VM to another host, some keeping its host) and
// removals across many chunks, and checks its list and its host index
// against a model: the VMs present, in Seq order, each the latest
// definition; each host's VMs, by name. The inventory a change derives
// from keeps its own, and a change that moves no VM between hosts
// leaves the host index alone.
func TestListFollowsChanges(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	inv := emptyInventory()
	model := map[string]*forewarn.Definition{}
	seq := int64(1)
	host := func() string {
		if r.IntN(5) == 0 {
			return ""
		}
		return fmt.Sprintf("hv%d", r.IntN(12))
	}
	for step := range 300 {
		defs := map[string]*forewarn.Definition{}
		for range r.IntN(40) + 1 {
			switch op := r.IntN(3); {
			case op == 0 || len(model) == 0:
				name := fmt.Sprintf("vm%05d", seq)
				defs[name] = &forewarn.Definition{VM: &forewarn.VM{Name: name, Provider: forewarn.Azure, Host: host()}, Seq: seq}
				seq++
			default:
				names := slices.Sorted(maps.Keys(model))
				name := names[r.IntN(len(names))]
				if op == 1 {
					h := model[name].VM.Host
					if r.IntN(2) == 0 {
						h = host()
					}
					defs[name] = &forewarn.Definition{VM: &forewarn.VM{Name: name, Provider: forewarn.Azure, UpdateDomain: step, Host: h}, Seq: model[name].Seq}
				} else {
					defs[name] = nil
				}
			}
		}
		if step%50 == 0 { // a big batch now and then
			for range 700 {
				name := fmt.Sprintf("vm%05d", seq)
				defs[name] = &forewarn.Definition{VM: &forewarn.VM{Name: name, Provider: forewarn.Azure, Host: host()}, Seq: seq}
				seq++
			}
		}
		prev, before, hostsBefore := inv, flatten(inv.list, inv.listLen), hostsOf(inv)
		moves := false
		for name, d := range defs {
			moves = moves || hostOf(model[name]) != hostOf(d)
		}
		if es := inv.hostEntries(slices.Sorted(maps.Keys(defs)), defs); !moves && es != nil {
			t.Fatalf("step %d: a change that moves no VM between hosts changes the host index: %v", step, es)
		}
		inv = inv.with(int64(step+1), defs, nil)
		if after := flatten(prev.list, prev.listLen); !slices.Equal(after, before) {
			t.Fatalf("step %d: deriving a new inventory changed the old one's list", step)
		}
		if after := hostsOf(prev); !reflect.DeepEqual(after, hostsBefore) {
			t.Fatalf("step %d: deriving a new inventory changed the old one's hosts", step)
		}
		for name, d := range defs {
			if d == nil {
				delete(model, name)
			} else {
				model[name] = d
			}
		}
		want := make([]*forewarn.Definition, 0, len(model))
		for _, d := range model {
			want = append(want, d)
		}
		slices.SortFunc(want, func(a, b *forewarn.Definition) int { return int(a.Seq - b.Seq) })
		got := inv.fleetOf().VMs
		if len(got) != len(want) || inv.listLen != len(want) {
			t.Fatalf("step %d: %d VMs listed (listLen %d), want %d", step, len(got), inv.listLen, len(want))
		}
		for i := range want {
			if got[i] != want[i].VM {
				t.Fatalf("step %d: VM %d is %s, want %s", step, i, got[i].Name, want[i].VM.Name)
			}
		}
		for _, c := range inv.list {
			if len(c) == 0 || len(c) > chunkVMs {
				t.Fatalf("step %d: a chunk of %d VMs", step, len(c))
			}
		}
		wantHosts := map[string][]string{}
		for _, name := range slices.Sorted(maps.Keys(model)) {
			if h := hostOf(model[name]); h != "" {
				wantHosts[h] = append(wantHosts[h], name)
			}
		}
		if got := hostsOf(inv); !reflect.DeepEqual(got, wantHosts) {
			t.Fatalf("step %d: hosts\n%v\nwant\n%v", step, got, wantHosts)
		}
	}
}

// hostOf returns the host of d's VM, "" for none or for no d.
func hostOf(d *forewarn.Definition) string {
	if d == nil {
		return ""
	}
	return d.VM.Host
}

// hostsOf returns inv's host index as a map.
func hostsOf(inv *inventory) map[string][]string {
	out := map[string][]string{}
	inv.hosts.Range(func(h string, vms []string) bool {
		out[h] = slices.Clone(vms)
		return true
	})
	return out
}

// TestListKeepsItsParent derives two inventories from one whose middle
// chunk each empties while adding a VM: neither may write into a chunk
// the parent still holds.
func TestListKeepsItsParent(t *testing.T) {
	defs := map[string]*forewarn.Definition{}
	for i := range 2*chunkVMs + 2 {
		name := fmt.Sprintf("vm%05d", i)
		defs[name] = &forewarn.Definition{VM: &forewarn.VM{Name: name, Provider: forewarn.Azure}, Seq: int64(i + 1)}
	}
	base := emptyInventory().with(1, defs, nil)
	want := flatten(base.list, base.listLen)
	middle := func(extra string) map[string]*forewarn.Definition {
		ch := map[string]*forewarn.Definition{}
		for _, vm := range base.list[1] {
			ch[vm.Name] = nil
		}
		ch[extra] = &forewarn.Definition{VM: &forewarn.VM{Name: extra, Provider: forewarn.Azure}, Seq: base.nextSeq}
		return ch
	}
	a := base.with(2, middle("a"), nil)
	b := base.with(3, middle("b"), nil)
	if got := flatten(base.list, base.listLen); !slices.Equal(got, want) {
		t.Fatal("deriving changed the parent's list")
	}
	last := func(inv *inventory) string { return inv.last().Name }
	if last(a) != "a" || last(b) != "b" || a.listLen != chunkVMs+3 {
		t.Fatalf("children end with %s (%d VMs) and %s", last(a), a.listLen, last(b))
	}
}

// TestViewChanged checks that a View's channel closes when the view is
// replaced, whether asked for before or after.
func TestViewChanged(t *testing.T) {
	v := &View{}
	c := v.Changed()
	v.replaced()
	<-c
	late := &View{}
	late.replaced()
	<-late.Changed()
}

// TestGroupIndexEmpties checks that an event leaving a scope group's
// index (canceled here) takes the group's entry with it when it was the
// last: with VMs coming and going, groups are rebuilt all the time, and
// an empty entry keyed by an old group would stay for good.
func TestGroupIndexEmpties(t *testing.T) {
	fleet := &forewarn.Fleet{VMs: []*forewarn.VM{
		{Name: "a", Provider: forewarn.Azure, IP: netip.MustParseAddr("198.18.0.1"), AvailabilitySet: "s"},
		{Name: "b", Provider: forewarn.Azure, IP: netip.MustParseAddr("198.18.0.2"), AvailabilitySet: "s"},
	}}
	e, err := New(t.Context(), Config{Store: mem.New(), Fleet: fleet, AllowShortNotice: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	e.NoteRequest("a") // enabled: the event keeps its notice
	ev, err := e.Create(t.Context(), Spec{Type: forewarn.Freeze, VMs: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	indexed := len(e.byGroup)
	e.mu.Unlock()
	if indexed != 1 {
		t.Fatalf("%d groups indexed with one event on a set of two, want 1", indexed)
	}
	if err := e.Cancel(t.Context(), ev.ID); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.byGroup) != 0 {
		t.Fatalf("%d groups still indexed after the only event ended, want 0", len(e.byGroup))
	}
}

// BenchmarkBuildInventory builds the inventory a restart builds from
// the store: n VMs of one availability set, as 'forewarn bench fleet'
// serves them.
func BenchmarkBuildInventory(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		defs := make(map[string]*forewarn.Definition, n)
		for i := range n {
			name := fmt.Sprintf("vm%d", i)
			ip := netip.AddrFrom4([4]byte{198, 18 + byte(i>>16), byte(i >> 8), byte(i)})
			defs[name] = &forewarn.Definition{Seq: int64(i + 1), VM: &forewarn.VM{Name: name, IP: ip, Provider: forewarn.Azure, AvailabilitySet: "bench"}}
		}
		b.Run(fmt.Sprintf("vms=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				buildInventory(1, defs, nil)
			}
		})
	}
}

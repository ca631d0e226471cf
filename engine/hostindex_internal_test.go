package engine

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/forewarn/forewarn"
)

// TestHostIndexFollowsChanges drives an inventory through random adds,
// moves between hosts, changes that keep the host and removals, and
// checks its host index against a model after each; the inventory it
// was derived from keeps its own index, and a change that moves no VM
// between hosts leaves the index as it was.
func TestHostIndexFollowsChanges(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
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
		for range r.IntN(20) + 1 {
			switch op := r.IntN(4); {
			case op == 0 || len(model) == 0:
				name := fmt.Sprintf("vm%05d", seq)
				defs[name] = &forewarn.Definition{VM: &forewarn.VM{Name: name, Provider: forewarn.Azure, Host: host()}, Seq: seq}
				seq++
			default:
				names := slices.Sorted(maps.Keys(model))
				name := names[r.IntN(len(names))]
				old := model[name].VM
				switch op {
				case 1:
					defs[name] = &forewarn.Definition{VM: &forewarn.VM{Name: name, Provider: forewarn.Azure, Host: host()}, Seq: model[name].Seq}
				case 2:
					defs[name] = &forewarn.Definition{VM: &forewarn.VM{Name: name, Provider: forewarn.Azure, Host: old.Host, UpdateDomain: step}, Seq: model[name].Seq}
				default:
					defs[name] = nil
				}
			}
		}
		prev, before := inv, hostsOf(inv)
		moves := false
		for name, d := range defs {
			from, to := "", ""
			if old := model[name]; old != nil {
				from = old.VM.Host
			}
			if d != nil {
				to = d.VM.Host
			}
			moves = moves || from != to
		}
		if es := inv.hostEntries(slices.Sorted(maps.Keys(defs)), defs); !moves && es != nil {
			t.Fatalf("step %d: a change that moves no VM between hosts changes the index: %v", step, es)
		}
		inv = inv.with(int64(step+1), defs, nil)
		if after := hostsOf(prev); !reflect.DeepEqual(after, before) {
			t.Fatalf("step %d: deriving a new inventory changed the old one's hosts", step)
		}
		for name, d := range defs {
			if d == nil {
				delete(model, name)
			} else {
				model[name] = d
			}
		}
		want := map[string][]string{}
		for _, name := range slices.Sorted(maps.Keys(model)) {
			if h := model[name].VM.Host; h != "" {
				want[h] = append(want[h], name)
			}
		}
		if got := hostsOf(inv); !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d: hosts\n%v\nwant\n%v", step, got, want)
		}
	}
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

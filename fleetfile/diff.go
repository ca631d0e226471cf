package fleetfile

import (
	"reflect"
	"slices"

	"github.com/forewarn/forewarn"
)

// Changes is what an apply of a fleet document changes in a fleet: the
// VMs and the scale sets it adds, changes and removes.
type Changes struct {
	VMs       Delta `json:"vms"`
	ScaleSets Delta `json:"scaleSets"`
}

// Delta lists the names of the VMs (or scale sets) an apply adds,
// changes and removes: added and changed in the document's order,
// removed in the fleet's.
type Delta struct {
	Added   []string `json:"added,omitempty"`
	Changed []Change `json:"changed,omitempty"`
	Removed []string `json:"removed,omitempty"`
}

// Change names a VM or scale set whose definition an apply changes, and
// the fleet file keys whose values it changes, sorted: a key whose
// default follows from another is listed when its value changes with it
// (gpu: true on a Compute Engine VM lists gpu and onHostMaintenance).
type Change struct {
	Name string   `json:"name"`
	Keys []string `json:"keys"`
}

// Empty reports whether c changes nothing.
func (c Changes) Empty() bool {
	return c.VMs.empty() && c.ScaleSets.empty()
}

func (d Delta) empty() bool {
	return len(d.Added) == 0 && len(d.Changed) == 0 && len(d.Removed) == 0
}

// Diff returns what an apply of the fleet document doc changes in the
// fleet old (see Merge): the VMs and scale sets doc adds, those whose
// definition it changes, and, with prune, those of old it does not name.
// VMs and scale sets are matched by name. It takes
// O(len(old.VMs) + len(doc.VMs)), and more only for the VMs that change.
func Diff(old, doc *forewarn.Fleet, prune bool) Changes {
	return Changes{
		VMs: diff(old.VMs, doc.VMs, prune, func(vm *forewarn.VM) string { return vm.Name },
			func(a, b *forewarn.VM) []string {
				x, y := entryOf(a, true), entryOf(b, true)
				return changedKeys(reflect.ValueOf(&x).Elem(), reflect.ValueOf(&y).Elem(), vmKeys)
			}),
		ScaleSets: diff(old.ScaleSets, doc.ScaleSets, prune, func(s *forewarn.ScaleSet) string { return s.Name },
			func(a, b *forewarn.ScaleSet) []string {
				x, y := scaleSetEntryOf(a, true), scaleSetEntryOf(b, true)
				return changedKeys(reflect.ValueOf(&x).Elem(), reflect.ValueOf(&y).Elem(), scaleSetKeys)
			}),
	}
}

// diff is Diff for one list: T is a comparable definition, name gives
// its name and keys the keys two definitions of one name differ in.
func diff[T comparable](old, doc []*T, prune bool, name func(*T) string, keys func(a, b *T) []string) Delta {
	var d Delta
	at := make(map[string]int, len(old))
	for i, v := range old {
		if _, dup := at[name(v)]; !dup {
			at[name(v)] = i
		}
	}
	named := make([]bool, len(old))
	for _, v := range doc {
		i, ok := at[name(v)]
		switch {
		case !ok:
			d.Added = append(d.Added, name(v))
		case *old[i] != *v:
			d.Changed = append(d.Changed, Change{Name: name(v), Keys: keys(old[i], v)})
		}
		if ok {
			named[i] = true
		}
	}
	if prune {
		for i, v := range old {
			if !named[i] && at[name(v)] == i {
				d.Removed = append(d.Removed, name(v))
			}
		}
	}
	return d
}

// changedKeys returns the keys, sorted, whose values differ between the
// entries a and b.
func changedKeys(a, b reflect.Value, keys []fieldKey) []string {
	var changed []string
	for _, k := range keys {
		x, y := a.Field(k.index), b.Field(k.index)
		if x.Kind() == reflect.Pointer {
			if x.IsNil() != y.IsNil() {
				changed = append(changed, k.name)
				continue
			}
			if x.IsNil() {
				continue
			}
			x, y = x.Elem(), y.Elem()
		}
		if !x.Equal(y) {
			changed = append(changed, k.name)
		}
	}
	slices.Sort(changed)
	return changed
}

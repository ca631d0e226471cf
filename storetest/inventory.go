package storetest

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
)

// runInventory runs the inventory's cases: definitions of VMs and scale
// sets, and the InventoryRevision.
func runInventory(t *testing.T, newStore func(t *testing.T) forewarn.Store) {
	t.Run("Fields", testInventoryFields)
	t.Run("RoundTrip", func(t *testing.T) { testInventoryRoundTrip(t, newStore(t)) })
	t.Run("Revision", func(t *testing.T) { testInventoryRevision(t, newStore(t)) })
	t.Run("Atomic", func(t *testing.T) { testInventoryAtomic(t, newStore(t)) })
	t.Run("Invalid", func(t *testing.T) { testInventoryInvalid(t, newStore(t)) })
	t.Run("Copies", func(t *testing.T) { testInventoryCopies(t, newStore(t)) })
	t.Run("Follow", func(t *testing.T) { testInventoryFollow(t, newStore(t)) })
	t.Run("RemoveDropsRecord", func(t *testing.T) { testInventoryRemoveDropsRecord(t, newStore(t)) })
}

// testInventoryRemoveDropsRecord checks that a VM removed from the
// inventory loses its VMRecord, unless the same change writes one, and
// keeps its incarnation; the records of VMs left alone stay.
func testInventoryRemoveDropsRecord(t *testing.T, s forewarn.Store) {
	defs := map[string]*forewarn.Definition{}
	recs := map[string]*forewarn.VMRecord{}
	incs := map[string]int64{}
	for i, name := range []string{"vm-a", "vm-b", "vm-c"} {
		defs[name] = definition(&forewarn.VM{Name: name, Provider: forewarn.Azure}, int64(i+1))
		recs[name] = vmRecord(i)
		incs[name] = 7
	}
	commit(t, s, &forewarn.Change{Inventory: defs, VMs: recs, Incarnations: incs})
	commit(t, s, &forewarn.Change{Revision: 1,
		Inventory: map[string]*forewarn.Definition{"vm-a": nil, "vm-b": nil},
		VMs:       map[string]*forewarn.VMRecord{"vm-b": vmRecord(9)}})
	st := load(t, s)
	if r := st.VMs["vm-a"]; r != nil {
		t.Errorf("vm-a, removed: record %+v, want none", r)
	}
	if r := st.VMs["vm-b"]; r == nil || !r.LastSeen.Equal(vmRecord(9).LastSeen) {
		t.Errorf("vm-b, removed with a record written: %+v, want the one written", r)
	}
	if r := st.VMs["vm-c"]; r == nil || !r.LastSeen.Equal(vmRecord(2).LastSeen) {
		t.Errorf("vm-c, left alone: record %+v, want its own", r)
	}
	if st.Incarnations["vm-a"] != 7 {
		t.Errorf("vm-a, removed: incarnation %d, want 7 kept", st.Incarnations["vm-a"])
	}
}

// testInventoryFields fails when VM, Definition or ScaleSet grow a field
// that fullVM, definition or fullScaleSet leave zero: the round trip
// must cover every one.
func testInventoryFields(t *testing.T) {
	wantFull(t, *fullVM("vm-a"), *definition(fullVM("vm-a"), 1), *fullScaleSet("ss-a"))
}

// testInventoryRoundTrip checks that every field of a definition and of
// a scale set definition comes back exactly, addresses of every kind
// and none included, and that an empty store holds no inventory.
func testInventoryRoundTrip(t *testing.T, s forewarn.Store) {
	st := load(t, s)
	if st.Inventory == nil || st.InventorySets == nil {
		t.Errorf("Load on an empty store returned Inventory %v, InventorySets %v; want empty maps", st.Inventory, st.InventorySets)
	}
	wantInventory(t, st, 0, map[string]*forewarn.Definition{}, map[string]*forewarn.ScaleSet{})

	v4 := &forewarn.VM{Name: "vm-v4", IP: netip.MustParseAddr("10.1.2.3"), Provider: forewarn.Azure, UpdateDomain: 4}
	mapped := &forewarn.VM{Name: "vm-4in6", IP: netip.MustParseAddr("::ffff:10.1.2.4"), Provider: forewarn.AWS}
	none := &forewarn.VM{Name: "vm-none", Provider: forewarn.GCE} // no address: answers every caller
	negative := &forewarn.VM{Name: "vm-negative", UpdateDomain: -1, HopLimit: -2}
	defs := map[string]*forewarn.Definition{
		"vm-full":     definition(fullVM("vm-full"), 1<<40),
		"vm-v4":       definition(v4, 2),
		"vm-4in6":     definition(mapped, 3),
		"vm-none":     definition(none, 0),
		"vm-negative": definition(negative, -5),
		// Names are keys as they are: spaces, slashes, other scripts.
		"vm a/b ü": definition(&forewarn.VM{Name: "vm a/b ü"}, 6),
	}
	sets := map[string]*forewarn.ScaleSet{"ss-full": fullScaleSet("ss-full"), "ss-bare": {Name: "ss-bare"}}
	wantRevision(t, commit(t, s, &forewarn.Change{Inventory: defs, InventorySets: sets}), 1)
	st = load(t, s)
	wantInventory(t, st, 1, defs, sets)
	if d := st.Inventory["vm-none"]; d != nil && d.VM.IP.IsValid() {
		t.Errorf("vm-none: IP %v, want none (the zero netip.Addr)", d.VM.IP)
	}
	if d := st.Inventory["vm-4in6"]; d != nil && !d.VM.IP.Is4In6() {
		t.Errorf("vm-4in6: IP %v, want it IPv4-mapped IPv6 still", d.VM.IP)
	}
}

// testInventoryRevision checks puts, replacements and removals of
// definitions and scale set definitions, and that InventoryRevision
// moves with every commit that names any, a removal of an absent name
// included, and with no other.
func testInventoryRevision(t *testing.T, s forewarn.Store) {
	a, b, c := definition(fullVM("vm-a"), 1), definition(fullVM("vm-b"), 2), definition(fullVM("vm-c"), 3)
	s1, s2 := fullScaleSet("ss-1"), &forewarn.ScaleSet{Name: "ss-2", TerminateTimeout: 5 * time.Minute}
	defs := map[string]*forewarn.Definition{"vm-a": a, "vm-b": b, "vm-c": c}
	sets := map[string]*forewarn.ScaleSet{"ss-1": s1, "ss-2": s2}
	wantRevision(t, commit(t, s, &forewarn.Change{Inventory: defs, InventorySets: sets}), 1)
	wantInventory(t, load(t, s), 1, defs, sets)

	// Events, incarnations and records leave the inventory and its
	// revision alone.
	wantRevision(t, commit(t, s, &forewarn.Change{
		Revision:     1,
		Events:       []*forewarn.Event{fullEvent(1)},
		Incarnations: map[string]int64{"vm-a": 1},
		VMs:          map[string]*forewarn.VMRecord{"vm-a": vmRecord(1)},
		ScaleSets:    map[string]*forewarn.ScaleSetRecord{"ss-1": {TerminateTimeout: 7 * time.Minute}},
	}), 2)
	wantInventory(t, load(t, s), 1, defs, sets)

	// A replacement is whole: a field it leaves zero is zero.
	a2 := definition(&forewarn.VM{Name: "vm-a", Provider: forewarn.GCE, Zone: "europe-west4-a"}, 4)
	wantRevision(t, commit(t, s, &forewarn.Change{
		Revision:  2,
		Inventory: map[string]*forewarn.Definition{"vm-a": a2, "vm-b": nil, "vm-absent": nil},
	}), 3)
	defs = map[string]*forewarn.Definition{"vm-a": a2, "vm-c": c}
	wantInventory(t, load(t, s), 3, defs, sets)

	s3 := &forewarn.ScaleSet{Name: "ss-3", DisableTerminateNotifications: true}
	s2b := &forewarn.ScaleSet{Name: "ss-2"}
	wantRevision(t, commit(t, s, &forewarn.Change{
		Revision:      3,
		InventorySets: map[string]*forewarn.ScaleSet{"ss-1": nil, "ss-2": s2b, "ss-3": s3},
	}), 4)
	sets = map[string]*forewarn.ScaleSet{"ss-2": s2b, "ss-3": s3}
	wantInventory(t, load(t, s), 4, defs, sets)

	// Removing names the store does not hold is no error, and still
	// names the inventory.
	wantRevision(t, commit(t, s, &forewarn.Change{
		Revision:      4,
		Inventory:     map[string]*forewarn.Definition{"vm-b": nil},
		InventorySets: map[string]*forewarn.ScaleSet{"ss-1": nil},
	}), 5)
	wantInventory(t, load(t, s), 5, defs, sets)
	wantRevision(t, commit(t, s, &forewarn.Change{Revision: 5, Inventory: map[string]*forewarn.Definition{"vm-z": nil}}), 6)
	wantInventory(t, load(t, s), 6, defs, sets)

	// Empty maps name nothing.
	wantRevision(t, commit(t, s, &forewarn.Change{
		Revision:      6,
		Inventory:     map[string]*forewarn.Definition{},
		InventorySets: map[string]*forewarn.ScaleSet{},
	}), 7)
	st := load(t, s)
	wantInventory(t, st, 6, defs, sets)
	wantState(t, st, 7, map[string]int64{"vm-a": 1}, fullEvent(1))

	// Everything removed, in one commit.
	wantRevision(t, commit(t, s, &forewarn.Change{
		Revision:      7,
		Inventory:     map[string]*forewarn.Definition{"vm-a": nil, "vm-c": nil},
		InventorySets: map[string]*forewarn.ScaleSet{"ss-2": nil, "ss-3": nil},
	}), 8)
	wantInventory(t, load(t, s), 8, map[string]*forewarn.Definition{}, map[string]*forewarn.ScaleSet{})
}

// testInventoryAtomic checks that a change of definitions, events and
// incarnations together is written whole or not at all.
func testInventoryAtomic(t *testing.T, s forewarn.Store) {
	a := definition(fullVM("vm-a"), 1)
	defs := map[string]*forewarn.Definition{"vm-a": a}
	sets := map[string]*forewarn.ScaleSet{"ss-1": fullScaleSet("ss-1")}
	e1 := fullEvent(1)
	wantRevision(t, commit(t, s, &forewarn.Change{
		Events: []*forewarn.Event{e1}, Incarnations: map[string]int64{"vm-a": 3}, Inventory: defs, InventorySets: sets,
	}), 1)

	change := func(rev int64, incs map[string]int64) *forewarn.Change {
		return &forewarn.Change{
			Revision:      rev,
			Events:        []*forewarn.Event{fullEvent(2)},
			Deletes:       []string{e1.ID},
			Incarnations:  incs,
			Inventory:     map[string]*forewarn.Definition{"vm-a": nil, "vm-b": definition(fullVM("vm-b"), 2)},
			InventorySets: map[string]*forewarn.ScaleSet{"ss-1": nil, "ss-2": {Name: "ss-2"}},
		}
	}
	for _, rev := range []int64{0, 2} {
		_, err := s.Commit(t.Context(), change(rev, map[string]int64{"vm-b": 1}))
		wantCode(t, err, forewarn.ECONFLICT)
	}
	_, err := s.Commit(t.Context(), change(1, map[string]int64{"vm-a": 2, "vm-b": 1}))
	wantCode(t, err, forewarn.EINVALID) // vm-a's incarnation would go back
	st := load(t, s)
	wantState(t, st, 1, map[string]int64{"vm-a": 3}, e1)
	wantInventory(t, st, 1, defs, sets)

	c := change(1, map[string]int64{"vm-b": 1})
	wantRevision(t, commit(t, s, c), 2)
	st = load(t, s)
	wantState(t, st, 2, map[string]int64{"vm-a": 3, "vm-b": 1}, fullEvent(2))
	wantInventory(t, st, 2, map[string]*forewarn.Definition{"vm-b": c.Inventory["vm-b"]},
		map[string]*forewarn.ScaleSet{"ss-2": {Name: "ss-2"}})
}

// testInventoryInvalid checks that a malformed definition or scale set
// definition is refused with EINVALID, and nothing of its change is
// written.
func testInventoryInvalid(t *testing.T, s forewarn.Store) {
	defs := map[string]*forewarn.Definition{"vm-a": definition(fullVM("vm-a"), 1)}
	sets := map[string]*forewarn.ScaleSet{"ss-1": fullScaleSet("ss-1")}
	wantRevision(t, commit(t, s, &forewarn.Change{Inventory: defs, InventorySets: sets}), 1)

	good := definition(fullVM("vm-b"), 2)
	for name, c := range map[string]struct {
		defs map[string]*forewarn.Definition
		sets map[string]*forewarn.ScaleSet
	}{
		"VM of another name":         {defs: map[string]*forewarn.Definition{"vm-b": good, "vm-c": definition(fullVM("vm-d"), 3)}},
		"empty name":                 {defs: map[string]*forewarn.Definition{"vm-b": good, "": definition(fullVM(""), 3)}},
		"empty name, nil":            {defs: map[string]*forewarn.Definition{"vm-b": good, "": nil}},
		"no VM":                      {defs: map[string]*forewarn.Definition{"vm-b": good, "vm-c": {Seq: 3}}},
		"scale set of another name":  {defs: map[string]*forewarn.Definition{"vm-b": good}, sets: map[string]*forewarn.ScaleSet{"ss-2": {Name: "ss-3"}}},
		"scale set without a name":   {sets: map[string]*forewarn.ScaleSet{"ss-2": {}}},
		"empty scale set name":       {sets: map[string]*forewarn.ScaleSet{"ss-2": {Name: "ss-2"}, "": {}}},
		"empty scale set name, nil":  {sets: map[string]*forewarn.ScaleSet{"ss-2": {Name: "ss-2"}, "": nil}},
		"VM named as another's key":  {defs: map[string]*forewarn.Definition{"vm-b": definition(fullVM("vm-a"), 3)}},
		"removal beside a bad value": {defs: map[string]*forewarn.Definition{"vm-a": nil, "vm-c": definition(fullVM("VM-C"), 3)}},
	} {
		_, err := s.Commit(t.Context(), &forewarn.Change{
			Revision:      1,
			Events:        []*forewarn.Event{fullEvent(1)},
			Incarnations:  map[string]int64{"vm-b": 1},
			Inventory:     c.defs,
			InventorySets: c.sets,
		})
		if forewarn.ErrorCode(err) != forewarn.EINVALID {
			t.Errorf("%s: Commit err = %v (code %q), want code %q", name, err, forewarn.ErrorCode(err), forewarn.EINVALID)
		}
	}
	st := load(t, s)
	wantState(t, st, 1, map[string]int64{})
	wantInventory(t, st, 1, defs, sets)
}

// testInventoryCopies checks that a store keeps its own copies of the
// definitions committed, and that Load returns copies.
func testInventoryCopies(t *testing.T, s forewarn.Store) {
	in, inSet := definition(fullVM("vm-a"), 1), fullScaleSet("ss-1")
	defs := map[string]*forewarn.Definition{"vm-a": in}
	sets := map[string]*forewarn.ScaleSet{"ss-1": inSet}
	commit(t, s, &forewarn.Change{Inventory: defs, InventorySets: sets})
	want := map[string]*forewarn.Definition{"vm-a": definition(fullVM("vm-a"), 1)}
	wantSets := map[string]*forewarn.ScaleSet{"ss-1": fullScaleSet("ss-1")}

	in.VM.Zone, in.Seq = "changed", 99
	inSet.TerminateTimeout = time.Hour
	defs["vm-b"] = definition(fullVM("vm-b"), 2)
	wantInventory(t, load(t, s), 1, want, wantSets)

	st := load(t, s)
	st.Inventory["vm-a"].VM.Zone = "changed"
	st.Inventory["vm-a"].Seq = 99
	st.InventorySets["ss-1"].TerminateTimeout = time.Hour
	delete(st.Inventory, "vm-a")
	wantInventory(t, load(t, s), 1, want, wantSets)
}

// testInventoryFollow checks that followers, live and replaying, receive
// each commit's definitions and removals exactly, in order.
func testInventoryFollow(t *testing.T, s forewarn.Store) {
	c1 := &forewarn.Change{
		Inventory: map[string]*forewarn.Definition{
			"vm-a": definition(fullVM("vm-a"), 1),
			"vm-b": definition(&forewarn.VM{Name: "vm-b", IP: netip.MustParseAddr("10.0.0.2")}, 2),
			"vm-c": definition(&forewarn.VM{Name: "vm-c"}, 3),
		},
		InventorySets: map[string]*forewarn.ScaleSet{"ss-1": fullScaleSet("ss-1"), "ss-2": {Name: "ss-2"}},
	}
	c2 := &forewarn.Change{
		Revision:     1,
		Events:       []*forewarn.Event{fullEvent(1)},
		Incarnations: map[string]int64{"vm-a": 2},
		Inventory: map[string]*forewarn.Definition{
			"vm-a": definition(&forewarn.VM{Name: "vm-a", Provider: forewarn.AWS}, 1),
			"vm-b": nil,
			"vm-d": definition(fullVM("vm-d"), 4),
		},
		InventorySets: map[string]*forewarn.ScaleSet{"ss-1": nil},
	}
	c3 := &forewarn.Change{Revision: 2, Incarnations: map[string]int64{"vm-a": 3}}
	c4 := &forewarn.Change{
		Revision:      3,
		Inventory:     map[string]*forewarn.Definition{"vm-a": nil, "vm-c": nil, "vm-d": nil},
		InventorySets: map[string]*forewarn.ScaleSet{"ss-2": nil},
	}
	commitFollowed(t, s, c1, c2, c3, c4)
	wantInventory(t, load(t, s), 4, map[string]*forewarn.Definition{}, map[string]*forewarn.ScaleSet{})
}

// testInventoryReopen checks that a durable store keeps its inventory
// and InventoryRevision across Close; reopen opens the store kept in
// dir.
func testInventoryReopen(t *testing.T, reopen func(t *testing.T, dir string) forewarn.Store) {
	dir := t.TempDir()
	s := reopen(t, dir)
	defs := map[string]*forewarn.Definition{
		"vm-a": definition(fullVM("vm-a"), 1),
		"vm-b": definition(&forewarn.VM{Name: "vm-b", IP: netip.MustParseAddr("fe80::2%eth1")}, 2),
		"vm-c": definition(&forewarn.VM{Name: "vm-c"}, 3),
	}
	sets := map[string]*forewarn.ScaleSet{"ss-1": fullScaleSet("ss-1"), "ss-2": {Name: "ss-2"}}
	wantRevision(t, commit(t, s, &forewarn.Change{Inventory: defs, InventorySets: sets}), 1)
	wantRevision(t, commit(t, s, &forewarn.Change{
		Revision:      1,
		Inventory:     map[string]*forewarn.Definition{"vm-c": nil},
		InventorySets: map[string]*forewarn.ScaleSet{"ss-2": nil},
	}), 2)
	wantRevision(t, commit(t, s, &forewarn.Change{Revision: 2, Events: []*forewarn.Event{fullEvent(1)}}), 3)
	delete(defs, "vm-c")
	delete(sets, "ss-2")
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s = reopen(t, dir)
	wantInventory(t, load(t, s), 2, defs, sets)
	f := s.Follow(t.Context(), 3)
	c := &forewarn.Change{Revision: 3, Inventory: map[string]*forewarn.Definition{"vm-a": nil, "vm-d": definition(fullVM("vm-d"), 4)}}
	wantRevision(t, commit(t, s, c), 4)
	wantUpdate(t, recvUpdate(t, f), 4, c)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s = reopen(t, dir)
	wantInventory(t, load(t, s), 4, map[string]*forewarn.Definition{"vm-b": defs["vm-b"], "vm-d": c.Inventory["vm-d"]}, sets)
}

// fullVM returns a VM named name with every field set, its address an
// IPv6 one with a zone.
func fullVM(name string) *forewarn.VM {
	return &forewarn.VM{
		Name:                     name,
		IP:                       netip.MustParseAddr("fe80::1:2:3%eth0"),
		Network:                  "net-1",
		Host:                     "host-1",
		Provider:                 forewarn.Azure,
		AvailabilitySet:          "as-1",
		CloudService:             "cs-1",
		ScaleSet:                 "ss-1",
		InstanceID:               "i-0123456789abcdef0",
		PlacementGroup:           "pg-1",
		UpdateDomain:             7,
		Spot:                     true,
		OnHostMaintenance:        "TERMINATE",
		GPU:                      true,
		Preemptible:              true,
		ProvisioningModel:        "SPOT",
		SoleTenant:               true,
		Zone:                     "europe-west4-a",
		MachineType:              "n2-standard-4",
		Project:                  "project-1",
		AutoScalingGroup:         "asg-1",
		WarmPool:                 "Warmed:Stopped",
		SpotInterruptionBehavior: "hibernate",
		HTTPTokens:               "required",
		HopLimit:                 3,
		AMIID:                    "ami-0abcdef1234567890",
		AccountID:                "210987654321",
		SecurityGroups:           "web\nssh access",
		SubnetID:                 "subnet-be9b61d7",
		VPCID:                    "vpc-0123456789abcdef0",
	}
}

// fullScaleSet returns a scale set definition with every field set.
func fullScaleSet(name string) *forewarn.ScaleSet {
	return &forewarn.ScaleSet{Name: name, TerminateTimeout: 12*time.Minute + 500*time.Millisecond, DisableTerminateNotifications: true}
}

// Definitions returns n definitions of Azure VMs as a fleet file gives
// them, for the stores' tests and benchmarks at scale: vm-000000 on, each
// with an address in 10.0.0.0/8, an availability set of 100 VMs, an
// update domain, a zone and a size, Seq from 1.
func Definitions(n int) map[string]*forewarn.Definition {
	defs := make(map[string]*forewarn.Definition, n)
	for i := range n {
		vm := &forewarn.VM{
			Name:            fmt.Sprintf("vm-%06d", i),
			IP:              netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}),
			Provider:        forewarn.Azure,
			AvailabilitySet: fmt.Sprintf("as-%04d", i/100),
			UpdateDomain:    i % 5,
			Zone:            "westeurope-1",
			MachineType:     "Standard_D2s_v5",
		}
		defs[vm.Name] = definition(vm, int64(i+1))
	}
	return defs
}

func definition(vm *forewarn.VM, seq int64) *forewarn.Definition {
	return &forewarn.Definition{VM: vm, Seq: seq, Registration: uint64(seq)<<40 | 0xabcdef}
}

// wantInventory checks that st holds exactly the definitions defs and
// scale set definitions sets, in non-nil maps, at inventory revision
// rev.
func wantInventory(t *testing.T, st *forewarn.State, rev int64, defs map[string]*forewarn.Definition, sets map[string]*forewarn.ScaleSet) {
	t.Helper()
	if st.InventoryRevision != rev {
		t.Errorf("InventoryRevision = %d, want %d", st.InventoryRevision, rev)
	}
	if st.Inventory == nil || st.InventorySets == nil {
		t.Errorf("Inventory %v, InventorySets %v; want non-nil maps", st.Inventory, st.InventorySets)
	}
	if d := inventoryDiff(defs, st.Inventory, sets, st.InventorySets); d != "" {
		t.Errorf("inventory differs:\n%s", d)
	}
}

// inventoryDiff compares definitions and scale set definitions, every
// field and removals (nil values) included. It returns "" when they
// match.
func inventoryDiff(wantDefs, gotDefs map[string]*forewarn.Definition, wantSets, gotSets map[string]*forewarn.ScaleSet) string {
	var b strings.Builder
	mapDiff(&b, "definition of", wantDefs, gotDefs, showDefinition, func(name string, w, g *forewarn.Definition) string {
		if g.VM == nil || *g.VM != *w.VM || g.Seq != w.Seq || g.Registration != w.Registration {
			return fmt.Sprintf("\tdefinition of %q: got %s, want %s\n", name, showDefinition(g), showDefinition(w))
		}
		return ""
	})
	showSet := func(ss *forewarn.ScaleSet) string { return fmt.Sprintf("%+v", *ss) }
	mapDiff(&b, "scale set definition", wantSets, gotSets, showSet, func(name string, w, g *forewarn.ScaleSet) string {
		if *g != *w {
			return fmt.Sprintf("\tscale set definition %q: got %+v, want %+v\n", name, *g, *w)
		}
		return ""
	})
	return b.String()
}

func showDefinition(d *forewarn.Definition) string {
	if d.VM == nil {
		return fmt.Sprintf("{VM: nil, Seq: %d, Registration: %d}", d.Seq, d.Registration)
	}
	return fmt.Sprintf("{VM: %+v, Seq: %d, Registration: %d}", *d.VM, d.Seq, d.Registration)
}

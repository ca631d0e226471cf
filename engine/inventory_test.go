package engine_test

import (
	"net/netip"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

// names returns the fleet's VM names in order.
func names(f *forewarn.Fleet) []string {
	var out []string
	for _, vm := range f.VMs {
		out = append(out, vm.Name)
	}
	return out
}

// A VM added at run time is in the fleet and has a view from the commit
// on, after the VMs already there; its first call enables it.
func TestInventoryAdd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := mem.New()
		e := newEngine(t, store, false)
		before := e.InventoryRevision()
		rev, err := e.ChangeInventory(t.Context(), engine.InventoryChange{Set: []*forewarn.VM{
			{Name: "web_2", Provider: forewarn.Azure, AvailabilitySet: "web", IP: netip.MustParseAddr("198.18.0.2")},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if rev <= before || e.InventoryRevision() != rev {
			t.Fatalf("revision %d after the add (%d before), engine says %d", rev, before, e.InventoryRevision())
		}
		if got := names(e.Fleet()); !slices.Equal(got, []string{"web_0", "web_1", "db_0", "db_1", "solo", "web_2"}) {
			t.Fatalf("fleet %v", got)
		}
		v := e.View("web_2")
		if v == nil || v.Incarnation != 1 || v.VM.AvailabilitySet != "web" {
			t.Fatalf("web_2's view %+v", v)
		}
		if vm := e.Lookup(netip.MustParseAddr("198.18.0.2"), forewarn.Azure); vm == nil || vm.Name != "web_2" {
			t.Fatalf("Lookup of web_2's address: %v", vm)
		}
		if enabled := e.NoteRequest("web_2"); !enabled {
			t.Fatal("web_2's first call did not enable it")
		}
		// The same definition again changes nothing.
		if again, err := e.ChangeInventory(t.Context(), engine.InventoryChange{Set: []*forewarn.VM{
			{Name: "web_2", Provider: forewarn.Azure, AvailabilitySet: "web", IP: netip.MustParseAddr("198.18.0.2")},
		}}); err != nil || again != rev {
			t.Fatalf("the same definition again: revision %d, %v; want %d", again, err, rev)
		}
		// A new engine on the store serves the same inventory.
		e.Close()
		e2, err := engine.New(t.Context(), engine.Config{Store: store})
		if err != nil {
			t.Fatal(err)
		}
		defer e2.Close()
		if got := names(e2.Fleet()); !slices.Equal(got, []string{"web_0", "web_1", "db_0", "db_1", "solo", "web_2"}) || e2.InventoryRevision() != rev {
			t.Fatalf("after a restart: fleet %v at revision %d", got, e2.InventoryRevision())
		}
	})
}

// A removed VM leaves the Resources of its active events; an event left
// with none is canceled; its last view is marked Removed and wakes its
// waiters; its address is no one's.
func TestInventoryRemove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, mem.New(), false)
		both, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Freeze, VMs: []string{"db_0", "db_1"}})
		if err != nil {
			t.Fatal(err)
		}
		alone, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"solo"}})
		if err != nil {
			t.Fatal(err)
		}
		old := e.View("db_1")
		db0 := e.View("db_0").Incarnation
		if _, err := e.ChangeInventory(t.Context(), engine.InventoryChange{Remove: []string{"db_1", "solo"}}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-old.Changed():
		default:
			t.Fatal("db_1's view did not change")
		}
		if v := e.View("db_1"); v != nil {
			t.Fatalf("db_1 still has a view: %+v", v)
		}
		got, _ := e.Event(both.ID)
		if got.Status != forewarn.Scheduled || !slices.Equal(got.Resources, []string{"db_0"}) {
			t.Fatalf("the Freeze of db_0 and db_1: %s %v", got.Status, got.Resources)
		}
		if inc := e.View("db_0").Incarnation; inc != db0+1 {
			t.Fatalf("db_0's incarnation %d, want %d (its document changed)", inc, db0+1)
		}
		if got, _ := e.Event(alone.ID); got.Status != forewarn.Canceled || got.EndedAt.IsZero() {
			t.Fatalf("the Reboot of solo alone: %s ended %v", got.Status, got.EndedAt)
		}
		if got := names(e.Fleet()); !slices.Equal(got, []string{"web_0", "web_1", "db_0"}) {
			t.Fatalf("fleet %v", got)
		}
		if vms, gce, anyAddr := e.FleetCounts(); vms != 3 || gce != 0 || !anyAddr {
			t.Fatalf("FleetCounts() = %d, %d, %v; want 3, 0, true", vms, gce, anyAddr)
		}
		if _, err := e.ChangeInventory(t.Context(), engine.InventoryChange{Remove: []string{"solo"}}); forewarn.ErrorCode(err) != forewarn.ENOTFOUND {
			t.Fatalf("removing solo again: %v", err)
		}
		if enabled := e.NoteRequest("solo"); enabled {
			t.Fatal("a removed VM's call counts")
		}
	})
}

// A removed VM registered again under its name never sees its
// DocumentIncarnation go backwards; across a restart neither.
func TestInventoryReregisterKeepsIncarnation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := mem.New()
		e := newEngine(t, store, false)
		for range 3 {
			if _, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"solo"}}); err != nil {
				t.Fatal(err)
			}
		}
		high := e.View("solo").Incarnation
		if high < 4 {
			t.Fatalf("solo at incarnation %d after 3 events", high)
		}
		solo := e.Fleet().VM("solo")
		if _, err := e.ChangeInventory(t.Context(), engine.InventoryChange{Remove: []string{"solo"}}); err != nil {
			t.Fatal(err)
		}
		e.Close()
		e2, err := engine.New(t.Context(), engine.Config{Store: store})
		if err != nil {
			t.Fatal(err)
		}
		defer e2.Close()
		if _, err := e2.ChangeInventory(t.Context(), engine.InventoryChange{Set: []*forewarn.VM{solo}}); err != nil {
			t.Fatal(err)
		}
		if inc := e2.View("solo").Incarnation; inc <= high {
			t.Fatalf("solo registered again at incarnation %d, served %d before", inc, high)
		}
		if n := len(e2.View("solo").Events); n != 0 {
			t.Fatalf("solo registered again sees %d events; its old ones were canceled", n)
		}
	})
}

// A changed address takes effect at once; a changed scope or update
// domain applies to new events, while active events keep the VMs they
// named.
func TestInventoryChangeApplies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, mem.New(), false)
		a, b := netip.MustParseAddr("198.18.0.10"), netip.MustParseAddr("198.18.0.11")
		web1 := *e.Fleet().VM("web_1")
		web1.IP = a
		if _, err := e.ChangeInventory(t.Context(), engine.InventoryChange{Set: []*forewarn.VM{&web1}}); err != nil {
			t.Fatal(err)
		}
		ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_1"}})
		if err != nil {
			t.Fatal(err)
		}
		web1.IP, web1.AvailabilitySet, web1.UpdateDomain = b, "db", 3
		if _, err := e.ChangeInventory(t.Context(), engine.InventoryChange{Set: []*forewarn.VM{&web1}}); err != nil {
			t.Fatal(err)
		}
		if vm := e.Lookup(a, forewarn.Azure); vm != nil && vm.Name == "web_1" {
			t.Fatal("web_1's old address still finds it")
		}
		if vm := e.Lookup(b, forewarn.Azure); vm == nil || vm.Name != "web_1" || vm.UpdateDomain != 3 {
			t.Fatalf("web_1's new address finds %v", vm)
		}
		got, _ := e.Event(ev.ID)
		if got.Status != forewarn.Scheduled || !slices.Equal(got.Resources, []string{"web_1"}) {
			t.Fatalf("the active Reboot: %s %v", got.Status, got.Resources)
		}
		// web_1 now sees with db, and web_0 no longer sees its Reboot.
		if ids := eventIDs(e.View("db_0")); !slices.Equal(ids, []string{ev.ID}) {
			t.Fatalf("db_0 sees %v after web_1 joined db", ids)
		}
		if ids := eventIDs(e.View("web_0")); len(ids) != 0 {
			t.Fatalf("web_0 sees %v after web_1 left web", ids)
		}
		// A new event spanning web_1 and db_0 is one update domain no more.
		if _, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_1", "db_0"}}); forewarn.ErrorCode(err) != forewarn.EINVALID {
			t.Fatalf("an event across update domains 3 and 0: %v", err)
		}
	})
}

// A stale If-Match is refused and changes nothing; a failing check too.
func TestInventoryPreconditions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, mem.New(), false)
		rev := e.InventoryRevision()
		extra := &forewarn.VM{Name: "x", Provider: forewarn.Azure}
		if _, err := e.ChangeInventory(t.Context(), engine.InventoryChange{Set: []*forewarn.VM{extra}, IfMatch: rev}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.ChangeInventory(t.Context(), engine.InventoryChange{Remove: []string{"x"}, IfMatch: rev}); forewarn.ErrorCode(err) != forewarn.EPRECONDITION {
			t.Fatalf("a stale If-Match: %v", err)
		}
		refuse := func(*forewarn.Fleet) error { return forewarn.Errorf(forewarn.EINVALID, "no") }
		if _, err := e.ChangeInventory(t.Context(), engine.InventoryChange{Remove: []string{"x"}, Check: refuse}); forewarn.ErrorMessage(err) != "no" {
			t.Fatalf("a failing check: %v", err)
		}
		if e.Fleet().VM("x") == nil {
			t.Fatal("a refused change removed x")
		}
	})
}

func eventIDs(v *engine.View) []string {
	var ids []string
	for _, ev := range v.Events {
		ids = append(ids, ev.ID)
	}
	return ids
}

// A VM may not take an address another VM keeps; two VMs may swap theirs
// in one change.
func TestInventoryAddressesUnique(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, mem.New(), false)
		a, b := netip.MustParseAddr("198.18.1.1"), netip.MustParseAddr("198.18.1.2")
		x := &forewarn.VM{Name: "x", Provider: forewarn.Azure, IP: a}
		y := &forewarn.VM{Name: "y", Provider: forewarn.Azure, IP: b}
		if _, err := e.ChangeInventory(t.Context(), engine.InventoryChange{Set: []*forewarn.VM{x, y}}); err != nil {
			t.Fatal(err)
		}
		z := &forewarn.VM{Name: "z", Provider: forewarn.Azure, IP: a}
		if _, err := e.ChangeInventory(t.Context(), engine.InventoryChange{Set: []*forewarn.VM{z}}); forewarn.ErrorMessage(err) != `VM "z": ip 198.18.1.1 is already used by x` {
			t.Fatalf("z taking x's address: %v", err)
		}
		x2, y2 := *x, *y
		x2.IP, y2.IP = b, a
		if _, err := e.ChangeInventory(t.Context(), engine.InventoryChange{Set: []*forewarn.VM{&x2, &y2}}); err != nil {
			t.Fatalf("x and y swapping addresses: %v", err)
		}
		if vm := e.Lookup(a, forewarn.Azure); vm == nil || vm.Name != "y" {
			t.Fatalf("a finds %v, want y", vm)
		}
		if vm := e.Lookup(b, forewarn.Azure); vm == nil || vm.Name != "x" {
			t.Fatalf("b finds %v, want x", vm)
		}
		// z takes an address that the same change frees by removing x.
		z.IP = b
		if _, err := e.ChangeInventory(t.Context(), engine.InventoryChange{Set: []*forewarn.VM{z}, Remove: []string{"x"}}); err != nil {
			t.Fatalf("z taking the address of x, removed: %v", err)
		}
		if vm := e.Lookup(b, forewarn.Azure); vm == nil || vm.Name != "z" {
			t.Fatalf("b finds %v, want z", vm)
		}
	})
}

// A VM registered again starts unseen: the record of its calls leaves
// the store with it, so a restart does not take it for a VM that called.
func TestInventoryReregisterStartsUnseen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := mem.New()
		e := newEngine(t, store, false) // every VM has called
		synctest.Wait()                 // and the engine has saved it
		record := func() *forewarn.VMRecord {
			t.Helper()
			st, err := store.Load(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			return st.VMs["solo"]
		}
		if r := record(); r == nil || r.LastSeen.IsZero() {
			t.Fatalf("solo's record: %+v, want a LastSeen", r)
		}
		solo := e.Fleet().VM("solo")
		if _, err := e.ChangeInventory(t.Context(), engine.InventoryChange{Remove: []string{"solo"}}); err != nil {
			t.Fatal(err)
		}
		if r := record(); r != nil {
			t.Fatalf("solo's record once removed: %+v, want none", r)
		}
		if _, err := e.ChangeInventory(t.Context(), engine.InventoryChange{Set: []*forewarn.VM{solo}}); err != nil {
			t.Fatal(err)
		}
		e.Close()
		e2, err := engine.New(t.Context(), engine.Config{Store: store})
		if err != nil {
			t.Fatal(err)
		}
		defer e2.Close()
		if info := e2.VMs(); !slices.ContainsFunc(info, func(i engine.VMInfo) bool { return i.Name == "solo" && !i.Enabled }) {
			t.Fatalf("solo after a restart: %+v, want it registered and not enabled", info)
		}
	})
}

// A VM is known by its network and address: VMs of two networks may
// share an address, and each network has its own ip: any VM per
// provider; on one network an address is one VM's.
func TestInventoryNetworks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, mem.New(), false)
		a := netip.MustParseAddr("198.18.2.5")
		vms := []*forewarn.VM{
			{Name: "flat", Provider: forewarn.Azure, IP: a},
			{Name: "blue", Provider: forewarn.Azure, IP: a, Network: "blue"},
			{Name: "red", Provider: forewarn.GCE, IP: a, Network: "red"},
			{Name: "blue-any", Provider: forewarn.Azure, Network: "blue"},
			{Name: "red-any-gce", Provider: forewarn.GCE, Network: "red"},
		}
		if _, err := e.ChangeInventory(t.Context(), engine.InventoryChange{Set: vms}); err != nil {
			t.Fatal(err)
		}
		other := netip.MustParseAddr("198.18.2.6")
		for _, c := range []struct {
			network string
			addr    netip.Addr
			p       forewarn.Provider
			want    string
		}{
			{"", a, forewarn.Azure, "flat"},
			{"blue", a, forewarn.Azure, "blue"},
			{"red", a, forewarn.GCE, "red"},
			{"red", a, forewarn.Azure, "red"}, // by address, whatever the provider
			{"green", a, forewarn.Azure, ""},
			{"blue", other, forewarn.Azure, "blue-any"},
			{"blue", other, forewarn.GCE, ""},
			{"red", other, forewarn.GCE, "red-any-gce"},
			{"red", other, forewarn.Azure, ""},
		} {
			got := ""
			if vm := e.LookupOn(c.network, c.addr, c.p); vm != nil {
				got = vm.Name
			}
			if got != c.want {
				t.Errorf("LookupOn(%q, %s, %s) = %q, want %q", c.network, c.addr, c.p, got, c.want)
			}
		}
		if vm := e.Lookup(other, forewarn.Azure); vm != nil && vm.Network != "" {
			t.Errorf("Lookup (network \"\") of an address no VM has finds %s of network %s", vm.Name, vm.Network)
		}
		if vm := e.Lookup(a, forewarn.Azure); vm == nil || vm.Name != "flat" {
			t.Errorf("Lookup (network \"\") finds %v, want flat", vm)
		}
		clash := &forewarn.VM{Name: "blue2", Provider: forewarn.Azure, IP: a, Network: "blue"}
		if _, err := e.ChangeInventory(t.Context(), engine.InventoryChange{Set: []*forewarn.VM{clash}}); forewarn.ErrorMessage(err) != `VM "blue2": ip 198.18.2.5 on network blue is already used by blue` {
			t.Fatalf("blue2 taking blue's address: %v", err)
		}
		twice := []*forewarn.VM{
			{Name: "g1", Provider: forewarn.Azure, IP: other, Network: "green"},
			{Name: "g2", Provider: forewarn.Azure, IP: other, Network: "green"},
		}
		if _, err := e.ChangeInventory(t.Context(), engine.InventoryChange{Set: twice}); forewarn.ErrorMessage(err) != `VM "g2": ip 198.18.2.6 on network green is already used by g1` {
			t.Fatalf("two VMs of one address on green: %v", err)
		}
		// Moved to another network, a VM leaves its old one's address free.
		moved := *vms[1]
		moved.Network = "green"
		if _, err := e.ChangeInventory(t.Context(), engine.InventoryChange{Set: []*forewarn.VM{&moved}}); err != nil {
			t.Fatal(err)
		}
		if vm := e.LookupOn("blue", a, forewarn.Azure); vm == nil || vm.Name != "blue-any" {
			t.Errorf("blue's address once blue moved finds %v, want blue-any", vm)
		}
		if vm := e.LookupOn("green", a, forewarn.Azure); vm == nil || vm.Name != "blue" {
			t.Errorf("green's address finds %v, want blue", vm)
		}
		if _, err := e.ChangeInventory(t.Context(), engine.InventoryChange{Set: []*forewarn.VM{clash}}); err != nil {
			t.Errorf("blue2 taking the address blue left: %v", err)
		}
	})
}

// VMs and VM read without the engine's lock: while VMs come and go, a VM
// just added (no view yet) or just removed is left out, never a panic.
func TestVMsDuringChurn(t *testing.T) {
	e := newEngine(t, mem.New(), false)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 300 {
			vm := &forewarn.VM{Name: "churn", Provider: forewarn.Azure, IP: netip.MustParseAddr("198.18.9.9")}
			c := engine.InventoryChange{Set: []*forewarn.VM{vm}}
			if i%2 == 1 {
				c = engine.InventoryChange{Remove: []string{"churn"}}
			}
			if _, err := e.ChangeInventory(t.Context(), c); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for {
		select {
		case <-done:
			if n := len(e.VMs()); n != len(e.Fleet().VMs) {
				t.Fatalf("VMs lists %d, the fleet holds %d", n, len(e.Fleet().VMs))
			}
			return
		default:
		}
		for _, info := range e.VMs() {
			if info.Incarnation < 1 {
				t.Fatalf("%s listed at incarnation %d", info.Name, info.Incarnation)
			}
		}
		if info, err := e.VM("churn"); err == nil && info.Name != "churn" {
			t.Fatalf("VM(churn) = %s", info.Name)
		}
	}
}

package engine

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"maps"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/internal/cow"
)

// member is one VM's state beside its definition: created when the VM
// joins the inventory, dropped when it leaves it.
type member struct {
	view atomic.Pointer[View]
	// queried is when the VM last read its maintenance-event key (Unix
	// ns; 0 for never since the engine started); savedQ is the Queried
	// the store holds, and ended when its last host maintenance event
	// ended: a read after that is written, so every replica's leader
	// knows of it.
	queried, savedQ, ended atomic.Int64
	// seen is when the VM last called its metadata API (Unix ns), and
	// saved what the store holds of it.
	seen, saved atomic.Int64
	// client is the client record the store holds of the VM, nil for
	// none.
	client atomic.Pointer[[]byte]
}

// cur returns the inventory in force.
func (e *Engine) cur() *inventory { return e.inv.Load() }

// vm returns the VM named name in the inventory in force, or nil.
func (e *Engine) vm(name string) *forewarn.VM { return e.cur().vmNamed(name) }

// member returns the per-VM state of the VM named name, or nil.
func (e *Engine) member(name string) *member {
	m, _ := e.members.Load(name)
	return m
}

// newMembers returns an empty member map.
func newMembers() *cow.Map[string, *member] { return cow.New[string, *member](cow.String) }

// Fleet returns the inventory in force: every VM in registration order
// and the scale sets' settings. It must not be modified; a change of the
// inventory makes a new one.
func (e *Engine) Fleet() *forewarn.Fleet { return e.cur().fleetOf() }

// VMNamed returns the VM named name in the inventory in force, or nil,
// without a lock and without listing the fleet.
func (e *Engine) VMNamed(name string) *forewarn.VM { return e.vm(name) }

// FleetCounts returns how many VMs the inventory in force has, how many
// of them are Compute Engine VMs, and whether one has no address (it
// answers every caller of its API no other VM's address is), without
// walking the fleet.
func (e *Engine) FleetCounts() (vms, gce int, anyAddr bool) {
	inv := e.cur()
	return inv.listLen, inv.gceVMs, inv.noAddr > 0
}

// InventoryRevision returns the store revision of the latest change of
// the inventory in force; 0 when the store never held one.
func (e *Engine) InventoryRevision() int64 { return e.cur().rev }

// Lookup is LookupOn for network "", the network of the requests that
// reach the server directly.
func (e *Engine) Lookup(addr netip.Addr, p forewarn.Provider) *forewarn.VM {
	return e.cur().lookup("", addr, p)
}

// LookupOn returns the VM of network whose requests come from addr, or
// else the VM of network that answers every caller of provider p's API
// there, or nil. It reads the inventory in force without a lock and
// does not allocate.
func (e *Engine) LookupOn(network string, addr netip.Addr, p forewarn.Provider) *forewarn.VM {
	return e.cur().lookup(network, addr, p)
}

// InventoryChange is one change of the inventory, made in one commit.
type InventoryChange struct {
	// Set adds each VM, or replaces the definition of the VM of its name.
	Set []*forewarn.VM
	// Remove deregisters the VMs named: no Terminate, no notice. Their
	// active events drop them; an event left with no VM is canceled.
	Remove []string
	// SetScaleSets and RemoveScaleSets do the same for scale set
	// settings.
	SetScaleSets    []*forewarn.ScaleSet
	RemoveScaleSets []string
	// IfMatch, when not 0, is the inventory revision the change was made
	// against: when the inventory has moved on since, the change is
	// refused with EPRECONDITION. -1 stands for revision 0, an inventory
	// that never changed.
	IfMatch int64
	// Check, when set, validates the whole inventory the change would
	// make; its error refuses the change. Without it, the change is
	// still refused (EINVALID) when it gives a VM an address or an EC2
	// instance ID that a VM it leaves alone holds.
	Check func(*forewarn.Fleet) error
	// Owned hands Set's VMs to the engine, which keeps them rather than
	// copies: the caller never changes them afterwards. A big apply then
	// holds one copy of each definition, not two.
	Owned bool
}

// ChangeInventory makes c in one commit and returns the inventory
// revision it is at afterwards (unchanged when c changes nothing).
// Errors: EPRECONDITION for a stale IfMatch, ENOTFOUND for a removal of a
// VM or scale set not in the inventory, EINVALID from Check,
// EUNAVAILABLE after Close.
func (e *Engine) ChangeInventory(ctx context.Context, c InventoryChange) (rev int64, err error) {
	err = e.retry(ctx, func(ctx context.Context) error {
		rev, err = e.changeInventoryOnce(ctx, c)
		return err
	})
	return rev, err
}

func (e *Engine) changeInventoryOnce(ctx context.Context, c InventoryChange) (int64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return 0, errClosed
	}
	inv := e.cur()
	if want := max(c.IfMatch, 0); c.IfMatch != 0 && want != inv.rev {
		return 0, forewarn.Errorf(forewarn.EPRECONDITION,
			"the inventory is at revision %d, not %d: it changed since; read it again", inv.rev, want)
	}
	defs := map[string]*forewarn.Definition{}
	sets := map[string]*forewarn.ScaleSet{}
	next := inv.nextSeq
	for _, name := range c.Remove {
		if inv.def(name) == nil {
			return 0, forewarn.Errorf(forewarn.ENOTFOUND, "no VM named %q", name)
		}
		defs[name] = nil
	}
	for _, given := range c.Set {
		if given == nil || given.Name == "" {
			return 0, forewarn.Errorf(forewarn.EINVALID, "a VM without a name")
		}
		vm := given
		if !c.Owned {
			vm = new(*given) // the inventory's own, whatever the caller does with given
		}
		old := inv.def(vm.Name)
		switch {
		case old != nil && sameVM(old.VM, vm):
			delete(defs, vm.Name)
		case old != nil:
			defs[vm.Name] = &forewarn.Definition{VM: vm, Seq: old.Seq, Registration: old.Registration}
		default:
			defs[vm.Name] = &forewarn.Definition{VM: vm, Seq: next, Registration: newRegistration()}
			next++
		}
	}
	for _, name := range c.RemoveScaleSets {
		if inv.sets[name] == nil {
			return 0, forewarn.Errorf(forewarn.ENOTFOUND, "no scale set named %q", name)
		}
		sets[name] = nil
	}
	for _, given := range c.SetScaleSets {
		ss := new(*given)
		if old := inv.sets[ss.Name]; old != nil && *old == *ss {
			delete(sets, ss.Name)
		} else {
			sets[ss.Name] = ss
		}
	}
	if len(defs) == 0 && len(sets) == 0 {
		return inv.rev, nil
	}
	if err := inv.conflict(defs); err != nil {
		return 0, err
	}
	nextInv := inv.with(0, defs, sets)
	if c.Check != nil {
		if err := c.Check(nextInv.fleetOf()); err != nil {
			return 0, err
		}
	}
	now := time.Now()
	changed := e.dropRemoved(defs, now)
	if err := e.commitInventory(ctx, now, nextInv, defs, sets, changed); err != nil {
		return 0, err
	}
	set, removed := 0, 0
	for _, d := range defs {
		if d == nil {
			removed++
		} else {
			set++
		}
	}
	e.log.Info("inventory changed", "vms_set", set, "vms_removed", removed, "scale_sets", len(sets),
		"events_changed", len(changed), "revision", e.cur().rev)
	return e.cur().rev, nil
}

// sameVM reports whether a and b define the same VM.
func sameVM(a, b *forewarn.VM) bool { return *a == *b }

// newRegistration returns a Definition.Registration: random, and never 0.
func newRegistration() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return binary.BigEndian.Uint64(b[:]) | 1
}

// dropRemoved returns the new versions of the active events that name
// the VMs defs removes: without them, and canceled when none is left.
// e.mu must be held.
func (e *Engine) dropRemoved(defs map[string]*forewarn.Definition, now time.Time) []*forewarn.Event {
	byID := map[string]*forewarn.Event{}
	for name, d := range defs {
		if d != nil {
			continue
		}
		for ev := range e.eventsOf(name) {
			if !ev.Status.Active() && ev.Status != forewarn.Pending {
				continue
			}
			c := byID[ev.ID]
			if c == nil {
				c = ev.Clone()
				byID[ev.ID] = c
			}
			c.Resources = slices.DeleteFunc(c.Resources, func(r string) bool { return r == name })
		}
	}
	out := make([]*forewarn.Event, 0, len(byID))
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		c := byID[id]
		if len(c.Resources) == 0 {
			c.Status, c.EndedAt, c.NotBefore = forewarn.Canceled, now.Round(0), time.Time{}
		}
		out = append(out, c)
	}
	return out
}

// moved returns the Azure VMs of next whose peers differ from inv's
// (they joined, left or changed a scope group) and that share a group
// with an active event in either: their documents may change. e.mu must
// be held.
func (e *Engine) moved(inv, next *inventory) map[string]bool {
	out := map[string]bool{}
	// Each group is looked at once, however many of its VMs moved: the
	// cost is linear in the VMs of the groups the change touches.
	busy := map[**forewarn.VM]bool{}
	marked := map[**forewarn.VM]bool{}
	for name := range next.peersMoved {
		if e.groupsHaveEvents(inv.peersOf(name), busy) || e.groupsHaveEvents(next.peersOf(name), busy) {
			out[name] = true
		}
		if !e.hasActive(name) {
			continue
		}
		// Its old groups saw its events; they no longer may.
		for _, g := range inv.peersOf(name) {
			if len(g) > 1 && !marked[&g[0]] {
				marked[&g[0]] = true
				for _, p := range g {
					out[p.Name] = true
				}
			}
		}
	}
	return out
}

// hasActive reports whether an active event names the VM named name.
// e.mu must be held.
func (e *Engine) hasActive(name string) bool {
	for ev := range e.eventsOf(name) {
		if ev.Status.Active() {
			return true
		}
	}
	return false
}

// groupsHaveEvents reports whether any VM of groups is named by an
// active event; busy remembers the answer of each group by its first
// slot. e.mu must be held.
func (e *Engine) groupsHaveEvents(groups [][]*forewarn.VM, busy map[**forewarn.VM]bool) bool {
	for _, g := range groups {
		on, ok := busy[&g[0]]
		if !ok {
			on = slices.ContainsFunc(g, func(vm *forewarn.VM) bool { return e.hasActive(vm.Name) })
			busy[&g[0]] = on
		}
		if on {
			return true
		}
	}
	return false
}

// commitInventory writes the inventory change (defs and sets, making
// next) with the event versions changed, and installs it all. e.mu must
// be held.
func (e *Engine) commitInventory(ctx context.Context, now time.Time, next *inventory, defs map[string]*forewarn.Definition, sets map[string]*forewarn.ScaleSet, changed []*forewarn.Event) error {
	inv := e.cur()
	changed = e.settle(now, changed)
	moves := e.transitions(changed)
	touched := e.touchedBy(changed)
	for name := range e.moved(inv, next) {
		touched[name] = true
	}
	incs := make(map[string]int64, len(touched))
	for name := range touched {
		if vm := next.vmNamed(name); vm != nil && vm.Provider == forewarn.Azure {
			incs[name] = e.incOf(name) + 1
		}
	}
	for name, d := range defs {
		if d == nil || inv.def(name) != nil {
			continue
		}
		if n := e.inc[name]; n > 1 {
			// Registered again: its document starts past every one it
			// was served before. (One only ever served incarnation 1
			// served no event: its document at 1 is the same. It starts
			// unseen: its record left the store with it.)
			incs[name] = n + 1
		}
	}
	// The follow loop may take the commit in while write waits for the
	// store: it finds next here rather than deriving it again.
	e.pending = &pendingInventory{base: e.rev, defs: defs, sets: sets, next: next}
	covered, err := e.write(ctx, &forewarn.Change{Events: changed, Incarnations: incs, Inventory: defs, InventorySets: sets,
		SigningKeys: e.newKeys})
	e.pending = nil
	if err != nil {
		return err
	}
	if e.newKeys != nil {
		e.wroteKeys(covered)
	}
	for _, m := range moves {
		e.obs.Transition(m.t, m.from, m.to)
	}
	if covered {
		return nil // the follow loop installed it
	}
	e.installInventory(next.withRev(e.rev), defs, changed, incs, touched)
	for _, c := range changed {
		e.arm(c, now)
	}
	return nil
}

// withRev returns inv at revision rev.
func (inv *inventory) withRev(rev int64) *inventory {
	c := *inv
	c.rev = rev
	return &c
}

// installInventory puts next in force with the event versions changed
// and the incarnations incs, and publishes the views of the VMs
// touched, added, changed or removed. e.mu must be held.
func (e *Engine) installInventory(next *inventory, defs map[string]*forewarn.Definition, changed []*forewarn.Event, incs map[string]int64, touched map[string]bool) {
	inv := e.cur()
	var adds []cow.Entry[string, *member]
	var gone []*forewarn.VM
	for name, d := range defs {
		switch {
		case d == nil:
			if old := inv.vmNamed(name); old != nil {
				gone = append(gone, old)
			}
		case e.member(name) == nil:
			adds = append(adds, cow.Entry[string, *member]{Key: name, Value: &member{}})
		}
		if d != nil {
			touched[name] = true
		}
	}
	e.members.Apply(adds)
	moved := e.detach(inv, changed, next.affected)
	e.inv.Store(next.inForce())
	for _, c := range changed {
		e.install(c)
	}
	e.reattach(moved)
	for name, n := range incs {
		e.inc[name] = max(e.inc[name], n)
	}
	e.publish(touched)
	e.retire(gone)
}

// retire drops the members of the VMs gone, which left the inventory:
// each gets a last view, marked Removed, that wakes whoever waits on its
// document. e.mu must be held.
func (e *Engine) retire(gone []*forewarn.VM) {
	if len(gone) == 0 {
		return
	}
	dels := make([]cow.Entry[string, *member], 0, len(gone))
	vs := make([]*View, 0, len(gone))
	for _, vm := range gone {
		m := e.member(vm.Name)
		if m == nil {
			continue
		}
		v := &View{VM: vm, Incarnation: e.incOf(vm.Name), Removed: true}
		if old := m.view.Swap(v); old != nil {
			old.replaced()
		}
		vs = append(vs, v)
		dels = append(dels, cow.Entry[string, *member]{Key: vm.Name, Delete: true})
	}
	for _, fn := range e.subs {
		fn(vs)
	}
	e.members.Apply(dels)
}

// detach takes out of the scope group index, as inv groups them, the
// old versions of the events changed and the active events of the VMs
// named in names, whose groups an inventory change rebuilds; it returns
// the IDs of the latter, for reattach once the new inventory is in
// force. e.mu must be held.
func (e *Engine) detach(inv *inventory, changed []*forewarn.Event, names map[string]bool) []string {
	for _, c := range changed {
		if old := e.events[c.ID]; old != nil {
			e.unindexGroups(inv, old)
		}
	}
	var ids []string
	seen := map[string]bool{}
	for n := range names {
		for ev := range e.eventsOf(n) {
			if ev.Status.Active() && !seen[ev.ID] {
				seen[ev.ID] = true
				ids = append(ids, ev.ID)
				e.unindexGroups(inv, ev)
			}
		}
	}
	return ids
}

// reattach indexes the events ids by the scope groups of the inventory
// in force. e.mu must be held.
func (e *Engine) reattach(ids []string) {
	for _, id := range ids {
		if ev := e.events[id]; ev != nil && ev.Status.Active() {
			e.indexGroups(ev)
		}
	}
}

// unindexGroups takes ev out of the index of the scope groups inv puts
// its Resources in. e.mu must be held.
func (e *Engine) unindexGroups(inv *inventory, ev *forewarn.Event) {
	for _, r := range ev.Resources {
		for _, g := range inv.peersOf(r) {
			if m := e.byGroup[&g[0]]; m != nil {
				delete(m, ev.ID)
				if len(m) == 0 {
					delete(e.byGroup, &g[0])
				}
			}
		}
	}
}

// indexGroups indexes the active event ev by the scope groups of more
// than one VM that its Resources belong to. e.mu must be held.
func (e *Engine) indexGroups(ev *forewarn.Event) {
	inv := e.cur()
	for _, r := range ev.Resources {
		for _, g := range inv.peersOf(r) {
			if len(g) < 2 {
				continue
			}
			m := e.byGroup[&g[0]]
			if m == nil {
				m = map[string]*forewarn.Event{}
				e.byGroup[&g[0]] = m
			}
			m[ev.ID] = ev
		}
	}
}

// applyInventory installs the inventory part of a commit another replica
// (or this one, through the follow loop) made: defs and sets at revision
// rev, with the events changed. It returns the VMs whose views it must
// publish, and the events to reattach once the commit's events are
// installed. e.mu must be held, and the commit's events not yet
// installed.
func (e *Engine) applyInventory(rev int64, defs map[string]*forewarn.Definition, sets map[string]*forewarn.ScaleSet, changed []*forewarn.Event) (gone []*forewarn.VM, touched map[string]bool, moved []string) {
	inv := e.cur()
	var next *inventory
	if p := e.pending; p != nil && p.base+1 == rev && p.is(defs, sets) {
		next = p.next.withRev(rev) // this engine's own commit
	} else {
		next = inv.with(rev, defs, sets)
	}
	touched = e.moved(inv, next)
	moved = e.detach(inv, changed, next.affected)
	var adds []cow.Entry[string, *member]
	for name, d := range defs {
		if d == nil {
			if old := inv.vmNamed(name); old != nil {
				gone = append(gone, old)
			}
			continue
		}
		touched[name] = true
		if e.member(name) == nil {
			adds = append(adds, cow.Entry[string, *member]{Key: name, Value: &member{}})
		}
	}
	e.members.Apply(adds)
	e.inv.Store(next.inForce())
	return gone, touched, moved
}

// pendingInventory is an inventory change this engine is writing: made
// against revision base, it makes next.
type pendingInventory struct {
	base int64
	defs map[string]*forewarn.Definition
	sets map[string]*forewarn.ScaleSet
	next *inventory
}

// is reports whether defs and sets, as a store delivers a commit's, are
// p's change: the same names with the same definitions.
func (p *pendingInventory) is(defs map[string]*forewarn.Definition, sets map[string]*forewarn.ScaleSet) bool {
	if len(defs) != len(p.defs) || len(sets) != len(p.sets) {
		return false
	}
	for name, d := range defs {
		want, ok := p.defs[name]
		switch {
		case !ok || (d == nil) != (want == nil):
			return false
		case d != nil && (d.Seq != want.Seq || d.Registration != want.Registration || *d.VM != *want.VM):
			return false
		}
	}
	for name, ss := range sets {
		want, ok := p.sets[name]
		if !ok || (ss == nil) != (want == nil) || ss != nil && *ss != *want {
			return false
		}
	}
	return true
}

// unixTime returns the time of Unix nanoseconds ns, zero for 0.
func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

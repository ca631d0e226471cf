package engine

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"sync"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/internal/cow"
)

// inventory is the fleet as of one inventory revision, with its indexes.
// It is immutable once built: a change derives a new one that shares
// with it everything the change leaves alone (the indexes are sharded
// copy-on-write maps), so a change costs the VMs and groups it touches,
// not the fleet.
type inventory struct {
	// rev is the store's InventoryRevision it reflects.
	rev int64
	// list holds the VMs by Seq, in chunks that a change copies only
	// where it touches them; fleet is the list as a forewarn.Fleet,
	// made on first use (fleetOf), whose VM method asks defs.
	list    [][]*forewarn.VM
	listLen int
	setList []*forewarn.ScaleSet
	fleet   *lazyFleet
	defs    *cow.Map[string, *forewarn.Definition]
	sets    map[string]*forewarn.ScaleSet
	// nextSeq is the Seq the next VM registered gets.
	nextSeq int64
	// groups holds the members of every group by key: scope groups
	// (groupKeys with the placement group), services ('v' keys: a
	// scale set's, with the zone) and whole scale sets ('S' keys), each
	// in fleet order. A group's slice is replaced, never changed, when
	// its members change, so its first slot's address names it.
	groups *cow.Map[gkey, []*forewarn.VM]
	// byAddr finds a VM by its network and the source address of its
	// requests; anyVM is each network's VM of no address for each
	// provider, which answers every other caller of the network.
	byAddr *cow.Map[forewarn.NetAddr, *forewarn.VM]
	anyVM  map[forewarn.NetProvider]*forewarn.VM
	// instances finds an EC2 VM by its instance ID.
	instances *cow.Map[string, *forewarn.VM]
	// hosts holds the names of each host's VMs, sorted. A host's slice
	// is replaced, never changed, when its VMs change; a host of no VM
	// has no entry.
	hosts *cow.Map[string, []string]
	// gceVMs and noAddr count the Compute Engine VMs and the VMs of no
	// address.
	gceVMs, noAddr int
	// affected names the VMs whose groups the change that derived this
	// inventory rebuilt (every VM, for one built whole); peersMoved, the
	// Azure VMs of them whose peers changed: they joined or left a scope
	// group, or another VM joined or left one of theirs.
	affected, peersMoved map[string]bool
}

// gkey is the key of a group: an availability set ('a'), a cloud
// service ('c'), a scale set's scope group by placement group ('s'), its
// service group by zone ('v'), or the whole scale set ('S').
type gkey struct {
	kind      byte
	name, sub string
}

// gkeyHash hashes a group key for a cow.Map, without allocating.
func gkeyHash(k gkey) uint64 {
	h := uint64(14695981039346656037) ^ uint64(k.kind)
	h *= 1099511628211
	for _, s := range [2]string{k.name, k.sub} {
		for i := 0; i < len(s); i++ {
			h ^= uint64(s[i])
			h *= 1099511628211
		}
		h *= 1099511628211 // the separator
	}
	return h ^ h>>32
}

// emptyInventory returns an inventory of no VMs at revision 0.
func emptyInventory() *inventory {
	inv := &inventory{
		defs:      cow.New[string, *forewarn.Definition](cow.String),
		sets:      map[string]*forewarn.ScaleSet{},
		nextSeq:   1,
		groups:    cow.New[gkey, []*forewarn.VM](gkeyHash),
		byAddr:    cow.New[forewarn.NetAddr, *forewarn.VM](addrHash),
		anyVM:     map[forewarn.NetProvider]*forewarn.VM{},
		instances: cow.New[string, *forewarn.VM](cow.String),
		hosts:     cow.New[string, []string](cow.String),
		fleet:     &lazyFleet{},
	}
	return inv
}

// buildInventory indexes the definitions defs and scale sets sets, as of
// inventory revision rev.
func buildInventory(rev int64, defs map[string]*forewarn.Definition, sets map[string]*forewarn.ScaleSet) *inventory {
	return emptyInventory().with(rev, defs, sets)
}

// addrHash hashes a network and address for a cow.Map, without
// allocating.
func addrHash(a forewarn.NetAddr) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(a.Network); i++ {
		h ^= uint64(a.Network[i])
		h *= 1099511628211
	}
	h *= 1099511628211 // the separator
	for _, c := range a.Addr.As16() {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h ^ h>>32
}

// netAddr is the key of vm's address in byAddr.
func netAddr(vm *forewarn.VM) forewarn.NetAddr {
	return forewarn.NetAddr{Network: vm.Network, Addr: vm.IP.Unmap()}
}

// vmNamed returns the VM named name, or nil.
func (inv *inventory) vmNamed(name string) *forewarn.VM {
	if d, ok := inv.defs.Load(name); ok {
		return d.VM
	}
	return nil
}

// def returns the definition of the VM named name, or nil.
func (inv *inventory) def(name string) *forewarn.Definition {
	d, _ := inv.defs.Load(name)
	return d
}

// peersOf returns the scope groups of the VM named name: those of its
// groups that hold it, or a group of itself alone.
func (inv *inventory) peersOf(name string) [][]*forewarn.VM {
	vm := inv.vmNamed(name)
	if vm == nil {
		return nil
	}
	var buf [3]gkey
	out := inv.load(groupKeys(vm, vm.PlacementGroup, buf[:0]))
	if len(out) == 0 {
		out = [][]*forewarn.VM{{vm}}
	}
	return out
}

// servicesOf returns the service groups of the VM named name, and
// whether it has any (a VM of a scale set).
func (inv *inventory) servicesOf(name string) ([][]*forewarn.VM, bool) {
	vm := inv.vmNamed(name)
	if vm == nil || vm.ScaleSet == "" {
		return nil, false
	}
	var buf [3]gkey
	return inv.load(serviceKeys(vm, buf[:0])), true
}

// load returns the groups of keys that have members.
func (inv *inventory) load(keys []gkey) [][]*forewarn.VM {
	out := make([][]*forewarn.VM, 0, len(keys))
	for _, k := range keys {
		if g, ok := inv.groups.Load(k); ok {
			out = append(out, g)
		}
	}
	return out
}

// scaleSetVMs returns the names of the VMs of scale set name, in fleet
// order, and whether it has any.
func (inv *inventory) scaleSetVMs(name string) ([]string, bool) {
	g, ok := inv.groups.Load(gkey{kind: 'S', name: name})
	if !ok {
		return nil, false
	}
	out := make([]string, len(g))
	for i, vm := range g {
		out[i] = vm.Name
	}
	return out, true
}

// scaleSetNames returns the names of the scale sets that have VMs.
func (inv *inventory) scaleSetNames() []string {
	var out []string
	inv.groups.Range(func(k gkey, _ []*forewarn.VM) bool {
		if k.kind == 'S' {
			out = append(out, k.name)
		}
		return true
	})
	slices.Sort(out)
	return out
}

// lookup is forewarn.Index.LookupOn on the inventory.
func (inv *inventory) lookup(network string, addr netip.Addr, p forewarn.Provider) *forewarn.VM {
	if vm, ok := inv.byAddr.Load(forewarn.NetAddr{Network: network, Addr: addr.Unmap()}); ok {
		return vm
	}
	return inv.anyVM[forewarn.NetProvider{Network: network, Provider: p}]
}

// groupKeys appends to k the keys of the scope groups vm belongs to: its
// availability set, its cloud service, and its scale set qualified by
// sub (a placement group or a zone).
func groupKeys(vm *forewarn.VM, sub string, k []gkey) []gkey {
	if vm.AvailabilitySet != "" {
		k = append(k, gkey{kind: 'a', name: vm.AvailabilitySet})
	}
	if vm.CloudService != "" {
		k = append(k, gkey{kind: 'c', name: vm.CloudService})
	}
	if vm.ScaleSet != "" {
		k = append(k, gkey{kind: 's', name: vm.ScaleSet, sub: sub})
	}
	return k
}

// memberKeys returns the keys of every group vm belongs to: its scope
// groups, its service groups and its scale set.
func memberKeys(vm *forewarn.VM) []gkey {
	k := groupKeys(vm, vm.PlacementGroup, make([]gkey, 0, 5))
	if vm.ScaleSet != "" {
		k = append(k, serviceKey(vm), gkey{kind: 'S', name: vm.ScaleSet})
	}
	return k
}

// serviceKey is the key of the service group of vm, a VM of a scale
// set: its whole scale set, whatever its placement groups (seed 004:
// "enabled for your scale set"), within its zone when the scale set
// spans zones (docs/wire-decisions.md).
func serviceKey(vm *forewarn.VM) gkey { return gkey{kind: 'v', name: vm.ScaleSet, sub: vm.Zone} }

// serviceKeys appends to k the keys of the groups whose calls enable vm's
// scheduled events: its availability set or cloud service, should it
// have one, and its scale set's service group.
func serviceKeys(vm *forewarn.VM, k []gkey) []gkey {
	k = groupKeys(vm, "", k)
	return append(k[:len(k)-1], serviceKey(vm)) // the scale set's key, last, replaced
}

// with returns the inventory inv changes into with the definitions defs
// and scale sets sets (a nil value removes), at revision rev. It costs
// the VMs changed and the members of the groups and hosts they leave or
// join, and the whole fleet when a VM of no address changes (anyVM is
// found again).
func (inv *inventory) with(rev int64, defs map[string]*forewarn.Definition, sets map[string]*forewarn.ScaleSet) *inventory {
	next := &inventory{
		rev: rev, defs: inv.defs.Clone(), sets: maps.Clone(inv.sets), nextSeq: inv.nextSeq,
		groups: inv.groups.Clone(), byAddr: inv.byAddr.Clone(), anyVM: inv.anyVM,
		instances: inv.instances.Clone(), hosts: inv.hosts.Clone(), gceVMs: inv.gceVMs, noAddr: inv.noAddr,
		fleet: &lazyFleet{},
	}
	count := func(vm *forewarn.VM, n int) {
		if vm.Provider == forewarn.GCE {
			next.gceVMs += n
		}
		if !vm.IP.IsValid() {
			next.noAddr += n
		}
	}
	for name, ss := range sets {
		if ss == nil {
			delete(next.sets, name)
		} else {
			next.sets[name] = ss
		}
	}

	// The definitions, and the fleet's list in Seq order.
	names := slices.Sorted(maps.Keys(defs))
	var des []cow.Entry[string, *forewarn.Definition]
	var added []*forewarn.Definition
	replaced := map[string]*forewarn.VM{}
	anyChanged := false
	for _, name := range names {
		d, old := defs[name], inv.def(name)
		if old != nil {
			count(old.VM, -1)
		}
		if d != nil {
			count(d.VM, 1)
		}
		if d == nil {
			des = append(des, cow.Entry[string, *forewarn.Definition]{Key: name, Delete: true})
		} else {
			des = append(des, cow.Entry[string, *forewarn.Definition]{Key: name, Value: d})
			next.nextSeq = max(next.nextSeq, d.Seq+1)
			if old == nil {
				added = append(added, d)
			}
		}
		if old != nil {
			replaced[name] = nil
			if d != nil {
				replaced[name] = d.VM
			}
			anyChanged = anyChanged || !old.VM.IP.IsValid()
		}
		anyChanged = anyChanged || d != nil && !d.VM.IP.IsValid()
	}
	next.defs.Apply(des)
	slices.SortFunc(added, func(a, b *forewarn.Definition) int {
		return cmp.Or(cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.VM.Name, b.VM.Name))
	})
	next.list, next.listLen = inv.listWith(replaced, added)
	if len(added) > 0 && inv.listLen > 0 && next.seqOf(added[0].VM) < next.seqOf(inv.last()) {
		// A VM registered again under an older Seq (a store's order):
		// sort the whole list.
		vms := flatten(next.list, next.listLen)
		next.sortBySeq(vms)
		next.list = chunked(vms)
	}
	next.setList = inv.setList
	if len(sets) > 0 {
		next.setList = make([]*forewarn.ScaleSet, 0, len(next.sets))
		for _, name := range slices.Sorted(maps.Keys(next.sets)) {
			next.setList = append(next.setList, next.sets[name])
		}
	}

	// The groups the changed VMs leave or join, rebuilt. A VM's groups
	// are found through its keys (peersOf), so only the groups change.
	touchedKeys := map[gkey]bool{}
	joining := map[gkey][]*forewarn.VM{}
	for _, name := range names {
		if old := inv.def(name); old != nil {
			for _, k := range memberKeys(old.VM) {
				touchedKeys[k] = true
			}
		}
		if d := defs[name]; d != nil {
			for _, k := range memberKeys(d.VM) {
				touchedKeys[k] = true
				joining[k] = append(joining[k], d.VM)
			}
		}
	}
	affected := map[string]bool{}
	regrouped := map[gkey]bool{} // the groups whose members' names changed
	var ges []cow.Entry[gkey, []*forewarn.VM]
	for k := range touchedKeys {
		old, _ := inv.groups.Load(k)
		g := make([]*forewarn.VM, 0, len(old)+len(joining[k]))
		for _, vm := range old {
			affected[vm.Name] = true
			if _, changed := defs[vm.Name]; !changed {
				g = append(g, vm)
			}
		}
		g = append(g, joining[k]...)
		next.sortBySeq(g)
		for _, vm := range g {
			affected[vm.Name] = true
		}
		if len(g) == 0 {
			ges = append(ges, cow.Entry[gkey, []*forewarn.VM]{Key: k, Delete: true})
		} else {
			ges = append(ges, cow.Entry[gkey, []*forewarn.VM]{Key: k, Value: g})
		}
		if !sameNames(old, g) {
			regrouped[k] = true
		}
	}
	next.groups.Apply(ges)
	for _, name := range names {
		affected[name] = true
	}
	next.affected = affected

	// The Azure VMs whose peers changed: new to Azure, in other scope
	// groups, or in a scope group whose members changed.
	next.peersMoved = map[string]bool{}
	var nb, ob [3]gkey
	for name := range affected {
		vm := next.vmNamed(name)
		if vm == nil || vm.Provider != forewarn.Azure {
			continue
		}
		old := inv.vmNamed(name)
		keys := groupKeys(vm, vm.PlacementGroup, nb[:0])
		moved := old == nil || old.Provider != forewarn.Azure || !slices.Equal(keys, groupKeys(old, old.PlacementGroup, ob[:0]))
		for _, k := range keys {
			moved = moved || regrouped[k]
		}
		if moved {
			next.peersMoved[name] = true
		}
	}

	// Addresses: the old ones of the VMs changed go first, so that two
	// VMs may swap theirs.
	var aes []cow.Entry[forewarn.NetAddr, *forewarn.VM]
	for _, name := range names {
		if old := inv.def(name); old != nil && old.VM.IP.IsValid() {
			aes = append(aes, cow.Entry[forewarn.NetAddr, *forewarn.VM]{Key: netAddr(old.VM), Delete: true})
		}
	}
	for _, name := range names {
		if d := defs[name]; d != nil && d.VM.IP.IsValid() {
			aes = append(aes, cow.Entry[forewarn.NetAddr, *forewarn.VM]{Key: netAddr(d.VM), Value: d.VM})
		}
	}
	next.byAddr.Apply(aes)
	var ies []cow.Entry[string, *forewarn.VM]
	for _, name := range names {
		if old := inv.def(name); old != nil && old.VM.Provider == forewarn.AWS {
			ies = append(ies, cow.Entry[string, *forewarn.VM]{Key: old.VM.InstanceID, Delete: true})
		}
	}
	for _, name := range names {
		if d := defs[name]; d != nil && d.VM.Provider == forewarn.AWS {
			ies = append(ies, cow.Entry[string, *forewarn.VM]{Key: d.VM.InstanceID, Value: d.VM})
		}
	}
	next.instances.Apply(ies)
	next.hosts.Apply(inv.hostEntries(names, defs))
	if anyChanged {
		next.anyVM = map[forewarn.NetProvider]*forewarn.VM{}
		for _, vm := range flatten(next.list, next.listLen) {
			k := forewarn.NetProvider{Network: vm.Network, Provider: vm.Provider}
			if !vm.IP.IsValid() && next.anyVM[k] == nil {
				next.anyVM[k] = vm
			}
		}
	}
	return next
}

// hostEntries returns the entries of the hosts index that the change
// defs makes (a nil value removes; names are its keys, sorted): each
// host that a VM leaves or joins gets its VMs' names again, and a host
// left with none goes. A VM that stays on its host touches nothing. It
// costs the VMs changed and the VMs of the hosts they leave or join.
func (inv *inventory) hostEntries(names []string, defs map[string]*forewarn.Definition) []cow.Entry[string, []string] {
	leaving := map[string]map[string]bool{} // by host, the names that leave it
	joining := map[string][]string{}        // by host, the names that join it, sorted
	for _, name := range names {
		from, to := "", ""
		if old := inv.def(name); old != nil {
			from = old.VM.Host
		}
		if d := defs[name]; d != nil {
			to = d.VM.Host
		}
		if from == to {
			continue
		}
		if from != "" {
			if leaving[from] == nil {
				leaving[from] = map[string]bool{}
			}
			leaving[from][name] = true
		}
		if to != "" {
			joining[to] = append(joining[to], name)
		}
	}
	if len(leaving) == 0 && len(joining) == 0 {
		return nil
	}
	touched := slices.Collect(maps.Keys(leaving))
	for host := range joining {
		if leaving[host] == nil {
			touched = append(touched, host)
		}
	}
	hes := make([]cow.Entry[string, []string], 0, len(touched))
	for _, host := range touched {
		old, _ := inv.hosts.Load(host)
		vms := make([]string, 0, len(old)+len(joining[host]))
		for _, name := range old {
			if !leaving[host][name] {
				vms = append(vms, name)
			}
		}
		vms = append(vms, joining[host]...)
		slices.Sort(vms)
		if len(vms) == 0 {
			hes = append(hes, cow.Entry[string, []string]{Key: host, Delete: true})
		} else {
			hes = append(hes, cow.Entry[string, []string]{Key: host, Value: vms})
		}
	}
	return hes
}

// inForce drops what inv holds of the change that derived it (affected,
// peersMoved: every VM, for an inventory built whole) once that change
// has been looked at, and returns inv to be put in force: the inventory
// in force would keep them until the next change. inv must not be in
// force yet.
func (inv *inventory) inForce() *inventory {
	inv.affected, inv.peersMoved = nil, nil
	return inv
}

// sameNames reports whether groups a and b hold VMs of the same names, in
// the same order.
func sameNames(a, b []*forewarn.VM) bool {
	return slices.EqualFunc(a, b, func(x, y *forewarn.VM) bool { return x.Name == y.Name })
}

// conflict returns the error of a change that gives a VM an address on
// its network, or an EC2 instance ID, that another VM keeps: a VM may
// take one only from a VM the same change moves or removes. defs is the
// change (a nil value removes). It costs the VMs the change sets.
func (inv *inventory) conflict(defs map[string]*forewarn.Definition) error {
	addrs := map[forewarn.NetAddr]string{}
	ids := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(defs)) {
		d := defs[name]
		if d == nil {
			continue
		}
		vm := d.VM
		// A VM of no address answers the callers of its network that no
		// other VM's address is; the fleet file allows one per provider
		// and network, and the first in fleet order answers.
		if k := netAddr(vm); k.Addr.IsValid() {
			if other, dup := addrs[k]; dup {
				return addrUsed(name, k, other)
			}
			addrs[k] = name
			if holder, ok := inv.byAddr.Load(k); ok && holder.Name != name {
				if _, moves := defs[holder.Name]; !moves {
					return addrUsed(name, k, holder.Name)
				}
			}
		}
		if vm.Provider != forewarn.AWS || vm.InstanceID == "" {
			continue
		}
		if other, dup := ids[vm.InstanceID]; dup {
			return forewarn.Errorf(forewarn.EINVALID, "VM %s: instanceId %s is already used by %s", strconv.QuoteToASCII(name), vm.InstanceID, other)
		}
		ids[vm.InstanceID] = name
		if holder, ok := inv.instances.Load(vm.InstanceID); ok && holder.Name != name {
			if _, moves := defs[holder.Name]; !moves {
				return forewarn.Errorf(forewarn.EINVALID, "VM %s: instanceId %s is already used by %s", strconv.QuoteToASCII(name), vm.InstanceID, holder.Name)
			}
		}
	}
	return nil
}

// addrUsed is the error of the VM named name whose address k the VM
// named other holds.
func addrUsed(name string, k forewarn.NetAddr, other string) error {
	return forewarn.Errorf(forewarn.EINVALID, "VM %s: ip %s%s is already used by %s",
		strconv.QuoteToASCII(name), k.Addr, forewarn.OnNetwork(k.Network), other)
}

// seqOf returns vm's Seq in inv.
func (inv *inventory) seqOf(vm *forewarn.VM) int64 {
	if d := inv.def(vm.Name); d != nil {
		return d.Seq
	}
	return 0
}

// sortBySeq orders vms by their Seq in inv, then by name. Each VM's Seq
// is looked up once, not at every comparison: a group of 100,000 VMs
// sorted by lookups took most of a restart's inventory build.
func (inv *inventory) sortBySeq(vms []*forewarn.VM) {
	type keyed struct {
		seq int64
		vm  *forewarn.VM
	}
	ks := make([]keyed, len(vms))
	sorted := true
	for i, vm := range vms {
		ks[i] = keyed{inv.seqOf(vm), vm}
		if i > 0 && sorted {
			sorted = cmp.Or(cmp.Compare(ks[i-1].seq, ks[i].seq), cmp.Compare(ks[i-1].vm.Name, vm.Name)) <= 0
		}
	}
	if sorted {
		return
	}
	slices.SortFunc(ks, func(a, b keyed) int {
		return cmp.Or(cmp.Compare(a.seq, b.seq), cmp.Compare(a.vm.Name, b.vm.Name))
	})
	for i, k := range ks {
		vms[i] = k.vm
	}
}

// chunkVMs is the most VMs a chunk of the list holds.
const chunkVMs = 512

// fleetOf returns inv's VMs and scale sets as a forewarn.Fleet, made on
// first use: a change that nobody lists the fleet after costs no copy
// of the list.
func (inv *inventory) fleetOf() *forewarn.Fleet {
	inv.fleet.once.Do(func() {
		inv.fleet.f = forewarn.IndexedFleet(flatten(inv.list, inv.listLen), inv.setList, inv.vmNamed)
	})
	return inv.fleet.f
}

// lazyFleet is an inventory's fleet, made on first use; copies of the
// inventory at another revision share it.
type lazyFleet struct {
	once sync.Once
	f    *forewarn.Fleet
}

// flatten returns the VMs of chunks, n in all, in one slice.
func flatten(chunks [][]*forewarn.VM, n int) []*forewarn.VM {
	out := make([]*forewarn.VM, 0, n)
	for _, c := range chunks {
		out = append(out, c...)
	}
	return out
}

// chunked returns vms in chunks of at most chunkVMs.
func chunked(vms []*forewarn.VM) [][]*forewarn.VM {
	out := make([][]*forewarn.VM, 0, (len(vms)+chunkVMs-1)/chunkVMs)
	for len(vms) > 0 {
		k := min(len(vms), chunkVMs)
		out = append(out, slices.Clip(vms[:k]))
		vms = vms[k:]
	}
	return out
}

// last returns the last VM of inv's list; the list is not empty.
func (inv *inventory) last() *forewarn.VM {
	c := inv.list[len(inv.list)-1]
	return c[len(c)-1]
}

// listWith returns inv's list with the VMs named in replaced replaced
// (nil: removed) and the definitions added appended, in order, and its
// length. It copies the table of chunks and the chunks it changes.
func (inv *inventory) listWith(replaced map[string]*forewarn.VM, added []*forewarn.Definition) ([][]*forewarn.VM, int) {
	chunks := slices.Clone(inv.list)
	n := inv.listLen
	copied := map[int]bool{}
	own := func(ci int) []*forewarn.VM {
		if !copied[ci] {
			chunks[ci] = slices.Clone(chunks[ci])
			copied[ci] = true
		}
		return chunks[ci]
	}
	for name, vm := range replaced {
		ci, pi, ok := inv.position(name)
		if !ok {
			continue
		}
		own(ci)[pi] = vm
		if vm == nil {
			n--
		}
	}
	for ci := range copied {
		chunks[ci] = slices.DeleteFunc(chunks[ci], func(vm *forewarn.VM) bool { return vm == nil })
	}
	for _, d := range added {
		if len(chunks) == 0 || len(chunks[len(chunks)-1]) >= chunkVMs {
			chunks = append(chunks, make([]*forewarn.VM, 0, min(chunkVMs, len(added))))
		} else if last := len(chunks) - 1; !copied[last] && len(chunks[last]) > 0 {
			// The last chunk may be shared with inv: append to a copy.
			chunks[last] = append(make([]*forewarn.VM, 0, chunkVMs), chunks[last]...)
			copied[last] = true
		}
		last := len(chunks) - 1
		chunks[last] = append(chunks[last], d.VM)
		copied[last] = true
		n++
	}
	// Empty chunks go last: copied is by index, so the chunks keep their
	// places until the appends are done.
	return slices.DeleteFunc(chunks, func(c []*forewarn.VM) bool { return len(c) == 0 }), n
}

// position returns where the VM named name is in inv's list: its chunk
// and its place in the chunk.
func (inv *inventory) position(name string) (chunk, at int, ok bool) {
	d := inv.def(name)
	if d == nil {
		return 0, 0, false
	}
	cmpVM := func(vm *forewarn.VM, d *forewarn.Definition) int {
		return cmp.Or(cmp.Compare(inv.seqOf(vm), d.Seq), cmp.Compare(vm.Name, d.VM.Name))
	}
	// The last chunk whose first VM is not after d.
	ci, _ := slices.BinarySearchFunc(inv.list, d, func(c []*forewarn.VM, d *forewarn.Definition) int {
		if cmpVM(c[0], d) <= 0 {
			return -1
		}
		return 1
	})
	ci--
	if ci < 0 {
		return 0, 0, false
	}
	c := inv.list[ci]
	pi, found := slices.BinarySearchFunc(c, d, cmpVM)
	return ci, pi, found && c[pi].Name == name
}

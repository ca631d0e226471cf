package forewarn

import (
	"net/netip"
	"strings"
	"sync"
	"time"
)

// Provider names the metadata API a VM speaks.
type Provider string

// The providers.
const (
	Azure Provider = "azure"
	GCE   Provider = "gce"
	AWS   Provider = "aws"
)

// Title returns the provider's name for people: Azure, Compute Engine
// or EC2.
func (p Provider) Title() string {
	switch p {
	case Azure:
		return "Azure"
	case GCE:
		return "Compute Engine"
	case AWS:
		return "EC2"
	}
	return string(p)
}

// AVM returns "an Azure VM", "a Compute Engine VM" or "an EC2 VM", for
// messages.
func (p Provider) AVM() string {
	t := p.Title()
	if t != "" && strings.ContainsRune("AEIOU", rune(t[0])) {
		return "an " + t + " VM"
	}
	return "a " + t + " VM"
}

// VM is one virtual machine of the fleet.
type VM struct {
	// Name is shown in Resources and in compute/name.
	Name string `json:"name"`
	// IP is the source address the VM's requests come from. The zero
	// value makes the VM answer every caller (the default fleet).
	IP netip.Addr `json:"ip,omitzero"`
	// Network names the network the VM's address is on; "" is the
	// network of requests that reach the server directly. A VM is known
	// by its network and address: VMs of two networks may share one.
	Network string `json:"network,omitempty"`
	// Host names the hypervisor the VM runs on; "" for none. VMs of one
	// host go down together in its maintenance. Unlike Network, it is
	// not part of the VM's identity.
	Host     string   `json:"host,omitempty"`
	Provider Provider `json:"provider"`
	// AvailabilitySet, CloudService and a scale set's PlacementGroup
	// group VMs that see each other's events.
	AvailabilitySet string `json:"availabilitySet,omitempty"`
	CloudService    string `json:"cloudService,omitempty"`
	// ScaleSet and InstanceID place a VM in a scale set; its name is then
	// {ScaleSet}_{InstanceID}. An EC2 VM's InstanceID is its instance ID,
	// i- and 17 hex digits.
	ScaleSet       string `json:"scaleSet,omitempty"`
	InstanceID     string `json:"instanceId,omitempty"`
	PlacementGroup string `json:"placementGroup,omitempty"`
	UpdateDomain   int    `json:"updateDomain"`
	// Spot is an Azure Spot VM (priority: Spot) or a Compute Engine VM
	// with provisioningModel SPOT.
	Spot bool `json:"spot,omitempty"`

	// The Compute Engine keys.

	// OnHostMaintenance is MIGRATE (the default) or TERMINATE.
	OnHostMaintenance string `json:"onHostMaintenance,omitempty"`
	// GPU VMs are never live migrated.
	GPU bool `json:"gpu,omitempty"`
	// Preemptible is the legacy preemptible flag; ProvisioningModel is
	// STANDARD or SPOT.
	Preemptible       bool   `json:"preemptible,omitempty"`
	ProvisioningModel string `json:"provisioningModel,omitempty"`
	// SoleTenant VMs' maintenance-event key always reads NONE.
	SoleTenant bool `json:"soleTenant,omitempty"`
	// Zone is a Compute Engine zone or an EC2 availability zone;
	// MachineType a Compute Engine machine type or an EC2 instance type.
	Zone        string `json:"zone,omitempty"`
	MachineType string `json:"machineType,omitempty"`
	Project     string `json:"project,omitempty"`

	// The EC2 keys.

	// AutoScalingGroup names the VM's Auto Scaling group, if any.
	AutoScalingGroup string `json:"autoScalingGroup,omitempty"`
	// WarmPool is the target lifecycle state of a VM in its group's warm
	// pool, such as Warmed:Stopped; empty for a VM in service.
	WarmPool string `json:"warmPool,omitempty"`
	// SpotInterruptionBehavior is terminate (the default), stop or
	// hibernate, for a Spot VM.
	SpotInterruptionBehavior string `json:"spotInterruptionBehavior,omitempty"`
	// HTTPTokens is optional (IMDSv1 and IMDSv2) or required (IMDSv2
	// only); HopLimit is the IP TTL of a token PUT's answer.
	HTTPTokens string `json:"httpTokens,omitempty"`
	HopLimit   int    `json:"httpPutResponseHopLimit,omitempty"`
	// AMIID, AccountID, SubnetID and VPCID are the image, the owner
	// account, the subnet and the VPC an EC2 VM's metadata names, and
	// SecurityGroups the names of its security groups, one per line, as
	// meta-data/security-groups lists them. Empty, the metadata service
	// uses its defaults.
	AMIID          string `json:"amiId,omitempty"`
	AccountID      string `json:"accountId,omitempty"`
	SecurityGroups string `json:"securityGroups,omitempty"`
	SubnetID       string `json:"subnetId,omitempty"`
	VPCID          string `json:"vpcId,omitempty"`
}

// Evictable reports whether the VM can be evicted (preempted).
func (vm *VM) Evictable() bool { return vm.Spot || vm.Preemptible }

// Region returns the EC2 region of the VM's availability zone: the zone
// without its final letter.
func (vm *VM) Region() string {
	z := vm.Zone
	if n := len(z); n > 1 && z[n-1] >= 'a' && z[n-1] <= 'z' {
		return z[:n-1]
	}
	return z
}

// MigrateAllowed reports whether a Compute Engine VM may be live
// migrated: not with a GPU, and not when it is set to TERMINATE.
func (vm *VM) MigrateAllowed() bool {
	return !vm.GPU && vm.OnHostMaintenance != "TERMINATE"
}

// Fleet is the set of VMs a server answers for.
type Fleet struct {
	VMs       []*VM       `json:"vms"`
	ScaleSets []*ScaleSet `json:"scaleSets,omitempty"`

	// byName indexes VMs on first use; the VMs must not change after.
	// lookup, when set, is the index of a fleet built with IndexedFleet.
	once   sync.Once
	byName map[string]*VM
	lookup func(string) *VM
}

// IndexedFleet returns the fleet of vms and sets whose VM method asks
// lookup, an index of vms by name that the caller keeps (and must keep
// true to vms), rather than building its own on first use.
func IndexedFleet(vms []*VM, sets []*ScaleSet, lookup func(string) *VM) *Fleet {
	return &Fleet{VMs: vms, ScaleSets: sets, lookup: lookup}
}

// ScaleSet holds the settings of one scale set.
type ScaleSet struct {
	Name string `json:"name"`
	// TerminateTimeout is the Terminate notice, the scale set's
	// notBeforeTimeout: 5 to 15 minutes.
	TerminateTimeout time.Duration `json:"terminateNotBeforeTimeout"`
	// DisableTerminateNotifications turns the scale set's Terminate
	// notifications off: a delete then raises no Terminate event.
	DisableTerminateNotifications bool `json:"disableTerminateNotifications,omitempty"`
}

// Terminate notice bounds and default (Azure's notBeforeTimeout).
const (
	MinTerminateTimeout     = 5 * time.Minute
	MaxTerminateTimeout     = 15 * time.Minute
	DefaultTerminateTimeout = MinTerminateTimeout
)

// ScaleSetSettings returns the Terminate settings of the scale set named
// name as the fleet gives them: its configured timeout and opt-in, or
// the defaults (PT5M, notifications on).
func (f *Fleet) ScaleSetSettings(name string) ScaleSetRecord {
	r := ScaleSetRecord{TerminateTimeout: DefaultTerminateTimeout, TerminateNotifications: true}
	for _, s := range f.ScaleSets {
		if s.Name == name {
			if s.TerminateTimeout > 0 {
				r.TerminateTimeout = s.TerminateTimeout
			}
			r.TerminateNotifications = !s.DisableTerminateNotifications
		}
	}
	return r
}

// Scope returns the VMs of the availability set, cloud service or scale
// set named name, and which kind of scope it is. A name used by two
// kinds is an EINVALID error; an unknown one ENOTFOUND.
func (f *Fleet) Scope(name string) (kind string, vms []*VM, err error) {
	kinds := map[string][]*VM{}
	for _, vm := range f.VMs {
		switch name {
		case vm.AvailabilitySet:
			kinds["availability set"] = append(kinds["availability set"], vm)
		case vm.CloudService:
			kinds["cloud service"] = append(kinds["cloud service"], vm)
		case vm.ScaleSet:
			kinds["scale set"] = append(kinds["scale set"], vm)
		}
	}
	switch len(kinds) {
	case 0:
		return "", nil, Errorf(ENOTFOUND, "no availability set, cloud service or scale set is named %q", name)
	case 1:
		for k, v := range kinds {
			return k, v, nil
		}
	}
	return "", nil, Errorf(EINVALID, "scope %q is ambiguous: it names more than one availability set, cloud service or scale set", name)
}

// VM returns the VM named name, or nil.
func (f *Fleet) VM(name string) *VM {
	if f.lookup != nil {
		return f.lookup(name)
	}
	f.once.Do(func() {
		f.byName = make(map[string]*VM, len(f.VMs))
		for _, vm := range f.VMs {
			if _, dup := f.byName[vm.Name]; !dup {
				f.byName[vm.Name] = vm
			}
		}
	})
	return f.byName[name]
}

// SharesScope reports whether a VM sees the events of VM b: a VM always
// sees its own, and VMs of one availability set, one cloud service, or
// one placement group of a scale set see each other's. A standalone VM,
// zonal or not, sees only its own.
func SharesScope(a, b *VM) bool {
	switch {
	case a.Name == b.Name:
		return true
	case a.AvailabilitySet != "" && a.AvailabilitySet == b.AvailabilitySet:
		return true
	case a.CloudService != "" && a.CloudService == b.CloudService:
		return true
	}
	return a.ScaleSet != "" && a.ScaleSet == b.ScaleSet && a.PlacementGroup == b.PlacementGroup
}

// Visible reports whether vm sees event e: it is one of the event's
// Resources or shares a scope with one of them.
func (f *Fleet) Visible(vm *VM, e *Event) bool {
	for _, r := range e.Resources {
		if rv := f.VM(r); rv != nil && SharesScope(vm, rv) {
			return true
		}
	}
	return false
}

// Index maps (network, source address) to VMs for request routing.
type Index struct {
	byAddr map[NetAddr]*VM
	any    map[NetProvider]*VM
}

// NetAddr is a source address on a network: what identifies a VM.
type NetAddr struct {
	Network string
	Addr    netip.Addr
}

// OnNetwork returns " on network NAME", for messages about an address
// on network, or "" for network "".
func OnNetwork(network string) string {
	if network == "" {
		return ""
	}
	return " on network " + network
}

// NetProvider is a provider's API on a network: what a VM of no address
// answers for.
type NetProvider struct {
	Network  string
	Provider Provider
}

// NewIndex indexes f by network and source address. A VM with no
// address answers every caller of its provider's API on its network
// whose address belongs to no other VM.
func NewIndex(f *Fleet) *Index {
	x := &Index{byAddr: make(map[NetAddr]*VM, len(f.VMs)), any: map[NetProvider]*VM{}}
	for _, vm := range f.VMs {
		if !vm.IP.IsValid() {
			k := NetProvider{vm.Network, vm.Provider}
			if x.any[k] == nil {
				x.any[k] = vm
			}
			continue
		}
		x.byAddr[NetAddr{vm.Network, vm.IP.Unmap()}] = vm
	}
	return x
}

// Lookup is LookupOn for network "", the network of requests that
// reach the server directly.
func (x *Index) Lookup(addr netip.Addr, p Provider) *VM { return x.LookupOn("", addr, p) }

// LookupOn returns the VM of network whose requests come from addr, or
// else the VM of network that answers every caller of provider p's API,
// or nil. The VM found by address may be of another provider; the
// caller decides what that means.
func (x *Index) LookupOn(network string, addr netip.Addr, p Provider) *VM {
	if vm, ok := x.byAddr[NetAddr{network, addr.Unmap()}]; ok {
		return vm
	}
	return x.any[NetProvider{network, p}]
}

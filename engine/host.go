package engine

import (
	"cmp"
	"slices"

	"github.com/forewarn/forewarn"
)

// HostInfo is one host of the fleet, the hypervisor its VMs name in
// their host key, and its VMs.
type HostInfo struct {
	Name string `json:"name"`
	// VMs names the host's VMs, sorted.
	VMs []string `json:"vms"`
	// Session, State and Reason are where the host is in the newest
	// maintenance session that names it, as HostStatus gives it; empty
	// when none does. Hosts leaves them empty: the operator API fills
	// them in.
	Session string             `json:"session,omitempty"`
	State   forewarn.HostState `json:"state,omitempty"`
	Reason  string             `json:"reason,omitempty"`
}

// Hosts returns every host that a VM of the inventory in force names,
// sorted by name, each with its VMs. It reads the inventory's host
// index without a lock, in O(hosts × log hosts + VMs on hosts); the
// slices are the caller's.
func (e *Engine) Hosts() []HostInfo {
	inv := e.cur()
	out := make([]HostInfo, 0, inv.hosts.Len())
	inv.hosts.Range(func(name string, vms []string) bool {
		out = append(out, HostInfo{Name: name, VMs: slices.Clone(vms)})
		return true
	})
	slices.SortFunc(out, func(a, b HostInfo) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// HostVMs returns the names of the VMs of the host named name in the
// inventory in force, sorted, and reports whether a VM names that host.
// It costs the host's VMs, not the fleet's; the slice is the caller's.
func (e *Engine) HostVMs(name string) ([]string, bool) {
	vms, ok := e.cur().hosts.Load(name)
	return slices.Clone(vms), ok
}

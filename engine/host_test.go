package engine_test

import (
	"fmt"
	"net/netip"
	"reflect"
	"testing"
	"testing/synctest"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

// TestHosts: the engine's index of hosts follows every change of the
// inventory (a VM added on a host, moved to another, off every host,
// removed, a change that leaves its host alone) on the replica that
// made it, on another that follows the store, and on one that loads it.
func TestHosts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := mem.New()
		a := newEngine(t, store, false)
		b := newEngine(t, store, false)
		if hs := a.Hosts(); hs == nil || len(hs) != 0 {
			t.Fatalf("Hosts of a fleet of no host = %#v, want an empty list", hs)
		}
		if vms, ok := a.HostVMs("hv1"); ok || vms != nil {
			t.Fatalf("HostVMs(hv1) of a fleet of no host = %v, %v", vms, ok)
		}
		vm := func(name, host string, last byte) *forewarn.VM {
			return &forewarn.VM{Name: name, Provider: forewarn.Azure, IP: netip.AddrFrom4([4]byte{198, 18, 3, last}), Host: host}
		}
		type hostList []engine.HostInfo
		for _, c := range []struct {
			what string
			ch   engine.InventoryChange
			want hostList
		}{
			{"add", engine.InventoryChange{Set: []*forewarn.VM{vm("h_b", "hv1", 2), vm("h_a", "hv1", 1), vm("h_c", "hv2", 3), vm("h_d", "", 4)}},
				hostList{{Name: "hv1", VMs: []string{"h_a", "h_b"}}, {Name: "hv2", VMs: []string{"h_c"}}}},
			{"move h_a to hv2", engine.InventoryChange{Set: []*forewarn.VM{vm("h_a", "hv2", 1)}},
				hostList{{Name: "hv1", VMs: []string{"h_b"}}, {Name: "hv2", VMs: []string{"h_a", "h_c"}}}},
			{"change h_a's address, not its host", engine.InventoryChange{Set: []*forewarn.VM{vm("h_a", "hv2", 11)}},
				hostList{{Name: "hv1", VMs: []string{"h_b"}}, {Name: "hv2", VMs: []string{"h_a", "h_c"}}}},
			{"remove h_b, hv1's last VM", engine.InventoryChange{Remove: []string{"h_b"}},
				hostList{{Name: "hv2", VMs: []string{"h_a", "h_c"}}}},
			{"h_a to a new host, h_c off every host, h_d onto hv2, h_e added on hv2", engine.InventoryChange{
				Set: []*forewarn.VM{vm("h_a", "hv3", 11), vm("h_c", "", 3), vm("h_d", "hv2", 4), vm("h_e", "hv2", 5)}},
				hostList{{Name: "hv2", VMs: []string{"h_d", "h_e"}}, {Name: "hv3", VMs: []string{"h_a"}}}},
			{"a VM of the fleet file joins hv3", engine.InventoryChange{Set: []*forewarn.VM{{Name: "solo", Provider: forewarn.Azure, Spot: true, Host: "hv3"}}},
				hostList{{Name: "hv2", VMs: []string{"h_d", "h_e"}}, {Name: "hv3", VMs: []string{"h_a", "solo"}}}},
		} {
			if _, err := a.ChangeInventory(t.Context(), c.ch); err != nil {
				t.Fatalf("%s: %v", c.what, err)
			}
			synctest.Wait()
			for i, e := range []*engine.Engine{a, b} {
				if got := e.Hosts(); !reflect.DeepEqual(got, []engine.HostInfo(c.want)) {
					t.Errorf("%s: replica %d: Hosts = %v, want %v", c.what, i, got, c.want)
				}
				for _, h := range c.want {
					if vms, ok := e.HostVMs(h.Name); !ok || !reflect.DeepEqual(vms, h.VMs) {
						t.Errorf("%s: replica %d: HostVMs(%s) = %v, %v; want %v", c.what, i, h.Name, vms, ok, h.VMs)
					}
				}
			}
		}
		if vms, ok := a.HostVMs("hv1"); ok || vms != nil {
			t.Errorf("HostVMs(hv1) once its VMs left = %v, %v", vms, ok)
		}

		// What a caller does with the lists is its own business.
		hs := a.Hosts()
		hs[0].VMs[0] = "changed"
		vms, _ := a.HostVMs("hv3")
		vms[0] = "changed"
		want := []engine.HostInfo{{Name: "hv2", VMs: []string{"h_d", "h_e"}}, {Name: "hv3", VMs: []string{"h_a", "solo"}}}
		if got := a.Hosts(); !reflect.DeepEqual(got, want) {
			t.Errorf("Hosts after the caller changed its copies = %v", got)
		}

		// An engine that loads the store builds the same index.
		c, err := engine.New(t.Context(), engine.Config{Store: store})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if got := c.Hosts(); !reflect.DeepEqual(got, want) {
			t.Errorf("Hosts of an engine started on the store = %v, want %v", got, want)
		}
	})
}

// TestHostsMany: 1,000 hosts of 10 VMs each, then every VM moved to the
// next host in one change: each host ends with the VMs of the one
// before it.
func TestHostsMany(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, mem.New(), false)
		const hosts, per = 1000, 10
		vms := make([]*forewarn.VM, 0, hosts*per)
		for i := range hosts * per {
			vms = append(vms, &forewarn.VM{Name: fmt.Sprintf("vm%05d", i), Provider: forewarn.Azure,
				IP: netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)}), Host: fmt.Sprintf("hv%04d", i/per)})
		}
		if _, err := e.ChangeInventory(t.Context(), engine.InventoryChange{Set: vms}); err != nil {
			t.Fatal(err)
		}
		if hs := e.Hosts(); len(hs) != hosts || hs[7].Name != "hv0007" || len(hs[7].VMs) != per || hs[7].VMs[0] != "vm00070" {
			t.Fatalf("%d hosts; the eighth %+v", len(hs), hs[7])
		}
		for i, vm := range vms {
			moved := *vm
			moved.Host = fmt.Sprintf("hv%04d", (i/per+1)%hosts)
			vms[i] = &moved
		}
		if _, err := e.ChangeInventory(t.Context(), engine.InventoryChange{Set: vms}); err != nil {
			t.Fatal(err)
		}
		hs := e.Hosts()
		if len(hs) != hosts {
			t.Fatalf("%d hosts after the move, want %d", len(hs), hosts)
		}
		for i, h := range hs {
			from := (i + hosts - 1) % hosts
			if len(h.VMs) != per || h.VMs[0] != fmt.Sprintf("vm%05d", from*per) || h.VMs[per-1] != fmt.Sprintf("vm%05d", from*per+per-1) {
				t.Fatalf("host %s after the move: %v, want the VMs of hv%04d", h.Name, h.VMs, from)
			}
		}
	})
}

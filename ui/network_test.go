package ui_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/ui"
)

// TestFleetNetworks: the VM table has a network column once a VM of the
// fleet names its network, and a host column (after it) once one names
// its host ("–" for the VMs of none); the VM view a network line and a
// host line for a VM that has them.
func TestFleetNetworks(t *testing.T) {
	hs := newHarness(t, ui.Config{})
	if body := hs.get200(t, "/ui/fragment/fleet"); strings.Contains(body, "network") || strings.Contains(body, "<th>host</th>") {
		t.Fatalf("a fleet of no network or host shows a network or host column:\n%s", body)
	}
	for _, c := range []struct {
		vm   *forewarn.VM
		want []string
	}{
		{&forewarn.VM{Name: "onhv_0", IP: netip.MustParseAddr("198.18.9.8"), Host: "hv-01", Provider: forewarn.Azure},
			[]string{"<th>VM</th><th>host</th><th>UD</th>", `<td class="host">hv-01</td>`, `<td class="host">–</td>`}},
		{&forewarn.VM{Name: "blue_0", IP: netip.MustParseAddr("198.18.9.9"), Network: "blue", Provider: forewarn.Azure},
			[]string{"<th>VM</th><th>network</th><th>host</th><th>UD</th>", "<td class=\"network\">blue</td>\n<td class=\"host\">–</td>",
				"<td class=\"network\">–</td>\n<td class=\"host\">hv-01</td>"}},
	} {
		if _, err := hs.eng.ChangeInventory(t.Context(), engine.InventoryChange{Set: []*forewarn.VM{c.vm}}); err != nil {
			t.Fatal(err)
		}
		body := hs.get200(t, "/ui/fragment/fleet")
		for _, want := range c.want {
			if !strings.Contains(body, want) {
				t.Errorf("with %s, the fleet fragment lacks %s:\n%s", c.vm.Name, want, body)
			}
		}
	}
	if body := hs.get200(t, "/ui/vm/blue_0"); !strings.Contains(body, "<dt>network</dt><dd>blue</dd>\n<dt>group</dt>") {
		t.Errorf("blue_0's view lacks its network, or shows a host:\n%s", body)
	}
	if body := hs.get200(t, "/ui/vm/onhv_0"); !strings.Contains(body, "<dt>address</dt><dd>198.18.9.8</dd>\n<dt>host</dt><dd>hv-01</dd>") {
		t.Errorf("onhv_0's view lacks its host:\n%s", body)
	}
	if body := hs.get200(t, "/ui/vm/web_0"); strings.Contains(body, "<dt>network</dt>") || strings.Contains(body, "<dt>host</dt>") {
		t.Errorf("web_0's view shows a network or host it does not have:\n%s", body)
	}
}

// get200 is get that fails t unless the answer is 200.
func (hs *harness) get200(t *testing.T, path string) string {
	t.Helper()
	code, _, body := hs.get(t, path)
	if code != 200 {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	return body
}

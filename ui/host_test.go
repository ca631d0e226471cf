package ui_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/ui"
)

// TestFleetHosts: the VM table has a host column once a VM of the fleet
// names its host, after the network column ("–" for the VMs of none),
// and the VM view a host line for a VM that has one.
func TestFleetHosts(t *testing.T) {
	hs := newHarness(t, ui.Config{})
	if body := hs.get200(t, "/ui/fragment/fleet"); strings.Contains(body, "<th>host</th>") || strings.Contains(body, `class="host"`) {
		t.Fatalf("a fleet of no host shows a host column:\n%s", body)
	}
	onhv := &forewarn.VM{Name: "onhv_0", IP: netip.MustParseAddr("198.18.9.8"), Host: "hv-01", Provider: forewarn.Azure}
	if _, err := hs.eng.ChangeInventory(t.Context(), engine.InventoryChange{Set: []*forewarn.VM{onhv}}); err != nil {
		t.Fatal(err)
	}
	body := hs.get200(t, "/ui/fragment/fleet")
	for _, want := range []string{"<th>VM</th><th>host</th><th>UD</th>", `<td class="host">hv-01</td>`, `<td class="host">–</td>`} {
		if !strings.Contains(body, want) {
			t.Errorf("the fleet fragment lacks %s:\n%s", want, body)
		}
	}
	blue := &forewarn.VM{Name: "blue_0", IP: netip.MustParseAddr("198.18.9.9"), Network: "blue", Host: "hv-02", Provider: forewarn.Azure}
	if _, err := hs.eng.ChangeInventory(t.Context(), engine.InventoryChange{Set: []*forewarn.VM{blue}}); err != nil {
		t.Fatal(err)
	}
	body = hs.get200(t, "/ui/fragment/fleet")
	for _, want := range []string{"<th>VM</th><th>network</th><th>host</th><th>UD</th>", "<td class=\"network\">blue</td>\n<td class=\"host\">hv-02</td>"} {
		if !strings.Contains(body, want) {
			t.Errorf("the fleet fragment lacks %s:\n%s", want, body)
		}
	}
	if body := hs.get200(t, "/ui/vm/blue_0"); !strings.Contains(body, "<dt>network</dt><dd>blue</dd>\n<dt>host</dt><dd>hv-02</dd>") {
		t.Errorf("blue_0's view lacks its host:\n%s", body)
	}
	if body := hs.get200(t, "/ui/vm/web_0"); strings.Contains(body, "<dt>host</dt>") {
		t.Errorf("web_0's view shows a host it does not have:\n%s", body)
	}
}

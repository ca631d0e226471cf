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
// fleet names its network ("–" for the VMs of none), and the VM view a
// network line for a VM that has one.
func TestFleetNetworks(t *testing.T) {
	hs := newHarness(t, ui.Config{})
	if body := hs.get200(t, "/ui/fragment/fleet"); strings.Contains(body, "network") {
		t.Fatalf("a fleet of no network shows a network column:\n%s", body)
	}
	blue := &forewarn.VM{Name: "blue_0", IP: netip.MustParseAddr("198.18.9.9"), Network: "blue", Provider: forewarn.Azure}
	if _, err := hs.eng.ChangeInventory(t.Context(), engine.InventoryChange{Set: []*forewarn.VM{blue}}); err != nil {
		t.Fatal(err)
	}
	body := hs.get200(t, "/ui/fragment/fleet")
	for _, want := range []string{"<th>VM</th><th>network</th><th>UD</th>", `<td class="network">blue</td>`, `<td class="network">–</td>`} {
		if !strings.Contains(body, want) {
			t.Errorf("the fleet fragment lacks %s:\n%s", want, body)
		}
	}
	if body := hs.get200(t, "/ui/vm/blue_0"); !strings.Contains(body, "<dt>network</dt><dd>blue</dd>") {
		t.Errorf("blue_0's view lacks its network:\n%s", body)
	}
	if body := hs.get200(t, "/ui/vm/web_0"); strings.Contains(body, "<dt>network</dt>") {
		t.Errorf("web_0's view shows a network it does not have:\n%s", body)
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

package ui_test

import (
	"strings"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/ui"
)

// TestStreamFollowsTheInventory: a VM added to the inventory after the
// dashboard was built appears in the next push of the fleet, and a VM
// removed leaves it.
func TestStreamFollowsTheInventory(t *testing.T) {
	hs := newHarness(t, ui.Config{})
	_, ch := hs.stream(t, "")
	next(t, ch, "fleet", 5*time.Second, func(d string) bool {
		return strings.Contains(d, `data-matched="7"`) && !strings.Contains(d, "late_0")
	})
	if _, err := hs.eng.ChangeInventory(t.Context(), engine.InventoryChange{
		Set: []*forewarn.VM{{Name: "late_0", Provider: forewarn.GCE, Zone: "europe-west1-b"}}}); err != nil {
		t.Fatal(err)
	}
	next(t, ch, "fleet", 2*time.Second, func(d string) bool {
		return strings.Contains(d, `data-matched="8"`) && strings.Contains(d, "late_0")
	})
	if _, err := hs.eng.ChangeInventory(t.Context(), engine.InventoryChange{Remove: []string{"late_0", "gce_0"}}); err != nil {
		t.Fatal(err)
	}
	next(t, ch, "fleet", 2*time.Second, func(d string) bool {
		return strings.Contains(d, `data-matched="6"`) && !strings.Contains(d, "late_0") && !strings.Contains(d, "gce_0")
	})
}

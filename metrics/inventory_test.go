package metrics_test

import (
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
	"github.com/forewarn/forewarn/metrics"
	"github.com/forewarn/forewarn/metrics/metricstest"
)

// TestEnabledVMsFollowTheInventory: forewarn_vms_enabled, read from the
// engine at each scrape, counts a VM added at run time once it calls,
// and no longer counts one removed.
func TestEnabledVMsFollowTheInventory(t *testing.T) {
	ctx := t.Context()
	eng, err := engine.New(ctx, engine.Config{Store: mem.New(), Fleet: &forewarn.Fleet{VMs: []*forewarn.VM{{Name: "a", Provider: forewarn.Azure}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	m := metrics.New("mem")
	m.Watch(eng)
	eng.NoteRequest("a")
	if got := metricstest.Value(t, m, "forewarn_vms_enabled"); got != 1 {
		t.Fatalf("forewarn_vms_enabled %v at start, want 1", got)
	}
	if _, err := eng.ChangeInventory(ctx, engine.InventoryChange{Set: []*forewarn.VM{{Name: "b", Provider: forewarn.Azure}}}); err != nil {
		t.Fatal(err)
	}
	eng.NoteRequest("b")
	if got := metricstest.Value(t, m, "forewarn_vms_enabled"); got != 2 {
		t.Fatalf("forewarn_vms_enabled %v once b, added, called; want 2", got)
	}
	if _, err := eng.ChangeInventory(ctx, engine.InventoryChange{Remove: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	if got := metricstest.Value(t, m, "forewarn_vms_enabled"); got != 1 {
		t.Fatalf("forewarn_vms_enabled %v once a was removed; want 1", got)
	}
}

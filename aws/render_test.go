package aws

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
)

// TestListsShared: VMs that list the same event versions share one
// rendering of their scheduled events and of their history, whatever the
// number of events, and a VM with a different list gets its own.
func TestListsShared(t *testing.T) {
	f := &forewarn.Fleet{}
	for i := range 4 {
		f.VMs = append(f.VMs, benchVM(i, netip.AddrFrom4([4]byte{127, 0, 3, byte(i + 1)}), "optional"))
	}
	e, s := benchEngine(t, f) // one event naming all four
	ctx := context.Background()
	all := []string{"vm000000", "vm000001", "vm000002", "vm000003"}
	second, err := e.Create(ctx, engine.Spec{Type: forewarn.SystemReboot, VMs: all, Notice: 48 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []forewarn.EventType{forewarn.InstanceReboot, forewarn.InstanceStop} {
		ev, err := e.Create(ctx, engine.Spec{Type: typ, VMs: all, Notice: 48 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Cancel(ctx, ev.ID); err != nil {
			t.Fatal(err)
		}
	}
	// vm3 alone has one more ended event.
	own, err := e.Create(ctx, engine.Spec{Type: forewarn.InstanceStop, VMs: []string{"vm000003"}, Notice: 48 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Cancel(ctx, own.ID); err != nil {
		t.Fatal(err)
	}
	d := func(i int) *doc { return s.docs[fmt.Sprintf("vm%06d", i)].Load() }
	for i := 1; i < 3; i++ {
		if &d(i).scheduled[0] != &d(0).scheduled[0] || &d(i).history[0] != &d(0).history[0] {
			t.Errorf("vm%d does not share vm0's renderings", i)
		}
	}
	if &d(3).history[0] == &d(0).history[0] || &d(3).scheduled[0] != &d(0).scheduled[0] {
		t.Error("vm3, with one more ended event, shares vm0's history (or not its scheduled events)")
	}
	if string(d(3).history) == string(d(0).history) || len(e.View("vm000000").History) != 2 || len(e.View("vm000003").History) != 3 {
		t.Errorf("histories: vm0 %d, vm3 %d events", len(e.View("vm000000").History), len(e.View("vm000003").History))
	}
	if !contains(string(d(0).scheduled), EventID(second.ID)) {
		t.Errorf("vm0's scheduled events lack %s", EventID(second.ID))
	}
}

// TestHistoryBounded: a VM's history keeps its newest MaxHistory events.
func TestHistoryBounded(t *testing.T) {
	f := &forewarn.Fleet{VMs: []*forewarn.VM{benchVM(0, netip.MustParseAddr("127.0.3.1"), "optional")}}
	e, s := benchEngine(t, f)
	ctx := context.Background()
	var last string
	for range engine.MaxHistory + 5 {
		ev, err := e.Create(ctx, engine.Spec{Type: forewarn.InstanceStop, VMs: []string{"vm000000"}, Notice: 48 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Cancel(ctx, ev.ID); err != nil {
			t.Fatal(err)
		}
		last = ev.ID
	}
	h := e.View("vm000000").History
	if len(h) != engine.MaxHistory || h[len(h)-1].ID != last {
		t.Fatalf("history holds %d events, the last %s; want %d ending in %s", len(h), h[len(h)-1].ID, engine.MaxHistory, last)
	}
	if got := string(s.docs["vm000000"].Load().history); len(got) < 100 || !contains(got, EventID(last)) {
		t.Fatalf("rendered history lacks the newest event %s", EventID(last))
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

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

// TestListsOwn: each EC2 VM is a scope group of its own, so a request
// naming several VMs makes an event each (engine.CreateAll), and each
// VM's scheduled events and history list its own events only: no VM
// learns another's event IDs.
func TestListsOwn(t *testing.T) {
	f := &forewarn.Fleet{}
	for i := range 4 {
		f.VMs = append(f.VMs, benchVM(i, netip.AddrFrom4([4]byte{127, 0, 3, byte(i + 1)}), "optional"))
	}
	e, s := benchEngine(t, f) // one system-maintenance event each
	ctx := context.Background()
	all := []string{"vm000000", "vm000001", "vm000002", "vm000003"}
	reboots, err := e.CreateAll(ctx, engine.Spec{Type: forewarn.SystemReboot, VMs: all, Notice: 48 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if len(reboots) != 4 {
		t.Fatalf("%d events for 4 EC2 VMs, want 4", len(reboots))
	}
	stops, err := e.CreateAll(ctx, engine.Spec{Type: forewarn.InstanceStop, VMs: all, Notice: 48 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range stops {
		if err := e.Cancel(ctx, ev.ID); err != nil {
			t.Fatal(err)
		}
	}
	d := func(i int) *doc { return s.slots.Load(fmt.Sprintf("vm%06d", i)).doc.Load() }
	for i := range 4 {
		for j := range 4 {
			has := contains(string(d(i).scheduled.bytes()), EventID(reboots[j].ID))
			ended := contains(string(d(i).history.bytes()), EventID(stops[j].ID))
			if has != (i == j) || ended != (i == j) {
				t.Errorf("vm%d lists vm%d's reboot %v, its canceled stop %v", i, j, has, ended)
			}
		}
		if n := len(e.View(all[i]).History); n != 1 {
			t.Errorf("vm%d's history holds %d events, want 1", i, n)
		}
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
	if got := string(s.slots.Load("vm000000").doc.Load().history.bytes()); len(got) < 100 || !contains(got, EventID(last)) {
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

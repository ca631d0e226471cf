package gce

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

// benchViews returns the views of n GCE VMs before and after a
// maintenance event announced to each of them.
func benchViews(b *testing.B, n int) (before, after []*engine.View) {
	b.Helper()
	fleet := &forewarn.Fleet{}
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("vm%d", i)
		fleet.VMs = append(fleet.VMs, &forewarn.VM{Name: names[i], IP: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}),
			Provider: forewarn.GCE, OnHostMaintenance: "MIGRATE", Zone: "us-central1-a", MachineType: "e2-standard-2", Project: "forewarn-project"})
	}
	e, err := engine.New(b.Context(), engine.Config{Store: mem.New(), Fleet: fleet})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	for _, name := range names {
		before = append(before, e.View(name))
	}
	if _, err := e.CreateAll(b.Context(), engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: names, Notice: time.Hour}); err != nil {
		b.Fatal(err)
	}
	for _, name := range names {
		after = append(after, e.View(name))
	}
	return before, after
}

// BenchmarkRenderFresh renders a VM's first document, as NewServer does
// for every VM of the fleet at start.
func BenchmarkRenderFresh(b *testing.B) {
	before, _ := benchViews(b, 1024)
	c := &renderCache{}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		render(before[i%len(before)], nil, c)
		i++
	}
}

// BenchmarkRenderChanged renders a VM's document after a maintenance
// event is announced to it, as a fleet-wide event does for every VM.
func BenchmarkRenderChanged(b *testing.B) {
	before, after := benchViews(b, 1024)
	c := &renderCache{}
	prev := make([]*doc, len(before))
	for i, v := range before {
		prev[i] = render(v, nil, c)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if render(after[i%len(after)], prev[i%len(prev)], c) == nil {
			b.Fatal("no change rendered")
		}
		i++
	}
}

// BenchmarkRenderFreshRead renders a VM's first document and reads its
// name and its recursive root, as a guest agent's first requests do.
func BenchmarkRenderFreshRead(b *testing.B) {
	before, _ := benchViews(b, 1024)
	c := &renderCache{}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		d := render(before[i%len(before)], nil, c)
		d.node("instance/name").ready()
		d.node("").ready()
		i++
	}
}

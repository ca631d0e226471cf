package gce

import (
	"maps"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
)

// TestRenderIsLazy checks what is rendered when: a document holds its
// dynamic keys from the start; the static nodes wait for the first
// request for one of them and are shared by the definition's later
// documents; the directories above the dynamic keys wait for the first
// request for either, and their recursive forms for the first read of
// them.
func TestRenderIsLazy(t *testing.T) {
	c := &renderCache{}
	vm := &forewarn.VM{Name: "vm", Provider: forewarn.GCE, Zone: "us-central1-a", MachineType: "e2-standard-2", Project: "p"}
	d := render(&engine.View{VM: vm}, nil, c)
	for _, k := range dynamicKeys {
		if n := d.node(k); n == nil || n.etag == nil {
			t.Fatalf("%s not rendered with its document", k)
		}
	}
	if !d.has("instance/name") || !d.has("instance/scheduling/") || d.has("instance/nothing") {
		t.Errorf("has answers wrongly")
	}
	if d.statics.nodes.Load() != nil || d.dirs.Load() != nil {
		t.Fatalf("reading the dynamic keys rendered more")
	}
	if n := d.node("instance/name"); string(n.text) != "vm" {
		t.Fatalf("instance/name = %q", n.text)
	}
	if d.statics.nodes.Load() == nil || d.dirs.Load() != nil {
		t.Fatalf("reading a static key: static nodes %v, directories %v", d.statics.nodes.Load() != nil, d.dirs.Load() != nil)
	}
	root := d.node("")
	if root.recursive != nil || string(root.text) != "instance/\nproject/\n" {
		t.Fatalf("root: recursive %q, listing %q", root.recursive, root.text)
	}
	if root.ready().recursive == nil || root.etag == nil {
		t.Fatalf("root's recursive form not filled on first use")
	}
	if d.node("") != root || d.node("instance/") != &d.dirs.Load()[0] {
		t.Fatalf("a document's directories made twice")
	}

	next := render(&engine.View{VM: vm, Preempted: true}, d, c)
	if next == nil || next.statics != d.statics || next.dirs.Load() != nil {
		t.Fatalf("a change of view did not keep the static nodes, or made directories")
	}
	if got := string(next.node("instance/").ready().recursive); !strings.Contains(got, `"preempted":"TRUE"`) {
		t.Errorf("instance/ of the next document does not show its value: %s", got)
	}
	if render(&engine.View{VM: vm, Preempted: true}, next, c) != nil {
		t.Errorf("a view changing nothing rendered a document")
	}
}

// TestLayoutIsEveryTrees checks that one layout serves every VM: the
// tree buildTree makes has the same paths whatever the VM and values.
func TestLayoutIsEveryTrees(t *testing.T) {
	want := slices.Sorted(maps.Keys(layout.index))
	vms := []*forewarn.VM{
		{Name: "a", Zone: "z", Project: "p", OnHostMaintenance: "MIGRATE"},
		{Name: "b", Spot: true, Preemptible: true, GPU: true, SoleTenant: true, OnHostMaintenance: "TERMINATE"},
	}
	ups := []map[string]string{nil, noUpcoming, upcomingKey{start: 1, end: 2}.fields()}
	for _, vm := range vms {
		for _, up := range ups {
			var got []string
			buildTree(vm, "MIGRATE_ON_HOST_MAINTENANCE", "TRUE", up).walk("", func(p string, _ any, _ *tree) { got = append(got, p) })
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("tree of %s with %v has paths %q, layout %q", vm.Name, up, got, want)
			}
		}
	}
}

// TestUpcomingShared checks that events with equal upcoming-maintenance
// values share one, and that it is dropped once no document holds it.
func TestUpcomingShared(t *testing.T) {
	c := &renderCache{}
	nb := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	a := &forewarn.Event{Type: forewarn.MigrateOnHostMaintenance, Status: forewarn.Scheduled, NotBefore: nb, Lasts: time.Hour}
	b := &forewarn.Event{Type: forewarn.MigrateOnHostMaintenance, Status: forewarn.Scheduled, NotBefore: nb.Add(time.Millisecond), Lasts: time.Hour}
	other := &forewarn.Event{Type: forewarn.MigrateOnHostMaintenance, Status: forewarn.Scheduled, NotBefore: nb.Add(time.Second), Lasts: time.Hour}
	ea, eb, eo := c.upcoming(a, true), c.upcoming(b, true), c.upcoming(other, true)
	if ea != eb || ea == eo {
		t.Fatalf("equal values not shared, or different ones shared")
	}
	if got := string(ea.node.text); got != "can_reschedule true\nlatest_window_start_time 2030-01-01T00:00:00+00:00\nmaintenance_status PENDING\ntype SCHEDULED\nwindow_end_time 2030-01-01T01:00:00+00:00\nwindow_start_time 2030-01-01T00:00:00+00:00" {
		t.Fatalf("upcoming text %q", got)
	}
	runtime.KeepAlive(ea)
	runtime.KeepAlive(eo)
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		c.mu.Lock()
		n := len(c.up)
		c.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d upcoming values kept after their documents went", n)
		}
		time.Sleep(time.Millisecond)
	}
}

package report_test

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/history"
	"github.com/forewarn/forewarn/mem"
	"github.com/forewarn/forewarn/report"
)

// TestReportFollowsTheInventory: the report lists the VMs of the
// inventory at the time it is made, with the counts of a VM added at run
// time, none of a VM removed, counts from zero for a VM added again, and
// the name of the VM that first read an event after that VM left and its
// ring went to another.
func TestReportFollowsTheInventory(t *testing.T) {
	ctx := t.Context()
	vm := func(name string, i byte) *forewarn.VM {
		return &forewarn.VM{Name: name, Provider: forewarn.Azure, IP: netip.AddrFrom4([4]byte{127, 0, 0, i}), AvailabilitySet: "web"}
	}
	eng, err := engine.New(ctx, engine.Config{Store: mem.New(), Fleet: &forewarn.Fleet{VMs: []*forewarn.VM{vm("web_0", 2), vm("web_1", 3)}},
		AllowShortNotice: true})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	h := history.New(nil, 4)
	h.Follow(eng)
	calls := func(name string, n int, refs ...*history.Ref) {
		for range n {
			w := h.Start(httptest.NewRecorder(), name)
			for _, r := range refs {
				h.See(w, r)
			}
			h.Done(w, history.Azure, "GET", "/metadata/scheduledevents", "2020-07-01")
		}
	}
	change := func(c engine.InventoryChange) {
		t.Helper()
		if _, err := eng.ChangeInventory(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	// requests builds the report, checks that the stream writes the same,
	// and returns each VM's requests, in the report's order.
	requests := func() ([]string, []uint64, *report.Report) {
		t.Helper()
		now := time.Now()
		rep, err := report.Build(eng, h, now, "")
		if err != nil {
			t.Fatal(err)
		}
		st, err := report.Start(eng, h, now, "")
		if err != nil {
			t.Fatal(err)
		}
		var built, streamed bytes.Buffer
		_ = json.NewEncoder(&built).Encode(rep)
		if _, err := st.WriteTo(&streamed); err != nil || built.String() != streamed.String() {
			t.Fatalf("the stream (%v) differs from the report:\n%s\n%s", err, streamed.String(), built.String())
		}
		var names []string
		var n []uint64
		for _, v := range rep.VMs {
			names, n = append(names, v.Name), append(n, v.Requests)
		}
		return names, n, rep
	}
	ev, err := eng.Create(ctx, engine.Spec{Type: forewarn.Freeze, VMs: []string{"web_0", "web_1"}, Notice: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	calls("web_0", 3, history.NewRef(ev))
	calls("web_1", 1)

	change(engine.InventoryChange{Set: []*forewarn.VM{vm("late", 4)}})
	calls("late", 2)
	if names, n, _ := requests(); !slices.Equal(names, []string{"web_0", "web_1", "late"}) || !slices.Equal(n, []uint64{3, 1, 2}) {
		t.Fatalf("after adding late: VMs %v with %v requests; want [web_0 web_1 late] with [3 1 2]", names, n)
	}

	change(engine.InventoryChange{Remove: []string{"web_0"}})
	change(engine.InventoryChange{Set: []*forewarn.VM{vm("x", 5)}}) // on web_0's ring
	calls("x", 1, history.NewRef(ev))
	names, n, rep := requests()
	if !slices.Equal(names, []string{"web_1", "late", "x"}) || !slices.Equal(n, []uint64{1, 2, 1}) {
		t.Fatalf("after removing web_0 and adding x: VMs %v with %v requests; want [web_1 late x] with [1 2 1]", names, n)
	}
	if i := slices.IndexFunc(rep.Events, func(e report.Event) bool { return e.ID == ev.ID }); i < 0 || rep.Events[i].SeenBy != "web_0" {
		t.Fatalf("event %s: %+v; want it seen first by web_0", ev.ID, rep.Events)
	}
	if _, err := report.Build(eng, h, time.Now(), "web_0"); forewarn.ErrorCode(err) != forewarn.ENOTFOUND {
		t.Errorf("report of web_0, removed: %v, want not_found", err)
	}

	change(engine.InventoryChange{Set: []*forewarn.VM{vm("web_0", 2)}})
	if names, n, _ := requests(); !slices.Equal(names, []string{"web_1", "late", "x", "web_0"}) || !slices.Equal(n, []uint64{1, 2, 1, 0}) {
		t.Fatalf("after adding web_0 again: VMs %v with %v requests; want [web_1 late x web_0] with [1 2 1 0]", names, n)
	}
}

package engine_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

// TestCreateAllOneEventPerScopeGroup: a request naming VMs of several
// scope groups makes one event per group, in one commit, each naming
// only its group's VMs. Each VM sees its own group's event only, and
// approving another group's event is refused. Create, which returns one
// event, refuses such a request, naming two of the groups.
func TestCreateAllOneEventPerScopeGroup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTopoEngine(t, true)
		ctx := context.Background()
		names := []string{"zonal", "web_0", "ss_0", "zonal2", "cs_0", "ss_2", "ss_1", "cs_1"}
		if _, err := e.Create(ctx, engine.Spec{Type: forewarn.Freeze, VMs: names}); forewarn.ErrorCode(err) != forewarn.EINVALID ||
			!strings.Contains(forewarn.ErrorMessage(err), `"zonal" (VM zonal) and "web_0" (availability set web) are in different scope groups`) {
			t.Fatalf("Create of several groups: %v", err)
		}
		if n := len(e.Events()); n != 0 {
			t.Fatalf("a refused Create made %d events", n)
		}
		synctest.Wait() // the VMs' first calls are written in the background
		rev := e.Revision()
		evs, err := e.CreateAll(ctx, engine.Spec{Type: forewarn.Freeze, VMs: names})
		if err != nil {
			t.Fatal(err)
		}
		if got := e.Revision(); got != rev+1 {
			t.Errorf("CreateAll took %d commits, want 1", got-rev)
		}
		want := [][]string{{"zonal"}, {"web_0"}, {"ss_0", "ss_1"}, {"zonal2"}, {"cs_0", "cs_1"}, {"ss_2"}}
		if len(evs) != len(want) {
			t.Fatalf("%d events, want %d", len(evs), len(want))
		}
		byVM := map[string]string{}
		for i, ev := range evs {
			if !slices.Equal(ev.Resources, want[i]) || ev.Status != forewarn.Scheduled {
				t.Errorf("event %d: %s %v, want Scheduled %v", i, ev.Status, ev.Resources, want[i])
			}
			for _, r := range ev.Resources {
				byVM[r] = ev.ID
			}
		}
		// Who sees what: a VM sees its group's event, naming its group.
		for vm, id := range map[string]string{
			"zonal": byVM["zonal"], "zonal2": byVM["zonal2"], "web_0": byVM["web_0"], "web_1": byVM["web_0"], "spot": byVM["web_0"],
			"ss_0": byVM["ss_0"], "ss_1": byVM["ss_0"], "ss_2": byVM["ss_2"], "ss_3": byVM["ss_2"], "cs_1": byVM["cs_0"],
		} {
			v := e.View(vm)
			if len(v.Events) != 1 || v.Events[0].ID != id {
				var got []string
				for _, ev := range v.Events {
					got = append(got, fmt.Sprint(ev.Resources))
				}
				t.Errorf("%s sees %v, want only %v", vm, got, mustEvent(t, e, id).Resources)
			}
		}
		// zonal cannot start web_0's maintenance; its own approval starts
		// its own event only.
		if err := e.Approve(ctx, "zonal", []string{byVM["web_0"]}); forewarn.ErrorCode(err) != forewarn.ENOTFOUND {
			t.Fatalf("zonal approving web_0's event: %v", err)
		}
		if err := e.Approve(ctx, "zonal", []string{byVM["zonal"]}); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, e, forewarn.Started, byVM["zonal"])
		wantStatus(t, e, forewarn.Scheduled, byVM["web_0"], byVM["ss_0"], byVM["zonal2"], byVM["cs_0"], byVM["ss_2"])

		// Within a group, one event spans one update domain.
		if _, err := e.CreateAll(ctx, engine.Spec{Type: forewarn.Freeze, VMs: []string{"zonal", "web_0", "web_1"}}); forewarn.ErrorCode(err) != forewarn.EINVALID ||
			!strings.Contains(forewarn.ErrorMessage(err), "different update domains") {
			t.Fatalf("one group over two update domains: %v", err)
		}
	})
}

// TestDescriptionBounded: a description longer than MaxDescription is
// refused (every poll of every VM that sees the event carries it).
func TestDescriptionBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTopoEngine(t, true)
		ctx := context.Background()
		if _, err := e.Create(ctx, engine.Spec{Type: forewarn.Freeze, VMs: []string{"zonal"}, Description: strings.Repeat("x", engine.MaxDescription+1)}); forewarn.ErrorCode(err) != forewarn.EINVALID ||
			forewarn.ErrorMessage(err) != fmt.Sprintf("description is %d bytes; at most %d", engine.MaxDescription+1, engine.MaxDescription) {
			t.Fatalf("long description: %v", err)
		}
		if _, err := e.Create(ctx, engine.Spec{Type: forewarn.Freeze, VMs: []string{"zonal"}, Description: strings.Repeat("x", engine.MaxDescription)}); err != nil {
			t.Fatalf("a description of MaxDescription bytes: %v", err)
		}
	})
}

// TestDeadlinesDueTogetherCommitTogether: the events of one request over
// 2,000 standalone VMs start at their NotBefore and complete at the end
// of their Lasts in a few commits, not one commit (and, on bbolt, one
// fsync) each.
func TestDeadlinesDueTogetherCommitTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 2000
		f := &forewarn.Fleet{}
		names := make([]string, n)
		for i := range n {
			names[i] = fmt.Sprintf("vm%04d", i)
			f.VMs = append(f.VMs, &forewarn.VM{Name: names[i], Provider: forewarn.Azure})
		}
		e, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: f})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		enableAll(e)
		synctest.Wait()
		ctx := context.Background()
		evs, err := e.CreateAll(ctx, engine.Spec{Type: forewarn.Freeze, VMs: names, Lasts: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != n {
			t.Fatalf("%d events, want %d", len(evs), n)
		}
		rev := e.Revision()
		step(forewarn.Freeze.MinNotice() + time.Second)
		for _, ev := range evs {
			wantStatus(t, e, forewarn.Started, ev.ID)
		}
		started := e.Revision()
		if started-rev > 3 {
			t.Errorf("starting %d events at their NotBefore took %d commits, want at most 3", n, started-rev)
		}
		step(time.Minute)
		for _, ev := range evs {
			wantStatus(t, e, forewarn.Completed, ev.ID)
		}
		if got := e.Revision() - started; got > 3 {
			t.Errorf("completing %d events took %d commits, want at most 3", n, got)
		}
		t.Logf("%d events: started in %d commits, completed in %d", n, started-rev, e.Revision()-started)
	})
}

// TestStartAllCompleteAll: the operator's calls on many events are one
// commit each, and refuse the lot when one event cannot move.
func TestStartAllCompleteAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTopoEngine(t, true)
		ctx := context.Background()
		evs, err := e.CreateAll(ctx, engine.Spec{Type: forewarn.Freeze, VMs: []string{"zonal", "zonal2", "cs_0"}})
		if err != nil {
			t.Fatal(err)
		}
		ids := []string{evs[0].ID, evs[1].ID, evs[2].ID}
		if err := e.CompleteAll(ctx, ids); forewarn.ErrorCode(err) != forewarn.ECONFLICT {
			t.Fatalf("completing Scheduled events: %v", err)
		}
		wantStatus(t, e, forewarn.Scheduled, ids...)
		synctest.Wait() // the VMs' first calls are written in the background
		rev := e.Revision()
		if err := e.StartAll(ctx, ids); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, e, forewarn.Started, ids...)
		if err := e.CompleteAll(ctx, ids); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, e, forewarn.Completed, ids...)
		if got := e.Revision() - rev; got != 2 {
			t.Errorf("StartAll and CompleteAll took %d commits, want 2", got)
		}
	})
}

// TestWaveSplitsDomainsByScopeGroup: a wave over a scale set of two
// placement groups gives each group its own event of a domain, names
// only that group's VMs in it, and schedules the domain's events
// together; the next domain waits for both.
func TestWaveSplitsDomainsByScopeGroup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &forewarn.Fleet{}
		for i, pg := range []string{"pg0", "pg0", "pg1", "pg1"} {
			f.VMs = append(f.VMs, &forewarn.VM{Name: fmt.Sprintf("ss_%d", i), Provider: forewarn.Azure, ScaleSet: "ss",
				InstanceID: fmt.Sprint(i), PlacementGroup: pg, UpdateDomain: i % 2})
		}
		e, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: f})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		enableAll(e)
		w, err := e.StartWave(context.Background(), engine.WaveSpec{Scope: "ss", Type: forewarn.Reboot, Lasts: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(w.Domains) != 4 {
			t.Fatalf("%d wave events, want 4 (2 domains × 2 placement groups): %+v", len(w.Domains), w.Domains)
		}
		for _, d := range w.Domains {
			want := forewarn.Pending
			if d.UpdateDomain == 0 {
				want = forewarn.Scheduled
			}
			if len(d.VMs) != 1 || d.Status != want {
				t.Errorf("domain %d: %s %v, want %s and one VM", d.UpdateDomain, d.Status, d.VMs, want)
			}
		}
		if v := e.View("ss_0"); len(v.Events) != 1 || !slices.Equal(v.Events[0].Resources, []string{"ss_0"}) {
			t.Errorf("ss_0 (pg0) sees %d events", len(v.Events))
		}
		step(forewarn.Reboot.MinNotice() + time.Second) // domain 0 starts
		step(time.Minute)                               // and ends: domain 1 is scheduled, both groups
		var got []string
		for _, d := range e.Waves()[0].Domains {
			got = append(got, fmt.Sprintf("%d:%s", d.UpdateDomain, d.Status))
		}
		if want := []string{"0:Completed", "0:Completed", "1:Scheduled", "1:Scheduled"}; !slices.Equal(got, want) {
			t.Fatalf("after domain 0: %v, want %v", got, want)
		}
	})
}

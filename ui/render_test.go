package ui

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
)

// infos returns n VMs of availability set "big" with update domains
// i%5, then extra standalone VMs each in an availability set of its own.
func infos(n, extra int) []engine.VMInfo {
	var out []engine.VMInfo
	for i := range n {
		out = append(out, engine.VMInfo{VM: forewarn.VM{Name: fmt.Sprintf("big_%d", i), Provider: forewarn.Azure,
			AvailabilitySet: "big", UpdateDomain: i % 5}, State: "running", Events: []string{}})
	}
	for i := range extra {
		out = append(out, engine.VMInfo{VM: forewarn.VM{Name: fmt.Sprintf("own_%d", i), Provider: forewarn.Azure,
			AvailabilitySet: fmt.Sprintf("set_%d", i)}, State: "running", Events: []string{}})
	}
	return out
}

// TestFleetRowsByDomain checks which rows a capped group shows: every
// VM of its lowest update domains, then the first ones (in fleet order)
// of the domain the cap falls in, sorted by domain.
func TestFleetRowsByDomain(t *testing.T) {
	fv := buildFleet(infos(100, 0), "")
	if len(fv.Groups) != 1 {
		t.Fatalf("%d groups, want 1", len(fv.Groups))
	}
	g := fv.Groups[0]
	var got []string
	for _, r := range g.Rows {
		got = append(got, fmt.Sprintf("%d:%s", r.UD, r.Name))
	}
	var want []string
	for ud := range 3 {
		for i := ud; i < 100; i += 5 {
			if ud < 2 || len(want) < MaxGroupRows {
				want = append(want, fmt.Sprintf("%d:big_%d", ud, i))
			}
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("rows\n got %v\nwant %v", got, want)
	}
	if g.More != 50 || g.Counts.Total != 100 {
		t.Fatalf("More %d, Total %d; want 50, 100", g.More, g.Counts.Total)
	}
	wantDomains := []domainCount{{0, 20}, {1, 20}, {2, 20}, {3, 20}, {4, 20}}
	if !slices.Equal(g.Domains, wantDomains) {
		t.Fatalf("domains %v, want %v", g.Domains, wantDomains)
	}
}

// TestFleetBounds checks the caps on groups and on rows in all.
func TestFleetBounds(t *testing.T) {
	fv := buildFleet(infos(60, 600), "")
	if len(fv.Groups) != MaxGroups || fv.MoreGroups != 601-MaxGroups {
		t.Fatalf("%d groups shown, %d more; want %d, %d", len(fv.Groups), fv.MoreGroups, MaxGroups, 601-MaxGroups)
	}
	rows := 0
	for _, g := range fv.Groups {
		rows += len(g.Rows)
	}
	// big shows 50 of 60; then 99 groups of one VM each.
	if rows != 50+99 || fv.Groups[0].More != 10 {
		t.Fatalf("%d rows, big has %d more; want 149, 10", rows, fv.Groups[0].More)
	}

	fv = buildFleet(infos(0, 1000), "own_")
	rows = 0
	for _, g := range fv.Groups {
		rows += len(g.Rows)
	}
	if rows != MaxGroups || fv.Matched.Total != 1000 {
		t.Fatalf("%d rows of %d matched, want %d of 1000", rows, fv.Matched.Total, MaxGroups)
	}

	// Eleven groups of 50 VMs: MaxRows cuts the eleventh to nothing.
	var many []engine.VMInfo
	for g := range 11 {
		for i := range 50 {
			many = append(many, engine.VMInfo{VM: forewarn.VM{Name: fmt.Sprintf("g%d_%d", g, i), AvailabilitySet: fmt.Sprintf("g%d", g)}, State: "running"})
		}
	}
	fv = buildFleet(many, "")
	rows = 0
	for _, g := range fv.Groups {
		rows += len(g.Rows)
	}
	if rows != MaxRows || len(fv.Groups[10].Rows) != 0 || fv.Groups[10].More != 50 || !fv.Capped {
		t.Fatalf("%d rows, last group %d rows and %d more, capped %v; want %d, 0, 50, true",
			rows, len(fv.Groups[10].Rows), fv.Groups[10].More, fv.Capped, MaxRows)
	}
}

// TestFleetFilter checks that the filter matches VM and group names
// without regard to ASCII case, and counts what it matches.
func TestFleetFilter(t *testing.T) {
	fv := buildFleet(infos(100, 3), "BIG_7")
	var names []string
	for _, g := range fv.Groups {
		for _, r := range g.Rows {
			names = append(names, r.Name)
		}
	}
	if want := []string{"big_7", "big_70", "big_71", "big_72", "big_73", "big_74", "big_75", "big_76", "big_77", "big_78", "big_79"}; !slices.Equal(sorted(names), want) {
		t.Fatalf("filter BIG_7 shows %v, want %v", names, want)
	}
	if fv.All.Total != 103 || fv.Matched.Total != 11 {
		t.Fatalf("all %d, matched %d; want 103, 11", fv.All.Total, fv.Matched.Total)
	}
	fv = buildFleet(infos(100, 3), "set_2")
	if len(fv.Groups) != 1 || fv.Groups[0].Name != "set_2" || len(fv.Groups[0].Rows) != 1 || fv.Groups[0].Rows[0].Name != "own_2" {
		t.Fatalf("filter by group name: %+v", fv.Groups)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func TestContainsFold(t *testing.T) {
	for _, c := range []struct {
		s, sub string
		want   bool
	}{
		{"web_0", "", true}, {"web_0", "WEB", true}, {"Web_0", "b_0", true}, {"web", "web_0", false},
		{"héllo", "LLO", true}, {"abc", "abd", false}, {"aab", "ab", true},
	} {
		if got := containsFold(c.s, c.sub); got != c.want {
			t.Errorf("containsFold(%q, %q) = %v, want %v", c.s, c.sub, got, c.want)
		}
	}
}

// TestEventsTimeline checks the marks of one event and the cap.
func TestEventsTimeline(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	ev := &forewarn.Event{ID: "E1", Type: forewarn.Reboot, Status: forewarn.Started, Resources: []string{"a", "b"},
		Created: t0, StartedAt: t0.Add(10 * time.Minute), Lasts: 10 * time.Minute,
		Approvals: []forewarn.Approval{{By: "a", At: t0.Add(10 * time.Minute)}}}
	v := buildEvents([]*forewarn.Event{ev}, t0.Add(15*time.Minute))
	e := v.Events[0]
	var marks []string
	for _, m := range e.Marks {
		marks = append(marks, m.Class+"@"+m.X)
	}
	// From t0 to the end at t0+20m: 1% + 98% × share.
	want := []string{"created@1.0%", "started@50.0%", "ends@99.0%", "approval@50.0%"}
	if !slices.Equal(marks, want) || v.Now != "74.5%" || e.SpanX != "1.0%" || e.SpanWidth != "98.0%" {
		t.Fatalf("marks %v now %s span %s+%s; want %v now 74.5%% span 1.0%%+98.0%%", marks, v.Now, e.SpanX, e.SpanWidth, want)
	}
	if !e.CanComplete || e.CanApprove || e.CanStart || e.CanCancel {
		t.Fatalf("a Started event's actions: %+v", e)
	}

	var evs []*forewarn.Event
	for i := range MaxEvents + 7 {
		evs = append(evs, &forewarn.Event{ID: fmt.Sprintf("E%03d", i), Status: forewarn.Scheduled, Created: t0.Add(time.Duration(i) * time.Second), NotBefore: t0.Add(time.Hour)})
	}
	v = buildEvents(evs, t0)
	if len(v.Events) != MaxEvents || v.More != 7 || v.Events[0].ID != fmt.Sprintf("E%03d", MaxEvents+6) || v.Events[MaxEvents-1].ID != "E007" {
		t.Fatalf("%d shown, %d more, first %s, last %s", len(v.Events), v.More, v.Events[0].ID, v.Events[len(v.Events)-1].ID)
	}
}

// TestLongTimeline: a timeline of months (a degraded VM's Redeploy
// 2,700 hours out) places its marks as a short one does; the span in
// nanoseconds times the width overflowed an int64.
func TestLongTimeline(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	ev := &forewarn.Event{ID: "E1", Type: forewarn.Redeploy, Status: forewarn.Scheduled, Resources: []string{"a"},
		Created: t0, NotBefore: t0.Add(2700 * time.Hour)}
	v := buildEvents([]*forewarn.Event{ev}, t0.Add(1350*time.Hour))
	var marks []string
	for _, m := range v.Events[0].Marks {
		marks = append(marks, m.Class+"@"+m.X)
	}
	if want := []string{"created@1.0%", "notbefore@99.0%"}; !slices.Equal(marks, want) || v.Now != "50.0%" {
		t.Fatalf("marks %v now %s; want %v now 50.0%%", marks, v.Now, want)
	}
}

// TestWriteEvent checks the event-stream framing: one data line per
// line, carriage returns as character references, a blank line at the
// end.
func TestWriteEvent(t *testing.T) {
	var buf bytes.Buffer
	writeEvent(&buf, "fleet", []byte("<p>a\r\nb</p>\n<p>c</p>"))
	want := "event: fleet\ndata: <p>a&#13;\ndata: b</p>\ndata: <p>c</p>\n\n"
	if buf.String() != want {
		t.Fatalf("got %q\nwant %q", buf.String(), want)
	}
}

// TestWavesWaiting checks who a wave's domain still waits on: its VMs
// that have not approved, while it is Pending or Scheduled, and nobody
// once the operator approved or it started.
func TestWavesWaiting(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	evs := map[string]*forewarn.Event{
		"A": {ID: "A", Status: forewarn.Scheduled, Approvals: []forewarn.Approval{{By: "w1", At: t0}}},
		"B": {ID: "B", Status: forewarn.Pending},
		"C": {ID: "C", Status: forewarn.Scheduled, Approvals: []forewarn.Approval{{By: forewarn.Operator, At: t0}}},
		"D": {ID: "D", Status: forewarn.Started, Approvals: []forewarn.Approval{{By: "w7", At: t0}}},
	}
	many := make([]string, MaxNames+3)
	for i := range many {
		many[i] = fmt.Sprintf("p%d", i)
	}
	w := &engine.Wave{ID: "W", Scope: "web", Type: forewarn.Reboot, Status: "running", Created: t0, Domains: []engine.WaveDomain{
		{UpdateDomain: 0, Event: "A", Status: forewarn.Scheduled, VMs: []string{"w0", "w1", "w2"}},
		{UpdateDomain: 1, Event: "B", Status: forewarn.Pending, VMs: many},
		{UpdateDomain: 2, Event: "C", Status: forewarn.Scheduled, VMs: []string{"w4"}},
		{UpdateDomain: 3, Event: "D", Status: forewarn.Started, VMs: []string{"w6", "w7"}},
	}}
	v := buildWaves([]*engine.Wave{w}, evs)
	d := v.Waves[0].Domains
	got := fmt.Sprint(d[0].Waiting, d[0].Approved[0].Name, len(d[1].Waiting), d[1].MoreWaiting, d[2].Waiting, d[3].Waiting, d[3].AwaitsApproval)
	if want := fmt.Sprint([]string{"w0", "w2"}, "w1", MaxNames, 3, []string(nil), []string(nil), false); got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

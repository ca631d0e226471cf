package report_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/history"
	"github.com/forewarn/forewarn/mem"
	"github.com/forewarn/forewarn/report"
)

// TestWaveVisibility checks when a wave's events count as visible: the
// first at its creation, a later domain's when the previous one ended,
// none while Pending; and that an event that ended unread is never-seen
// while one still Pending is not.
func TestWaveVisibility(t *testing.T) {
	fleet := &forewarn.Fleet{VMs: []*forewarn.VM{
		{Name: "web_0", Provider: forewarn.Azure, IP: netip.MustParseAddr("127.0.0.2"), AvailabilitySet: "web", UpdateDomain: 0},
		{Name: "web_1", Provider: forewarn.Azure, IP: netip.MustParseAddr("127.0.0.3"), AvailabilitySet: "web", UpdateDomain: 1},
	}}
	eng, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: fleet, AllowShortNotice: true})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	h := history.New([]string{"web_0", "web_1"}, 0)
	w, err := eng.StartWave(t.Context(), engine.WaveSpec{Scope: "web", Type: forewarn.Reboot, Notice: time.Hour, Lasts: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	byID := func(rep *report.Report) map[string]report.Event {
		out := map[string]report.Event{}
		for _, e := range rep.Events {
			out[e.ID] = e
		}
		return out
	}
	first, second := w.Domains[0].Event, w.Domains[1].Event
	rep, err := report.Build(eng, h, time.Now(), "")
	if err != nil {
		t.Fatal(err)
	}
	evs := byID(rep)
	if e := evs[first]; !e.VisibleSince.Equal(e.Created) || len(e.Findings) != 0 {
		t.Errorf("first domain: visible since %v (created %v), findings %+v", e.VisibleSince, e.Created, e.Findings)
	}
	if e := evs[second]; !e.VisibleSince.IsZero() || e.Status != forewarn.Pending || len(e.Findings) != 0 {
		t.Errorf("second domain while Pending: %s, visible since %v, findings %+v", e.Status, e.VisibleSince, e.Findings)
	}
	// Nobody listens, so the first domain started at once: end it.
	if err := eng.Complete(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	rep, _ = report.Build(eng, h, time.Now(), "")
	evs = byID(rep)
	ended := evs[first].EndedAt
	if e := evs[second]; ended.IsZero() || !e.VisibleSince.Equal(ended) || e.Status == forewarn.Pending {
		t.Errorf("second domain: %s, visible since %v; want the first's end %v", e.Status, e.VisibleSince, ended)
	}
	if e := evs[first]; len(e.Findings) != 1 || e.Findings[0].Kind != report.NeverSeen {
		t.Errorf("first domain, ended unread: findings %+v, want never-seen", e.Findings)
	}
	if _, err := report.Build(eng, h, time.Now(), "nobody"); forewarn.ErrorCode(err) != forewarn.ENOTFOUND {
		t.Errorf("report of an unknown VM: %v, want not_found", err)
	}
}

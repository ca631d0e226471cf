package report_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/forewarntest"
	"github.com/forewarn/forewarn/report"
)

const silenceFleet = `vms:
  - {name: web_0, ip: 127.0.0.2}
  - {name: web_1, ip: 127.0.0.3}
  - {name: web_2, ip: 127.0.0.4}
  - {name: web_3, ip: 127.0.0.5}
  - {name: web_4, ip: 127.0.0.6}
`

// layout is how findings show times.
const layout = "2006-01-02T15:04:05.000Z"

// byName returns a report's VMs and events by name and ID.
func byName(rep *report.Report) (map[string]report.VM, map[string]report.Event) {
	vms, evs := map[string]report.VM{}, map[string]report.Event{}
	for _, v := range rep.VMs {
		vms[v.Name] = v
	}
	for _, e := range rep.Events {
		evs[e.ID] = e
	}
	return vms, evs
}

// sameFindings reports whether got are want, in order.
func sameFindings(got, want []report.Finding) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// TestReportJitter: over a Reboot's real 15-minute notice, a client
// polling every 5 s whose timer fires up to 0.9 s late is never flagged,
// and one polling every 7 s is, once for each of the 128 gaps that lie
// in the notice (the 129th ends 3 s after the start, 4 s of it in the
// notice) (issue 22.2).
func TestReportJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := forewarntest.NewServer(t, forewarntest.Fleet(t, silenceFleet))
		ctx := t.Context()
		created := time.Now()
		five, seven := srv.Reboot("web_0", forewarntest.EventOptions{}), srv.Reboot("web_1", forewarntest.EventOptions{})
		if five.NotBefore.Sub(created) != 15*time.Minute {
			t.Fatalf("NotBefore %v after the creation, want 15m", five.NotBefore.Sub(created))
		}
		poll := func(vm string, every time.Duration, rng *rand.Rand) {
			c := srv.AzureClient(vm)
			for time.Since(created) < 15*time.Minute+5*time.Second {
				if _, err := c.Document(ctx); err != nil {
					t.Errorf("%s: %v", vm, err)
					return
				}
				var late time.Duration
				if rng != nil {
					late = time.Duration(rng.Int64N(int64(900 * time.Millisecond)))
				}
				time.Sleep(every + late)
			}
		}
		var wg sync.WaitGroup
		wg.Go(func() { poll("web_0", 5*time.Second, rand.New(rand.NewPCG(22, 2))) })
		wg.Go(func() { poll("web_1", 7*time.Second, nil) })
		wg.Wait()
		rep, err := srv.AdminClient().Report(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		vms, events := byName(rep)
		if v := vms["web_0"]; len(v.Findings) != 0 || v.Requests < 150 || v.LongestPendingGapSeconds <= 5 || v.LongestPendingGapSeconds >= 6 {
			t.Errorf("every 5 s with jitter: %d requests, longest while pending %vs, findings %+v; want over 150, 5s to 6s, none",
				v.Requests, v.LongestPendingGapSeconds, v.Findings)
		}
		w := []report.Finding{{Kind: report.SlowPolling, Count: 128, Detail: fmt.Sprintf(
			"128 gap(s) over 6s (5× the expected 1s, and 1s for jitter) while an event was pending; the longest 7s (ended %s)",
			created.Add(7*time.Second).UTC().Format(layout))}}
		if v := vms["web_1"]; !sameFindings(v.Findings, w) || v.LongestPendingGapSeconds != 7 {
			t.Errorf("every 7 s: longest while pending %vs, findings\n%+v\nwant 7s,\n%+v", v.LongestPendingGapSeconds, v.Findings, w)
		}
		for _, ev := range []*forewarn.Event{five, seven} {
			if e := events[ev.ID]; len(e.Findings) != 0 || e.Status != forewarn.Started {
				t.Errorf("event %s: %s, findings %+v; want Started, none", ev.ID, e.Status, e.Findings)
			}
		}
	})
}

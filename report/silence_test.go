package report_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/azure"
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

// TestReportKeepsSilenceOverNotice: a VM's silence during an event's
// notice stays a slow-polling finding once the event has started or
// ended, and a VM that first read an event after it started gets a
// read-after-start finding, its event seen-after-start (issue 22.1).
// The real server answers the VMs' Azure clients, in a bubble so that
// the times are exact. Each VM has a Reboot, created at 1 s with a
// 15-second notice, so Started at 16 s: web_0 reads it at 1.5 s and
// again at 4 minutes, Started; web_1 reads it first at 4 minutes; web_2
// reads it at 1.5 s and says nothing more; web_3's lasts a minute and
// web_3 reads it at 1.5 s, then at 4 minutes, when it has ended; web_4
// polls every second.
func TestReportKeepsSilenceOverNotice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := forewarntest.NewServer(t, forewarntest.Fleet(t, silenceFleet))
		ctx := t.Context()
		clients := map[string]*azure.Client{}
		for _, vm := range srv.Fleet().VMs {
			clients[vm.Name] = srv.AzureClient(vm.Name)
		}
		read := func(vm string) int {
			t.Helper()
			doc, err := clients[vm].Document(ctx)
			if err != nil {
				t.Errorf("%s: %v", vm, err) // not Fatalf: web_4 reads in a goroutine of its own
				return -1
			}
			return len(doc.Notices)
		}
		t0 := time.Now()
		at := func(d time.Duration) string { return t0.Add(d).UTC().Format(layout) }
		for _, vm := range []string{"web_0", "web_1", "web_2", "web_3", "web_4"} {
			read(vm)
		}
		time.Sleep(time.Second)
		evs := map[string]*forewarn.Event{}
		for _, vm := range []string{"web_0", "web_1", "web_2", "web_3", "web_4"} {
			o := forewarntest.EventOptions{Notice: 15 * time.Second}
			if vm == "web_3" {
				o.Lasts = time.Minute
			}
			evs[vm] = srv.Reboot(vm, o)
			if want := t0.Add(16 * time.Second); !evs[vm].NotBefore.Equal(want) {
				t.Fatalf("%s: NotBefore %v, want %v", vm, evs[vm].NotBefore, want)
			}
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for tick := time.Tick(time.Second); ; {
				read("web_4")
				select {
				case <-tick:
				case <-stop:
					return
				}
			}
		})
		time.Sleep(500 * time.Millisecond) // 1.5 s
		for _, vm := range []string{"web_0", "web_2", "web_3"} {
			if n := read(vm); n != 1 {
				t.Fatalf("%s at 1.5s: %d events, want its Reboot", vm, n)
			}
		}
		time.Sleep(4*time.Minute - 1500*time.Millisecond) // 4 minutes
		if n := read("web_0") + read("web_1"); n != 2 {
			t.Fatalf("web_0 and web_1 at 4m: %d events, want their Reboots, Started", n)
		}
		if n := read("web_3"); n != 0 {
			t.Fatalf("web_3 at 4m: %d events, want none: its Reboot has ended", n)
		}
		time.Sleep(time.Second)

		rep, err := srv.AdminClient().Report(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		vms, events := byName(rep)
		slow := func(longest, when string) report.Finding {
			return report.Finding{Kind: report.SlowPolling, Count: 1, Detail: fmt.Sprintf(
				"1 gap(s) over 6s (5× the expected 1s, and 1s for jitter) while an event was pending; the longest %s (%s)", longest, when)}
		}
		want := map[string][]report.Finding{
			"web_0": {slow("14.5s", "ended "+at(4*time.Minute))},
			"web_1": {slow("15s", "ended "+at(4*time.Minute)), {Kind: report.ReadAfterStart, Count: 1, Detail: fmt.Sprintf(
				"events first read only after they started, no event read during their notice; latest %s, read 3m44s after it started, its notice of 15s unread", evs["web_1"].ID)}},
			"web_2": {slow("14.5s", "still going on")},
			"web_3": {slow("14.5s", "ended "+at(4*time.Minute))},
			"web_4": {},
		}
		for vm, w := range want {
			if got := vms[vm].Findings; !slices.Equal(got, w) {
				t.Errorf("%s: findings\n%+v\nwant\n%+v", vm, got, w)
			}
		}
		if v := vms["web_2"]; v.LongestPendingGapSeconds != 14.5 || !v.LongestPendingGapEnded.IsZero() {
			t.Errorf("web_2: longest while pending %vs ended %v, want 14.5s going on", v.LongestPendingGapSeconds, v.LongestPendingGapEnded)
		}
		for vm, ev := range evs {
			var w []report.Finding
			if vm == "web_1" {
				w = []report.Finding{{Kind: report.SeenAfterStart, Count: 1, Detail: fmt.Sprintf(
					"1 VM(s) first read it only after it started at %s, having read nothing during its notice of 15s; the first web_1, 3m44s after", at(16*time.Second))}}
			}
			if e := events[ev.ID]; !slices.Equal(e.Findings, w) {
				t.Errorf("%s's event %s (%s): findings %+v, want %+v", vm, ev.ID, e.Status, e.Findings, w)
			}
		}

		// Once web_2's Reboot has ended, its silence still overlapped the
		// notice.
		srv.Wait(evs["web_2"].ID, forewarn.Completed)
		rep, err = srv.AdminClient().Report(ctx, "web_2")
		if err != nil {
			t.Fatal(err)
		}
		if got, w := rep.VMs[0].Findings, want["web_2"]; !slices.Equal(got, w) {
			t.Errorf("web_2 after its Reboot ended: findings %+v, want %+v", got, w)
		}
		close(stop)
		wg.Wait()
	})
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
		if v := vms["web_1"]; !slices.Equal(v.Findings, w) || v.LongestPendingGapSeconds != 7 {
			t.Errorf("every 7 s: longest while pending %vs, findings\n%+v\nwant 7s,\n%+v", v.LongestPendingGapSeconds, v.Findings, w)
		}
		for _, ev := range []*forewarn.Event{five, seven} {
			if e := events[ev.ID]; len(e.Findings) != 0 || e.Status != forewarn.Started {
				t.Errorf("event %s: %s, findings %+v; want Started, none", ev.ID, e.Status, e.Findings)
			}
		}
	})
}

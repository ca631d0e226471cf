package gce_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
)

// TestLongPollWithoutETag checks that wait_for_change=true without
// last_etag holds the request until the value differs from the one
// current when it arrived, on every dynamic key and the directories above
// them, and that timeout_sec still bounds it (seed 002's curl and
// PowerShell samples send no last_etag).
func TestLongPollWithoutETag(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		const wait = "?wait_for_change=true"

		// timeout_sec bounds the hold on every key and directory, to the
		// second, and answers the unchanged value with its ETag.
		for _, c := range []struct{ remote, key, query string }{
			{vmAddr, "instance/maintenance-event", ""},
			{vmAddr, "instance/maintenance-event", "&alt=json"},
			{spotAddr, "instance/preempted", ""},
			{vmAddr, "instance/scheduling/", ""},
			{vmAddr, "instance/scheduling/", "&recursive=true"},
			{vmAddr, "instance/", "&recursive=true"},
			{vmAddr, "", "&recursive=true"},
		} {
			before := get(h, c.remote, c.key+strings.Replace(c.query, "&", "?", 1))
			p := startPoll(h, req{target: v1 + c.key + wait + c.query + "&timeout_sec=5", remote: c.remote})
			step(5*time.Second - time.Millisecond)
			p.hanging(t, c.key+c.query+" at 4.999s")
			step(time.Millisecond)
			w := p.answered(t, c.key+c.query+" at 5s")
			if w.Code != 200 || w.Body.String() != before.Body.String() || etagOf(t, w) != etagOf(t, before) {
				t.Fatalf("%s%s after the timeout: %d %q, want %q", c.key, c.query, w.Code, w.Body, before.Body)
			}
		}

		// The upcoming-maintenance 503 state holds too.
		p := startPoll(h, req{target: v1 + "instance/upcoming-maintenance" + wait})
		// Unbounded without timeout_sec, on each key and directory.
		polls := map[string]*poll{
			"maintenance-event": startPoll(h, req{target: maintenanceEvent + wait}),
			"instance/":         startPoll(h, req{target: v1 + "instance/" + wait + "&recursive=true"}),
			"root":              startPoll(h, req{target: v1 + wait + "&recursive=true&alt=text"}),
			"preempted":         startPoll(h, req{target: v1 + "instance/preempted" + wait, remote: spotAddr}),
		}
		step(24 * time.Hour)
		p.hanging(t, "upcoming-maintenance after 24h")
		for k, p := range polls {
			p.hanging(t, k+" after 24h")
		}

		// One change wakes each at its instant with the new value.
		create(t, e, engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"vm"}, Started: true, Lasts: time.Minute})
		synctest.Wait()
		text(t, p.answered(t, "upcoming-maintenance after create"),
			"can_reschedule false\nlatest_window_start_time 2000-01-02T00:00:35+00:00\nmaintenance_status ONGOING\ntype UNSCHEDULED\n"+
				"window_end_time 2000-01-02T00:01:35+00:00\nwindow_start_time 2000-01-02T00:00:35+00:00")
		text(t, polls["maintenance-event"].answered(t, "maintenance-event after create"), "MIGRATE_ON_HOST_MAINTENANCE")
		if b := polls["instance/"].answered(t, "instance/").Body.String(); !strings.Contains(b, `"maintenanceEvent":"MIGRATE_ON_HOST_MAINTENANCE"`) {
			t.Fatalf("instance/?recursive=true woke with %s", b)
		}
		if b := polls["root"].answered(t, "root").Body.String(); !strings.Contains(b, "instance/maintenance-event MIGRATE_ON_HOST_MAINTENANCE\n") {
			t.Fatalf("/?recursive=true&alt=text woke with %s", b)
		}
		polls["preempted"].hanging(t, "preempted after another VM's change")
		if _, err := e.Evict(t.Context(), "spot"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		text(t, polls["preempted"].answered(t, "preempted after Evict"), "TRUE")
	})
}

// TestLongPollHugeTimeout checks that a timeout_sec too large for a
// duration neither answers at once nor early: it holds like no timeout,
// and a change still wakes it.
func TestLongPollHugeTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		none := text(t, get(h, vmAddr, "instance/maintenance-event"), "NONE")
		var polls []*poll
		for _, ts := range []string{"9300000000", "18446744074", "9223372036", "9223372037", "18446744073709551616", "99999999999999999999999"} {
			polls = append(polls, startPoll(h, req{target: maintenanceEvent + waitFor(none) + "&timeout_sec=" + ts}))
			polls = append(polls, startPoll(h, req{target: maintenanceEvent + "?wait_for_change=true&timeout_sec=" + ts}))
		}
		step(365 * 24 * time.Hour)
		for i, p := range polls {
			p.hanging(t, "after a year, poll "+string(rune('a'+i)))
		}
		create(t, e, engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"vm"}, Started: true, Lasts: time.Minute})
		synctest.Wait()
		for i, p := range polls {
			text(t, p.answered(t, "after the change, poll "+string(rune('a'+i))), "MIGRATE_ON_HOST_MAINTENANCE")
		}
	})
}

// TestUpcomingMaintenanceEnds checks that a long-poll on an ONGOING
// upcoming-maintenance wakes when the maintenance ends, with a 200 and
// the empty value, and that the empty state's ETag then holds until the
// next announcement.
func TestUpcomingMaintenanceEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		create(t, e, engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"vm"}, Started: true, Lasts: time.Minute})
		ongoing := etagOf(t, get(h, vmAddr, "instance/upcoming-maintenance"))
		p := startPoll(h, req{target: v1 + "instance/upcoming-maintenance" + waitFor(ongoing)})
		step(time.Minute - time.Millisecond)
		p.hanging(t, "1ms before the end")
		step(time.Millisecond)
		w := p.answered(t, "at the end")
		ended := text(t, w, "")
		if ended == ongoing {
			t.Fatal("ETag unchanged")
		}
		p = startPoll(h, req{target: v1 + "instance/upcoming-maintenance" + waitFor(ended)})
		step(time.Hour)
		p.hanging(t, "an hour after the end")
		create(t, e, engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"vm"}, Notice: 2 * time.Hour})
		synctest.Wait()
		if b := p.answered(t, "after the next announcement").Body.String(); !strings.Contains(b, "maintenance_status PENDING") {
			t.Fatalf("woke with %q", b)
		}
	})
}

// TestLongPollSocketWithoutETag checks over a real socket that a
// wait_for_change request without last_etag is still held 2 s later and
// is answered within 50 ms of a change.
func TestLongPollSocketWithoutETag(t *testing.T) {
	e, srv, _ := socketSetup(t)
	tr := &http.Transport{DialContext: vmDialer.DialContext}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	type result struct {
		status int
		body   string
		at     time.Time
		err    error
	}
	res := make(chan result, 1)
	go func() {
		r, err := http.NewRequest(http.MethodGet, srv.URL+maintenanceEvent+"?wait_for_change=true", nil)
		if err != nil {
			res <- result{err: err}
			return
		}
		r.Header.Set("Metadata-Flavor", "Google")
		resp, err := client.Do(r)
		if err != nil {
			res <- result{err: err, at: time.Now()}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- result{resp.StatusCode, string(b), time.Now(), err}
	}()
	eventually(t, "the long-poll is not waiting", func() bool { return waiters() == 1 })
	select {
	case r := <-res:
		t.Fatalf("answered %d %q %v without a change", r.status, r.body, r.err)
	case <-time.After(2 * time.Second):
	}
	changed := time.Now()
	create(t, e, engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"vm"}, Started: true, Lasts: time.Minute})
	r := <-res
	if r.err != nil || r.status != 200 || r.body != "MIGRATE_ON_HOST_MAINTENANCE" {
		t.Fatalf("answered %d %q %v", r.status, r.body, r.err)
	}
	if d := r.at.Sub(changed); d >= 50*time.Millisecond {
		t.Fatalf("answered %s after the change, want < 50ms", d)
	}
}

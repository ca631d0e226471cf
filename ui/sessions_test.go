package ui_test

import (
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
	"github.com/forewarn/forewarn/ui"
)

// hostFleet: availability set web has web_0 (update domain 0) on hv1,
// web_1 (1) on hv2 and web_2 (0) on hv3; hv1 and hv2 also have a
// standalone VM, and hv0 has one alone.
func hostFleet() *forewarn.Fleet {
	return &forewarn.Fleet{VMs: []*forewarn.VM{
		{Name: "solo", Provider: forewarn.Azure, Host: "hv0"},
		{Name: "web_0", Provider: forewarn.Azure, Host: "hv1", AvailabilitySet: "web"},
		{Name: "a1", Provider: forewarn.Azure, Host: "hv1"},
		{Name: "web_1", Provider: forewarn.Azure, Host: "hv2", AvailabilitySet: "web", UpdateDomain: 1},
		{Name: "a2", Provider: forewarn.Azure, Host: "hv2"},
		{Name: "web_2", Provider: forewarn.Azure, Host: "hv3", AvailabilitySet: "web"},
	}}
}

// newHostEngine returns an engine of hostFleet; with enabled, every VM
// has called, so that its events keep their notice.
func newHostEngine(t *testing.T, enabled bool) *engine.Engine {
	t.Helper()
	eng, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: hostFleet(), AllowShortNotice: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	if enabled {
		for _, vm := range eng.Fleet().VMs {
			eng.NoteRequest(vm.Name)
		}
	}
	return eng
}

// fragment GETs /ui/fragment/name from h through a recorder.
func fragment(t *testing.T, h *ui.Handler, name string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/ui/fragment/"+name, nil))
	if rec.Code != 200 {
		t.Fatalf("GET /ui/fragment/%s: %d %s", name, rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// wantSessions is the sessions fragment of TestSessionsFragment's
// session as it starts, with its ID as ID.
const wantSessions = `<div class="sessions" data-total="1">
<article class="session state-Running" data-session-id="ID" data-state="Running">
<header>Session <code>ID</code> <span class="state">Running</span> <span class="progress">1 notifying, 2 pending of 3 hosts</span>, created <time>2000-01-01 00:00:00Z</time></header>
<p class="wait" data-wait="budget">Next host hv2 waits: it would take availabilitySet web to 2 VMs down, over its budget of 1.</p>
<table class="budgets">
<thead><tr><th>budget</th><th>limit</th><th>in use</th></tr></thead>
<tbody>
<tr data-budget="maxHosts"><td>hosts at once</td><td>2</td><td class="use">1/2 under way</td></tr>
<tr data-budget="availabilitySet"><td>availabilitySet</td><td>1 VM a group</td><td class="use"><span class="group full">availabilitySet web: 1/1</span></td></tr>
<tr data-budget="updateDomain"><td>updateDomain</td><td>50% of a group</td><td class="use"><span class="group full">update domain 0 of web: 1/1</span></td></tr>
</tbody>
</table>
<table class="session-hosts">
<thead><tr><th>host</th><th>state</th><th>VMs</th><th>events</th><th>started</th><th>ready</th><th>ended</th><th>reason</th></tr></thead>
<tbody>
<tr class="host state-Notifying" data-host="hv1" data-state="Notifying">
<td>hv1</td>
<td class="state">Notifying: 0 of 2 events started, waiting on <button type="button" class="link" data-show="a1">a1</button>, <button type="button" class="link" data-show="web_0">web_0</button> until <time>2000-01-01 00:10:00Z</time> at the latest</td>
<td>2</td>
<td>2</td>
<td><time>2000-01-01 00:00:00Z</time></td>
<td>–</td>
<td>–</td>
<td class="reason">–</td>
</tr>
<tr class="host state-Pending" data-host="hv2" data-state="Pending">
<td>hv2</td>
<td class="state">Pending</td>
<td>2</td>
<td>–</td>
<td>–</td>
<td>–</td>
<td>–</td>
<td class="reason">–</td>
</tr>
<tr class="host state-Pending" data-host="hv3" data-state="Pending">
<td>hv3</td>
<td class="state">Pending</td>
<td>1</td>
<td>–</td>
<td>–</td>
<td>–</td>
<td>–</td>
<td class="reason">–</td>
</tr>
</tbody>
</table>
</article>
<h3>Hosts</h3>
<p class="summary">4 hosts with 6 VMs: 1 notifying, 2 pending, 1 in no session.</p>
<table class="hosts">
<thead><tr><th>host</th><th>VMs</th><th>state</th><th>session</th><th>reason</th></tr></thead>
<tbody>
<tr class="host state-none" data-host="hv0"><td>hv0</td><td>1</td><td class="state">–</td><td>–</td><td class="reason">–</td></tr>
<tr class="host state-Notifying" data-host="hv1"><td>hv1</td><td>2</td><td class="state">Notifying</td><td><code>ID</code> (Running)</td><td class="reason">–</td></tr>
<tr class="host state-Pending" data-host="hv2"><td>hv2</td><td>2</td><td class="state">Pending</td><td><code>ID</code> (Running)</td><td class="reason">–</td></tr>
<tr class="host state-Pending" data-host="hv3"><td>hv3</td><td>1</td><td class="state">Pending</td><td><code>ID</code> (Running)</td><td class="reason">–</td></tr>
</tbody>
</table>
</div>`

// TestSessionsFragment renders one session through its steps, to the
// second: the host under way with the VMs it waits on, the budgets'
// use and the next host they hold back; the host Ready at its last
// approval; the delay after it is done; the next host; a failure
// (with an operator's reason, escaped) that pauses the session.
func TestSessionsFragment(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := newHostEngine(t, true)
		h := ui.New(ui.Config{Engine: eng})
		if got, want := fragment(t, h, "sessions"), `<div class="sessions" data-total="0">
<p class="empty">No maintenance sessions.</p>
<h3>Hosts</h3>
<p class="summary">4 hosts with 6 VMs: 4 in no session.</p>`; !strings.HasPrefix(got, want) {
			t.Fatalf("no session:\n%s\nwant it to start\n%s", got, want)
		}
		s, err := eng.CreateSession(t.Context(), forewarn.SessionSpec{Hosts: []string{"hv1", "hv2", "hv3"}, MaxHosts: 2, Notice: 10 * time.Minute, Delay: 5 * time.Minute,
			MaxUnavailable: map[string]forewarn.Budget{forewarn.GroupAvailabilitySet: {Count: 1}, forewarn.GroupUpdateDomain: {Percent: 50}}})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got, want := fragment(t, h, "sessions"), strings.ReplaceAll(wantSessions, "ID", s.ID); got != want {
			t.Fatalf("sessions fragment:\n%s\nwant:\n%s", got, want)
		}
		contains := func(what string, wants ...string) {
			t.Helper()
			got := fragment(t, h, "sessions")
			for _, w := range wants {
				if !strings.Contains(got, w) {
					t.Errorf("%s: the fragment lacks\n%s\nin\n%s", what, w, got)
				}
			}
		}

		// Both VMs approve: hv1 is Ready, InMaintenance, at +3s.
		time.Sleep(3 * time.Second)
		ses, _ := eng.Session(s.ID)
		if err := eng.Approve(t.Context(), forewarn.Operator, ses.Hosts[0].Events); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		contains("hv1 ready",
			`<tr class="host state-InMaintenance" data-host="hv1" data-state="InMaintenance">
<td>hv1</td>
<td class="state">InMaintenance</td>
<td>2</td>
<td>2</td>
<td><time>2000-01-01 00:00:00Z</time></td>
<td><time>2000-01-01 00:00:03Z</time></td>`,
			`<p class="wait" data-wait="budget">Next host hv2 waits`)

		// Done at +1m: the delay holds hv2 back until +6m.
		time.Sleep(time.Minute - 3*time.Second)
		if err := eng.HostDone(t.Context(), "hv1"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		contains("hv1 done",
			`<span class="progress">1 done, 2 pending of 3 hosts</span>`,
			`<p class="wait" data-wait="delay">Waiting out the delay of 5m0s after a host ended, until <time>2000-01-01 00:06:00Z</time>.</p>`,
			`<tr data-budget="maxHosts"><td>hosts at once</td><td>2</td><td class="use">0/2 under way</td></tr>`,
			`<td class="use">none down</td>`,
			`<tr class="host state-Done" data-host="hv1" data-state="Done">
<td>hv1</td>
<td class="state">Done</td>
<td>2</td>
<td>2</td>
<td><time>2000-01-01 00:00:00Z</time></td>
<td><time>2000-01-01 00:00:03Z</time></td>
<td><time>2000-01-01 00:01:00Z</time></td>`)

		// hv2 starts at +6m, and availability set web holds hv3 back.
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		contains("hv2 under way",
			`<span class="progress">1 done, 1 notifying, 1 pending of 3 hosts</span>`,
			`<p class="wait" data-wait="budget">Next host hv3 waits: it would take availabilitySet web to 2 VMs down, over its budget of 1.</p>`,
			`<td class="use"><span class="group full">availabilitySet web: 1/1</span></td>`,
			`<td class="use"><span class="group full">update domain 1 of web: 1/1</span></td>`,
			`<td class="state">Notifying: 0 of 2 events started, waiting on <button type="button" class="link" data-show="a2">a2</button>, <button type="button" class="link" data-show="web_1">web_1</button> until <time>2000-01-01 00:16:00Z</time> at the latest</td>`)

		if err := eng.HostFail(t.Context(), "hv2", "<script>alert(5)</script>"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		esc := "&lt;script&gt;alert(5)&lt;/script&gt;"
		contains("hv2 failed",
			`<article class="session state-Paused" data-session-id="`+s.ID+`" data-state="Paused">`,
			`<span class="progress">1 done, 1 failed, 1 pending of 3 hosts</span>`,
			`<p class="reason">host hv2 failed: `+esc+`</p>`,
			`<p class="wait" data-wait="paused">Paused: starts no host until resumed.</p>`,
			`<td class="reason">`+esc+`</td>`,
			`<tr class="host state-Failed" data-host="hv2"><td>hv2</td><td>2</td><td class="state">Failed</td><td><code>`+s.ID+`</code> (Paused)</td><td class="reason">`+esc+`</td></tr>`)
		if strings.Contains(fragment(t, h, "sessions"), "<script>") {
			t.Fatal("the failure's reason is not escaped")
		}
	})
}

// TestStreamSessions: the sessions fragment is pushed when a session
// starts and when a host ends, and when time alone changes it: its delay
// ends while a budget holds its next host back, which commits nothing.
func TestStreamSessions(t *testing.T) {
	eng := newHostEngine(t, false) // no VM has called: events start at once
	hs := serve(t, eng, ui.Config{})
	_, ch := hs.stream(t, "")
	next(t, ch, "sessions", 5*time.Second, func(d string) bool { return strings.Contains(d, "No maintenance sessions.") })
	s, err := eng.CreateSession(t.Context(), forewarn.SessionSpec{Hosts: []string{"hv0", "hv1", "hv2"}, MaxHosts: 2, Delay: 2 * time.Second,
		MaxUnavailable: map[string]forewarn.Budget{forewarn.GroupAvailabilitySet: {Count: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	next(t, ch, "sessions", 2*time.Second, func(d string) bool {
		return strings.Contains(d, `data-session-id="`+s.ID+`"`) &&
			strings.Contains(d, `<p class="wait" data-wait="maxHosts">Waiting for a host to end: 2 under way, at most 2 at once.</p>`) &&
			strings.Contains(d, `<tr class="host state-InMaintenance" data-host="hv1" data-state="InMaintenance">`)
	})
	if err := eng.HostDone(t.Context(), "hv0"); err != nil {
		t.Fatal(err)
	}
	ended := time.Now()
	ev := next(t, ch, "sessions", 2*time.Second, func(d string) bool { return strings.Contains(d, `data-wait="delay"`) })
	rev := eng.Revision()
	if !strings.Contains(ev.data, `<tr class="host state-Done" data-host="hv0" data-state="Done">`) {
		t.Fatalf("after hv0 done:\n%s", ev.data)
	}
	next(t, ch, "sessions", 4*time.Second, func(d string) bool {
		return strings.Contains(d, `<p class="wait" data-wait="budget">Next host hv2 waits: it would take availabilitySet web to 2 VMs down, over its budget of 1.</p>`)
	})
	if took := time.Since(ended); took < 2*time.Second {
		t.Fatalf("the delay's end was pushed %s after the host ended, before its end", took)
	}
	if eng.Revision() != rev {
		t.Fatalf("the store moved from revision %d to %d: the push may have followed a commit, not the delay's end", rev, eng.Revision())
	}
}

package ui

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
)

// TestSessionsBounded: of many sessions the newest MaxSessions are
// listed; of a session's many hosts those under way, the failed, the
// next Pending ones, then the last done, MaxSessionHosts in all, in the
// session's order; of a budget's groups the first MaxBudgetGroups; of
// the fleet's hosts MaxHosts; each with how many were left out.
func TestSessionsBounded(t *testing.T) {
	s := &forewarn.Session{ID: "S0", State: forewarn.SessionRunning}
	var hosts []engine.HostSummary
	for i := range 300 {
		st := forewarn.HostPending
		switch {
		case i < 100:
			st = forewarn.HostDone
		case i < 102:
			st = forewarn.HostFailed
		case i < 105:
			st = forewarn.HostInMaintenance
		}
		name := fmt.Sprintf("hv%03d", i)
		s.Hosts = append(s.Hosts, forewarn.SessionHost{Name: name, State: st})
		hosts = append(hosts, engine.HostSummary{Name: name, VMs: 100, Status: engine.HostStatus{Session: "S0", State: st, SessionState: forewarn.SessionRunning}})
	}
	groups := make([]engine.GroupUse, 8)
	for i := range groups {
		groups[i] = engine.GroupUse{Name: fmt.Sprintf("zone z%d", i), Down: 1, Limit: 2}
	}
	progress := []engine.SessionProgress{{Session: s, Underway: 3, MaxHosts: 3, InWindow: true, Wait: engine.WaitMaxHosts,
		Budgets: []engine.BudgetUse{{Kind: forewarn.GroupZone, Budget: forewarn.Budget{Count: 2}, Groups: groups}}}}
	for i := range MaxSessions {
		progress = append(progress, engine.SessionProgress{Session: &forewarn.Session{ID: fmt.Sprintf("old%d", i), State: forewarn.SessionDone}})
	}
	v := buildSessions(progress, 30, hosts)
	if len(v.Sessions) != MaxSessions || v.More != 10 || v.Sessions[0].ID != "S0" {
		t.Fatalf("%d sessions shown, %d more, first %s; want %d, 10, S0", len(v.Sessions), v.More, v.Sessions[0].ID, MaxSessions)
	}
	sv := v.Sessions[0]
	var names []string
	for _, r := range sv.Rows {
		names = append(names, r.Name)
	}
	// The 2 failed, the 3 under way and the first 45 of the 195 Pending,
	// in the session's order; no room is left for the done.
	var want []string
	for i := 100; i < 150; i++ {
		want = append(want, fmt.Sprintf("hv%03d", i))
	}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("rows\n got %v\nwant %v", names, want)
	}
	if sv.MoreRows != (hostCounts{Pending: 150, Done: 100}) {
		t.Fatalf("not listed: %+v", sv.MoreRows)
	}
	if b := sv.Budgets[0]; len(b.Groups) != MaxBudgetGroups || b.MoreGroups != 3 || b.Limit != "2 VMs a group" {
		t.Fatalf("budget: %d groups, %d more, limit %q", len(b.Groups), b.MoreGroups, b.Limit)
	}
	if len(v.Hosts.Rows) != MaxHosts || v.Hosts.More != 200 || v.Hosts.VMs != 30000 ||
		v.Hosts.Counts != (hostCounts{Pending: 195, InMaintenance: 3, Failed: 2, Done: 100}) {
		t.Fatalf("hosts: %d rows, %d more, %d VMs, %+v", len(v.Hosts.Rows), v.Hosts.More, v.Hosts.VMs, v.Hosts.Counts)
	}
	var buf bytes.Buffer
	if err := render(&buf, "sessions", v); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		`<p class="more">… and 100 done, 150 pending not listed.</p>`,
		`… and 3 more groups</td>`,
		`<p class="more">… and 10 older sessions.</p>`,
		`<p class="summary">300 hosts with 30000 VMs: 100 done, 2 failed, 3 in maintenance, 195 pending.</p>`,
		`<p class="more">… and 200 more hosts.</p>`,
	} {
		if !strings.Contains(buf.String(), w) {
			t.Errorf("the fragment lacks %s", w)
		}
	}
	if n := strings.Count(buf.String(), `<tr class="host `); n != MaxSessionHosts+MaxHosts {
		t.Errorf("%d host rows, want %d", n, MaxSessionHosts+MaxHosts)
	}
	// Ended sessions are one line each: no hosts, no budgets.
	if strings.Count(buf.String(), `<table class="budgets">`) != 1 {
		t.Errorf("budgets shown for ended sessions")
	}
}

// TestPickHosts: with room to spare, the last done hosts fill the list
// after the Pending ones.
func TestPickHosts(t *testing.T) {
	var hosts []forewarn.SessionHost
	for i := range MaxSessionHosts + 10 {
		st := forewarn.HostDone
		if i >= 50 {
			st = forewarn.HostPending
		}
		hosts = append(hosts, forewarn.SessionHost{Name: fmt.Sprint(i), State: st})
	}
	show := pickHosts(hosts)
	left := 0
	for i, ok := range show {
		if !ok {
			if i >= 10 {
				t.Errorf("host %d (%s) not shown", i, hosts[i].State)
			}
			left++
		}
	}
	if left != 10 {
		t.Fatalf("%d hosts left out, want the first 10 done", left)
	}
}

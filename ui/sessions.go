package ui

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
)

// What the sessions fragment shows at most, so that its size does not
// grow with the hosts or with the sessions kept.
const (
	// MaxSessions is how many maintenance sessions are listed: the
	// newest.
	MaxSessions = 20
	// MaxSessionHosts is how many hosts a session lists.
	MaxSessionHosts = 50
	// MaxBudgetGroups is how many groups a budget lists: the fullest.
	MaxBudgetGroups = 5
	// MaxHosts is how many hosts the list of the fleet's hosts shows.
	MaxHosts = 100
)

// hostCounts are hosts by state in a session; Free counts hosts of the
// fleet that no session names.
type hostCounts struct {
	Pending, Notifying, InMaintenance, Done, Failed, Free int
}

// add counts a host in state s, "" for one no session names.
func (c *hostCounts) add(s forewarn.HostState) {
	switch s {
	case forewarn.HostPending:
		c.Pending++
	case forewarn.HostNotifying:
		c.Notifying++
	case forewarn.HostInMaintenance:
		c.InMaintenance++
	case forewarn.HostDone:
		c.Done++
	case forewarn.HostFailed:
		c.Failed++
	default:
		c.Free++
	}
}

// String writes the counts as "2 done, 1 in maintenance, 3 pending",
// the states in the order a host ends them; "" when all are 0.
func (c hostCounts) String() string {
	var parts []string
	for _, p := range []struct {
		n    int
		text string
	}{{c.Done, "done"}, {c.Failed, "failed"}, {c.InMaintenance, "in maintenance"}, {c.Notifying, "notifying"}, {c.Pending, "pending"}, {c.Free, "in no session"}} {
		if p.n > 0 {
			parts = append(parts, strconv.Itoa(p.n)+" "+p.text)
		}
	}
	return strings.Join(parts, ", ")
}

// sessionsView is the data of the sessions fragment: the newest
// sessions, then the fleet's hosts.
type sessionsView struct {
	Total    int
	Sessions []sessionView
	// More counts the older sessions not shown.
	More  int
	Hosts hostsView
}

// sessionView is one session: its summary and, while it is open, its
// limits, their use and its hosts.
type sessionView struct {
	ID, State, Reason, Created string
	Hosts                      int
	Counts                     hostCounts
	// Open reports whether the session may still start hosts or has
	// hosts under way: its limits, its wait and its hosts are shown.
	Open               bool
	Underway, MaxHosts int
	Windows            string
	InWindow           bool
	WindowChange       string
	Delay              string
	Wait               string
	Until              string
	Blocked            engine.BlockedHost
	Budgets            []budgetView
	Rows               []sessionHostView
	// MoreRows counts the hosts not listed, by state.
	MoreRows hostCounts
}

// budgetView is one budget of a session with the fullest groups it
// holds VMs down in.
type budgetView struct {
	Kind, Limit string
	Groups      []engine.GroupUse
	MoreGroups  int
}

// sessionHostView is one host of a session.
type sessionHostView struct {
	Name, State, Reason string
	// VMs counts the VMs the host had when it started, or has now while
	// it is Pending.
	VMs, Events             int
	Started, ReadyAt, Ended string
	Notifying               bool
	EventsStarted           int
	Waiting                 []string
	MoreWaiting             int
	NotBefore               string
}

// hostsView is the fleet's hosts: counts of all, rows of the first
// MaxHosts by name.
type hostsView struct {
	Total, VMs int
	Counts     hostCounts
	Rows       []engine.HostSummary
	More       int
}

// formatTime writes t as the views do, "" for the zero time.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timeFormat)
}

// buildSessions lays out the progress of the newest sessions (newest
// first, of total) and the fleet's hosts, sorted by name as
// engine.HostSummaries returns them. It costs the hosts of the sessions
// shown and the hosts of the fleet, bounded in what it keeps.
func buildSessions(progress []engine.SessionProgress, total int, hosts []engine.HostSummary) *sessionsView {
	v := &sessionsView{Total: total}
	if len(progress) > MaxSessions {
		progress = progress[:MaxSessions]
	}
	v.More = total - len(progress)
	for i := range progress {
		v.Sessions = append(v.Sessions, buildSession(&progress[i], hosts))
	}
	v.Hosts.Total = len(hosts)
	for i, h := range hosts {
		v.Hosts.VMs += h.VMs
		v.Hosts.Counts.add(h.Status.State)
		if i < MaxHosts {
			v.Hosts.Rows = append(v.Hosts.Rows, h)
		}
	}
	v.Hosts.More = len(hosts) - len(v.Hosts.Rows)
	return v
}

// buildSession returns the view of one session's progress; hosts, the
// fleet's by name, count the VMs on each host now, which a Pending host
// shows.
func buildSession(p *engine.SessionProgress, hosts []engine.HostSummary) sessionView {
	s := p.Session
	sv := sessionView{
		ID: s.ID, State: string(s.State), Reason: s.Reason, Created: formatTime(s.Created), Hosts: len(s.Hosts),
		Open: !s.State.Ended() || p.Underway > 0, Underway: p.Underway, MaxHosts: p.MaxHosts,
		Windows: strings.Join(s.Spec.Windows, "; "), InWindow: p.InWindow, WindowChange: formatTime(p.WindowChange),
		Wait: string(p.Wait), Until: formatTime(p.Until), Blocked: p.Blocked,
	}
	if s.Spec.Delay > 0 {
		sv.Delay = s.Spec.Delay.String()
	}
	for _, h := range s.Hosts {
		sv.Counts.add(h.State)
	}
	if !sv.Open {
		return sv
	}
	for _, b := range p.Budgets {
		bv := budgetView{Kind: b.Kind, Groups: b.Groups}
		switch {
		case b.Budget.Percent > 0:
			bv.Limit = strconv.Itoa(b.Budget.Percent) + "% of a group"
		case b.Budget.Count == 1:
			bv.Limit = "1 VM a group"
		default:
			bv.Limit = strconv.Itoa(b.Budget.Count) + " VMs a group"
		}
		if len(bv.Groups) > MaxBudgetGroups {
			bv.Groups, bv.MoreGroups = bv.Groups[:MaxBudgetGroups], len(bv.Groups)-MaxBudgetGroups
		}
		sv.Budgets = append(sv.Budgets, bv)
	}
	show := pickHosts(s.Hosts)
	for i := range s.Hosts {
		h := &s.Hosts[i]
		if !show[i] {
			sv.MoreRows.add(h.State)
			continue
		}
		hv := sessionHostView{
			Name: h.Name, State: string(h.State), Reason: h.Reason, VMs: h.NumVMs(), Events: h.NumEvents(),
			Started: formatTime(h.Started), ReadyAt: formatTime(h.ReadyAt), Ended: formatTime(h.Ended),
		}
		if h.State == forewarn.HostPending {
			hv.VMs = vmsOn(hosts, h.Name)
		}
		if he, ok := p.Notifying[h.Name]; ok {
			hv.Notifying, hv.EventsStarted, hv.NotBefore = true, he.Started, formatTime(he.NotBefore)
			hv.Waiting, hv.MoreWaiting = firstNames(he.Waiting)
		}
		sv.Rows = append(sv.Rows, hv)
	}
	return sv
}

// vmsOn returns how many VMs hosts, sorted by name, count on the host
// name; 0 for a host none of them is.
func vmsOn(hosts []engine.HostSummary, name string) int {
	i, ok := slices.BinarySearchFunc(hosts, name, func(h engine.HostSummary, name string) int { return strings.Compare(h.Name, name) })
	if !ok {
		return 0
	}
	return hosts[i].VMs
}

// pickHosts returns which of hosts a session lists, at most
// MaxSessionHosts of them: first those under way, then the failed, then
// the next Pending ones in the session's order, then the last done.
func pickHosts(hosts []forewarn.SessionHost) []bool {
	show := make([]bool, len(hosts))
	left := MaxSessionHosts
	take := func(i int) {
		if left > 0 && !show[i] {
			show[i] = true
			left--
		}
	}
	for _, want := range []func(forewarn.HostState) bool{
		func(s forewarn.HostState) bool { return s != forewarn.HostPending && !s.Ended() },
		func(s forewarn.HostState) bool { return s == forewarn.HostFailed },
		func(s forewarn.HostState) bool { return s == forewarn.HostPending },
	} {
		for i := range hosts {
			if want(hosts[i].State) {
				take(i)
			}
		}
	}
	for i := len(hosts) - 1; i >= 0; i-- {
		take(i)
	}
	return show
}

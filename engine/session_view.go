package engine

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/forewarn/forewarn"
)

// What an operator's view shows of a session: how far its hosts are,
// what the hosts under way use of its limits, and why it starts no host
// now. All of it is derived at one now from the committed sessions,
// events and fleet, as a step of the session is; none of it is stored.

// WaitReason says why a session starts no host at one now.
type WaitReason string

// The wait reasons, in the order a step of the session checks them.
const (
	// WaitNone: a host may start now; the leader's next step starts it.
	WaitNone WaitReason = ""
	// WaitEnded: the session is Cancelled or Done.
	WaitEnded WaitReason = "ended"
	// WaitPaused: the session is Paused.
	WaitPaused WaitReason = "paused"
	// WaitLast: no host is Pending; the hosts under way have to end.
	WaitLast WaitReason = "last"
	// WaitMaxHosts: MaxHosts hosts are under way.
	WaitMaxHosts WaitReason = "maxHosts"
	// WaitWindow: none of the session's windows is open.
	WaitWindow WaitReason = "window"
	// WaitDelay: a host ended less than the session's Delay ago.
	WaitDelay WaitReason = "delay"
	// WaitBudget: the next Pending host would take a group past its
	// budget.
	WaitBudget WaitReason = "budget"
)

// SessionProgress is a session as it stands at one now.
type SessionProgress struct {
	// Session is a copy of the session.
	Session *forewarn.Session
	// Underway counts its hosts Notifying or InMaintenance; MaxHosts is
	// how many may be at once.
	Underway, MaxHosts int
	// Notifying holds how far the events of each Notifying host are, by
	// host name.
	Notifying map[string]HostEvents
	// Budgets are the session's budgets per group kind, in
	// forewarn.GroupKinds order, each with the groups in which the hosts
	// under way have VMs.
	Budgets []BudgetUse
	// InWindow reports whether one of the session's windows is open now
	// (always, for a session without windows). WindowChange is when that
	// changes: when the open windows close, or when the next one opens;
	// zero without windows, for an ended session, or when the windows
	// never close.
	InWindow     bool
	WindowChange time.Time
	// Wait says why the session starts no host now; Until is when a
	// WaitWindow or a WaitDelay ends, and Blocked is the host and the
	// group of a WaitBudget.
	Wait    WaitReason
	Until   time.Time
	Blocked BlockedHost
	// Next is when this progress changes with time alone, with nothing
	// committed: a window opens or closes, or the delay ends. Zero when
	// only a commit changes it.
	Next time.Time
}

// HostEvents is how far the events of a Notifying host are.
type HostEvents struct {
	// Events counts the host's events, Started those that no longer hold
	// it back: Started or ended, or whose VMs all left the fleet.
	Events, Started int
	// Waiting names the VMs of the events that hold it back, and
	// NotBefore is the latest NotBefore among those events: the host is
	// Ready then at the latest.
	Waiting   []string
	NotBefore time.Time
}

// BudgetUse is one budget of a session and what its hosts under way use
// of it.
type BudgetUse struct {
	// Kind is the group kind, one of forewarn.GroupKinds.
	Kind   string
	Budget forewarn.Budget
	// Groups are the groups of that kind with VMs on hosts under way,
	// the fullest first (the most VMs down for their limit), then by
	// name.
	Groups []GroupUse
}

// GroupUse is how many of a group's VMs are down against its limit.
type GroupUse struct {
	// Name names the group as the session's messages do: "update domain
	// 1 of web", "availabilitySet web".
	Name        string
	Down, Limit int
}

// BlockedHost is a Pending host that would take a group past its
// budget: Group.Down counts the group's VMs down with it.
type BlockedHost struct {
	Host  string
	Group GroupUse
}

// SessionProgress returns the progress at now of the newest sessions,
// at most newest of them (every one when newest is 0), newest first,
// and how many sessions there are. A session's progress costs the VMs of
// its hosts under way and, when a host may start, of its next Pending
// host; and, when one of its budgets is a percent and a limit is read (a
// host under way has VMs in a group, or a host may start), a pass over
// the fleet for the groups' sizes, as a step of the session does. Only the copies of the sessions and of
// their Notifying hosts' events are made under the engine's lock; the
// budgets, which read the inventory and the VMs' members, are counted
// without it, so that a pass over the fleet does not hold up commits.
func (e *Engine) SessionProgress(now time.Time, newest int) ([]SessionProgress, int) {
	e.mu.Lock()
	all := slices.SortedFunc(maps.Values(e.sessions), func(a, b *forewarn.Session) int { return sessionOrder(b, a) })
	total := len(all)
	if newest > 0 && len(all) > newest {
		all = all[:newest]
	}
	out := make([]SessionProgress, len(all))
	for i, s := range all {
		out[i] = SessionProgress{Session: s.Clone(), MaxHosts: max(s.Spec.MaxHosts, 1), InWindow: true, Notifying: map[string]HostEvents{}}
		for j := range s.Hosts {
			if h := &s.Hosts[j]; h.State == forewarn.HostNotifying {
				out[i].Notifying[h.Name] = e.hostEventsOf(h)
			}
		}
	}
	e.mu.Unlock()
	for i := range out {
		e.progress(&out[i], now)
	}
	return out, total
}

// progress fills in p, of a copy of a session, at now: what the hosts
// under way use of its limits, and why it starts no host. It checks
// what stepSession checks, through startWait, and takes no lock.
func (e *Engine) progress(p *SessionProgress, now time.Time) {
	s := p.Session
	ws, _ := parseWindows(s.Spec.Windows)
	if len(ws) > 0 && !s.State.Ended() {
		p.InWindow = ws.open(now)
		if p.InWindow {
			p.WindowChange = ws.closes(now)
		} else {
			p.WindowChange = ws.next(now)
		}
		p.Next = p.WindowChange
	}
	down := make(map[string]int)
	for i := range s.Hosts {
		if h := &s.Hosts[i]; h.State != forewarn.HostPending && !h.State.Ended() {
			e.addGroups(&s.Spec, h.VMs, down)
		}
	}
	p.Wait, p.Until, p.Underway = startWait(s, ws, now)
	if p.Wait == WaitDelay && (p.Next.IsZero() || p.Until.Before(p.Next)) {
		p.Next = p.Until
	}
	// The groups' sizes (a pass over the fleet for a percent budget)
	// only when a limit is read: of a group down, or for the budget check.
	var sizes map[string]int
	if len(down) > 0 || p.Wait == WaitNone {
		sizes = e.groupSizes(&s.Spec)
	}
	p.Budgets = budgetUse(&s.Spec, down, sizes)
	if p.Wait != WaitNone {
		return
	}
	// A host may start: does the first Pending one fit in the budgets?
	next := slices.IndexFunc(s.Hosts, func(h forewarn.SessionHost) bool { return h.State == forewarn.HostPending })
	names, _ := e.HostVMs(s.Hosts[next].Name)
	names = slices.DeleteFunc(names, e.deleted)
	if g, n, limit, over := e.overBudget(&s.Spec, names, down, sizes); over {
		p.Wait = WaitBudget
		p.Blocked = BlockedHost{Host: s.Hosts[next].Name, Group: GroupUse{Name: g, Down: n, Limit: limit}}
	}
}

// hostEventsOf returns how far the events of h, Notifying, are: the
// events that hold it back as unstarted says, and their VMs. e.mu must
// be held.
func (e *Engine) hostEventsOf(h *forewarn.SessionHost) HostEvents {
	he := HostEvents{Events: len(h.Events)}
	waiting, latest := e.unstarted(h, func(vm string) { he.Waiting = append(he.Waiting, vm) })
	he.Started, he.NotBefore = he.Events-waiting, latest
	slices.Sort(he.Waiting)
	return he
}

// budgetUse returns spec's budgets with the groups of down, the VMs down
// by group as addGroups counts them, and their limits from sizes.
func budgetUse(spec *forewarn.SessionSpec, down, sizes map[string]int) []BudgetUse {
	byKind := make(map[string][]GroupUse)
	for k, n := range down {
		kind, key, _ := strings.Cut(k, "\x00")
		byKind[kind] = append(byKind[kind], GroupUse{Name: groupName(kind, key), Down: n, Limit: budgetLimit(spec.MaxUnavailable[kind], sizes[k])})
	}
	var out []BudgetUse
	for _, kind := range forewarn.GroupKinds {
		b, ok := spec.MaxUnavailable[kind]
		if !ok {
			continue
		}
		groups := byKind[kind]
		slices.SortFunc(groups, func(x, y GroupUse) int {
			// x.Down/x.Limit against y.Down/y.Limit, fuller first.
			return cmp.Or(cmp.Compare(y.Down*x.Limit, x.Down*y.Limit), strings.Compare(x.Name, y.Name))
		})
		out = append(out, BudgetUse{Kind: kind, Budget: b, Groups: groups})
	}
	return out
}

// budgetLimit is how many VMs of a group of size VMs budget b lets be
// down at once.
func budgetLimit(b forewarn.Budget, size int) int {
	if b.Percent > 0 {
		return max(size*b.Percent/100, 1)
	}
	return b.Count
}

// closes returns when the windows open at t close: the end of the span
// that holds t, followed across the spans that overlap or abut it. It
// returns zero when they are still open a week later (every day, all
// day).
func (ws windows) closes(t time.Time) time.Time {
	end := t.UTC()
	for end.Sub(t) < 8*24*time.Hour {
		today := time.Date(end.Year(), end.Month(), end.Day(), 0, 0, 0, 0, time.UTC)
		later := end
		for _, w := range ws {
			for _, day := range []time.Time{today.AddDate(0, 0, -1), today} {
				if from, to, ok := w.span(day); ok && !end.Before(from) && end.Before(to) && to.After(later) {
					later = to
				}
			}
		}
		if later.Equal(end) {
			return end
		}
		end = later
	}
	return time.Time{}
}

// HostSummary is one host of the fleet as an operator's list shows it.
type HostSummary struct {
	Name string
	// VMs counts the VMs that name the host.
	VMs int
	// Status is where the host is in the newest session that names it.
	Status HostStatus
}

// HostSummaries returns every host that a VM of the inventory in force
// names, sorted by name, with its VM count and its HostStatus. It reads
// the inventory's host index, and costs the hosts and the hosts the
// sessions name, not the VMs.
func (e *Engine) HostSummaries() []HostSummary {
	st := e.HostStatuses()
	inv := e.cur()
	out := make([]HostSummary, 0, inv.hosts.Len())
	inv.hosts.Range(func(name string, vms []string) bool {
		out = append(out, HostSummary{Name: name, VMs: len(vms), Status: st[name]})
		return true
	})
	slices.SortFunc(out, func(a, b HostSummary) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

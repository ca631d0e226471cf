package ui

import (
	"cmp"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/history"
)

// What one render shows at most, so that a fragment's size does not grow
// with the fleet: a 100,000-VM fleet renders as per-group summaries and
// a bounded number of rows, and a filter narrows the rows.
const (
	// MaxQuery is the longest fleet filter accepted, in bytes.
	MaxQuery = 128
	// MaxGroups is how many scope groups the fleet view shows.
	MaxGroups = 100
	// MaxGroupRows is how many VM rows one group shows.
	MaxGroupRows = 50
	// MaxRows is how many VM rows the fleet view shows in all.
	MaxRows = 500
	// MaxDomains is how many update domains a group's summary lists.
	MaxDomains = 32
	// MaxEvents is how many events the timeline shows: the newest.
	MaxEvents = 100
	// MaxNames is how many VM names a list in an event or wave shows.
	MaxNames = 20
	// MaxWaves is how many maintenance waves are shown: the newest.
	MaxWaves = 20
	// MaxDocument is how many bytes of a metadata document the VM view
	// shows.
	MaxDocument = 64 << 10
)

// timeFormat is how the views write a time: UTC, to the second.
const timeFormat = "2006-01-02 15:04:05Z"

// counts are the VMs of a group (or of the fleet) by state.
type counts struct {
	Total, Running, Stopped, Deleted, Enabled, WithEvents int
}

// add counts vm.
func (c *counts) add(vm *engine.VMInfo) {
	c.Total++
	switch vm.State {
	case "stopped":
		c.Stopped++
	case "deleted":
		c.Deleted++
	default:
		c.Running++
	}
	if vm.Enabled {
		c.Enabled++
	}
	if len(vm.Events) > 0 {
		c.WithEvents++
	}
}

// groupKey identifies a scope group; sub is a scale set's placement
// group. A struct, not a joined string, so that grouping allocates
// nothing per VM.
type groupKey struct{ kind, name, sub string }

// scopeOf returns the group vm is shown in: its availability set, cloud
// service, scale set (and placement group), Auto Scaling group or zone,
// in that order of preference; a VM with none is standalone.
func scopeOf(vm *forewarn.VM) groupKey {
	switch {
	case vm.AvailabilitySet != "":
		return groupKey{"availability set", vm.AvailabilitySet, ""}
	case vm.CloudService != "":
		return groupKey{"cloud service", vm.CloudService, ""}
	case vm.ScaleSet != "":
		return groupKey{"scale set", vm.ScaleSet, vm.PlacementGroup}
	case vm.AutoScalingGroup != "":
		return groupKey{"Auto Scaling group", vm.AutoScalingGroup, ""}
	case vm.Zone != "":
		return groupKey{"zone", vm.Zone, ""}
	}
	return groupKey{"standalone", "", ""}
}

// fleetView is the data of the fleet fragment.
type fleetView struct {
	Query string
	// All counts the whole fleet, Matched the VMs the query matches.
	All, Matched counts
	Groups       []*groupView
	// MoreGroups counts the matching groups not shown.
	MoreGroups int
	// Capped reports whether MaxRows left rows out.
	Capped bool
	// Networks reports whether a VM of the fleet names its network, and
	// Hosts whether one names its host: the rows then show a network
	// column, a host column.
	Networks, Hosts bool
}

// groupView is one scope group: its summary and its first rows.
type groupView struct {
	Kind, Name, Sub string
	Counts          counts
	Domains         []domainCount
	MoreDomains     int
	Rows            []rowView
	// More counts the group's matching VMs not shown.
	More int

	udCount map[int]int
	quota   int // rows to show
	// cut and cutLeft select the rows: every VM of a domain below cut,
	// and the first cutLeft of domain cut.
	cut, cutLeft int
}

// domainCount is how many of a group's (matching) VMs are in an update
// domain.
type domainCount struct{ UD, VMs int }

// rowView is one VM's row.
type rowView struct {
	Name, Network, Host, Provider, State string
	// StateText is State with what the VM returns to, for people.
	StateText       string
	Azure, Enabled  bool
	UD              int
	Incarnation     int64
	LastSeen        string
	Events          int
	Spot, Removable bool
}

// buildFleet groups vms by scope and update domain for the fleet view,
// keeping the VMs whose name or group name contains query (without
// regard to ASCII case). It takes two passes over vms and allocates per
// group, not per VM: the time is linear in the fleet and the rows shown
// are bounded.
func buildFleet(vms []engine.VMInfo, query string) *fleetView {
	fv := &fleetView{Query: query}
	index := map[groupKey]*groupView{}
	var order []*groupView
	match := func(vm *engine.VMInfo, k groupKey) bool {
		return query == "" || containsFold(vm.Name, query) || containsFold(k.name, query) || containsFold(k.sub, query)
	}
	for i := range vms {
		vm := &vms[i]
		fv.All.add(vm)
		fv.Networks = fv.Networks || vm.Network != ""
		fv.Hosts = fv.Hosts || vm.Host != ""
		k := scopeOf(&vm.VM)
		if !match(vm, k) {
			continue
		}
		fv.Matched.add(vm)
		g := index[k]
		if g == nil {
			g = &groupView{Kind: k.kind, Name: k.name, Sub: k.sub, udCount: map[int]int{}}
			index[k] = g
			order = append(order, g)
		}
		g.Counts.add(vm)
		g.udCount[vm.UpdateDomain]++
	}
	if len(order) > MaxGroups {
		fv.MoreGroups = len(order) - MaxGroups
		order = order[:MaxGroups]
	}
	// Quotas in group order: each group its first MaxGroupRows rows in
	// update-domain order, and MaxRows in all.
	left := MaxRows
	for _, g := range order {
		uds := slices.Sorted(maps.Keys(g.udCount))
		for i, ud := range uds {
			if i == MaxDomains {
				g.MoreDomains = len(uds) - MaxDomains
				break
			}
			g.Domains = append(g.Domains, domainCount{UD: ud, VMs: g.udCount[ud]})
		}
		g.quota = min(g.Counts.Total, MaxGroupRows, left)
		left -= g.quota
		g.More = g.Counts.Total - g.quota
		if g.quota < g.Counts.Total && g.quota < MaxGroupRows {
			fv.Capped = true
		}
		need := g.quota
		g.cut, g.cutLeft = 0, 0
		for _, ud := range uds {
			n := g.udCount[ud]
			g.cut, g.cutLeft = ud, need
			if n >= need {
				break
			}
			need -= n
		}
		g.Rows = make([]rowView, 0, g.quota)
	}
	// Groups past MaxGroups keep a quota of 0: the second pass gives them
	// no rows.
	for i := range vms {
		vm := &vms[i]
		k := scopeOf(&vm.VM)
		g := index[k]
		if g == nil || len(g.Rows) == g.quota || vm.UpdateDomain > g.cut || !match(vm, k) {
			continue
		}
		if vm.UpdateDomain == g.cut {
			if g.cutLeft == 0 {
				continue
			}
			g.cutLeft--
		}
		g.Rows = append(g.Rows, row(vm))
	}
	for _, g := range order {
		slices.SortStableFunc(g.Rows, func(a, b rowView) int { return cmp.Compare(a.UD, b.UD) })
	}
	fv.Groups = order
	return fv
}

// row returns vm's row.
func row(vm *engine.VMInfo) rowView {
	r := rowView{
		Name: vm.Name, Network: vm.Network, Host: vm.Host, Provider: string(vm.Provider), State: vm.State, StateText: vm.StateText(),
		Azure: vm.Provider == forewarn.Azure, Enabled: vm.Enabled, UD: vm.UpdateDomain,
		Incarnation: vm.Incarnation, Events: len(vm.Events), Spot: vm.Evictable(),
		Removable: vm.ScaleSet != "" || vm.AutoScalingGroup != "",
	}
	if !vm.LastSeen.IsZero() {
		r.LastSeen = vm.LastSeen.UTC().Format(timeFormat)
	}
	return r
}

// containsFold reports whether s contains sub, without regard to ASCII
// case, allocating nothing.
func containsFold(s, sub string) bool {
	if sub == "" {
		return true
	}
	for i := 0; i+len(sub) <= len(s); i++ {
		j := 0
		for j < len(sub) && lower(s[i+j]) == lower(sub[j]) {
			j++
		}
		if j == len(sub) {
			return true
		}
	}
	return false
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// eventsView is the data of the events fragment: the newest events on
// one timeline.
type eventsView struct {
	// Total counts every event the server holds, Active the Scheduled,
	// Started and Pending ones.
	Total, Active int
	Events        []eventView
	// More counts the events not shown.
	More int
	// From and To bound the timeline; Now is now's position on it.
	From, To, Now string
}

// timelineWidth is the width of the timeline's coordinate system, and
// timelineMargin the room left at each end.
const (
	timelineWidth  = 1000
	timelineMargin = 10
)

// eventView is one event: its facts, its marks on the timeline and the
// actions its status allows.
type eventView struct {
	ID, Type, Status, Source, Description, Wave string
	Resources                                   int
	Names                                       []string
	MoreNames                                   int
	Times                                       []stamp
	Approvals                                   []stamp
	Marks                                       []mark
	// SpanX and SpanWidth place the event's bar: from its creation to
	// its end (or, while it has none, its NotBefore or now).
	SpanX, SpanWidth                             string
	CanApprove, CanStart, CanComplete, CanCancel bool
}

// stamp is a named moment of an event.
type stamp struct {
	Name, At string
}

// mark is a moment's place on the timeline: X is a percentage of its
// width, such as "12.5%".
type mark struct {
	X, Class, Text string
}

// buildEvents lays out the newest MaxEvents of evs (oldest first, as
// the engine returns them) on one timeline ending no earlier than now.
func buildEvents(evs []*forewarn.Event, now time.Time) *eventsView {
	v := &eventsView{Total: len(evs)}
	for _, ev := range evs {
		if ev.Status.Active() || ev.Status == forewarn.Pending {
			v.Active++
		}
	}
	shown := evs
	if len(shown) > MaxEvents {
		shown = shown[len(shown)-MaxEvents:]
		v.More = len(evs) - MaxEvents
	}
	from, to := now, now
	for _, ev := range shown {
		if ev.Created.Before(from) {
			from = ev.Created
		}
		if end := endOf(ev, now); end.After(to) {
			to = end
		}
	}
	span := to.Sub(from)
	// permille is t's place on the timeline, in thousandths, within a
	// margin of 1% at each end so that the marks there show whole.
	permille := func(t time.Time) int64 {
		if span <= 0 {
			return timelineWidth - timelineMargin
		}
		// In floating point: the product of a span of months in
		// nanoseconds and the width overflows an int64.
		p := timelineMargin + int64(float64(timelineWidth-2*timelineMargin)*(float64(t.Sub(from))/float64(span)))
		return min(max(p, 0), timelineWidth)
	}
	x := func(t time.Time) string { return percent(permille(t)) }
	v.From, v.To, v.Now = from.UTC().Format(timeFormat), to.UTC().Format(timeFormat), x(now)
	// Newest first.
	for i := len(shown) - 1; i >= 0; i-- {
		ev := shown[i]
		e := eventView{
			ID: ev.ID, Type: string(ev.Type), Status: string(ev.Status), Source: string(ev.Source),
			Description: ev.Description, Wave: ev.Wave, Resources: len(ev.Resources),
			CanApprove: ev.Status == forewarn.Scheduled, CanStart: ev.Status == forewarn.Scheduled,
			CanComplete: ev.Status == forewarn.Started,
			CanCancel:   ev.Status == forewarn.Scheduled || ev.Status == forewarn.Pending,
		}
		e.Names, e.MoreNames = firstNames(ev.Resources)
		moment := func(name, class string, t time.Time) {
			if t.IsZero() {
				return
			}
			at := t.UTC().Format(timeFormat)
			e.Times = append(e.Times, stamp{name, at})
			e.Marks = append(e.Marks, mark{x(t), class, name + " " + at})
		}
		moment("created", "created", ev.Created)
		moment("warned", "warned", ev.WarnedAt)
		moment("NotBefore", "notbefore", ev.NotBefore)
		moment("started", "started", ev.StartedAt)
		switch {
		case !ev.EndedAt.IsZero():
			moment("ended", "ends", ev.EndedAt)
		case ev.Status == forewarn.Started:
			moment("ends", "ends", ev.EndsAt())
		}
		for _, a := range ev.Approvals {
			at := a.At.UTC().Format(timeFormat)
			e.Approvals = append(e.Approvals, stamp{a.By, at})
			e.Marks = append(e.Marks, mark{x(a.At), "approval", "approved by " + a.By + " " + at})
		}
		x1, x2 := permille(ev.Created), permille(endOf(ev, now))
		e.SpanX, e.SpanWidth = percent(x1), percent(max(x2-x1, 0))
		v.Events = append(v.Events, e)
	}
	return v
}

// percent writes p thousandths as a percentage with one decimal.
func percent(p int64) string {
	return strconv.FormatInt(p/10, 10) + "." + strconv.FormatInt(p%10, 10) + "%"
}

// endOf returns where an event's bar ends: when it ended or ends, else
// its NotBefore, else now.
func endOf(ev *forewarn.Event, now time.Time) time.Time {
	switch {
	case !ev.EndedAt.IsZero():
		return ev.EndedAt
	case ev.Status == forewarn.Started:
		return ev.EndsAt()
	case !ev.NotBefore.IsZero():
		return ev.NotBefore
	}
	return now
}

// firstNames returns the first MaxNames of names and how many it left
// out.
func firstNames(names []string) ([]string, int) {
	if len(names) <= MaxNames {
		return names, 0
	}
	return names[:MaxNames], len(names) - MaxNames
}

// wavesView is the data of the waves fragment.
type wavesView struct {
	Total int
	Waves []waveView
	// More counts the older waves not shown.
	More int
}

// waveView is one maintenance wave, by update domain.
type waveView struct {
	ID, Scope, Type, Status, Created string
	Domains                          []waveDomainView
}

// waveDomainView is one update domain's step of a wave, with who has
// approved its event and who has not yet.
type waveDomainView struct {
	UD                  int
	Event, Status       string
	VMs                 int
	Approved            []stamp
	Waiting             []string
	MoreWaiting         int
	AwaitsApproval, Off bool
}

// buildWaves shows the newest MaxWaves of waves (oldest first, as the
// engine returns them), newest first; evs are the events by ID.
func buildWaves(waves []*engine.Wave, evs map[string]*forewarn.Event) *wavesView {
	v := &wavesView{Total: len(waves)}
	shown := waves
	if len(shown) > MaxWaves {
		shown = shown[len(shown)-MaxWaves:]
		v.More = len(waves) - MaxWaves
	}
	for i := len(shown) - 1; i >= 0; i-- {
		w := shown[i]
		wv := waveView{ID: w.ID, Scope: w.Scope, Type: string(w.Type), Status: w.Status, Created: w.Created.UTC().Format(timeFormat)}
		for _, d := range w.Domains {
			dv := waveDomainView{UD: d.UpdateDomain, Event: d.Event, Status: string(d.Status), VMs: len(d.VMs)}
			ev := evs[d.Event]
			approved := map[string]bool{}
			if ev != nil {
				for _, a := range ev.Approvals {
					approved[a.By] = true
					dv.Approved = append(dv.Approved, stamp{a.By, a.At.UTC().Format(timeFormat)})
				}
			}
			// Who has not approved matters while the domain waits: Pending
			// (its turn has not come) or Scheduled (its notice runs).
			dv.AwaitsApproval = d.Status == forewarn.Scheduled || d.Status == forewarn.Pending
			if dv.AwaitsApproval && !approved[forewarn.Operator] {
				for _, name := range d.VMs {
					if approved[name] {
						continue
					}
					if len(dv.Waiting) == MaxNames {
						dv.MoreWaiting++
						continue
					}
					dv.Waiting = append(dv.Waiting, name)
				}
			}
			dv.Off = d.Status == forewarn.Completed || d.Status == forewarn.Canceled
			wv.Domains = append(wv.Domains, dv)
		}
		v.Waves = append(v.Waves, wv)
	}
	return v
}

// vmView is the data of the VM fragment: the VM, what it sees now on
// each metadata API, and its recent requests.
type vmView struct {
	VM engine.VMInfo
	// Kind, Group and Sub name the VM's scope group, as the fleet view
	// shows it.
	Kind, Group, Sub string
	LastSeen         string
	Documents        []documentView
	History          []historyView
	Removable        bool
}

// documentView is one metadata document as the VM sees it now.
type documentView struct {
	API, Path, Body string
	// Cut counts the bytes left out of Body.
	Cut int
}

// historyView is one recorded metadata request.
type historyView struct {
	Time, API, Method, Path, APIVersion, PollEnd, Approved, Latency string
	Status                                                          int
}

// buildVM returns the VM view of info with its documents (by API, then
// path) and its history (newest first).
func buildVM(info engine.VMInfo, docs map[string]map[string]string, hist []history.Entry) *vmView {
	k := scopeOf(&info.VM)
	v := &vmView{VM: info, Kind: k.kind, Group: k.name, Sub: k.sub, Removable: info.ScaleSet != "" || info.AutoScalingGroup != ""}
	if !info.LastSeen.IsZero() {
		v.LastSeen = info.LastSeen.UTC().Format(timeFormat)
	}
	for _, api := range slices.Sorted(maps.Keys(docs)) {
		for _, p := range slices.Sorted(maps.Keys(docs[api])) {
			body := docs[api][p]
			d := documentView{API: api, Path: p, Body: body}
			if len(body) > MaxDocument {
				d.Body, d.Cut = body[:MaxDocument], len(body)-MaxDocument
			}
			v.Documents = append(v.Documents, d)
		}
	}
	for _, e := range hist {
		v.History = append(v.History, historyView{
			Time: e.Time.UTC().Format("2006-01-02 15:04:05.000Z"), API: e.API, Method: e.Method, Path: e.Path,
			APIVersion: e.APIVersion, PollEnd: e.PollEnd, Approved: strings.Join(e.Approved, ", "),
			Latency: e.Latency.Round(time.Microsecond).String(), Status: e.Status,
		})
	}
	return v
}

// render executes the named fragment template with data into w.
func render(w io.Writer, name string, data any) error {
	return fragments.ExecuteTemplate(w, name, data)
}

// Package report builds the client-behaviour report: per VM, what the
// seeds ask of a maintenance client and what the VM's client did (how
// often it called, requests refused for a missing metadata header,
// throttled requests, api-versions, long-polls, approvals it should not
// have made), and per event, whether any VM read it and who approved it.
//
// The counts come from the per-VM accumulators the metadata servers keep
// (history.Stats) and the marks they leave on events (history.Seen); the
// events from the engine. Building a report is linear in the VMs and the
// events.
package report

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/azure"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/history"
)

// Finding kinds about a VM's client.
const (
	// SlowPolling: gaps between the VM's calls whose part while an event
	// it could see was pending (Scheduled: once started, the VM may well
	// be down) is over history.SlowGap (5 times the API's expected
	// interval, and one more for jitter), including the silence since its
	// last call. A gap stays counted once the event has started or
	// ended.
	SlowPolling = "slow-polling"
	// ReadAfterStart: events the VM first read only after they started,
	// having read no event during their notice, when that notice was
	// over history.SlowGap: time enough for a client polling as expected
	// to read it.
	ReadAfterStart = "read-after-start"
	// NoMetadataHeader: requests refused for lacking Metadata: true
	// (Azure, 400) or Metadata-Flavor: Google (Compute Engine, 403).
	NoMetadataHeader = "no-metadata-header"
	// Throttled: requests answered 429.
	Throttled = "throttled"
	// PreviewAPIVersion: Scheduled Events requests at the 2017-03-01
	// preview.
	PreviewAPIVersion = "preview-api-version"
	// VersionHidesEvents: Scheduled Events requests at an api-version
	// that does not show event types the VM can get (Terminate before
	// 2019-01-01 for a scale set VM, Preempt before 2017-11-01 for a Spot
	// VM).
	VersionHidesEvents = "api-version-hides-events"
	// LongPollWithoutETag: wait_for_change requests without last_etag,
	// which may miss a change made between two requests.
	LongPollWithoutETag = "long-poll-without-etag"
	// ApprovedOthersTerminate: approvals of a Terminate that does not
	// name the VM (seed 004: each scale set VM approves only its own).
	ApprovedOthersTerminate = "approved-others-terminate"
	// LateApproval: approvals after the event's NotBefore, when it had
	// started on its own: too late to matter.
	LateApproval = "late-approval"
)

// Finding kinds about an event.
const (
	// NeverSeen: an event that was visible and has ended, and that no VM
	// of its scope read a document showing while it was active.
	NeverSeen = "never-seen"
	// ApprovedByNonOwner: a Terminate approved by VMs it does not name.
	ApprovedByNonOwner = "approved-by-non-owner"
	// ApprovedAfterNotBefore: approvals recorded after the event's
	// NotBefore.
	ApprovedAfterNotBefore = "approved-after-not-before"
	// SeenAfterStart: VMs that first read the event only after it
	// started, its notice unread (ReadAfterStart of each).
	SeenAfterStart = "seen-after-start"
)

// VMFindings and EventFindings list the finding kinds, as the scenario
// runner's noFinding accepts them: add a new kind here too.
var (
	VMFindings = []string{SlowPolling, ReadAfterStart, NoMetadataHeader, Throttled, PreviewAPIVersion, VersionHidesEvents,
		LongPollWithoutETag, ApprovedOthersTerminate, LateApproval}
	EventFindings = []string{NeverSeen, SeenAfterStart, ApprovedByNonOwner, ApprovedAfterNotBefore}
)

// Finding is one thing a client did that the seeds advise against, and
// how often.
type Finding struct {
	Kind   string `json:"kind"`
	Count  uint64 `json:"count"`
	Detail string `json:"detail"`
}

// LongPolls are a Compute Engine VM's wait_for_change requests on
// instance/maintenance-event: held now, and made in all.
type LongPolls struct {
	Held int    `json:"held"`
	Made uint64 `json:"made"`
}

// VM is what one VM's client did since it last joined the inventory (or
// the server started).
type VM struct {
	Name string `json:"name"`
	// Network is the network the VM's address is on, if it names one.
	Network string `json:"network,omitempty"`
	// Host is the hypervisor the VM runs on, if it names one.
	Host     string            `json:"host,omitempty"`
	Provider forewarn.Provider `json:"provider"`
	// Requests counts every metadata request, refused ones too.
	Requests  uint64    `json:"requests"`
	FirstCall time.Time `json:"firstCall,omitzero"`
	LastCall  time.Time `json:"lastCall,omitzero"`
	// LastEnded is when the latest-ending request ended; InFlight counts
	// the requests being answered now (a held long-poll, say).
	LastEnded time.Time `json:"lastEnded,omitzero"`
	InFlight  int       `json:"inFlight"`
	// ExpectedIntervalSeconds is how often the seeds (or the cloud's
	// documentation) ask a client of the VM's API to call.
	ExpectedIntervalSeconds float64 `json:"expectedIntervalSeconds"`
	// LongestGapSeconds is the longest time without a request in flight,
	// ending at LongestGapEnded.
	LongestGapSeconds float64   `json:"longestGapSeconds"`
	LongestGapEnded   time.Time `json:"longestGapEnded,omitzero"`
	// LongestPendingGapSeconds is the longest part of such a gap while
	// an event the VM could see was pending (Scheduled): from the event's
	// appearance if later, to the event's start if sooner;
	// LongestPendingGapEnded is zero when it is the silence going on now.
	LongestPendingGapSeconds float64   `json:"longestPendingGapSeconds"`
	LongestPendingGapEnded   time.Time `json:"longestPendingGapEnded,omitzero"`
	// PendingEvents are the active (Scheduled or Started) events the VM
	// can see now.
	PendingEvents []string `json:"pendingEvents"`
	// LongPolls, for a Compute Engine VM.
	LongPolls *LongPolls `json:"longPolls,omitempty"`
	// APIVersions are the Scheduled Events api-versions used (at most 4
	// kept, with OtherVersions counting requests at any further ones).
	APIVersions   []history.VersionCount `json:"apiVersions,omitempty"`
	OtherVersions uint64                 `json:"otherVersions,omitempty"`
	Findings      []Finding              `json:"findings"`
}

// Event is one event with what the servers saw of it.
type Event struct {
	ID        string             `json:"id"`
	Type      forewarn.EventType `json:"type"`
	Status    forewarn.Status    `json:"status"`
	Resources []string           `json:"resources"`
	Wave      string             `json:"wave,omitempty"`
	Created   time.Time          `json:"created"`
	// VisibleSince is when the event became visible to VMs: its creation,
	// or for a wave's later update domain, the end of the previous one;
	// zero for an event never visible (a wave's Pending domain).
	VisibleSince time.Time `json:"visibleSince,omitzero"`
	// NotBefore is the event's NotBefore while Scheduled, and after that
	// the one VMs last read.
	NotBefore time.Time `json:"notBefore,omitzero"`
	StartedAt time.Time `json:"startedAt,omitzero"`
	EndedAt   time.Time `json:"endedAt,omitzero"`
	// SeenBy is the first VM that read a document showing the event,
	// SeenAt when.
	SeenBy    string              `json:"seenBy,omitempty"`
	SeenAt    time.Time           `json:"seenAt,omitzero"`
	Approvals []forewarn.Approval `json:"approvals"`
	Findings  []Finding           `json:"findings"`
}

// Report is the client-behaviour report.
type Report struct {
	Generated time.Time `json:"generated"`
	VMs       []VM      `json:"vms"`
	Events    []Event   `json:"events"`
}

// Build returns the report of eng's fleet as h recorded it, at now: of
// every VM, or of the VM named vm alone and the events that name it,
// that it approved or that it saw first.
// Errors: ENOTFOUND for a vm not in the fleet.
func Build(eng *engine.Engine, h *history.History, now time.Time, vm string) (*Report, error) {
	vms, err := selectVMs(eng.Fleet(), vm)
	if err != nil {
		return nil, err
	}
	r := &Report{Generated: now.UTC(), VMs: make([]VM, 0, len(vms)), Events: []Event{}}
	events := eng.Events()
	since := visibleSince(events)
	for _, v := range vms {
		r.VMs = append(r.VMs, vmReport(v, eng.View(v.Name), h, since, now))
	}
	for _, ev := range events {
		if e := eventReport(ev, h, since[ev.ID]); concerns(ev, e, vm) {
			r.Events = append(r.Events, e)
		}
	}
	return r, nil
}

// selectVMs returns the VMs a report is of: every VM of fleet, or the
// one named vm.
// Errors: ENOTFOUND for a vm not in the fleet.
func selectVMs(fleet *forewarn.Fleet, vm string) ([]*forewarn.VM, error) {
	if vm == "" {
		return fleet.VMs, nil
	}
	one := fleet.VM(vm)
	if one == nil {
		return nil, forewarn.Errorf(forewarn.ENOTFOUND, "no VM named %q", vm)
	}
	return []*forewarn.VM{one}, nil
}

// concerns reports whether the report of the VM named vm (every VM when
// vm is empty) lists ev, reported as e: an event that names it, that it
// saw first or that it approved.
func concerns(ev *forewarn.Event, e Event, vm string) bool {
	return vm == "" || ev.Affects(vm) || e.SeenBy == vm ||
		slices.ContainsFunc(ev.Approvals, func(a forewarn.Approval) bool { return a.By == vm })
}

// api returns the history API of provider p.
func api(p forewarn.Provider) history.API {
	switch p {
	case forewarn.GCE:
		return history.GCE
	case forewarn.AWS:
		return history.AWS
	}
	return history.Azure
}

// vmReport reports what vm's client did; v is its view now.
func vmReport(vm *forewarn.VM, v *engine.View, h *history.History, since map[string]time.Time, now time.Time) VM {
	st, _ := h.Stats(vm.Name)
	a := api(vm.Provider)
	out := VM{
		Name: vm.Name, Network: vm.Network, Host: vm.Host, Provider: vm.Provider, Requests: st.Requests, FirstCall: st.First, LastCall: st.Last,
		LastEnded: st.LastEnd, InFlight: st.InFlight,
		ExpectedIntervalSeconds: history.Expected(a).Seconds(),
		LongestGapSeconds:       st.LongestGap.Seconds(), LongestGapEnded: st.LongestGapEnd,
		LongestPendingGapSeconds: st.LongestPendingGap.Seconds(), LongestPendingGapEnded: st.LongestPendingGapEnd,
		PendingEvents: []string{}, APIVersions: st.APIVersions, OtherVersions: st.OtherVersions, Findings: []Finding{},
	}
	if vm.Provider == forewarn.GCE {
		out.LongPolls = &LongPolls{Held: st.HeldLongPolls, Made: st.MaintenanceLongPolls}
	}
	// The silence going on now, for its longest part while an event was
	// pending: one the VM can see now, Scheduled or Started (until its
	// start), or those it last read Scheduled, whatever they have become
	// since, as the VM's next request will count it.
	slow, pendingGap, pendingEnd := st.SlowGaps, st.LongestPendingGap, st.LongestPendingGapEnd
	var open time.Duration
	silent := st.InFlight == 0 && !(v != nil && v.Deleted)
	part := func(from, until time.Time) {
		if from.IsZero() || !silent {
			return
		}
		if st.LastEnd.After(from) {
			from = st.LastEnd
		}
		if until.IsZero() || until.After(now) {
			until = now
		}
		open = max(open, st.Visible(from, until)) // not while no server ran
	}
	part(st.PendingSince, st.PendingUntil)
	if v != nil {
		for _, ev := range v.Events {
			out.PendingEvents = append(out.PendingEvents, ev.ID)
			switch ev.Status {
			case forewarn.Scheduled:
				part(since[ev.ID], time.Time{})
			case forewarn.Started:
				part(since[ev.ID], ev.StartedAt)
			}
		}
	}
	if open > 0 {
		if open > history.SlowGap(a) {
			slow++
		}
		if open > pendingGap {
			pendingGap, pendingEnd = open, time.Time{}
			out.LongestPendingGapSeconds, out.LongestPendingGapEnded = open.Seconds(), time.Time{}
		}
	}
	add := func(kind string, n uint64, detail string, args ...any) {
		if n > 0 {
			out.Findings = append(out.Findings, Finding{Kind: kind, Count: n, Detail: fmt.Sprintf(detail, args...)})
		}
	}
	if slow > 0 {
		when := "still going on"
		if !pendingEnd.IsZero() {
			when = "ended " + pendingEnd.Format(timeLayout)
		}
		add(SlowPolling, slow, "%d gap(s) over %s (%d× the expected %s, and %s for jitter) while an event was pending; the longest %s (%s)",
			slow, history.SlowGap(a), history.SlowFactor, history.Expected(a), history.Expected(a), round(pendingGap), when)
	}
	add(ReadAfterStart, st.ReadsAfterStart, "events first read only after they started, no event read during their notice; latest %s, read %s after it started, its notice of %s unread",
		st.LastReadAfterStart, round(st.LastReadLate), round(st.LastReadNotice))
	switch vm.Provider {
	case forewarn.GCE:
		add(NoMetadataHeader, st.NoHeader, "requests without Metadata-Flavor: Google, answered 403")
	default:
		add(NoMetadataHeader, st.NoHeader, "requests without Metadata: true, answered 400")
	}
	add(Throttled, st.Throttled, "requests answered 429 Too Many Requests")
	var preview, hidden uint64
	var hides []string
	for _, vc := range st.APIVersions {
		if vc.Version == azure.PreviewVersion {
			preview += vc.Requests
		}
		var types []string
		if vm.ScaleSet != "" && !azure.VersionShows(vc.Version, forewarn.Terminate) {
			types = append(types, "Terminate")
		}
		if vm.Spot && !azure.VersionShows(vc.Version, forewarn.Preempt) {
			types = append(types, "Preempt")
		}
		if len(types) > 0 && versionKnown(vc.Version) {
			hidden += vc.Requests
			hides = append(hides, vc.Version+" hides "+strings.Join(types, " and "))
		}
	}
	add(PreviewAPIVersion, preview, "Scheduled Events requests at the %s preview; the current version is %s", azure.PreviewVersion, latest())
	add(VersionHidesEvents, hidden, "Scheduled Events requests at versions that hide events this VM can get: %s", strings.Join(hides, "; "))
	add(LongPollWithoutETag, st.NoETag, "wait_for_change requests without last_etag, which miss a change made between two requests")
	add(ApprovedOthersTerminate, st.ForeignApprovals, "approvals of Terminates that do not name this VM (seed 004: each VM approves only its own); latest %s", st.LastForeign)
	add(LateApproval, st.LateApprovals, "approvals after the event's NotBefore, when it had started on its own; latest %s", st.LastLate)
	return out
}

// versionKnown reports whether v is a Scheduled Events api-version.
func versionKnown(v string) bool { return slices.Contains(azure.Versions(), v) }

// latest returns the newest Scheduled Events api-version.
func latest() string {
	vs := azure.Versions()
	return vs[len(vs)-1]
}

// timeLayout shows times in findings: UTC to the millisecond.
const timeLayout = "2006-01-02T15:04:05.000Z"

// round rounds d for reading.
func round(d time.Duration) time.Duration {
	if d > time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Microsecond)
}

// eventReport reports ev, visible since since.
func eventReport(ev *forewarn.Event, h *history.History, since time.Time) Event {
	seen, _ := h.Seen(ev.ID)
	e := Event{
		ID: ev.ID, Type: ev.Type, Status: ev.Status, Resources: ev.Resources, Wave: ev.Wave, Created: ev.Created,
		VisibleSince: since, NotBefore: ev.NotBefore, StartedAt: ev.StartedAt, EndedAt: ev.EndedAt,
		SeenBy: seen.By, SeenAt: seen.At, Approvals: ev.Approvals, Findings: []Finding{},
	}
	if e.Approvals == nil {
		e.Approvals = []forewarn.Approval{}
	}
	if e.NotBefore.IsZero() {
		e.NotBefore = seen.NotBefore
	}
	if !ev.Status.Active() && ev.Status != forewarn.Pending && !since.IsZero() && seen.By == "" {
		e.Findings = append(e.Findings, Finding{Kind: NeverSeen, Count: 1, Detail: fmt.Sprintf(
			"no VM of its scope read a document showing it while it was active (%s to %s)",
			since.UTC().Format(timeLayout), ev.EndedAt.UTC().Format(timeLayout))})
	}
	if seen.LateReaders > 0 {
		notice := "its notice"
		if !since.IsZero() {
			notice += " of " + round(ev.StartedAt.Sub(since)).String()
		}
		e.Findings = append(e.Findings, Finding{Kind: SeenAfterStart, Count: uint64(seen.LateReaders), Detail: fmt.Sprintf(
			"%d VM(s) first read it only after it started at %s, having read nothing during %s; the first %s, %s after",
			seen.LateReaders, ev.StartedAt.UTC().Format(timeLayout), notice, seen.FirstLate, round(seen.FirstLateAt.Sub(ev.StartedAt)))})
	}
	var others, late []string
	for _, a := range ev.Approvals {
		if a.By == forewarn.Operator {
			continue
		}
		if ev.Type == forewarn.Terminate && !ev.Affects(a.By) {
			others = append(others, a.By)
		}
		if !e.NotBefore.IsZero() && !a.At.Before(e.NotBefore) {
			late = append(late, fmt.Sprintf("%s %s after", a.By, round(a.At.Sub(e.NotBefore))))
		}
	}
	if len(others) > 0 {
		e.Findings = append(e.Findings, Finding{Kind: ApprovedByNonOwner, Count: uint64(len(others)), Detail: fmt.Sprintf(
			"approved by %s, which it does not name (seed 004: each VM approves only its own Terminate)", strings.Join(others, ", "))})
	}
	if len(late) > 0 {
		e.Findings = append(e.Findings, Finding{Kind: ApprovedAfterNotBefore, Count: uint64(len(late)), Detail: fmt.Sprintf(
			"approved after its NotBefore %s: %s", e.NotBefore.UTC().Format(timeLayout), strings.Join(late, ", "))})
	}
	return e
}

// visibleSince returns when each event became visible to VMs: when it
// was created, or for a wave's later update domain, when the previous
// domain's event ended; none for an event never visible.
func visibleSince(events []*forewarn.Event) map[string]time.Time {
	out := make(map[string]time.Time, len(events))
	waves := map[string][]*forewarn.Event{}
	for _, ev := range events {
		if ev.Wave != "" {
			waves[ev.Wave] = append(waves[ev.Wave], ev)
			continue
		}
		out[ev.ID] = ev.Created
	}
	for _, evs := range waves {
		// A wave's events are created one nanosecond apart, in domain order.
		slices.SortFunc(evs, func(a, b *forewarn.Event) int { return a.Created.Compare(b.Created) })
		for i, ev := range evs {
			switch {
			case i == 0:
				out[ev.ID] = ev.Created
			case ev.Status == forewarn.Pending:
			case !evs[i-1].EndedAt.IsZero() && (ev.EndedAt.IsZero() || !ev.EndedAt.Before(evs[i-1].EndedAt)):
				out[ev.ID] = evs[i-1].EndedAt
			}
		}
	}
	return out
}

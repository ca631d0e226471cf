// Package forewarn is the vocabulary of the Forewarn maintenance-notice
// server: virtual machines and their fleet, maintenance events and their
// lifecycle, approvals, the Store that persists them, and the error codes
// every layer speaks.
//
// The package depends on the standard library only. The lifecycle engine
// lives in package engine, the wire formats in packages azure and gce, and
// the operator API in package admin.
package forewarn

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/forewarn/forewarn/internal/jsonstr"
)

// EventType is the kind of impact a maintenance event has on its VMs.
type EventType string

// The Azure Scheduled Events types.
const (
	Freeze    EventType = "Freeze"
	Reboot    EventType = "Reboot"
	Redeploy  EventType = "Redeploy"
	Preempt   EventType = "Preempt"
	Terminate EventType = "Terminate"
)

// The Compute Engine maintenance types, named as the maintenance-event
// metadata key shows them.
const (
	MigrateOnHostMaintenance   EventType = "MIGRATE_ON_HOST_MAINTENANCE"
	TerminateOnHostMaintenance EventType = "TERMINATE_ON_HOST_MAINTENANCE"
)

// The EC2 scheduled event codes, named as the instance metadata service
// shows them in events/maintenance/scheduled.
const (
	InstanceReboot     EventType = "instance-reboot"
	SystemReboot       EventType = "system-reboot"
	SystemMaintenance  EventType = "system-maintenance"
	InstanceRetirement EventType = "instance-retirement"
	InstanceStop       EventType = "instance-stop"
)

// EventTypes lists every known event type in a stable order.
var EventTypes = []EventType{Freeze, Reboot, Redeploy, Preempt, Terminate, MigrateOnHostMaintenance, TerminateOnHostMaintenance,
	InstanceReboot, SystemReboot, SystemMaintenance, InstanceRetirement, InstanceStop}

// EC2 reports whether t is an EC2 scheduled event code, one that the
// events/maintenance keys of the instance metadata service list.
func (t EventType) EC2() bool {
	switch t {
	case InstanceReboot, SystemReboot, SystemMaintenance, InstanceRetirement, InstanceStop:
		return true
	}
	return false
}

// EC2Reschedule is how long after its first NotBefore an EC2 scheduled
// event can be moved to: its NotBeforeDeadline.
const EC2Reschedule = 7 * 24 * time.Hour

// HostMaintenance reports whether t is a Compute Engine host maintenance
// type, one that the maintenance-event key announces ahead of time.
func (t EventType) HostMaintenance() bool {
	return t == MigrateOnHostMaintenance || t == TerminateOnHostMaintenance
}

// Lead returns how long before NotBefore the maintenance-event key flips
// for a host maintenance type: 60 seconds before a live migration, 60
// minutes before a stop. It is 0 for every other type.
func (t EventType) Lead() time.Duration {
	switch t {
	case MigrateOnHostMaintenance:
		return time.Minute
	case TerminateOnHostMaintenance:
		return time.Hour
	}
	return 0
}

// ForProvider reports whether events of type t can be raised on VMs of
// provider p. Preempt serves all three: an Azure Spot eviction, a Compute
// Engine preemption and an EC2 Spot interruption. Terminate serves Azure
// scale sets and EC2 Auto Scaling groups.
func (t EventType) ForProvider(p Provider) bool {
	switch {
	case t == Preempt:
		return true
	case t == Terminate:
		return p == Azure || p == AWS
	case t.HostMaintenance():
		return p == GCE
	case t.EC2():
		return p == AWS
	}
	return p == Azure
}

// ParseEventType returns the event type named s, ignoring case.
// It returns an EINVALID error for an unknown name.
func ParseEventType(s string) (EventType, error) {
	for _, t := range EventTypes {
		if strings.EqualFold(string(t), s) {
			return t, nil
		}
	}
	names := make([]string, len(EventTypes))
	for i, t := range EventTypes {
		names[i] = string(t)
	}
	return "", Errorf(EINVALID, "unknown event type %q (want one of %s)", s, strings.Join(names, ", "))
}

// MinNotice returns the minimum time between an event's creation and its
// NotBefore, as the Azure documentation gives it. Terminate's notice is the
// scale set's configurable timeout, at least five minutes.
func (t EventType) MinNotice() time.Duration {
	switch t {
	case Freeze, Reboot:
		return 15 * time.Minute
	case Redeploy:
		return 10 * time.Minute
	case Preempt:
		return 30 * time.Second
	case Terminate:
		return 5 * time.Minute
	case MigrateOnHostMaintenance, TerminateOnHostMaintenance:
		return t.Lead()
	}
	if t.EC2() {
		// EC2 documents no minimum; its events come days ahead.
		return 24 * time.Hour
	}
	return 0
}

// DefaultLasts returns how long a Started event of this type stays visible
// before it completes on its own, when the operator gives no --lasts.
// Real Started events are seen for minutes; Freeze is the shortest.
func (t EventType) DefaultLasts() time.Duration {
	switch t {
	case Freeze:
		return time.Minute
	case Reboot:
		return 5 * time.Minute
	case Redeploy:
		return 10 * time.Minute
	case Preempt:
		return 2 * time.Minute
	case Terminate:
		return 5 * time.Minute
	case MigrateOnHostMaintenance:
		return time.Minute
	case TerminateOnHostMaintenance:
		return 5 * time.Minute
	}
	return 5 * time.Minute
}

// Status is where an event stands in its lifecycle. Only Scheduled and
// Started are visible to VMs; Completed and Canceled events are kept for
// the operator's history and vanish from the metadata documents.
type Status string

// The lifecycle states.
const (
	// Pending is a wave's event waiting for the previous update domain's
	// event to complete; it is not shown to VMs yet.
	Pending   Status = "Pending"
	Scheduled Status = "Scheduled"
	Started   Status = "Started"
	Completed Status = "Completed"
	Canceled  Status = "Canceled"
)

// Active reports whether an event in this status is visible to VMs.
func (s Status) Active() bool { return s == Scheduled || s == Started }

// Source says who initiated an event.
type Source string

// The event sources.
const (
	Platform Source = "Platform"
	User     Source = "User"
)

// ParseSource returns the source named s, ignoring case.
func ParseSource(s string) (Source, error) {
	switch {
	case strings.EqualFold(s, string(Platform)):
		return Platform, nil
	case strings.EqualFold(s, string(User)):
		return User, nil
	}
	return "", Errorf(EINVALID, "unknown event source %q (want Platform or User)", s)
}

// Operator is the approver name recorded when the operator API approves
// or starts an event.
const Operator = "operator"

// Approval records who let an event start early, and when.
type Approval struct {
	// By is the VM name that posted a StartRequest, or Operator.
	By string `json:"by"`
	// At is when the approval was received.
	At time.Time `json:"at"`
}

// Event is one maintenance event and its whole history.
type Event struct {
	// ID is an upper-case GUID, the same in every state.
	ID     string    `json:"id"`
	Type   EventType `json:"type"`
	Status Status    `json:"status"`
	// Resources names the affected VMs.
	Resources []string `json:"resources"`
	// NotBefore is the earliest time the event starts on its own; whole seconds.
	NotBefore time.Time `json:"notBefore,omitzero"`
	// Duration is the announced impact in seconds; -1 when unknown.
	Duration    int    `json:"durationInSeconds"`
	Source      Source `json:"source"`
	Description string `json:"description"`
	// Wave is the ID of the maintenance wave the event belongs to, if any.
	Wave string `json:"wave,omitempty"`
	// Notice is the notice a Pending wave event gets once it is scheduled.
	Notice time.Duration `json:"-"`
	// Lasts is how long the event stays Started before it completes. It
	// is written in JSON as a Go duration string, such as "5m0s".
	Lasts   time.Duration `json:"-"`
	Created time.Time     `json:"created"`
	// WarnedAt is when a host maintenance event's maintenance-event key
	// flipped, its Lead before NotBefore; zero until then.
	WarnedAt  time.Time `json:"warnedAt,omitzero"`
	StartedAt time.Time `json:"startedAt,omitzero"`
	// EndedAt is when the event completed or was canceled.
	EndedAt time.Time `json:"endedAt,omitzero"`
	// ResumedAt is when the operator started again the Compute Engine or
	// EC2 VM that this completed Preempt stopped; zero while it stays
	// stopped.
	ResumedAt time.Time `json:"resumedAt,omitzero"`
	// Deadline is an EC2 scheduled event's NotBeforeDeadline: the latest
	// NotBefore it can be rescheduled to. Zero for other events.
	Deadline time.Time `json:"deadline,omitzero"`
	// Action is what an EC2 Spot interruption does to its VM: terminate,
	// stop or hibernate. Empty for other events.
	Action    string     `json:"action,omitempty"`
	Approvals []Approval `json:"approvals,omitempty"`
}

// eventJSON is Event's JSON form, with Lasts as a duration string.
type eventJSON struct {
	eventFields
	Notice string `json:"notice,omitempty"`
	Lasts  string `json:"lasts"`
}

type eventFields Event

// MarshalJSON renders e with its Lasts as a duration string.
//
// It writes the fields itself, in the order and the form encoding/json
// gives eventJSON (TestEventJSONAsReflection holds the two equal): a
// fleet-wide GCE or EC2 event stores 100,000 events in each of its
// steps, and reflection took a third of such a commit. A time outside
// the years 0 to 9999, which encoding/json refuses, goes the reflective
// way for its error.
func (e Event) MarshalJSON() ([]byte, error) {
	if b, ok := e.appendJSON(make([]byte, 0, 320+len(e.Description))); ok {
		return b, nil
	}
	return e.marshalReflect()
}

// marshalReflect is MarshalJSON through encoding/json.
func (e Event) marshalReflect() ([]byte, error) {
	j := eventJSON{eventFields: eventFields(e), Lasts: e.Lasts.String()}
	if e.Notice != 0 {
		j.Notice = e.Notice.String()
	}
	return json.Marshal(j)
}

// appendJSON appends e as MarshalJSON renders it, or reports false for
// a time encoding/json would refuse.
func (e Event) appendJSON(b []byte) ([]byte, bool) {
	ok := true
	str := func(name, v string) {
		b = append(append(b, name...), ':')
		b = jsonstr.Append(b, v)
	}
	tm := func(name string, t time.Time, always bool) {
		if t.IsZero() && !always {
			return
		}
		if y := t.Year(); y < 0 || y > 9999 {
			ok = false
			return
		}
		b = append(append(b, name...), `:"`...)
		b = append(t.AppendFormat(b, time.RFC3339Nano), '"')
	}
	str(`{"id"`, e.ID)
	str(`,"type"`, string(e.Type))
	str(`,"status"`, string(e.Status))
	b = append(b, `,"resources":`...)
	if e.Resources == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, r := range e.Resources {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonstr.Append(b, r)
		}
		b = append(b, ']')
	}
	tm(`,"notBefore"`, e.NotBefore, false)
	b = strconv.AppendInt(append(b, `,"durationInSeconds":`...), int64(e.Duration), 10)
	str(`,"source"`, string(e.Source))
	str(`,"description"`, e.Description)
	if e.Wave != "" {
		str(`,"wave"`, e.Wave)
	}
	tm(`,"created"`, e.Created, true)
	tm(`,"warnedAt"`, e.WarnedAt, false)
	tm(`,"startedAt"`, e.StartedAt, false)
	tm(`,"endedAt"`, e.EndedAt, false)
	tm(`,"resumedAt"`, e.ResumedAt, false)
	tm(`,"deadline"`, e.Deadline, false)
	if e.Action != "" {
		str(`,"action"`, e.Action)
	}
	if len(e.Approvals) > 0 {
		b = append(b, `,"approvals":[`...)
		for i, a := range e.Approvals {
			if i > 0 {
				b = append(b, ',')
			}
			str(`{"by"`, a.By)
			tm(`,"at"`, a.At, true)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if e.Notice != 0 {
		str(`,"notice"`, e.Notice.String())
	}
	str(`,"lasts"`, e.Lasts.String())
	return append(b, '}'), ok
}

// UnmarshalJSON reads the form MarshalJSON writes.
func (e *Event) UnmarshalJSON(b []byte) error {
	var j eventJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*e = Event(j.eventFields)
	for _, f := range []struct {
		name, s string
		d       *time.Duration
	}{{"lasts", j.Lasts, &e.Lasts}, {"notice", j.Notice, &e.Notice}} {
		if f.s == "" {
			continue
		}
		d, err := time.ParseDuration(f.s)
		if err != nil {
			return fmt.Errorf("event %s: %s: %w", e.ID, f.name, err)
		}
		*f.d = d
	}
	return nil
}

// Clone returns a deep copy of e.
func (e *Event) Clone() *Event {
	c := *e
	c.Resources = slices.Clone(e.Resources)
	c.Approvals = slices.Clone(e.Approvals)
	return &c
}

// Normalized returns a deep copy of e as a store returns it: times in
// UTC without monotonic readings, and no empty Approvals slice.
func (e *Event) Normalized() *Event {
	c := e.Clone()
	c.NotBefore = c.NotBefore.UTC()
	c.Created = c.Created.UTC()
	c.WarnedAt = c.WarnedAt.UTC()
	c.StartedAt = c.StartedAt.UTC()
	c.EndedAt = c.EndedAt.UTC()
	c.ResumedAt = c.ResumedAt.UTC()
	c.Deadline = c.Deadline.UTC()
	if len(c.Approvals) == 0 {
		c.Approvals = nil
	}
	for i := range c.Approvals {
		c.Approvals[i].At = c.Approvals[i].At.UTC()
	}
	return c
}

// Approved reports whether anyone approved the event.
func (e *Event) Approved() bool { return len(e.Approvals) > 0 }

// Affects reports whether vm is one of the event's Resources.
func (e *Event) Affects(vm string) bool { return slices.Contains(e.Resources, vm) }

// SpotWarning is how long before an EC2 Spot interruption stops or
// terminates its VM the interruption notice appears.
const SpotWarning = 2 * time.Minute

// Lead returns how long before NotBefore the event warns its VMs: its
// type's Lead, and for an EC2 Spot interruption the two-minute warning
// (none for hibernation, which begins as the notice appears).
func (e *Event) Lead() time.Duration {
	if e.Type == Preempt && e.Action != "" {
		if e.Action == "hibernate" {
			return 0
		}
		return SpotWarning
	}
	return e.Type.Lead()
}

// EndsAt returns when a Started event completes on its own.
func (e *Event) EndsAt() time.Time { return e.StartedAt.Add(e.Lasts) }

// NextDeadline returns the next moment at which the event changes by the
// passage of time alone, and false when no such moment exists.
func (e *Event) NextDeadline() (time.Time, bool) {
	switch e.Status {
	case Scheduled:
		if lead := e.Lead(); lead > 0 && e.WarnedAt.IsZero() {
			return e.NotBefore.Add(-lead), true
		}
		return e.NotBefore, true
	case Started:
		return e.EndsAt(), true
	}
	return time.Time{}, false
}

// String returns a short description for logs and errors.
func (e *Event) String() string {
	return fmt.Sprintf("%s %s %s %v", e.ID, e.Type, e.Status, e.Resources)
}

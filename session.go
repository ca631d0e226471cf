package forewarn

import (
	"net/url"
	"time"

	"github.com/forewarn/forewarn/internal/echo"
)

// A maintenance session takes hosts down one after another: each VM on
// a host gets the event its provider gives for host maintenance, the
// host is Ready once every one of them has Started, and the operator's
// automation then does its work and says the host is Done (or Failed).
// The session never starts a host whose VMs would take a group past its
// budget, runs at most MaxHosts hosts at once, waits Delay after each
// host ends, and starts hosts only inside its windows.

// SessionState is where a session is.
type SessionState string

// The session states.
const (
	// SessionRunning starts hosts as its limits allow.
	SessionRunning SessionState = "Running"
	// SessionPaused starts no host; the hosts under way go on.
	SessionPaused SessionState = "Paused"
	// SessionCancelled starts no host, and its events not yet Started
	// were cancelled; the hosts in maintenance still end with Done or
	// Failed.
	SessionCancelled SessionState = "Cancelled"
	// SessionDone has every host Done or Failed.
	SessionDone SessionState = "Done"
)

// HostState is where one host of a session is.
type HostState string

// The host states, in the order a host goes through them.
const (
	// HostPending: not started.
	HostPending HostState = "Pending"
	// HostNotifying: its VMs' events are Scheduled, waiting for
	// approvals or their NotBefore.
	HostNotifying HostState = "Notifying"
	// HostReady: every event of its VMs Started. No host is stored
	// Ready: the step that finds it so records it InMaintenance, with
	// ReadyAt saying when, and its transitions pass through Ready.
	HostReady HostState = "Ready"
	// HostInMaintenance: the operator's automation works on it, until it
	// says Done or Failed.
	HostInMaintenance HostState = "InMaintenance"
	// HostDone: maintained; its VMs' events are completed.
	HostDone HostState = "Done"
	// HostFailed: the automation said it failed, its events did not
	// start within the reply timeout, or, when its turn came, its VMs
	// alone would have taken a group past its budget (it then has no
	// events). Its events that Started complete, the others are
	// cancelled, and a Running session pauses.
	HostFailed HostState = "Failed"
)

// Ended reports whether a session in state s is over: Cancelled or
// Done. It starts no more hosts.
func (s SessionState) Ended() bool { return s == SessionCancelled || s == SessionDone }

// Ended reports whether a host in state s is over: Done or Failed.
func (s HostState) Ended() bool { return s == HostDone || s == HostFailed }

// Budget caps the VMs of one group that a session may have down at once:
// Count VMs, or Percent of the group's VMs (rounded down, at least 1).
type Budget struct {
	Count   int `json:"count,omitempty"`
	Percent int `json:"percent,omitempty"`
}

// The group kinds a budget applies to.
const (
	GroupAvailabilitySet = "availabilitySet"
	GroupScaleSet        = "scaleSet"
	GroupPlacementGroup  = "placementGroup"
	GroupUpdateDomain    = "updateDomain"
	GroupZone            = "zone"
)

// GroupKinds are the group kinds, in the order messages name them.
var GroupKinds = []string{GroupAvailabilitySet, GroupScaleSet, GroupPlacementGroup, GroupUpdateDomain, GroupZone}

// SessionSpec is what an operator asks of a session.
type SessionSpec struct {
	// Hosts are taken in this order.
	Hosts []string `json:"hosts"`
	// MaxHosts caps the hosts under way at once (Notifying, Ready or
	// InMaintenance); 0 means 1.
	MaxHosts int `json:"maxHosts,omitempty"`
	// MaxUnavailable caps each group's VMs down at once, by group kind;
	// a kind not named has no cap.
	MaxUnavailable map[string]Budget `json:"maxUnavailable,omitempty"`
	// Delay is the wait after a host ends before the next one starts.
	Delay time.Duration `json:"delay,omitempty"`
	// Notice is the events' notice; 0 means each type's minimum.
	Notice time.Duration `json:"notice,omitempty"`
	// ReplyTimeout fails a host whose events have not all Started this
	// long after the latest NotBefore among them; 0 means never.
	ReplyTimeout time.Duration `json:"replyTimeout,omitempty"`
	// Action picks the Azure event (Freeze, Reboot or Redeploy) and the
	// EC2 one (system-reboot for Reboot, system-maintenance otherwise);
	// Compute Engine VMs get their onHostMaintenance's event.
	Action string `json:"action,omitempty"`
	// Windows are when hosts may start; none means always.
	Windows []string `json:"windows,omitempty"`
	// Description is the events' description.
	Description string `json:"description,omitempty"`
	// Webhooks receive the session's transitions.
	Webhooks []string `json:"webhooks,omitempty"`
}

// MaxWebhooks caps the webhooks one session names: each is a queue and
// a worker of the server's.
const MaxWebhooks = 8

// ValidWebhookURL checks a webhook URL: absolute, http or https, with a
// host. Errors: EINVALID.
func ValidWebhookURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return Errorf(EINVALID, "webhook %q is not an absolute http:// or https:// URL", echo.Clip(raw))
	}
	return nil
}

// SessionHost is one host of a session.
type SessionHost struct {
	Name  string    `json:"name"`
	State HostState `json:"state"`
	// VMs are the VMs the host had when it started; Events the events
	// made for them.
	VMs    []string `json:"vms,omitempty"`
	Events []string `json:"events,omitempty"`
	// Started is when it started (Notifying), ReadyAt when every event
	// had Started, Ended when it ended.
	Started time.Time `json:"started,omitzero"`
	ReadyAt time.Time `json:"readyAt,omitzero"`
	Ended   time.Time `json:"ended,omitzero"`
	// Reason says why it Failed.
	Reason string `json:"reason,omitempty"`
	// VMCount and EventCount are how many VMs and events an ended host
	// had: its lists are dropped when it ends, so that the session's
	// record, written whole at each step, does not grow with the steps
	// taken.
	VMCount    int `json:"vmCount,omitempty"`
	EventCount int `json:"eventCount,omitempty"`
}

// NumVMs returns how many VMs the host had when it started.
func (h *SessionHost) NumVMs() int { return max(len(h.VMs), h.VMCount) }

// NumEvents returns how many events were made for the host.
func (h *SessionHost) NumEvents() int { return max(len(h.Events), h.EventCount) }

// Session is one maintenance session as a store keeps it: written whole
// at each of its steps.
type Session struct {
	ID      string        `json:"id"`
	Spec    SessionSpec   `json:"spec"`
	State   SessionState  `json:"state"`
	Hosts   []SessionHost `json:"hosts"`
	Created time.Time     `json:"created"`
	// Updated is when it last changed; LastEnded when a host last ended
	// (the Delay runs from it).
	Updated   time.Time `json:"updated"`
	LastEnded time.Time `json:"lastEnded,omitzero"`
	// Reason says why it paused on its own (a host Failed).
	Reason string `json:"reason,omitempty"`
}

// Clone returns a deep copy of s.
func (s *Session) Clone() *Session {
	c := *s
	c.Spec.Hosts = append([]string(nil), s.Spec.Hosts...)
	c.Spec.Windows = append([]string(nil), s.Spec.Windows...)
	c.Spec.Webhooks = append([]string(nil), s.Spec.Webhooks...)
	c.Spec.MaxUnavailable = nil // an empty map is none, as a store reads it back
	if len(s.Spec.MaxUnavailable) > 0 {
		c.Spec.MaxUnavailable = make(map[string]Budget, len(s.Spec.MaxUnavailable))
		for k, v := range s.Spec.MaxUnavailable {
			c.Spec.MaxUnavailable[k] = v
		}
	}
	c.Hosts = make([]SessionHost, len(s.Hosts))
	for i, h := range s.Hosts {
		h.VMs = append([]string(nil), h.VMs...)
		h.Events = append([]string(nil), h.Events...)
		c.Hosts[i] = h
	}
	return &c
}

// Normalized returns a copy of s as a store returns it: times in UTC
// without monotonic readings.
func (s *Session) Normalized() *Session {
	c := s.Clone()
	c.Created, c.Updated, c.LastEnded = c.Created.UTC().Round(0), c.Updated.UTC().Round(0), c.LastEnded.UTC().Round(0)
	for i := range c.Hosts {
		h := &c.Hosts[i]
		h.Started, h.ReadyAt, h.Ended = h.Started.UTC().Round(0), h.ReadyAt.UTC().Round(0), h.Ended.UTC().Round(0)
	}
	return c
}

// Package engine is the lifecycle state machine of Forewarn and the only
// owner of deadlines. It creates events, starts them at NotBefore or on
// approval, completes them when their impact is over, writes every change
// through a forewarn.Store before acknowledging it, and publishes each
// VM's resulting view to the API renderers.
//
// The engine is provider-neutral: it knows VMs, events and scopes, not
// wire formats. Deadlines are driven by one runtime timer per pending
// event; nothing polls.
package engine

import (
	"cmp"
	"container/heap"
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/internal/cow"
	"github.com/forewarn/forewarn/internal/signal"
)

// retryDelay is how long a deadline whose store write failed waits
// before the engine tries it again.
const retryDelay = time.Second

// staleDelay is how long a deadline whose write another replica beat
// waits before it is tried again, if the newer commit has not re-armed it.
const staleDelay = 50 * time.Millisecond

// Config configures an Engine.
type Config struct {
	// Store persists every change. Required.
	Store forewarn.Store
	// Fleet is applied to the store's inventory at start: its VMs and
	// scale sets are added, or replace those of their names, in one
	// commit; VMs it does not name stay. Nil leaves the inventory as the
	// store holds it.
	Fleet *forewarn.Fleet
	// SeedOnly applies Fleet only to a store whose inventory is empty: a
	// default fleet, for a server started without a fleet file.
	SeedOnly bool
	// Logger receives lifecycle logs; nil discards them.
	Logger *slog.Logger
	// AllowShortNotice accepts notices below the per-type minimum.
	AllowShortNotice bool
	// DisableAfter is how long a VM may go without a request before its
	// scheduled events are disabled; 0 means 24 hours.
	DisableAfter time.Duration
	// Replica names this server among those sharing the store, when the
	// store is a forewarn.Cluster; "" means the host name.
	Replica string
	// WriteWait bounds how long a write waits for the write in flight
	// before it; 0 means no bound. Set it to the store's own timeout.
	WriteWait time.Duration
	// Observer receives the engine's measurements; nil means none.
	Observer Observer
}

// Validate reports whether c is complete.
func (c *Config) Validate() error {
	if c.Store == nil {
		return forewarn.Errorf(forewarn.EINVALID, "engine: no store")
	}
	if c.DisableAfter < 0 {
		return forewarn.Errorf(forewarn.EINVALID, "engine: negative DisableAfter")
	}
	return nil
}

// Spec describes an event to create.
type Spec struct {
	Type forewarn.EventType
	// VMs are the names of the affected VMs, the event's Resources.
	VMs []string
	// Notice is the time from now to NotBefore; 0 means the type's minimum.
	Notice time.Duration
	// Duration is the announced impact in seconds; nil means -1 (unknown).
	Duration *int
	// Source defaults to Platform.
	Source      forewarn.Source
	Description string
	// Lasts is how long the event stays Started; 0 means the type's default.
	Lasts time.Duration
	// Started creates the event already Started, as an unplanned event
	// such as a hardware failure is.
	Started bool
}

// View is one VM's metadata document as of one change: its incarnation
// and the active events it can see. A View is immutable; when the VM's
// document changes, a new View replaces it and Changed is closed.
type View struct {
	VM *forewarn.VM
	// Incarnation is the DocumentIncarnation; it never decreases.
	Incarnation int64
	// Registration tells this registration of the VM in the inventory
	// from any other, as forewarn.Definition.Registration does (its Seq,
	// in a store written before registrations): the same on every
	// replica and after a restart.
	Registration uint64
	// Events are the visible Scheduled and Started events, oldest first.
	// They must not be modified.
	Events []*forewarn.Event
	// Preempted reports whether a preemption of the VM has started.
	Preempted bool
	// Stopped reports whether a preemption of the VM has completed.
	Stopped bool
	// Deleted reports whether the VM is gone: an Azure VM whose Preempt or
	// Terminate completed. It answers no more requests.
	Deleted bool
	// Removed reports that the VM left the inventory: this is its last
	// view, and it answers no more requests.
	Removed bool
	// Maintained reports whether a host maintenance event naming the VM
	// was ever announced to it, including one that has since ended or
	// been canceled.
	Maintained bool
	// History holds an EC2 VM's ended (Completed or Canceled) scheduled
	// events, oldest first, the newest MaxHistory of them: its
	// events/maintenance/history. It must not be modified.
	History []*forewarn.Event
	// own holds the visible events whose Resources name the VM; a VM has
	// few, so a slice serves.
	own []*forewarn.Event
	// changed fires when a newer View replaces v; its channel is made
	// only if someone waits, and most views are never waited on.
	changed signal.Signal
}

// Own reports whether ev, one of v.Events, names v's VM in its
// Resources (rather than being seen through a shared scope).
func (v *View) Own(ev *forewarn.Event) bool { return slices.Contains(v.own, ev) }

// Changed returns a channel that is closed when a newer View replaces v.
func (v *View) Changed() <-chan struct{} { return v.changed.C() }

// replaced signals that a newer View replaces v.
func (v *View) replaced() { v.changed.Fire() }

// VMInfo is a VM with its current document state, for the operator.
type VMInfo struct {
	forewarn.VM
	Incarnation int64 `json:"incarnation"`
	// State is what the VM is doing now: "running"; while an event naming
	// it is Started, what the event does to it ("rebooting", "frozen",
	// "redeploying", "migrating", "stopped" for a Compute Engine host
	// maintenance stop or an EC2 instance stop or retirement, "in
	// maintenance", "stopping" or "deleting"); "stopped" once a Compute
	// Engine preemption or an EC2 Spot stop completed; "deleted" once an
	// Azure Preempt or Terminate did.
	State string `json:"state"`
	// ReturnsTo is the State the VM comes back to when the Started event
	// ends, when that differs from State: "running" after maintenance,
	// "stopped" or "deleted" after an eviction.
	ReturnsTo string `json:"returnsTo,omitempty"`
	// Enabled reports whether the VM's scheduled events are enabled: a VM
	// of its service (itself, or one it shares an availability set, cloud
	// service or scale set with, within its zone for a scale set that
	// spans zones) called its metadata API within the disable window.
	Enabled bool `json:"enabled"`
	// LastSeen is when the VM last called its metadata API.
	LastSeen time.Time `json:"lastSeen,omitzero"`
	// Events are the IDs of the active events the VM can see.
	Events []string `json:"events"`
}

// Engine runs the lifecycle of every event of one fleet.
type Engine struct {
	store      forewarn.Store
	log        *slog.Logger
	allowShort bool

	// inv is the inventory in force, replaced (under mu) by each change;
	// members holds each of its VMs' state, read without a lock; pending
	// is the inventory change being written (guarded by mu).
	inv          atomic.Pointer[inventory]
	members      *cow.Map[string, *member]
	pending      *pendingInventory
	disableAfter time.Duration
	// persist carries VM names whose LastSeen must be written.
	persist chan string
	stop    chan struct{}
	stopped chan struct{}

	// clientsDue reports that the history has client records due
	// (NoteClients): persistLoop looks for them.
	clientsDue atomic.Bool
	// clientsLook reports that persistLoop will look for the client
	// records due, or is saving what it found (see Unsaved).
	clientsLook atomic.Bool

	// setOverrides holds the scale set settings changed at run time;
	// guarded by mu.
	setOverrides map[string]forewarn.ScaleSetRecord

	// cluster is the store's leader election, nil for a store of one
	// server; replica is this server's name in it.
	cluster forewarn.Cluster
	replica string
	// wslot holds the one write in flight to the store (lockWrites);
	// writeWait bounds the wait for it.
	wslot     chan struct{}
	writeWait time.Duration
	// ctx ends at Close and stops the loops, which loops waits for.
	ctx    context.Context
	cancel context.CancelFunc
	loops  sync.WaitGroup

	mu     sync.Mutex
	closed bool
	rev    int64
	// advanced is closed and replaced whenever rev moves.
	advanced chan struct{}
	// leading reports whether this engine fires the deadlines; fence is
	// its leadership's fence for the store.
	leading bool
	fence   string
	events  map[string]*forewarn.Event
	// byVM indexes events by each of their Resources, and byWave by wave.
	byVM   map[string]evSet
	byWave map[string]map[string]*forewarn.Event
	// byGroup indexes the active events by the scope groups of more than
	// one VM that their Resources belong to, so a VM's view is built from
	// its groups' events, not from every peer's. A group's key is the
	// address of its first slot: unique to the group, even where two
	// groups begin with the same VM.
	byGroup map[**forewarn.VM]map[string]*forewarn.Event
	// terms indexes the Scheduled Terminates of each scale set.
	terms map[string]map[string]*forewarn.Event
	// inc holds the DocumentIncarnation of each VM whose document
	// changed, kept for VMs that left too; incOf reads it, 1 for the rest.
	inc map[string]int64
	// armed holds each event's next deadline, deadlines orders them
	// (with stale entries, see deadline), and wake is the one timer,
	// set for wakeAt, the soonest (fire).
	armed     map[string]time.Time
	deadlines deadlineHeap
	wake      *time.Timer
	wakeAt    time.Time
	subs      []func([]*View)
	// counts holds how many events of each type and status events holds.
	counts map[typeStatus]int
	// sessions holds the maintenance sessions, each as committed (never
	// modified: a step writes a clone).
	sessions map[string]*forewarn.Session
	// newest indexes the sessions by host: the newest session that names
	// each host, and the host's place in it (installSessions).
	newest map[string]hostIn
	// led wakes the session loop when the engine takes the lead: the
	// sessions may move though nothing commits.
	led chan struct{}
	// tsubs receive the transitions of each commit applied.
	tsubs []func(int64, []Transition)
	// obs receives measurements; never nil.
	obs Observer
	// keys holds the store's token signing keys; newKeys, while New
	// runs on a store without any, the keys its first commit writes
	// (guarded by mu).
	keys    atomic.Pointer[forewarn.SigningKeys]
	newKeys *forewarn.SigningKeys
	// sightings holds the store's sightings, by event ID, and ssubs
	// their subscribers (guarded by mu); noted, those noted and not yet
	// written; clients, the client records saved with VM records
	// (guarded by mu).
	sightings map[string]*forewarn.Sighting
	ssubs     []func(map[string]*forewarn.Sighting)
	noted     sightings
	clients   ClientRecords
}

// New loads the store's state, applies every deadline that passed while
// no engine ran, and arms the timers of the rest.
func New(ctx context.Context, cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Engine{
		store:        cfg.Store,
		log:          log,
		allowShort:   cfg.AllowShortNotice,
		members:      newMembers(),
		disableAfter: cmp.Or(cfg.DisableAfter, 24*time.Hour),
		persist:      make(chan string, 256),
		stop:         make(chan struct{}),
		stopped:      make(chan struct{}),
		advanced:     make(chan struct{}),
		led:          make(chan struct{}, 1),
		setOverrides: make(map[string]forewarn.ScaleSetRecord),
		inc:          make(map[string]int64),
		armed:        make(map[string]time.Time),
		replica:      cfg.Replica,
		wslot:        make(chan struct{}, 1),
		writeWait:    cfg.WriteWait,
		counts:       make(map[typeStatus]int),
		obs:          cmp.Or[Observer](cfg.Observer, nopObserver{}),
	}
	e.cluster, _ = cfg.Store.(forewarn.Cluster)
	if e.replica == "" {
		e.replica, _ = os.Hostname()
	}
	e.inv.Store(emptyInventory())

	// Another replica may write between the load and the fleet's apply;
	// then the engine loads again.
	for attempt := 1; ; attempt++ {
		st, err := cfg.Store.Load(ctx)
		if err != nil {
			return nil, fmt.Errorf("load store: %w", err)
		}
		e.mu.Lock()
		e.reset(st)
		e.newKeys = nil
		if st.SigningKeys == nil {
			// Written with the fleet's commit, or alone below.
			e.newKeys = &forewarn.SigningKeys{Current: newSigningKey(time.Now())}
		}
		e.mu.Unlock()
		if cfg.Fleet != nil && !(cfg.SeedOnly && len(st.Inventory) > 0) {
			_, err = e.changeInventoryOnce(ctx, InventoryChange{Set: cfg.Fleet.VMs, SetScaleSets: cfg.Fleet.ScaleSets})
			if _, ok := stale(err); ok && attempt < maxAttempts {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("apply the fleet: %w", err)
			}
			// The VMs it registered take in what the store remembers of
			// them (a store from before the inventory was stored).
			e.mu.Lock()
			e.noteRecords(st.VMs)
			e.mu.Unlock()
		}
		e.mu.Lock()
		err = e.makeKeys(ctx)
		e.mu.Unlock()
		if _, ok := stale(err); ok && attempt < maxAttempts {
			continue // another replica made them first
		}
		if err != nil {
			return nil, err
		}
		break
	}
	if e.cluster == nil {
		e.mu.Lock()
		err := e.takeLead(ctx, "")
		e.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	fctx, fcancel := context.WithCancel(e.ctx)
	e.loops.Add(1)
	go e.followLoop(e.store.Follow(fctx, e.rev), fcancel)
	if e.cluster != nil {
		e.loops.Add(1)
		go e.campaignLoop()
	}
	e.loops.Add(2)
	go e.sessionLoop()
	go e.keyLoop()
	go e.persistLoop()
	return e, nil
}

// Close stops every timer. Later operations return EUNAVAILABLE. It does
// not close the store.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.disarmAll()
	e.mu.Unlock()
	// A leader resigns, so another replica leads at once.
	e.cancel()
	e.loops.Wait()
	// The LastSeen writes still queued are made before Close returns.
	close(e.stop)
	<-e.stopped
	return nil
}

// View returns the current view of the VM named name, or nil.
func (e *Engine) View(name string) *View {
	m := e.member(name)
	if m == nil {
		return nil
	}
	return m.view.Load()
}

// Subscribe calls fn with every VM's current view now and with each new
// view as it is published, in order. fn runs with the engine locked: it
// must be quick and must not call the engine.
func (e *Engine) Subscribe(fn func(*View)) {
	e.SubscribeBatch(func(vs []*View) {
		for _, v := range vs {
			fn(v)
		}
	})
}

// SubscribeBatch is Subscribe for a subscriber that takes the views of
// one change together: fn gets every VM's current view now, then the
// views each change publishes, in one call per change. A VM that left
// the inventory gets a last view with Removed set. fn runs with the
// engine locked: it must be quick and must not call the engine, and it
// must not keep the slice.
func (e *Engine) SubscribeBatch(fn func([]*View)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.subs = append(e.subs, fn)
	vms := e.cur().fleetOf().VMs
	vs := make([]*View, 0, len(vms))
	for _, vm := range vms {
		vs = append(vs, e.member(vm.Name).view.Load())
	}
	fn(vs)
}

// Event returns a copy of the event with the given ID.
// Errors: ENOTFOUND.
func (e *Engine) Event(id string) (*forewarn.Event, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ev, err := e.lookup(id)
	if err != nil {
		return nil, err
	}
	return ev.Clone(), nil
}

// TypeOf returns the type of the event with the given ID, without
// copying the event.
// Errors: ENOTFOUND.
func (e *Engine) TypeOf(id string) (forewarn.EventType, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ev, err := e.lookup(id)
	if err != nil {
		return "", err
	}
	return ev.Type, nil
}

// Events returns copies of every event, active and ended, oldest first.
func (e *Engine) Events() []*forewarn.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*forewarn.Event, 0, len(e.events))
	for _, ev := range e.events {
		out = append(out, ev.Clone())
	}
	sortEvents(out)
	return out
}

// VMs returns every VM with its incarnation and visible active events.
func (e *Engine) VMs() []VMInfo {
	vms := e.cur().fleetOf().VMs
	out := make([]VMInfo, 0, len(vms))
	now := time.Now()
	cache := map[**forewarn.VM]bool{}
	for _, vm := range vms {
		if info, ok := e.info(vm, now, cache); ok {
			out = append(out, info)
		}
	}
	return out
}

// VM returns the VM named name as VMs lists it. Errors: ENOTFOUND for a
// name not in the fleet.
func (e *Engine) VM(name string) (VMInfo, error) {
	if vm := e.vm(name); vm != nil {
		if info, ok := e.info(vm, time.Now(), map[**forewarn.VM]bool{}); ok {
			return info, nil
		}
	}
	return VMInfo{}, forewarn.Errorf(forewarn.ENOTFOUND, "no VM named %q", name)
}

// info returns vm with its current document state; cache is as
// serviceEnabled takes it. It reads without the lock, so an inventory
// change may be under way: a VM that has no view yet (just added), or
// whose view is its last (just removed), is not reported (false).
func (e *Engine) info(vm *forewarn.VM, now time.Time, cache map[**forewarn.VM]bool) (VMInfo, bool) {
	v := e.View(vm.Name)
	if v == nil || v.Removed {
		return VMInfo{}, false
	}
	info := VMInfo{VM: *vm, Incarnation: v.Incarnation, State: "running", Events: []string{}}
	switch {
	case v.Deleted:
		info.State = "deleted"
	case v.Stopped:
		info.State = "stopped"
	default:
		for _, ev := range v.own {
			if ev.Status == forewarn.Started {
				info.State, info.ReturnsTo = startedState(ev, vm)
				break
			}
		}
	}
	// Replicas show what they share, the stored time (to within an
	// hour), so that every replica lists the same.
	if m := e.member(vm.Name); m != nil {
		last := &m.seen
		if e.cluster != nil {
			last = &m.saved
		}
		info.LastSeen = unixTime(last.Load())
	}
	info.Enabled = e.serviceEnabled(vm, now, cache)
	for _, ev := range v.Events {
		info.Events = append(info.Events, ev.ID)
	}
	return info, true
}

// StateText is the VM's State, followed by the state it returns to when
// the Started event acting on it ends: "stopped (then running)".
func (i VMInfo) StateText() string {
	if i.ReturnsTo == "" {
		return i.State
	}
	return i.State + " (then " + i.ReturnsTo + ")"
}

// startedState returns what the Started event ev does to vm, which it
// names, and the state vm is left in when ev ends.
func startedState(ev *forewarn.Event, vm *forewarn.VM) (state, after string) {
	switch ev.Type {
	case forewarn.Freeze:
		return "frozen", "running"
	case forewarn.Reboot, forewarn.InstanceReboot, forewarn.SystemReboot:
		return "rebooting", "running"
	case forewarn.Redeploy:
		return "redeploying", "running"
	case forewarn.MigrateOnHostMaintenance:
		return "migrating", "running"
	case forewarn.TerminateOnHostMaintenance, forewarn.InstanceStop, forewarn.InstanceRetirement:
		// The VM is stopped for the maintenance and started again.
		return "stopped", "running"
	case forewarn.SystemMaintenance:
		return "in maintenance", "running"
	case forewarn.Preempt, forewarn.Terminate:
		if removes(ev, vm) {
			return "deleting", "deleted"
		}
		return "stopping", "stopped"
	}
	return "running", ""
}

// Create validates s and creates its event, durably, before returning it.
// Errors: EINVALID for a bad spec or a notice below the minimum,
// ENOTFOUND for an unknown VM, EUNAVAILABLE after Close.
func (e *Engine) Create(ctx context.Context, s Spec) (*forewarn.Event, error) {
	return e.create(ctx, s, nil)
}

// create is Create with a guard that runs under the engine lock just
// before the event is made, so a check and the create are one step.
func (e *Engine) create(ctx context.Context, s Spec, guard func() error) (ev *forewarn.Event, err error) {
	var evs []*forewarn.Event
	err = e.retry(ctx, func(ctx context.Context) error {
		evs, err = e.createOnce(ctx, s, guard, false)
		return err
	})
	if err != nil {
		return nil, err
	}
	return evs[0], nil
}

// CreateAll makes one event of the spec s for each scope group its VMs
// fall in, all in one commit, and returns them in the order of their
// groups' first VM in s.VMs. A VM sees the events of its scope group
// only, so an event never names VMs of two groups: each VM learns the
// names of, and its approval starts, only its own group's maintenance
// (docs/wire-decisions.md). Every check of Create applies to every VM,
// and one failing check makes none of the events.
// Errors: as Create's.
func (e *Engine) CreateAll(ctx context.Context, s Spec) (evs []*forewarn.Event, err error) {
	err = e.retry(ctx, func(ctx context.Context) error {
		evs, err = e.createOnce(ctx, s, nil, true)
		return err
	})
	return evs, err
}

// MaxDescription is the longest event description, in bytes, that an
// event may carry: every poll of every VM that sees the event carries it.
const MaxDescription = 1024

// scopeGroupName describes vm's scope group for a message.
func scopeGroupName(vm *forewarn.VM) string {
	switch {
	case vm.AvailabilitySet != "":
		return "availability set " + vm.AvailabilitySet
	case vm.CloudService != "":
		return "cloud service " + vm.CloudService
	case vm.ScaleSet != "" && vm.PlacementGroup != "":
		return "scale set " + vm.ScaleSet + " placement group " + vm.PlacementGroup
	case vm.ScaleSet != "":
		return "scale set " + vm.ScaleSet
	}
	return "VM " + vm.Name
}

// groupByScope splits names, all in the fleet, by scope group (the
// groups inventory.peersOf gives: a VM sees the events of its groups, and a
// standalone, GCE or EC2 VM is a group of its own), keeping their order
// within each group and the groups in the order of their first VM.
func (e *Engine) groupByScope(names []string) [][]string {
	// A VM's key is its groups, each known by the address of its first
	// slot (as byGroup knows them); a VM is in at most three.
	type key [3]**forewarn.VM
	at := make(map[key]int)
	var groups [][]string
	for _, name := range names {
		var k key
		for j, g := range e.cur().peersOf(name) {
			k[j] = &g[0]
		}
		i, ok := at[k]
		if !ok {
			i = len(groups)
			at[k] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], name)
	}
	return groups
}

// createOnce makes the events of s: one, refusing a spec of several
// scope groups, or with split one per group.
func (e *Engine) createOnce(ctx context.Context, s Spec, guard func() error, split bool) ([]*forewarn.Event, error) {
	if _, err := forewarn.ParseEventType(string(s.Type)); err != nil {
		return nil, err
	}
	if len(s.VMs) == 0 {
		return nil, forewarn.Errorf(forewarn.EINVALID, "an event needs at least one VM")
	}
	if len(s.Description) > MaxDescription {
		return nil, forewarn.Errorf(forewarn.EINVALID, "description is %d bytes; at most %d", len(s.Description), MaxDescription)
	}
	named := make(map[string]bool, len(s.VMs))
	for _, name := range s.VMs {
		vm := e.vm(name)
		if vm == nil {
			return nil, forewarn.Errorf(forewarn.ENOTFOUND, "unknown VM %q", name)
		}
		if !s.Type.ForProvider(vm.Provider) {
			return nil, forewarn.Errorf(forewarn.EINVALID, "VM %q is %s; %s events are not for %s VMs", name, vm.Provider.AVM(), s.Type, vm.Provider.Title())
		}
		if s.Type == forewarn.MigrateOnHostMaintenance && !vm.MigrateAllowed() {
			return nil, forewarn.Errorf(forewarn.EINVALID,
				"VM %q cannot be live migrated (it has a GPU or onHostMaintenance TERMINATE); use %s", name, forewarn.TerminateOnHostMaintenance)
		}
		switch first := e.vm(s.VMs[0]); {
		case s.Type == forewarn.Terminate && vm.Provider == forewarn.AWS && vm.AutoScalingGroup == "":
			return nil, forewarn.Errorf(forewarn.EINVALID,
				"VM %q is not in an Auto Scaling group; a Terminate is a group's scale-in (use an EC2 scheduled event such as instance-stop)", name)
		case s.Type == forewarn.Terminate && vm.Provider == forewarn.AWS && vm.AutoScalingGroup != first.AutoScalingGroup:
			return nil, forewarn.Errorf(forewarn.EINVALID,
				"VMs %q (Auto Scaling group %s) and %q (Auto Scaling group %s) are in different groups; one Terminate spans one group",
				first.Name, first.AutoScalingGroup, name, vm.AutoScalingGroup)
		case s.Type == forewarn.Preempt && vm.Provider == forewarn.AWS && len(s.VMs) > 1:
			return nil, forewarn.Errorf(forewarn.EINVALID, "VM %q is an EC2 Spot VM; EC2 interrupts Spot VMs one at a time (name one VM)", name)
		case s.Type == forewarn.Terminate && vm.Provider == forewarn.AWS:
		case s.Type == forewarn.Terminate && vm.ScaleSet == "":
			return nil, forewarn.Errorf(forewarn.EINVALID,
				"VM %q is not in a scale set; a Terminate is a scale set's delete notice (use a Reboot or Redeploy)", name)
		case s.Type == forewarn.Terminate && vm.ScaleSet != first.ScaleSet:
			return nil, forewarn.Errorf(forewarn.EINVALID,
				"VMs %q (scale set %s) and %q (scale set %s) are in different scale sets; one Terminate spans one scale set",
				first.Name, first.ScaleSet, name, vm.ScaleSet)
		case s.Type == forewarn.Preempt && !vm.Evictable():
			return nil, forewarn.Errorf(forewarn.EINVALID, "VM %q is not a Spot or preemptible VM; only those are preempted", name)
		}
		if named[name] {
			return nil, forewarn.Errorf(forewarn.EINVALID, "VM %q is named twice", name)
		}
		named[name] = true
	}
	groups := e.groupByScope(s.VMs)
	for _, names := range groups {
		// Within a scope group, one event spans one update domain (a
		// wave walks a group's domains).
		first := e.vm(names[0])
		for _, name := range names[1:] {
			if vm := e.vm(name); vm.Provider == forewarn.Azure && vm.UpdateDomain != first.UpdateDomain {
				return nil, forewarn.Errorf(forewarn.EINVALID,
					"VMs %q (update domain %d) and %q (update domain %d) are in different update domains; one event spans one update domain",
					first.Name, first.UpdateDomain, name, vm.UpdateDomain)
			}
		}
	}
	notice := s.Notice
	if notice == 0 {
		notice = s.Type.MinNotice()
		if vm := e.vm(s.VMs[0]); s.Type == forewarn.Terminate && vm.ScaleSet != "" {
			notice = e.lockedScaleSetSettings(vm.ScaleSet).TerminateTimeout
		}
	}
	if err := e.checkNotice(s.Type, notice, s.Started); err != nil {
		return nil, err
	}
	if s.Type == forewarn.Terminate && notice > forewarn.MaxTerminateTimeout && !s.Started && e.vm(s.VMs[0]).Provider == forewarn.Azure {
		return nil, forewarn.Errorf(forewarn.EINVALID,
			"notice %s is above %s: a Terminate's notice is its scale set's notBeforeTimeout, PT5M to PT15M", notice, forewarn.MaxTerminateTimeout)
	}
	duration := -1
	if s.Duration != nil {
		duration = *s.Duration
		if duration < -1 {
			return nil, forewarn.Errorf(forewarn.EINVALID, "duration %d is below -1", duration)
		}
	}
	source := s.Source
	switch {
	case source == "" && s.Type == forewarn.Terminate:
		source = forewarn.User // the scale set owner deletes
	case source == "":
		source = forewarn.Platform
	default:
		if _, err := forewarn.ParseSource(string(source)); err != nil {
			return nil, err
		}
		if s.Type == forewarn.Terminate && source != forewarn.User {
			return nil, forewarn.Errorf(forewarn.EINVALID, "a Terminate is the scale set owner's delete; its EventSource is User, not %s", source)
		}
	}
	lasts := s.Lasts
	switch {
	case lasts < 0:
		return nil, forewarn.Errorf(forewarn.EINVALID, "lasts %s is negative", lasts)
	case lasts == 0:
		lasts = s.Type.DefaultLasts()
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, errClosed
	}
	if guard != nil {
		if err := guard(); err != nil {
			return nil, err
		}
	}
	for _, name := range s.VMs {
		if e.deleted(name) {
			return nil, forewarn.Errorf(forewarn.EINVALID, "VM %q has been deleted", name)
		}
	}
	if len(groups) > 1 && !split {
		a, b := e.vm(groups[0][0]), e.vm(groups[1][0])
		return nil, forewarn.Errorf(forewarn.EINVALID,
			"VMs %q (%s) and %q (%s) are in different scope groups; one event spans one scope group (CreateAll makes one per group)",
			a.Name, scopeGroupName(a), b.Name, scopeGroupName(b))
	}
	now := time.Now()
	evs := make([]*forewarn.Event, len(groups))
	for i, names := range groups {
		evs[i] = e.newEvent(s.Type, names, notice, duration, source, s.Description, lasts, s.Started, now)
	}
	if err := e.commit(ctx, now, evs, nil); err != nil {
		return nil, err
	}
	for i, ev := range evs {
		evs[i] = e.events[ev.ID].Clone()
	}
	if ev := evs[0]; len(evs) == 1 {
		e.log.Info("event created", "event", ev.ID, "type", ev.Type, "status", ev.Status, "resources", ev.Resources)
	} else {
		e.log.Info("events created, one per scope group", "events", len(evs), "first", ev.ID, "type", ev.Type, "vms", len(s.VMs))
	}
	return evs, nil
}

// newEvent makes an event of type t for the VMs names of one scope
// group, Scheduled notice from now (or Started when started is set or
// no VM of names could hear of it), as Create makes them. e.mu must be
// held.
func (e *Engine) newEvent(t forewarn.EventType, names []string, notice time.Duration, duration int, source forewarn.Source,
	description string, lasts time.Duration, started bool, now time.Time) *forewarn.Event {
	ev := &forewarn.Event{
		ID:          newID(),
		Type:        t,
		Status:      forewarn.Scheduled,
		Resources:   names,
		NotBefore:   ceilSecond(now.Add(notice)),
		Duration:    duration,
		Source:      source,
		Description: description,
		Lasts:       lasts,
		Created:     now.Round(0),
	}
	if t.EC2() {
		ev.Deadline = ev.NotBefore.Add(forewarn.EC2Reschedule)
	}
	if vm := e.vm(names[0]); t == forewarn.Preempt && vm.Provider == forewarn.AWS {
		ev.Action = cmp.Or(vm.SpotInterruptionBehavior, "terminate")
		// An interruption notice due now (within the second NotBefore
		// was rounded up by) is given with the event, not a moment
		// after.
		if lead := ev.Lead(); lead > 0 && ev.NotBefore.Add(-lead).Sub(now) < time.Second {
			ev.WarnedAt = now.Round(0)
		}
	}
	if started || e.unheard(ev, now) {
		ev.Status = forewarn.Started
		ev.NotBefore = time.Time{}
		ev.StartedAt = now.Round(0)
	}
	return ev
}

// checkNotice refuses a notice that is negative, or below the minimum of
// type t unless the engine allows short notices or the event starts at
// once.
func (e *Engine) checkNotice(t forewarn.EventType, notice time.Duration, started bool) error {
	switch {
	case notice < 0:
		return forewarn.Errorf(forewarn.EINVALID, "notice %s is negative", notice)
	case notice < t.MinNotice() && !e.allowShort && !started:
		return forewarn.Errorf(forewarn.EINVALID,
			"notice %s is below the %s minimum for %s (the server's --allow-short-notice lifts this)",
			notice, t.MinNotice(), t)
	}
	return nil
}

// Approve records approvals of the events ids by the VM named by (or by
// forewarn.Operator) and starts every approved Scheduled event at once.
// All ids are checked before anything is written: one bad id approves
// nothing. Approving an event that is already approved, already Started
// or just ended succeeds without change.
// Errors: ENOTFOUND for an unknown id or one the VM cannot see,
// EUNAVAILABLE after Close.
func (e *Engine) Approve(ctx context.Context, by string, ids []string) error {
	return e.retry(ctx, func(ctx context.Context) error { return e.approve(ctx, by, ids) })
}

func (e *Engine) approve(ctx context.Context, by string, ids []string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errClosed
	}
	var approver *forewarn.VM
	if by != forewarn.Operator {
		if approver = e.vm(by); approver == nil {
			return forewarn.Errorf(forewarn.ENOTFOUND, "unknown VM %q", by)
		}
	}
	now := time.Now()
	var changed, approved []*forewarn.Event
	for _, id := range ids {
		ev, err := e.lookup(id)
		if err == nil && approver != nil && !e.visible(approver, ev) {
			err = forewarn.Errorf(forewarn.ENOTFOUND, "no event %q for VM %s", id, by)
		}
		if err != nil {
			return err
		}
		if !ev.Status.Active() {
			continue
		}
		if i := slices.IndexFunc(changed, func(c *forewarn.Event) bool { return c.ID == ev.ID }); i >= 0 {
			continue
		}
		if slices.ContainsFunc(ev.Approvals, func(a forewarn.Approval) bool { return a.By == by }) {
			continue
		}
		if len(ev.Approvals) >= MaxApprovals {
			// Approved already, so a further approval does nothing;
			// recording each of a fleet's VMs would rewrite the event once
			// per VM.
			continue
		}
		c := ev.Clone()
		c.Approvals = append(c.Approvals, forewarn.Approval{By: by, At: now.Round(0)})
		approved = append(approved, ev)
		if a := advance(c, now, false, e.gated(c)); a != nil {
			c = a
		}
		changed = append(changed, c)
	}
	if len(changed) == 0 {
		return nil
	}
	if err := e.commit(ctx, now, changed, nil); err != nil {
		return err
	}
	for _, ev := range approved {
		e.obs.Approval(by, ev, now)
	}
	for _, c := range changed {
		e.log.Info("event approved", "event", c.ID, "by", by, "status", e.events[c.ID].Status)
	}
	return nil
}

// MaxHistory is how many ended EC2 scheduled events a View's History
// keeps: the newest.
const MaxHistory = 100

// MaxApprovals is how many approvers an event records. Later approvals
// of an event already approved succeed and record nothing, so the VMs of
// a fleet-wide event approving it one by one do not rewrite it once each.
const MaxApprovals = 16

// visible reports whether vm sees ev. An active event is looked up in
// vm's view, in time linear in the view; an ended one by its Resources.
// e.mu must be held.
func (e *Engine) visible(vm *forewarn.VM, ev *forewarn.Event) bool {
	if !ev.Status.Active() {
		inv := e.cur()
		return slices.ContainsFunc(ev.Resources, func(r string) bool {
			rv := inv.vmNamed(r)
			return rv != nil && forewarn.SharesScope(vm, rv)
		})
	}
	return slices.ContainsFunc(e.View(vm.Name).Events, func(o *forewarn.Event) bool { return o.ID == ev.ID })
}

// Visible reports whether the VM named vm sees the event id, active or
// ended, without copying the event.
func (e *Engine) Visible(vm, id string) bool {
	v := e.vm(vm)
	if v == nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	ev, err := e.lookup(id)
	return err == nil && e.visible(v, ev)
}

// Start starts a Scheduled event now, whatever its NotBefore.
// Errors: ENOTFOUND, ECONFLICT when the event is not Scheduled.
func (e *Engine) Start(ctx context.Context, id string) error {
	return e.StartAll(ctx, []string{id})
}

// StartAll starts the Scheduled events ids now, in one commit: the
// events that one request made, one per scope group (CreateAll), start
// together. Every event is checked before anything is written.
// Errors: ENOTFOUND, ECONFLICT when an event is not Scheduled.
func (e *Engine) StartAll(ctx context.Context, ids []string) error {
	return e.transition(ctx, ids, []forewarn.Status{forewarn.Scheduled}, func(c *forewarn.Event, now time.Time) error {
		c.Status = forewarn.Started
		c.StartedAt = now.Round(0)
		c.NotBefore = time.Time{}
		return nil
	})
}

// Complete ends a Started event now; it vanishes from every document.
// Errors: ENOTFOUND, ECONFLICT when the event is not Started.
func (e *Engine) Complete(ctx context.Context, id string) error {
	return e.CompleteAll(ctx, []string{id})
}

// CompleteAll ends the Started events ids now, in one commit, as
// StartAll starts them.
// Errors: ENOTFOUND, ECONFLICT when an event is not Started.
func (e *Engine) CompleteAll(ctx context.Context, ids []string) error {
	return e.transition(ctx, ids, []forewarn.Status{forewarn.Started}, func(c *forewarn.Event, now time.Time) error {
		end(c, forewarn.Completed, now)
		return nil
	})
}

// Cancel withdraws a Scheduled (or a wave's Pending) event; it vanishes
// from every document.
// Errors: ENOTFOUND, ECONFLICT when the event is neither.
func (e *Engine) Cancel(ctx context.Context, id string) error {
	return e.transition(ctx, []string{id}, []forewarn.Status{forewarn.Scheduled, forewarn.Pending}, func(c *forewarn.Event, now time.Time) error {
		end(c, forewarn.Canceled, now)
		return nil
	})
}

// end ends c, a copy of an event, now in status (Completed or Canceled).
func end(c *forewarn.Event, status forewarn.Status, now time.Time) {
	c.Status, c.EndedAt = status, now.Round(0)
}

// Reschedule moves a Scheduled EC2 scheduled event to start at
// notBefore (rounded up to a whole second), as EC2 lets an instance's
// owner do: to any time after now and no later than the event's
// NotBeforeDeadline.
// Errors: ENOTFOUND, EINVALID for an event that is not an EC2 scheduled
// event or a time outside that range, ECONFLICT when it is not Scheduled.
func (e *Engine) Reschedule(ctx context.Context, id string, notBefore time.Time) error {
	notBefore = ceilSecond(notBefore)
	// An event's type never changes: it can be checked before the lock.
	t, err := e.TypeOf(id)
	if err != nil {
		return err
	}
	if !t.EC2() {
		return forewarn.Errorf(forewarn.EINVALID, "event %s is a %s event; only EC2 scheduled events can be rescheduled", strings.ToUpper(id), t)
	}
	return e.transition(ctx, []string{id}, []forewarn.Status{forewarn.Scheduled}, func(c *forewarn.Event, now time.Time) error {
		switch {
		case !notBefore.After(now):
			return forewarn.Errorf(forewarn.EINVALID, "new NotBefore %s is not in the future", notBefore.UTC().Format(time.RFC3339))
		case notBefore.After(c.Deadline):
			return forewarn.Errorf(forewarn.EINVALID, "new NotBefore %s is after the event's NotBeforeDeadline %s",
				notBefore.UTC().Format(time.RFC3339), c.Deadline.UTC().Format(time.RFC3339))
		}
		c.NotBefore = notBefore
		return nil
	})
}

func (e *Engine) transition(ctx context.Context, ids []string, from []forewarn.Status, f func(*forewarn.Event, time.Time) error) error {
	return e.retry(ctx, func(ctx context.Context) error { return e.transitionOnce(ctx, ids, from, f) })
}

func (e *Engine) transitionOnce(ctx context.Context, ids []string, from []forewarn.Status, f func(*forewarn.Event, time.Time) error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errClosed
	}
	if len(ids) == 0 {
		return forewarn.Errorf(forewarn.EINVALID, "no event named")
	}
	now := time.Now()
	changed := make([]*forewarn.Event, 0, len(ids))
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		ev, err := e.lookup(id)
		if err != nil {
			return err
		}
		if seen[ev.ID] {
			continue
		}
		seen[ev.ID] = true
		if !slices.Contains(from, ev.Status) {
			return forewarn.Errorf(forewarn.ECONFLICT, "event %s is %s, not %s", ev.ID, ev.Status, from[0])
		}
		c := ev.Clone()
		if err := f(c, now); err != nil {
			return err
		}
		changed = append(changed, c)
	}
	if err := e.commit(ctx, now, changed, nil); err != nil {
		return err
	}
	if c := changed[0]; len(changed) > maxLoggedEvents {
		e.log.Info("events changed", "events", len(changed), "first", c.ID, "status", c.Status)
		return nil
	}
	for _, c := range changed {
		e.log.Info("event changed", "event", c.ID, "status", c.Status)
	}
	return nil
}

var errClosed = forewarn.Errorf(forewarn.EUNAVAILABLE, "the engine is shut down")

// lookup finds an event by ID, ignoring case. e.mu must be held.
func (e *Engine) lookup(id string) (*forewarn.Event, error) {
	if ev, ok := e.events[id]; ok {
		return ev, nil
	}
	if ev, ok := e.events[strings.ToUpper(id)]; ok {
		return ev, nil
	}
	return nil, forewarn.Errorf(forewarn.ENOTFOUND, "no event %q", id)
}

// commit settles the changed events (the rules that one change sets off
// in others), writes them, the incarnations they bump and the VM records
// vms, and once the store has them installs them, publishes new views and
// arms the events' timers. e.mu must be held. On error nothing in memory
// changes.
func (e *Engine) commit(ctx context.Context, now time.Time, changed []*forewarn.Event, vms map[string]*forewarn.VMRecord) error {
	return e.commitAs(ctx, now, changed, vms, "")
}

// commitAs is commit fenced with a leadership's fence: a leader's
// deadline write that its lost leadership cannot make.
func (e *Engine) commitAs(ctx context.Context, now time.Time, changed []*forewarn.Event, vms map[string]*forewarn.VMRecord, fence string) error {
	return e.commitWith(ctx, now, changed, vms, nil, fence)
}

// commitWith is commitAs that writes the maintenance sessions sessions
// too, in the same change.
func (e *Engine) commitWith(ctx context.Context, now time.Time, changed []*forewarn.Event, vms map[string]*forewarn.VMRecord,
	sessions map[string]*forewarn.Session, fence string) error {
	changed = e.settle(now, changed)
	moves := e.transitions(changed)
	touched := e.touchedBy(changed)
	// DocumentIncarnation is an Azure notion: only Azure VMs count changes.
	incs := make(map[string]int64, len(touched))
	for name := range touched {
		if vm := e.vm(name); vm != nil && vm.Provider == forewarn.Azure {
			incs[name] = e.incOf(name) + 1
		}
	}
	covered, err := e.write(ctx, &forewarn.Change{Events: changed, Incarnations: incs, VMs: vms, Sessions: sessions, Fence: fence})
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	for _, m := range moves {
		e.obs.Transition(m.t, m.from, m.to)
	}
	if covered {
		return nil // the follow loop installed it, and armed the timers
	}
	e.noteTransitions(e.rev, now, changed, sessions)
	e.installSessions(sessions)
	for _, c := range changed {
		e.install(c)
	}
	for name, n := range incs {
		e.inc[name] = n
	}
	e.publish(touched)
	for _, c := range changed {
		e.arm(c, now)
	}
	return nil
}

// touchedBy returns the VMs whose documents the changed events change:
// those that could see an event's old version or can see its new one,
// when a rendered field differs. e.mu must be held, and the old versions
// still installed.
func (e *Engine) touchedBy(changed []*forewarn.Event) map[string]bool {
	size := 0
	for _, c := range changed {
		size += len(c.Resources)
	}
	touched := make(map[string]bool, size)
	for _, c := range changed {
		old := e.events[c.ID]
		if old != nil && sameDocument(old, c) {
			continue
		}
		if c.Status.Active() {
			e.audience(c, touched)
		}
		if old != nil && old.Status.Active() {
			e.audience(old, touched)
		}
		if c.Status == forewarn.Completed {
			for _, r := range c.Resources {
				touched[r] = true
			}
		}
	}
	return touched
}

// incOf returns the DocumentIncarnation of the VM named name. The first,
// 1, is not kept: e.inc holds the VMs whose documents changed, not the
// fleet. e.mu must be held.
func (e *Engine) incOf(name string) int64 { return max(e.inc[name], 1) }

// buildView assembles vm's current view from its own events and those
// of the scope groups it belongs to. e.mu must be held, or the engine not
// yet shared.
func (e *Engine) buildView(vm *forewarn.VM) *View {
	v := &View{VM: vm, Incarnation: e.incOf(vm.Name)}
	if d := e.cur().def(vm.Name); d != nil {
		v.Registration = cmp.Or(d.Registration, uint64(d.Seq))
	}
	shared := false
	for _, g := range e.cur().peersOf(vm.Name) {
		if len(g) > 1 {
			for _, ev := range e.byGroup[&g[0]] {
				v.Events = append(v.Events, ev)
				shared = true
			}
		}
	}
	for ev := range e.eventsOf(vm.Name) {
		if ev.Status.Active() {
			v.own = append(v.own, ev)
			if !shared {
				v.Events = append(v.Events, ev)
			}
		}
		if ev.Type == forewarn.Preempt && ev.ResumedAt.IsZero() {
			v.Preempted = v.Preempted || ev.Status == forewarn.Started || ev.Status == forewarn.Completed
		}
		if ev.Type.HostMaintenance() && ev.Status != forewarn.Pending {
			v.Maintained = true
		}
		if ev.Type.EC2() && (ev.Status == forewarn.Completed || ev.Status == forewarn.Canceled) {
			v.History = append(v.History, ev)
		}
		if ends(ev) {
			deletes := removes(ev, vm)
			v.Stopped = v.Stopped || !deletes
			v.Deleted = v.Deleted || deletes
		}
	}
	sortEvents(v.Events)
	sortEvents(v.History)
	if n := len(v.History); n > MaxHistory {
		v.History = v.History[n-MaxHistory:] // a bounded view: the newest
	}
	// An event seen through two groups is listed once; the VM's own
	// events are in its groups' already.
	v.Events = slices.Compact(v.Events)
	return v
}

// install puts ev in the event map and the indexes, replacing its older
// version. e.mu must be held, or the engine not yet shared.
func (e *Engine) install(ev *forewarn.Event) {
	if old := e.events[ev.ID]; old != nil {
		e.uninstall(old)
		e.count(old, -1)
	}
	e.events[ev.ID] = ev
	e.count(ev, 1)
	if ev.Type.HostMaintenance() && ev.Status == forewarn.Completed {
		for _, r := range ev.Resources {
			if m := e.member(r); m != nil {
				raise(&m.ended, ev.EndedAt.UnixNano())
			}
		}
	}
	for _, r := range ev.Resources {
		s := e.byVM[r]
		s.put(ev)
		e.byVM[r] = s
	}
	if ev.Status.Active() {
		e.indexGroups(ev)
	}
	if ev.Status == forewarn.Scheduled && e.gated(ev) {
		ss := e.scaleSetOf(ev)
		m := e.terms[ss]
		if m == nil {
			m = map[string]*forewarn.Event{}
			e.terms[ss] = m
		}
		m[ev.ID] = ev
	}
	if ev.Wave != "" {
		m := e.byWave[ev.Wave]
		if m == nil {
			m = map[string]*forewarn.Event{}
			e.byWave[ev.Wave] = m
		}
		m[ev.ID] = ev
	}
}

// uninstall removes old from the indexes, not from the event map. e.mu
// must be held.
func (e *Engine) uninstall(old *forewarn.Event) {
	for _, r := range old.Resources {
		if s, ok := e.byVM[r]; ok {
			if s.remove(old.ID) {
				delete(e.byVM, r)
			} else {
				e.byVM[r] = s
			}
		}
	}
	e.unindexGroups(e.cur(), old) // and drops a group's index once empty
	if old.Type == forewarn.Terminate {
		delete(e.terms[e.scaleSetOf(old)], old.ID)
	}
	if old.Wave != "" {
		delete(e.byWave[old.Wave], old.ID)
	}
}

// audience adds to set the names of the VMs that can see ev: its
// Resources and the members of their scope groups, each group once.
func (e *Engine) audience(ev *forewarn.Event, set map[string]bool) {
	var done map[**forewarn.VM]bool
	for _, r := range ev.Resources {
		set[r] = true
		for _, g := range e.cur().peersOf(r) {
			if len(g) < 2 || done[&g[0]] {
				continue
			}
			if done == nil {
				done = map[**forewarn.VM]bool{}
			}
			done[&g[0]] = true
			for _, vm := range g {
				set[vm.Name] = true
			}
		}
	}
}

// NoteQuery records that the VM named name read its maintenance-event
// key now. A live migration warns only VMs that read the key since their
// last maintenance event. It is safe to call on every request.
func (e *Engine) NoteQuery(name string) {
	m := e.member(name)
	if m == nil {
		return
	}
	now := time.Now().UnixNano()
	m.queried.Store(now)
	// The first read after a maintenance ended decides the next one's
	// warning: it is stored, for the leader, whichever replica that is.
	if saved := m.savedQ.Load(); saved == 0 || saved <= m.ended.Load() {
		select {
		case e.persist <- name:
		default: // a later read tries again
		}
	}
}

// watched reports whether any VM of ev read its maintenance-event key
// since its last host maintenance event ended. e.mu must be held.
func (e *Engine) watched(ev *forewarn.Event) bool {
	for _, name := range ev.Resources {
		m := e.member(name)
		if m == nil || m.queried.Load() == 0 {
			continue
		}
		var lastEnd time.Time
		for other := range e.eventsOf(name) {
			if other.Type.HostMaintenance() && other.Status == forewarn.Completed && other.EndedAt.After(lastEnd) {
				lastEnd = other.EndedAt
			}
		}
		if lastEnd.IsZero() || m.queried.Load() > lastEnd.UnixNano() {
			return true
		}
	}
	return false
}

// Evict preempts a Spot or preemptible VM. An Azure VM gets a Platform
// Preempt with 30 seconds of notice. A Compute Engine VM's preemption
// starts at once (its preempted key turns TRUE) and the VM stops 30
// seconds later. An EC2 Spot VM gets a rebalance recommendation at once
// and, two minutes before it is interrupted, the interruption notice
// (see EvictWith); it then stops, hibernates or terminates over 30
// seconds.
// Errors: ENOTFOUND, EINVALID for a VM that cannot be evicted,
// ECONFLICT for one already being preempted.
func (e *Engine) Evict(ctx context.Context, name string) (*forewarn.Event, error) {
	return e.EvictWith(ctx, name, VMOptions{})
}

// VMOptions adjust an operation on one VM; zero fields take defaults.
type VMOptions struct {
	// Notice is the time from now to the interruption of an EC2 Spot VM
	// (at least the two-minute warning; the rebalance recommendation
	// comes at once), or to the start of the event raised.
	Notice time.Duration
	// Lasts is how long the event raised stays Started.
	Lasts time.Duration
}

// EvictWith is Evict with options. Only an EC2 Spot VM's interruption
// takes a Notice: its interruption notice appears two minutes before
// Notice ends (for hibernation, as it ends), and the rebalance
// recommendation at once. The default Notice is the two minutes.
func (e *Engine) EvictWith(ctx context.Context, name string, o VMOptions) (*forewarn.Event, error) {
	vm := e.vm(name)
	if vm == nil {
		return nil, forewarn.Errorf(forewarn.ENOTFOUND, "unknown VM %q", name)
	}
	if !vm.Evictable() {
		return nil, forewarn.Errorf(forewarn.EINVALID, "VM %q is not a Spot or preemptible VM", name)
	}
	if o.Notice != 0 && vm.Provider != forewarn.AWS {
		return nil, forewarn.Errorf(forewarn.EINVALID, "VM %q is %s; only an EC2 Spot interruption takes a notice", name, vm.Provider.AVM())
	}
	spec := Spec{Type: forewarn.Preempt, VMs: []string{name}, Source: forewarn.Platform, Notice: forewarn.Preempt.MinNotice(), Lasts: o.Lasts}
	switch vm.Provider {
	case forewarn.GCE:
		spec.Started, spec.Lasts = true, cmp.Or(o.Lasts, 30*time.Second)
	case forewarn.AWS:
		spec.Notice, spec.Lasts = cmp.Or(o.Notice, forewarn.SpotWarning), cmp.Or(o.Lasts, 30*time.Second)
		if spec.Notice < forewarn.SpotWarning && !e.allowShort {
			return nil, forewarn.Errorf(forewarn.EINVALID,
				"notice %s is below the two-minute Spot interruption warning (the server's --allow-short-notice lifts this)", spec.Notice)
		}
	}
	return e.create(ctx, spec, func() error {
		if v := e.View(name); v.Preempted || slices.ContainsFunc(v.Events, func(ev *forewarn.Event) bool {
			return ev.Type == forewarn.Preempt && v.Own(ev)
		}) {
			return forewarn.Errorf(forewarn.ECONFLICT, "VM %q is already being preempted", name)
		}
		return nil
	})
}

// arm sets or clears ev's next deadline; only the leader keeps
// deadlines. e.mu must be held.
func (e *Engine) arm(ev *forewarn.Event, now time.Time) {
	e.disarm(ev.ID)
	at, ok := ev.NextDeadline()
	if !ok || e.closed || !e.leading {
		return
	}
	e.armAt(ev.ID, at, now)
}

// deadline is an entry of the deadline heap: the event id was armed for
// at. It is stale when the event's deadline is no longer at (e.armed).
type deadline struct {
	at time.Time
	id string
}

// deadlineHeap orders deadlines, soonest first (container/heap).
type deadlineHeap []deadline

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h deadlineHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *deadlineHeap) Push(x any)        { *h = append(*h, x.(deadline)) }
func (h *deadlineHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// armAt arms the event id's deadline for at: notes it in the heap and
// wakes the engine sooner if it is the soonest. e.mu must be held.
func (e *Engine) armAt(id string, at, now time.Time) {
	e.armed[id] = at
	heap.Push(&e.deadlines, deadline{at: at, id: id})
	if len(e.deadlines) > 2*len(e.armed)+1024 {
		// Mostly stale entries: rebuild from the armed deadlines.
		e.deadlines = e.deadlines[:0]
		for id, at := range e.armed {
			e.deadlines = append(e.deadlines, deadline{at: at, id: id})
		}
		heap.Init(&e.deadlines)
	}
	e.wakeFor(now)
}

// wakeFor sets the one timer of the engine to fire at the soonest live
// deadline, dropping the stale entries before it. e.mu must be held.
func (e *Engine) wakeFor(now time.Time) {
	for len(e.deadlines) > 0 {
		d := e.deadlines[0]
		if at, ok := e.armed[d.id]; ok && at.Equal(d.at) {
			break
		}
		heap.Pop(&e.deadlines)
	}
	if len(e.deadlines) == 0 {
		return
	}
	at := e.deadlines[0].at
	switch {
	case e.wake == nil:
		e.wake = time.AfterFunc(at.Sub(now), e.fire)
	case e.wakeAt.IsZero() || at.Before(e.wakeAt):
		e.wake.Reset(at.Sub(now))
	default:
		return
	}
	e.wakeAt = at
}

// disarmAll clears every deadline. e.mu must be held.
func (e *Engine) disarmAll() {
	clear(e.armed)
	e.deadlines = nil
	if e.wake != nil {
		e.wake.Stop()
	}
	e.wakeAt = time.Time{}
}

// disarm clears the deadline of the event id; its heap entry goes
// stale. e.mu must be held.
func (e *Engine) disarm(id string) { delete(e.armed, id) }

// maxLoggedEvents is how many events one change logs a line each for;
// a larger change logs one line.
const maxLoggedEvents = 16

// fire applies, in one commit, every deadline due by now: deadlines due
// together (the events of one request, one per scope group, at their
// NotBefore) are one commit, not one each. The engine keeps one timer
// for its soonest deadline, not one per event.
func (e *Engine) fire() {
	unlock, err := e.lockWrites(context.Background())
	if err != nil {
		e.mu.Lock()
		if !e.closed && e.leading {
			e.wakeAt = time.Time{}
			e.wake.Reset(retryDelay)
		}
		e.mu.Unlock()
		return
	}
	defer unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.wakeAt = time.Time{}
	if e.closed || !e.leading {
		return
	}
	now := time.Now()
	var ids []string
	for len(e.deadlines) > 0 && !e.deadlines[0].at.After(now) {
		d := heap.Pop(&e.deadlines).(deadline)
		if at, ok := e.armed[d.id]; ok && at.Equal(d.at) {
			delete(e.armed, d.id)
			ids = append(ids, d.id)
		}
	}
	slices.Sort(ids)
	var changed []*forewarn.Event
	var cids []string
	for _, id := range ids {
		ev := e.events[id]
		if ev == nil {
			continue
		}
		if at, ok := ev.NextDeadline(); ok && !now.Before(at) {
			e.obs.DeadlineLag(now.Sub(at))
		}
		c := advance(ev, now, !e.watched(ev), e.gated(ev))
		if c == nil && e.gated(ev) && !now.Before(ev.NotBefore) {
			c = ev.Clone() // timed out: the scale set rule starts it
		}
		if c == nil {
			e.arm(ev, now)
			continue
		}
		changed = append(changed, c)
		cids = append(cids, id)
	}
	if len(changed) > 0 {
		if err := e.commitAs(context.Background(), now, changed, nil, e.fence); err != nil {
			delay := retryDelay
			if _, ok := stale(err); ok {
				// Another replica wrote first: its commit re-arms the
				// deadlines as it is applied; these are a backstop.
				delay = staleDelay
			} else {
				e.log.Error("apply deadline", "event", cids[0], "events", len(cids), "err", err)
			}
			for _, id := range cids {
				e.armAt(id, now.Add(delay), now)
			}
		} else if len(cids) > maxLoggedEvents {
			e.log.Info("events changed", "events", len(cids), "first", cids[0], "status", e.events[cids[0]].Status)
		} else {
			for _, id := range cids {
				e.log.Info("event changed", "event", id, "status", e.events[id].Status)
			}
		}
	}
	e.wakeFor(now)
}

// removes reports whether ev, once it ends (see ends), removes vm for
// good rather than stopping it: an Azure VM is deleted; a Compute Engine
// VM stopped; an EC2 VM terminated by a scale-in or by a Spot
// interruption whose action is terminate, and otherwise stopped.
func removes(ev *forewarn.Event, vm *forewarn.VM) bool {
	switch vm.Provider {
	case forewarn.Azure:
		return true
	case forewarn.AWS:
		return ev.Type == forewarn.Terminate || ev.Action == "terminate"
	}
	return false
}

// advance returns ev moved as far along its lifecycle as the time now and
// its approvals allow, or nil when nothing changes. A deadline start is
// dated at NotBefore and a deadline completion at the end of its impact,
// so state after a restart is the state the timers would have produced.
//
// A host maintenance event is warned of its Lead before NotBefore. A
// live migration whose VMs did not watch their maintenance-event key
// (skipWarning) gets no warning: it starts when the warning would have
// been given.
//
// A gated event (a scale set Terminate) never starts here: the scale set
// rule in settle (terminatesDue) starts it.
func advance(ev *forewarn.Event, now time.Time, skipWarning, gated bool) *forewarn.Event {
	var c *forewarn.Event
	if lead := ev.Lead(); ev.Status == forewarn.Scheduled && lead > 0 && ev.WarnedAt.IsZero() {
		// An event created with less notice than its lead is warned as
		// it is created: the warning cannot precede the event.
		warn := later(ev.NotBefore.Add(-lead), ev.Created)
		if now.Before(warn) && !ev.Approved() {
			return nil
		}
		c = ev.Clone()
		c.WarnedAt = warn
		if now.Before(warn) {
			// Approved before the warning was due: warned as it starts.
			c.WarnedAt = now.Round(0)
		}
		if skipWarning && ev.Type == forewarn.MigrateOnHostMaintenance && !now.Before(warn) {
			c.Status = forewarn.Started
			c.StartedAt = warn
			c.NotBefore = time.Time{}
		}
		ev = c
	}
	if ev.Status == forewarn.Scheduled && !gated {
		var at time.Time
		switch {
		case !now.Before(ev.NotBefore):
			at = ev.NotBefore
		case ev.Approved():
			at = now.Round(0)
		default:
			return c // warned, or nothing to do
		}
		if c == nil {
			c = ev.Clone()
		}
		c.Status = forewarn.Started
		c.StartedAt = at
		c.NotBefore = time.Time{}
		ev = c
	}
	if ev.Status == forewarn.Started && !now.Before(ev.EndsAt()) {
		if c == nil {
			c = ev.Clone()
		}
		c.Status = forewarn.Completed
		c.EndedAt = c.EndsAt()
	}
	return c
}

// sameDocument reports whether a and b render the same in a metadata
// document (approvals, for example, are not shown).
func sameDocument(a, b *forewarn.Event) bool {
	return a.Status == b.Status && a.Type == b.Type && a.NotBefore.Equal(b.NotBefore) && a.WarnedAt.Equal(b.WarnedAt) &&
		a.ResumedAt.Equal(b.ResumedAt) && a.Deadline.Equal(b.Deadline) && a.Action == b.Action &&
		a.Duration == b.Duration && a.Source == b.Source && a.Description == b.Description &&
		slices.Equal(a.Resources, b.Resources)
}

func sortEvents(evs []*forewarn.Event) {
	slices.SortFunc(evs, func(a, b *forewarn.Event) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// ceilSecond rounds t up to a whole second, so a rendered NotBefore never
// shortens the notice, and drops the monotonic reading.
func ceilSecond(t time.Time) time.Time {
	t = t.Round(0)
	if s := t.Truncate(time.Second); !s.Equal(t) {
		return s.Add(time.Second)
	}
	return t
}

// newID returns a random version-4 GUID in upper case, as real
// EventIds are.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%X-%X-%X-%X-%X", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}

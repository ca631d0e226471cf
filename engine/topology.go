package engine

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/forewarn/forewarn"
)

// savePeriod is how stale the stored LastSeen of a VM may get before a
// request writes it again.
const savePeriod = time.Hour

// scaleSetOf returns the scale set of ev's first Resource, or "".
func (e *Engine) scaleSetOf(ev *forewarn.Event) string {
	if len(ev.Resources) == 0 {
		return ""
	}
	if vm := e.vm(ev.Resources[0]); vm != nil {
		return vm.ScaleSet
	}
	return ""
}

// gated reports whether ev is a scale set Terminate, which the scale set
// rule (terminatesDue) starts rather than its own deadline alone.
func (e *Engine) gated(ev *forewarn.Event) bool {
	return ev.Type == forewarn.Terminate && e.scaleSetOf(ev) != ""
}

// ends reports whether ev removes its Resources from the fleet: a
// completed Preempt or Terminate. A Compute Engine VM is stopped rather
// than deleted.
func ends(ev *forewarn.Event) bool {
	return ev.Status == forewarn.Completed && (ev.Type == forewarn.Preempt || ev.Type == forewarn.Terminate) && ev.ResumedAt.IsZero()
}

// StartVM starts again a Compute Engine VM that a preemption stopped: its
// preempted key reads FALSE again and it is running. The stopping
// Preempt is kept, marked with when the VM resumed.
// Errors: ENOTFOUND for an unknown VM, EINVALID for an Azure VM (a
// preempted or terminated Azure VM is deleted, not stopped), ECONFLICT
// for a VM that is not stopped.
func (e *Engine) StartVM(ctx context.Context, name string) (info VMInfo, err error) {
	err = e.retry(ctx, func(ctx context.Context) error {
		info, err = e.startVM(ctx, name)
		return err
	})
	return info, err
}

func (e *Engine) startVM(ctx context.Context, name string) (VMInfo, error) {
	vm := e.vm(name)
	switch {
	case vm == nil:
		return VMInfo{}, forewarn.Errorf(forewarn.ENOTFOUND, "unknown VM %q", name)
	case vm.Provider == forewarn.Azure:
		return VMInfo{}, forewarn.Errorf(forewarn.EINVALID,
			"VM %q is an Azure VM; only a stopped Compute Engine or EC2 VM can be started (a preempted Azure VM is deleted)", name)
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return VMInfo{}, errClosed
	}
	v := e.View(name)
	if v.Deleted {
		e.mu.Unlock()
		return VMInfo{}, forewarn.Errorf(forewarn.ECONFLICT, "VM %q is terminated; it cannot be started", name)
	}
	if !v.Stopped {
		e.mu.Unlock()
		if v.Preempted {
			return VMInfo{}, forewarn.Errorf(forewarn.ECONFLICT, "VM %q is being preempted; start it once it is stopped", name)
		}
		return VMInfo{}, forewarn.Errorf(forewarn.ECONFLICT, "VM %q is running, not stopped", name)
	}
	now := time.Now()
	var changed []*forewarn.Event
	for ev := range e.eventsOf(name) {
		if ends(ev) {
			c := ev.Clone()
			c.ResumedAt = now.Round(0)
			changed = append(changed, c)
		}
	}
	err := e.commit(ctx, now, changed, nil)
	e.mu.Unlock()
	if err != nil {
		return VMInfo{}, err
	}
	e.log.Info("VM started", "vm", name)
	if info, ok := e.info(vm, now, map[**forewarn.VM]bool{}); ok {
		return info, nil
	}
	return VMInfo{}, forewarn.Errorf(forewarn.ENOTFOUND, "no VM named %q: it left the inventory", name)
}

// deleted reports whether the Azure VM named name is gone. e.mu must be
// held.
func (e *Engine) deleted(name string) bool {
	v := e.View(name)
	return v != nil && v.Deleted
}

// settle applies the rules one change sets off in other events, and
// returns changed with every event they touch. e.mu must be held.
//
//   - A VM deleted by a completed Preempt or Terminate leaves the
//     Resources of every other event; an event left with none is
//     canceled.
//   - The scale set rule (terminatesDue) starts a scale set's Terminates:
//     each at its NotBefore at the latest, an approved one earlier once
//     every other pending one is approved or timed out. It runs once per
//     scale set whose Terminates changed, after the other rules, so a
//     commit of k Terminates of one scale set costs one pass over its
//     pending ones, not k.
//   - When a wave's event ends, the wave's next update domain is
//     scheduled.
func (e *Engine) settle(now time.Time, changed []*forewarn.Event) []*forewarn.Event {
	ws := make(map[string]*forewarn.Event, len(changed))
	order := make([]string, 0, len(changed))
	put := func(c *forewarn.Event) {
		if _, ok := ws[c.ID]; !ok {
			order = append(order, c.ID)
		}
		ws[c.ID] = c
	}
	get := func(id string) *forewarn.Event {
		if c, ok := ws[id]; ok {
			return c
		}
		return e.events[id]
	}
	for _, c := range changed {
		put(c)
	}
	// dirty holds the scale sets whose Terminates changed (in sets, in
	// order), each with its new Scheduled Terminates, which e.terms does
	// not index yet.
	dirty := map[string][]string{}
	var sets []string
	for done := 0; ; done++ {
		if done == len(order) {
			// Nothing else to do: the scale set rule, once per scale set.
			// What it starts is processed in turn and marks its scale set
			// again; that second pass starts nothing more.
			for _, ss := range sets {
				for _, o := range terminatesDue(e.pendingTerms(ss, dirty[ss], get), now) {
					put(o)
				}
			}
			clear(dirty)
			sets = sets[:0]
			if done == len(order) {
				break
			}
		}
		c := ws[order[done]]
		old := e.events[c.ID]
		ended := !c.Status.Active() && c.Status != forewarn.Pending && (old == nil || old.Status.Active() || old.Status == forewarn.Pending)

		// Deletions: each other event of the deleted VMs is rewritten
		// once, whatever the number of its VMs deleted.
		if c.Status == forewarn.Completed && (c.Type == forewarn.Preempt || c.Type == forewarn.Terminate) && (old == nil || old.Status != forewarn.Completed) {
			gone := map[string]bool{}
			var others []string
			for _, name := range c.Resources {
				if vm := e.vm(name); vm == nil || !removes(c, vm) {
					continue
				}
				gone[name] = true
				for ev := range e.eventsOf(name) {
					others = append(others, ev.ID)
				}
			}
			slices.Sort(others)
			for _, id := range slices.Compact(others) {
				o := get(id)
				if o.ID == c.ID || !(o.Status.Active() || o.Status == forewarn.Pending) ||
					!slices.ContainsFunc(o.Resources, func(r string) bool { return gone[r] }) {
					continue
				}
				o = o.Clone()
				last := o.Resources[len(o.Resources)-1]
				o.Resources = slices.DeleteFunc(o.Resources, func(r string) bool { return gone[r] })
				if len(o.Resources) == 0 {
					o.Resources = []string{last} // keep the record readable
					o.Status, o.EndedAt = forewarn.Canceled, now.Round(0)
				}
				put(o)
			}
		}

		// The scale set rule, run again whenever one of its Terminates
		// changes (created, approved, timed out, ended): marked here, run
		// above once the queue is empty.
		if ss := e.scaleSetOf(c); c.Type == forewarn.Terminate && ss != "" {
			ids, ok := dirty[ss]
			if !ok {
				sets = append(sets, ss)
			}
			if _, known := e.terms[ss][c.ID]; !known && c.Status == forewarn.Scheduled {
				ids = append(ids, c.ID)
			}
			dirty[ss] = ids
		}

		// Waves.
		if c.Wave != "" && ended {
			// The next update domain's events (one per scope group) are
			// scheduled together once none of the wave's is active.
			busy := false
			var next []*forewarn.Event
			for id := range e.byWave[c.Wave] {
				o := get(id)
				busy = busy || o.Status.Active()
				if o.Status != forewarn.Pending {
					continue
				}
				switch {
				case len(next) == 0 || e.domainOf(o) < e.domainOf(next[0]):
					next = append(next[:0], o)
				case e.domainOf(o) == e.domainOf(next[0]):
					next = append(next, o)
				}
			}
			for _, o := range next {
				if busy {
					break
				}
				n := o.Clone()
				n.Status, n.NotBefore = forewarn.Scheduled, ceilSecond(now.Add(n.Notice))
				if e.unheard(n, now) {
					n.Status, n.StartedAt, n.NotBefore = forewarn.Started, now.Round(0), time.Time{}
				}
				put(n)
			}
		}
	}
	out := make([]*forewarn.Event, len(order))
	for i, id := range order {
		out[i] = ws[id]
	}
	return out
}

// pendingTerms returns the Scheduled Terminates of the scale set ss as
// get sees them: those e.terms indexes, and the new ones named in fresh.
func (e *Engine) pendingTerms(ss string, fresh []string, get func(string) *forewarn.Event) []*forewarn.Event {
	pending := make([]*forewarn.Event, 0, len(e.terms[ss])+len(fresh))
	for id := range e.terms[ss] {
		if o := get(id); o.Status == forewarn.Scheduled {
			pending = append(pending, o)
		}
	}
	slices.Sort(fresh)
	for _, id := range slices.Compact(fresh) {
		if o := get(id); o.Status == forewarn.Scheduled {
			pending = append(pending, o)
		}
	}
	return pending
}

// terminatesDue applies the scale set rule (seed 004) to the Scheduled
// Terminates of one scale set and returns those that start now, started:
//
//   - every Terminate starts at its own NotBefore at the latest, whatever
//     the others: "Once the timeout expires, the pending terminate event
//     will be processed and the VM will be deleted";
//   - before that, an approved Terminate starts only once no other
//     Terminate of the scale set is pending, neither approved nor timed
//     out, whatever their NotBefores: "VM_2 isn't deleted until the
//     terminate event for VM_1 is approved, or its timeout has elapsed".
//     So the approved ones start together, and deletes with one NotBefore
//     start all together or not at all before the timeout.
//
// A start at the timeout is dated at NotBefore, an early one at now. The
// cost is linear in pending, plus sorting those that start.
func terminatesDue(pending []*forewarn.Event, now time.Time) []*forewarn.Event {
	held := slices.ContainsFunc(pending, func(o *forewarn.Event) bool {
		return now.Before(o.NotBefore) && !o.Approved()
	})
	var due []*forewarn.Event
	for _, o := range pending {
		if !held || !now.Before(o.NotBefore) {
			due = append(due, o)
		}
	}
	slices.SortFunc(due, func(a, b *forewarn.Event) int {
		return cmp.Or(a.NotBefore.Compare(b.NotBefore), cmp.Compare(a.ID, b.ID))
	})
	out := make([]*forewarn.Event, len(due))
	for i, o := range due {
		at := now.Round(0)
		if !now.Before(o.NotBefore) {
			at = o.NotBefore
		}
		c := o.Clone()
		c.Status, c.StartedAt, c.NotBefore = forewarn.Started, at, time.Time{}
		out[i] = c
	}
	return out
}

// domainOf returns the update domain of ev's Resources.
func (e *Engine) domainOf(ev *forewarn.Event) int {
	if vm := e.vm(ev.Resources[0]); vm != nil {
		return vm.UpdateDomain
	}
	return 0
}

// NoteRequest records that the VM named name called its metadata API now
// and reports whether this call enabled its scheduled events (its first
// call, or its first after DisableAfter of silence). It is safe to call
// on every request: the store is written at most once an hour per VM, in
// the background.
func (e *Engine) NoteRequest(name string) (enabled bool) {
	m := e.member(name)
	if m == nil {
		return false
	}
	now := time.Now().UnixNano()
	prev := m.seen.Swap(now)
	enabled = prev == 0 || time.Duration(now-prev) >= e.disableAfter
	if enabled || time.Duration(now-m.saved.Load()) >= min(savePeriod, e.disableAfter/2) {
		select {
		case e.persist <- name:
		default: // a later request tries again
		}
	}
	return enabled
}

// enabled reports whether the VM named name has scheduled events enabled
// at now.
func (e *Engine) enabled(name string, now time.Time) bool {
	m := e.member(name)
	if m == nil {
		return false
	}
	ns := m.seen.Load()
	return ns != 0 && now.Sub(time.Unix(0, ns)) < e.disableAfter
}

// unheard reports whether ev is a Platform event on Azure VMs whose
// services all have scheduled events disabled: nobody listens, so it
// skips its notice. Enablement is per service (seeds 000 and 003: "for
// your service"; seed 004: "for your scale set"), see serviceEnabled.
// Each group is checked once (serviceEnabled's cache), so the cost is
// linear in the VMs involved.
func (e *Engine) unheard(ev *forewarn.Event, now time.Time) bool {
	if ev.Source != forewarn.Platform {
		return false
	}
	cache := map[**forewarn.VM]bool{}
	for _, name := range ev.Resources {
		vm := e.vm(name)
		if vm == nil || vm.Provider != forewarn.Azure || e.serviceEnabled(vm, now, cache) {
			return false
		}
	}
	return true
}

// serviceEnabled reports whether the service of vm has scheduled events
// enabled at now: whether one of its VMs called within the disable
// window. A VM's service is its availability set or cloud service, the
// VMs it shares a scope with; for a VM of a scale set it is the whole
// scale set, whatever its placement groups (seed 004: "enabled for your
// scale set"), within the VM's zone when the scale set spans zones
// (docs/wire-decisions.md); a standalone VM is its own. Enablement only
// keeps notice: which events a VM sees is still its scope's (inventory.peersOf).
// cache remembers the answer per group, keyed by the group's first slot,
// so that asking for every VM of the fleet stays linear.
func (e *Engine) serviceEnabled(vm *forewarn.VM, now time.Time, cache map[**forewarn.VM]bool) bool {
	groups, ok := e.cur().servicesOf(vm.Name)
	if !ok {
		groups = e.cur().peersOf(vm.Name)
	}
	for _, g := range groups {
		on, ok := cache[&g[0]]
		if !ok {
			on = slices.ContainsFunc(g, func(p *forewarn.VM) bool { return e.enabled(p.Name, now) })
			cache[&g[0]] = on
		}
		if on {
			return true
		}
	}
	return false
}

// persistLoop writes the LastSeen of VMs that NoteRequest hands it, the
// sightings NoteSighting notes and, clientSavePeriod after NoteClients,
// the client records the history has due, until Close. The VMs queued
// together are written in a few commits, so a fleet's calls after a
// restart are a few writes, not one per VM.
func (e *Engine) persistLoop() {
	defer close(e.stopped)
	var due <-chan time.Time // set while client records are due
	for {
		select {
		case <-e.stop:
			// What is still queued, and the client records that changed
			// since they were saved, are saved before the engine closes.
			e.saveSightings()
			e.saveClients(e.drain(""))
			e.saveClients(e.unsavedClients())
			return
		case name := <-e.persist:
			names := e.drain(name)
			e.saveSightings()
			e.saveClients(names)
		case <-due:
			due = nil
			names, more := e.dueClients()
			e.saveClients(names)
			if more {
				e.clientsDue.Store(true)
			}
		}
		if due == nil {
			// clientsLook is set before clientsDue is taken, so that
			// Unsaved never misses a record noted due.
			e.clientsLook.Store(true)
			if e.clientsDue.Swap(false) {
				due = time.After(clientSavePeriod)
			} else {
				e.clientsLook.Store(false)
			}
		}
	}
}

// maxSaveBatch bounds the VMs one LastSeen write carries.
const maxSaveBatch = 4096

// drain returns first (unless "") and the names queued behind it.
func (e *Engine) drain(first string) []string {
	var names []string
	if first != "" {
		names = append(names, first)
	}
	for len(names) < maxSaveBatch {
		select {
		case name := <-e.persist:
			names = append(names, name)
		default:
			return names
		}
	}
	return names
}

// saveSeen writes the VM records of the VMs named whose stored LastSeen
// is stale, whose maintenance-key read is new, or whose client record
// the history has to save. It runs only in
// persistLoop, which Close waits for, so it may write while the engine
// closes.
func (e *Engine) saveSeen(names []string) {
	if len(names) == 0 {
		return
	}
	ctx := context.Background()
	hist := e.historyRecords(names)
	var saved, savedQs map[string]int64
	var clients map[string][]byte
	err := e.retry(ctx, func(ctx context.Context) error {
		e.mu.Lock()
		defer e.mu.Unlock()
		recs := map[string]*forewarn.VMRecord{}
		saved, savedQs, clients = map[string]int64{}, map[string]int64{}, map[string][]byte{}
		for _, name := range names {
			m := e.member(name)
			if m == nil {
				continue // it left the inventory
			}
			ns, stored := m.seen.Load(), m.saved.Load()
			q, storedQ := m.queried.Load(), m.savedQ.Load()
			seenStale := ns != 0 && (stored == 0 || time.Duration(ns-stored) >= min(savePeriod, e.disableAfter/2))
			queryNew := q > storedQ && (storedQ == 0 || storedQ <= m.ended.Load())
			client, fromHistory := clientRecord(hist, name, m)
			if !seenStale && !queryNew && !fromHistory {
				continue
			}
			rec := &forewarn.VMRecord{Client: client}
			clients[name] = client
			if ns != 0 {
				rec.LastSeen = time.Unix(0, ns).UTC()
			}
			if q != 0 {
				rec.Queried = time.Unix(0, q).UTC()
			}
			recs[name] = rec
			saved[name] = ns
			savedQs[name] = q
		}
		if len(recs) == 0 {
			return nil
		}
		return e.commit(ctx, time.Now(), nil, recs)
	})
	if err != nil {
		e.log.Error("save last request time", "vms", len(names), "err", err)
		if r := e.clientRecords(); r != nil {
			for name := range hist {
				r.NotSaved(name) // saved later, or when the engine closes
			}
		}
		return
	}
	for name, ns := range saved {
		if m := e.member(name); m != nil {
			raise(&m.saved, ns)
			raise(&m.savedQ, savedQs[name])
			clientSaved(m, clients[name])
		}
	}
}

// WaveSpec describes a platform maintenance wave.
type WaveSpec struct {
	// Scope names an availability set, cloud service or scale set.
	Scope string
	// Type is Freeze, Reboot or Redeploy.
	Type forewarn.EventType
	// Notice is each domain's notice; 0 means the type's minimum.
	Notice time.Duration
	// Lasts is each domain's impact; 0 means the type's default.
	Lasts time.Duration
}

// Wave is a maintenance wave and its progress.
type Wave struct {
	ID    string             `json:"id"`
	Scope string             `json:"scope"`
	Type  forewarn.EventType `json:"type"`
	// Status is "running" until every domain's event has ended, then "done".
	Status  string       `json:"status"`
	Created time.Time    `json:"created"`
	Domains []WaveDomain `json:"domains"`
}

// WaveDomain is one update domain's step of a wave.
type WaveDomain struct {
	UpdateDomain int             `json:"updateDomain"`
	Event        string          `json:"event"`
	Status       forewarn.Status `json:"status"`
	VMs          []string        `json:"vms"`
}

// StartWave raises a platform maintenance wave over a scope: one event
// per update domain, in ascending order, each raised only once the
// previous one has completed.
// Errors: ENOTFOUND for an unknown scope, EINVALID for a bad type,
// notice or an ambiguous scope.
func (e *Engine) StartWave(ctx context.Context, s WaveSpec) (w *Wave, err error) {
	err = e.retry(ctx, func(ctx context.Context) error {
		w, err = e.startWave(ctx, s)
		return err
	})
	return w, err
}

func (e *Engine) startWave(ctx context.Context, s WaveSpec) (*Wave, error) {
	switch s.Type {
	case forewarn.Freeze, forewarn.Reboot, forewarn.Redeploy:
	default:
		return nil, forewarn.Errorf(forewarn.EINVALID, "a maintenance wave is Freeze, Reboot or Redeploy, not %q", s.Type)
	}
	_, vms, err := e.cur().fleetOf().Scope(s.Scope)
	if err != nil {
		return nil, err
	}
	notice := cmp.Or(s.Notice, s.Type.MinNotice())
	if err := e.checkNotice(s.Type, notice, false); err != nil {
		return nil, err
	}
	if s.Notice < 0 || s.Lasts < 0 {
		return nil, forewarn.Errorf(forewarn.EINVALID, "notice and lasts must not be negative")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, errClosed
	}
	domains := map[int][]string{}
	for _, vm := range vms {
		if vm.Provider == forewarn.Azure && !e.deleted(vm.Name) {
			domains[vm.UpdateDomain] = append(domains[vm.UpdateDomain], vm.Name)
		}
	}
	if len(domains) == 0 {
		return nil, forewarn.Errorf(forewarn.EINVALID, "scope %q has no Azure VMs left", s.Scope)
	}
	now := time.Now()
	wave := newID()
	var evs []*forewarn.Event
	for i, ud := range slices.Sorted(maps.Keys(domains)) {
		// A scope such as a scale set of several placement groups spans
		// several scope groups: each gets its own event of the domain.
		for _, names := range e.groupByScope(domains[ud]) {
			ev := &forewarn.Event{
				ID: newID(), Type: s.Type, Status: forewarn.Pending, Resources: names,
				Duration: -1, Source: forewarn.Platform, Wave: wave, Notice: notice,
				Description: fmt.Sprintf("Platform maintenance of %s, update domain %d", s.Scope, ud),
				Lasts:       cmp.Or(s.Lasts, s.Type.DefaultLasts()), Created: now.Round(0).Add(time.Duration(i)),
			}
			if i == 0 {
				ev.Status, ev.NotBefore = forewarn.Scheduled, ceilSecond(now.Add(notice))
				if e.unheard(ev, now) {
					ev.Status, ev.StartedAt, ev.NotBefore = forewarn.Started, now.Round(0), time.Time{}
				}
			}
			evs = append(evs, ev)
		}
	}
	if err := e.commit(ctx, now, evs, nil); err != nil {
		return nil, err
	}
	e.log.Info("maintenance wave started", "wave", wave, "scope", s.Scope, "type", s.Type, "domains", len(evs))
	return e.wave(wave), nil
}

// Waves returns every maintenance wave, oldest first.
func (e *Engine) Waves() []*Wave {
	e.mu.Lock()
	defer e.mu.Unlock()
	ids := map[string]time.Time{}
	for _, ev := range e.events {
		if ev.Wave != "" {
			if t, ok := ids[ev.Wave]; !ok || ev.Created.Before(t) {
				ids[ev.Wave] = ev.Created
			}
		}
	}
	var out []*Wave
	for id := range ids {
		out = append(out, e.wave(id))
	}
	slices.SortFunc(out, func(a, b *Wave) int { return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.ID, b.ID)) })
	return out
}

// wave assembles the wave id from its events. e.mu must be held.
func (e *Engine) wave(id string) *Wave {
	w := &Wave{ID: id, Status: "done"}
	var evs []*forewarn.Event
	for _, ev := range e.events {
		if ev.Wave == id {
			evs = append(evs, ev)
		}
	}
	slices.SortFunc(evs, func(a, b *forewarn.Event) int { return cmp.Compare(e.domainOf(a), e.domainOf(b)) })
	for i, ev := range evs {
		if i == 0 {
			w.Type, w.Created = ev.Type, ev.Created
			if vm := e.vm(ev.Resources[0]); vm != nil {
				w.Scope = cmp.Or(vm.AvailabilitySet, vm.CloudService, vm.ScaleSet)
			}
		}
		if ev.Status.Active() || ev.Status == forewarn.Pending {
			w.Status = "running"
		}
		w.Domains = append(w.Domains, WaveDomain{UpdateDomain: e.domainOf(ev), Event: ev.ID, Status: ev.Status, VMs: slices.Clone(ev.Resources)})
	}
	return w
}

// Delete deletes a scale set VM the way a scale-in does: a User Terminate
// with the scale set's notBeforeTimeout as notice; the VM is gone when it
// completes. A Spot VM, or one of a scale set whose Terminate
// notifications are off, gets no Terminate and is deleted at once.
// Errors: ENOTFOUND, EINVALID for a VM outside a scale set, ECONFLICT for
// one already deleted or being deleted.
func (e *Engine) Delete(ctx context.Context, name string) (*forewarn.Event, error) {
	return e.DeleteWith(ctx, name, VMOptions{})
}

// DefaultScaleInLasts is how long an EC2 Auto Scaling member takes to
// terminate after its group scales it in, when the operator says nothing.
const DefaultScaleInLasts = 2 * time.Minute

// DeleteWith is Delete with options. An EC2 Auto Scaling member is
// scaled in: a User Terminate that starts at once (its
// target-lifecycle-state reads Terminated) and completes, the VM gone,
// after Lasts (DefaultScaleInLasts). Notice applies to no delete.
func (e *Engine) DeleteWith(ctx context.Context, name string, o VMOptions) (*forewarn.Event, error) {
	vm := e.vm(name)
	switch {
	case vm == nil:
		return nil, forewarn.Errorf(forewarn.ENOTFOUND, "unknown VM %q", name)
	case o.Notice != 0:
		return nil, forewarn.Errorf(forewarn.EINVALID, "a delete takes no notice (a scale set's notice is its Terminate timeout)")
	case vm.Provider == forewarn.AWS && vm.AutoScalingGroup == "":
		return nil, forewarn.Errorf(forewarn.EINVALID, "VM %q is not in an Auto Scaling group; vm delete scales a group in", name)
	case vm.Provider == forewarn.AWS:
	case vm.ScaleSet == "":
		return nil, forewarn.Errorf(forewarn.EINVALID, "VM %q is not in a scale set; vm delete raises a scale set Terminate", name)
	}
	taken := func() error {
		if v := e.View(name); v.Deleted || slices.ContainsFunc(v.Events, func(ev *forewarn.Event) bool {
			return ev.Type == forewarn.Terminate && v.Own(ev)
		}) {
			return forewarn.Errorf(forewarn.ECONFLICT, "VM %q is already deleted or being deleted", name)
		}
		return nil
	}
	if vm.Provider == forewarn.AWS {
		return e.create(ctx, Spec{Type: forewarn.Terminate, VMs: []string{name}, Source: forewarn.User, Started: true,
			Lasts: cmp.Or(o.Lasts, DefaultScaleInLasts), Description: "Auto Scaling group " + vm.AutoScalingGroup + " scaled the instance in"}, taken)
	}
	settings := e.lockedScaleSetSettings(vm.ScaleSet)
	if vm.Spot || !settings.TerminateNotifications {
		var ev *forewarn.Event
		err := e.retry(ctx, func(ctx context.Context) (err error) {
			ev, err = e.deleteNow(ctx, vm)
			return err
		})
		return ev, err
	}
	return e.create(ctx, Spec{Type: forewarn.Terminate, VMs: []string{name}, Source: forewarn.User,
		Notice: settings.TerminateTimeout, Lasts: o.Lasts}, taken)
}

// deleteNow deletes the scale set VM vm at once, without a Terminate
// notice.
func (e *Engine) deleteNow(ctx context.Context, vm *forewarn.VM) (*forewarn.Event, error) {
	name := vm.Name
	e.mu.Lock()
	defer e.mu.Unlock()
	if v := e.View(name); v.Deleted || slices.ContainsFunc(v.Events, func(ev *forewarn.Event) bool {
		return ev.Type == forewarn.Terminate && v.Own(ev)
	}) {
		return nil, forewarn.Errorf(forewarn.ECONFLICT, "VM %q is already deleted or being deleted", name)
	}
	desc := "Spot VM deleted without a Terminate notice"
	if !vm.Spot {
		desc = "Deleted without a Terminate notice: the scale set's Terminate notifications are off"
	}
	now := time.Now().Round(0)
	ev := &forewarn.Event{ID: newID(), Type: forewarn.Terminate, Status: forewarn.Completed, Resources: []string{name},
		Duration: -1, Source: forewarn.User, Description: desc,
		Created: now, StartedAt: now, EndedAt: now}
	if err := e.commit(ctx, now, []*forewarn.Event{ev}, nil); err != nil {
		return nil, err
	}
	return ev.Clone(), nil
}

// DefaultDegradeNotice is the notice of a predicted hardware failure.
const DefaultDegradeNotice = 7 * 24 * time.Hour

// Degrade raises the Platform Redeploy of a predicted hardware failure,
// with 7 days of notice unless notice says otherwise.
// Errors: as Create.
func (e *Engine) Degrade(ctx context.Context, name string, notice time.Duration) (*forewarn.Event, error) {
	return e.Create(ctx, Spec{Type: forewarn.Redeploy, VMs: []string{name}, Source: forewarn.Platform,
		Notice:      cmp.Or(notice, DefaultDegradeNotice),
		Description: "Host hardware is predicted to fail; the VM will be redeployed to healthy hardware"})
}

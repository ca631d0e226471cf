package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/internal/cow"
)

// An engine is split in two. Every replica applies what is committed to
// the store, its own writes and those of the other replicas it follows,
// and serves its views from memory. One replica, the leader, also
// decides the transitions nobody asks for: it arms the deadline timers,
// fires them, and applies the deadlines missed while no leader ran. An
// engine on a store of one server (no forewarn.Cluster) is its own
// leader from the start, so it runs the same code.
//
// Every write is a compare-and-swap on the revision the engine last
// applied. When another replica wrote first, the write is refused
// (staleError); the operation waits until the engine has applied the
// newer commits and runs again from the new state, so it is neither lost
// nor applied twice.

// Bounds of the retry of a write another replica beat.
const (
	maxAttempts = 20
	// catchUpTimeout bounds the wait for the commits that beat a write.
	catchUpTimeout = 5 * time.Second
)

// staleError is a write refused because the store has moved past the
// revision it was computed against, or, for a leader's write, because
// the leadership it was fenced with is gone.
type staleError struct {
	rev int64 // the revision the write was computed against
	err error
}

func (s *staleError) Error() string { return s.err.Error() }
func (s *staleError) Unwrap() error { return s.err }

func stale(err error) (*staleError, bool) {
	var s *staleError
	ok := errors.As(err, &s)
	return s, ok
}

// write commits c against the engine's revision and moves the engine to
// the new one. e.mu and the write slot (lockWrites) must be held; e.mu is
// released while the store commits, so reads and the follow loop go on
// while a write waits for the store. Only the write slot's holder
// writes, so the engine's state can change meanwhile only by applying
// commits that came first (then this one fails) or this one itself.
// covered reports that the engine's state already holds the commit,
// applied or reloaded by the follow loop: the caller must not install
// it again.
func (e *Engine) write(ctx context.Context, c *forewarn.Change) (covered bool, err error) {
	c.Revision = e.rev
	e.mu.Unlock()
	start := time.Now()
	rev, err := e.store.Commit(ctx, c)
	took := time.Since(start)
	e.mu.Lock()
	e.obs.Commit(took)
	if err != nil && ctx.Err() != nil {
		err = e.timedOut(err)
	}
	if err != nil {
		if forewarn.ErrorCode(err) == forewarn.ECONFLICT {
			return false, &staleError{rev: c.Revision, err: forewarn.Errorf(forewarn.ECONFLICT,
				"another replica wrote first and this replica could not catch up: %s; try again", forewarn.ErrorMessage(err))}
		}
		return false, err
	}
	if e.rev >= rev {
		return true, nil
	}
	e.setRev(rev)
	return false, nil
}

// attempt runs op once in the write slot. With a WriteWait, the wait for
// the slot and op's write together get that long: a write queued behind
// one to a store that does not answer fails about when that one does.
func (e *Engine) attempt(ctx context.Context, op func(context.Context) error) error {
	if e.writeWait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.writeWait)
		defer cancel()
	}
	unlock, err := e.lockWrites(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	return op(ctx)
}

// timedOut turns a write that ran out of its WriteWait into EUNAVAILABLE.
func (e *Engine) timedOut(err error) error {
	if e.writeWait > 0 && errors.Is(err, context.DeadlineExceeded) && forewarn.ErrorCode(err) == forewarn.EINTERNAL {
		return forewarn.Errorf(forewarn.EUNAVAILABLE,
			"the store did not take this write within %s (etcd unavailable or slow); try again", e.writeWait)
	}
	return err
}

// lockWrites takes the engine's write slot: one write at a time is in
// flight to the store. It gives up when ctx ends.
func (e *Engine) lockWrites(ctx context.Context) (unlock func(), err error) {
	select {
	case e.wslot <- struct{}{}:
		return func() { <-e.wslot }, nil
	case <-ctx.Done():
		return nil, e.timedOut(ctx.Err())
	}
}

// setRev records that the engine has applied revision rev and wakes the
// operations waiting for it. e.mu must be held.
func (e *Engine) setRev(rev int64) {
	e.rev = rev
	close(e.advanced)
	e.advanced = make(chan struct{})
}

// Revision returns the newest store revision the engine has applied.
func (e *Engine) Revision() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rev
}

// Advanced returns a channel that is closed once the engine applies a
// store revision newer than the one it holds now: any committed change,
// including those (an approval that starts nothing, a wave's Pending
// events) that change no VM's document and so publish no view to
// Subscribe. Take the channel before reading the state it guards.
func (e *Engine) Advanced() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.advanced
}

// Leading reports whether the engine leads: it alone fires deadlines.
func (e *Engine) Leading() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leading
}

// retry runs op, and runs it again, once the engine has caught up, while
// another replica's commit beats its write.
func (e *Engine) retry(ctx context.Context, op func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		err := e.attempt(ctx, op)
		s, ok := stale(err)
		if !ok || attempt == maxAttempts {
			return err
		}
		if err := e.awaitPast(ctx, s.rev); err != nil {
			return err
		}
	}
}

// awaitPast waits until the engine has applied a revision after rev.
func (e *Engine) awaitPast(ctx context.Context, rev int64) error {
	t := time.NewTimer(catchUpTimeout)
	defer t.Stop()
	for {
		e.mu.Lock()
		cur, ch, closed := e.rev, e.advanced, e.closed
		e.mu.Unlock()
		switch {
		case closed:
			return errClosed
		case cur > rev:
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return forewarn.Errorf(forewarn.EUNAVAILABLE,
				"this replica is behind the store (at revision %d) and did not catch up within %s; try again", cur, catchUpTimeout)
		}
	}
}

// apply installs a commit another replica (or this one) made, and
// publishes the views it changes. It reports false when the commit does
// not follow the engine's revision: commits were missed, and the engine
// must reload.
func (e *Engine) apply(u *forewarn.Update) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || u.Revision <= e.rev {
		return true // closing, or this replica's own write
	}
	c := u.Change
	if c.Revision != e.rev {
		return false
	}
	touched := e.touchedBy(c.Events)
	e.noteTransitions(u.Revision, time.Now(), c.Events, c.Sessions)
	var gone []*forewarn.VM
	var regroup []string
	if len(c.Inventory) > 0 || len(c.InventorySets) > 0 {
		var moved map[string]bool
		gone, moved, regroup = e.applyInventory(u.Revision, c.Inventory, c.InventorySets, c.Events)
		for name := range moved {
			touched[name] = true
		}
	}
	for _, id := range c.Deletes {
		if old := e.events[id]; old != nil {
			if old.Status.Active() {
				e.audience(old, touched)
			}
			e.uninstall(old)
			e.count(old, -1)
			delete(e.events, id)
			delete(e.sightings, id)
			e.disarm(id)
		}
	}
	for _, ev := range c.Events {
		e.install(ev)
	}
	e.installSightings(c.Sightings, false)
	e.reattach(regroup)
	for name, n := range c.Incarnations {
		if n > e.inc[name] {
			e.inc[name] = n
			touched[name] = true
		}
	}
	for name, r := range c.ScaleSets {
		e.setOverrides[name] = *r
	}
	e.installSessions(c.Sessions)
	e.noteRecords(c.VMs)
	if c.SigningKeys != nil {
		e.keys.Store(c.SigningKeys)
	}
	e.setRev(u.Revision)
	e.publish(touched)
	e.retire(gone)
	now := time.Now()
	for _, ev := range c.Events {
		e.arm(ev, now)
	}
	return true
}

// noteRecords takes in the VM records of a commit: when each VM last
// called, as any replica saw it. e.mu must be held.
func (e *Engine) noteRecords(vms map[string]*forewarn.VMRecord) {
	for name, r := range vms {
		m := e.member(name)
		if m == nil {
			continue
		}
		if !r.LastSeen.IsZero() {
			ns := r.LastSeen.UnixNano()
			raise(&m.seen, ns)
			raise(&m.saved, ns)
		}
		if !r.Queried.IsZero() {
			ns := r.Queried.UnixNano()
			raise(&m.queried, ns)
			raise(&m.savedQ, ns)
		}
		clientSaved(m, r.Client)
	}
}

// raise sets a to n unless it holds more.
func raise(a *atomic.Int64, n int64) {
	for {
		cur := a.Load()
		if cur >= n || a.CompareAndSwap(cur, n) {
			return
		}
	}
}

// publish rebuilds the views of the VMs named in touched, replaces them
// and hands them to the subscribers. e.mu must be held.
func (e *Engine) publish(touched map[string]bool) {
	vs := make([]*View, 0, len(touched))
	for name := range touched {
		vm := e.vm(name)
		m := e.member(name)
		if vm == nil || m == nil {
			continue
		}
		v := e.buildView(vm)
		if old := m.view.Swap(v); old != nil {
			old.replaced()
		}
		vs = append(vs, v)
	}
	if len(vs) == 0 {
		return
	}
	for _, fn := range e.subs {
		fn(vs)
	}
}

// reset replaces everything the engine holds with the state st: at
// start, and when a replica missed commits. Every view is rebuilt and
// published; a leader re-arms every timer. e.mu must be held.
func (e *Engine) reset(st *forewarn.State) {
	e.disarmAll()
	e.events = make(map[string]*forewarn.Event, len(st.Events))
	clear(e.counts)
	e.byVM = make(map[string]evSet)
	e.byWave = make(map[string]map[string]*forewarn.Event)
	e.byGroup = make(map[**forewarn.VM]map[string]*forewarn.Event)
	e.terms = make(map[string]map[string]*forewarn.Event)
	clear(e.setOverrides)
	for name, r := range st.ScaleSets {
		e.setOverrides[name] = *r
	}
	e.sessions = make(map[string]*forewarn.Session, len(st.Sessions))
	e.newest = make(map[string]hostIn)
	e.installSessions(st.Sessions)
	// The inventory first: the events are indexed by its scope groups.
	inv := e.cur()
	next := buildInventory(st.InventoryRevision, st.Inventory, st.InventorySets)
	var gone []*forewarn.VM
	for _, vm := range inv.fleetOf().VMs {
		if next.def(vm.Name) == nil {
			gone = append(gone, vm)
		}
	}
	var adds []cow.Entry[string, *member]
	for _, vm := range next.fleetOf().VMs {
		if e.member(vm.Name) == nil {
			adds = append(adds, cow.Entry[string, *member]{Key: vm.Name, Value: &member{}})
		}
	}
	e.members.Apply(adds)
	e.inv.Store(next.inForce())
	for _, ev := range st.Events {
		e.install(ev)
	}
	e.installSightings(st.Sightings, true)
	// Never backwards on this replica, whatever the store says, and kept
	// for VMs that left the inventory, should they come back.
	for name, n := range st.Incarnations {
		e.inc[name] = max(e.inc[name], n)
	}
	touched := make(map[string]bool, len(next.fleetOf().VMs))
	for _, vm := range next.fleetOf().VMs {
		touched[vm.Name] = true
	}
	e.noteRecords(st.VMs)
	if st.SigningKeys != nil {
		e.keys.Store(st.SigningKeys)
	}
	e.setRev(st.Revision)
	e.noteReload(st.Revision)
	e.publish(touched)
	e.retire(gone)
	now := time.Now()
	for _, ev := range e.events {
		e.arm(ev, now)
	}
}

// reload loads the whole state again and resets the engine to it.
func (e *Engine) reload(ctx context.Context) error {
	st, err := e.store.Load(ctx)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errClosed
	}
	if st.Revision <= e.rev {
		// Not newer than what the engine holds: it applied every commit
		// up to its revision, so it holds this state already, and a
		// reset would tell the transition subscribers that commits were
		// skipped (a replica taking the lead would reset every watch
		// stream on it).
		return nil
	}
	e.reset(st)
	return nil
}

// followLoop applies every commit the store delivers, reloading when
// commits were lost, until Close.
// New starts the first follow, so the store's follower exists once New
// returns.
func (e *Engine) followLoop(ch <-chan *forewarn.Update, cancel context.CancelFunc) {
	defer e.loops.Done()
	for e.ctx.Err() == nil {
		if ch == nil {
			var ctx context.Context
			ctx, cancel = context.WithCancel(e.ctx)
			ch = e.store.Follow(ctx, e.Revision())
		}
		reload := false
		for u := range ch {
			if u.Reload || !e.apply(u) {
				reload = true
				break
			}
		}
		cancel()
		ch = nil
		if e.ctx.Err() != nil {
			return
		}
		if reload {
			if err := e.reload(e.ctx); err == nil {
				e.log.Info("reloaded the store's state", "revision", e.Revision())
				continue
			} else {
				e.log.Warn("reload the store's state", "err", err)
			}
		}
		// The store ended the stream (unreachable, or closing): try again.
		select {
		case <-e.ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// campaignLoop campaigns for the lead, leads until the leadership is
// lost, and campaigns again, until Close.
func (e *Engine) campaignLoop() {
	defer e.loops.Done()
	for e.ctx.Err() == nil {
		term, err := e.cluster.Campaign(e.ctx, e.replica)
		if err != nil {
			if e.ctx.Err() == nil {
				e.log.Warn("campaign for the lead", "err", err)
				sleep(e.ctx, time.Second)
			}
			continue
		}
		if err := e.lead(term); err != nil {
			e.log.Warn("take the lead", "err", err)
			e.unlead()
			resign(term)
			sleep(e.ctx, time.Second)
			continue
		}
		e.log.Info("leading: this replica fires the deadlines", "replica", e.replica, "revision", e.Revision())
		select {
		case <-term.Done():
			e.unlead()
			e.log.Warn("lost the lead", "replica", e.replica)
		case <-e.ctx.Done():
			e.unlead()
			resign(term)
			return
		}
	}
}

func resign(term forewarn.Term) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = term.Resign(ctx)
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// lead takes the lead for term: it catches up with the store, applies
// the deadlines that passed while no leader ran, and arms every timer.
func (e *Engine) lead(term forewarn.Term) error {
	for attempt := 1; ; attempt++ {
		if err := e.reload(e.ctx); err != nil {
			return err
		}
		unlock, err := e.lockWrites(e.ctx)
		if err != nil {
			return err
		}
		e.mu.Lock()
		err = e.takeLead(e.ctx, term.Fence())
		e.mu.Unlock()
		unlock()
		if _, ok := stale(err); !ok || attempt == maxAttempts {
			return err
		}
	}
}

// unlead gives up the leader's duties: every timer stops.
func (e *Engine) unlead() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.leading, e.fence = false, ""
	e.disarmAll()
}

// takeLead makes the engine the leader with the given fence: it applies
// every deadline that passed while no leader ran and arms the timers of
// the rest. e.mu must be held.
func (e *Engine) takeLead(ctx context.Context, fence string) error {
	e.leading, e.fence = true, fence
	now := time.Now()
	var due []*forewarn.Event
	for _, ev := range e.events {
		// Whether a VM watched its key before the stop is not known, so
		// missed warnings are given rather than skipped.
		if c := advance(ev, now, false, e.gated(ev)); c != nil {
			due = append(due, c)
		}
	}
	// Scale set Terminates that timed out while stopped are settled too.
	for _, ev := range e.events {
		if ev.Status == forewarn.Scheduled && e.gated(ev) && !now.Before(ev.NotBefore) {
			due = append(due, ev.Clone())
		}
	}
	if len(due) > 0 {
		if err := e.commitAs(ctx, now, due, nil, e.fence); err != nil {
			e.leading, e.fence = false, ""
			return fmt.Errorf("apply missed deadlines: %w", err)
		}
		e.log.Info("applied deadlines missed while no leader ran", "events", len(due))
	}
	for _, ev := range e.events {
		e.arm(ev, now)
	}
	select {
	case e.led <- struct{}{}:
	default: // the session loop has a wake-up waiting already
	}
	return nil
}

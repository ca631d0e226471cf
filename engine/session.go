package engine

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/forewarn/forewarn"
)

// Maintenance sessions (forewarn.Session): the leader steps every
// session whenever the store moves and at the session's own times (the
// end of a Delay, a window opening, a reply timeout), and writes each
// step in one commit with the events it makes or ends, fenced by its
// leadership. A host is started in the same commit that makes its
// events, so a new leader after a crash finds either both or neither:
// no host is started twice.

// installSessions takes in committed sessions; a nil one is removed.
// It keeps e.newest: each host's newest session, the last that
// sessionOrder puts first.
// e.mu must be held.
func (e *Engine) installSessions(sessions map[string]*forewarn.Session) {
	var stale []*forewarn.Session // removed, or moved in time
	for id, s := range sessions {
		old := e.sessions[id]
		if s == nil {
			delete(e.sessions, id)
			if old != nil {
				stale = append(stale, old)
			}
			continue
		}
		e.sessions[id] = s
		if old != nil && !old.Created.Equal(s.Created) {
			stale = append(stale, old)
		}
		for i := range s.Hosts {
			e.indexHost(s, i)
		}
	}
	if len(stale) == 0 {
		return
	}
	// The hosts of a session that went, or moved in time, may have an
	// older newest session: one pass over the sessions finds it.
	hosts := make(map[string]bool)
	for _, s := range stale {
		for _, h := range s.Hosts {
			if at, ok := e.newest[h.Name]; ok && at.s.ID == s.ID {
				hosts[h.Name] = true
				delete(e.newest, h.Name)
			}
		}
	}
	for _, s := range e.sessions {
		for i, h := range s.Hosts {
			if hosts[h.Name] {
				e.indexHost(s, i)
			}
		}
	}
}

// hostIn is a host's place in a session: s.Hosts[i]. A session's hosts
// are set when it is created, so i holds in each of its versions.
type hostIn struct {
	s *forewarn.Session
	i int
}

// indexHost makes s the newest session of its host i if it is newer than
// the one indexed, or a new version of it. e.mu must be held.
func (e *Engine) indexHost(s *forewarn.Session, i int) {
	name := s.Hosts[i].Name
	if at, ok := e.newest[name]; ok && at.s.ID != s.ID && sessionOrder(s, at.s) < 0 {
		return
	}
	e.newest[name] = hostIn{s, i}
}

// Sessions returns copies of every session, oldest first.
func (e *Engine) Sessions() []*forewarn.Session {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*forewarn.Session, 0, len(e.sessions))
	for _, s := range e.sessions {
		out = append(out, s.Clone())
	}
	slices.SortFunc(out, sessionOrder)
	return out
}

// sessionOrder orders sessions oldest first: by Created, then by ID.
func sessionOrder(a, b *forewarn.Session) int {
	return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.ID, b.ID))
}

// Session returns a copy of the session id. Errors: ENOTFOUND.
func (e *Engine) Session(id string) (*forewarn.Session, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, err := e.lookupSession(id)
	if err != nil {
		return nil, err
	}
	return s.Clone(), nil
}

func (e *Engine) lookupSession(id string) (*forewarn.Session, error) {
	if s, ok := e.sessions[id]; ok {
		return s, nil
	}
	if s, ok := e.sessions[strings.ToUpper(id)]; ok {
		return s, nil
	}
	return nil, forewarn.Errorf(forewarn.ENOTFOUND, "no session %q", id)
}

// HostStatus is where a host is in the newest session that names it.
type HostStatus struct {
	Session string             `json:"session,omitempty"`
	State   forewarn.HostState `json:"state,omitempty"`
	Reason  string             `json:"reason,omitempty"`
	// SessionState is the state of that session.
	SessionState forewarn.SessionState `json:"sessionState,omitempty"`
}

// HostStatus returns where the host name is in the newest session that
// names it; the zero HostStatus when none does. It costs a look-up.
func (e *Engine) HostStatus(name string) HostStatus {
	e.mu.Lock()
	defer e.mu.Unlock()
	if at, ok := e.newest[name]; ok {
		return at.status()
	}
	return HostStatus{}
}

// HostStatuses returns HostStatus for every host a session names.
func (e *Engine) HostStatuses() map[string]HostStatus {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]HostStatus, len(e.newest))
	for name, at := range e.newest {
		out[name] = at.status()
	}
	return out
}

// status is where the host is in the session.
func (at hostIn) status() HostStatus {
	h := &at.s.Hosts[at.i]
	return HostStatus{Session: at.s.ID, State: h.State, Reason: h.Reason, SessionState: at.s.State}
}

// checkSession validates spec against the fleet: the names, limits
// and windows, and that no host alone holds more of a group than its
// budget allows (the session could never start it).
func (e *Engine) checkSession(spec *forewarn.SessionSpec) error {
	if len(spec.Hosts) == 0 {
		return forewarn.Errorf(forewarn.EINVALID, "a session needs at least one host")
	}
	vmsOf := make(map[string][]string, len(spec.Hosts))
	for _, h := range spec.Hosts {
		if _, ok := vmsOf[h]; ok {
			return forewarn.Errorf(forewarn.EINVALID, "host %q is named twice", h)
		}
		names, ok := e.HostVMs(h)
		if !ok {
			return forewarn.Errorf(forewarn.ENOTFOUND, "no VM is on host %q", h)
		}
		vmsOf[h] = names
	}
	if spec.MaxHosts < 0 {
		return forewarn.Errorf(forewarn.EINVALID, "max hosts %d is negative", spec.MaxHosts)
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{{"delay", spec.Delay}, {"notice", spec.Notice}, {"reply timeout", spec.ReplyTimeout}} {
		if d.d < 0 {
			return forewarn.Errorf(forewarn.EINVALID, "%s %s is negative", d.name, d.d)
		}
	}
	if len(spec.Description) > MaxDescription {
		return forewarn.Errorf(forewarn.EINVALID, "description is %d bytes; at most %d", len(spec.Description), MaxDescription)
	}
	action, err := sessionAction(spec.Action)
	if err != nil {
		return err
	}
	for kind, b := range spec.MaxUnavailable {
		if !slices.Contains(forewarn.GroupKinds, kind) {
			return forewarn.Errorf(forewarn.EINVALID, "max unavailable: unknown group kind %q (want one of %s)", kind, strings.Join(forewarn.GroupKinds, ", "))
		}
		switch {
		case b.Count < 0 || b.Percent < 0 || b.Percent > 100 || (b.Count > 0) == (b.Percent > 0):
			return forewarn.Errorf(forewarn.EINVALID, "max unavailable per %s: give a count of at least 1 or a percent from 1 to 100", kind)
		}
	}
	if _, err := parseWindows(spec.Windows); err != nil {
		return err
	}
	if len(spec.Webhooks) > forewarn.MaxWebhooks {
		return forewarn.Errorf(forewarn.EINVALID, "%d webhooks; a session names at most %d", len(spec.Webhooks), forewarn.MaxWebhooks)
	}
	for _, u := range spec.Webhooks {
		if err := forewarn.ValidWebhookURL(u); err != nil {
			return err
		}
	}
	// Each type's minimum notice, for the types the hosts' VMs get.
	types := make(map[forewarn.EventType]bool)
	for _, names := range vmsOf {
		for _, name := range names {
			if vm := e.vm(name); vm != nil {
				types[hostEventType(vm, action)] = true
			}
		}
	}
	for _, t := range slices.Sorted(maps.Keys(types)) {
		if err := e.checkNotice(t, cmp.Or(spec.Notice, t.MinNotice()), false); err != nil {
			return err
		}
	}
	sizes := e.groupSizes(spec)
	for _, h := range spec.Hosts {
		if g, n, limit, over := e.overBudget(spec, vmsOf[h], nil, sizes); over {
			return forewarn.Errorf(forewarn.EINVALID, "host %q alone holds %d VMs of %s, over its budget of %d: the session could never start it", h, n, g, limit)
		}
	}
	return nil
}

// sessionAction returns the Azure event type of a session's action.
func sessionAction(a string) (forewarn.EventType, error) {
	switch strings.ToLower(a) {
	case "", "reboot":
		return forewarn.Reboot, nil
	case "redeploy":
		return forewarn.Redeploy, nil
	case "freeze":
		return forewarn.Freeze, nil
	}
	return "", forewarn.Errorf(forewarn.EINVALID, "action %q: want Freeze, Reboot or Redeploy", a)
}

// hostEventType is the event vm gets for its host's maintenance: the
// Azure action's, its onHostMaintenance's on Compute Engine, and on EC2
// system-reboot for a reboot, system-maintenance otherwise.
func hostEventType(vm *forewarn.VM, action forewarn.EventType) forewarn.EventType {
	switch vm.Provider {
	case forewarn.GCE:
		if vm.MigrateAllowed() {
			return forewarn.MigrateOnHostMaintenance
		}
		return forewarn.TerminateOnHostMaintenance
	case forewarn.AWS:
		if action == forewarn.Reboot {
			return forewarn.SystemReboot
		}
		return forewarn.SystemMaintenance
	}
	return action
}

// CreateSession validates spec and creates its session, Running; the
// leader starts its first hosts at its next step.
// Errors: EINVALID, ENOTFOUND for a host with no VM, ECONFLICT for a
// host under way in another session.
func (e *Engine) CreateSession(ctx context.Context, spec forewarn.SessionSpec) (s *forewarn.Session, err error) {
	spec = (&forewarn.Session{Spec: spec}).Clone().Spec
	if err := e.checkSession(&spec); err != nil {
		return nil, err
	}
	err = e.retry(ctx, func(ctx context.Context) error {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.closed {
			return errClosed
		}
		busy := make(map[string]string)
		for _, o := range e.sessions {
			for _, h := range o.Hosts {
				// A Pending host is free once its session has ended.
				if !h.State.Ended() && (h.State != forewarn.HostPending || !o.State.Ended()) {
					busy[h.Name] = o.ID
				}
			}
		}
		for _, h := range spec.Hosts {
			if id, ok := busy[h]; ok {
				return forewarn.Errorf(forewarn.ECONFLICT, "host %q is in session %s, not ended; cancel that session or wait for it", h, id)
			}
		}
		now := time.Now()
		s = &forewarn.Session{ID: newID(), Spec: spec, State: forewarn.SessionRunning, Created: now.Round(0), Updated: now.Round(0)}
		for _, h := range spec.Hosts {
			s.Hosts = append(s.Hosts, forewarn.SessionHost{Name: h, State: forewarn.HostPending})
		}
		return e.commitWith(ctx, now, nil, nil, map[string]*forewarn.Session{s.ID: s}, "")
	})
	if err != nil {
		return nil, err
	}
	e.log.Info("session created", "session", s.ID, "hosts", len(s.Hosts))
	return s.Clone(), nil
}

// PauseSession stops a Running session from starting hosts.
// Errors: ENOTFOUND, ECONFLICT when it is not Running.
func (e *Engine) PauseSession(ctx context.Context, id string) error {
	return e.changeSession(ctx, id, func(s *forewarn.Session, now time.Time) ([]*forewarn.Event, error) {
		if s.State != forewarn.SessionRunning {
			return nil, forewarn.Errorf(forewarn.ECONFLICT, "session %s is %s, not Running", s.ID, s.State)
		}
		s.State = forewarn.SessionPaused
		return nil, nil
	})
}

// ResumeSession lets a Paused session start hosts again, where it
// stopped. Errors: ENOTFOUND, ECONFLICT when it is not Paused.
func (e *Engine) ResumeSession(ctx context.Context, id string) error {
	return e.changeSession(ctx, id, func(s *forewarn.Session, now time.Time) ([]*forewarn.Event, error) {
		if s.State != forewarn.SessionPaused {
			return nil, forewarn.Errorf(forewarn.ECONFLICT, "session %s is %s, not Paused", s.ID, s.State)
		}
		s.State, s.Reason = forewarn.SessionRunning, ""
		return nil, nil
	})
}

// CancelSession ends a session: it starts no more hosts, and the events
// it made that have not Started are cancelled. A host none of whose
// events Started is Pending again; one some of whose events Started is
// InMaintenance, to be ended with HostDone or HostFail.
// Errors: ENOTFOUND, ECONFLICT when it is Cancelled or Done.
func (e *Engine) CancelSession(ctx context.Context, id string) error {
	return e.changeSession(ctx, id, func(s *forewarn.Session, now time.Time) ([]*forewarn.Event, error) {
		if s.State.Ended() {
			return nil, forewarn.Errorf(forewarn.ECONFLICT, "session %s is %s already", s.ID, s.State)
		}
		s.State = forewarn.SessionCancelled
		var changed []*forewarn.Event
		for i := range s.Hosts {
			h := &s.Hosts[i]
			if h.State != forewarn.HostNotifying {
				continue
			}
			cancelled, started := e.endEvents(h, now, false)
			changed = append(changed, cancelled...)
			if started == 0 {
				h.State, h.Events, h.VMs, h.Started = forewarn.HostPending, nil, nil, time.Time{}
				continue
			}
			h.State, h.ReadyAt = forewarn.HostInMaintenance, now.Round(0)
		}
		return changed, nil
	})
}

// HostDone ends the maintenance of host, InMaintenance in its session:
// its VMs' events complete, and the session may start the next host.
// Errors: ENOTFOUND for a host in no session, ECONFLICT for one not
// InMaintenance.
func (e *Engine) HostDone(ctx context.Context, host string) error {
	return e.endHost(ctx, host, forewarn.HostDone, "")
}

// HostFail ends the maintenance of host, under way in its session, as
// failed for reason: its events that Started complete, the others are
// cancelled, and a Running session pauses.
// Errors: EINVALID without a reason, ENOTFOUND, ECONFLICT for a host
// not under way.
func (e *Engine) HostFail(ctx context.Context, host, reason string) error {
	if strings.TrimSpace(reason) == "" {
		return forewarn.Errorf(forewarn.EINVALID, "give a reason for the failure")
	}
	if len(reason) > MaxDescription {
		return forewarn.Errorf(forewarn.EINVALID, "reason is %d bytes; at most %d", len(reason), MaxDescription)
	}
	return e.endHost(ctx, host, forewarn.HostFailed, reason)
}

func (e *Engine) endHost(ctx context.Context, host string, to forewarn.HostState, reason string) error {
	id := e.HostStatus(host).Session
	if id == "" {
		return forewarn.Errorf(forewarn.ENOTFOUND, "host %q is in no session", host)
	}
	return e.changeSession(ctx, id, func(s *forewarn.Session, now time.Time) ([]*forewarn.Event, error) {
		i := slices.IndexFunc(s.Hosts, func(h forewarn.SessionHost) bool { return h.Name == host })
		h := &s.Hosts[i]
		switch {
		case to == forewarn.HostDone && h.State != forewarn.HostInMaintenance:
			return nil, forewarn.Errorf(forewarn.ECONFLICT, "host %q is %s in session %s, not InMaintenance", host, h.State, s.ID)
		case to == forewarn.HostFailed && h.State != forewarn.HostInMaintenance && h.State != forewarn.HostNotifying:
			return nil, forewarn.Errorf(forewarn.ECONFLICT, "host %q is %s in session %s, not under way", host, h.State, s.ID)
		}
		changed, _ := e.endEvents(h, now, true)
		e.endHostIn(s, h, to, reason, now)
		return changed, nil
	})
}

// endHostIn records that h of s ended in state to. e.mu must be held.
func (e *Engine) endHostIn(s *forewarn.Session, h *forewarn.SessionHost, to forewarn.HostState, reason string, now time.Time) {
	h.State, h.Reason, h.Ended = to, reason, now.Round(0)
	h.VMCount, h.EventCount = h.NumVMs(), h.NumEvents()
	h.VMs, h.Events = nil, nil
	s.LastEnded = now.Round(0)
	if to == forewarn.HostFailed && s.State == forewarn.SessionRunning {
		s.State, s.Reason = forewarn.SessionPaused, fmt.Sprintf("host %s failed: %s", h.Name, reason)
	}
}

// endEvents cancels h's events that have not Started and, with
// complete, completes those that have. It returns the changed events
// and how many had Started. e.mu must be held.
func (e *Engine) endEvents(h *forewarn.SessionHost, now time.Time, complete bool) ([]*forewarn.Event, int) {
	var changed []*forewarn.Event
	started := 0
	for _, id := range h.Events {
		ev := e.events[id]
		if ev == nil {
			continue
		}
		switch ev.Status {
		case forewarn.Scheduled, forewarn.Pending:
			c := ev.Clone()
			end(c, forewarn.Canceled, now)
			changed = append(changed, c)
		case forewarn.Started:
			started++
			if complete {
				c := ev.Clone()
				end(c, forewarn.Completed, now)
				changed = append(changed, c)
			}
		}
	}
	return changed, started
}

// changeSession applies f to a copy of the session id and commits it
// with the events f returns.
func (e *Engine) changeSession(ctx context.Context, id string, f func(*forewarn.Session, time.Time) ([]*forewarn.Event, error)) error {
	return e.retry(ctx, func(ctx context.Context) error {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.closed {
			return errClosed
		}
		s, err := e.lookupSession(id)
		if err != nil {
			return err
		}
		c := s.Clone()
		now := time.Now()
		changed, err := f(c, now)
		if err != nil {
			return err
		}
		c.Updated = now.Round(0)
		if err := e.commitWith(ctx, now, changed, nil, map[string]*forewarn.Session{c.ID: c}, ""); err != nil {
			return err
		}
		e.log.Info("session changed", "session", c.ID, "state", c.State)
		return nil
	})
}

// sessionLoop steps the sessions while the engine leads: whenever the
// store moves, when the engine takes the lead, and at the soonest time
// a step asked for.
func (e *Engine) sessionLoop() {
	defer e.loops.Done()
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		e.mu.Lock()
		adv := e.advanced
		e.mu.Unlock()
		if next := e.stepSessions(); !next.IsZero() {
			t.Reset(max(time.Until(next), 0))
		}
		select {
		case <-e.ctx.Done():
			t.Stop()
			return
		case <-adv:
		case <-e.led:
		case <-t.C:
		}
		t.Stop()
	}
}

// stepSessions advances every session as far as it goes now, in one
// commit, and returns when it should step again (zero: when the store
// moves).
func (e *Engine) stepSessions() time.Time {
	// Most commits are not a session's: the write slot is taken only
	// when a session can move.
	if !e.mayStep() {
		return time.Time{}
	}
	unlock, err := e.lockWrites(e.ctx)
	if err != nil {
		return time.Time{}
	}
	defer unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || !e.leading || len(e.sessions) == 0 {
		return time.Time{}
	}
	now := time.Now()
	var next time.Time
	soon := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	var changed []*forewarn.Event
	sessions := make(map[string]*forewarn.Session)
	for _, id := range slices.Sorted(maps.Keys(e.sessions)) {
		c, evs, at := e.stepSession(e.sessions[id], now)
		soon(at)
		if c != nil {
			c.Updated = now.Round(0)
			sessions[id] = c
			changed = append(changed, evs...)
		}
	}
	if len(sessions) == 0 {
		return next
	}
	if err := e.commitWith(e.ctx, now, changed, nil, sessions, e.fence); err != nil {
		if _, ok := stale(err); !ok {
			e.log.Error("step the maintenance sessions", "err", err)
		}
		return now.Add(retryDelay)
	}
	for id, s := range sessions {
		e.log.Info("session stepped", "session", id, "state", s.State)
	}
	return next
}

// mayStep reports whether the engine leads and a session is Running or
// Paused (a Paused session's hosts still become Ready or time out).
func (e *Engine) mayStep() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || !e.leading {
		return false
	}
	for _, s := range e.sessions {
		if !s.State.Ended() {
			return true
		}
	}
	return false
}

// stepSession returns s advanced to now (nil when nothing changed), the
// events it makes or ends, and when it should step again on its own
// (zero for never). e.mu must be held.
func (e *Engine) stepSession(s *forewarn.Session, now time.Time) (*forewarn.Session, []*forewarn.Event, time.Time) {
	if s.State == forewarn.SessionDone {
		return nil, nil, time.Time{}
	}
	var c *forewarn.Session // the copy, once something changes
	edit := func() *forewarn.Session {
		if c == nil {
			c = s.Clone()
		}
		return c
	}
	var changed []*forewarn.Event
	var next time.Time
	soon := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	// Hosts under way: Ready once every event Started, or failed past
	// the reply timeout.
	for i, h := range s.Hosts {
		if h.State != forewarn.HostNotifying {
			continue
		}
		waiting, latest := e.unstarted(&h, nil)
		switch {
		case waiting == 0:
			hc := &edit().Hosts[i]
			hc.State, hc.ReadyAt = forewarn.HostInMaintenance, now.Round(0)
		case s.Spec.ReplyTimeout > 0:
			due := latest.Add(s.Spec.ReplyTimeout)
			if now.Before(due) {
				soon(due)
				continue
			}
			cs := edit()
			hc := &cs.Hosts[i]
			evs, _ := e.endEvents(hc, now, true)
			changed = append(changed, evs...)
			e.endHostIn(cs, hc, forewarn.HostFailed, fmt.Sprintf("its VMs' events had not all started %s after their NotBefore", s.Spec.ReplyTimeout), now)
		}
	}
	cur := s
	if c != nil {
		cur = c
	}
	ws, _ := parseWindows(cur.Spec.Windows)
	wait, until, active := startWait(cur, ws, now)
	switch wait {
	case WaitNone: // a host may start, its budgets allowing
	case WaitLast:
		if active == 0 { // every host ended
			edit().State = forewarn.SessionDone
		}
		return c, changed, next
	case WaitWindow, WaitDelay:
		soon(until)
		return c, changed, next
	default:
		return c, changed, next
	}
	// Start hosts in order while the limits allow; a host that would
	// take a group past its budget waits, and later ones may go first.
	sizes := e.groupSizes(&cur.Spec)
	down := make(map[string]int)
	for _, h := range cur.Hosts {
		if h.State != forewarn.HostPending && !h.State.Ended() {
			e.addGroups(&cur.Spec, h.VMs, down)
		}
	}
	action, _ := sessionAction(cur.Spec.Action)
	maxHosts := max(cur.Spec.MaxHosts, 1)
	for i := range cur.Hosts {
		if active >= maxHosts {
			break
		}
		if cur.Hosts[i].State != forewarn.HostPending {
			continue
		}
		names, _ := e.HostVMs(cur.Hosts[i].Name)
		names = slices.DeleteFunc(names, e.deleted)
		if g, n, limit, over := e.overBudget(&cur.Spec, names, nil, sizes); over {
			cs := edit()
			e.endHostIn(cs, &cs.Hosts[i], forewarn.HostFailed, fmt.Sprintf("it alone holds %d VMs of %s, over its budget of %d", n, g, limit), now)
			cur = cs
			break
		}
		if _, _, _, over := e.overBudget(&cur.Spec, names, down, sizes); over {
			continue
		}
		cs := edit()
		cur = cs
		hc := &cs.Hosts[i]
		evs := e.hostEvents(&cs.Spec, names, action, now)
		hc.State, hc.Started, hc.VMs = forewarn.HostNotifying, now.Round(0), names
		hc.Events = make([]string, len(evs))
		for j, ev := range evs {
			hc.Events[j] = ev.ID
		}
		changed = append(changed, evs...)
		e.addGroups(&cs.Spec, names, down)
		active++
	}
	return c, changed, next
}

// startWait returns why s starts no host at now, with ws its windows:
// the first of WaitEnded, WaitPaused, WaitLast, WaitMaxHosts, WaitWindow
// and WaitDelay that holds, in that order, and when a WaitWindow or a
// WaitDelay ends; WaitNone when a host may start, its budgets allowing.
// It also returns how many hosts are under way. stepSession and progress
// both check through it; it reads only s.
func startWait(s *forewarn.Session, ws windows, now time.Time) (WaitReason, time.Time, int) {
	underway, pending := 0, 0
	for _, h := range s.Hosts {
		switch {
		case h.State == forewarn.HostPending:
			pending++
		case !h.State.Ended():
			underway++
		}
	}
	switch {
	case s.State.Ended():
		return WaitEnded, time.Time{}, underway
	case s.State == forewarn.SessionPaused:
		return WaitPaused, time.Time{}, underway
	case pending == 0:
		return WaitLast, time.Time{}, underway
	case underway >= max(s.Spec.MaxHosts, 1):
		return WaitMaxHosts, time.Time{}, underway
	case !ws.open(now):
		return WaitWindow, ws.next(now), underway
	case !s.LastEnded.IsZero() && s.Spec.Delay > 0 && now.Before(s.LastEnded.Add(s.Spec.Delay)):
		return WaitDelay, s.LastEnded.Add(s.Spec.Delay), underway
	}
	return WaitNone, time.Time{}, underway
}

// unstarted returns how many of h's events hold it back, and the latest
// NotBefore among those. An event holds its host back while it is
// Scheduled or Pending and names a VM still in the fleet and not
// deleted: an event gone, or whose VMs all left the fleet, does not.
// With each set, it calls each with every such VM of those events.
// e.mu must be held.
func (e *Engine) unstarted(h *forewarn.SessionHost, each func(vm string)) (int, time.Time) {
	n := 0
	var latest time.Time
	for _, id := range h.Events {
		ev := e.events[id]
		if ev == nil || ev.Status != forewarn.Scheduled && ev.Status != forewarn.Pending {
			continue
		}
		holds := false
		for _, name := range ev.Resources {
			if e.vm(name) == nil || e.deleted(name) {
				continue
			}
			holds = true
			if each == nil {
				break
			}
			each(name)
		}
		if !holds {
			continue
		}
		n++
		if ev.NotBefore.After(latest) {
			latest = ev.NotBefore
		}
	}
	return n, latest
}

// hostEvents makes the events of a host's VMs names: one per event type,
// scope group and (on Azure) update domain. e.mu must be held.
func (e *Engine) hostEvents(spec *forewarn.SessionSpec, names []string, action forewarn.EventType, now time.Time) []*forewarn.Event {
	byType := make(map[forewarn.EventType][]string)
	for _, n := range names {
		if vm := e.vm(n); vm != nil {
			t := hostEventType(vm, action)
			byType[t] = append(byType[t], n)
		}
	}
	desc := cmp.Or(spec.Description, "Host maintenance")
	var evs []*forewarn.Event
	for _, t := range slices.Sorted(maps.Keys(byType)) {
		notice := cmp.Or(spec.Notice, t.MinNotice())
		for _, g := range e.groupByScope(byType[t]) {
			byUD := make(map[int][]string)
			for _, n := range g {
				ud := 0
				if vm := e.vm(n); vm.Provider == forewarn.Azure {
					ud = vm.UpdateDomain
				}
				byUD[ud] = append(byUD[ud], n)
			}
			for _, ud := range slices.Sorted(maps.Keys(byUD)) {
				evs = append(evs, e.newEvent(t, byUD[ud], notice, -1, forewarn.Platform, desc, t.DefaultLasts(), false, now))
			}
		}
	}
	return evs
}

// budgetKeys calls f with the key of each group of vm that a budget of
// spec applies to: kind and name.
func budgetKeys(spec *forewarn.SessionSpec, vm *forewarn.VM, f func(kind, key string)) {
	for kind := range spec.MaxUnavailable {
		var key string
		switch kind {
		case forewarn.GroupAvailabilitySet:
			key = vm.AvailabilitySet
		case forewarn.GroupScaleSet:
			key = vm.ScaleSet
		case forewarn.GroupPlacementGroup:
			if vm.PlacementGroup != "" {
				key = vm.ScaleSet + "/" + vm.PlacementGroup
			}
		case forewarn.GroupUpdateDomain:
			if scope := cmp.Or(vm.AvailabilitySet, vm.ScaleSet, vm.CloudService); scope != "" {
				key = scope + "/" + strconv.Itoa(vm.UpdateDomain)
			}
		case forewarn.GroupZone:
			key = vm.Zone
		}
		if key != "" {
			f(kind, key)
		}
	}
}

// groupName names a group for messages.
func groupName(kind, key string) string {
	if kind == forewarn.GroupUpdateDomain {
		scope, ud, _ := strings.Cut(key, "/")
		return fmt.Sprintf("update domain %s of %s", ud, scope)
	}
	return kind + " " + key
}

// addGroups counts names into down, by group. It reads only the
// inventory in force, and needs no lock.
func (e *Engine) addGroups(spec *forewarn.SessionSpec, names []string, down map[string]int) {
	for _, n := range names {
		if vm := e.vm(n); vm != nil {
			budgetKeys(spec, vm, func(kind, key string) { down[kind+"\x00"+key]++ })
		}
	}
}

// groupSizes counts the fleet's VMs in each group a percent budget of
// spec applies to; nil when there is none. It reads only the inventory
// in force and the VMs' members, and needs no lock.
func (e *Engine) groupSizes(spec *forewarn.SessionSpec) map[string]int {
	percent := false
	for _, b := range spec.MaxUnavailable {
		percent = percent || b.Percent > 0
	}
	if !percent {
		return nil
	}
	sizes := make(map[string]int)
	for _, vm := range e.cur().fleetOf().VMs {
		if !e.deleted(vm.Name) {
			budgetKeys(spec, vm, func(kind, key string) { sizes[kind+"\x00"+key]++ })
		}
	}
	return sizes
}

// overBudget reports whether names, with down already down, take a
// group past its budget, and which: its name, the count and the limit.
// It reads only the inventory in force, and needs no lock.
func (e *Engine) overBudget(spec *forewarn.SessionSpec, names []string, down, sizes map[string]int) (string, int, int, bool) {
	if len(spec.MaxUnavailable) == 0 {
		return "", 0, 0, false
	}
	add := make(map[string]int)
	e.addGroups(spec, names, add)
	for _, k := range slices.Sorted(maps.Keys(add)) {
		kind, key, _ := strings.Cut(k, "\x00")
		limit := budgetLimit(spec.MaxUnavailable[kind], sizes[k])
		if n := down[k] + add[k]; n > limit {
			return groupName(kind, key), n, limit, true
		}
	}
	return "", 0, 0, false
}

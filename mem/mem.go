// Package mem implements forewarn.Store in memory, for tests.
//
// A Store behaves like the durable backends, down to the values it
// returns: events, VM records, inventory definitions and sessions are
// deep-copied on the way in and out, and times are kept in UTC without
// monotonic clock readings, exactly as they come back from a file.
// Nothing survives Close.
package mem

import (
	"context"
	"maps"
	"slices"
	"sync"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/internal/watch"
)

var _ forewarn.Store = (*Store)(nil)

// Store is an in-memory forewarn.Store. The zero value is not usable; call
// New. It is safe for concurrent use.
type Store struct {
	mu     sync.Mutex
	closed bool
	rev    int64
	events map[string]*forewarn.Event
	inc    map[string]int64
	vms    map[string]*forewarn.VMRecord
	sets   map[string]forewarn.ScaleSetRecord
	// The inventory: definitions, scale set definitions, and the
	// revision of the last commit that named either.
	inv     map[string]*forewarn.Definition
	invSets map[string]forewarn.ScaleSet
	invRev  int64
	// sessions holds each session normalized, shared with the followers'
	// updates: neither modifies it.
	sessions map[string]*forewarn.Session
	// keys and sightings are normalized, shared with the followers'
	// updates like sessions.
	keys      *forewarn.SigningKeys
	sightings map[string]*forewarn.Sighting
	log       watch.Log // the followers
}

// New returns an empty Store at revision 0.
func New() *Store {
	return &Store{
		events:  make(map[string]*forewarn.Event),
		inc:     make(map[string]int64),
		vms:     make(map[string]*forewarn.VMRecord),
		sets:    make(map[string]forewarn.ScaleSetRecord),
		inv:     make(map[string]*forewarn.Definition),
		invSets: make(map[string]forewarn.ScaleSet),

		sessions:  make(map[string]*forewarn.Session),
		sightings: make(map[string]*forewarn.Sighting),
	}
}

// Load returns a deep copy of the current state.
// It returns EUNAVAILABLE after Close.
func (s *Store) Load(ctx context.Context) (*forewarn.State, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, forewarn.Errorf(forewarn.EUNAVAILABLE, "store is closed")
	}
	st := &forewarn.State{
		Revision:     s.rev,
		Events:       make([]*forewarn.Event, 0, len(s.events)),
		Incarnations: make(map[string]int64, len(s.inc)),
		VMs:          make(map[string]*forewarn.VMRecord, len(s.vms)),
		ScaleSets:    make(map[string]*forewarn.ScaleSetRecord, len(s.sets)),

		Inventory:         make(map[string]*forewarn.Definition, len(s.inv)),
		InventorySets:     make(map[string]*forewarn.ScaleSet, len(s.invSets)),
		InventoryRevision: s.invRev,
		Sessions:          make(map[string]*forewarn.Session, len(s.sessions)),
		Sightings:         make(map[string]*forewarn.Sighting, len(s.sightings)),
	}
	if s.keys != nil {
		st.SigningKeys = s.keys.Normalized()
	}
	for id, si := range s.sightings {
		st.Sightings[id] = si.Normalized()
	}
	for name, r := range s.sets {
		st.ScaleSets[name] = &r
	}
	for name, d := range s.inv {
		st.Inventory[name] = cloneDefinition(d)
	}
	for name, d := range s.invSets {
		st.InventorySets[name] = &d
	}
	for id, ses := range s.sessions {
		st.Sessions[id] = ses.Clone()
	}
	for _, e := range s.events {
		st.Events = append(st.Events, e.Clone())
	}
	for vm, n := range s.inc {
		st.Incarnations[vm] = n
	}
	for vm, r := range s.vms {
		st.VMs[vm] = r.Normalized()
	}
	return st, nil
}

// Commit applies c atomically and returns the new revision. It returns
// ECONFLICT when c.Revision is not the current revision, EINVALID when c
// would lower an incarnation or fails Change.Validate (an event without
// an ID, a nil or unnamed VM record, a definition or a session under
// another name), and EUNAVAILABLE after Close; in each case nothing is
// written.
func (s *Store) Commit(ctx context.Context, c *forewarn.Change) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := c.Validate(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, forewarn.Errorf(forewarn.EUNAVAILABLE, "store is closed")
	}
	if c.Revision != s.rev {
		return 0, forewarn.Errorf(forewarn.ECONFLICT, "change is against revision %d, store is at %d", c.Revision, s.rev)
	}
	for vm, n := range c.Incarnations {
		if old, ok := s.inc[vm]; ok && n < old {
			return 0, forewarn.Errorf(forewarn.EINVALID, "incarnation of %s would go back from %d to %d", vm, old, n)
		}
	}
	u := &forewarn.Change{
		Revision:     s.rev,
		Events:       make([]*forewarn.Event, len(c.Events)),
		Deletes:      slices.Clone(c.Deletes),
		Incarnations: maps.Clone(c.Incarnations),
		VMs:          make(map[string]*forewarn.VMRecord, len(c.VMs)),
		ScaleSets:    make(map[string]*forewarn.ScaleSetRecord, len(c.ScaleSets)),
	}
	if len(c.Inventory) > 0 {
		u.Inventory = make(map[string]*forewarn.Definition, len(c.Inventory))
	}
	if len(c.InventorySets) > 0 {
		u.InventorySets = make(map[string]*forewarn.ScaleSet, len(c.InventorySets))
	}
	if len(c.Sessions) > 0 {
		u.Sessions = make(map[string]*forewarn.Session, len(c.Sessions))
	}
	if len(c.Sightings) > 0 {
		u.Sightings = make(map[string]*forewarn.Sighting, len(c.Sightings))
	}
	if c.SigningKeys != nil {
		s.keys = c.SigningKeys.Normalized()
		u.SigningKeys = s.keys
	}
	for id, si := range c.Sightings {
		n := si.Normalized()
		s.sightings[id] = n
		u.Sightings[id] = n
	}
	for i, e := range c.Events {
		n := e.Normalized()
		s.events[e.ID] = n
		u.Events[i] = n // the store never modifies what it holds
	}
	for _, id := range c.Deletes {
		delete(s.events, id)
		delete(s.sightings, id) // an event's sighting leaves with it
	}
	for vm, n := range c.Incarnations {
		s.inc[vm] = n
	}
	for vm, r := range c.VMs {
		n := r.Normalized()
		s.vms[vm] = n
		u.VMs[vm] = n
	}
	for name, r := range c.ScaleSets {
		s.sets[name] = *r
		u.ScaleSets[name] = new(*r)
	}
	for name, d := range c.Inventory {
		if d == nil {
			delete(s.inv, name)
			if c.VMs[name] == nil {
				delete(s.vms, name) // a VM's record leaves the store with it
			}
			u.Inventory[name] = nil
			continue
		}
		n := cloneDefinition(d)
		s.inv[name] = n
		u.Inventory[name] = n
	}
	for name, d := range c.InventorySets {
		if d == nil {
			delete(s.invSets, name)
			u.InventorySets[name] = nil
			continue
		}
		s.invSets[name] = *d
		u.InventorySets[name] = new(*d)
	}
	for id, ses := range c.Sessions {
		if ses == nil {
			delete(s.sessions, id)
			u.Sessions[id] = nil
			continue
		}
		n := ses.Normalized()
		s.sessions[id] = n
		u.Sessions[id] = n
	}
	s.rev++
	if len(c.Inventory)+len(c.InventorySets) > 0 {
		s.invRev = s.rev
	}
	s.log.Append(&forewarn.Update{Revision: s.rev, Change: u})
	return s.rev, nil
}

// Follow returns a channel of every commit after revision since; a
// follower too far behind is told to reload.
func (s *Store) Follow(ctx context.Context, since int64) <-chan *forewarn.Update {
	return s.log.Follow(ctx, since)
}

// Close drops the state and closes every watch channel. Later calls to
// Load and Commit return EUNAVAILABLE. Close always returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.events, s.inc, s.vms, s.sets, s.inv, s.invSets, s.sessions, s.keys, s.sightings = nil, nil, nil, nil, nil, nil, nil, nil, nil
	s.log.Close()
	return nil
}

// cloneDefinition returns a copy of d with a copy of its VM.
func cloneDefinition(d *forewarn.Definition) *forewarn.Definition {
	return &forewarn.Definition{VM: new(*d.VM), Seq: d.Seq, Registration: d.Registration}
}

package forewarn

import (
	"bytes"
	"context"
	"encoding/json"
	"time"
)

// State is everything a Store holds, as of one revision.
type State struct {
	// Revision increases with every committed Change; 0 for an empty store.
	Revision int64
	// Events holds every event ever created and not pruned, in no order.
	Events []*Event
	// Incarnations maps a VM name to its DocumentIncarnation.
	Incarnations map[string]int64
	// VMs maps a VM name to what the engine remembers of it.
	VMs map[string]*VMRecord
	// ScaleSets maps a scale set name to the settings an operator changed
	// at run time; they override the fleet file's.
	ScaleSets map[string]*ScaleSetRecord

	// Inventory maps a VM name to its definition: the fleet the server
	// answers for. It is empty for a store that never held one.
	Inventory map[string]*Definition
	// InventorySets maps a scale set name to its definition (the fleet
	// file's scaleSets entries).
	InventorySets map[string]*ScaleSet
	// InventoryRevision is the revision of the latest commit that changed
	// Inventory or InventorySets; 0 when none did.
	InventoryRevision int64
	// Sessions maps a maintenance session's ID to the session.
	Sessions map[string]*Session
	// SigningKeys are the keys the servers sign session tokens with; nil
	// when the store holds none yet.
	SigningKeys *SigningKeys
	// Sightings maps an event's ID to what the metadata servers noted of
	// its readers.
	Sightings map[string]*Sighting
}

// SigningKeys are the secrets that the servers sharing a store sign
// their session tokens (EC2's IMDSv2 tokens) with, so that every server,
// and a server after a restart, accepts a token until it expires:
// Current signs (Previous still does for a moment after a rotation, while
// the servers learn of it), and a token signed with either is good.
type SigningKeys struct {
	Current SigningKey `json:"current"`
	// Previous is the key Current replaced, zero before the first
	// rotation.
	Previous SigningKey `json:"previous,omitzero"`
}

// SigningKey is one secret and when it was made.
type SigningKey struct {
	Secret  []byte    `json:"secret"`
	Created time.Time `json:"created"`
}

// MinSigningKey is the length, in bytes, of the shortest secret a store
// takes.
const MinSigningKey = 32

// Normalized returns a copy of k as a store returns it: secrets of its
// own, times in UTC without monotonic readings.
func (k *SigningKeys) Normalized() *SigningKeys {
	c := *k
	for _, key := range []*SigningKey{&c.Current, &c.Previous} {
		key.Secret = bytes.Clone(key.Secret)
		key.Created = key.Created.UTC()
	}
	return &c
}

// Sighting is what the metadata servers noted about who read one event,
// kept in the store so that the client-behaviour report is the same
// after a restart and on every replica.
type Sighting struct {
	// By is the first VM that read a document showing the event, and At
	// when; empty and zero when none did.
	By string    `json:"by,omitempty"`
	At time.Time `json:"at,omitzero"`
	// NotBefore is the NotBefore the event was last read with while
	// Scheduled; Started when it started, as a read of it showed.
	NotBefore time.Time `json:"notBefore,omitzero"`
	Started   time.Time `json:"started,omitzero"`
	// LateReaders counts the VMs that first read the event only after it
	// started, its notice unread; FirstLate is the first of them, and
	// FirstLateAt when its request began.
	LateReaders int       `json:"lateReaders,omitempty"`
	FirstLate   string    `json:"firstLate,omitempty"`
	FirstLateAt time.Time `json:"firstLateAt,omitzero"`
}

// Normalized returns a copy of s as a store returns it: times in UTC
// without monotonic readings.
func (s *Sighting) Normalized() *Sighting {
	c := *s
	for _, t := range []*time.Time{&c.At, &c.NotBefore, &c.Started, &c.FirstLateAt} {
		*t = t.UTC()
	}
	return &c
}

// Definition is one VM of the inventory as a store keeps it.
type Definition struct {
	// VM is the VM's definition. It must not be modified.
	VM *VM `json:"vm"`
	// Seq orders the inventory: the fleet lists its VMs by it, in the
	// order they were registered (a fleet file's order, then each new
	// VM's). It is unique within the inventory and never reused.
	Seq int64 `json:"seq"`
	// Registration tells this registration of the VM from any other: a
	// random number drawn when the VM joins the inventory, kept while it
	// stays (its definition may change), and drawn again should it leave
	// and join again. 0 in a store written before registrations.
	Registration uint64 `json:"registration,omitempty"`
}

// ScaleSetRecord is a scale set's Terminate settings as an operator set
// them at run time (seed 004: the timeout is modifiable, and Terminate
// notifications are opted in or out per scale set).
type ScaleSetRecord struct {
	// TerminateTimeout is the notBeforeTimeout of new deletes, 5 to 15
	// minutes.
	TerminateTimeout time.Duration `json:"terminateNotBeforeTimeout"`
	// TerminateNotifications reports whether a delete raises a Terminate
	// event; without them a VM is deleted at once.
	TerminateNotifications bool `json:"terminateNotifications"`
}

// VMRecord is the persisted state of one VM beyond its events.
type VMRecord struct {
	// LastSeen is when the VM last called its metadata API, kept to within
	// an hour: scheduled events are enabled while it is recent.
	LastSeen time.Time `json:"lastSeen,omitzero"`
	// Peers is no longer written; stores written before keep it, and it
	// is read back as it was.
	Peers string `json:"peers,omitempty"`
	// Queried is when the VM last read its maintenance-event key, kept
	// when it matters: the first read after each of its host maintenance
	// events ended. A live migration is warned only to a VM that did.
	Queried time.Time `json:"queried,omitzero"`
	// Client is what the metadata servers counted of the VM's client for
	// the client-behaviour report, in the history package's encoding,
	// so that a restart changes none of its findings; stores keep it as
	// they are given it.
	Client json.RawMessage `json:"client,omitempty"`
}

// Normalized returns a copy of r as a store returns it: times in UTC
// without monotonic readings.
func (r *VMRecord) Normalized() *VMRecord {
	c := *r
	c.LastSeen = c.LastSeen.UTC()
	c.Queried = c.Queried.UTC()
	c.Client = bytes.Clone(c.Client)
	return &c
}

// Change is one atomic write to a Store.
type Change struct {
	// Revision is the revision the change was computed against. Commit
	// refuses the change when the store has moved on (compare-and-swap).
	Revision int64
	// Events are written whole, replacing any event with the same ID.
	Events []*Event
	// Deletes names events to remove for good (history pruning).
	Deletes []string
	// Incarnations are set for the named VMs. An incarnation never goes
	// backwards: a Store refuses a value lower than the stored one.
	Incarnations map[string]int64
	// VMs are set whole for the named VMs.
	VMs map[string]*VMRecord
	// ScaleSets are set whole for the named scale sets.
	ScaleSets map[string]*ScaleSetRecord
	// Inventory sets the definition of each named VM, or removes it from
	// the inventory where the value is nil; a VM removed loses its
	// VMRecord too, unless VMs sets one (its incarnation stays, so that
	// it never goes backwards). InventorySets does the same
	// for scale set definitions. A change that names any sets the store's
	// InventoryRevision to the revision it produces. A store may hand the
	// definitions themselves to its followers: they must not be modified
	// once committed.
	Inventory     map[string]*Definition
	InventorySets map[string]*ScaleSet
	// Sessions are set whole for the named maintenance sessions, or
	// removed where the value is nil. A store may hand them to its
	// followers: they must not be modified once committed.
	Sessions map[string]*Session
	// SigningKeys, when set, replace the store's.
	SigningKeys *SigningKeys
	// Sightings are set whole for the named events; an event's sighting
	// leaves the store with the event (Deletes).
	Sightings map[string]*Sighting
	// Fence, when set, is a leadership fence from Term.Fence: a store
	// shared by several servers refuses the change with ECONFLICT unless
	// the term it names still leads, so a deposed leader's late write is
	// lost rather than applied. Stores of one server ignore it.
	Fence string
}

// Update is one committed Change as a follower receives it.
type Update struct {
	// Revision is the revision the commit produced. Change.Revision is the
	// revision it was computed against, the one before it.
	Revision int64
	// Change is what the commit wrote; nil when Reload is set.
	Change *Change
	// Reload reports that commits were lost to the follower: it must load
	// the whole state again.
	Reload bool
}

// Store persists the fleet's inventory, events and incarnations. Implementations are
// safe for concurrent use. A Commit that returns nil is durable.
//
// Errors: Load and Commit return EUNAVAILABLE after Close; Commit returns
// ECONFLICT when Change.Revision is not the current revision, and
// EINVALID when the change would lower an incarnation. Other failures
// (I/O, a corrupt file) are returned wrapped, with code EINTERNAL.
type Store interface {
	// Load returns the current state.
	Load(ctx context.Context) (*State, error)
	// Commit applies c atomically and returns the new revision.
	Commit(ctx context.Context, c *Change) (int64, error)
	// Follow returns a channel that receives every commit after revision
	// since, in revision order, one Update per commit, including those of
	// other servers sharing the store. When the store can no longer
	// deliver every commit since the follower's position (they were
	// compacted, or the follower fell too far behind), it sends one
	// Update with Reload set and closes the channel: the follower Loads in
	// full and follows again from the loaded revision. The channel is
	// closed too when ctx ends or the store closes. Updates and what they
	// point to must not be modified.
	Follow(ctx context.Context, since int64) <-chan *Update
	// Close releases the store. It is safe to call more than once.
	Close() error
}

// Validate refuses a change that no store state could accept: nil
// events, events without an ID, and records for VMs without a name.
// Store implementations call it first. A nil change is invalid too.
func (c *Change) Validate() error {
	if c == nil {
		return Errorf(EINVALID, "nil change")
	}
	for i, e := range c.Events {
		if e == nil {
			return Errorf(EINVALID, "event %d is nil", i)
		}
		if e.ID == "" {
			return Errorf(EINVALID, "event %d has no ID", i)
		}
	}
	if _, ok := c.Incarnations[""]; ok {
		return Errorf(EINVALID, "incarnation for a VM without a name")
	}
	for vm, r := range c.VMs {
		if vm == "" {
			return Errorf(EINVALID, "VM record for a VM without a name")
		}
		if r == nil {
			return Errorf(EINVALID, "VM record for %s is nil", vm)
		}
		if len(r.Client) > 0 && !json.Valid(r.Client) {
			return Errorf(EINVALID, "VM record for %s holds a client record that is not JSON", vm)
		}
	}
	for name, d := range c.Inventory {
		switch {
		case name == "":
			return Errorf(EINVALID, "inventory definition for a VM without a name")
		case d != nil && (d.VM == nil || d.VM.Name != name):
			return Errorf(EINVALID, "inventory definition for %s does not hold a VM of that name", name)
		}
	}
	for name, d := range c.InventorySets {
		if name == "" || d != nil && d.Name != name {
			return Errorf(EINVALID, "inventory scale set %q does not hold a scale set of that name", name)
		}
	}
	for id, ses := range c.Sessions {
		if id == "" || ses != nil && ses.ID != id {
			return Errorf(EINVALID, "session %q does not hold a session of that ID", id)
		}
	}
	if k := c.SigningKeys; k != nil && len(k.Current.Secret) < MinSigningKey {
		return Errorf(EINVALID, "a signing key of %d bytes, under %d", len(k.Current.Secret), MinSigningKey)
	}
	for id, s := range c.Sightings {
		if id == "" || s == nil {
			return Errorf(EINVALID, "a sighting without an event ID, or nil")
		}
	}
	for ss, r := range c.ScaleSets {
		if ss == "" {
			return Errorf(EINVALID, "scale set record for a scale set without a name")
		}
		if r == nil {
			return Errorf(EINVALID, "scale set record for %s is nil", ss)
		}
	}
	return nil
}

// Cluster is implemented by a Store that several servers (replicas)
// share. Exactly one replica at a time leads: it alone fires deadlines.
type Cluster interface {
	// Campaign blocks until the replica named name leads, or ctx ends.
	Campaign(ctx context.Context, name string) (Term, error)
	// Announce publishes what a replica reports of itself, replacing its
	// previous announcement. An announcement lapses on its own when the
	// replica stops renewing it (it dies), within the store's lease.
	Announce(ctx context.Context, r Replica) error
	// Replicas returns the store's newest revision, the name of the
	// leader ("" when none leads) and every live replica's announcement,
	// sorted by name.
	Replicas(ctx context.Context) (*ClusterStatus, error)
}

// Term is one replica's leadership.
type Term interface {
	// Done is closed when the leadership is lost: resigned, or its lease
	// expired because the store could not be reached.
	Done() <-chan struct{}
	// Fence is the token a leader puts in Change.Fence.
	Fence() string
	// Resign gives the leadership up.
	Resign(ctx context.Context) error
}

// Replica is what one server sharing a store reports of itself.
type Replica struct {
	Name string `json:"name"`
	// Address is the replica's operator API address, if it announces one.
	Address string `json:"address,omitempty"`
	// Revision is the newest revision its engine has applied.
	Revision int64 `json:"revision"`
	// Leader reports whether the replica believes it leads.
	Leader bool `json:"leader"`
	// Started is when the replica started; Updated when it last announced.
	Started time.Time `json:"started"`
	Updated time.Time `json:"updated"`
}

// ClusterStatus is the replicas of a shared store.
type ClusterStatus struct {
	// Revision is the store's newest revision.
	Revision int64 `json:"revision"`
	// Leader names the leading replica; "" when none leads.
	Leader   string    `json:"leader"`
	Replicas []Replica `json:"replicas"`
}

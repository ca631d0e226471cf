// Package etcd implements forewarn.Store and forewarn.Cluster on an etcd
// cluster, the store several Forewarn servers share.
//
// Every key lives under Options.Prefix ("/forewarn/" by default):
//
//	rev             the Forewarn revision, a decimal counter: 1, 2, 3, ...
//	ev/<ID>         an event, as JSON (the encoding the bolt store uses)
//	inc/<vm>        a VM's DocumentIncarnation, decimal
//	vm/<name>       a forewarn.VMRecord, as JSON
//	ss/<name>       a forewarn.ScaleSetRecord, as JSON
//	def/<name>      a VM's definition in the inventory, a forewarn.Definition, as JSON
//	defss/<name>    a scale set's definition in the inventory, a forewarn.ScaleSet, as JSON
//	defrev          the revision of the last commit that named the inventory, decimal
//	ses/<ID>        a maintenance session, a forewarn.Session, as JSON
//	seen/<ID>       what the servers noted of an event's readers, a forewarn.Sighting, as JSON
//	keys            the signing keys of session tokens, a forewarn.SigningKeys, as JSON
//	leader/<lease>  the leader election (etcd's concurrency.Election)
//	replicas/<name> a replica's announcement, as JSON, on a lease
//
// A Commit is one etcd transaction: it writes the change and rev, on
// condition that rev still holds the change's revision (and, with a
// fence, that the fencing leader's election key still exists as it was
// created). A removal from the inventory, or of a session, deletes its
// key; a change that names the inventory writes defrev too. Load is one
// range read of the prefix: a snapshot at one etcd revision. Follow and
// Watch are etcd watches of the prefix; each etcd revision that writes
// rev is one commit, and a follower rebuilds its Change from the keys it
// wrote and deleted (a removal of a definition or a session the store
// did not hold deletes no key, so a follower does not see it, as with an
// event's).
//
// A fleet-wide change is one transaction too, with an operation per
// event, deletion, incarnation, record and definition it writes: etcd
// must allow it. Its defaults (--max-txn-ops 128, --max-request-bytes
// 1.5 MiB) refuse a change of more than about 120 VMs; a change naming
// each of N VMs once (its incarnation, say) needs --max-txn-ops of at
// least N+16, one defining them and setting their incarnations 2N+16,
// and --max-request-bytes of a few hundred bytes per VM and key (for
// 100,000 VMs, --max-txn-ops=300000 --max-request-bytes=134217728 leave
// room). A session is one key, written whole at each of its steps, of
// about 300 bytes of JSON per host. etcd has no limit of its own on a
// value: what bounds a session is --max-request-bytes, whose default
// (1.5 MiB) takes a session of 4,500 hosts but not one of 5,000, or four
// sessions of 1,000 hosts in one change. A change that etcd refuses for
// its size fails with EINVALID, naming the flags.
//
// Every etcd call is bounded by Options.RequestTimeout; one that runs out
// (etcd unreachable, or without a quorum) fails with EUNAVAILABLE. A
// Commit that fails so may have been applied: the next Commit against the
// same revision then fails with ECONFLICT, and the caller reloads.
package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/internal/codec"
)

var (
	_ forewarn.Store   = (*Store)(nil)
	_ forewarn.Cluster = (*Store)(nil)
)

// Defaults of Options.
const (
	DefaultPrefix         = "/forewarn/"
	DefaultDialTimeout    = 5 * time.Second
	DefaultRequestTimeout = 5 * time.Second
	DefaultLeaseTTL       = 5 * time.Second
)

// maxMsgSize is the largest request the client sends: etcd's own
// --max-request-bytes is the limit that matters, not the client.
const maxMsgSize = 256 << 20

// maxGets is how many incarnations a Commit reads key by key; a change
// naming more reads all of them in one range instead. It keeps the read
// within etcd's default --max-txn-ops (128).
const maxGets = 64

// Options configures Open.
type Options struct {
	// Endpoints are the client URLs of etcd members, such as
	// "http://127.0.0.1:2379".
	Endpoints []string
	// Prefix is the key prefix of the store (DefaultPrefix when empty);
	// one ending in no slash gets one. Stores on different prefixes of
	// one etcd are independent, unless one prefix lies among the other's
	// keys (such as "/forewarn/ev/x/" in "/forewarn/").
	Prefix string
	// DialTimeout bounds how long Open waits for an endpoint to answer
	// (DefaultDialTimeout when zero).
	DialTimeout time.Duration
	// RequestTimeout bounds every etcd call (DefaultRequestTimeout when
	// zero); a call that runs out fails with EUNAVAILABLE.
	RequestTimeout time.Duration
	// LeaseTTL is the lease of leadership and of announcements, in whole
	// seconds (DefaultLeaseTTL when zero): a replica that stops renewing
	// it loses them that long after.
	LeaseTTL time.Duration
	// Logger receives what the store notices on its own (watches
	// restarted, followers told to reload) and the etcd client's warnings;
	// nil discards them.
	Logger *slog.Logger
}

// withDefaults returns o with its zero fields set, or an EINVALID error.
func (o Options) withDefaults() (Options, error) {
	if len(o.Endpoints) == 0 {
		return o, forewarn.Errorf(forewarn.EINVALID, "etcd: no endpoints")
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if !strings.HasSuffix(o.Prefix, "/") {
		o.Prefix += "/"
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"DialTimeout", &o.DialTimeout, DefaultDialTimeout},
		{"RequestTimeout", &o.RequestTimeout, DefaultRequestTimeout},
		{"LeaseTTL", &o.LeaseTTL, DefaultLeaseTTL},
	} {
		switch {
		case *d.v < 0:
			return o, forewarn.Errorf(forewarn.EINVALID, "etcd: negative %s %v", d.name, *d.v)
		case *d.v == 0:
			*d.v = d.def
		}
	}
	if o.LeaseTTL%time.Second != 0 {
		return o, forewarn.Errorf(forewarn.EINVALID, "etcd: LeaseTTL %v is not a whole number of seconds", o.LeaseTTL)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// Store is a forewarn.Store and forewarn.Cluster on etcd. It is safe for
// concurrent use.
type Store struct {
	opts Options
	cli  *clientv3.Client
	log  *slog.Logger

	// Keys and key prefixes, each with Options.Prefix in front.
	prefix, revKey, evPrefix, incPrefix, vmPrefix, ssPrefix, leaderPrefix, replicasPrefix string
	defPrefix, defssPrefix, defRevKey, sesPrefix, seenPrefix, keysKey                     string

	ctx    context.Context // canceled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // watch and follow goroutines

	etcdRevs revisionMap // Forewarn revision → etcd revision, for Follow

	audit     auditState // the shared audit log's keys
	auditOnce sync.Once

	mu       sync.Mutex // guards the fields below
	closed   bool
	sessions map[*concurrency.Session]struct{} // live leases: terms and announce
	announce *concurrency.Session              // the lease of announcements
}

// Open connects to etcd and returns the store under opts.Prefix. It
// fails with EUNAVAILABLE when no endpoint answers a read within
// opts.DialTimeout (etcd unreachable, or without a quorum), and with
// EINVALID for bad options.
func Open(ctx context.Context, opts Options) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:          opts.Endpoints,
		DialTimeout:        opts.DialTimeout,
		MaxCallSendMsgSize: maxMsgSize,
		MaxCallRecvMsgSize: math.MaxInt32,
		Logger:             newZapLogger(opts.Logger),
	})
	if err != nil {
		return nil, forewarn.Errorf(forewarn.EINVALID, "etcd: %v", err)
	}
	p := opts.Prefix
	s := &Store{
		opts:           opts,
		cli:            cli,
		log:            opts.Logger.With(slog.String(logPrefix, p)),
		prefix:         p,
		revKey:         p + "rev",
		evPrefix:       p + "ev/",
		incPrefix:      p + "inc/",
		vmPrefix:       p + "vm/",
		ssPrefix:       p + "ss/",
		defPrefix:      p + "def/",
		defssPrefix:    p + "defss/",
		defRevKey:      p + "defrev",
		sesPrefix:      p + "ses/",
		seenPrefix:     p + "seen/",
		keysKey:        p + "keys",
		leaderPrefix:   p + "leader/",
		replicasPrefix: p + "replicas/",
		sessions:       map[*concurrency.Session]struct{}{},
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())

	dctx, cancel := context.WithTimeout(ctx, opts.DialTimeout)
	defer cancel()
	resp, err := cli.Get(dctx, s.revKey)
	if err != nil {
		_ = cli.Close()
		s.cancel()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("open etcd store: %w", ctx.Err())
		}
		return nil, forewarn.Errorf(forewarn.EUNAVAILABLE, "etcd unavailable (no quorum or unreachable): no answer from %s within %v: %v",
			strings.Join(opts.Endpoints, ","), opts.DialTimeout, err)
	}
	rev, err := revisionOf(resp.Kvs)
	if err != nil {
		_ = cli.Close()
		s.cancel()
		return nil, err
	}
	s.etcdRevs.add(rev, resp.Header.Revision)
	return s, nil
}

// Prefix returns the key prefix of the store, ending in a slash.
func (s *Store) Prefix() string { return s.prefix }

// Client returns the store's etcd client, for tools and tests; it closes
// with the store.
func (s *Store) Client() *clientv3.Client { return s.cli }

// Load returns the current state, read in one range request at one etcd
// revision. It returns EUNAVAILABLE after Close or when etcd does not
// answer within RequestTimeout.
func (s *Store) Load(ctx context.Context) (*forewarn.State, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var resp *clientv3.GetResponse
	err := s.call(ctx, "load", func(ctx context.Context) (err error) {
		resp, err = s.cli.Get(ctx, s.prefix, clientv3.WithPrefix())
		return err
	})
	if err != nil {
		return nil, err
	}
	st := &forewarn.State{
		Events:       []*forewarn.Event{},
		Incarnations: map[string]int64{},
		VMs:          map[string]*forewarn.VMRecord{},
		ScaleSets:    map[string]*forewarn.ScaleSetRecord{},

		Inventory:     map[string]*forewarn.Definition{},
		InventorySets: map[string]*forewarn.ScaleSet{},
		Sessions:      map[string]*forewarn.Session{},
		Sightings:     map[string]*forewarn.Sighting{},
	}
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		switch {
		case key == s.keysKey:
			if st.SigningKeys, err = codec.SigningKeys(kv.Value); err != nil {
				return nil, fmt.Errorf("load etcd store %s: signing keys: %w", s.prefix, err)
			}
		case strings.HasPrefix(key, s.seenPrefix):
			si, err := codec.Sighting("", kv.Value)
			if err != nil {
				return nil, fmt.Errorf("load etcd store %s: %s: %w", s.prefix, key, err)
			}
			st.Sightings[key[len(s.seenPrefix):]] = si
		case key == s.revKey:
			if st.Revision, err = parseInt(kv.Value); err != nil {
				return nil, fmt.Errorf("load etcd store %s: revision: %w", s.prefix, err)
			}
		case key == s.defRevKey:
			if st.InventoryRevision, err = parseInt(kv.Value); err != nil {
				return nil, fmt.Errorf("load etcd store %s: inventory revision: %w", s.prefix, err)
			}
		case strings.HasPrefix(key, s.defPrefix):
			d, err := codec.Definition(key[len(s.defPrefix):], kv.Value)
			if err != nil {
				return nil, fmt.Errorf("load etcd store %s: %s: %w", s.prefix, key, err)
			}
			st.Inventory[key[len(s.defPrefix):]] = d
		case strings.HasPrefix(key, s.defssPrefix):
			ss, err := codec.ScaleSet(key[len(s.defssPrefix):], kv.Value)
			if err != nil {
				return nil, fmt.Errorf("load etcd store %s: %s: %w", s.prefix, key, err)
			}
			st.InventorySets[key[len(s.defssPrefix):]] = ss
		case strings.HasPrefix(key, s.sesPrefix):
			ses, err := codec.Session(key[len(s.sesPrefix):], kv.Value)
			if err != nil {
				return nil, fmt.Errorf("load etcd store %s: %s: %w", s.prefix, key, err)
			}
			st.Sessions[key[len(s.sesPrefix):]] = ses
		case strings.HasPrefix(key, s.evPrefix):
			e, err := decodeEvent(kv.Value)
			if err == nil && e.ID != key[len(s.evPrefix):] {
				err = fmt.Errorf("event %q is stored under its key", e.ID)
			}
			if err != nil {
				return nil, fmt.Errorf("load etcd store %s: %s: %w", s.prefix, key, err)
			}
			st.Events = append(st.Events, e)
		case strings.HasPrefix(key, s.incPrefix):
			n, err := parseInt(kv.Value)
			if err != nil {
				return nil, fmt.Errorf("load etcd store %s: %s: %w", s.prefix, key, err)
			}
			st.Incarnations[key[len(s.incPrefix):]] = n
		case strings.HasPrefix(key, s.vmPrefix):
			r, err := decodeVM(kv.Value)
			if err != nil {
				return nil, fmt.Errorf("load etcd store %s: %s: %w", s.prefix, key, err)
			}
			st.VMs[key[len(s.vmPrefix):]] = r
		case strings.HasPrefix(key, s.ssPrefix):
			r, err := decodeScaleSet(kv.Value)
			if err != nil {
				return nil, fmt.Errorf("load etcd store %s: %s: %w", s.prefix, key, err)
			}
			st.ScaleSets[key[len(s.ssPrefix):]] = r
		}
	}
	s.etcdRevs.add(st.Revision, resp.Header.Revision)
	return st, nil
}

// Commit applies c in one etcd transaction and returns the new revision.
// It returns ECONFLICT when c.Revision is not the current revision or
// c.Fence names a term that no longer leads, EINVALID when c would lower
// an incarnation, is malformed, or is larger than etcd accepts, ENOSPACE
// when etcd's database is full, and EUNAVAILABLE after Close or when etcd
// does not answer within RequestTimeout; in each case but the last
// nothing is written.
func (s *Store) Commit(ctx context.Context, c *forewarn.Change) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := c.Validate(); err != nil {
		return 0, err
	}
	if s.isClosed() {
		return 0, errClosed()
	}
	var fence *fence
	if c.Fence != "" {
		f, err := s.parseFence(c.Fence)
		if err != nil {
			return 0, err
		}
		fence = f
	}
	ops, err := s.writeOps(c)
	if err != nil {
		return 0, err
	}
	// One RequestTimeout bounds the whole commit.
	deadline := time.Now().Add(s.opts.RequestTimeout)
	if len(c.Incarnations) > 0 {
		if err := s.checkIncarnations(ctx, deadline, c); err != nil {
			return 0, err
		}
	}

	cmps := []clientv3.Cmp{s.revisionIs(c.Revision)}
	orElse := []clientv3.Op{clientv3.OpGet(s.revKey)}
	if fence != nil {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(fence.key), "=", fence.rev))
		orElse = append(orElse, clientv3.OpGet(fence.key, clientv3.WithKeysOnly()))
	}
	rev := c.Revision + 1
	// rev goes last: a follower knows a commit's events are complete when
	// it sees rev.
	ops = append(ops, clientv3.OpPut(s.revKey, strconv.FormatInt(rev, 10)))
	var resp *clientv3.TxnResponse
	err = s.callUntil(ctx, deadline, "commit", func(ctx context.Context) (err error) {
		resp, err = s.cli.Txn(ctx).If(cmps...).Then(ops...).Else(orElse...).Commit()
		return err
	})
	if err != nil {
		return 0, err
	}
	if !resp.Succeeded {
		return 0, s.conflict(c.Revision, fence, resp)
	}
	s.etcdRevs.add(rev, resp.Header.Revision)
	return rev, nil
}

// revisionIs is the condition that the store is at Forewarn revision rev.
func (s *Store) revisionIs(rev int64) clientv3.Cmp {
	if rev == 0 {
		return clientv3.Compare(clientv3.CreateRevision(s.revKey), "=", 0)
	}
	return clientv3.Compare(clientv3.Value(s.revKey), "=", strconv.FormatInt(rev, 10))
}

// conflict explains why a commit's transaction did not succeed, from the
// reads of its else branch.
func (s *Store) conflict(want int64, f *fence, resp *clientv3.TxnResponse) error {
	cur, err := revisionOf(resp.Responses[0].GetResponseRange().Kvs)
	if err != nil {
		return err
	}
	if cur != want {
		return forewarn.Errorf(forewarn.ECONFLICT, "change is against revision %d, store is at %d", want, cur)
	}
	if f != nil {
		kvs := resp.Responses[1].GetResponseRange().Kvs
		if len(kvs) == 0 || kvs[0].CreateRevision != f.rev {
			return forewarn.Errorf(forewarn.ECONFLICT, "leadership lost: the term of the change's fence no longer leads")
		}
	}
	// Both held when the else branch read them: the store moved on and
	// back, which it cannot; report the conflict all the same.
	return forewarn.Errorf(forewarn.ECONFLICT, "change is against revision %d, the store moved on", want)
}

// writeOps returns the puts and deletes of c, the revision aside. Events
// with one ID keep the last; an event both written and deleted is
// deleted, as in the other stores; every key appears once, as etcd
// requires in one transaction.
func (s *Store) writeOps(c *forewarn.Change) ([]clientv3.Op, error) {
	events := make(map[string]*forewarn.Event, len(c.Events))
	for _, e := range c.Events {
		events[e.ID] = e
	}
	deletes := make(map[string]bool, len(c.Deletes))
	for _, id := range c.Deletes {
		if id != "" { // no event has an empty ID
			deletes[id] = true
			delete(events, id)
		}
	}
	ops := make([]clientv3.Op, 0, len(events)+2*len(deletes)+len(c.Incarnations)+len(c.VMs)+len(c.ScaleSets)+
		len(c.Inventory)+len(c.InventorySets)+len(c.Sessions)+len(c.Sightings)+3)
	for _, id := range slices.Sorted(maps.Keys(events)) {
		b, err := json.Marshal(events[id].Normalized())
		if err != nil {
			return nil, forewarn.Errorf(forewarn.EINVALID, "event %s: %v", id, err)
		}
		ops = append(ops, clientv3.OpPut(s.evPrefix+id, string(b)))
	}
	for _, id := range slices.Sorted(maps.Keys(deletes)) {
		// An event's sighting leaves the store with it.
		ops = append(ops, clientv3.OpDelete(s.evPrefix+id), clientv3.OpDelete(s.seenPrefix+id))
	}
	sightings := make(map[string]*forewarn.Sighting, len(c.Sightings))
	for id, si := range c.Sightings {
		if !deletes[id] { // Validate refuses a nil one
			sightings[id] = si.Normalized()
		}
	}
	ops, err := namedOps(ops, s.seenPrefix, sightings)
	if err != nil {
		return nil, forewarn.Errorf(forewarn.EINVALID, "sighting of event %v", err)
	}
	if c.SigningKeys != nil {
		b, err := json.Marshal(c.SigningKeys.Normalized())
		if err != nil {
			return nil, forewarn.Errorf(forewarn.EINVALID, "signing keys: %v", err)
		}
		ops = append(ops, clientv3.OpPut(s.keysKey, string(b)))
	}
	for _, vm := range slices.Sorted(maps.Keys(c.Incarnations)) {
		ops = append(ops, clientv3.OpPut(s.incPrefix+vm, strconv.FormatInt(c.Incarnations[vm], 10)))
	}
	for _, vm := range slices.Sorted(maps.Keys(c.VMs)) {
		b, err := json.Marshal(c.VMs[vm].Normalized())
		if err != nil {
			return nil, forewarn.Errorf(forewarn.EINVALID, "VM record for %s: %v", vm, err)
		}
		ops = append(ops, clientv3.OpPut(s.vmPrefix+vm, string(b)))
	}
	for _, name := range slices.Sorted(maps.Keys(c.ScaleSets)) {
		b, err := json.Marshal(c.ScaleSets[name])
		if err != nil {
			return nil, forewarn.Errorf(forewarn.EINVALID, "scale set record for %s: %v", name, err)
		}
		ops = append(ops, clientv3.OpPut(s.ssPrefix+name, string(b)))
	}
	for _, name := range slices.Sorted(maps.Keys(c.Inventory)) {
		if c.Inventory[name] == nil && c.VMs[name] == nil {
			ops = append(ops, clientv3.OpDelete(s.vmPrefix+name)) // a VM's record leaves the store with it
		}
	}
	if ops, err = namedOps(ops, s.defPrefix, c.Inventory); err != nil {
		return nil, forewarn.Errorf(forewarn.EINVALID, "definition of %v", err)
	}
	if ops, err = namedOps(ops, s.defssPrefix, c.InventorySets); err != nil {
		return nil, forewarn.Errorf(forewarn.EINVALID, "scale set definition %v", err)
	}
	// Kept in UTC, as the other stores keep them.
	if ops, err = namedOps(ops, s.sesPrefix, codec.NormalizedSessions(c.Sessions)); err != nil {
		return nil, forewarn.Errorf(forewarn.EINVALID, "session %v", err)
	}
	if len(c.Inventory)+len(c.InventorySets) > 0 {
		ops = append(ops, clientv3.OpPut(s.defRevKey, strconv.FormatInt(c.Revision+1, 10)))
	}
	return ops, nil
}

// namedOps appends to ops a put of the JSON of each value of m under
// prefix and its name, and a delete of each nil one's key, sorted by
// name: the inventory's definitions, and sessions.
func namedOps[T any](ops []clientv3.Op, prefix string, m map[string]*T) ([]clientv3.Op, error) {
	names := slices.Sorted(maps.Keys(m))
	b, err := codec.Encode(names, m)
	if err != nil {
		return nil, err
	}
	for i, v := range b.Strings() {
		if m[names[i]] == nil {
			ops = append(ops, clientv3.OpDelete(prefix+names[i]))
			continue
		}
		ops = append(ops, clientv3.OpPut(prefix+names[i], v))
	}
	return ops, nil
}

// checkIncarnations reads the revision and the stored incarnations of
// the VMs c names, at one etcd revision, and refuses c with ECONFLICT
// when the store has moved on from c.Revision, or with EINVALID when c
// would lower an incarnation. The commit's transaction then only checks
// the revision: no incarnation changes without it.
func (s *Store) checkIncarnations(ctx context.Context, deadline time.Time, c *forewarn.Change) error {
	names := slices.Sorted(maps.Keys(c.Incarnations))
	reads := []clientv3.Op{clientv3.OpGet(s.revKey)}
	if len(names) <= maxGets {
		for _, vm := range names {
			reads = append(reads, clientv3.OpGet(s.incPrefix+vm))
		}
	} else {
		reads = append(reads, clientv3.OpGet(s.incPrefix, clientv3.WithPrefix()))
	}
	var resp *clientv3.TxnResponse
	err := s.callUntil(ctx, deadline, "commit", func(ctx context.Context) (err error) {
		resp, err = s.cli.Txn(ctx).Then(reads...).Commit()
		return err
	})
	if err != nil {
		return err
	}
	cur, err := revisionOf(resp.Responses[0].GetResponseRange().Kvs)
	if err != nil {
		return err
	}
	if cur != c.Revision {
		return forewarn.Errorf(forewarn.ECONFLICT, "change is against revision %d, store is at %d", c.Revision, cur)
	}
	for _, r := range resp.Responses[1:] {
		for _, kv := range r.GetResponseRange().Kvs {
			vm := string(kv.Key)[len(s.incPrefix):]
			n, ok := c.Incarnations[vm]
			if !ok {
				continue
			}
			old, err := parseInt(kv.Value)
			if err != nil {
				return fmt.Errorf("commit to etcd store %s: incarnation of %s: %w", s.prefix, vm, err)
			}
			if n < old {
				return forewarn.Errorf(forewarn.EINVALID, "incarnation of %s would go back from %d to %d", vm, old, n)
			}
		}
	}
	return nil
}

// Close ends the store's leases, so that its leadership and
// announcements go at once, stops its watches and followers, and closes
// the client. Later calls return EUNAVAILABLE; calling Close again
// returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	sessions := slices.Collect(maps.Keys(s.sessions))
	clear(s.sessions)
	s.announce = nil
	s.mu.Unlock()

	var wg sync.WaitGroup
	for _, sess := range sessions {
		wg.Go(func() { s.revoke(sess) })
	}
	wg.Wait()
	s.cancel()
	err := s.cli.Close()
	s.wg.Wait()
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("close etcd store %s: %w", s.prefix, err)
	}
	return nil
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func errClosed() error { return forewarn.Errorf(forewarn.EUNAVAILABLE, "store is closed") }

// call runs f with a context bounded by RequestTimeout, and returns its
// error classified: see classify.
func (s *Store) call(ctx context.Context, op string, f func(ctx context.Context) error) error {
	return s.callUntil(ctx, time.Now().Add(s.opts.RequestTimeout), op, f)
}

// callUntil is call with a deadline of the caller's, for an operation of
// several calls.
func (s *Store) callUntil(ctx context.Context, deadline time.Time, op string, f func(ctx context.Context) error) error {
	if s.isClosed() {
		return errClosed()
	}
	cctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if err := f(cctx); err != nil {
		if ctx.Err() == nil && cctx.Err() != nil && !s.isClosed() {
			// The call ran out of time, whatever etcd called the error
			// (it may report its own deadline as code Unknown).
			return forewarn.Errorf(forewarn.EUNAVAILABLE, "etcd unavailable (no quorum or unreachable): %s: no answer within %v: %v",
				op, s.opts.RequestTimeout, err)
		}
		return s.classify(ctx, op, err)
	}
	return nil
}

// classify maps an error of an etcd call made for op under ctx to one
// with a code: EUNAVAILABLE when the store closed, when etcd did not
// answer in time or has no quorum; ENOSPACE when etcd's database is
// full; EINVALID when etcd refused a request for its size. The caller's own context ending is returned as such;
// anything else is wrapped, with code EINTERNAL.
func (s *Store) classify(ctx context.Context, op string, err error) error {
	var fe *forewarn.Error
	switch {
	case errors.As(err, &fe):
		return err
	case s.isClosed():
		return errClosed()
	case ctx.Err() != nil:
		return fmt.Errorf("etcd %s: %w", op, ctx.Err())
	case errors.Is(err, rpctypes.ErrNoSpace):
		return forewarn.Errorf(forewarn.ENOSPACE,
			"etcd is out of space (%v): its --quota-backend-bytes is used up; compact and defragment it, or raise the quota", err)
	case tooLarge(err):
		return forewarn.Errorf(forewarn.EINVALID,
			"etcd refused the %s as too large (%v): raise etcd's --max-txn-ops and --max-request-bytes", op, err)
	case unavailable(err):
		return forewarn.Errorf(forewarn.EUNAVAILABLE, "etcd unavailable (no quorum or unreachable): %s: %v", op, err)
	}
	return fmt.Errorf("etcd %s: %w", op, err)
}

// tooLarge reports whether err is etcd (or gRPC) refusing a request for
// its number of operations or its size.
func tooLarge(err error) bool {
	switch {
	case errors.Is(err, rpctypes.ErrTooManyOps), errors.Is(err, rpctypes.ErrRequestTooLarge):
		return true
	case errors.Is(err, rpctypes.ErrNoSpace): // exhausted too, but not by this request
		return false
	}
	// gRPC's own limit on a message, the client's or the server's.
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.ResourceExhausted
}

// unavailable reports whether err means etcd could not answer: a timeout,
// a lost connection, no leader.
func unavailable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.Unavailable || ee.Code() == codes.DeadlineExceeded
	}
	st, ok := status.FromError(err)
	if ok && st.Code() == codes.Unknown && strings.Contains(st.Message(), "context deadline exceeded") {
		// The server's own copy of the call's deadline ran out just
		// before the client's: etcd reports that as code Unknown.
		return true
	}
	return ok && (st.Code() == codes.Unavailable || st.Code() == codes.DeadlineExceeded)
}

// revisionOf returns the revision held in kvs, the result of reading the
// rev key: 0 when it is missing.
func revisionOf(kvs []*mvccpb.KeyValue) (int64, error) {
	if len(kvs) == 0 {
		return 0, nil
	}
	n, err := parseInt(kvs[0].Value)
	if err != nil {
		return 0, fmt.Errorf("etcd store revision: %w", err)
	}
	return n, nil
}

func parseInt(b []byte) (int64, error) {
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("not a decimal number: %q", b)
	}
	return n, nil
}

func decodeEvent(b []byte) (*forewarn.Event, error) {
	var e forewarn.Event
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, err
	}
	return e.Normalized(), nil
}

func decodeVM(b []byte) (*forewarn.VMRecord, error) {
	var r forewarn.VMRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	return r.Normalized(), nil
}

func decodeScaleSet(b []byte) (*forewarn.ScaleSetRecord, error) {
	r := new(forewarn.ScaleSetRecord)
	if err := json.Unmarshal(b, r); err != nil {
		return nil, err
	}
	return r, nil
}

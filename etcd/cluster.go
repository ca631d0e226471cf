package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/forewarn/forewarn"
)

// Campaign blocks until the replica named name leads, or ctx ends or the
// store closes. Each campaign holds a lease of its own (LeaseTTL, kept
// alive while the store reaches etcd) and an election key under
// leader/ on it, in etcd's concurrency.Election; the oldest key leads.
// The term ends (Done closes) when it resigns, the store closes, or the
// lease is lost: etcd was not reached for LeaseTTL. Campaign returns
// EUNAVAILABLE when the lease cannot be granted within RequestTimeout or
// is lost while waiting, and EINVALID for an empty name.
func (s *Store) Campaign(ctx context.Context, name string) (forewarn.Term, error) {
	if name == "" {
		return nil, forewarn.Errorf(forewarn.EINVALID, "campaign without a replica name")
	}
	sess, err := s.newSession(ctx, "campaign")
	if err != nil {
		return nil, err
	}
	// The campaign ends with ctx, the store, or the lease.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()
	defer context.AfterFunc(sess.Ctx(), cancel)()

	el := concurrency.NewElection(sess, strings.TrimSuffix(s.leaderPrefix, "/"))
	// Election.Campaign, when its context ends, resigns with the
	// client's context, which waits for etcd however long it is gone: it
	// runs on its own, and is let go.
	won := make(chan error, 1)
	go func() { won <- el.Campaign(cctx, name) }()
	select {
	case err = <-won:
	case <-cctx.Done():
		err = cctx.Err()
	}
	if err == nil {
		err = s.stillLeads(ctx, el)
	}
	if err != nil {
		s.endSession(sess)
		switch {
		case ctx.Err() != nil:
			return nil, fmt.Errorf("etcd campaign: %w", ctx.Err())
		case s.isClosed():
			return nil, errClosed()
		case sess.Ctx().Err() != nil:
			return nil, forewarn.Errorf(forewarn.EUNAVAILABLE, "etcd campaign: lease lost while waiting to lead (etcd unreachable or without a quorum)")
		}
		return nil, s.classify(ctx, "campaign", err)
	}
	return &term{s: s, sess: sess, el: el, fence: el.Key() + "@" + strconv.FormatInt(el.Rev(), 10)}, nil
}

// stillLeads checks that the election key el won with still exists as it
// was created: Election.Campaign can return after the lease under it
// expired.
func (s *Store) stillLeads(ctx context.Context, el *concurrency.Election) error {
	var resp *clientv3.GetResponse
	err := s.call(ctx, "campaign", func(ctx context.Context) (err error) {
		resp, err = s.cli.Get(ctx, el.Key(), clientv3.WithKeysOnly())
		return err
	})
	if err != nil {
		return err
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != el.Rev() {
		return forewarn.Errorf(forewarn.EUNAVAILABLE, "etcd campaign: lease lost while waiting to lead")
	}
	return nil
}

// term is a leadership won by Campaign.
type term struct {
	s     *Store
	sess  *concurrency.Session
	el    *concurrency.Election
	fence string
}

// Done is closed when the term's lease ends: resigned, store closed, or
// expired.
func (t *term) Done() <-chan struct{} { return t.sess.Done() }

// Fence returns "<election key>@<its create revision>": a Commit with it
// checks that the key still exists as created, so a deposed leader's
// change (its key deleted by Resign or by its lease expiring) is refused.
func (t *term) Fence() string { return t.fence }

// Resign deletes the election key and revokes the term's lease. The term
// ends either way; an error (EUNAVAILABLE: etcd did not answer) means
// etcd may hold the key until the lease expires.
func (t *term) Resign(ctx context.Context) error {
	err := t.s.call(ctx, "resign", func(ctx context.Context) error { return t.el.Resign(ctx) })
	t.s.endSession(t.sess)
	return err
}

// fence is a parsed Term.Fence: the election key and its create
// revision.
type fence struct {
	key string
	rev int64
}

// parseFence parses a fence made by a term of this store's prefix.
func (s *Store) parseFence(f string) (*fence, error) {
	i := strings.LastIndexByte(f, '@')
	if i < 0 || !strings.HasPrefix(f[:i], s.leaderPrefix) {
		return nil, forewarn.Errorf(forewarn.EINVALID, "fence %q is not a term of this store", f)
	}
	rev, err := strconv.ParseInt(f[i+1:], 10, 64)
	if err != nil || rev <= 0 {
		return nil, forewarn.Errorf(forewarn.EINVALID, "fence %q is not a term of this store", f)
	}
	return &fence{key: f[:i], rev: rev}, nil
}

// Announce publishes r under replicas/<r.Name>, replacing the previous
// announcement of that name. Announcements are on one lease of the
// store, granted at the first Announce (and again after it is lost): they
// lapse LeaseTTL after the store stops reaching etcd, and go at once
// when it closes. It returns EINVALID for an empty name and EUNAVAILABLE
// when etcd does not answer within RequestTimeout.
func (s *Store) Announce(ctx context.Context, r forewarn.Replica) error {
	if r.Name == "" {
		return forewarn.Errorf(forewarn.EINVALID, "announcement without a replica name")
	}
	b, err := json.Marshal(r)
	if err != nil {
		return forewarn.Errorf(forewarn.EINVALID, "announcement of %s: %v", r.Name, err)
	}
	sess, err := s.announceSession(ctx)
	if err != nil {
		return err
	}
	return s.call(ctx, "announce", func(ctx context.Context) error {
		_, err := s.cli.Put(ctx, s.replicasPrefix+r.Name, string(b), clientv3.WithLease(sess.Lease()))
		return err
	})
}

// announceSession returns the lease of announcements, granting a new one
// when there is none or it was lost.
func (s *Store) announceSession(ctx context.Context) (*concurrency.Session, error) {
	s.mu.Lock()
	sess := s.announce
	s.mu.Unlock()
	if sess != nil && sess.Ctx().Err() == nil {
		return sess, nil
	}
	sess, err := s.newSession(ctx, "announce")
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.announce; old != nil && old != sess && old.Ctx().Err() == nil {
		// Another Announce got there first: use its lease.
		go s.endSession(sess)
		return old, nil
	}
	s.announce = sess
	return sess, nil
}

// Replicas returns the store's revision, the leader's name, and every
// live announcement sorted by name, read at one etcd revision. It
// returns EUNAVAILABLE when etcd does not answer within RequestTimeout.
func (s *Store) Replicas(ctx context.Context) (*forewarn.ClusterStatus, error) {
	var resp *clientv3.TxnResponse
	err := s.call(ctx, "replicas", func(ctx context.Context) (err error) {
		resp, err = s.cli.Txn(ctx).Then(
			clientv3.OpGet(s.revKey),
			clientv3.OpGet(s.leaderPrefix, clientv3.WithFirstCreate()...),
			clientv3.OpGet(s.replicasPrefix, clientv3.WithPrefix()),
		).Commit()
		return err
	})
	if err != nil {
		return nil, err
	}
	st := &forewarn.ClusterStatus{Replicas: []forewarn.Replica{}}
	if st.Revision, err = revisionOf(resp.Responses[0].GetResponseRange().Kvs); err != nil {
		return nil, err
	}
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		st.Leader = string(kvs[0].Value)
	}
	for _, kv := range resp.Responses[2].GetResponseRange().Kvs {
		var r forewarn.Replica
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			return nil, fmt.Errorf("etcd replicas: %s: %w", kv.Key, err)
		}
		r.Started, r.Updated = r.Started.UTC(), r.Updated.UTC()
		st.Replicas = append(st.Replicas, r)
	}
	slices.SortFunc(st.Replicas, func(a, b forewarn.Replica) int { return strings.Compare(a.Name, b.Name) })
	return st, nil
}

// newSession grants a lease of LeaseTTL within RequestTimeout and keeps
// it alive in a session, which the store ends when it closes.
func (s *Store) newSession(ctx context.Context, op string) (*concurrency.Session, error) {
	ttl := int64(s.opts.LeaseTTL.Seconds())
	var lease *clientv3.LeaseGrantResponse
	err := s.call(ctx, op, func(ctx context.Context) (err error) {
		lease, err = s.cli.Grant(ctx, ttl)
		return err
	})
	if err != nil {
		return nil, err
	}
	sess, err := concurrency.NewSession(s.cli, concurrency.WithTTL(int(ttl)), concurrency.WithLease(lease.ID))
	if err != nil {
		s.revokeLease(lease.ID)
		return nil, s.classify(ctx, op, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		go s.revoke(sess)
		return nil, errClosed()
	}
	s.sessions[sess] = struct{}{}
	return sess, nil
}

// endSession stops renewing sess and revokes its lease, deleting its
// keys.
func (s *Store) endSession(sess *concurrency.Session) {
	s.mu.Lock()
	_, live := s.sessions[sess]
	delete(s.sessions, sess)
	if s.announce == sess {
		s.announce = nil
	}
	s.mu.Unlock()
	if live {
		s.revoke(sess)
	}
}

// revoke stops renewing sess and revokes its lease within RequestTimeout;
// if etcd does not answer, the lease expires on its own.
func (s *Store) revoke(sess *concurrency.Session) {
	sess.Orphan()
	s.revokeLease(sess.Lease())
}

func (s *Store) revokeLease(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.RequestTimeout)
	defer cancel()
	_, _ = s.cli.Revoke(ctx, id)
}

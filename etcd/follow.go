package etcd

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/internal/codec"
	"github.com/forewarn/forewarn/internal/watch"
)

// Log attribute keys.
const (
	logPrefix   = "prefix"
	logErr      = "err"
	logRevision = "revision"
	logSince    = "since"
	logWant     = "want"
	logKey      = "key"
	logCompact  = "compacted"
	logSource   = "component"
)

const (
	// maxRevisions is how many Forewarn revisions a store remembers the
	// etcd revision of: a Follow from an older one reloads.
	maxRevisions = 4096
	// A follower that leaves more than maxQueued commits, or commits of
	// more than maxWeight (see watch.Weight), unread is told to reload, so a
	// stuck follower does not hold the fleet's history in memory.
	maxQueued = 4096
	maxWeight = 1 << 20
	// retryDelay is the pause before a watch that etcd ended (no leader)
	// is opened again.
	retryDelay = 200 * time.Millisecond
)

// revisionMap remembers the etcd revision at which the store was at each
// of its newest maxRevisions Forewarn revisions, as Load, Commit and the
// watches learn them. The zero value is empty and ready to use.
type revisionMap struct {
	mu   sync.Mutex
	m    map[int64]int64
	ring [maxRevisions]int64 // the keys of m, in the order added
	next int                 // where the next key goes in ring
}

// add records that the store was at Forewarn revision rev at etcd
// revision etcdRev. Any etcd revision from the commit of rev up to the
// one before the next commit is right; the first one recorded stays.
func (r *revisionMap) add(rev, etcdRev int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[int64]int64)
	}
	if _, ok := r.m[rev]; ok {
		return
	}
	if len(r.m) == maxRevisions {
		delete(r.m, r.ring[r.next])
	}
	r.m[rev] = etcdRev
	r.ring[r.next] = rev
	r.next = (r.next + 1) % maxRevisions
}

// get returns the etcd revision recorded for rev.
func (r *revisionMap) get(rev int64) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, ok := r.m[rev]
	return n, ok
}

// Follow returns a channel that receives every commit after revision
// since, this store's and other processes', one Update per commit in
// revision order, as forewarn.Store describes. It is an etcd watch of the
// prefix from the etcd revision at which the store was at since, which
// the store remembers for its newest revisions (those it loaded,
// committed or saw committed) and can read for the current one. It sends
// a Reload and closes the channel when since is older, when etcd has
// compacted the revisions it needs, when etcd cannot be read to start,
// and when the reader leaves more than 4,096 commits unread. The channel
// closes when ctx ends or the store closes.
func (s *Store) Follow(ctx context.Context, since int64) <-chan *forewarn.Update {
	ch := make(chan *forewarn.Update, 16)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		close(ch)
		return ch
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer close(ch)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(s.ctx, cancel)()
		f := &follower{s: s, out: ch, next: since + 1}
		f.run(ctx, since)
	}()
	return ch
}

// follower turns the events of an etcd watch into Updates.
type follower struct {
	s   *Store
	out chan<- *forewarn.Update
	// next is the Forewarn revision the follower expects next; from is
	// the etcd revision to watch from again, one past the last whole
	// commit seen.
	next, from int64
	// queue holds the commits seen and not yet sent; weight sums theirs.
	queue  []*forewarn.Update
	weight int
	// group is the etcd revision whose events are being gathered into
	// change; a commit's last event is the write of rev.
	group  int64
	change *forewarn.Change
}

func (f *follower) run(ctx context.Context, since int64) {
	start, ok := f.s.startOf(ctx, since)
	if !ok {
		f.reload(ctx)
		return
	}
	f.from = start + 1
	wctx := clientv3.WithRequireLeader(ctx)
	for {
		wch := f.s.cli.Watch(wctx, f.s.prefix, clientv3.WithPrefix(), clientv3.WithRev(f.from))
		if !f.serve(ctx, wch) || !sleep(ctx, retryDelay) {
			return
		}
		f.group, f.change = 0, nil
	}
}

// startOf returns the etcd revision at which the store was at Forewarn
// revision since, from the revision map, or from reading the rev key when
// since is the current revision or 0.
func (s *Store) startOf(ctx context.Context, since int64) (int64, bool) {
	if r, ok := s.etcdRevs.get(since); ok {
		return r, true
	}
	var resp *clientv3.GetResponse
	err := s.call(ctx, "follow", func(ctx context.Context) (err error) {
		resp, err = s.cli.Get(ctx, s.revKey)
		return err
	})
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("etcd follow could not start; the follower reloads", slog.Int64(logSince, since), slog.Any(logErr, err))
		}
		return 0, false
	}
	cur, err := revisionOf(resp.Kvs)
	switch {
	case err != nil:
		s.log.Error("etcd follow could not start; the follower reloads", slog.Int64(logSince, since), slog.Any(logErr, err))
		return 0, false
	case cur == since:
		s.etcdRevs.add(cur, resp.Header.Revision)
		return resp.Header.Revision, true
	case since == 0:
		// From the start: the first commit created the rev key.
		return resp.Kvs[0].CreateRevision - 1, true
	}
	return 0, false
}

// serve sends the commits of one etcd watch. It reports whether the
// watch should be opened again from f.from: etcd ended it (no leader),
// rather than the follower being done.
func (f *follower) serve(ctx context.Context, wch clientv3.WatchChan) bool {
	for {
		var out chan<- *forewarn.Update
		var head *forewarn.Update
		if len(f.queue) > 0 {
			out, head = f.out, f.queue[0]
		}
		select {
		case out <- head:
			f.queue[0] = nil
			f.queue = f.queue[1:]
			f.weight -= watch.Weight(head)
		case wr, ok := <-wch:
			switch {
			case !ok:
				return ctx.Err() == nil
			case wr.CompactRevision != 0:
				f.s.log.Info("etcd compacted the revisions a follower needs; it reloads",
					slog.Int64(logRevision, f.next-1), slog.Int64(logCompact, wr.CompactRevision))
				f.reload(ctx)
				return false
			case wr.Err() != nil:
				f.s.log.Warn("etcd follow watch ended; watching again", slog.Any(logErr, wr.Err()))
				return true
			}
			if !f.gather(wr.Events) {
				f.reload(ctx)
				return false
			}
			if len(f.queue) > 1 && (len(f.queue) > maxQueued || f.weight > maxWeight) {
				f.s.log.Warn("a follower fell behind; it reloads", slog.Int64(logRevision, f.next-1-int64(len(f.queue))))
				f.reload(ctx)
				return false
			}
		case <-ctx.Done():
			return false
		}
	}
}

// gather adds the commits among events to the queue. It reports false
// when the follower must reload: a commit is missing or unreadable.
func (f *follower) gather(events []*clientv3.Event) bool {
	for _, ev := range events {
		kv := ev.Kv
		if kv.ModRevision != f.group {
			// A new etcd revision; one gathered without a write of rev
			// was no commit (an election or an announcement).
			f.group, f.change = kv.ModRevision, nil
		}
		key := string(kv.Key)
		if key != f.s.revKey {
			if err := f.add(ev); err != nil {
				f.s.log.Error("unreadable commit in etcd; the follower reloads", slog.String(logKey, key), slog.Any(logErr, err))
				return false
			}
			continue
		}
		if ev.Type != mvccpb.PUT {
			f.s.log.Error("the etcd store's revision was deleted; the follower reloads")
			return false
		}
		rev, err := parseInt(kv.Value)
		if err != nil {
			f.s.log.Error("etcd store revision is not a number; the follower reloads", slog.Any(logErr, err))
			return false
		}
		f.s.etcdRevs.add(rev, kv.ModRevision)
		c := f.change
		if c == nil {
			c = &forewarn.Change{}
		}
		f.group, f.change = 0, nil
		f.from = kv.ModRevision + 1
		switch {
		case rev < f.next:
			continue // before since
		case rev > f.next:
			f.s.log.Error("a follower missed commits; it reloads", slog.Int64(logRevision, rev), slog.Int64(logWant, f.next))
			return false
		}
		c.Revision = rev - 1
		u := &forewarn.Update{Revision: rev, Change: c}
		f.queue = append(f.queue, u)
		f.weight += watch.Weight(u)
		f.next++
	}
	return true
}

// add adds the write ev to the change being gathered.
func (f *follower) add(ev *clientv3.Event) error {
	s, key := f.s, string(ev.Kv.Key)
	if f.change == nil {
		f.change = &forewarn.Change{}
	}
	c := f.change
	put := ev.Type == mvccpb.PUT
	switch {
	case strings.HasPrefix(key, s.evPrefix):
		if !put {
			c.Deletes = append(c.Deletes, key[len(s.evPrefix):])
			return nil
		}
		e, err := decodeEvent(ev.Kv.Value)
		if err != nil {
			return err
		}
		c.Events = append(c.Events, e)
	case strings.HasPrefix(key, s.defPrefix):
		return addNamed(&c.Inventory, key[len(s.defPrefix):], ev, codec.Definition)
	case strings.HasPrefix(key, s.defssPrefix):
		return addNamed(&c.InventorySets, key[len(s.defssPrefix):], ev, codec.ScaleSet)
	case strings.HasPrefix(key, s.sesPrefix):
		return addNamed(&c.Sessions, key[len(s.sesPrefix):], ev, codec.Session)
	case !put:
		// Nothing else is deleted by a commit but sightings, with their
		// events.
	case key == s.keysKey:
		k, err := codec.SigningKeys(ev.Kv.Value)
		if err != nil {
			return err
		}
		c.SigningKeys = k
	case strings.HasPrefix(key, s.seenPrefix):
		si, err := codec.Sighting("", ev.Kv.Value)
		if err != nil {
			return err
		}
		if c.Sightings == nil {
			c.Sightings = make(map[string]*forewarn.Sighting)
		}
		c.Sightings[key[len(s.seenPrefix):]] = si
	case strings.HasPrefix(key, s.incPrefix):
		n, err := parseInt(ev.Kv.Value)
		if err != nil {
			return err
		}
		if c.Incarnations == nil {
			c.Incarnations = make(map[string]int64)
		}
		c.Incarnations[key[len(s.incPrefix):]] = n
	case strings.HasPrefix(key, s.vmPrefix):
		r, err := decodeVM(ev.Kv.Value)
		if err != nil {
			return err
		}
		if c.VMs == nil {
			c.VMs = make(map[string]*forewarn.VMRecord)
		}
		c.VMs[key[len(s.vmPrefix):]] = r
	case strings.HasPrefix(key, s.ssPrefix):
		r, err := decodeScaleSet(ev.Kv.Value)
		if err != nil {
			return err
		}
		if c.ScaleSets == nil {
			c.ScaleSets = make(map[string]*forewarn.ScaleSetRecord)
		}
		c.ScaleSets[key[len(s.ssPrefix):]] = r
	}
	return nil
}

// addNamed sets (*m)[name], making *m when nil, to the value the write
// ev put, decoded, or to nil when ev deleted it: a removal.
func addNamed[T any](m *map[string]*T, name string, ev *clientv3.Event, decode func(string, []byte) (*T, error)) error {
	var v *T
	if ev.Type == mvccpb.PUT {
		var err error
		if v, err = decode(name, ev.Kv.Value); err != nil {
			return err
		}
	}
	if *m == nil {
		*m = make(map[string]*T)
	}
	(*m)[name] = v
	return nil
}

// reload sends the follower a Reload, unless ctx ends first.
func (f *follower) reload(ctx context.Context) {
	select {
	case f.out <- &forewarn.Update{Reload: true}:
	case <-ctx.Done():
	}
}

// sleep waits for d, and reports false if ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

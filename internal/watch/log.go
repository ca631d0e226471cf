// Package watch keeps the recent commits of a store that lives in one
// process, for its followers: the Follow that mem and bolt share. Its
// Weight is also how the etcd store bounds a follower's queue.
package watch

import (
	"context"
	"slices"
	"sync"

	"github.com/forewarn/forewarn"
)

// Log keeps a process's recent commits for its followers: the Follow of a
// store that lives in one process. It holds commits until their weight
// (one per event, incarnation and record) passes a bound, then forgets
// the oldest; a follower that needs a forgotten commit is told to reload.
// Once every follower has taken a commit, the log keeps it only while
// the kept weight is under a smaller bound, for followers still to come:
// a fleet-wide event's commit is not held after its followers have it.
// The zero Log is empty at revision 0; Reset places it at a store's
// revision.
type Log struct {
	mu     sync.Mutex
	closed bool
	// base is the newest revision that is not kept: the log holds the
	// commits base+1 through base+len(ups).
	base int64
	ups  []*forewarn.Update
	// weight is the sum of the kept commits' weights.
	weight int
	// early holds commits appended ahead of an earlier one still being
	// written, until the gap fills.
	early map[int64]*forewarn.Update
	// wake is closed and replaced when a commit is added or the log
	// closes.
	wake chan struct{}
	// readers holds each follower's next revision.
	readers map[*int64]struct{}
}

// Bounds of what a Log keeps: enough that a follower a few commits behind
// never reloads, small enough that a fleet-wide event is not kept long.
const (
	maxKept   = 4096
	maxWeight = 1 << 20
	// maxTaken bounds the weight kept of commits every follower has
	// taken.
	maxTaken = 1 << 12
)

// Reset empties the log at revision rev, the store's current revision.
func (l *Log) Reset(rev int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.base, l.ups, l.weight, l.early = rev, nil, 0, nil
	l.wakeLocked()
}

// Append adds the commit u. Commits may be appended out of order; each is
// delivered once those before it are in.
func (l *Log) Append(u *forewarn.Update) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	head := l.base + int64(len(l.ups))
	if u.Revision <= head {
		return
	}
	if u.Revision > head+1 {
		if l.early == nil {
			l.early = map[int64]*forewarn.Update{}
		}
		l.early[u.Revision] = u
		return
	}
	for u != nil {
		l.ups = append(l.ups, u)
		l.weight += Weight(u)
		next := u.Revision + 1
		u = l.early[next]
		delete(l.early, next)
	}
	l.trimLocked()
	l.wakeLocked()
}

// trimLocked forgets the oldest commits while the log holds too many,
// or weighs too much, or weighs more than maxTaken in commits every
// follower has taken. The newest commit stays until every follower has
// it.
func (l *Log) trimLocked() {
	taken := l.base + int64(len(l.ups)) // what every follower has
	for r := range l.readers {
		taken = min(taken, *r-1)
	}
	for len(l.ups) > 0 {
		old := l.ups[0].Revision <= taken
		if !(len(l.ups) > 1 && (len(l.ups) > maxKept || l.weight > maxWeight) || old && l.weight > maxTaken) {
			break
		}
		l.weight -= Weight(l.ups[0])
		l.ups[0] = nil
		l.ups = l.ups[1:]
		l.base++
	}
	if len(l.ups) == 0 {
		l.ups = nil // the array the forgotten ones held
	}
}

func (l *Log) wakeLocked() {
	if l.wake != nil {
		close(l.wake)
		l.wake = nil
	}
}

// Weight is what a commit costs to keep, roughly in map entries: one
// for the commit and one for each event (and each of its resources and
// approvals), delete, incarnation, record and definition. Followers
// bound what they queue by it.
func Weight(u *forewarn.Update) int {
	c := u.Change
	w := 1 + len(c.Incarnations) + len(c.VMs) + len(c.ScaleSets) + len(c.Deletes) +
		len(c.Inventory) + len(c.InventorySets)
	for _, e := range c.Events {
		w += 1 + len(e.Resources) + len(e.Approvals)
	}
	for _, s := range c.Sessions {
		if s != nil {
			w++
			for i := range s.Hosts {
				w += 1 + len(s.Hosts[i].VMs) + len(s.Hosts[i].Events)
			}
		}
	}
	return w
}

// Close ends every follower.
func (l *Log) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.ups, l.early = nil, nil
	l.wakeLocked()
}

// Follow returns a channel of every commit after revision since, as
// forewarn.Store's Follow describes.
func (l *Log) Follow(ctx context.Context, since int64) <-chan *forewarn.Update {
	ch := make(chan *forewarn.Update, 16)
	next := new(int64)
	*next = since + 1
	l.mu.Lock()
	if l.readers == nil {
		l.readers = map[*int64]struct{}{}
	}
	l.readers[next] = struct{}{}
	l.mu.Unlock()
	go func() {
		defer close(ch)
		defer func() {
			l.mu.Lock()
			delete(l.readers, next)
			l.trimLocked()
			l.mu.Unlock()
		}()
		for {
			l.mu.Lock()
			if l.closed {
				l.mu.Unlock()
				return
			}
			var batch []*forewarn.Update
			reload := false
			if head := l.base + int64(len(l.ups)); *next <= head {
				if *next <= l.base {
					reload = true
				} else {
					// A copy: Append clears forgotten slots.
					batch = slices.Clone(l.ups[*next-l.base-1:])
				}
			}
			if l.wake == nil {
				l.wake = make(chan struct{})
			}
			wake := l.wake
			l.mu.Unlock()
			if reload {
				select {
				case ch <- &forewarn.Update{Reload: true}:
				case <-ctx.Done():
				}
				return
			}
			for _, u := range batch {
				select {
				case ch <- u:
				case <-ctx.Done():
					return
				}
				l.mu.Lock()
				*next = u.Revision + 1
				l.trimLocked()
				l.mu.Unlock()
			}
			if len(batch) > 0 {
				continue // more may have come while sending
			}
			select {
			case <-wake:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch
}

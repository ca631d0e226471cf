// Package watch fans a store's newest revision out to its watchers, the
// part of forewarn.Store.Watch that every backend shares.
package watch

import (
	"context"
	"sync"
)

// Revisions hands each watcher the newest revision published. A slow
// watcher finds only the latest one; publishing never blocks. The zero
// value is ready to use.
type Revisions struct {
	mu     sync.Mutex
	closed bool
	newest int64
	chans  map[chan int64]func() bool // channel → stop its context.AfterFunc
}

// Watch returns a channel (buffer 1) that receives every newer revision
// published, and is closed when ctx ends or Close is called.
func (r *Revisions) Watch(ctx context.Context) <-chan int64 {
	ch := make(chan int64, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		close(ch)
		return ch
	}
	if r.chans == nil {
		r.chans = map[chan int64]func() bool{}
	}
	r.chans[ch] = context.AfterFunc(ctx, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if _, ok := r.chans[ch]; ok {
			delete(r.chans, ch)
			close(ch)
		}
	})
	return ch
}

// Publish hands rev to every watcher, unless a revision as new was
// published already.
func (r *Revisions) Publish(rev int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rev <= r.newest {
		return
	}
	r.newest = rev
	for ch := range r.chans {
		select { // replace any revision the watcher has not taken
		case <-ch:
		default:
		}
		ch <- rev
	}
}

// Close closes every watch channel; later Watch calls get a closed one.
func (r *Revisions) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for ch, stop := range r.chans {
		stop()
		close(ch)
	}
	clear(r.chans)
}

// Len reports how many watchers are registered (for tests).
func (r *Revisions) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.chans)
}

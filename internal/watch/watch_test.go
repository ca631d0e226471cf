package watch

import (
	"context"
	"testing"
)

func TestPublishCoalescesAndCloses(t *testing.T) {
	var r Revisions
	ch := r.Watch(t.Context())
	r.Publish(1)
	r.Publish(2)
	r.Publish(2) // not newer: nothing
	if got := <-ch; got != 2 {
		t.Fatalf("a slow watcher got %d, want the newest, 2", got)
	}
	select {
	case v := <-ch:
		t.Fatalf("extra revision %d", v)
	default:
	}
	r.Close()
	if _, ok := <-ch; ok {
		t.Fatal("channel open after Close")
	}
	if _, ok := <-r.Watch(t.Context()); ok {
		t.Fatal("Watch after Close gave an open channel")
	}
}

// TestWatchRemoved checks that a watcher whose context ends is dropped,
// so watchers do not pile up.
func TestWatchRemoved(t *testing.T) {
	var r Revisions
	defer r.Close()
	ctx, cancel := context.WithCancel(t.Context())
	w := r.Watch(ctx)
	r.Watch(t.Context())
	cancel()
	for range w {
	}
	if n := r.Len(); n != 1 {
		t.Errorf("%d watchers registered after one of two canceled, want 1", n)
	}
}

package mem

import (
	"context"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/storetest"
)

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) forewarn.Store { return New() })
}

// TestWatchRemoved checks that a watcher whose context ends is dropped,
// so watchers do not pile up.
func TestWatchRemoved(t *testing.T) {
	s := New()
	defer s.Close()
	ctx, cancel := context.WithCancel(t.Context())
	w := s.Watch(ctx)
	s.Watch(t.Context())
	cancel()
	for range w {
	}
	n := s.revs.Len()
	if n != 1 {
		t.Errorf("%d watchers registered after one of two canceled, want 1", n)
	}
}

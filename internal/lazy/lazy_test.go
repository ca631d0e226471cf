package lazy

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestGet: the first Get makes the value, later ones return it without
// making another, and of racing first Gets every one returns the value
// stored first, whichever made it.
func TestGet(t *testing.T) {
	var v Value[int]
	var made atomic.Int32
	mk := func() *int { made.Add(1); return new(int) }
	first := v.Get(mk)
	if v.Get(mk) != first || made.Load() != 1 {
		t.Fatalf("a second Get made %d values in all, or another value; want 1 and the first", made.Load())
	}

	var race Value[int]
	got := make([]*int, 8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() { got[i] = race.Get(func() *int { return new(int) }) })
	}
	wg.Wait()
	for i, p := range got {
		if p != race.Load() {
			t.Errorf("Get %d returned %p, want the stored %p", i, p, race.Load())
		}
	}
}

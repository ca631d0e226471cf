package signal

import (
	"sync"
	"testing"
)

// TestSignal checks that a signal's channel is made when first asked,
// shared by every waiter, and closed when the signal fires, whether
// asked before or after.
func TestSignal(t *testing.T) {
	var s Signal
	if s.c.Load() != nil {
		t.Fatal("a new signal holds a channel before anyone asked")
	}
	var wg sync.WaitGroup
	chans := make([]<-chan struct{}, 8)
	for i := range chans {
		wg.Go(func() { chans[i] = s.C() })
	}
	wg.Wait()
	for _, c := range chans[1:] {
		if c != chans[0] {
			t.Fatal("two waiters got different channels")
		}
	}
	select {
	case <-chans[0]:
		t.Fatal("closed before the signal fired")
	default:
	}
	if s.Fired() {
		t.Fatal("Fired before Fire")
	}
	s.Fire()
	s.Fire() // twice is harmless
	<-chans[0]
	if !s.Fired() {
		t.Fatal("not Fired after Fire")
	}
	var late Signal
	late.Fire()
	<-late.C() // fired before anyone asked: closed at once
}

// TestFireRacesWait fires while others wait, for the race detector:
// every waiter is released.
func TestFireRacesWait(t *testing.T) {
	for range 100 {
		var s Signal
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() { <-s.C() })
		}
		s.Fire()
		wg.Wait()
	}
}

package ratelimit

import (
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestAllow: each State has its own burst, spent and given back at the
// rate; a zero State has a whole burst whenever it is made; Reset gives
// it back; a nil Limiter allows everything.
func TestAllow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(5, 5)
		var a, b State
		burst := func(what string, st *State) {
			t.Helper()
			for i := range 5 {
				if !l.Allow(st) {
					t.Fatalf("%s: request %d refused", what, i+1)
				}
			}
			if l.Allow(st) {
				t.Fatalf("%s: request 6 allowed", what)
			}
		}
		burst("a", &a)
		burst("b, beside a spent one", &b)
		time.Sleep(199 * time.Millisecond)
		if l.Allow(&a) {
			t.Fatal("a allowed after 199ms")
		}
		time.Sleep(time.Millisecond)
		if !l.Allow(&a) || l.Allow(&a) {
			t.Fatal("after 200ms a is not allowed exactly one request")
		}
		time.Sleep(time.Hour)
		var c State // made an hour after the Limiter
		burst("c, new", &c)
		// A Limiter made later (a new rate) reads a state spent under
		// l as spent far ahead, until Reset.
		burst("a again", &a)
		l2 := New(5, 5)
		if l2.Allow(&a) {
			t.Fatal("a, spent under l, allowed by a new Limiter before Reset")
		}
		a.Reset()
		if !l2.Allow(&a) {
			t.Fatal("a refused by the new Limiter after Reset")
		}
		var nl *Limiter
		for range 100 {
			if !nl.Allow(&a) {
				t.Fatal("a nil Limiter refused a request")
			}
		}
	})
}

// TestForRate: rates that are not positive finite numbers give no
// Limiter; a tiny rate's interval does not overflow.
func TestForRate(t *testing.T) {
	for _, r := range []float64{0, -1, math.NaN(), math.Inf(1), math.Inf(-1)} {
		if l := ForRate(r); l != nil {
			t.Errorf("ForRate(%v) = %+v, want nil", r, l)
		}
	}
	l := ForRate(1e-12)
	var st State
	if !l.Allow(&st) || l.Allow(&st) {
		t.Fatal("at 1e-12/s: want one request, then none")
	}
	// A burst that would span more than a Duration holds is capped, not
	// wrapped round to a negative span that refuses everything.
	l = New(1e-9, 100)
	st.Reset()
	if !l.Allow(&st) {
		t.Fatal("at 1e-9/s in bursts of 100: the first request refused")
	}
}

// TestAllowConcurrent: a burst is spent exactly once, however many
// requests of one VM race for it.
func TestAllowConcurrent(t *testing.T) {
	l := New(1e-3, 100) // nothing comes back during the test
	var st State
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for range 1000 {
		wg.Go(func() {
			if l.Allow(&st) {
				allowed.Add(1)
			}
		})
	}
	wg.Wait()
	if n := allowed.Load(); n != 100 {
		t.Fatalf("%d requests allowed, want the burst of 100", n)
	}
}

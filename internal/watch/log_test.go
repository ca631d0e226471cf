package watch

import (
	"context"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
)

func up(rev int64, incs int) *forewarn.Update {
	c := &forewarn.Change{Revision: rev - 1, Incarnations: map[string]int64{}}
	for i := range incs {
		c.Incarnations[string(rune('a'+i%26))+time.Duration(i).String()] = rev
	}
	return &forewarn.Update{Revision: rev, Change: c}
}

func next(t *testing.T, ch <-chan *forewarn.Update) *forewarn.Update {
	t.Helper()
	select {
	case u, ok := <-ch:
		if !ok {
			return nil
		}
		return u
	case <-time.After(5 * time.Second):
		t.Fatal("no update within 5 s")
		return nil
	}
}

// TestLogOrder: commits appended out of order reach a follower in
// revision order, and a follower from an old revision replays them.
func TestLogOrder(t *testing.T) {
	var l Log
	l.Reset(10)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch := l.Follow(ctx, 10)
	l.Append(up(12, 1))
	l.Append(up(11, 1))
	l.Append(up(11, 1)) // a repeat is dropped
	l.Append(up(13, 1))
	for want := int64(11); want <= 13; want++ {
		if u := next(t, ch); u == nil || u.Revision != want || u.Reload {
			t.Fatalf("got %+v, want revision %d", u, want)
		}
	}
	late := l.Follow(ctx, 12)
	if u := next(t, late); u == nil || u.Revision != 13 {
		t.Fatalf("follow from 12 got %+v, want revision 13", u)
	}
	cancel()
	if u := next(t, ch); u != nil {
		t.Fatalf("after cancel got %+v, want a closed channel", u)
	}
}

// TestLogForgets: a follower that needs a commit the log no longer keeps
// gets one Reload and a closed channel; so does one from before Reset.
func TestLogForgets(t *testing.T) {
	var l Log
	l.Reset(0)
	l.Append(up(1, maxWeight)) // heavy: forgotten once another comes
	l.Append(up(2, 1))
	ch := l.Follow(t.Context(), 0)
	if u := next(t, ch); u == nil || !u.Reload || u.Change != nil {
		t.Fatalf("got %+v, want a Reload", u)
	}
	if u := next(t, ch); u != nil {
		t.Fatalf("after Reload got %+v, want a closed channel", u)
	}
	ok := l.Follow(t.Context(), 1)
	if u := next(t, ok); u == nil || u.Revision != 2 {
		t.Fatalf("follow from 1 got %+v, want revision 2", u)
	}
	l.Close()
	if u := next(t, ok); u != nil {
		t.Fatalf("after Close got %+v, want a closed channel", u)
	}
}

// TestLogForgetsWhatAllTook: a heavy commit stays while a follower has
// yet to take it (its channel is full), and is forgotten once every
// follower has; light commits stay for followers still to come.
func TestLogForgetsWhatAllTook(t *testing.T) {
	var l Log
	l.Reset(0)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	slow := l.Follow(ctx, 0)
	fast := l.Follow(ctx, 0)
	const light = 20 // more than a follower's channel holds
	for rev := int64(1); rev <= light; rev++ {
		l.Append(up(rev, 1))
	}
	l.Append(up(light+1, maxTaken)) // over maxTaken alone
	for range light + 1 {
		next(t, fast)
	}
	kept := func() (int64, int) {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.base, len(l.ups)
	}
	// What the slow one has taken into its channel is forgotten (but
	// for a light remainder); what it has not, the heavy one among it,
	// is kept.
	if base, n := kept(); base+int64(n) != light+1 || base >= light {
		t.Fatalf("with a follower behind: base %d, %d kept; want the commits after %d up to %d", base, n, base, light+1)
	}
	// Once the slow one has them all, the heavy one is forgotten, and
	// the light ones before it with it.
	for range light + 1 {
		next(t, slow)
	}
	deadline := time.Now().Add(5 * time.Second)
	for base, n := kept(); base != light+1 || n != 0; base, n = kept() {
		if time.Now().After(deadline) {
			t.Fatalf("after every follower took them: base %d, %d kept; want %d, 0", base, n, light+1)
		}
		time.Sleep(time.Millisecond)
	}
	if u := next(t, l.Follow(ctx, light)); u == nil || !u.Reload {
		t.Fatalf("follow from %d got %+v, want a Reload", light, u)
	}
	// Light commits are kept for a follower that comes later.
	l.Append(up(light+2, 1))
	l.Append(up(light+3, 1))
	for _, ch := range []<-chan *forewarn.Update{fast, fast, slow, slow} {
		next(t, ch)
	}
	if u := next(t, l.Follow(ctx, light+1)); u == nil || u.Revision != light+2 {
		t.Fatalf("follow from %d got %+v, want revision %d", light+1, u, light+2)
	}
}

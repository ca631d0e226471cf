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

package engine

import (
	"slices"
	"testing"

	"github.com/forewarn/forewarn"
)

// TestEvSet: a VM's event set through adds, a replacement, removals of
// its first event and of others, down to empty.
func TestEvSet(t *testing.T) {
	ids := func(s evSet) []string {
		var out []string
		for ev := range s.all() {
			out = append(out, ev.ID+":"+string(ev.Status))
		}
		slices.Sort(out)
		return out
	}
	ev := func(id string, st forewarn.Status) *forewarn.Event { return &forewarn.Event{ID: id, Status: st} }
	var s evSet
	for _, step := range []struct {
		put    *forewarn.Event
		remove string
		want   []string
		empty  bool
	}{
		{put: ev("a", forewarn.Scheduled), want: []string{"a:Scheduled"}},
		{put: ev("a", forewarn.Started), want: []string{"a:Started"}},
		{put: ev("b", forewarn.Scheduled), want: []string{"a:Started", "b:Scheduled"}},
		{put: ev("c", forewarn.Scheduled), want: []string{"a:Started", "b:Scheduled", "c:Scheduled"}},
		{put: ev("b", forewarn.Started), want: []string{"a:Started", "b:Started", "c:Scheduled"}},
		{remove: "a", want: []string{"b:Started", "c:Scheduled"}},
		{remove: "x", want: []string{"b:Started", "c:Scheduled"}},
		{remove: "c", want: []string{"b:Started"}},
		{remove: "b", empty: true},
	} {
		empty := false
		if step.put != nil {
			s.put(step.put)
		} else {
			empty = s.remove(step.remove)
		}
		if got := ids(s); !slices.Equal(got, step.want) || empty != step.empty {
			t.Fatalf("after put %v remove %q: %v, empty %v; want %v, %v", step.put, step.remove, got, empty, step.want, step.empty)
		}
	}
	if s.more != nil {
		t.Errorf("an empty set keeps a map: %v", s.more)
	}
}

package engine_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

// TestSightings: what servers note of an event's readers is written
// soon, merged with what the store holds (the earliest first reader, the
// most late readers, the NotBefore last read), given to every replica's
// subscribers, and nothing is written for an event the engine does not
// have.
func TestSightings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := mem.New()
		e := newEngine(t, store, true)
		other := newEngine(t, store, true)
		var got map[string]*forewarn.Sighting
		other.SubscribeSightings(func(m map[string]*forewarn.Sighting) {
			for id, s := range m {
				if got == nil {
					got = map[string]*forewarn.Sighting{}
				}
				got[id] = s
			}
		})
		ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"solo"}, Notice: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the other replica has the event, as a server that shows it does
		t0 := time.Now().UTC()
		e.NoteSighting(ev.ID, forewarn.Sighting{By: "solo", At: t0.Add(time.Second), NotBefore: ev.NotBefore})
		other.NoteSighting(ev.ID, forewarn.Sighting{By: "solo", At: t0, LateReaders: 2, FirstLate: "x", FirstLateAt: t0})
		e.NoteSighting("no-such-event", forewarn.Sighting{By: "solo", At: t0})
		synctest.Wait()
		want := forewarn.Sighting{By: "solo", At: t0, NotBefore: ev.NotBefore.UTC(), LateReaders: 2, FirstLate: "x", FirstLateAt: t0}
		st, err := store.Load(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if s := st.Sightings[ev.ID]; s == nil || *s != want || len(st.Sightings) != 1 {
			t.Errorf("the store holds %v, want %s: %+v alone", st.Sightings, ev.ID, want)
		}
		if s := got[ev.ID]; s == nil || *s != want {
			t.Errorf("the other replica's subscriber got %+v, want %+v", got[ev.ID], want)
		}
	})
}

package storetest

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
)

// runSigningKeys checks the signing keys: none in a new store, set whole
// by a change, kept by changes that do not name them, and sent to
// followers.
func runSigningKeys(t *testing.T, newStore func(t *testing.T) forewarn.Store) {
	t.Run("Fields", func(t *testing.T) {
		k := fullKeys(1)
		wantFull(t, *k, k.Current, k.Previous)
	})
	t.Run("RoundTrip", func(t *testing.T) {
		s := newStore(t)
		if k := load(t, s).SigningKeys; k != nil {
			t.Fatalf("a new store holds signing keys %+v, want none", k)
		}
		c1 := &forewarn.Change{SigningKeys: &forewarn.SigningKeys{Current: fullKeys(1).Current}}
		c2 := &forewarn.Change{Revision: 1, Events: []*forewarn.Event{fullEvent(1)}}
		c3 := &forewarn.Change{Revision: 2, SigningKeys: fullKeys(2)}
		commitFollowed(t, s, c1, c2, c3)
		if d := keysDiff(c3.SigningKeys, load(t, s).SigningKeys); d != "" {
			t.Errorf("signing keys differ:\n%s", d)
		}
	})
	t.Run("Conflict", func(t *testing.T) {
		// Two servers that find no key, each make one: one commit wins,
		// and the other learns the winner's.
		s := newStore(t)
		wantRevision(t, commit(t, s, &forewarn.Change{SigningKeys: fullKeys(1)}), 1)
		_, err := s.Commit(t.Context(), &forewarn.Change{SigningKeys: fullKeys(2)})
		wantCode(t, err, forewarn.ECONFLICT)
		if d := keysDiff(fullKeys(1), load(t, s).SigningKeys); d != "" {
			t.Errorf("signing keys differ:\n%s", d)
		}
	})
	t.Run("ConcurrentFirst", func(t *testing.T) { testKeysConcurrentFirst(t, newStore(t)) })
	t.Run("Invalid", func(t *testing.T) {
		s := newStore(t)
		short := &forewarn.SigningKeys{Current: forewarn.SigningKey{Secret: make([]byte, forewarn.MinSigningKey-1)}}
		_, err := s.Commit(t.Context(), &forewarn.Change{SigningKeys: short})
		wantCode(t, err, forewarn.EINVALID)
		wantState(t, load(t, s), 0, map[string]int64{})
	})
	t.Run("Copies", func(t *testing.T) {
		s := newStore(t)
		k := fullKeys(1)
		commit(t, s, &forewarn.Change{SigningKeys: k})
		k.Current.Secret[0]++
		got := load(t, s).SigningKeys
		if d := keysDiff(fullKeys(1), got); d != "" {
			t.Errorf("the store kept the committer's secret:\n%s", d)
		}
		got.Current.Secret[0]++
		if d := keysDiff(fullKeys(1), load(t, s).SigningKeys); d != "" {
			t.Errorf("the store shares its secret with Load's caller:\n%s", d)
		}
	})
}

// runSightings checks sightings: set whole per event, sent to followers,
// and gone with their events.
func runSightings(t *testing.T, newStore func(t *testing.T) forewarn.Store) {
	t.Run("Fields", func(t *testing.T) { wantFull(t, *fullSighting(1)) })
	t.Run("RoundTrip", func(t *testing.T) {
		s := newStore(t)
		if st := load(t, s); st.Sightings == nil || len(st.Sightings) > 0 {
			t.Fatalf("a new store holds sightings %v, want an empty map", st.Sightings)
		}
		a, b := fullEvent(1), fullEvent(2)
		c1 := &forewarn.Change{Events: []*forewarn.Event{a, b}, Sightings: map[string]*forewarn.Sighting{a.ID: {By: "vm-a", At: time.Now()}}}
		c2 := &forewarn.Change{Revision: 1, Sightings: map[string]*forewarn.Sighting{a.ID: fullSighting(1), b.ID: fullSighting(2)}}
		c3 := &forewarn.Change{Revision: 2, Deletes: []string{b.ID}}
		commitFollowed(t, s, c1, c2, c3)
		st := load(t, s)
		if d := sightingsDiff(map[string]*forewarn.Sighting{a.ID: fullSighting(1)}, st.Sightings); d != "" {
			t.Errorf("sightings differ (the deleted event's must go with it):\n%s", d)
		}
	})
	t.Run("Invalid", func(t *testing.T) {
		s := newStore(t)
		for _, m := range []map[string]*forewarn.Sighting{{"": fullSighting(1)}, {"ev": nil}} {
			_, err := s.Commit(t.Context(), &forewarn.Change{Sightings: m})
			wantCode(t, err, forewarn.EINVALID)
		}
		wantState(t, load(t, s), 0, map[string]int64{})
	})
}

// testKeysConcurrentFirst checks servers that start at once on an empty
// store: each loads, finds no key and commits one against the same
// revision, at the same time. Exactly one commit wins, and every server
// then loads the winner's key.
func testKeysConcurrentFirst(t *testing.T, s forewarn.Store) {
	const servers = 4
	var (
		loaded, done sync.WaitGroup
		won          [servers]bool
		got          [servers]*forewarn.SigningKeys
	)
	loaded.Add(servers)
	for i := range servers {
		done.Go(func() {
			st, err := s.Load(t.Context())
			loaded.Done()
			if err != nil {
				t.Errorf("server %d: Load: %v", i, err)
				return
			}
			loaded.Wait() // every server has seen the store without keys
			_, err = s.Commit(t.Context(), &forewarn.Change{Revision: st.Revision, SigningKeys: fullKeys(i + 1)})
			switch forewarn.ErrorCode(err) {
			case "":
				won[i] = true
			case forewarn.ECONFLICT:
			default:
				t.Errorf("server %d: Commit: %v", i, err)
				return
			}
			if st, err = s.Load(t.Context()); err != nil {
				t.Errorf("server %d: Load: %v", i, err)
				return
			}
			got[i] = st.SigningKeys
		})
	}
	done.Wait()
	winner := -1
	for i, w := range won {
		if w && winner >= 0 {
			t.Fatalf("servers %d and %d both wrote the first keys", winner, i)
		}
		if w {
			winner = i
		}
	}
	if winner < 0 {
		t.Fatal("no server wrote the first keys")
	}
	for i, k := range got {
		if d := keysDiff(fullKeys(winner+1), k); d != "" {
			t.Errorf("server %d loaded other keys than the winner's:\n%s", i, d)
		}
	}
}

// testKeysReopen checks that a durable store keeps its signing keys and
// sightings across Close; reopen opens the store kept in dir.
func testKeysReopen(t *testing.T, reopen func(t *testing.T, dir string) forewarn.Store) {
	dir := t.TempDir()
	s := reopen(t, dir)
	a := fullEvent(1)
	c := &forewarn.Change{Events: []*forewarn.Event{a}, SigningKeys: fullKeys(1), Sightings: map[string]*forewarn.Sighting{a.ID: fullSighting(1)}}
	wantRevision(t, commit(t, s, c), 1)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s = reopen(t, dir)
	st := load(t, s)
	if d := keysDiff(c.SigningKeys, st.SigningKeys) + sightingsDiff(c.Sightings, st.Sightings); d != "" {
		t.Errorf("after a reopen:\n%s", d)
	}
}

// fullKeys returns the n-th test signing keys, every field set, times in
// a zone other than UTC and with nanoseconds.
func fullKeys(n int) *forewarn.SigningKeys {
	cet := time.FixedZone("CET", 3600)
	return &forewarn.SigningKeys{
		Current:  forewarn.SigningKey{Secret: bytes.Repeat([]byte{byte(n)}, 32), Created: time.Date(2026, 3, 2, n, 0, 0, 123456789, cet)},
		Previous: forewarn.SigningKey{Secret: bytes.Repeat([]byte{byte(n + 100)}, 48), Created: time.Date(2026, 3, 1, n, 0, 0, 987654321, cet)},
	}
}

// fullSighting returns the n-th test sighting, every field set.
func fullSighting(n int) *forewarn.Sighting {
	cet := time.FixedZone("CET", 3600)
	at := func(m int) time.Time { return time.Date(2026, 3, 1, 10, m, n, 123456789, cet) }
	return &forewarn.Sighting{By: fmt.Sprintf("vm-%d", n), At: at(1), NotBefore: at(10), Started: at(11), LateReaders: n + 2,
		FirstLate: fmt.Sprintf("vm-late-%d", n), FirstLateAt: at(12)}
}

// keysDiff compares two signing keys, times by Equal and in UTC without
// a monotonic reading; nil for none. It returns "" when they match.
func keysDiff(want, got *forewarn.SigningKeys) string {
	switch {
	case want == nil && got == nil:
		return ""
	case want == nil || got == nil:
		return fmt.Sprintf("\tgot %+v, want %+v\n", got, want)
	}
	var b strings.Builder
	for _, k := range []struct {
		name      string
		want, got forewarn.SigningKey
	}{{"Current", want.Current, got.Current}, {"Previous", want.Previous, got.Previous}} {
		if !bytes.Equal(k.got.Secret, k.want.Secret) {
			fmt.Fprintf(&b, "\t%s.Secret: got %x, want %x\n", k.name, k.got.Secret, k.want.Secret)
		}
		timeDiff(&b, k.name+".Created", k.want.Created, k.got.Created)
	}
	return b.String()
}

// sightingsDiff compares sightings by event ID, every field. It returns
// "" when they match.
func sightingsDiff(want, got map[string]*forewarn.Sighting) string {
	var b strings.Builder
	show := func(si *forewarn.Sighting) string { return fmt.Sprintf("%+v", *si) }
	mapDiff(&b, "sighting of", want, got, show, func(id string, w, g *forewarn.Sighting) string {
		var d strings.Builder
		if g.By != w.By || g.LateReaders != w.LateReaders || g.FirstLate != w.FirstLate {
			fmt.Fprintf(&d, "\tsighting of %s: got %+v, want %+v\n", id, *g, *w)
		}
		for _, f := range []struct {
			name      string
			want, got time.Time
		}{{"At", w.At, g.At}, {"NotBefore", w.NotBefore, g.NotBefore}, {"Started", w.Started, g.Started}, {"FirstLateAt", w.FirstLateAt, g.FirstLateAt}} {
			timeDiff(&d, "sighting of "+id+" "+f.name, f.want, f.got)
		}
		return d.String()
	})
	return b.String()
}

// timeDiff writes to b how got differs from want, or is not in UTC
// without a monotonic reading.
func timeDiff(b *strings.Builder, name string, want, got time.Time) {
	if !got.Equal(want) || got != got.Round(0) || got.Location() != time.UTC {
		fmt.Fprintf(b, "\t%s: got %v, want %v in UTC without a monotonic reading\n", name, got, want)
	}
}

package bolt

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/storetest"
)

// BenchmarkInventoryCommit commits a fleet's definitions to an empty
// store in one change.
func BenchmarkInventoryCommit(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			defs := storetest.Definitions(n)
			for range b.N {
				b.StopTimer()
				s, err := Open(filepath.Join(b.TempDir(), "forewarn.db"))
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if _, err := s.Commit(b.Context(), &forewarn.Change{Inventory: defs}); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				s.Close()
				b.StartTimer()
			}
		})
	}
}

// BenchmarkInventoryLoad loads a store that holds a fleet's definitions.
func BenchmarkInventoryLoad(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			s, err := Open(filepath.Join(b.TempDir(), "forewarn.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if _, err := s.Commit(b.Context(), &forewarn.Change{Inventory: storetest.Definitions(n)}); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				st, err := s.Load(b.Context())
				if err != nil || len(st.Inventory) != n {
					b.Fatalf("Load: %d definitions, %v; want %d", len(st.Inventory), err, n)
				}
			}
		})
	}
}

// BenchmarkEventsCommit commits one event per VM of an n-VM fleet in
// one change, as a fleet-wide GCE or EC2 event does, each op the same
// events again in a new status.
func BenchmarkEventsCommit(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			s, err := Open(filepath.Join(b.TempDir(), "forewarn.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
			evs := make([]*forewarn.Event, n)
			for i := range evs {
				evs[i] = &forewarn.Event{ID: fmt.Sprintf("%08X-0000-4000-8000-000000000000", i), Type: forewarn.SystemMaintenance,
					Status: forewarn.Scheduled, Resources: []string{fmt.Sprintf("vm%d", i)}, NotBefore: at.Add(time.Hour),
					Created: at, Lasts: time.Hour, Description: "Forewarn benchmark"}
			}
			rev := int64(0)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				status := []forewarn.Status{forewarn.Scheduled, forewarn.Started}[i%2]
				for _, e := range evs {
					e.Status = status
				}
				if rev, err = s.Commit(b.Context(), &forewarn.Change{Revision: rev, Events: evs}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

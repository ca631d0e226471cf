package bolt

import (
	"fmt"
	"path/filepath"
	"testing"

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

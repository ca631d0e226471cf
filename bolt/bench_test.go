package bolt

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/forewarn/forewarn"
)

// inventory returns n definitions of Azure VMs as a fleet file gives
// them: an address, an availability set of 100, a zone and a size.
func inventory(n int) map[string]*forewarn.Definition {
	defs := make(map[string]*forewarn.Definition, n)
	for i := range n {
		vm := &forewarn.VM{
			Name:            fmt.Sprintf("vm-%06d", i),
			IP:              netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}),
			Provider:        forewarn.Azure,
			AvailabilitySet: fmt.Sprintf("as-%04d", i/100),
			UpdateDomain:    i % 5,
			Zone:            "westeurope-1",
			MachineType:     "Standard_D2s_v5",
		}
		defs[vm.Name] = &forewarn.Definition{VM: vm, Seq: int64(i + 1)}
	}
	return defs
}

// BenchmarkInventoryCommit commits a fleet's definitions to an empty
// store in one change.
func BenchmarkInventoryCommit(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			defs := inventory(n)
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
			if _, err := s.Commit(b.Context(), &forewarn.Change{Inventory: inventory(n)}); err != nil {
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

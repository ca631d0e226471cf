package storetest_test

import (
	"errors"
	"syscall"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/mem"
	"github.com/forewarn/forewarn/storetest"
)

// TestFailing: a Failing store passes the suite while it does not fail,
// everything of a change included, and writes nothing while it fails.
func TestFailing(t *testing.T) {
	storetest.Run(t, func(t *testing.T) forewarn.Store { return storetest.NewFailing(mem.New()) })

	s := storetest.NewFailing(mem.New())
	defer s.Close()
	c := &forewarn.Change{Inventory: map[string]*forewarn.Definition{"vm-a": {VM: &forewarn.VM{Name: "vm-a"}, Seq: 1}}}
	s.Fail(syscall.ENOSPC)
	if _, err := s.Commit(t.Context(), c); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Commit while failing: %v, want ENOSPC", err)
	}
	s.Fail(nil)
	if rev, err := s.Commit(t.Context(), c); err != nil || rev != 1 {
		t.Fatalf("Commit after Fail(nil) = %d, %v; want revision 1", rev, err)
	}
	st, err := s.Load(t.Context())
	if err != nil || st.InventoryRevision != 1 || len(st.Inventory) != 1 {
		t.Fatalf("Load = %+v, %v; want the one definition at inventory revision 1", st, err)
	}
}

package server

import (
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/mem"
)

// TestMarkRaisesInventory: a store behind its mark raises the
// incarnation of every VM it may serve, those of its inventory that the
// fleet does not name included, past the mark's highest.
func TestMarkRaisesInventory(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, markFile), mark{Revision: 9, Incarnation: 40}.bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	st := mem.New()
	defer st.Close()
	if _, err := st.Commit(t.Context(), &forewarn.Change{
		Incarnations: map[string]int64{"known": 50},
		Inventory: map[string]*forewarn.Definition{
			"defined": {VM: &forewarn.VM{Name: "defined"}, Seq: 1},
			"known":   {VM: &forewarn.VM{Name: "known"}, Seq: 2},
		},
	}); err != nil {
		t.Fatal(err)
	}
	fleet := &forewarn.Fleet{VMs: []*forewarn.VM{{Name: "file"}}}
	ms, err := openMarked(t.Context(), st, dir, fleet, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	got, err := ms.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// Above the mark's 40 and the store's own 50.
	want := map[string]int64{"file": 51, "defined": 51, "known": 51}
	if got.Revision != 2 || !maps.Equal(got.Incarnations, want) {
		t.Errorf("after opening behind the mark: revision %d, incarnations %v; want 2, %v", got.Revision, got.Incarnations, want)
	}
}

package server

import (
	"context"
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

// countingStore counts its Loads.
type countingStore struct {
	forewarn.Store
	loads int
}

func (c *countingStore) Load(ctx context.Context) (*forewarn.State, error) {
	c.loads++
	return c.Store.Load(ctx)
}

// TestMarkHandsOnItsLoad: the engine's Load after openMarked gets the
// state openMarked read, without reading the store again, once; after a
// Commit, or the second time, Load reads the store.
func TestMarkHandsOnItsLoad(t *testing.T) {
	for _, commit := range []bool{false, true} {
		st := &countingStore{Store: mem.New()}
		if _, err := st.Commit(t.Context(), &forewarn.Change{Incarnations: map[string]int64{"a": 3}}); err != nil {
			t.Fatal(err)
		}
		ms, err := openMarked(t.Context(), st, t.TempDir(), &forewarn.Fleet{}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		wantRev, wantLoads := int64(1), 1
		if commit {
			if _, err := ms.Commit(t.Context(), &forewarn.Change{Revision: 1, Incarnations: map[string]int64{"a": 4}}); err != nil {
				t.Fatal(err)
			}
			wantRev, wantLoads = 2, 2
		}
		got, err := ms.Load(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if got.Revision != wantRev || st.loads != wantLoads {
			t.Errorf("commit %v: Load gave revision %d after %d loads of the store; want %d after %d", commit, got.Revision, st.loads, wantRev, wantLoads)
		}
		if _, err := ms.Load(t.Context()); err != nil || st.loads != wantLoads+1 {
			t.Errorf("commit %v: a second Load made %d loads of the store (%v); want %d", commit, st.loads, err, wantLoads+1)
		}
		ms.Close()
	}
}

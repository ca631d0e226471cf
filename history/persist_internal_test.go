package history

import (
	"testing"
	"testing/synctest"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

// TestNotSavedKeepsDue: a record due for a read whose write failed is
// due for a read again, saved at the next look, not demoted to a count
// that waits its turn; one not due is due as a count.
func TestNotSavedKeepsDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: &forewarn.Fleet{VMs: []*forewarn.VM{
			{Name: "a", Provider: forewarn.Azure}, {Name: "b", Provider: forewarn.Azure},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		h := New([]string{"a", "b"}, 4)
		h.Follow(e)
		call(h, "a")
		call(h, "b")
		rg, _, _ := h.ring("a")
		rg.mu.Lock()
		h.noteClient(rg, dueRead)
		rg.mu.Unlock()
		for _, name := range []string{"a", "b"} {
			h.ClientRecord(name)
			h.NotSaved(name)
		}
		for name, want := range map[string]uint8{"a": dueRead, "b": dueCount} {
			rg, _, _ := h.ring(name)
			rg.mu.Lock()
			got := rg.st.due
			rg.mu.Unlock()
			if got != want {
				t.Errorf("%s due %b after a failed write, want %b", name, got, want)
			}
		}
	})
}

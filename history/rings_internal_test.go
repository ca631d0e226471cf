package history

import "testing"

// TestStaleLookupsLeaveTheRingAlone: a request or a reader that looked a
// VM's ring up before the VM was removed neither joins nor reads the
// ring once it is retired, or reused for another VM.
func TestStaleLookupsLeaveTheRingAlone(t *testing.T) {
	h := New([]string{"a"}, 4)
	r, g := h.ring("a")
	h.Apply(nil, []string{"a"})
	if _, ok := r.join(g); ok {
		t.Fatal("a request joined the ring of a VM removed since its lookup")
	}
	h.Apply([]string{"b"}, nil)
	if rb, gb := h.ring("b"); rb != r || gb == g {
		t.Fatalf("b has ring %p generation %d; want a's ring %p, another generation than %d", rb, gb, r, g)
	}
	if _, ok := r.join(g); ok {
		t.Fatal("a request joined the reused ring with its former VM's generation")
	}
	if r.lock(g) {
		t.Fatal("a reader locked the reused ring with its former VM's generation")
	}
}

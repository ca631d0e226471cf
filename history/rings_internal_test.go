package history

import (
	"net/http/httptest"
	"testing"
)

// call records one request of vm through h.
func call(h *History, vm string) {
	h.Done(h.Start(httptest.NewRecorder(), vm), Azure, "GET", "/p", "")
}

// TestStaleLookupsLeaveTheRingAlone: a request or a reader that looked a
// VM's ring up before the VM was removed neither joins nor reads the
// ring once it is retired, or reused for another VM.
func TestStaleLookupsLeaveTheRingAlone(t *testing.T) {
	h := New([]string{"a"}, 4)
	if r, _, ok := h.ring("a"); r != nil || !ok {
		t.Fatalf("a, before its first request: ring %p (ok %v), want none, ok", r, ok)
	}
	call(h, "a")
	r, g, _ := h.ring("a")
	h.Apply(nil, []string{"a"})
	if _, ok := r.join(g); ok {
		t.Fatal("a request joined the ring of a VM removed since its lookup")
	}
	h.Apply([]string{"b"}, nil)
	call(h, "b")
	if rb, gb, _ := h.ring("b"); rb != r || gb == g {
		t.Fatalf("b has ring %p generation %d; want a's ring %p, another generation than %d", rb, gb, r, g)
	}
	if _, ok := r.join(g); ok {
		t.Fatal("a request joined the reused ring with its former VM's generation")
	}
	if r.lock(g) {
		t.Fatal("a reader locked the reused ring with its former VM's generation")
	}
}

// TestStaleCellGetsNoRing: a first request that looked its VM up before
// the VM was removed gives the removed VM no ring.
func TestStaleCellGetsNoRing(t *testing.T) {
	h := New([]string{"a"}, 4)
	c, _ := h.rings.Load("a")
	h.Apply(nil, []string{"a"})
	if r, _ := h.first("a"); r != nil {
		t.Fatal("the first request of a removed VM got a ring")
	}
	if m := c.m.Load(); m != left {
		t.Fatalf("the removed VM's cell holds %+v, want left", m)
	}
	if h.allocated != len(h.free) {
		t.Fatalf("%d rings made, %d free", h.allocated, len(h.free))
	}
}

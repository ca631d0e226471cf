package history_test

import (
	"fmt"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/history"
	"github.com/forewarn/forewarn/internal/cow"
	"github.com/forewarn/forewarn/mem"
)

// vmAt returns an Azure VM named name at 10.0.0.i.
func vmAt(name string, i byte) *forewarn.VM {
	return &forewarn.VM{Name: name, Provider: forewarn.Azure, IP: netip.AddrFrom4([4]byte{10, 0, 0, i})}
}

// TestFollowsTheInventory: a History that follows the engine has each VM
// of the fleet at start, gets a VM added at run time, drops a removed
// one, and gives a VM added again after its removal counts that start
// at zero.
func TestFollowsTheInventory(t *testing.T) {
	ctx := t.Context()
	eng, err := engine.New(ctx, engine.Config{Store: mem.New(), Fleet: &forewarn.Fleet{VMs: []*forewarn.VM{vmAt("a", 1), vmAt("b", 2)}}})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	h := history.New(nil, 4)
	h.Follow(eng)
	if got := h.Names(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("names at start %v, want [a b]", got)
	}
	for range 3 {
		record(h, "a", "/p", 200, nil)
	}
	if _, err := eng.ChangeInventory(ctx, engine.InventoryChange{Set: []*forewarn.VM{vmAt("c", 3)}}); err != nil {
		t.Fatal(err)
	}
	record(h, "c", "/p", 200, nil)
	if st, ok := h.Stats("c"); !ok || st.Requests != 1 {
		t.Fatalf("VM c added at run time: %d requests (ok %v), want 1", st.Requests, ok)
	}
	if _, err := eng.ChangeInventory(ctx, engine.InventoryChange{Remove: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	if got := h.Names(); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("names after removing a: %v, want [b c]", got)
	}
	if _, ok := h.Stats("a"); ok {
		t.Error("Stats of a removed VM reported ok")
	}
	if w := h.Start(httptest.NewRecorder(), "a"); w != nil {
		if _, ok := w.(*history.Writer); ok {
			t.Error("Start records a request of a removed VM")
		}
	}
	if _, err := eng.ChangeInventory(ctx, engine.InventoryChange{Set: []*forewarn.VM{vmAt("a", 1)}}); err != nil {
		t.Fatal(err)
	}
	if st, ok := h.Stats("a"); !ok || st.Requests != 0 {
		t.Fatalf("VM a added again: %d requests (ok %v), want 0", st.Requests, ok)
	}
	if got, _ := h.Entries("a"); len(got) != 0 {
		t.Fatalf("VM a added again: %d entries, want 0", len(got))
	}
	record(h, "a", "/again", 200, nil)
	if got, _ := h.Entries("a"); len(got) != 1 || got[0].Path != "/again" {
		t.Fatalf("VM a added again: entries %+v, want one of /again", got)
	}
}

// names returns n VM names, from "prefix-000000".
func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%06d", prefix, i)
	}
	return out
}

// TestChurnReusesRings: 10,000 VMs added and removed 20 times, 100 of
// each round calling, besides 1,000 that stay and never call, use 100
// rings in all, and the heap does not grow with the rounds.
func TestChurnReusesRings(t *testing.T) {
	h := history.New(names("stay", 1000), history.DefaultSize)
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	var after1 uint64
	for round := range 20 {
		vms := names(fmt.Sprint("round", round), 10_000)
		h.Apply(vms, nil)
		for _, vm := range vms[:100] {
			record(h, vm, "/p", 200, nil)
		}
		h.Apply(nil, vms)
		if round == 0 {
			after1 = heap()
		}
	}
	if got := h.Allocated(); got != 100 {
		t.Errorf("%d rings made, want 100: a removed VM's ring is not reused", got)
	}
	if got := len(h.Names()); got != 1000 {
		t.Errorf("%d VMs after the churn, want 1000", got)
	}
	// A round's VMs are some 0.5 MB; the heap may move by a few MB.
	if end := heap(); end > after1+8<<20 {
		t.Errorf("heap grew from %d to %d bytes over 19 rounds of churn", after1, end)
	}
	runtime.KeepAlive(h)
}

// TestAddingManyVMsAllocatesInChunks: 100,000 VMs added in one Apply
// cost, besides the name index's own (a copy-on-write map of as many
// entries), under a thousand allocations: their cells come in chunks,
// and they get no ring before they call.
func TestAddingManyVMsAllocatesInChunks(t *testing.T) {
	vms := names("vm", 100_000)
	mallocs := func(fn func()) uint64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		fn()
		runtime.ReadMemStats(&after)
		return after.Mallocs - before.Mallocs
	}
	index := cow.New[string, *int](cow.String)
	es := make([]cow.Entry[string, *int], len(vms))
	for i, vm := range vms {
		es[i] = cow.Entry[string, *int]{Key: vm}
	}
	base := mallocs(func() { index.Apply(es) })
	h := history.New(nil, history.DefaultSize)
	n := mallocs(func() { h.Apply(vms, nil) })
	t.Logf("adding 100,000 VMs: %d allocations, %d of them a name index's", n, base)
	if n > base+1000 {
		t.Errorf("adding 100,000 VMs made %d allocations besides a name index's %d, want at most 1,000", n-base, base)
	}
	if got := h.Allocated(); got != 0 {
		t.Errorf("%d rings made, want 0", got)
	}
}

// TestReuseWaitsForRequestsInFlight: the ring of a VM removed while a
// request of it is in flight is not given to a VM that first calls
// meanwhile, and that request, done later, counts nowhere; once it is
// done, the ring is reused, empty, at the next VM's first request.
func TestReuseWaitsForRequestsInFlight(t *testing.T) {
	h := history.New([]string{"a"}, 4)
	record(h, "a", "/before", 200, nil)
	w := h.Start(httptest.NewRecorder(), "a")
	h.Apply(nil, []string{"a"})
	h.Apply([]string{"b"}, nil)
	record(h, "b", "/b", 200, nil)
	if got := h.Allocated(); got != 2 {
		t.Fatalf("%d rings made, want 2: b took the ring a's request holds", got)
	}
	w.WriteHeader(200)
	h.Done(w, history.Azure, "GET", "/late", "")
	if st, _ := h.Stats("b"); st.Requests != 1 || st.InFlight != 0 {
		t.Fatalf("b: %d requests, %d in flight; want 1, 0", st.Requests, st.InFlight)
	}
	h.Apply([]string{"c"}, nil)
	st, _ := h.Stats("c")
	got, _ := h.Entries("c")
	if st.Requests != 0 || st.InFlight != 0 || !st.LastEnd.IsZero() || len(got) != 0 {
		t.Fatalf("c, before its first request: %d requests, %d in flight, last end %v, %d entries; want nothing", st.Requests, st.InFlight, st.LastEnd, len(got))
	}
	record(h, "c", "/c", 200, nil)
	if got := h.Allocated(); got != 2 {
		t.Fatalf("%d rings made, want 2: c did not reuse a's ring", got)
	}
	// a's ring was reset for c: no request of a counts, nor the gap since
	// a's last request ended.
	if st, _ := h.Stats("c"); st.Requests != 1 || st.InFlight != 0 || st.LongestGap != 0 {
		t.Fatalf("c, on a's ring: %d requests, %d in flight, longest gap %v; want 1, 0, 0", st.Requests, st.InFlight, st.LongestGap)
	}
	if got, _ := h.Entries("c"); len(got) != 1 || got[0].Path != "/c" {
		t.Fatalf("c's entries %+v, want one of /c", got)
	}
}

// TestSeenNamesOutliveTheRing: the VM that first read an event, and the
// first that read it late, are named after they leave the inventory and
// their rings serve other VMs.
func TestSeenNamesOutliveTheRing(t *testing.T) {
	h := history.New([]string{"first", "late"}, 4)
	sched := &forewarn.Event{ID: "E1", Status: forewarn.Scheduled, Created: time.Now().Add(-time.Hour), NotBefore: time.Now().Add(-time.Minute)}
	started := *sched
	started.Status, started.StartedAt, started.NotBefore = forewarn.Started, time.Now().Add(-time.Minute), time.Time{}
	get(h, "first", history.NewRef(sched))
	get(h, "late", history.NewRef(&started))
	h.Apply(nil, []string{"first", "late"})
	h.Apply([]string{"x", "y"}, nil)
	if got := h.Allocated(); got != 2 {
		t.Fatalf("%d rings made, want 2 (reused)", got)
	}
	get(h, "x", history.NewRef(sched))
	get(h, "y", history.NewRef(&started))
	s, ok := h.Seen("E1")
	if !ok || s.By != "first" || s.FirstLate != "late" || s.LateReaders != 2 {
		t.Fatalf("Seen = %+v (ok %v); want first read by first, first late late, 2 late readers", s, ok)
	}
}

// TestChurnWhileRecording: VMs recorded without pause while others are
// removed and added again, their rings reused: no request is recorded in
// another VM's ring, and once all is done no ring counts a request in
// flight and the rings made stay within the VMs plus the requests that
// held a removed VM's ring.
func TestChurnWhileRecording(t *testing.T) {
	vms := names("vm", 64)
	h := history.New(vms, 8)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				vm := vms[(g*8+i)%len(vms)]
				record(h, vm, "/"+vm, 200, nil)
				_, _ = h.Stats(vm)
			}
		})
	}
	for i := range 2000 {
		gone := vms[i%len(vms) : i%len(vms)+1]
		h.Apply(nil, gone)
		h.Apply(gone, nil)
	}
	close(stop)
	wg.Wait()
	for _, vm := range vms {
		st, ok := h.Stats(vm)
		if !ok || st.InFlight != 0 {
			t.Fatalf("%s: %d in flight (ok %v), want 0", vm, st.InFlight, ok)
		}
		got, _ := h.Entries(vm)
		for _, e := range got {
			if e.Path != "/"+vm {
				t.Fatalf("%s's ring holds a request of %s", vm, e.Path)
			}
		}
	}
	if n := h.Allocated(); n > len(vms)+8 {
		t.Errorf("%d rings made for %d VMs and 8 recorders", n, len(vms))
	}
}

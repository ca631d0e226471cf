package history_test

import (
	"net/http/httptest"
	"reflect"
	"runtime"
	"sync"
	"testing"

	"github.com/forewarn/forewarn/history"
)

// TestIdleVMsCostLittle: 10,000 VMs added that never call cost History
// well under 100 bytes each and no ring; a VM's first request gives it
// one, and a VM that has not called has an empty history.
func TestIdleVMsCostLittle(t *testing.T) {
	const n = 10_000
	vms := names("idle", n)
	h := history.New(nil, history.DefaultSize)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	h.Apply(vms, nil)
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / n
	t.Logf("%d VMs that never called: %.0f bytes each", n, per)
	if per > 100 {
		t.Errorf("%.0f bytes per VM that never called, want at most 100", per)
	}
	if got := h.Allocated(); got != 0 {
		t.Errorf("%d rings made for VMs that never called, want 0", got)
	}
	if st, ok := h.Stats(vms[0]); !ok || !reflect.DeepEqual(st, history.Stats{}) {
		t.Errorf("Stats of a VM that never called: %+v (ok %v), want zero, ok", st, ok)
	}
	if got, ok := h.Entries(vms[0]); !ok || got == nil || len(got) != 0 {
		t.Errorf("Entries of a VM that never called: %#v (ok %v), want empty, not nil, ok", got, ok)
	}
	record(h, vms[1], "/p", 200, nil)
	if got := h.Allocated(); got != 1 {
		t.Errorf("%d rings made after one VM's request, want 1", got)
	}
	if st, _ := h.Stats(vms[1]); st.Requests != 1 {
		t.Errorf("the VM that called: %d requests, want 1", st.Requests)
	}
	if got, _ := h.Entries(vms[1]); len(got) != 1 {
		t.Errorf("the VM that called: %d entries, want 1", len(got))
	}
	runtime.KeepAlive(h)
}

// TestFirstRequestRacesRemoval: a VM's first requests, concurrent with
// its removal, leave no ring with the removed VM: once all is done every
// ring made is free, and rings are reused round after round.
func TestFirstRequestRacesRemoval(t *testing.T) {
	const racers = 4
	h := history.New(nil, 4)
	for round := range 500 {
		h.Apply([]string{"a"}, nil)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range racers {
			wg.Go(func() {
				<-start
				record(h, "a", "/a", 200, nil)
			})
		}
		wg.Go(func() {
			<-start
			h.Apply(nil, []string{"a"})
		})
		close(start)
		wg.Wait()
		if _, ok := h.Stats("a"); ok {
			t.Fatalf("round %d: Stats of the removed VM reported ok", round)
		}
		if made, free := h.Allocated(), h.FreeRings(); made != free {
			t.Fatalf("round %d: %d rings made, %d free: a removed VM holds one", round, made, free)
		}
	}
	made := h.Allocated()
	t.Logf("%d rings made over 500 rounds", made)
	if made > racers {
		t.Errorf("%d rings made for one VM and %d requests at a time: rings are not reused", made, racers)
	}
	h.Apply([]string{"b"}, nil)
	if w := h.Start(httptest.NewRecorder(), "a"); w != nil {
		if _, ok := w.(*history.Writer); ok {
			t.Error("Start records a request of a removed VM")
		}
	}
	record(h, "b", "/b", 200, nil)
	if got, want := h.Allocated(), max(made, 1); got != want {
		t.Errorf("%d rings made after b's first request, want %d: a free ring was not reused", got, want)
	}
	if got, want := h.FreeRings(), max(made-1, 0); got != want {
		t.Errorf("%d free rings after b's first request, want %d", got, want)
	}
	if got, _ := h.Entries("b"); len(got) != 1 || got[0].Path != "/b" {
		t.Errorf("b's entries %+v, want one of /b", got)
	}
}

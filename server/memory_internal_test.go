package server

import (
	"context"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

// heapFree returns the heap's free pages not yet returned to the system.
func heapFree() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestGovernorReleasesAfterBurst: once a burst's garbage is collected
// and the heap stops growing, the governor hands the free pages back to
// the system within a second or so, where the runtime alone takes many.
func TestGovernorReleasesAfterBurst(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		governMemory(ctx, 16)
	}()
	defer func() { cancel(); <-done }()
	// Past the governor's first release window.
	time.Sleep(releaseEvery)

	burst := make([][]byte, 0, 256)
	for range cap(burst) {
		b := make([]byte, 1<<20)
		b[0] = 1
		burst = append(burst, b)
	}
	// Live through a collection and a tick, so that the governor's limit
	// has room for it, as it has for a burst's live state.
	runtime.GC()
	time.Sleep(2 * memoryEvery)
	runtime.KeepAlive(burst)
	burst = nil
	runtime.GC()
	if f := heapFree(); f < 64<<20 {
		t.Skipf("the collection left %d MB free; the runtime returned the rest itself", f>>20)
	}
	deadline := time.Now().Add(3 * time.Second)
	for heapFree() > 16<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("3 s after the burst, %d MB of free heap still held", heapFree()>>20)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

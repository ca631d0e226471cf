package server

import (
	"context"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// DefaultMemoryHeadroom is Config.MemoryHeadroom's default, in MiB.
const DefaultMemoryHeadroom = 64

// memoryEvery is how often the soft memory limit follows the live heap.
const memoryEvery = 250 * time.Millisecond

// releaseEvery is how often at most governMemory hands free heap pages
// back to the system at once: each time costs a collection.
const releaseEvery = 2 * time.Second

// governMemory keeps Go's soft memory limit at the memory the runtime
// holds besides heap objects and the heap's free pages, plus the live
// heap of the last collection, plus headroom MiB, until ctx ends; then it restores the
// limit it found. Go's own pacing (GOGC) lets garbage grow to the size
// of the live heap, which at 100,000 VMs is some 400 MB: the limit
// collects sooner once garbage passes the headroom, so a burst of
// requests that each make garbage (reports, creates naming the fleet)
// cannot raise the server's memory by the size of its heap. A limit
// always above the live heap never starves the program; the runtime
// caps the collector's share of CPU when it is near the limit.
func governMemory(ctx context.Context, headroom int) {
	if headroom <= 0 || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	samples := []metrics.Sample{
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
	}
	old := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(old)
	released0 := time.Now() // the start's garbage is released apart
	var objects0 uint64
	quiet := 0 // ticks since the heap last grew
	t := time.NewTicker(memoryEvery)
	defer t.Stop()
	for {
		metrics.Read(samples)
		var v [5]uint64
		ok := true
		for i, s := range samples {
			if s.Value.Kind() != metrics.KindUint64 {
				ok = false
				break
			}
			v[i] = s.Value.Uint64()
		}
		if total, released, objects, live, free := v[0], v[1], v[2], v[3], v[4]; ok && total >= released+objects+free {
			limit := total - released - objects - free + live + uint64(headroom)<<20
			debug.SetMemoryLimit(int64(min(limit, uint64(old))))
			// With no allocation going on, the runtime returns free pages
			// at about 1 % of a CPU, so after a burst (a fleet-wide event
			// at 100,000 VMs frees some 150 MB) the server would hold them
			// for many seconds. Past the headroom they go back at once
			// when the burst is over: the heap has not grown over two
			// ticks (in a burst it grows but at each collection). At
			// most every releaseEvery.
			quiet++
			if objects > objects0 {
				quiet = 0
			}
			if free > uint64(headroom)<<20 && quiet >= 2 && time.Since(released0) >= releaseEvery {
				debug.FreeOSMemory()
				released0 = time.Now()
			}
			objects0 = objects
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// releaseStartGarbage returns the start's garbage to the system: the
// fleet and events decoded from the store, every VM's documents
// rendered, as large as the live heap at 100,000 VMs, which the runtime
// would otherwise return over minutes. So an idle server holds its live
// heap, not twice it, whether or not the memory governor runs.
func releaseStartGarbage() { debug.FreeOSMemory() }

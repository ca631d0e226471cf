package history_test

import (
	"fmt"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forewarn/forewarn/history"
)

// BenchmarkApply100k adds 100,000 VMs to an empty History in one Apply.
func BenchmarkApply100k(b *testing.B) {
	vms := names("vm", 100_000)
	b.ReportAllocs()
	for b.Loop() {
		h := history.New(nil, history.DefaultSize)
		h.Apply(vms, nil)
	}
}

// BenchmarkFirstRequests has every VM of a fleet make its first request
// at once, from 8 goroutines per core: the time per VM should not grow
// with the fleet.
func BenchmarkFirstRequests(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			vms := names("vm", n)
			rec := httptest.NewRecorder()
			var took time.Duration
			b.ReportAllocs()
			for range b.N {
				b.StopTimer()
				h := history.New(vms, history.DefaultSize)
				var next atomic.Int64
				var wg sync.WaitGroup
				b.StartTimer()
				t0 := time.Now()
				for range 8 * runtime.GOMAXPROCS(0) {
					wg.Go(func() {
						for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
							w := h.Start(rec, vms[i])
							h.Done(w, history.Azure, "GET", "/metadata/scheduledevents", "")
						}
					})
				}
				wg.Wait()
				took += time.Since(t0)
			}
			b.ReportMetric(float64(took.Nanoseconds())/float64(b.N*n), "ns/VM")
		})
	}
}

package azure_test

import (
	"math"
	"testing"
	"testing/synctest"
	"time"
)

// TestRateLimitEdges: a rate so low that its interval overflows a
// Duration still throttles (one request, then 429 for a long time), and
// rates that are not positive finite numbers turn throttling off rather
// than doing something undefined.
func TestRateLimitEdges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, h := setup(t)
		s := h.(interface{ SetRateLimit(float64) })
		get := func() int { return do(h, req{target: path + "2020-07-01", remote: web0}).Code }

		s.SetRateLimit(1e-12) // one request every 31,700 years
		if c := get(); c != 200 {
			t.Fatalf("first request at 1e-12/s: %d", c)
		}
		time.Sleep(24 * time.Hour)
		for i := range 3 {
			if c := get(); c != 429 {
				t.Fatalf("request %d a day later at 1e-12/s: %d, want 429", i+2, c)
			}
		}
		for _, rate := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -1, 0} {
			s.SetRateLimit(rate)
			for i := range 20 {
				if c := get(); c != 200 {
					t.Fatalf("SetRateLimit(%v): request %d got %d, want throttling off", rate, i+1, c)
				}
			}
		}
	})
}

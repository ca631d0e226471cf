package azure_test

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestRateLimit: 5 requests a second per VM, in bursts of 5; the sixth
// gets 429, a flooding VM does not slow another, and 0 turns it off.
func TestRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, h := setup(t)
		s := h.(interface{ SetRateLimit(float64) })
		s.SetRateLimit(5)
		get := func(remote string) int { return do(h, req{target: path + "2020-07-01", remote: remote}).Code }
		for i := range 5 {
			if c := get(web0); c != 200 {
				t.Fatalf("request %d: %d", i+1, c)
			}
		}
		w := do(h, req{target: path + "2020-07-01"})
		check(t, w, 429, `{"error": "Too many requests"}`)
		if c := w.Header().Get("Connection"); c != "close" {
			t.Errorf("429 with Connection %q, want close", c)
		}
		// web0 floods; web1 and db0 keep their own budget.
		for range 100 {
			get(web0)
		}
		for i := range 5 {
			if c, d := get(web1), get(db0); c != 200 || d != 200 {
				t.Fatalf("request %d of the other VMs while web0 floods: %d %d", i+1, c, d)
			}
		}
		// One request's worth of budget comes back every 200 ms.
		time.Sleep(199 * time.Millisecond)
		if c := get(web0); c != 429 {
			t.Fatalf("after 199ms: %d", c)
		}
		time.Sleep(time.Millisecond)
		if c := get(web0); c != 200 {
			t.Fatalf("after 200ms: %d", c)
		}
		if c := get(web0); c != 429 {
			t.Fatalf("second request after 200ms: %d", c)
		}
		time.Sleep(time.Second)
		for i := range 5 {
			if c := get(web0); c != 200 {
				t.Fatalf("after a quiet second, request %d: %d", i+1, c)
			}
		}
		s.SetRateLimit(0)
		for i := range 50 {
			if c := get(web0); c != 200 {
				t.Fatalf("unthrottled request %d: %d", i+1, c)
			}
		}
	})
}

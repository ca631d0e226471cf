package gce_test

import (
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/gce"
)

// TestLongPollCap: a VM holds at most MaxWaiters long-polls; the next one
// gets 503 at once, other VMs are unaffected, and a freed slot is reusable.
func TestLongPollCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, s := setup(t)
		s.MaxWaiters = 2
		etag := etagOf(t, get(s, vmAddr, "instance/maintenance-event"))
		hold := func(remote string) (context.CancelFunc, *httptest.ResponseRecorder, chan struct{}) {
			ctx, cancel := context.WithCancel(t.Context())
			w := httptest.NewRecorder()
			done := make(chan struct{})
			go func() {
				s.ServeHTTP(w, newRequest(req{target: v1 + "instance/maintenance-event?wait_for_change=true&last_etag=" + etag, remote: remote, ctx: ctx}))
				close(done)
			}()
			synctest.Wait()
			return cancel, w, done
		}
		c1, _, d1 := hold(vmAddr)
		c2, _, d2 := hold(vmAddr)
		_, w3, d3 := hold(vmAddr)
		<-d3
		checkError(t, w3, 503)
		// Another VM still gets its long-polls.
		cq, _, dq := hold(quietAddr)
		select {
		case <-dq:
			t.Fatal("another VM's long-poll was refused")
		default:
		}
		c1()
		<-d1
		c4, _, d4 := hold(vmAddr)
		select {
		case <-d4:
			t.Fatal("a freed slot was not reusable")
		default:
		}
		// A stale etag is answered at once and takes no slot.
		if w := get(s, vmAddr, "instance/maintenance-event?wait_for_change=true&last_etag=0"); w.Code != 200 {
			t.Fatalf("stale etag at the cap: %d", w.Code)
		}
		c2()
		c4()
		cq()
		<-d2
		<-d4
		<-dq
	})
}

// page429 is the page a request over its VM's rate limit gets.
const page429 = "<!DOCTYPE html>\n<html lang=en>\n<meta charset=utf-8>\n<title>Error 429 (Too Many Requests)</title>\n<p><b>429.</b> Too many requests from this VM; retry later.\n"

// check429 asserts the throttled answer: 429, the fixed page,
// Metadata-Flavor, and the connection closed after it.
func check429(t *testing.T, w *httptest.ResponseRecorder) {
	t.Helper()
	check(t, w, 429, "text/html; charset=UTF-8", page429)
	if c := w.Header()["Connection"]; len(c) != 1 || c[0] != "close" {
		t.Fatalf("429 with Connection %q, want [close]", c)
	}
}

// TestRateLimit: 50 requests a second per VM (the default), in bursts of
// 50; the next gets 429 before anything is looked up, a flooding VM does
// not slow another, a wait_for_change request counts once when it is
// made and not while it is held, and 0 turns throttling off.
func TestRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, s := setup(t)
		s.SetRateLimit(gce.DefaultRateLimit)
		if gce.DefaultRateLimit != 50 {
			t.Fatalf("DefaultRateLimit %v, want 50", gce.DefaultRateLimit)
		}
		key := "instance/maintenance-event"
		for i := range 50 {
			if w := get(s, vmAddr, key); w.Code != 200 {
				t.Fatalf("request %d: %d", i+1, w.Code)
			}
		}
		check429(t, get(s, vmAddr, key))
		// Throttled before the header, the path or the method is
		// looked at.
		check429(t, do(s, req{target: v1 + key, header: map[string]string{}}))
		check429(t, get(s, vmAddr, "no/such/key"))
		check429(t, do(s, req{method: "POST", target: v1 + key}))
		// vm floods; quiet keeps its own budget.
		for range 200 {
			get(s, vmAddr, key)
		}
		for i := range 50 {
			if w := get(s, quietAddr, key); w.Code != 200 {
				t.Fatalf("quiet's request %d while vm floods: %d", i+1, w.Code)
			}
		}
		// One request's worth of budget comes back every 20 ms.
		time.Sleep(19 * time.Millisecond)
		check429(t, get(s, vmAddr, key))
		time.Sleep(time.Millisecond)
		if w := get(s, vmAddr, key); w.Code != 200 {
			t.Fatalf("after 20ms: %d", w.Code)
		}
		check429(t, get(s, vmAddr, key))

		// A long-poll counts when it is made: with it, 49 more fit.
		time.Sleep(time.Second)
		etag := etagOf(t, get(s, vmAddr, key))
		time.Sleep(time.Second)
		p := startPoll(s, req{target: v1 + key + "?wait_for_change=true&last_etag=" + etag})
		synctest.Wait()
		p.hanging(t, "long-poll")
		for i := range 49 {
			if w := get(s, vmAddr, key); w.Code != 200 {
				t.Fatalf("request %d beside the long-poll: %d", i+1, w.Code)
			}
		}
		check429(t, get(s, vmAddr, key))
		// Held for an hour, it costs nothing: the budget is whole again,
		// and the long-poll is answered, not throttled, when it wakes.
		time.Sleep(time.Hour)
		synctest.Wait()
		p.hanging(t, "after an hour")
		for i := range 50 {
			if w := get(s, quietAddr, key); w.Code != 200 {
				t.Fatalf("quiet's request %d an hour on: %d", i+1, w.Code)
			}
		}
		ev := create(t, e, engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"vm"}, Notice: time.Hour})
		if err := e.Start(t.Context(), ev.ID); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		text(t, p.answered(t, "after the start"), "MIGRATE_ON_HOST_MAINTENANCE")
		for i := range 50 {
			if w := get(s, vmAddr, key); w.Code != 200 {
				t.Fatalf("request %d after the long-poll's hour: %d", i+1, w.Code)
			}
		}
		check429(t, get(s, vmAddr, key))

		s.SetRateLimit(0)
		for i := range 200 {
			if w := get(s, vmAddr, key); w.Code != 200 {
				t.Fatalf("unthrottled request %d: %d", i+1, w.Code)
			}
		}
	})
}

// direct is an http.RoundTripper that serves each request with h, from
// remote, without a socket: a synctest bubble can hold it.
type direct struct {
	h      http.Handler
	remote string
}

func (d direct) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.RemoteAddr, r.RequestURI = d.remote, r.URL.RequestURI()
	w := httptest.NewRecorder()
	d.h.ServeHTTP(w, r)
	return w.Result(), nil
}

// TestRateLimitSparesLongPollClients: at the default rate, a VM that
// watches its maintenance keys as clients do (a long-poll on each,
// issued again after every change, here by the package's own Watch)
// and reads instance/ recursively once a second besides, is never
// throttled while its keys change ten times a second for 30 seconds,
// far faster than any real maintenance, and sees every maintenance.
func TestRateLimitSparesLongPollClients(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, s := setup(t)
		s.SetRateLimit(gce.DefaultRateLimit)
		var requests, throttled atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, r)
			requests.Add(1)
			if rec.Code == http.StatusTooManyRequests {
				throttled.Add(1)
			}
			maps.Copy(w.Header(), rec.Header())
			w.WriteHeader(rec.Code)
			w.Write(rec.Body.Bytes())
		})
		hc := &http.Client{Transport: direct{h, vmAddr}}
		c := gce.NewClient("http://metadata.google.internal", gce.WithHTTPClient(hc))

		ctx, stop := context.WithCancel(t.Context())
		var polling sync.WaitGroup
		defer polling.Wait()
		defer stop()
		var migrations atomic.Int64
		watching := make(chan error, 1)
		go func() {
			was := false
			watching <- c.Watch(ctx, func(ns []forewarn.Notice) error {
				now := slices.ContainsFunc(ns, func(n forewarn.Notice) bool { return n.Type == "MIGRATE_ON_HOST_MAINTENANCE" })
				if now && !was {
					migrations.Add(1)
				}
				was = now
				return nil
			})
		}()
		polling.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, "GET", "http://metadata.google.internal"+v1+"instance/?recursive=true", nil)
				req.Header.Set("Metadata-Flavor", "Google")
				if resp, err := hc.Do(req); err == nil {
					resp.Body.Close()
				}
				time.Sleep(time.Second)
			}
		})
		synctest.Wait()
		const cycles = 100
		for range cycles {
			ev := create(t, e, engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"vm"}, Notice: time.Hour, Lasts: time.Minute})
			time.Sleep(100 * time.Millisecond)
			if err := e.Start(t.Context(), ev.ID); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
			if err := e.Complete(t.Context(), ev.ID); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		stop()
		if err := <-watching; err != context.Canceled {
			t.Fatalf("Watch: %v", err)
		}
		if n := throttled.Load(); n != 0 {
			t.Errorf("%d of %d requests throttled", n, requests.Load())
		}
		if n := migrations.Load(); n != cycles {
			t.Errorf("Watch saw %d migrations, want %d", n, cycles)
		}
		t.Logf("%d requests in %v", requests.Load(), time.Duration(cycles)*300*time.Millisecond)
	})
}

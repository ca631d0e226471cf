package gce_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
)

// TestShutdownReleasesLongPolls: Shutdown answers every held long-poll
// with 503 at once.
func TestShutdownReleasesLongPolls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, s := setup(t)
		etag := etagOf(t, get(s, vmAddr, "instance/maintenance-event"))
		var ws []*httptest.ResponseRecorder
		var wg sync.WaitGroup
		for range 5 {
			w := httptest.NewRecorder()
			ws = append(ws, w)
			wg.Go(func() {
				s.ServeHTTP(w, newRequest(req{target: v1 + "instance/maintenance-event?wait_for_change=true&last_etag=" + etag}))
			})
		}
		synctest.Wait()
		s.Shutdown()
		wg.Wait()
		for _, w := range ws {
			checkError(t, w, 503)
		}
	})
}

// TestTenThousandLongPolls: 10,000 long-polls over real sockets come and
// go (half woken by changes, half abandoned by their clients) and leave
// no goroutine behind.
func TestTenThousandLongPolls(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 connections")
	}
	e, s := setup(t)
	s.MaxWaiters = 0
	srv := httptest.NewServer(s)
	defer srv.Close()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: -1, DisableKeepAlives: true}
	hc := &http.Client{Transport: tr}
	base := runtime.NumGoroutine()

	const total, batch = 10_000, 500
	for round := 0; round < total/batch; round++ {
		etag := etagOf(t, get(s, vmAddr, "instance/maintenance-event"))
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var mu sync.Mutex
		answered := 0
		for range batch {
			wg.Go(func() {
				req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+v1+"instance/maintenance-event?wait_for_change=true&last_etag="+etag, nil)
				req.Header.Set("Metadata-Flavor", "Google")
				resp, err := hc.Do(req)
				if err != nil {
					return // abandoned by its client
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					mu.Lock()
					answered++
					mu.Unlock()
				}
			})
		}
		// Wait until the server holds them all.
		deadline := time.Now().Add(20 * time.Second)
		for runtime.NumGoroutine() < base+2*batch && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if round%2 == 0 {
			// A change wakes them: start and complete an unwarned migration.
			ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"vm"}, Notice: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			if err := e.Start(t.Context(), ev.ID); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			if err := e.Complete(t.Context(), ev.ID); err != nil {
				t.Fatal(err)
			}
			if answered != batch {
				t.Fatalf("round %d: %d of %d long-polls answered", round, answered, batch)
			}
		} else {
			cancel() // the clients go away
			wg.Wait()
		}
		cancel()
	}
	tr.CloseIdleConnections()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= base+5 {
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after 10,000 long-polls, %d before\n%s", n, base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("goroutines: %d before, %d after", base, runtime.NumGoroutine())
}

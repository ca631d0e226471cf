package gce_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"testing/synctest"
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

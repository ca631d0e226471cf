package gce_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
)

const maintenanceEvent = v1 + "instance/maintenance-event"

// poll is a request served in its own goroutine.
type poll struct {
	w    *httptest.ResponseRecorder
	done chan struct{}

	mu    sync.Mutex
	wrote bool // WriteHeader or Write was called
}

// pollWriter records, safely for the waiting test, that the handler
// started its answer.
type pollWriter struct{ p *poll }

func (pw pollWriter) Header() http.Header { return pw.p.w.Header() }

func (pw pollWriter) WriteHeader(code int) {
	pw.p.mu.Lock()
	pw.p.wrote = true
	pw.p.mu.Unlock()
	pw.p.w.WriteHeader(code)
}

func (pw pollWriter) Write(b []byte) (int, error) {
	pw.p.mu.Lock()
	pw.p.wrote = true
	pw.p.mu.Unlock()
	return pw.p.w.Write(b)
}

func startPoll(h http.Handler, r req) *poll {
	p := &poll{w: httptest.NewRecorder(), done: make(chan struct{})}
	hr := newRequest(r)
	go func() {
		defer close(p.done)
		h.ServeHTTP(pollWriter{p}, hr)
	}()
	return p
}

// finished reports whether the handler returned.
func (p *poll) finished() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// hanging asserts that the handler is still waiting and wrote nothing.
// Call it after synctest.Wait.
func (p *poll) hanging(t *testing.T, when string) {
	t.Helper()
	if p.finished() {
		t.Fatalf("%s: answered %d %q, want still waiting", when, p.w.Code, p.w.Body.String())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.wrote {
		t.Fatalf("%s: started an answer while waiting", when)
	}
}

// answered asserts that the handler returned, and returns its recorder.
// Call it after synctest.Wait.
func (p *poll) answered(t *testing.T, when string) *httptest.ResponseRecorder {
	t.Helper()
	if !p.finished() {
		t.Fatalf("%s: still waiting, want an answer", when)
	}
	return p.w
}

// other returns an ETag that differs from tag in its last digit.
func other(tag string) string {
	last := "0"
	if strings.HasSuffix(tag, "0") {
		last = "1"
	}
	return tag[:len(tag)-1] + last
}

func waitFor(etag string) string {
	return "?wait_for_change=true&last_etag=" + etag
}

// TestLongPollStaleETag checks that a last_etag other than the current
// one answers at once with the current value.
func TestLongPollStaleETag(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, h := setup(t)
		start := time.Now()
		none := text(t, get(h, vmAddr, "instance/maintenance-event"), "NONE")
		for _, q := range []string{waitFor("0"), waitFor("NONE"), "?wait_for_change=True&last_etag=0", waitFor(other(none))} {
			if tag := text(t, do(h, req{target: maintenanceEvent + q}), "NONE"); tag != none {
				t.Fatalf("%s: ETag %s, want %s", q, tag, none)
			}
		}
		jsonBody(t, do(h, req{target: maintenanceEvent + waitFor("0") + "&alt=json"}), `"NONE"`)
		text(t, do(h, req{target: v1 + "instance/preempted" + waitFor("0"), remote: spotAddr}), "FALSE")
		if !time.Now().Equal(start) {
			t.Fatalf("stale last_etag took %s", time.Since(start))
		}
	})
}

// TestLongPollWakes checks that a matching last_etag waits for the
// change and answers the new value with its ETag, at the instant of the
// change.
func TestLongPollWakes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		none := text(t, get(h, vmAddr, "instance/maintenance-event"), "NONE")
		p := startPoll(h, req{target: maintenanceEvent + waitFor(none)})
		synctest.Wait()
		p.hanging(t, "at once")

		// Warned 30s from now: the poll noted the query.
		create(t, e, engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"vm"}, Notice: 90 * time.Second, Lasts: time.Minute})
		synctest.Wait()
		p.hanging(t, "after a change to another key")
		step(30*time.Second - time.Millisecond)
		p.hanging(t, "1ms before the warning")
		step(time.Millisecond)
		tag := text(t, p.answered(t, "at the warning"), "MIGRATE_ON_HOST_MAINTENANCE")
		if tag == none {
			t.Fatal("ETag unchanged")
		}
		if now := time.Now(); !now.Equal(at(30 * time.Second)) {
			t.Fatalf("answered at %s", now)
		}
		if cur := text(t, get(h, vmAddr, "instance/maintenance-event"), "MIGRATE_ON_HOST_MAINTENANCE"); cur != tag {
			t.Fatalf("long-poll ETag %s, plain GET %s", tag, cur)
		}

		// wait_for_change works on preempted, and with alt=json.
		falseTag := text(t, get(h, spotAddr, "instance/preempted"), "FALSE")
		p = startPoll(h, req{target: v1 + "instance/preempted" + waitFor(falseTag) + "&alt=json", remote: spotAddr})
		synctest.Wait()
		p.hanging(t, "preempted")
		if _, err := e.Evict(t.Context(), "spot"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if tag := jsonBody(t, p.answered(t, "after Evict"), `"TRUE"`); tag == falseTag {
			t.Fatal("preempted ETag unchanged")
		}
	})
}

// TestLongPollTimeout checks that timeout_sec bounds the wait to the
// second and answers the unchanged value.
func TestLongPollTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, h := setup(t)
		none := text(t, get(h, vmAddr, "instance/maintenance-event"), "NONE")
		p := startPoll(h, req{target: maintenanceEvent + waitFor(none) + "&timeout_sec=5"})
		step(5*time.Second - time.Millisecond)
		p.hanging(t, "at 4.999s")
		step(time.Millisecond)
		if tag := text(t, p.answered(t, "at 5s"), "NONE"); tag != none {
			t.Fatalf("ETag %s after the timeout, want %s", tag, none)
		}

		// timeout_sec=0 answers at once.
		start := time.Now()
		if tag := text(t, do(h, req{target: maintenanceEvent + waitFor(none) + "&timeout_sec=0"}), "NONE"); tag != none {
			t.Fatalf("ETag %s", tag)
		}
		if !time.Now().Equal(start) {
			t.Fatal("timeout_sec=0 waited")
		}
	})
}

// TestLongPollUnbounded checks that without timeout_sec the wait has no
// bound, and that a client going away ends it without an answer.
func TestLongPollUnbounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, h := setup(t)
		none := text(t, get(h, vmAddr, "instance/maintenance-event"), "NONE")
		ctx, cancel := context.WithCancel(t.Context())
		p := startPoll(h, req{target: maintenanceEvent + waitFor(none), ctx: ctx})
		step(24 * time.Hour)
		p.hanging(t, "after 24h")
		cancel()
		synctest.Wait()
		p.answered(t, "after cancel")
		if p.wrote {
			t.Fatalf("answered %d %q to a client that went away", p.w.Code, p.w.Body.String())
		}
	})
}

// TestLongPollDisconnect checks that a waiter whose client goes away
// returns at once, with and without a timeout pending. synctest.Test
// itself fails on any goroutine left behind.
func TestLongPollDisconnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, h := setup(t)
		none := text(t, get(h, vmAddr, "instance/maintenance-event"), "NONE")
		for _, q := range []string{"", "&timeout_sec=3600"} {
			ctx, cancel := context.WithCancel(t.Context())
			p := startPoll(h, req{target: maintenanceEvent + waitFor(none) + q, ctx: ctx})
			step(time.Minute)
			p.hanging(t, q)
			cancel()
			synctest.Wait()
			p.answered(t, q+" after cancel")
			if p.wrote {
				t.Fatalf("%s: answered %d %q to a client that went away", q, p.w.Code, p.w.Body.String())
			}
		}
	})
}

// TestLongPollChangeBack checks that no change is lost: a value changed
// and changed back before the waiter runs still wakes it with the
// intermediate value. Document changes that leave the key alone do not.
func TestLongPollChangeBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		none := text(t, get(h, vmAddr, "instance/maintenance-event"), "NONE")
		p := startPoll(h, req{target: maintenanceEvent + waitFor(none)})
		synctest.Wait()
		p.hanging(t, "at once")

		// Created and canceled: the document changes twice, the key never.
		ev := create(t, e, engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"vm"}, Notice: 10 * time.Minute})
		if err := e.Cancel(t.Context(), ev.ID); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		p.hanging(t, "after create and cancel")

		// Scheduled and not yet warned, the key reads NONE; started and
		// completed back to back, it reads MIGRATE then NONE again.
		ev = create(t, e, engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"vm"}, Notice: 10 * time.Minute})
		synctest.Wait()
		p.hanging(t, "after create")
		if err := e.Start(t.Context(), ev.ID); err != nil {
			t.Fatal(err)
		}
		if err := e.Complete(t.Context(), ev.ID); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		mig := text(t, p.answered(t, "after start and complete"), "MIGRATE_ON_HOST_MAINTENANCE")
		if mig == none {
			t.Fatal("ETag unchanged")
		}
		text(t, get(h, vmAddr, "instance/maintenance-event"), "NONE")

		// The same for upcoming-maintenance: empty (a maintenance ended),
		// pending, empty.
		absent := text(t, get(h, vmAddr, "instance/upcoming-maintenance"), "")
		p = startPoll(h, req{target: v1 + "instance/upcoming-maintenance" + waitFor(absent)})
		synctest.Wait()
		p.hanging(t, "upcoming-maintenance")
		ev = create(t, e, engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"vm"}, Notice: time.Hour, Lasts: time.Minute})
		if err := e.Cancel(t.Context(), ev.ID); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		text(t, p.answered(t, "upcoming-maintenance after create and cancel"),
			"can_reschedule true\nlatest_window_start_time 2000-01-01T01:00:00+00:00\nmaintenance_status PENDING\ntype SCHEDULED\n"+
				"window_end_time 2000-01-01T01:01:00+00:00\nwindow_start_time 2000-01-01T01:00:00+00:00")
	})
}

// TestLongPollManyWaiters checks that one change wakes a thousand
// waiters on one key.
func TestLongPollManyWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		none := text(t, get(h, vmAddr, "instance/maintenance-event"), "NONE")
		polls := make([]*poll, 1000)
		for i := range polls {
			polls[i] = startPoll(h, req{target: maintenanceEvent + waitFor(none)})
		}
		synctest.Wait()
		for i, p := range polls {
			p.hanging(t, fmt.Sprintf("waiter %d", i))
		}
		create(t, e, engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"vm"}, Started: true, Lasts: time.Minute})
		synctest.Wait()
		want := text(t, get(h, vmAddr, "instance/maintenance-event"), "MIGRATE_ON_HOST_MAINTENANCE")
		for i, p := range polls {
			if tag := text(t, p.answered(t, fmt.Sprintf("waiter %d", i)), "MIGRATE_ON_HOST_MAINTENANCE"); tag != want {
				t.Fatalf("waiter %d: ETag %s, want %s", i, tag, want)
			}
		}
	})
}

// TestLongPollUpcoming checks wait_for_change on upcoming-maintenance
// while nothing is announced.
func TestLongPollUpcoming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		const none = `{ "error": "no notifications have been received yet, try again later" }`
		w := get(h, vmAddr, "instance/upcoming-maintenance")
		check(t, w, http.StatusServiceUnavailable, "application/json", none)
		absent := etagOf(t, w)

		// A different last_etag: 503 at once.
		w = do(h, req{target: v1 + "instance/upcoming-maintenance" + waitFor("0")})
		check(t, w, http.StatusServiceUnavailable, "application/json", none)
		if tag := etagOf(t, w); tag != absent {
			t.Fatalf("ETag %s, want %s", tag, absent)
		}

		// The absent ETag: wait until something is announced.
		p := startPoll(h, req{target: v1 + "instance/upcoming-maintenance" + waitFor(absent)})
		step(time.Hour)
		p.hanging(t, "after an hour")
		create(t, e, engine.Spec{Type: forewarn.TerminateOnHostMaintenance, VMs: []string{"vm"}, Notice: 2 * time.Hour, Lasts: 5 * time.Minute})
		synctest.Wait()
		tag := text(t, p.answered(t, "after create"),
			"can_reschedule true\nlatest_window_start_time 2000-01-01T03:00:00+00:00\nmaintenance_status PENDING\ntype SCHEDULED\n"+
				"window_end_time 2000-01-01T03:05:00+00:00\nwindow_start_time 2000-01-01T03:00:00+00:00")
		if tag == absent {
			t.Fatal("ETag unchanged")
		}
	})
}

// waiters returns how many goroutines are inside the GCE long-poll wait.
func waiters() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "gce.(*Server).wait(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// eventually retries cond for up to two seconds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 2s: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// socketSetup serves the test fleet on a real socket; requests from
// 127.0.0.2 are the VM "vm".
func socketSetup(t *testing.T) (*engine.Engine, *httptest.Server, *sync.WaitGroup) {
	t.Helper()
	e, s := setup(t)
	var handlers sync.WaitGroup
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handlers.Add(1)
		defer handlers.Done()
		s.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return e, srv, &handlers
}

var vmDialer = &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 5 * time.Second}

// TestLongPollSocketWakes checks, over a real socket, that a waiting
// long-poll is answered within 50ms of the engine change.
func TestLongPollSocketWakes(t *testing.T) {
	e, srv, _ := socketSetup(t)
	tr := &http.Transport{DialContext: vmDialer.DialContext}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	getKey := func(q string) (*http.Response, string) {
		t.Helper()
		r, err := http.NewRequest(http.MethodGet, srv.URL+maintenanceEvent+q, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Metadata-Flavor", "Google")
		resp, err := client.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}

	resp, body := getKey("")
	if resp.StatusCode != 200 || body != "NONE" || resp.Header.Get("Metadata-Flavor") != "Google" {
		t.Fatalf("plain GET: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	none := resp.Header.Get("ETag")
	if !etagRE.MatchString(none) {
		t.Fatalf("ETag %q", none)
	}

	type result struct {
		resp *http.Response
		body string
		at   time.Time
	}
	res := make(chan result, 1)
	go func() {
		r, err := http.NewRequest(http.MethodGet, srv.URL+maintenanceEvent+waitFor(none), nil)
		if err != nil {
			panic(err)
		}
		r.Header.Set("Metadata-Flavor", "Google")
		resp, err := client.Do(r)
		arrived := time.Now()
		if err != nil {
			res <- result{body: err.Error(), at: arrived}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- result{resp, string(b), arrived}
	}()
	eventually(t, "the long-poll is not waiting", func() bool { return waiters() == 1 })
	select {
	case r := <-res:
		t.Fatalf("answered before any change: %q", r.body)
	default:
	}

	changed := time.Now()
	create(t, e, engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"vm"}, Started: true, Lasts: time.Minute})
	r := <-res
	if r.resp == nil {
		t.Fatal(r.body)
	}
	if d := r.at.Sub(changed); d >= 50*time.Millisecond {
		t.Fatalf("answered %s after the change, want < 50ms", d)
	}
	tag := r.resp.Header.Get("ETag")
	if r.resp.StatusCode != 200 || r.body != "MIGRATE_ON_HOST_MAINTENANCE" || !etagRE.MatchString(tag) || tag == none ||
		r.resp.Header.Get("Metadata-Flavor") != "Google" || r.resp.Header.Get("Content-Type") != "application/text" {
		t.Fatalf("long-poll answered %d %q %v", r.resp.StatusCode, r.body, r.resp.Header)
	}
}

// TestLongPollSocketDisconnect checks, over a real socket, that a client
// closing its connection mid-wait leaves no goroutine behind.
func TestLongPollSocketDisconnect(t *testing.T) {
	_, srv, handlers := socketSetup(t)
	before := runtime.NumGoroutine()

	conn, err := vmDialer.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	send := func(q string) {
		t.Helper()
		_, err := fmt.Fprintf(conn, "GET %s%s HTTP/1.1\r\nHost: metadata.google.internal\r\nMetadata-Flavor: Google\r\n\r\n", maintenanceEvent, q)
		if err != nil {
			t.Fatal(err)
		}
	}
	send("")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	etag := resp.Header.Get("ETag")
	if resp.StatusCode != 200 || string(b) != "NONE" || !etagRE.MatchString(etag) {
		t.Fatalf("plain GET: %d %q %v", resp.StatusCode, b, resp.Header)
	}

	send(waitFor(etag))
	eventually(t, "the long-poll is not waiting", func() bool { return waiters() == 1 })
	conn.Close()
	eventually(t, "the waiter is still there after the client closed", func() bool { return waiters() == 0 })
	done := make(chan struct{})
	go func() { handlers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("the handler did not return")
	}
	var after int
	eventually(t, "goroutines left behind", func() bool {
		after = runtime.NumGoroutine()
		return after <= before
	})
}

package gce_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/gce"
)

// These tests run the real server (setup in handler_test.go: "vm" at
// 127.0.0.2, the Spot VM "spot" at 127.0.0.5) on a real socket and drive
// it with the client, from the VM's own address.

// vmHTTP returns an HTTP client whose connections come from ip, as a
// VM's do. It has no timeout: long-polls hang.
func vmHTTP(t *testing.T, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// counted is a handler on a real socket that counts its requests and
// those being served.
type counted struct {
	*httptest.Server
	requests, inFlight atomic.Int64
}

func serveCounted(t *testing.T, h http.Handler) *counted {
	t.Helper()
	s := &counted{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		s.inFlight.Add(1)
		defer s.inFlight.Add(-1)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// clientFor returns a client of srv speaking from ip.
func clientFor(t *testing.T, srv *counted, ip string, opts ...gce.ClientOption) *gce.Client {
	t.Helper()
	return gce.NewClient(srv.URL, append([]gce.ClientOption{gce.WithHTTPClient(vmHTTP(t, ip))}, opts...)...)
}

// faultProxy answers its first requests with faults and forwards the
// rest to target, dialing it from the VM's address so that the real
// server knows the VM. It adds no X-Forwarded-For.
type faultProxy struct {
	*httptest.Server
	requests atomic.Int64
}

func newFaultProxy(t *testing.T, target, vmIP string, fault func(n int, w http.ResponseWriter, r *http.Request) bool, modify func(*http.Response) error) *faultProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(vmIP)}, Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }, Transport: tr, ModifyResponse: modify}
	p := &faultProxy{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(p.requests.Add(1))
		if fault != nil && fault(n, w, r) {
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

// firstN answers the first n requests with status, as the metadata
// server writes its errors (Metadata-Flavor included).
func firstN(n, status int, retryAfter string) func(int, http.ResponseWriter, *http.Request) bool {
	return func(i int, w http.ResponseWriter, r *http.Request) bool {
		if i > n {
			return false
		}
		w.Header().Set("Metadata-Flavor", "Google")
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.Header().Set("Content-Type", "text/html; charset=UTF-8")
		w.WriteHeader(status)
		io.WriteString(w, "<!DOCTYPE html>\n<html lang=en>\n<title>Error</title>\n")
		return true
	}
}

// hangUp closes the connection of the first n requests without an
// answer.
func hangUp(n int) func(int, http.ResponseWriter, *http.Request) bool {
	return func(i int, w http.ResponseWriter, r *http.Request) bool {
		if i > n {
			return false
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		conn.Close()
		return true
	}
}

// timestamp renders t as upcoming-maintenance does.
func timestamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05+00:00") }

func checkNotices(t *testing.T, got []forewarn.Notice, want ...forewarn.Notice) {
	t.Helper()
	if want == nil {
		want = []forewarn.Notice{}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("notices\n got %+v\nwant %+v", got, want)
	}
}

// TestClientGet reads keys from the real server: values unmodified, the
// ETag, a 404 at once, and upcoming-maintenance's absent state at once.
func TestClientGet(t *testing.T) {
	_, s := setup(t)
	srv := serveCounted(t, s)
	c := clientFor(t, srv, "127.0.0.2")
	ctx := t.Context()

	v, tag, err := c.Get(ctx, "instance/maintenance-event")
	if err != nil || v != "NONE" || !etagRE.MatchString(tag) {
		t.Fatalf("maintenance-event = %q, ETag %q, %v", v, tag, err)
	}
	if name, err := c.InstanceName(ctx); err != nil || name != "vm" {
		t.Fatalf("InstanceName = %q, %v", name, err)
	}
	v, _, err = c.Get(ctx, "instance/zone")
	if err != nil || !strings.HasPrefix(v, "projects/") || !strings.HasSuffix(v, "/zones/us-central1-a") {
		t.Fatalf("zone = %q, %v", v, err)
	}
	v, _, err = c.Get(ctx, "instance/scheduling/?recursive=true")
	if err != nil || !strings.Contains(v, `"onHostMaintenance":"MIGRATE"`) {
		t.Fatalf("scheduling = %q, %v", v, err)
	}

	before := srv.requests.Load()
	_, _, err = c.Get(ctx, "instance/no-such-key")
	var se *gce.StatusError
	if !errors.As(err, &se) || se.Code != http.StatusNotFound {
		t.Fatalf("unknown key: %v, want a 404 StatusError", err)
	}
	v, tag, err = c.Get(ctx, "instance/upcoming-maintenance")
	if !errors.Is(err, gce.ErrNoNotification) || v != "" || !etagRE.MatchString(tag) {
		t.Fatalf("upcoming-maintenance = %q, ETag %q, %v; want ErrNoNotification with an ETag", v, tag, err)
	}
	if n := srv.requests.Load() - before; n != 2 {
		t.Fatalf("%d requests for a 404 and an absent key, want 2: neither is retried", n)
	}
}

// TestClientWaitForChange long-polls the real server.
func TestClientWaitForChange(t *testing.T) {
	e, s := setup(t)
	srv := serveCounted(t, s)
	c := clientFor(t, srv, "127.0.0.2")
	ctx := t.Context()
	const key = "instance/maintenance-event"

	// upcoming-maintenance before anything was announced: the 503 state,
	// whose ETag a stale wait answers at once.
	_, absent, err := c.Get(ctx, "instance/upcoming-maintenance")
	if !errors.Is(err, gce.ErrNoNotification) {
		t.Fatal(err)
	}
	if _, tag, err := c.WaitForChange(ctx, "instance/upcoming-maintenance", "0"); !errors.Is(err, gce.ErrNoNotification) || tag != absent {
		t.Fatalf("stale wait on the absent key: ETag %q, %v", tag, err)
	}

	// A stale ETag answers at once.
	v, none, err := c.WaitForChange(ctx, key, "0")
	if err != nil || v != "NONE" || !etagRE.MatchString(none) {
		t.Fatalf("stale ETag: %q %q %v", v, none, err)
	}

	type result struct {
		value, etag string
		err         error
	}
	wait := func(ctx context.Context, key, etag string) chan result {
		ch := make(chan result, 1)
		go func() {
			v, tag, err := c.WaitForChange(ctx, key, etag)
			ch <- result{v, tag, err}
		}()
		eventually(t, "the long-poll is not waiting", func() bool { return srv.inFlight.Load() == 1 })
		select {
		case r := <-ch:
			t.Fatalf("answered before any change: %+v", r)
		case <-time.After(50 * time.Millisecond):
		}
		return ch
	}
	answer := func(ch chan result) result {
		t.Helper()
		select {
		case r := <-ch:
			return r
		case <-time.After(5 * time.Second):
			t.Fatal("no answer within 5s of the change")
		}
		return result{}
	}

	// The current ETag hangs until the value changes.
	ch := wait(ctx, key, none)
	ev := create(t, e, engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"vm"}, Started: true, Lasts: time.Minute})
	r := answer(ch)
	if r.err != nil || r.value != "MIGRATE_ON_HOST_MAINTENANCE" || r.etag == none || !etagRE.MatchString(r.etag) {
		t.Fatalf("after the change: %+v", r)
	}

	// A wait ends with its context, and the server lets go of it.
	wctx, cancel := context.WithCancel(ctx)
	ch = wait(wctx, key, r.etag)
	cancel()
	if r := answer(ch); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled wait: %+v", r)
	}
	eventually(t, "the server still serves the cancelled wait", func() bool { return srv.inFlight.Load() == 0 })

	// upcoming-maintenance: once the maintenance ended it reads empty, and
	// that state's ETag waits for the next announcement.
	if err := e.Complete(ctx, ev.ID); err != nil {
		t.Fatal(err)
	}
	v, ended, err := c.Get(ctx, "instance/upcoming-maintenance")
	if err != nil || v != "" || ended == absent {
		t.Fatalf("after the maintenance: %q %q %v", v, ended, err)
	}
	if v, tag, err := c.WaitForChange(ctx, "instance/upcoming-maintenance", "0"); err != nil || v != "" || tag != ended {
		t.Fatalf("stale wait on the empty key: %q %q %v", v, tag, err)
	}
	ch = wait(ctx, "instance/upcoming-maintenance", ended)
	ev = create(t, e, engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"vm"}, Notice: 2 * time.Hour, Lasts: 10 * time.Minute})
	r = answer(ch)
	nb := timestamp(ev.NotBefore)
	want := "can_reschedule true\nlatest_window_start_time " + nb + "\nmaintenance_status PENDING\ntype SCHEDULED\nwindow_end_time " +
		timestamp(ev.NotBefore.Add(10*time.Minute)) + "\nwindow_start_time " + nb
	if r.err != nil || r.value != want || r.etag == ended {
		t.Fatalf("announcement: %+v", r)
	}
}

// TestClientMetadataHost: NewClient("") honours GCE_METADATA_HOST, and
// without it calls the real server's name.
func TestClientMetadataHost(t *testing.T) {
	_, s := setup(t)
	srv := serveCounted(t, s)
	t.Setenv("GCE_METADATA_HOST", srv.Listener.Addr().String())
	name, err := gce.NewClient("", gce.WithHTTPClient(vmHTTP(t, "127.0.0.2"))).InstanceName(t.Context())
	if err != nil || name != "vm" {
		t.Fatalf("InstanceName = %q, %v", name, err)
	}

	t.Setenv("GCE_METADATA_HOST", "")
	var got *http.Request
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		got = r
		return &http.Response{StatusCode: 200, Header: http.Header{"Metadata-Flavor": {"Google"}}, Body: io.NopCloser(strings.NewReader("vm"))}, nil
	})}
	if _, err := gce.NewClient("", gce.WithHTTPClient(hc)).InstanceName(t.Context()); err != nil {
		t.Fatal(err)
	}
	if u := got.URL.String(); u != "http://metadata.google.internal/computeMetadata/v1/instance/name" || got.Header.Get("Metadata-Flavor") != "Google" {
		t.Fatalf("request %s %v", u, got.Header)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestClientNotices normalizes the keys through a host maintenance's
// life and a Spot VM's preemption.
func TestClientNotices(t *testing.T) {
	e, s := setup(t)
	srv := serveCounted(t, s)
	c := clientFor(t, srv, "127.0.0.2")
	ctx := t.Context()
	notices := func() []forewarn.Notice {
		t.Helper()
		ns, err := c.Notices(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ns
	}

	checkNotices(t, notices())

	// Announced: PENDING.
	ev := create(t, e, engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"vm"}, Notice: 2 * time.Hour, Lasts: 10 * time.Minute})
	id := "upcoming-maintenance-" + timestamp(ev.NotBefore)
	checkNotices(t, notices(), forewarn.Notice{ID: id, Type: forewarn.UpcomingMaintenance, Status: "Scheduled", Resources: []string{"vm"},
		NotBefore: ev.NotBefore.UTC(), Duration: -1, Source: "Platform",
		Description: "type SCHEDULED, can_reschedule true, window_end_time " + timestamp(ev.NotBefore.Add(10*time.Minute)), Provider: forewarn.GCE})

	// Started early: maintenance-event flips, upcoming goes ONGOING with
	// a new window, and keeps its ID.
	if err := e.Start(ctx, ev.ID); err != nil {
		t.Fatal(err)
	}
	started := event(t, e, ev.ID).StartedAt.UTC().Truncate(time.Second)
	_, tag, err := c.Get(ctx, "instance/maintenance-event")
	if err != nil {
		t.Fatal(err)
	}
	checkNotices(t, notices(),
		forewarn.Notice{ID: "maintenance-event-" + tag, Type: "MIGRATE_ON_HOST_MAINTENANCE", Status: "Started", Resources: []string{"vm"},
			NotBefore: started, Duration: -1, Source: "Platform", Description: "maintenance-event is MIGRATE_ON_HOST_MAINTENANCE", Provider: forewarn.GCE},
		forewarn.Notice{ID: id, Type: forewarn.UpcomingMaintenance, Status: "Started", Resources: []string{"vm"},
			NotBefore: started, Duration: -1, Source: "Platform",
			Description: "type SCHEDULED, can_reschedule false, window_end_time " + timestamp(started.Add(10*time.Minute)), Provider: forewarn.GCE})

	if err := e.Complete(ctx, ev.ID); err != nil {
		t.Fatal(err)
	}
	checkNotices(t, notices())

	// A Spot VM's preemption.
	spot := clientFor(t, srv, "127.0.0.5")
	if ns, err := spot.Notices(ctx); err != nil || len(ns) != 0 {
		t.Fatalf("spot before eviction: %+v %v", ns, err)
	}
	if _, err := e.Evict(ctx, "spot"); err != nil {
		t.Fatal(err)
	}
	ns, err := spot.Notices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkNotices(t, ns, forewarn.Notice{ID: "preempted", Type: "Preempt", Status: "Started", Resources: []string{"spot"},
		Duration: -1, Source: "Platform", Provider: forewarn.GCE})
}

// TestClientNoticesWithoutUpcoming: a server without the
// upcoming-maintenance key (404) announces nothing there.
func TestClientNoticesWithoutUpcoming(t *testing.T) {
	e, s := setup(t)
	srv := serveCounted(t, s)
	p := newFaultProxy(t, srv.URL, "127.0.0.2", func(_ int, w http.ResponseWriter, r *http.Request) bool {
		if !strings.HasSuffix(r.URL.Path, "/upcoming-maintenance") {
			return false
		}
		w.Header().Set("Metadata-Flavor", "Google")
		w.WriteHeader(http.StatusNotFound)
		return true
	}, nil)
	c := gce.NewClient(p.URL)
	create(t, e, engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"vm"}, Started: true, Lasts: time.Minute})
	ns, err := c.Notices(t.Context())
	if err != nil || len(ns) != 1 || ns[0].Type != "MIGRATE_ON_HOST_MAINTENANCE" || !ns[0].NotBefore.IsZero() {
		t.Fatalf("notices %+v, %v", ns, err)
	}
}

// watcher runs Watch in the background and collects fn's calls.
type watcher struct {
	calls chan []forewarn.Notice
	done  chan error
}

func startWatch(t *testing.T, c *gce.Client, ctx context.Context) *watcher {
	w := &watcher{calls: make(chan []forewarn.Notice, 16), done: make(chan error, 1)}
	go func() {
		w.done <- c.Watch(ctx, func(ns []forewarn.Notice) error {
			w.calls <- ns
			return nil
		})
	}()
	return w
}

// next returns the next call's notices.
func (w *watcher) next(t *testing.T) []forewarn.Notice {
	t.Helper()
	select {
	case ns := <-w.calls:
		return ns
	case err := <-w.done:
		t.Fatalf("Watch returned %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("no call within 5s")
	}
	return nil
}

// until takes calls until one satisfies ok, at most max of them.
func (w *watcher) until(t *testing.T, max int, what string, ok func([]forewarn.Notice) bool) []forewarn.Notice {
	t.Helper()
	for i := 0; i < max; i++ {
		if ns := w.next(t); ok(ns) {
			return ns
		}
	}
	t.Fatalf("no call with %s within %d calls", what, max)
	return nil
}

// quiet asserts that fn is not called, and that nothing is requested,
// for a while: Watch waits in its long-polls and does not poll.
func (w *watcher) quiet(t *testing.T, srv *counted) {
	t.Helper()
	before := srv.requests.Load()
	select {
	case ns := <-w.calls:
		t.Fatalf("extra call with %+v", ns)
	case <-time.After(150 * time.Millisecond):
	}
	if n := srv.requests.Load() - before; n != 0 {
		t.Fatalf("%d requests while nothing changed", n)
	}
}

func types(ns []forewarn.Notice) string {
	var s []string
	for _, n := range ns {
		s = append(s, n.Type+"/"+n.Status)
	}
	return strings.Join(s, ",")
}

// TestClientWatch follows a live migration's flip to
// MIGRATE_ON_HOST_MAINTENANCE and back to NONE, and a Spot VM's
// preemption, through the real server's long-polls.
func TestClientWatch(t *testing.T) {
	e, s := setup(t)
	srv := serveCounted(t, s)
	c := clientFor(t, srv, "127.0.0.2", gce.WithRetry(10*time.Millisecond, 50*time.Millisecond))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w := startWatch(t, c, ctx)

	checkNotices(t, w.next(t))
	eventually(t, "three long-polls", func() bool { return srv.inFlight.Load() == 3 })
	w.quiet(t, srv)

	// An unplanned migration: maintenance-event and upcoming-maintenance
	// change together; fn sees at most one call per key.
	ev := create(t, e, engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"vm"}, Started: true, Lasts: time.Minute})
	ns := w.until(t, 2, "the migration", func(ns []forewarn.Notice) bool {
		return types(ns) == "MIGRATE_ON_HOST_MAINTENANCE/Started,UPCOMING_MAINTENANCE/Started"
	})
	started := event(t, e, ev.ID).StartedAt.UTC().Truncate(time.Second)
	if !ns[0].NotBefore.Equal(started) || ns[1].ID != "upcoming-maintenance-"+timestamp(started) ||
		ns[1].Description != "type UNSCHEDULED, can_reschedule false, window_end_time "+timestamp(started.Add(time.Minute)) {
		t.Fatalf("migration notices %+v", ns)
	}
	eventually(t, "three long-polls", func() bool { return srv.inFlight.Load() == 3 })
	w.quiet(t, srv)

	if err := e.Complete(ctx, ev.ID); err != nil {
		t.Fatal(err)
	}
	w.until(t, 2, "NONE", func(ns []forewarn.Notice) bool { return len(ns) == 0 })
	eventually(t, "three long-polls", func() bool { return srv.inFlight.Load() == 3 })
	w.quiet(t, srv)

	cancel()
	select {
	case err := <-w.done:
		if err != context.Canceled {
			t.Fatalf("Watch returned %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not return after cancel")
	}
	eventually(t, "the server still serves the long-polls", func() bool { return srv.inFlight.Load() == 0 })

	// A Spot VM's preemption.
	sctx, scancel := context.WithCancel(t.Context())
	defer scancel()
	sw := startWatch(t, clientFor(t, srv, "127.0.0.5"), sctx)
	checkNotices(t, sw.next(t))
	eventually(t, "three long-polls", func() bool { return srv.inFlight.Load() == 3 })
	if _, err := e.Evict(sctx, "spot"); err != nil {
		t.Fatal(err)
	}
	checkNotices(t, sw.next(t), forewarn.Notice{ID: "preempted", Type: "Preempt", Status: "Started", Resources: []string{"spot"},
		Duration: -1, Source: "Platform", Provider: forewarn.GCE})
	eventually(t, "three long-polls", func() bool { return srv.inFlight.Load() == 3 })
	sw.quiet(t, srv)
	scancel()
	if err := <-sw.done; err != context.Canceled {
		t.Fatalf("Watch returned %v", err)
	}
	eventually(t, "the server still serves the long-polls", func() bool { return srv.inFlight.Load() == 0 })
}

// TestClientWatchErrors: fn's error ends Watch and its long-polls, and so
// does an answer retrying cannot change.
func TestClientWatchErrors(t *testing.T) {
	e, s := setup(t)
	srv := serveCounted(t, s)
	c := clientFor(t, srv, "127.0.0.2")
	stop := errors.New("stop")
	calls := 0
	done := make(chan error, 1)
	go func() {
		done <- c.Watch(t.Context(), func([]forewarn.Notice) error {
			calls++
			if calls == 2 {
				return stop
			}
			return nil
		})
	}()
	eventually(t, "three long-polls", func() bool { return srv.inFlight.Load() == 3 })
	create(t, e, engine.Spec{Type: forewarn.Preempt, VMs: []string{"spot"}, Started: true}) // another VM: no call
	create(t, e, engine.Spec{Type: forewarn.TerminateOnHostMaintenance, VMs: []string{"vm"}, Notice: time.Hour})
	if err := <-done; err != stop || calls != 2 {
		t.Fatalf("Watch returned %v after %d calls, want fn's error after 2", err, calls)
	}
	eventually(t, "the server still serves the long-polls", func() bool { return srv.inFlight.Load() == 0 })

	// 127.0.0.1 is no VM of the fleet: 403.
	err := clientFor(t, srv, "127.0.0.1").Watch(t.Context(), func([]forewarn.Notice) error { t.Error("fn called"); return nil })
	var se *gce.StatusError
	if !errors.As(err, &se) || se.Code != http.StatusForbidden {
		t.Fatalf("Watch from a stranger returned %v, want a 403 StatusError", err)
	}
}

// TestClientRetry puts faults in front of the real server: each call
// retries them and then returns the real answer.
func TestClientRetry(t *testing.T) {
	_, s := setup(t)
	srv := serveCounted(t, s)
	for _, tc := range []struct {
		name     string
		fault    func(int, http.ResponseWriter, *http.Request) bool
		attempts int64
		atLeast  time.Duration
	}{
		{"503", firstN(3, 503, ""), 4, 0},
		{"429", firstN(3, 429, ""), 4, 0},
		{"429 Retry-After", firstN(1, 429, "1"), 2, 900 * time.Millisecond},
		{"500", firstN(2, 500, ""), 3, 0},
		{"410", firstN(2, 410, ""), 3, 0},
		{"connection closed", hangUp(2), 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newFaultProxy(t, srv.URL, "127.0.0.2", tc.fault, nil)
			c := gce.NewClient(p.URL, gce.WithRetry(10*time.Millisecond, 50*time.Millisecond))
			start := time.Now()
			v, tag, err := c.Get(t.Context(), "instance/maintenance-event")
			took := time.Since(start)
			if err != nil || v != "NONE" || !etagRE.MatchString(tag) {
				t.Fatalf("Get = %q %q %v", v, tag, err)
			}
			if n := p.requests.Load(); n != tc.attempts {
				t.Fatalf("%d attempts, want %d", n, tc.attempts)
			}
			if took < tc.atLeast || took > tc.atLeast+3*time.Second {
				t.Fatalf("took %s, want at least %s and not much more", took, tc.atLeast)
			}
		})
	}

	t.Run("context", func(t *testing.T) {
		p := newFaultProxy(t, srv.URL, "127.0.0.2", firstN(1000, 503, ""), nil)
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		_, _, err := gce.NewClient(p.URL, gce.WithRetry(10*time.Millisecond, 20*time.Millisecond)).Get(ctx, "instance/name")
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "503") {
			t.Fatalf("got %v, want the deadline with the last 503", err)
		}
	})
}

// TestClientFlavor: an answer without Metadata-Flavor: Google is not
// from a metadata server, and is not retried.
func TestClientFlavor(t *testing.T) {
	_, s := setup(t)
	srv := serveCounted(t, s)
	strip := func(r *http.Response) error {
		r.Header.Del("Metadata-Flavor")
		return nil
	}
	p := newFaultProxy(t, srv.URL, "127.0.0.2", nil, strip)
	_, _, err := gce.NewClient(p.URL).Get(t.Context(), "instance/maintenance-event")
	if !errors.Is(err, gce.ErrNotMetadataServer) {
		t.Fatalf("got %v, want ErrNotMetadataServer", err)
	}
	// Nor is a 503 without it.
	p = newFaultProxy(t, srv.URL, "127.0.0.2", func(int, http.ResponseWriter, *http.Request) bool { return false }, func(r *http.Response) error {
		r.StatusCode = http.StatusServiceUnavailable
		return strip(r)
	})
	_, err = gce.NewClient(p.URL).Notices(t.Context())
	if !errors.Is(err, gce.ErrNotMetadataServer) || p.requests.Load() != 1 {
		t.Fatalf("got %v after %d requests, want ErrNotMetadataServer after 1", err, p.requests.Load())
	}
}

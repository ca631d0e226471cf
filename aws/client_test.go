package aws_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/aws"
	"github.com/forewarn/forewarn/engine"
)

// The real-socket tests run the real server (setup in handler_test.go:
// ec2_0 at 127.0.0.2 with httpTokens required, opt_1 at 127.0.0.3, the
// Spot VM spot_2 at 127.0.0.4 in Auto Scaling group web, warm_3 at
// 127.0.0.5 in its warm pool) on a real socket and drive it with the
// client, from the VM's own address. The timing tests run the same
// server in a synctest bubble behind an in-process transport.

// vmHTTP returns an HTTP client whose connections come from ip, as a
// VM's do.
func vmHTTP(t *testing.T, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// logged is a handler on a real socket that records every request's
// method and path and the status answered.
type logged struct {
	*httptest.Server
	mu  sync.Mutex
	log []string
}

func serveLogged(t *testing.T, h http.Handler) *logged {
	t.Helper()
	s := &logged{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(rec, r)
		s.mu.Lock()
		s.log = append(s.log, r.Method+" "+r.URL.Path+" "+http.StatusText(rec.code))
		s.mu.Unlock()
	}))
	t.Cleanup(s.Close)
	return s
}

// take returns the requests logged since the last take.
func (s *logged) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.log
	s.log = nil
	return out
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// clientFor returns a client of srv speaking from ip.
func clientFor(t *testing.T, url, ip string, opts ...aws.ClientOption) *aws.Client {
	t.Helper()
	return aws.NewClient(url, append([]aws.ClientOption{aws.WithHTTPClient(vmHTTP(t, ip))}, opts...)...)
}

// inProcess is a transport that hands each request to h as if it came
// from remote, with no socket: for synctest bubbles.
type inProcess struct {
	h      http.Handler
	remote string
	mu     sync.Mutex
	log    []string
}

func (p *inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.RemoteAddr = p.remote
	w := httptest.NewRecorder()
	p.h.ServeHTTP(w, r)
	p.mu.Lock()
	p.log = append(p.log, r.Method+" "+r.URL.Path+" "+http.StatusText(w.Code))
	p.mu.Unlock()
	return w.Result(), nil
}

func (p *inProcess) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.log
	p.log = nil
	return out
}

func inProcessClient(h http.Handler, remote string, opts ...aws.ClientOption) (*aws.Client, *inProcess) {
	p := &inProcess{h: h, remote: remote}
	return aws.NewClient("http://169.254.169.254", append([]aws.ClientOption{aws.WithHTTPClient(&http.Client{Transport: p})}, opts...)...), p
}

func wantLog(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: requests\n got %q\nwant %q", what, got, want)
	}
}

func checkNotices(t *testing.T, what string, got []forewarn.Notice, want ...forewarn.Notice) {
	t.Helper()
	if want == nil {
		want = []forewarn.Notice{}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: notices\n got %+v\nwant %+v", what, got, want)
	}
}

// awsNotice is a notice as the client normalizes it for instance id.
func awsNotice(id, typ, status string, notBefore time.Time, desc, instance string) forewarn.Notice {
	return forewarn.Notice{ID: id, Type: typ, Status: status, Resources: []string{instance}, NotBefore: notBefore,
		Duration: -1, Source: "Platform", Description: desc, Provider: forewarn.AWS}
}

const (
	tokenPut = "PUT /latest/api/token OK"
	idGet    = "GET /latest/meta-data/instance-id OK"
	notFound = "Not Found"
)

// TestClientKeys reads every typed key from the real server over a real
// socket, from a VM whose tokens are required: exact values, the absent
// keys as nil or "", one token for all, and a 404 and a 403 at once.
func TestClientKeys(t *testing.T) {
	_, s := setup(t)
	srv := serveLogged(t, s)
	ctx := t.Context()
	c := clientFor(t, srv.URL, "127.0.0.2")

	if id, err := c.InstanceID(ctx); err != nil || id != "i-0000000000000000a" {
		t.Fatalf("InstanceID = %q, %v", id, err)
	}
	if evs, err := c.ScheduledEvents(ctx); err != nil || evs == nil || len(evs) != 0 {
		t.Fatalf("ScheduledEvents = %#v, %v; want empty, not nil", evs, err)
	}
	if evs, err := c.EventHistory(ctx); err != nil || evs == nil || len(evs) != 0 {
		t.Fatalf("EventHistory = %#v, %v; want empty, not nil", evs, err)
	}
	if a, err := c.InstanceAction(ctx); a != nil || err != nil {
		t.Fatalf("InstanceAction = %+v, %v; want nil, nil", a, err)
	}
	if r, err := c.Rebalance(ctx); r != nil || err != nil {
		t.Fatalf("Rebalance = %+v, %v; want nil, nil", r, err)
	}
	if st, err := c.TargetLifecycleState(ctx); st != "" || err != nil {
		t.Fatalf("TargetLifecycleState = %q, %v; want \"\", nil outside an Auto Scaling group", st, err)
	}
	if v, err := c.Get(ctx, "placement/availability-zone"); v != "us-east-1a" || err != nil {
		t.Fatalf("Get(placement/availability-zone) = %q, %v", v, err)
	}
	_, err := c.Get(ctx, "nonesuch")
	var se *aws.StatusError
	if !errors.As(err, &se) || se.Code != 404 || se.Message != "Not Found" {
		t.Fatalf("Get(nonesuch): %v, want a 404 StatusError with the status text", err)
	}
	wantLog(t, "one token for every read", srv.take(), tokenPut, idGet,
		"GET /latest/meta-data/events/maintenance/scheduled OK",
		"GET /latest/meta-data/events/maintenance/history OK",
		"GET /latest/meta-data/spot/instance-action "+notFound,
		"GET /latest/meta-data/events/recommendations/rebalance "+notFound,
		"GET /latest/meta-data/autoscaling/target-lifecycle-state "+notFound,
		"GET /latest/meta-data/placement/availability-zone OK",
		"GET /latest/meta-data/nonesuch "+notFound)

	for ip, want := range map[string]string{"127.0.0.4": "InService", "127.0.0.5": "Warmed:Stopped"} {
		if st, err := clientFor(t, srv.URL, ip).TargetLifecycleState(ctx); st != want || err != nil {
			t.Errorf("TargetLifecycleState from %s = %q, %v; want %s", ip, st, err, want)
		}
	}
	srv.take()

	// A stranger is refused at the token PUT, at once.
	_, err = clientFor(t, srv.URL, "127.0.0.99").InstanceID(ctx)
	if !errors.As(err, &se) || se.Code != 403 {
		t.Fatalf("InstanceID from a stranger: %v, want a 403 StatusError", err)
	}
	wantLog(t, "a stranger", srv.take(), "PUT /latest/api/token Forbidden")
	if _, err := aws.NewClient("169.254.169.254").InstanceID(ctx); err == nil {
		t.Fatal("a base URL without a scheme was accepted")
	}
}

// TestClientScheduledEvents reads an EC2 scheduled event through its
// lifecycle over a real socket: exact fields in scheduled, its notice,
// and the canceled entry in history.
func TestClientScheduledEvents(t *testing.T) {
	e, s := setup(t)
	srv := serveLogged(t, s)
	ctx := t.Context()
	c := clientFor(t, srv.URL, "127.0.0.2")
	ev, err := e.Create(ctx, engine.Spec{Type: forewarn.SystemReboot, VMs: []string{"ec2_0"}, Notice: 48 * time.Hour, Lasts: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	nb := ev.NotBefore.UTC().Truncate(time.Second)
	want := aws.ScheduledEvent{EventID: aws.EventID(ev.ID), Code: "system-reboot", Description: "scheduled reboot", State: "active",
		NotBefore: nb, NotAfter: ev.NotBefore.Add(10 * time.Minute).UTC().Truncate(time.Second),
		NotBeforeDeadline: ev.Deadline.UTC().Truncate(time.Second)}
	if ev.Deadline.IsZero() {
		t.Fatal("a system-reboot without a NotBeforeDeadline")
	}
	evs, err := c.ScheduledEvents(ctx)
	if err != nil || !reflect.DeepEqual(evs, []aws.ScheduledEvent{want}) {
		t.Fatalf("ScheduledEvents = %+v, %v\nwant %+v", evs, err, want)
	}
	ns, err := c.Notices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkNotices(t, "scheduled", ns, awsNotice(aws.EventID(ev.ID), "system-reboot", "Scheduled", nb, "scheduled reboot", "i-0000000000000000a"))

	if err := e.Cancel(ctx, ev.ID); err != nil {
		t.Fatal(err)
	}
	if evs, err := c.ScheduledEvents(ctx); err != nil || len(evs) != 0 {
		t.Fatalf("ScheduledEvents once canceled = %+v, %v", evs, err)
	}
	want.State, want.Description = "canceled", "[Canceled] scheduled reboot"
	if evs, err := c.EventHistory(ctx); err != nil || !reflect.DeepEqual(evs, []aws.ScheduledEvent{want}) {
		t.Fatalf("EventHistory = %+v, %v\nwant %+v", evs, err, want)
	}
	if ns, err := c.Notices(ctx); err != nil || len(ns) != 0 {
		t.Fatalf("Notices once canceled = %+v, %v", ns, err)
	}
}

// swappable serves with whichever aws.Server it holds: a new Server has
// a new signing key, so every token issued before is refused.
type swappable struct{ p atomic.Pointer[aws.Server] }

func (s *swappable) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.p.Load().ServeHTTP(w, r) }

// TestClientTokenRefresh: a token the server refuses (its VM was
// registered again) costs one 401, one new token and one retry; a
// server that refuses the new token too gets no third try. A new server
// on the same engine, as after a restart, takes the token as it was.
func TestClientTokenRefresh(t *testing.T) {
	e, s := setup(t)
	h := &swappable{}
	h.p.Store(s)
	refuseAll := atomic.Bool{}
	srv := serveLogged(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if refuseAll.Load() && r.Method == http.MethodGet {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	ctx := t.Context()
	c := clientFor(t, srv.URL, "127.0.0.2")
	for range 2 {
		if id, err := c.InstanceID(ctx); err != nil || id != "i-0000000000000000a" {
			t.Fatalf("InstanceID = %q, %v", id, err)
		}
	}
	wantLog(t, "a cached token", srv.take(), tokenPut, idGet, idGet)

	h.p.Store(aws.NewServer(e, nil))
	if id, err := c.InstanceID(ctx); err != nil || id != "i-0000000000000000a" {
		t.Fatalf("InstanceID from a new server = %q, %v", id, err)
	}
	wantLog(t, "a new server", srv.take(), idGet)

	vm := *e.Fleet().VM("ec2_0")
	change(t, e, engine.InventoryChange{Remove: []string{"ec2_0"}})
	change(t, e, engine.InventoryChange{Set: []*forewarn.VM{&vm}})
	if id, err := c.InstanceID(ctx); err != nil || id != "i-0000000000000000a" {
		t.Fatalf("InstanceID after the VM was registered again = %q, %v", id, err)
	}
	if id, err := c.InstanceID(ctx); err != nil || id != "i-0000000000000000a" {
		t.Fatalf("InstanceID with the new token = %q, %v", id, err)
	}
	wantLog(t, "a refused token", srv.take(), "GET /latest/meta-data/instance-id Unauthorized", tokenPut, idGet, idGet)

	refuseAll.Store(true)
	_, err := c.InstanceID(ctx)
	var se *aws.StatusError
	if !errors.As(err, &se) || se.Code != 401 {
		t.Fatalf("InstanceID against a server that refuses every token: %v, want a 401 StatusError", err)
	}
	wantLog(t, "refused twice", srv.take(), "GET /latest/meta-data/instance-id Unauthorized", tokenPut,
		"GET /latest/meta-data/instance-id Unauthorized")
}

// TestClientTokenCache checks when the client replaces its token, on a
// fake clock: a tenth of the TTL early, and at most a minute early.
func TestClientTokenCache(t *testing.T) {
	for _, c := range []struct {
		ttl, renew time.Duration
	}{{10 * time.Second, 9 * time.Second}, {0, 6*time.Hour - time.Minute}} {
		synctest.Test(t, func(t *testing.T) {
			_, s := setup(t)
			cl, p := inProcessClient(s, ec2Addr, aws.WithTokenTTL(c.ttl))
			ctx := t.Context()
			read := func() {
				t.Helper()
				if id, err := cl.InstanceID(ctx); err != nil || id != "i-0000000000000000a" {
					t.Fatalf("InstanceID = %q, %v", id, err)
				}
			}
			read()
			wantLog(t, "first read", p.take(), tokenPut, idGet)
			time.Sleep(c.renew - time.Nanosecond)
			read()
			wantLog(t, "just before the renewal", p.take(), idGet)
			time.Sleep(time.Nanosecond)
			read()
			wantLog(t, "at the renewal", p.take(), tokenPut, idGet)
		})
	}
}

// TestClientNotices normalizes every kind of EC2 notice on a fake clock:
// scheduled events Scheduled then Started at their NotBefore, a Spot
// interruption's rebalance recommendation and Preempt notice, and an
// Auto Scaling scale-in's Terminate.
func TestClientNotices(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, s := setup(t)
		ctx := t.Context()
		at := func(d time.Duration) time.Time { return time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).Add(d) }

		c, _ := inProcessClient(s, optAddr)
		reboot, err := e.Create(ctx, engine.Spec{Type: forewarn.SystemReboot, VMs: []string{"opt_1"}, Notice: 48 * time.Hour, Lasts: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		stop, err := e.Create(ctx, engine.Spec{Type: forewarn.InstanceStop, VMs: []string{"opt_1"}, Notice: 72 * time.Hour, Description: "retiring"})
		if err != nil {
			t.Fatal(err)
		}
		const opt = "i-0000000000000000b"
		rn := func(status string) forewarn.Notice {
			return awsNotice(aws.EventID(reboot.ID), "system-reboot", status, at(48*time.Hour), "scheduled reboot", opt)
		}
		sn := awsNotice(aws.EventID(stop.ID), "instance-stop", "Scheduled", at(72*time.Hour), "retiring", opt)
		ns, err := c.Notices(ctx)
		if err != nil {
			t.Fatal(err)
		}
		checkNotices(t, "two scheduled events", ns, rn("Scheduled"), sn)
		time.Sleep(48*time.Hour - time.Nanosecond)
		ns, _ = c.Notices(ctx)
		checkNotices(t, "just before NotBefore", ns, rn("Scheduled"), sn)
		time.Sleep(time.Nanosecond)
		ns, _ = c.Notices(ctx)
		checkNotices(t, "at NotBefore", ns, rn("Started"), sn)
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		ns, _ = c.Notices(ctx)
		checkNotices(t, "completed", ns, sn)

		// Spot: the rebalance recommendation at once, the interruption
		// notice two minutes before the action, a 404 once terminated.
		now := time.Now()
		sc, _ := inProcessClient(s, spotAddr)
		if _, err := e.EvictWith(ctx, "spot_2", engine.VMOptions{Notice: 5 * time.Minute, Lasts: 20 * time.Second}); err != nil {
			t.Fatal(err)
		}
		const spot = "i-0000000000000000c"
		stamp := now.UTC().Format(time.RFC3339)
		rb := awsNotice("rebalance-recommendation-"+stamp, forewarn.RebalanceRecommendation, "Started", time.Time{},
			"rebalance recommended at "+stamp, spot)
		ns, _ = sc.Notices(ctx)
		checkNotices(t, "rebalance", ns, rb)
		time.Sleep(3 * time.Minute)
		synctest.Wait()
		action := now.Add(5 * time.Minute).UTC()
		pre := func(status string) forewarn.Notice {
			return awsNotice("spot-instance-action-"+action.Format(time.RFC3339), "Preempt", status, action,
				"Spot interruption: terminate at "+action.Format(time.RFC3339), spot)
		}
		ns, _ = sc.Notices(ctx)
		checkNotices(t, "interruption notice", ns, pre("Scheduled"), rb)
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		ns, _ = sc.Notices(ctx)
		checkNotices(t, "interruption started", ns, pre("Started"), rb)
		time.Sleep(20 * time.Second)
		synctest.Wait()
		_, err = sc.Notices(ctx)
		var se *aws.StatusError
		if !errors.As(err, &se) || se.Code != 404 {
			t.Fatalf("Notices of a terminated instance: %v, want a 404 StatusError", err)
		}

		// An Auto Scaling scale-in.
		wc, _ := inProcessClient(s, warmAddr)
		if _, err := e.DeleteWith(ctx, "warm_3", engine.VMOptions{Lasts: time.Minute}); err != nil {
			t.Fatal(err)
		}
		ns, _ = wc.Notices(ctx)
		checkNotices(t, "scale-in", ns, awsNotice("target-lifecycle-state-Terminated", "Terminate", "Started", time.Time{},
			"Auto Scaling target lifecycle state Terminated", "i-0000000000000000d"))
	})
}

// call is one call of a Watch callback: when, and with what.
type call struct {
	at time.Time
	ns []forewarn.Notice
}

// TestClientWatch follows a Spot interruption on a fake clock, polling
// every 7 s: fn is called at start, then once per change at the poll
// after it, and for the start at the second of NotBefore, between polls;
// Watch ends with a 404 when the instance is terminated.
func TestClientWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, s := setup(t)
		c, p := inProcessClient(s, spotAddr, aws.WithPollInterval(7*time.Second))
		var calls []call
		done := make(chan error, 1)
		go func() {
			done <- c.Watch(t.Context(), func(ns []forewarn.Notice) error {
				calls = append(calls, call{time.Now().UTC(), ns})
				return nil
			})
		}()
		time.Sleep(10*time.Second + 500*time.Millisecond)
		if _, err := e.EvictWith(t.Context(), "spot_2", engine.VMOptions{Notice: 5 * time.Minute, Lasts: 20 * time.Second}); err != nil {
			t.Fatal(err)
		}
		err := <-done
		var se *aws.StatusError
		if !errors.As(err, &se) || se.Code != 404 {
			t.Fatalf("Watch returned %v, want a 404 StatusError once terminated", err)
		}
		at := func(d time.Duration) time.Time { return time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).Add(d) }
		const spot = "i-0000000000000000c"
		rb := awsNotice("rebalance-recommendation-2000-01-01T00:00:10Z", forewarn.RebalanceRecommendation, "Started", time.Time{},
			"rebalance recommended at 2000-01-01T00:00:10Z", spot)
		// The action is due at 00:05:11, the engine's NotBefore rounded
		// up to the second.
		pre := func(status string) forewarn.Notice {
			return awsNotice("spot-instance-action-2000-01-01T00:05:11Z", "Preempt", status, at(5*time.Minute+11*time.Second),
				"Spot interruption: terminate at 2000-01-01T00:05:11Z", spot)
		}
		want := []call{
			{at(0), []forewarn.Notice{}},
			{at(14 * time.Second), []forewarn.Notice{rb}},
			{at(3*time.Minute + 16*time.Second), []forewarn.Notice{pre("Scheduled"), rb}},
			{at(5*time.Minute + 11*time.Second), []forewarn.Notice{pre("Started"), rb}},
		}
		if !reflect.DeepEqual(calls, want) {
			t.Fatalf("calls\n got %+v\nwant %+v", calls, want)
		}
		// One token, the instance ID once, then rounds of four reads:
		// every 7 s from 0 to 308 s (45), at 311 s for the start, at 318
		// and 325 s, and the 404 of the instance terminated at 331 s at
		// 332 s.
		log := p.take()
		if len(log) != 1+1+4*48+1 || log[0] != tokenPut || log[1] != idGet ||
			log[len(log)-1] != "GET /latest/meta-data/events/maintenance/scheduled "+notFound {
			t.Fatalf("%d requests: %q ... %q", len(log), log[:2], log[len(log)-1])
		}
	})
}

// TestClientWatchRealSocket follows a short system-reboot from
// scheduled to started to gone over a real socket, from a VM whose
// tokens are required: each change once, within one poll.
func TestClientWatchRealSocket(t *testing.T) {
	e, s := setup(t)
	srv := serveLogged(t, s)
	c := clientFor(t, srv.URL, "127.0.0.2", aws.WithPollInterval(50*time.Millisecond))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	got := make(chan call, 16)
	done := make(chan error, 1)
	go func() {
		done <- c.Watch(ctx, func(ns []forewarn.Notice) error {
			got <- call{time.Now(), ns}
			return nil
		})
	}()
	next := func(what string) call {
		t.Helper()
		select {
		case c := <-got:
			return c
		case <-time.After(10 * time.Second):
			t.Fatalf("no call for %s within 10 s", what)
		}
		return call{}
	}
	if c := next("the start"); len(c.ns) != 0 {
		t.Fatalf("first call %+v, want no notices", c.ns)
	}
	ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.SystemReboot, VMs: []string{"ec2_0"}, Notice: 2 * time.Second, Lasts: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	nb := ev.NotBefore.UTC().Truncate(time.Second)
	n := awsNotice(aws.EventID(ev.ID), "system-reboot", "Scheduled", nb, "scheduled reboot", "i-0000000000000000a")
	sched := next("the event")
	checkNotices(t, "scheduled", sched.ns, n)
	if d := sched.at.Sub(ev.Created); d > 500*time.Millisecond {
		t.Errorf("scheduled seen %v after creation, want within a poll", d)
	}
	started := next("the start of the event")
	n.Status = "Started"
	checkNotices(t, "started", started.ns, n)
	if d := started.at.Sub(nb); d < 0 || d > 500*time.Millisecond {
		t.Errorf("Started seen %v after NotBefore's second, want within a poll", d)
	}
	gone := next("the end of the event")
	checkNotices(t, "completed", gone.ns)
	final, err := e.Event(ev.ID)
	if err != nil || final.Status != forewarn.Completed {
		t.Fatalf("event %+v, %v", final, err)
	}
	if d := gone.at.Sub(final.EndedAt); d < 0 || d > 500*time.Millisecond {
		t.Errorf("end seen %v after it, want within a poll", d)
	}
	select {
	case c := <-got:
		t.Fatalf("an extra call %+v", c.ns)
	case <-time.After(300 * time.Millisecond):
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch returned %v", err)
	}
}

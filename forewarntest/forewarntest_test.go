package forewarntest_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/azure"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/forewarntest"
	"github.com/forewarn/forewarn/server"
)

const testFleet = `vms:
  - {name: web_0, ip: 127.0.0.2, availabilitySet: web}
  - {name: web_1, ip: 127.0.0.3, availabilitySet: web, updateDomain: 1}
  - {name: solo, ip: 127.0.0.4}
  - {name: gce_0, ip: 127.0.0.5, provider: gce}
  - {name: ec2_0, ip: 127.0.0.6, provider: aws, instanceId: i-0123456789abcdef0}
  - {name: set_0, ip: 127.0.0.7, scaleSet: set, instanceId: "0"}
`

func specOf(t forewarn.EventType, vm string, notice time.Duration) engine.Spec {
	return engine.Spec{Type: t, VMs: []string{vm}, Notice: notice}
}

// transports runs f over real sockets and over the in-memory transport.
func transports(t *testing.T, f func(t *testing.T, pipes bool)) {
	for _, pipes := range []bool{false, true} {
		name := "sockets"
		if pipes {
			name = "pipes"
		}
		t.Run(name, func(t *testing.T) { f(t, pipes) })
	}
}

// TestClientsBoundToAddresses: each VM's clients come from its address
// and are answered as that VM by its provider's API; a caller of no VM
// is refused; a VM without an address answers any caller.
func TestClientsBoundToAddresses(t *testing.T) {
	transports(t, func(t *testing.T, pipes bool) {
		srv := forewarntest.NewServer(t, forewarntest.Fleet(t, testFleet), forewarntest.WithPipes(pipes))
		ctx := t.Context()
		for _, vm := range []string{"web_0", "web_1", "solo", "set_0"} {
			if got, err := srv.AzureClient(vm).VMName(ctx); err != nil || got != vm {
				t.Errorf("Azure client of %s: VMName %q, %v", vm, got, err)
			}
		}
		if got, err := srv.GCEClient("gce_0").InstanceName(ctx); err != nil || got != "gce_0" {
			t.Errorf("GCE client: InstanceName %q, %v", got, err)
		}
		if got, err := srv.AWSClient("ec2_0").InstanceID(ctx); err != nil || got != "i-0123456789abcdef0" {
			t.Errorf("EC2 client: InstanceID %q, %v", got, err)
		}

		// An event of web_0 is in its document and web_1's (one
		// availability set), not solo's.
		ev := srv.Reboot("web_0", forewarntest.EventOptions{Notice: time.Hour})
		for vm, want := range map[string]int{"web_0": 1, "web_1": 1, "solo": 0} {
			if doc, err := srv.AzureClient(vm).Document(ctx); err != nil || len(doc.Notices) != want {
				t.Errorf("%s's document: %+v, %v; want %d events", vm, doc, err, want)
			}
		}
		// The plain client of a VM, at URL.
		code, body := get(t, srv.HTTPClient("solo"), srv.URL()+"/metadata/scheduledevents?api-version=2020-07-01")
		if code != 200 || !strings.HasPrefix(body, `{"DocumentIncarnation":1,`) {
			t.Errorf("solo's plain GET: %d %s", code, body)
		}
		// An approval from web_1's client is web_1's.
		if err := srv.AzureClient("web_1").Approve(ctx, ev.ID); err != nil {
			t.Fatal(err)
		}
		if got := srv.Event(ev.ID); !srv.Approved(ev.ID) || got.Approvals[0].By != "web_1" || got.Status != forewarn.Started {
			t.Errorf("after web_1's approval: %s, approvals %+v", got.Status, got.Approvals)
		}
		// A stranger is refused.
		if code, _ := get(t, srv.HTTPClientFrom(netip.MustParseAddr("127.0.0.99")), srv.URL()+"/metadata/scheduledevents?api-version=2020-07-01"); code != 403 {
			t.Errorf("a caller of no VM got %d, want 403", code)
		}
		// The operator API, from an address of no VM.
		evs, err := srv.AdminClient().Events(ctx)
		if err != nil || len(evs) != 1 || evs[0].ID != ev.ID {
			t.Errorf("operator API events: %v, %v", evs, err)
		}
	})
}

// TestAnyCaller: a VM without an address (as in the default fleet; a
// fleet file requires one) answers every caller; its client works
// whatever the transport.
func TestAnyCaller(t *testing.T) {
	transports(t, func(t *testing.T, pipes bool) {
		srv := forewarntest.NewServer(t, &forewarn.Fleet{VMs: []*forewarn.VM{{Name: "any", Provider: forewarn.Azure}}},
			forewarntest.WithPipes(pipes))
		if got, err := srv.AzureClient("any").VMName(t.Context()); err != nil || got != "any" {
			t.Errorf("VMName %q, %v", got, err)
		}
		if got, err := azure.NewClient(srv.URL(), azure.WithHTTPClient(srv.HTTPClientFrom(netip.MustParseAddr("127.0.0.42")))).VMName(t.Context()); err != nil || got != "any" {
			t.Errorf("from another address: VMName %q, %v", got, err)
		}
	})
}

func get(t *testing.T, hc *http.Client, url string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Metadata", "true")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestCleanup: the server a (sub)test made is gone when it ends: its
// URL refuses connections, its engine refuses operations, and its
// clients' connections are closed.
func TestCleanup(t *testing.T) {
	transports(t, func(t *testing.T, pipes bool) {
		var srv *forewarntest.Server
		var hc *http.Client
		t.Run("inner", func(t *testing.T) {
			srv = forewarntest.NewServer(t, forewarntest.Fleet(t, testFleet), forewarntest.WithPipes(pipes))
			hc = srv.HTTPClient("web_0")
			if code, _ := get(t, hc, srv.URL()+"/metadata/scheduledevents?api-version=2020-07-01"); code != 200 {
				t.Fatalf("GET: %d", code)
			}
		})
		if _, err := hc.Get(srv.URL() + "/metadata/scheduledevents?api-version=2020-07-01"); err == nil {
			t.Error("the server still answers after its test ended")
		}
		if _, err := srv.Engine().Create(t.Context(), specOf(forewarn.Reboot, "web_0", 0)); forewarn.ErrorCode(err) != forewarn.EUNAVAILABLE {
			t.Errorf("the engine after the test: %v, want EUNAVAILABLE", err)
		}
		if err := srv.Close(); err != nil {
			t.Errorf("a second Close: %v", err)
		}
	})
}

// fakeT is a TB whose Fatalf records the failure and ends the goroutine,
// as testing.T's does.
type fakeT struct {
	mu       sync.Mutex
	failures []string
	cleanups []func()
}

func (f *fakeT) Helper()           {}
func (f *fakeT) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *fakeT) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.failures = append(f.failures, fmt.Sprintf(format, args...))
	f.mu.Unlock()
	runtime.Goexit()
}

// run calls fn in a goroutine of its own, as a test runs, and returns
// the failure it reported, or "".
func (f *fakeT) run(fn func()) string {
	f.mu.Lock()
	n := len(f.failures)
	f.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.failures) == n {
		return ""
	}
	return f.failures[n]
}

func (f *fakeT) cleanup() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

// TestWaitFails: Wait fails the test with a clear message after its
// timeout, and at once for an event that can no longer reach the
// status; it returns the event as soon as a change gets there.
func TestWaitFails(t *testing.T) {
	ft := &fakeT{}
	defer ft.cleanup()
	var srv *forewarntest.Server
	ft.run(func() {
		srv = forewarntest.NewServer(ft, forewarntest.Fleet(ft, testFleet), forewarntest.WithWaitTimeout(100*time.Millisecond))
	})
	if srv == nil {
		t.Fatalf("NewServer failed: %v", ft.failures)
	}
	ev := srv.Reboot("solo", forewarntest.EventOptions{Notice: time.Hour})

	start := time.Now()
	msg := ft.run(func() { srv.Wait(ev.ID, forewarn.Started) })
	if want := "forewarntest: event " + ev.ID + " (Reboot of solo) is still Scheduled after 100ms; want Started; its next deadline is "; !strings.HasPrefix(msg, want) {
		t.Errorf("Wait's failure:\n got %q\nwant %q...", msg, want)
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > 5*time.Second {
		t.Errorf("Wait failed after %v, want its 100ms timeout", d)
	}

	// A change wakes it: an approval from another goroutine.
	go func() {
		time.Sleep(10 * time.Millisecond)
		srv.Approve("solo", ev.ID)
	}()
	if msg := ft.run(func() {
		if got := srv.Wait(ev.ID, forewarn.Started); got.Approvals[0].By != "solo" {
			t.Errorf("Wait returned %+v", got)
		}
	}); msg != "" {
		t.Errorf("Wait for an approved event: %s", msg)
	}

	// An event canceled will never start; one Started is past Scheduled.
	other := srv.Reboot("solo", forewarntest.EventOptions{Notice: time.Hour})
	srv.Cancel(other.ID)
	if msg := ft.run(func() { srv.Wait(other.ID, forewarn.Started) }); msg != "forewarntest: event "+other.ID+" (Reboot of solo) is Canceled: it will not be Started" {
		t.Errorf("Wait for a canceled event: %q", msg)
	}
	if msg := ft.run(func() { srv.Wait(ev.ID, forewarn.Scheduled) }); !strings.HasSuffix(msg, "is Started: it will not be Scheduled") {
		t.Errorf("Wait for a past status: %q", msg)
	}

	// A short event that started and completed between two looks counts
	// as started.
	short := srv.Create(engine.Spec{Type: forewarn.Freeze, VMs: []string{"solo"}, Started: true, Lasts: time.Millisecond})
	time.Sleep(50 * time.Millisecond)
	if got := srv.Event(short.ID); got.Status != forewarn.Completed {
		t.Fatalf("short event %s", got.Status)
	}
	if msg := ft.run(func() { srv.Wait(short.ID, forewarn.Started) }); msg != "" {
		t.Errorf("Wait(Started) for a completed event: %s", msg)
	}
}

// TestFailuresAreClear: what a test gets wrong fails it with a message
// that says what and why.
func TestFailuresAreClear(t *testing.T) {
	ft := &fakeT{}
	defer ft.cleanup()
	var srv *forewarntest.Server
	ft.run(func() { srv = forewarntest.NewServer(ft, forewarntest.Fleet(ft, testFleet)) })
	for _, c := range []struct {
		do   func()
		want string
	}{
		{func() { srv.HTTPClient("nope") }, `forewarntest: no VM "nope" in the fleet (web_0, web_1, solo, gce_0, ec2_0, set_0)`},
		{func() { srv.AzureClient("gce_0") }, `forewarntest: VM "gce_0" speaks the gce API, not the azure API`},
		{func() { srv.GCEClient("web_0") }, `forewarntest: VM "web_0" speaks the azure API, not the gce API`},
		{func() { srv.Reboot("gce_0", forewarntest.EventOptions{}) }, "forewarntest: create a Reboot event of gce_0: "},
		{func() { srv.Evict("solo") }, `forewarntest: evict solo: VM "solo" is not a Spot or preemptible VM`},
		{func() { srv.Start("NOPE") }, "forewarntest: start NOPE: "},
		{func() { srv.Event("NOPE") }, "forewarntest: event NOPE: "},
		{func() { forewarntest.Fleet(ft, "vms: [{name: a, ip: nope}]") }, `forewarntest: fleet: vms[0] (a): ip "nope" is not an IP address`},
		{func() { forewarntest.NewServer(ft, &forewarn.Fleet{}) }, "forewarntest: start the server: "},
	} {
		if got := ft.run(c.do); !strings.HasPrefix(got, c.want) {
			t.Errorf("failure %q, want %q", got, c.want)
		}
	}
}

// TestDelete: a scale set delete's Terminate, an eviction, and a
// completion through the helpers.
func TestDeleteEvictComplete(t *testing.T) {
	fleet := forewarntest.Fleet(t, testFleet+"  - {name: spot, ip: 127.0.0.8, priority: Spot}\n")
	srv := forewarntest.NewServer(t, fleet)
	term := srv.Delete("set_0")
	if term.Type != forewarn.Terminate || term.Status != forewarn.Scheduled {
		t.Fatalf("Delete: %s %s", term.Type, term.Status)
	}
	pre := srv.Evict("spot")
	if pre.Type != forewarn.Preempt || pre.Status != forewarn.Scheduled {
		t.Fatalf("Evict: %s %s", pre.Type, pre.Status)
	}
	srv.Start(pre.ID)
	srv.Complete(pre.ID)
	if got := srv.Wait(pre.ID, forewarn.Completed); got.EndedAt.IsZero() {
		t.Errorf("completed event without EndedAt: %+v", got)
	}
}

// TestStart: outside a test, Start and Close; a helper's failure then
// panics with its message.
func TestStart(t *testing.T) {
	srv, err := forewarntest.Start(forewarntest.Fleet(t, testFleet))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	func() {
		defer func() {
			if r := recover(); fmt.Sprint(r) != `forewarntest: no VM "nope" in the fleet (web_0, web_1, solo, gce_0, ec2_0, set_0)` {
				t.Errorf("recovered %v", r)
			}
		}()
		srv.HTTPClient("nope")
	}()
	if _, err := forewarntest.Start(nil); err == nil {
		t.Error("Start(nil) accepted")
	}
	if err := srv.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, err := srv.AzureClient("web_0", azure.WithRetry(time.Millisecond, time.Millisecond)).Document(ctx); err == nil {
		t.Error("the closed server answers")
	}
}

// TestOptions: by default events keep their notice from the start;
// WithoutEnablement starts as a real server does, where a Platform event
// for a VM that has never called starts at once; WithConfig reaches the
// server's Config.
func TestOptions(t *testing.T) {
	fleet := forewarntest.Fleet(t, testFleet)
	if ev := forewarntest.NewServer(t, fleet).Reboot("solo", forewarntest.EventOptions{Notice: time.Hour}); ev.Status != forewarn.Scheduled {
		t.Errorf("by default: a Platform Reboot is %s, want Scheduled", ev.Status)
	}
	real := forewarntest.NewServer(t, forewarntest.Fleet(t, testFleet), forewarntest.WithoutEnablement())
	if ev := real.Reboot("solo", forewarntest.EventOptions{Notice: time.Hour}); ev.Status != forewarn.Started {
		t.Errorf("WithoutEnablement: a Platform Reboot of a VM that never called is %s, want Started", ev.Status)
	}
	if _, err := real.AzureClient("solo").Document(t.Context()); err != nil { // enables solo
		t.Fatal(err)
	}
	if ev := real.Reboot("solo", forewarntest.EventOptions{Notice: time.Hour}); ev.Status != forewarn.Scheduled {
		t.Errorf("WithoutEnablement, after a call: %s, want Scheduled", ev.Status)
	}

	ft := &fakeT{}
	defer ft.cleanup()
	var strict *forewarntest.Server
	ft.run(func() {
		strict = forewarntest.NewServer(ft, fleet, forewarntest.WithConfig(func(c *server.Config) { c.AllowShortNotice = false }))
	})
	if msg := ft.run(func() { strict.Reboot("solo", forewarntest.EventOptions{Notice: time.Minute}) }); !strings.HasPrefix(msg, "forewarntest: create a Reboot event of solo: notice 1m0s is below") {
		t.Errorf("a short notice without AllowShortNotice: %q", msg)
	}
}

// TestCreateAll: a spec naming VMs of two scope groups makes an event
// each through CreateAll; Create fails the test, naming the groups.
func TestCreateAll(t *testing.T) {
	const fleet = `vms:
  - {name: solo_a, ip: 127.0.0.80}
  - {name: solo_b, ip: 127.0.0.81}
`
	ft := &fakeT{}
	defer ft.cleanup()
	var srv *forewarntest.Server
	ft.run(func() { srv = forewarntest.NewServer(ft, forewarntest.Fleet(ft, fleet)) })
	if srv == nil {
		t.Fatalf("NewServer failed: %v", ft.failures)
	}
	var evs []*forewarn.Event
	if msg := ft.run(func() { evs = srv.CreateAll(engine.Spec{Type: forewarn.Freeze, VMs: []string{"solo_a", "solo_b"}}) }); msg != "" {
		t.Fatal(msg)
	}
	if len(evs) != 2 || evs[0].Resources[0] != "solo_a" || evs[1].Resources[0] != "solo_b" {
		t.Fatalf("CreateAll: %+v", evs)
	}
	msg := ft.run(func() { srv.Create(engine.Spec{Type: forewarn.Freeze, VMs: []string{"solo_a", "solo_b"}}) })
	if !strings.Contains(msg, `"solo_a" (VM solo_a) and "solo_b" (VM solo_b) are in different scope groups`) {
		t.Fatalf("Create of two groups: %q", msg)
	}
}

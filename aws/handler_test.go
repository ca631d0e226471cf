package aws_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/aws"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

const (
	ec2Addr   = "127.0.0.2:40000" // httpTokens: required
	optAddr   = "127.0.0.3:40000" // httpTokens: optional
	spotAddr  = "127.0.0.4:40000" // Spot, Auto Scaling group web
	warmAddr  = "127.0.0.5:40000" // warm pool
	azAddr    = "127.0.0.6:40000" // an Azure VM
	stopAddr  = "127.0.0.7:40000" // Spot, stops when interrupted
	hibAddr   = "127.0.0.8:40000" // Spot, hibernates when interrupted
	otherAddr = "127.0.0.99:40000"
)

func testFleet() *forewarn.Fleet {
	ip := func(s string) netip.Addr { return netip.MustParseAddrPort(s).Addr() }
	a := func(name, addr, id string, mod func(*forewarn.VM)) *forewarn.VM {
		vm := &forewarn.VM{Name: name, IP: ip(addr), Provider: forewarn.AWS, InstanceID: id,
			Zone: "us-east-1a", MachineType: "m5.large", HTTPTokens: "optional", HopLimit: 1}
		if mod != nil {
			mod(vm)
		}
		return vm
	}
	return &forewarn.Fleet{VMs: []*forewarn.VM{
		a("ec2_0", ec2Addr, "i-0000000000000000a", func(v *forewarn.VM) { v.HTTPTokens, v.HopLimit = "required", 3 }),
		a("opt_1", optAddr, "i-0000000000000000b", func(v *forewarn.VM) { v.Zone, v.MachineType = "eu-west-1b", "c5.xlarge" }),
		a("spot_2", spotAddr, "i-0000000000000000c", func(v *forewarn.VM) {
			v.Spot, v.SpotInterruptionBehavior, v.AutoScalingGroup = true, "terminate", "web"
		}),
		a("warm_3", warmAddr, "i-0000000000000000d", func(v *forewarn.VM) { v.AutoScalingGroup, v.WarmPool = "web", "Warmed:Stopped" }),
		{Name: "az", IP: ip(azAddr), Provider: forewarn.Azure},
		a("stop_5", stopAddr, "i-0000000000000000e", func(v *forewarn.VM) { v.Spot, v.SpotInterruptionBehavior = true, "stop" }),
		a("hib_6", hibAddr, "i-0000000000000000f", func(v *forewarn.VM) { v.Spot, v.SpotInterruptionBehavior = true, "hibernate" }),
	}}
}

// setup starts an engine and an EC2 server of testFleet on a new
// in-memory store.
func setup(t testing.TB) (*engine.Engine, *aws.Server) {
	t.Helper()
	return startOn(t, mem.New())
}

type req struct {
	method, path, remote string
	header               map[string]string
}

func do(h http.Handler, r req) *httptest.ResponseRecorder {
	if r.method == "" {
		r.method = http.MethodGet
	}
	hr := httptest.NewRequest(r.method, "http://169.254.169.254"+r.path, nil)
	hr.RemoteAddr = r.remote
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, hr)
	return w
}

// errorPage is EC2's XHTML error page for status.
func errorPage(status int) string {
	title := map[int]string{400: "400 - Missing or Invalid Parameters", 401: "401 - Unauthorized", 403: "403 - Forbidden",
		404: "404 - Not Found", 429: "429 - Too Many Requests"}[status]
	return `<?xml version="1.0" encoding="iso-8859-1"?>
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN"
		 "http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">
<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="en" lang="en">
 <head>
  <title>` + title + `</title>
 </head>
 <body>
  <h1>` + title + `</h1>
 </body>
</html>
`
}

// want checks an answer's status, exact body and the headers given.
func want(t *testing.T, what string, w *httptest.ResponseRecorder, status int, body string, headers ...string) {
	t.Helper()
	if w.Code != status || w.Body.String() != body {
		t.Errorf("%s: %d %q\nwant %d %q", what, w.Code, w.Body.String(), status, body)
	}
	if got := w.Header().Get("Server"); got != "EC2ws" {
		t.Errorf("%s: Server %q, want EC2ws", what, got)
	}
	ct := "text/plain"
	if status != http.StatusOK && status != http.StatusMethodNotAllowed {
		ct = "text/html"
	}
	if got := w.Header().Get("Content-Type"); got != ct {
		t.Errorf("%s: Content-Type %q, want %q", what, got, ct)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if got := w.Header().Get(headers[i]); got != headers[i+1] {
			t.Errorf("%s: %s %q, want %q", what, headers[i], got, headers[i+1])
		}
	}
}

func token(t *testing.T, h http.Handler, remote string, ttl string) string {
	t.Helper()
	w := do(h, req{method: http.MethodPut, path: aws.TokenPath, remote: remote, header: map[string]string{aws.TokenTTLHeader: ttl}})
	if w.Code != http.StatusOK {
		t.Fatalf("token PUT: %d %s", w.Code, w.Body)
	}
	return w.Body.String()
}

func TestTokenPut(t *testing.T) {
	_, h := setup(t)
	w := do(h, req{method: http.MethodPut, path: aws.TokenPath, remote: ec2Addr, header: map[string]string{aws.TokenTTLHeader: "21600"}})
	if w.Code != 200 || len(w.Body.String()) != 56 || w.Header().Get(aws.TokenTTLHeader) != "21600" ||
		w.Header().Get("Content-Type") != "text/plain" || w.Header().Get("Server") != "EC2ws" {
		t.Fatalf("token PUT: %d %q %v", w.Code, w.Body, w.Header())
	}
	if again := token(t, h, ec2Addr, "21600"); again == "" {
		t.Fatal("second token empty")
	}
	for _, ttl := range []string{"", "0", "21601", "-1", "ten", "1.5", "+60", " 60", "60 ", "0x10", "100000"} {
		hdr := map[string]string{}
		if ttl != "" {
			hdr[aws.TokenTTLHeader] = ttl
		}
		w := do(h, req{method: http.MethodPut, path: aws.TokenPath, remote: ec2Addr, header: hdr})
		want(t, "TTL "+ttl, w, 400, errorPage(400))
	}
	for _, ttl := range []string{"1", "21600"} {
		w := do(h, req{method: http.MethodPut, path: aws.TokenPath, remote: optAddr, header: map[string]string{aws.TokenTTLHeader: ttl}})
		if w.Code != 200 || w.Header().Get(aws.TokenTTLHeader) != ttl {
			t.Errorf("TTL %s: %d, TTL header %q", ttl, w.Code, w.Header().Get(aws.TokenTTLHeader))
		}
	}
	w = do(h, req{method: http.MethodPut, path: aws.TokenPath, remote: ec2Addr,
		header: map[string]string{aws.TokenTTLHeader: "60", "X-Forwarded-For": "10.0.0.9"}})
	want(t, "PUT with X-Forwarded-For", w, 403, errorPage(403))
	w = do(h, req{path: aws.TokenPath, remote: ec2Addr, header: map[string]string{aws.TokenTTLHeader: "60"}})
	want(t, "GET of the token path", w, 405, "", "Allow", "OPTIONS, PUT", "Content-Length", "0")
	w = do(h, req{method: http.MethodOptions, path: aws.TokenPath, remote: ec2Addr})
	want(t, "OPTIONS of the token path", w, 200, "", "Allow", "OPTIONS, PUT")
	w = do(h, req{method: http.MethodPut, path: "/2021-03-23/api/token", remote: ec2Addr, header: map[string]string{aws.TokenTTLHeader: "60"}})
	want(t, "PUT of a versioned token path", w, 403, errorPage(403))
	if n := len(errorPage(404)); n != 339 {
		t.Errorf("the 404 page is %d bytes, want EC2's 339", n)
	}
}

func TestTokenRequired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, h := setup(t)
		tok := token(t, h, ec2Addr, "60")
		other := token(t, h, optAddr, "60")
		get := func(remote, tok string) *httptest.ResponseRecorder {
			hdr := map[string]string{}
			if tok != "" {
				hdr[aws.TokenHeader] = tok
			}
			return do(h, req{path: "/latest/meta-data/instance-id", remote: remote, header: hdr})
		}
		want(t, "no token", get(ec2Addr, ""), 401, errorPage(401))
		want(t, "own token", get(ec2Addr, tok), 200, "i-0000000000000000a")
		want(t, "another VM's token", get(ec2Addr, other), 401, errorPage(401))
		want(t, "own token's remaining life", get(ec2Addr, tok), 200, "i-0000000000000000a", aws.TokenTTLHeader, "60")
		want(t, "a forged token", get(ec2Addr, strings.Repeat("A", 56)), 401, errorPage(401))
		want(t, "a truncated token", get(ec2Addr, tok[:55]), 401, errorPage(401))
		// Every other spelling of the token is refused: one character
		// changed, in every place, to every other base64 character.
		const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_="
		for i := range len(tok) {
			for _, r := range alphabet {
				if byte(r) == tok[i] {
					continue
				}
				alt := tok[:i] + string(r) + tok[i+1:]
				if w := get(ec2Addr, alt); w.Code != 401 {
					t.Fatalf("token altered at %d to %q: %d", i, alt, w.Code)
				}
			}
		}
		time.Sleep(59*time.Second + 500*time.Millisecond)
		want(t, "a token half a second before expiry", get(ec2Addr, tok), 200, "i-0000000000000000a", aws.TokenTTLHeader, "0")
		time.Sleep(500 * time.Millisecond)
		time.Sleep(time.Second)
		want(t, "an expired token", get(ec2Addr, tok), 401, errorPage(401))
		want(t, "a fresh token", get(ec2Addr, token(t, h, ec2Addr, "1")), 200, "i-0000000000000000a")
		// A token issued late in a second still lasts its whole TTL.
		time.Sleep(999 * time.Millisecond)
		late := token(t, h, ec2Addr, "1")
		time.Sleep(998 * time.Millisecond)
		want(t, "a 1 s token 998 ms on", get(ec2Addr, late), 200, "i-0000000000000000a")
	})
}

func TestTokenOptional(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, h := setup(t)
		get := func(tok string, set bool) *httptest.ResponseRecorder {
			hr := httptest.NewRequest("GET", "http://169.254.169.254/latest/meta-data/instance-id", nil)
			hr.RemoteAddr = optAddr
			if set {
				hr.Header.Set(aws.TokenHeader, tok)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, hr)
			return w
		}
		want(t, "IMDSv1", get("", false), 200, "i-0000000000000000b")
		want(t, "IMDSv2", get(token(t, h, optAddr, "5"), true), 200, "i-0000000000000000b")
		want(t, "an empty token", get("", true), 401, errorPage(401))
		want(t, "another VM's token", get(token(t, h, ec2Addr, "5"), true), 401, errorPage(401))
		old := token(t, h, optAddr, "5")
		time.Sleep(5 * time.Second)
		want(t, "an expired token", get(old, true), 401, errorPage(401))
	})
}

func TestKeys(t *testing.T) {
	_, h := setup(t)
	wantKeys(t, h, optAddr, []keyCase{
		{"/", 200, versionList},
		{"/latest", 200, "dynamic\nmeta-data"},
		{"/latest/", 200, "dynamic\nmeta-data"},
		{"/latest/meta-data/", 200, optMetaData},
		{"/latest/meta-data", 200, optMetaData},
		{"/latest/meta-data/ami-id", 200, aws.AMI},
		{"/latest/meta-data/instance-id", 200, "i-0000000000000000b"},
		{"/latest/meta-data/instance-type", 200, "c5.xlarge"},
		{"/latest/meta-data/instance-life-cycle", 200, "on-demand"},
		{"/latest/meta-data/local-ipv4", 200, "127.0.0.3"},
		{"/latest/meta-data/hostname", 200, "ip-127-0-0-3.eu-west-1.compute.internal"},
		{"/latest/meta-data/local-hostname", 200, "ip-127-0-0-3.eu-west-1.compute.internal"},
		{"/latest/meta-data/placement/", 200, "availability-zone\nregion"},
		{"/latest/meta-data/placement/availability-zone", 200, "eu-west-1b"},
		{"/latest/meta-data/placement/region", 200, "eu-west-1"},
		{"/latest/meta-data/events/", 200, "maintenance/"},
		{"/latest/meta-data/events/maintenance/", 200, "history\nscheduled"},
		{"/latest/meta-data/events/maintenance/scheduled", 200, "[]"},
		{"/latest/meta-data/events/maintenance/history", 200, "[]"},
		{"/latest/meta-data/events/recommendations/rebalance", 404, errorPage(404)},
		{"/latest/meta-data/spot/instance-action", 404, errorPage(404)},
		{"/latest/meta-data/spot/termination-time", 404, errorPage(404)},
		{"/latest/meta-data/autoscaling/target-lifecycle-state", 404, errorPage(404)},
		{"/latest/meta-data/nonesuch", 404, errorPage(404)},
		{"/latest/user-data", 404, errorPage(404)},
		{"/2009-04-04/meta-data/instance-id", 200, "i-0000000000000000b"}})
	w := do(h, req{path: "/latest/dynamic/instance-identity/document", remote: optAddr})
	want(t, "identity document", w, 200, `{
  "accountId" : "123456789012",
  "architecture" : "x86_64",
  "availabilityZone" : "eu-west-1b",
  "billingProducts" : null,
  "devpayProductCodes" : null,
  "marketplaceProductCodes" : null,
  "imageId" : "`+aws.AMI+`",
  "instanceId" : "i-0000000000000000b",
  "instanceType" : "c5.xlarge",
  "kernelId" : null,
  "pendingTime" : "2024-01-01T00:00:00Z",
  "privateIp" : "127.0.0.3",
  "ramdiskId" : null,
  "region" : "eu-west-1",
  "version" : "2017-09-30"
}`)
	w = do(h, req{path: "/latest/meta-data/hostname", remote: ec2Addr, header: map[string]string{aws.TokenHeader: token(t, h, ec2Addr, "60")}})
	want(t, "us-east-1 hostname", w, 200, "ip-127-0-0-2.ec2.internal")
	w = do(h, req{method: http.MethodPost, path: "/latest/meta-data/instance-id", remote: optAddr})
	want(t, "POST", w, 405, "", "Allow", "GET, HEAD")
	w = do(h, req{path: "/latest/meta-data/instance-id", remote: otherAddr})
	want(t, "a stranger", w, 403, errorPage(403), "Connection", "close")
	w = do(h, req{path: "/latest/meta-data/instance-id", remote: azAddr})
	want(t, "an Azure VM", w, 404, errorPage(404))
}

func TestScheduledEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		ctx := t.Context()
		// The bubble's clock starts at 2000-01-01 00:00:00 UTC.
		ev, err := e.Create(ctx, engine.Spec{Type: forewarn.SystemReboot, VMs: []string{"opt_1"}, Notice: 48 * time.Hour, Lasts: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		stop, err := e.Create(ctx, engine.Spec{Type: forewarn.InstanceStop, VMs: []string{"opt_1"}, Notice: 72 * time.Hour,
			Description: "The instance is scheduled for a stop"})
		if err != nil {
			t.Fatal(err)
		}
		id, stopID := aws.EventID(ev.ID), aws.EventID(stop.ID)
		if len(id) != len("instance-event-")+17 || id == stopID {
			t.Fatalf("event IDs %s and %s", id, stopID)
		}
		reboot := func(state, prefix string) string {
			return `{
  "NotBefore" : "3 Jan 2000 00:00:00 GMT",
  "Code" : "system-reboot",
  "Description" : "` + prefix + `scheduled reboot",
  "EventId" : "` + id + `",
  "NotAfter" : "3 Jan 2000 00:10:00 GMT",
  "NotBeforeDeadline" : "10 Jan 2000 00:00:00 GMT",
  "State" : "` + state + `"
}`
		}
		// A stop has no NotAfter.
		stopJSON := func(state, prefix string) string {
			return `{
  "NotBefore" : "4 Jan 2000 00:00:00 GMT",
  "Code" : "instance-stop",
  "Description" : "` + prefix + `The instance is scheduled for a stop",
  "EventId" : "` + stopID + `",
  "NotBeforeDeadline" : "11 Jan 2000 00:00:00 GMT",
  "State" : "` + state + `"
}`
		}
		get := func(key string) *httptest.ResponseRecorder {
			return do(h, req{path: "/latest/meta-data/events/maintenance/" + key, remote: optAddr})
		}
		want(t, "scheduled", get("scheduled"), 200, "[ "+reboot("active", "")+", "+stopJSON("active", "")+" ]")
		want(t, "history", get("history"), 200, "[]")
		// Seen by no other VM.
		want(t, "another VM's scheduled", do(h, req{path: "/latest/meta-data/events/maintenance/scheduled", remote: spotAddr}), 200, "[]")

		time.Sleep(48 * time.Hour)
		synctest.Wait()
		want(t, "scheduled once started", get("scheduled"), 200, "[ "+reboot("active", "")+", "+stopJSON("active", "")+" ]")
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		want(t, "scheduled once completed", get("scheduled"), 200, "[ "+stopJSON("active", "")+" ]")
		want(t, "history once completed", get("history"), 200, "[ "+reboot("completed", "[Completed] ")+" ]")

		if err := e.Cancel(ctx, stop.ID); err != nil {
			t.Fatal(err)
		}
		want(t, "scheduled once canceled", get("scheduled"), 200, "[]")
		want(t, "history once canceled", get("history"), 200,
			"[ "+reboot("completed", "[Completed] ")+", "+stopJSON("canceled", "[Canceled] ")+" ]")
	})
}

func TestRescheduleMovesNotBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.InstanceReboot, VMs: []string{"opt_1"}, Notice: 48 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Reschedule(t.Context(), ev.ID, time.Now().Add(96*time.Hour)); err != nil {
			t.Fatal(err)
		}
		w := do(h, req{path: "/latest/meta-data/events/maintenance/scheduled", remote: optAddr})
		for _, s := range []string{`"NotBefore" : "5 Jan 2000 00:00:00 GMT"`, `"NotAfter" : "5 Jan 2000 00:05:00 GMT"`, `"NotBeforeDeadline" : "10 Jan 2000 00:00:00 GMT"`} {
			if !strings.Contains(w.Body.String(), s) {
				t.Errorf("rescheduled event lacks %s:\n%s", s, w.Body)
			}
		}
	})
}

func TestSpotInterruption(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		get := func(key string) *httptest.ResponseRecorder {
			return do(h, req{path: "/latest/meta-data/" + key, remote: spotAddr})
		}
		listing := strings.Replace(optMetaData, "ami-launch-index\n", "ami-launch-index\nautoscaling/\n", 1)
		want(t, "listing before", get(""), 200, listing)
		want(t, "life cycle", get("instance-life-cycle"), 200, "spot")
		if _, err := e.EvictWith(t.Context(), "spot_2", engine.VMOptions{Notice: 5 * time.Minute, Lasts: 20 * time.Second}); err != nil {
			t.Fatal(err)
		}
		want(t, "rebalance at once", get("events/recommendations/rebalance"), 200, `{"noticeTime":"2000-01-01T00:00:00Z"}`)
		want(t, "recommendations", get("events/recommendations/"), 200, "rebalance")
		want(t, "events listing", get("events/"), 200, "maintenance/\nrecommendations/")
		want(t, "no interruption yet", get("spot/instance-action"), 404, errorPage(404))
		want(t, "no spot/ yet", get("spot/"), 404, errorPage(404))

		time.Sleep(3*time.Minute - time.Second)
		synctest.Wait()
		want(t, "no interruption a second early", get("spot/instance-action"), 404, errorPage(404))
		time.Sleep(time.Second)
		synctest.Wait()
		want(t, "interruption notice", get("spot/instance-action"), 200, `{"action":"terminate","time":"2000-01-01T00:05:00Z"}`)
		want(t, "termination time", get("spot/termination-time"), 200, "2000-01-01T00:05:00Z")
		want(t, "spot/", get("spot/"), 200, "instance-action\ntermination-time")
		want(t, "listing with spot/", get(""), 200, listing+"\nspot/")
		want(t, "still in service", get("autoscaling/target-lifecycle-state"), 200, "InService")

		time.Sleep(2*time.Minute + 20*time.Second)
		synctest.Wait()
		want(t, "terminated", get("instance-id"), 404, errorPage(404), "Connection", "close")
	})
}

// TestSpotStop: a stop's notice has no termination-time, and the VM
// answers again once started.
func TestSpotStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		get := func(key string) *httptest.ResponseRecorder {
			return do(h, req{path: "/latest/meta-data/" + key, remote: stopAddr})
		}
		if _, err := e.Evict(t.Context(), "stop_5"); err != nil {
			t.Fatal(err)
		}
		want(t, "notice at once", get("spot/instance-action"), 200, `{"action":"stop","time":"2000-01-01T00:02:00Z"}`)
		want(t, "no termination time", get("spot/termination-time"), 404, errorPage(404))
		want(t, "spot/", get("spot/"), 200, "instance-action")
		time.Sleep(2*time.Minute + 30*time.Second)
		synctest.Wait()
		if _, err := e.StartVM(t.Context(), "stop_5"); err != nil {
			t.Fatal(err)
		}
		want(t, "started again", get("spot/instance-action"), 404, errorPage(404))
		want(t, "no rebalance", get("events/recommendations/rebalance"), 404, errorPage(404))
		want(t, "instance-id", get("instance-id"), 200, "i-0000000000000000e")
	})
}

// TestSpotHibernate: a hibernation's notice comes as it begins, with no
// termination-time and no warning ahead; the rebalance comes at once.
func TestSpotHibernate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		get := func(key string) *httptest.ResponseRecorder {
			return do(h, req{path: "/latest/meta-data/" + key, remote: hibAddr})
		}
		if _, err := e.EvictWith(t.Context(), "hib_6", engine.VMOptions{Notice: 3 * time.Minute}); err != nil {
			t.Fatal(err)
		}
		want(t, "rebalance", get("events/recommendations/rebalance"), 200, `{"noticeTime":"2000-01-01T00:00:00Z"}`)
		time.Sleep(3*time.Minute - time.Second)
		synctest.Wait()
		want(t, "no notice a second before", get("spot/instance-action"), 404, errorPage(404))
		time.Sleep(time.Second)
		synctest.Wait()
		want(t, "notice as it begins", get("spot/instance-action"), 200, `{"action":"hibernate","time":"2000-01-01T00:03:00Z"}`)
		want(t, "no termination time", get("spot/termination-time"), 404, errorPage(404))
	})
}

func TestAutoScalingLifecycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		get := func(remote string) *httptest.ResponseRecorder {
			return do(h, req{path: "/latest/meta-data/autoscaling/target-lifecycle-state", remote: remote})
		}
		want(t, "in service", get(spotAddr), 200, "InService")
		want(t, "warm pool", get(warmAddr), 200, "Warmed:Stopped")
		want(t, "autoscaling/", do(h, req{path: "/latest/meta-data/autoscaling/", remote: spotAddr}), 200, "target-lifecycle-state")
		// A Terminate that has not begun leaves the member in service.
		pending, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Terminate, VMs: []string{"warm_3"}, Notice: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		want(t, "a scheduled Terminate", get(warmAddr), 200, "Warmed:Stopped")
		if err := e.Cancel(t.Context(), pending.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := e.DeleteWith(t.Context(), "spot_2", engine.VMOptions{Lasts: time.Minute}); err != nil {
			t.Fatal(err)
		}
		want(t, "scaled in", get(spotAddr), 200, "Terminated")
		time.Sleep(time.Minute)
		synctest.Wait()
		want(t, "gone", get(spotAddr), 404, errorPage(404))
		want(t, "the other member", get(warmAddr), 200, "Warmed:Stopped")
	})
}

// TestHopLimit checks over real sockets, IPv4 and IPv6, that the token
// answer goes out with the VM's hop limit as its IP TTL (IPv6 hop limit),
// on a connection closed after it.
func TestHopLimit(t *testing.T) {
	for _, c := range []struct{ network, listen, vmIP string }{
		{"tcp4", "127.0.0.1:0", "127.0.0.1"},
		{"tcp6", "[::1]:0", "::1"},
	} {
		t.Run(c.network, func(t *testing.T) {
			ln, err := net.Listen(c.network, c.listen)
			if err != nil {
				t.Skipf("no %s loopback: %v", c.network, err)
			}
			fleet := testFleet()
			fleet.VMs[0].IP = netip.MustParseAddr(c.vmIP)
			e, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: fleet})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			rec := &recordingListener{Listener: ln}
			srv := &http.Server{Handler: aws.NewServer(e, nil), ConnContext: aws.ConnContext}
			go srv.Serve(rec)
			defer srv.Close()
			put, _ := http.NewRequest(http.MethodPut, "http://"+ln.Addr().String()+aws.TokenPath, nil)
			put.Header.Set(aws.TokenTTLHeader, "60")
			resp, err := http.DefaultClient.Do(put)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 || !resp.Close {
				t.Fatalf("token PUT: %d, Connection: close %v", resp.StatusCode, resp.Close)
			}
			if ttl := rec.ttlAtClose(t); ttl != 3 {
				t.Errorf("hop limit of the token answer = %d, want 3", ttl)
			}
		})
	}
}

// recordingListener hands out connections that note their socket's IP
// TTL (IPv6 hop limit on an IPv6 socket) as they close.
type recordingListener struct {
	net.Listener
	mu   sync.Mutex
	ttls []int
}

type ttlConn struct {
	*net.TCPConn
	l  *recordingListener
	v6 bool
}

func (c *ttlConn) Close() error {
	rc, err := c.SyscallConn()
	ttl := -1
	if err == nil {
		rc.Control(func(fd uintptr) {
			if c.v6 {
				ttl, _ = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_IPV6, syscall.IPV6_UNICAST_HOPS)
			} else {
				ttl, _ = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_TTL)
			}
		})
	}
	c.l.mu.Lock()
	c.l.ttls = append(c.l.ttls, ttl)
	c.l.mu.Unlock()
	return c.TCPConn.Close()
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := c.(*net.TCPConn)
	return &ttlConn{TCPConn: tc, l: l, v6: tc.LocalAddr().(*net.TCPAddr).IP.To4() == nil}, nil
}

// ttlAtClose waits for the first connection to close and returns its TTL.
func (l *recordingListener) ttlAtClose(t *testing.T) int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		if len(l.ttls) > 0 {
			ttl := l.ttls[0]
			l.mu.Unlock()
			return ttl
		}
		l.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the server did not close the token answer's connection")
	return 0
}

// TestRateLimit: a VM over its rate gets 429 and its connection closed;
// another VM is served; the VM is served again once time passes.
func TestRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, h := setup(t)
		h.SetRateLimit(2)
		get := func(remote string) *httptest.ResponseRecorder {
			return do(h, req{path: "/latest/meta-data/instance-id", remote: remote})
		}
		want(t, "first", get(optAddr), 200, "i-0000000000000000b")
		want(t, "second", get(optAddr), 200, "i-0000000000000000b")
		want(t, "third in the same instant", get(optAddr), 429, errorPage(429), "Connection", "close")
		want(t, "another VM", get(spotAddr), 200, "i-0000000000000000c")
		time.Sleep(500 * time.Millisecond)
		want(t, "half a second on", get(optAddr), 200, "i-0000000000000000b")
	})
}

package gce_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/gce"
	"github.com/forewarn/forewarn/history"
	"github.com/forewarn/forewarn/mem"
)

// Source addresses of the test fleet.
const (
	vmAddr    = "127.0.0.2:40000" // MIGRATE, the default kind of VM
	gpuAddr   = "127.0.0.3:40000" // GPU, TERMINATE
	soleAddr  = "127.0.0.4:40000" // sole tenant
	spotAddr  = "127.0.0.5:40000" // SPOT, TERMINATE
	preAddr   = "127.0.0.6:40000" // legacy preemptible, TERMINATE
	azAddr    = "127.0.0.7:40000" // an Azure VM
	quietAddr = "127.0.0.8:40000" // MIGRATE, never reads maintenance-event
	strayAddr = "10.9.9.9:40000"  // no VM of the fleet
)

const v1 = "/computeMetadata/v1/"

func testFleet() *forewarn.Fleet {
	ip := func(s string) netip.Addr { return netip.MustParseAddrPort(s).Addr() }
	g := func(name, addr, ohm string) *forewarn.VM {
		return &forewarn.VM{Name: name, IP: ip(addr), Provider: forewarn.GCE, OnHostMaintenance: ohm,
			Zone: "us-central1-a", MachineType: "e2-standard-2", Project: "forewarn-project"}
	}
	vm := g("vm", vmAddr, "MIGRATE")
	gpu := g("gpu", gpuAddr, "TERMINATE")
	gpu.GPU = true
	sole := g("sole", soleAddr, "MIGRATE")
	sole.SoleTenant = true
	spot := g("spot", spotAddr, "TERMINATE")
	spot.Spot = true
	pre := g("pre", preAddr, "TERMINATE")
	pre.Preemptible = true
	quiet := g("quiet", quietAddr, "MIGRATE")
	az := &forewarn.VM{Name: "az", IP: ip(azAddr), Provider: forewarn.Azure}
	return &forewarn.Fleet{VMs: []*forewarn.VM{vm, gpu, sole, spot, pre, az, quiet}}
}

// setup returns an engine on the test fleet and its GCE server. Inside a
// synctest bubble, t must be the bubble's.
func setup(t testing.TB) (*engine.Engine, *gce.Server) {
	t.Helper()
	e, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: testFleet(), AllowShortNotice: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, gce.NewServer(e, nil)
}

type req struct {
	method, target, remote string
	// header replaces the default Metadata-Flavor: Google when non-nil.
	header map[string]string
	ctx    context.Context
}

func newRequest(r req) *http.Request {
	if r.method == "" {
		r.method = http.MethodGet
	}
	if r.remote == "" {
		r.remote = vmAddr
	}
	hr := httptest.NewRequest(r.method, r.target, nil)
	if r.ctx != nil {
		hr = hr.WithContext(r.ctx)
	}
	hr.RemoteAddr = r.remote
	if r.header == nil {
		r.header = map[string]string{"Metadata-Flavor": "Google"}
	}
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	return hr
}

func do(h http.Handler, r req) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, newRequest(r))
	return w
}

// get reads key (below /computeMetadata/v1/, with any query) as the VM at
// remote does.
func get(h http.Handler, remote, key string) *httptest.ResponseRecorder {
	return do(h, req{target: v1 + key, remote: remote})
}

var etagRE = regexp.MustCompile(`^[0-9a-f]{16}$`)

// etagOf returns the ETag of w, checking its spelling and form.
func etagOf(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	v := w.Header()["ETag"]
	if len(v) != 1 || !etagRE.MatchString(v[0]) {
		t.Fatalf("ETag %q (header %v), want one value of 16 lower-case hex digits", v, w.Header())
	}
	return v[0]
}

func checkFlavor(t *testing.T, w *httptest.ResponseRecorder) {
	t.Helper()
	if v := w.Header()["Metadata-Flavor"]; len(v) != 1 || v[0] != "Google" {
		t.Fatalf("Metadata-Flavor %q, want [Google]", v)
	}
}

// check asserts status, body and Content-Type, and Metadata-Flavor.
func check(t *testing.T, w *httptest.ResponseRecorder, status int, ctype, body string) {
	t.Helper()
	if w.Code != status || w.Body.String() != body {
		t.Fatalf("got %d %q\nwant %d %q", w.Code, w.Body.String(), status, body)
	}
	if ct := w.Header().Get("Content-Type"); ct != ctype {
		t.Fatalf("Content-Type %q, want %q", ct, ctype)
	}
	checkFlavor(t, w)
}

// text asserts a 200 application/text answer with an ETag and returns
// the ETag.
func text(t *testing.T, w *httptest.ResponseRecorder, body string) string {
	t.Helper()
	check(t, w, http.StatusOK, "application/text", body)
	return etagOf(t, w)
}

// jsonBody asserts a 200 application/json answer with an ETag.
func jsonBody(t *testing.T, w *httptest.ResponseRecorder, body string) string {
	t.Helper()
	check(t, w, http.StatusOK, "application/json", body)
	return etagOf(t, w)
}

// checkError asserts an HTML error page with the given status.
func checkError(t *testing.T, w *httptest.ResponseRecorder, status int) {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status %d, want %d; body %q", w.Code, status, w.Body.String())
	}
	if ct := w.Header().Get("Content-Type"); ct != "text/html; charset=UTF-8" {
		t.Fatalf("Content-Type %q, want text/html; charset=UTF-8", ct)
	}
	checkFlavor(t, w)
	if !strings.Contains(w.Body.String(), "<html") || !strings.Contains(w.Body.String(), fmt.Sprint(status)) {
		t.Fatalf("body %q is not an HTML error page for %d", w.Body.String(), status)
	}
	if v, ok := w.Header()["ETag"]; ok {
		t.Fatalf("error page has ETag %q", v)
	}
}

// value reads key as the VM at remote and returns its text, requiring 200.
func value(t *testing.T, h http.Handler, remote, key string) string {
	t.Helper()
	w := get(h, remote, key)
	if w.Code != http.StatusOK {
		t.Fatalf("%s from %s: status %d %q", key, remote, w.Code, w.Body.String())
	}
	etagOf(t, w)
	return w.Body.String()
}

func wantValue(t *testing.T, h http.Handler, remote, key, want string) {
	t.Helper()
	if got := value(t, h, remote, key); got != want {
		t.Fatalf("%s from %s = %q, want %q (at %s)", key, remote, got, want, time.Now().UTC().Format(time.RFC3339Nano))
	}
}

func create(t *testing.T, e *engine.Engine, s engine.Spec) *forewarn.Event {
	t.Helper()
	ev, err := e.Create(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func event(t *testing.T, e *engine.Engine, id string) *forewarn.Event {
	t.Helper()
	ev, err := e.Event(id)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// at is a moment after the start of synctest time, 2000-01-01T00:00:00Z.
func at(d time.Duration) time.Time { return time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).Add(d) }

// step sleeps d of synctest time and lets every deadline due by then run.
func step(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// TestIdentityKeys checks the exact values of the keys clients read
// beside the maintenance keys.
func TestIdentityKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, h := setup(t)
		text(t, get(h, vmAddr, "instance/maintenance-event"), "NONE")
		text(t, get(h, vmAddr, "instance/preempted"), "FALSE")
		text(t, get(h, vmAddr, "instance/name"), "vm")
		text(t, get(h, gpuAddr, "instance/name"), "gpu")
		text(t, get(h, vmAddr, "instance/hostname"), "vm.us-central1-a.c.forewarn-project.internal")
		text(t, get(h, vmAddr, "project/project-id"), "forewarn-project")

		// The id of "vm" is not checked for its form: it renders negative
		// (numericID overflows int64 for about one name in twelve).
		id := value(t, h, vmAddr, "instance/id")
		if _, err := strconv.ParseInt(id, 10, 64); err != nil {
			t.Fatalf("instance/id %q: %v", id, err)
		}
		gid := value(t, h, gpuAddr, "instance/id")
		if !regexp.MustCompile(`^[1-9][0-9]{18}$`).MatchString(gid) {
			t.Fatalf("instance/id %q, want 19 digits", gid)
		}
		if gid == id {
			t.Fatalf("vm and gpu share instance/id %s", id)
		}
		num := value(t, h, vmAddr, "project/numeric-project-id")
		if !regexp.MustCompile(`^[1-9][0-9]{18}$`).MatchString(num) {
			t.Fatalf("numeric-project-id %q, want 19 digits", num)
		}
		if gnum := value(t, h, gpuAddr, "project/numeric-project-id"); gnum != num {
			t.Fatalf("one project, two numeric ids: %s, %s", num, gnum)
		}
		text(t, get(h, vmAddr, "instance/zone"), "projects/"+num+"/zones/us-central1-a")
		text(t, get(h, vmAddr, "instance/machine-type"), "projects/"+num+"/machineTypes/e2-standard-2")

		// Values are stable: the same request answers the same bytes.
		if again := value(t, h, vmAddr, "instance/id"); again != id {
			t.Fatalf("instance/id changed from %s to %s", id, again)
		}
		// alt=json on a leaf is a JSON string, numbers stay numbers.
		e := jsonBody(t, get(h, vmAddr, "instance/maintenance-event?alt=json"), `"NONE"`)
		if e2 := text(t, get(h, vmAddr, "instance/maintenance-event"), "NONE"); e2 != e {
			t.Fatalf("alt=json ETag %s, text ETag %s", e, e2)
		}
		jsonBody(t, get(h, gpuAddr, "instance/id?alt=json"), gid)
		jsonBody(t, get(h, vmAddr, "instance/name?alt=json"), `"vm"`)
	})
}

// TestETags checks that ETags are a function of the value: equal for
// equal values, different for different ones, and the same again when a
// value returns.
func TestETags(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		none := text(t, get(h, vmAddr, "instance/maintenance-event"), "NONE")
		if other := text(t, get(h, gpuAddr, "instance/maintenance-event"), "NONE"); other != none {
			t.Fatalf("NONE has ETag %s on vm and %s on gpu", none, other)
		}
		if again := text(t, get(h, vmAddr, "instance/maintenance-event"), "NONE"); again != none {
			t.Fatalf("NONE ETag changed from %s to %s", none, again)
		}
		falseTag := text(t, get(h, spotAddr, "instance/preempted"), "FALSE")
		if other := text(t, get(h, vmAddr, "instance/preempted"), "FALSE"); other != falseTag {
			t.Fatalf("FALSE has ETag %s and %s", falseTag, other)
		}
		if none == falseTag {
			t.Fatalf("NONE and FALSE share ETag %s", none)
		}
		if name := text(t, get(h, vmAddr, "instance/name"), "vm"); name == text(t, get(h, gpuAddr, "instance/name"), "gpu") {
			t.Fatalf("vm and gpu names share ETag %s", name)
		}

		ev := create(t, e, engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"vm"}, Started: true, Lasts: time.Minute})
		mig := text(t, get(h, vmAddr, "instance/maintenance-event"), "MIGRATE_ON_HOST_MAINTENANCE")
		if mig == none {
			t.Fatalf("ETag %s did not change with the value", mig)
		}
		// An unchanged key of a changed document keeps its ETag.
		if again := text(t, get(h, vmAddr, "instance/preempted"), "FALSE"); again != falseTag {
			t.Fatalf("preempted ETag changed from %s to %s though its value did not", falseTag, again)
		}
		if err := e.Complete(t.Context(), ev.ID); err != nil {
			t.Fatal(err)
		}
		if back := text(t, get(h, vmAddr, "instance/maintenance-event"), "NONE"); back != none {
			t.Fatalf("NONE again has ETag %s, before %s", back, none)
		}

		if _, err := e.Evict(t.Context(), "spot"); err != nil {
			t.Fatal(err)
		}
		if tr := text(t, get(h, spotAddr, "instance/preempted"), "TRUE"); tr == falseTag {
			t.Fatalf("preempted ETag %s did not change with the value", tr)
		}
	})
}

// TestScheduling checks the scheduling directory of each kind of VM.
func TestScheduling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, h := setup(t)
		for _, c := range []struct {
			addr                                string
			restart, ohm, preemptible, modelVal string
		}{
			{vmAddr, "TRUE", "MIGRATE", "FALSE", "STANDARD"},
			{gpuAddr, "TRUE", "TERMINATE", "FALSE", "STANDARD"},
			{spotAddr, "FALSE", "TERMINATE", "FALSE", "SPOT"},
			{preAddr, "FALSE", "TERMINATE", "TRUE", "STANDARD"},
		} {
			text(t, get(h, c.addr, "instance/scheduling/"), "automatic-restart\non-host-maintenance\npreemptible\nprovisioning-model\n")
			text(t, get(h, c.addr, "instance/scheduling/automatic-restart"), c.restart)
			text(t, get(h, c.addr, "instance/scheduling/on-host-maintenance"), c.ohm)
			text(t, get(h, c.addr, "instance/scheduling/preemptible"), c.preemptible)
			text(t, get(h, c.addr, "instance/scheduling/provisioning-model"), c.modelVal)
			want := fmt.Sprintf(`{"automaticRestart":%q,"onHostMaintenance":%q,"preemptible":%q,"provisioningModel":%q}`, c.restart, c.ohm, c.preemptible, c.modelVal)
			jsonBody(t, get(h, c.addr, "instance/scheduling/?recursive=true"), want)
			jsonBody(t, get(h, c.addr, "instance/scheduling/?recursive=TRUE"), want)
		}
		jsonBody(t, get(h, vmAddr, "instance/scheduling/?recursive=true"),
			`{"automaticRestart":"TRUE","onHostMaintenance":"MIGRATE","preemptible":"FALSE","provisioningModel":"STANDARD"}`)
		jsonBody(t, get(h, vmAddr, "instance/scheduling/?alt=json"),
			`["automatic-restart","on-host-maintenance","preemptible","provisioning-model"]`)
		text(t, get(h, vmAddr, "instance/scheduling/?recursive=true&alt=text"),
			"automatic-restart TRUE\non-host-maintenance MIGRATE\npreemptible FALSE\nprovisioning-model STANDARD\n")
	})
}

// TestDirectories checks the listings and the redirects of directories
// asked for without their trailing slash.
func TestDirectories(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, h := setup(t)
		// GET / needs no Metadata-Flavor header.
		w := do(h, req{target: "/", header: map[string]string{}})
		check(t, w, http.StatusOK, "application/text", "computeMetadata/\n")
		check(t, do(h, req{target: "/computeMetadata/", header: map[string]string{}}), http.StatusOK, "application/text", "v1/\n")

		text(t, get(h, vmAddr, ""), "instance/\nproject/\n")
		text(t, get(h, vmAddr, "instance/"),
			"hostname\nid\nmachine-type\nmaintenance-event\nname\npreempted\nscheduling/\nupcoming-maintenance\nzone\n")
		text(t, get(h, vmAddr, "project/"), "numeric-project-id\nproject-id\n")

		for _, c := range []struct{ target, location string }{
			{v1 + "instance/scheduling", v1 + "instance/scheduling/"},
			{v1 + "instance/scheduling?recursive=true", v1 + "instance/scheduling/?recursive=true"},
			{v1 + "instance", v1 + "instance/"},
			{"/computeMetadata/v1", "/computeMetadata/v1/"},
		} {
			w := do(h, req{target: c.target})
			if w.Code != http.StatusMovedPermanently {
				t.Fatalf("%s: status %d, want 301", c.target, w.Code)
			}
			if loc := w.Header().Get("Location"); loc != c.location || !strings.HasSuffix(strings.SplitN(loc, "?", 2)[0], "/") {
				t.Fatalf("%s: Location %q, want %q", c.target, loc, c.location)
			}
			checkFlavor(t, w)
		}
		// A leaf asked for as a directory is not found.
		checkError(t, get(h, vmAddr, "instance/name/"), http.StatusNotFound)
	})
}

// TestUpcomingMaintenance walks upcoming-maintenance through an event's
// life: absent, pending, ongoing, absent again.
func TestUpcomingMaintenance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		const none = `{ "error": "no notifications have been received yet, try again later" }`
		w := get(h, vmAddr, "instance/upcoming-maintenance")
		check(t, w, http.StatusServiceUnavailable, "application/json", none)
		absent := etagOf(t, w)
		check(t, get(h, vmAddr, "instance/upcoming-maintenance?alt=json"), http.StatusServiceUnavailable, "application/json", none)

		// Read maintenance-event, so that the warning is given.
		text(t, get(h, vmAddr, "instance/maintenance-event"), "NONE")
		ev := create(t, e, engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"vm"}, Notice: 2 * time.Hour, Lasts: 10 * time.Minute})
		pending := text(t, get(h, vmAddr, "instance/upcoming-maintenance"),
			"can_reschedule true\nlatest_window_start_time 2000-01-01T02:00:00+00:00\nmaintenance_status PENDING\ntype SCHEDULED\n"+
				"window_end_time 2000-01-01T02:10:00+00:00\nwindow_start_time 2000-01-01T02:00:00+00:00")
		if pending == absent {
			t.Fatalf("ETag %s did not change", pending)
		}
		jsonBody(t, get(h, vmAddr, "instance/upcoming-maintenance?alt=json"),
			`{"can_reschedule":"true","latest_window_start_time":"2000-01-01T02:00:00+00:00","maintenance_status":"PENDING","type":"SCHEDULED",`+
				`"window_end_time":"2000-01-01T02:10:00+00:00","window_start_time":"2000-01-01T02:00:00+00:00"}`)
		// Other VMs are not told.
		check(t, get(h, gpuAddr, "instance/upcoming-maintenance"), http.StatusServiceUnavailable, "application/json", none)

		// Warned at 01:59:00; started by hand at 01:59:30.
		step(time.Hour + 59*time.Minute + 30*time.Second)
		if got := event(t, e, ev.ID); got.Status != forewarn.Scheduled || !got.WarnedAt.Equal(at(time.Hour+59*time.Minute)) {
			t.Fatalf("event %s warned at %s, want Scheduled warned at 01:59:00", got.Status, got.WarnedAt)
		}
		text(t, get(h, vmAddr, "instance/upcoming-maintenance"), "can_reschedule true\nlatest_window_start_time 2000-01-01T02:00:00+00:00\n"+
			"maintenance_status PENDING\ntype SCHEDULED\nwindow_end_time 2000-01-01T02:10:00+00:00\nwindow_start_time 2000-01-01T02:00:00+00:00")
		if err := e.Start(t.Context(), ev.ID); err != nil {
			t.Fatal(err)
		}
		ongoing := text(t, get(h, vmAddr, "instance/upcoming-maintenance"),
			"can_reschedule false\nlatest_window_start_time 2000-01-01T01:59:30+00:00\nmaintenance_status ONGOING\ntype SCHEDULED\n"+
				"window_end_time 2000-01-01T02:09:30+00:00\nwindow_start_time 2000-01-01T01:59:30+00:00")
		if ongoing == pending || ongoing == absent {
			t.Fatalf("ONGOING ETag %s equals an earlier one", ongoing)
		}
		jsonBody(t, get(h, vmAddr, "instance/upcoming-maintenance?alt=json"),
			`{"can_reschedule":"false","latest_window_start_time":"2000-01-01T01:59:30+00:00","maintenance_status":"ONGOING","type":"SCHEDULED",`+
				`"window_end_time":"2000-01-01T02:09:30+00:00","window_start_time":"2000-01-01T01:59:30+00:00"}`)

		if err := e.Complete(t.Context(), ev.ID); err != nil {
			t.Fatal(err)
		}
		// Once a maintenance has ended, nothing is upcoming: an empty 200,
		// not the claim that nothing was ever received.
		w = get(h, vmAddr, "instance/upcoming-maintenance")
		ended := text(t, w, "")
		if ended == absent || ended == pending || ended == ongoing {
			t.Fatalf("ended ETag %s equals an earlier one", ended)
		}
		if tag := jsonBody(t, get(h, vmAddr, "instance/upcoming-maintenance?alt=json"), `{}`); tag != ended {
			t.Fatalf("alt=json ETag %s, text %s", tag, ended)
		}
		// The directory above shows the empty object, and its text form
		// no upcoming-maintenance lines.
		if b := get(h, vmAddr, "instance/?recursive=true").Body.String(); !strings.Contains(b, `"upcomingMaintenance":{}`) {
			t.Fatalf("instance/?recursive=true: %s", b)
		}
		if b := get(h, vmAddr, "instance/?recursive=true&alt=text").Body.String(); strings.Contains(b, "upcoming") {
			t.Fatalf("instance/?recursive=true&alt=text: %s", b)
		}

		// An unplanned event, created Started, is UNSCHEDULED.
		step(time.Minute)
		create(t, e, engine.Spec{Type: forewarn.TerminateOnHostMaintenance, VMs: []string{"gpu"}, Started: true, Lasts: 5 * time.Minute})
		text(t, get(h, gpuAddr, "instance/upcoming-maintenance"),
			"can_reschedule false\nlatest_window_start_time 2000-01-01T02:00:30+00:00\nmaintenance_status ONGOING\ntype UNSCHEDULED\n"+
				"window_end_time 2000-01-01T02:05:30+00:00\nwindow_start_time 2000-01-01T02:00:30+00:00")
		text(t, get(h, gpuAddr, "instance/maintenance-event"), "TERMINATE_ON_HOST_MAINTENANCE")
	})
}

// TestErrors checks the status, Content-Type and Metadata-Flavor of
// every refusal. Time plays no part, so it runs outside a bubble (where
// t.Run is allowed).
func TestErrors(t *testing.T) {
	_, h := setup(t)
	me := v1 + "instance/maintenance-event"
	for _, c := range []struct {
		name   string
		r      req
		status int
	}{
		{"no Metadata-Flavor", req{target: me, header: map[string]string{}}, http.StatusForbidden},
		{"no Metadata-Flavor on a listing", req{target: v1, header: map[string]string{}}, http.StatusForbidden},
		{"Metadata-Flavor google", req{target: me, header: map[string]string{"Metadata-Flavor": "google"}}, http.StatusForbidden},
		{"Metadata-Flavor GOOGLE", req{target: me, header: map[string]string{"Metadata-Flavor": "GOOGLE"}}, http.StatusForbidden},
		{"Metadata-Flavor empty", req{target: me, header: map[string]string{"Metadata-Flavor": ""}}, http.StatusForbidden},
		{"X-Forwarded-For", req{target: me, header: map[string]string{"Metadata-Flavor": "Google", "X-Forwarded-For": "10.0.0.1"}}, http.StatusForbidden},
		{"X-Forwarded-For empty", req{target: me, header: map[string]string{"Metadata-Flavor": "Google", "X-Forwarded-For": ""}}, http.StatusForbidden},
		{"X-Forwarded-For on /", req{target: "/", header: map[string]string{"X-Forwarded-For": "10.0.0.1"}}, http.StatusForbidden},
		{"unknown key", req{target: v1 + "instance/no-such-key"}, http.StatusNotFound},
		{"unknown directory", req{target: v1 + "nothing/"}, http.StatusNotFound},
		{"outside the prefix", req{target: "/computeMetadata/v2/instance/name"}, http.StatusNotFound},
		{"unknown source", req{target: me, remote: strayAddr}, http.StatusForbidden},
		{"unknown source on /", req{target: "/", remote: strayAddr, header: map[string]string{}}, http.StatusForbidden},
		{"Azure VM", req{target: v1 + "instance/name", remote: azAddr}, http.StatusNotFound},
		{"alt=xml", req{target: me + "?alt=xml"}, http.StatusBadRequest},
		{"wait_for_change=maybe", req{target: me + "?wait_for_change=maybe"}, http.StatusBadRequest},
		{"timeout_sec=abc", req{target: me + "?wait_for_change=true&timeout_sec=abc"}, http.StatusBadRequest},
		{"timeout_sec=-1", req{target: me + "?wait_for_change=true&timeout_sec=-1"}, http.StatusBadRequest},
		{"recursive=maybe", req{target: v1 + "instance/scheduling/?recursive=maybe"}, http.StatusBadRequest},
		{"malformed query", req{target: me + "?alt=%zz"}, http.StatusBadRequest},
		{"POST", req{method: http.MethodPost, target: me}, http.StatusMethodNotAllowed},
		{"PUT", req{method: http.MethodPut, target: me}, http.StatusMethodNotAllowed},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := do(h, c.r)
			checkError(t, w, c.status)
			// A caller of no VM is refused: its connection closes after
			// the answer.
			if closes := w.Header().Get("Connection") == "close"; closes != (c.r.remote == strayAddr) {
				t.Errorf("Connection %q", w.Header().Get("Connection"))
			}
			if c.status == http.StatusMethodNotAllowed {
				if a := w.Header().Get("Allow"); a != "GET, HEAD" {
					t.Fatalf("Allow %q, want GET, HEAD", a)
				}
			}
		})
	}
	// Unknown parameters are ignored, as the real server does.
	text(t, get(h, vmAddr, "instance/maintenance-event?foo=bar"), "NONE")
}

// TestMigrateLifecycle walks maintenance-event through a live migration
// of a VM that watches the key.
func TestMigrateLifecycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		none := text(t, get(h, vmAddr, "instance/maintenance-event"), "NONE") // also NoteQuery
		ev := create(t, e, engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"vm"}, Notice: 10 * time.Minute, Lasts: 5 * time.Minute})
		if !ev.NotBefore.Equal(at(10 * time.Minute)) {
			t.Fatalf("NotBefore %s", ev.NotBefore)
		}
		step(9*time.Minute - time.Second)
		wantValue(t, h, vmAddr, "instance/maintenance-event", "NONE")
		step(time.Second) // NotBefore - 60s
		mig := text(t, get(h, vmAddr, "instance/maintenance-event"), "MIGRATE_ON_HOST_MAINTENANCE")
		if mig == none {
			t.Fatal("ETag unchanged")
		}
		if got := event(t, e, ev.ID); got.Status != forewarn.Scheduled || !got.WarnedAt.Equal(at(9*time.Minute)) {
			t.Fatalf("at the warning: %s warned at %s", got.Status, got.WarnedAt)
		}
		// Other VMs are not told.
		wantValue(t, h, quietAddr, "instance/maintenance-event", "NONE")

		step(time.Minute - time.Second)
		wantValue(t, h, vmAddr, "instance/maintenance-event", "MIGRATE_ON_HOST_MAINTENANCE")
		step(time.Second) // NotBefore
		if got := event(t, e, ev.ID); got.Status != forewarn.Started || !got.StartedAt.Equal(at(10*time.Minute)) {
			t.Fatalf("at NotBefore: %s started at %s", got.Status, got.StartedAt)
		}
		if tag := text(t, get(h, vmAddr, "instance/maintenance-event"), "MIGRATE_ON_HOST_MAINTENANCE"); tag != mig {
			t.Fatalf("ETag changed from %s to %s though the value did not", mig, tag)
		}

		step(5*time.Minute - time.Second)
		wantValue(t, h, vmAddr, "instance/maintenance-event", "MIGRATE_ON_HOST_MAINTENANCE")
		step(time.Second) // NotBefore + Lasts
		if tag := text(t, get(h, vmAddr, "instance/maintenance-event"), "NONE"); tag != none {
			t.Fatalf("NONE ETag %s, before %s", tag, none)
		}
		if got := event(t, e, ev.ID); got.Status != forewarn.Completed {
			t.Fatalf("after Lasts: %s", got.Status)
		}
	})
}

// TestTerminateLifecycle checks the 60-minute warning of a stop on a GPU
// VM, and that MIGRATE is refused for it.
func TestTerminateLifecycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		_, err := e.Create(t.Context(), engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"gpu"}, Notice: time.Hour})
		if code := forewarn.ErrorCode(err); code != forewarn.EINVALID {
			t.Fatalf("MIGRATE on a GPU VM: %v (code %q), want %s", err, code, forewarn.EINVALID)
		}

		// The GPU VM never reads the key: a stop is warned of all the same.
		ev := create(t, e, engine.Spec{Type: forewarn.TerminateOnHostMaintenance, VMs: []string{"gpu"}, Notice: 3 * time.Hour, Lasts: 5 * time.Minute})
		step(2*time.Hour - time.Second)
		if got := event(t, e, ev.ID); got.Status != forewarn.Scheduled || !got.WarnedAt.IsZero() {
			t.Fatalf("before the warning: %s warned at %s", got.Status, got.WarnedAt)
		}
		wantValue(t, h, gpuAddr, "instance/maintenance-event", "NONE")
		step(time.Second) // NotBefore - 60m
		wantValue(t, h, gpuAddr, "instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
		if got := event(t, e, ev.ID); got.Status != forewarn.Scheduled || !got.WarnedAt.Equal(at(2*time.Hour)) {
			t.Fatalf("at the warning: %s warned at %s", got.Status, got.WarnedAt)
		}
		step(time.Hour)
		wantValue(t, h, gpuAddr, "instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
		if got := event(t, e, ev.ID); got.Status != forewarn.Started {
			t.Fatalf("at NotBefore: %s", got.Status)
		}
		step(5 * time.Minute)
		wantValue(t, h, gpuAddr, "instance/maintenance-event", "NONE")
	})
}

// TestSoleTenant checks that a sole-tenant VM's key stays NONE through a
// stop that its upcoming-maintenance does announce.
func TestSoleTenant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		wantValue(t, h, soleAddr, "instance/maintenance-event", "NONE")
		ev := create(t, e, engine.Spec{Type: forewarn.TerminateOnHostMaintenance, VMs: []string{"sole"}, Notice: 2 * time.Hour, Lasts: 5 * time.Minute})
		wantValue(t, h, soleAddr, "instance/maintenance-event", "NONE")
		step(time.Hour)
		if got := event(t, e, ev.ID); got.WarnedAt.IsZero() {
			t.Fatal("not warned after an hour")
		}
		wantValue(t, h, soleAddr, "instance/maintenance-event", "NONE")
		step(time.Hour)
		if got := event(t, e, ev.ID); got.Status != forewarn.Started {
			t.Fatalf("at NotBefore: %s", got.Status)
		}
		wantValue(t, h, soleAddr, "instance/maintenance-event", "NONE")
		if w := get(h, soleAddr, "instance/upcoming-maintenance"); w.Code != http.StatusOK {
			t.Fatalf("upcoming-maintenance: %d %q", w.Code, w.Body.String())
		}
		step(5 * time.Minute)
		wantValue(t, h, soleAddr, "instance/maintenance-event", "NONE")
	})
}

// TestUnwatchedMigrate checks that a live migration of a VM that never
// read its maintenance-event key skips the warning and starts when the
// warning was due.
func TestUnwatchedMigrate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		wantValue(t, h, quietAddr, "instance/name", "quiet") // other keys do not count
		ev := create(t, e, engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"quiet"}, Notice: 10 * time.Minute, Lasts: 5 * time.Minute})
		step(9*time.Minute - time.Second)
		if got := event(t, e, ev.ID); got.Status != forewarn.Scheduled {
			t.Fatalf("before the warning: %s", got.Status)
		}
		step(time.Second) // NotBefore - 60s
		if got := event(t, e, ev.ID); got.Status != forewarn.Started || !got.StartedAt.Equal(at(9*time.Minute)) {
			t.Fatalf("at the warning: %s started at %s, want Started at 00:09:00", got.Status, got.StartedAt)
		}
		wantValue(t, h, quietAddr, "instance/maintenance-event", "MIGRATE_ON_HOST_MAINTENANCE")
		step(5*time.Minute - time.Second)
		wantValue(t, h, quietAddr, "instance/maintenance-event", "MIGRATE_ON_HOST_MAINTENANCE")
		step(time.Second)
		wantValue(t, h, quietAddr, "instance/maintenance-event", "NONE")
	})
}

// TestEvictSpot checks a Spot VM's preemption: preempted at once,
// stopped 30 seconds later.
func TestEvictSpot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		state := func(name string) string {
			for _, v := range e.VMs() {
				if v.Name == name {
					return v.State
				}
			}
			t.Fatalf("no VM %s", name)
			return ""
		}
		text(t, get(h, spotAddr, "instance/preempted"), "FALSE")
		if _, err := e.Evict(t.Context(), "vm"); forewarn.ErrorCode(err) != forewarn.EINVALID {
			t.Fatalf("evicting a standard VM: %v", err)
		}
		if _, err := e.Evict(t.Context(), "spot"); err != nil {
			t.Fatal(err)
		}
		text(t, get(h, spotAddr, "instance/preempted"), "TRUE")
		text(t, get(h, spotAddr, "instance/maintenance-event"), "NONE")
		text(t, get(h, preAddr, "instance/preempted"), "FALSE")
		if s := state("spot"); s != "stopping" {
			t.Fatalf("state %q at once, want stopping", s)
		}
		step(30*time.Second - time.Millisecond)
		if s := state("spot"); s != "stopping" {
			t.Fatalf("state %q before 30s, want stopping", s)
		}
		step(time.Millisecond)
		if s := state("spot"); s != "stopped" {
			t.Fatalf("state %q after 30s, want stopped", s)
		}
		text(t, get(h, spotAddr, "instance/preempted"), "TRUE")

		// The legacy preemptible flag is evictable too.
		if _, err := e.Evict(t.Context(), "pre"); err != nil {
			t.Fatal(err)
		}
		text(t, get(h, preAddr, "instance/preempted"), "TRUE")
	})
}

// TestRecursiveReadSeesEvents: a recursive read of instance/ or of the
// root, as guest agents make, shows maintenance-event, so it marks the
// event seen for the report; a recursive read elsewhere does not.
func TestRecursiveReadSeesEvents(t *testing.T) {
	for _, c := range []struct {
		target string
		sees   bool
	}{
		{v1 + "instance/?recursive=true", true},
		{v1 + "?recursive=true", true},
		{v1 + "project/?recursive=true", false},
		{v1 + "instance/?recursive=false", false},
	} {
		e, s := setup(t)
		names := make([]string, 0, len(e.Fleet().VMs))
		for _, vm := range e.Fleet().VMs {
			names = append(names, vm.Name)
		}
		h := history.New(names, history.DefaultSize)
		s.SetHistory(h)
		ev := create(t, e, engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"vm"}, Started: true, Lasts: time.Minute})
		if w := do(s, req{target: c.target}); w.Code != 200 {
			t.Fatalf("%s: %d %s", c.target, w.Code, w.Body)
		}
		seen, ok := h.Seen(ev.ID)
		if ok != c.sees || ok && seen.By != "vm" {
			t.Errorf("%s: seen %+v (ok %v), want seen by vm %v", c.target, seen, ok, c.sees)
		}
	}
}

package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

var idPattern = regexp.MustCompile(`^[0-9A-F]{8}-[0-9A-F]{4}-4[0-9A-F]{3}-[89AB][0-9A-F]{3}-[0-9A-F]{12}$`)

// testFleet has an availability set of two update domains, a standalone
// VM, a GCE VM, a scale set of two VMs, a scale set of one Spot VM, and a
// name ("dup") used by both an availability set and a cloud service.
func testFleet() *forewarn.Fleet {
	return &forewarn.Fleet{VMs: []*forewarn.VM{
		{Name: "web_0", Provider: forewarn.Azure, AvailabilitySet: "web", UpdateDomain: 0},
		{Name: "web_1", Provider: forewarn.Azure, AvailabilitySet: "web", UpdateDomain: 1},
		{Name: "db_0", Provider: forewarn.Azure},
		{Name: "gce_0", Provider: forewarn.GCE},
		{Name: "ss_0", Provider: forewarn.Azure, ScaleSet: "ss", InstanceID: "0"},
		{Name: "ss_1", Provider: forewarn.Azure, ScaleSet: "ss", InstanceID: "1"},
		{Name: "spot_0", Provider: forewarn.Azure, ScaleSet: "spot", InstanceID: "0", Spot: true},
		{Name: "dup_0", Provider: forewarn.Azure, AvailabilitySet: "dup"},
		{Name: "dup_1", Provider: forewarn.Azure, CloudService: "dup"},
	}}
}

// silent names the VMs that never call their metadata API in the tests,
// so their scheduled events stay disabled.
var silent = []string{"gce_0", "spot_0"}

type harness struct {
	eng    *engine.Engine
	srv    *httptest.Server
	client *admin.Client
	logs   *bytes.Buffer
}

// newHarness runs an admin.Server over a real socket on an engine backed
// by store, or by a fresh mem.Store when store is nil.
func newHarness(t *testing.T, store forewarn.Store) *harness {
	t.Helper()
	if store == nil {
		store = mem.New()
	}
	eng, err := engine.New(t.Context(), engine.Config{Store: store, Fleet: testFleet()})
	if err != nil {
		t.Fatalf("engine.New: %v", err)
	}
	t.Cleanup(func() { eng.Close() })
	// Every other VM has called once, enabling its scheduled events, so
	// Platform events keep their notice.
	for _, vm := range eng.Fleet().VMs {
		if !slices.Contains(silent, vm.Name) {
			eng.NoteRequest(vm.Name)
		}
	}
	logs := new(bytes.Buffer)
	srv := httptest.NewServer(admin.NewServer(eng, slog.New(slog.NewTextHandler(logs, nil))))
	t.Cleanup(srv.Close)
	return &harness{eng: eng, srv: srv, client: admin.NewClient(srv.URL, srv.Client()), logs: logs}
}

// raw sends body to path, as JSON when there is one, and returns the
// status, Content-Type and body.
func (h *harness) raw(t *testing.T, method, path, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, h.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// sameJSON fails the test unless got and want render to the same JSON.
func sameJSON(t *testing.T, got, want any) {
	t.Helper()
	g, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	w, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(g, w) {
		t.Errorf("got  %s\nwant %s", g, w)
	}
}

// wantError fails the test unless err is a *forewarn.Error with exactly
// the given code and message.
func wantError(t *testing.T, err error, code, message string) {
	t.Helper()
	var fe *forewarn.Error
	if !errors.As(err, &fe) {
		t.Fatalf("error = %v (%T), want *forewarn.Error %s %q", err, err, code, message)
	}
	if fe.Code != code || fe.Message != message {
		t.Errorf("error = %s %q, want %s %q", fe.Code, fe.Message, code, message)
	}
}

func TestCreateEvent(t *testing.T) {
	h := newHarness(t, nil)
	ctx := t.Context()
	five := 5
	before := time.Now()
	ev, err := h.client.CreateEvent(ctx, admin.CreateRequest{
		Type:        "reboot",
		VMs:         []string{"web_0"},
		Notice:      "20m",
		Duration:    &five,
		Source:      "user",
		Description: "host update",
		Lasts:       "3m",
	})
	if err != nil {
		t.Fatalf("CreateEvent: %v", err)
	}
	if !idPattern.MatchString(ev.ID) {
		t.Errorf("ID = %q, want an upper-case version-4 GUID", ev.ID)
	}
	if ev.Type != forewarn.Reboot || ev.Status != forewarn.Scheduled || ev.Source != forewarn.User ||
		ev.Duration != 5 || ev.Description != "host update" || ev.Lasts != 3*time.Minute ||
		!slices.Equal(ev.Resources, []string{"web_0"}) || len(ev.Approvals) != 0 {
		t.Errorf("created %+v, want a Scheduled User Reboot of web_0, 5s, \"host update\", lasting 3m", ev)
	}
	if lo, hi := before.Add(20*time.Minute).Truncate(time.Second), time.Now().Add(20*time.Minute+time.Second); ev.NotBefore.Before(lo) || ev.NotBefore.After(hi) {
		t.Errorf("NotBefore = %v, want between %v and %v", ev.NotBefore, lo, hi)
	}

	// The engine holds exactly what the client got back.
	stored, err := h.eng.Event(ev.ID)
	if err != nil {
		t.Fatalf("engine.Event: %v", err)
	}
	sameJSON(t, ev, stored)

	got, err := h.client.Event(ctx, ev.ID)
	if err != nil {
		t.Fatalf("Event: %v", err)
	}
	sameJSON(t, got, stored)

	// Defaults: Platform source, unknown duration, the type's lasts.
	def, err := h.client.CreateEvent(ctx, admin.CreateRequest{Type: "Freeze", VMs: []string{"db_0"}})
	if err != nil {
		t.Fatalf("CreateEvent: %v", err)
	}
	if def.Source != forewarn.Platform || def.Duration != -1 || def.Lasts != time.Minute || def.Status != forewarn.Scheduled {
		t.Errorf("defaults: source %s, duration %d, lasts %s, status %s; want Platform, -1, 1m0s, Scheduled",
			def.Source, def.Duration, def.Lasts, def.Status)
	}

	// An unplanned event is Started at once.
	started, err := h.client.CreateEvent(ctx, admin.CreateRequest{Type: "Redeploy", VMs: []string{"web_1"}, Started: true})
	if err != nil {
		t.Fatalf("CreateEvent: %v", err)
	}
	if started.Status != forewarn.Started || started.StartedAt.IsZero() || !started.NotBefore.IsZero() {
		t.Errorf("started event: status %s, startedAt %v, notBefore %v", started.Status, started.StartedAt, started.NotBefore)
	}

	evs, err := h.client.Events(ctx)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	sameJSON(t, evs, h.eng.Events())
	if len(evs) != 3 || evs[0].ID != ev.ID || evs[1].ID != def.ID || evs[2].ID != started.ID {
		t.Errorf("Events = %v, want the three events oldest first", evs)
	}
}

func TestLifecycle(t *testing.T) {
	h := newHarness(t, nil)
	ctx := t.Context()
	create := func() *forewarn.Event {
		t.Helper()
		ev, err := h.client.CreateEvent(ctx, admin.CreateRequest{Type: "Reboot", VMs: []string{"web_0"}})
		if err != nil {
			t.Fatalf("CreateEvent: %v", err)
		}
		if ev.Status != forewarn.Scheduled {
			t.Fatalf("created event is %s, want Scheduled", ev.Status)
		}
		return ev
	}

	t.Run("approve then complete", func(t *testing.T) {
		ev := create()
		approved, err := h.client.Approve(ctx, ev.ID)
		if err != nil {
			t.Fatalf("Approve: %v", err)
		}
		if approved.Status != forewarn.Started || approved.StartedAt.IsZero() || !approved.NotBefore.IsZero() {
			t.Errorf("approved: status %s, startedAt %v, notBefore %v; want Started now", approved.Status, approved.StartedAt, approved.NotBefore)
		}
		if len(approved.Approvals) != 1 || approved.Approvals[0].By != "operator" || approved.Approvals[0].At.IsZero() {
			t.Errorf("approvals = %+v, want one by operator", approved.Approvals)
		}
		completed, err := h.client.Complete(ctx, ev.ID)
		if err != nil {
			t.Fatalf("Complete: %v", err)
		}
		if completed.Status != forewarn.Completed || completed.EndedAt.IsZero() {
			t.Errorf("completed: status %s, endedAt %v", completed.Status, completed.EndedAt)
		}
		_, err = h.client.Complete(ctx, ev.ID)
		wantError(t, err, forewarn.ECONFLICT, "event "+ev.ID+" is Completed, not Started")
		stored, _ := h.eng.Event(ev.ID)
		sameJSON(t, completed, stored)
	})

	t.Run("start", func(t *testing.T) {
		ev := create()
		started, err := h.client.Start(ctx, ev.ID)
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		if started.Status != forewarn.Started || len(started.Approvals) != 0 {
			t.Errorf("started: status %s, approvals %v; want Started without approvals", started.Status, started.Approvals)
		}
		_, err = h.client.Cancel(ctx, ev.ID)
		wantError(t, err, forewarn.ECONFLICT, "event "+ev.ID+" is Started, not Scheduled")
	})

	t.Run("cancel", func(t *testing.T) {
		ev := create()
		canceled, err := h.client.Cancel(ctx, ev.ID)
		if err != nil {
			t.Fatalf("Cancel: %v", err)
		}
		if canceled.Status != forewarn.Canceled || canceled.EndedAt.IsZero() {
			t.Errorf("canceled: status %s, endedAt %v", canceled.Status, canceled.EndedAt)
		}
		_, err = h.client.Start(ctx, ev.ID)
		wantError(t, err, forewarn.ECONFLICT, "event "+ev.ID+" is Canceled, not Scheduled")
	})

	t.Run("complete a Scheduled event", func(t *testing.T) {
		ev := create()
		_, err := h.client.Complete(ctx, ev.ID)
		wantError(t, err, forewarn.ECONFLICT, "event "+ev.ID+" is Scheduled, not Started")
		status, ctype, body := h.raw(t, "POST", "/v1/events/"+ev.ID+"/complete", "")
		if want := `{"error":{"code":"conflict","message":"event ` + ev.ID + ` is Scheduled, not Started"}}` + "\n"; status != 409 || ctype != "application/json" || body != want {
			t.Errorf("got %d %s %s\nwant 409 application/json %s", status, ctype, body, want)
		}
		if got, _ := h.eng.Event(ev.ID); got.Status != forewarn.Scheduled {
			t.Errorf("after a refused complete the event is %s, want Scheduled", got.Status)
		}
	})
}

func TestVMs(t *testing.T) {
	before := time.Now()
	h := newHarness(t, nil)
	ctx := t.Context()

	restart, err := h.client.Restart(ctx, "web_0", 0)
	if err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if restart.Type != forewarn.Reboot || restart.Source != forewarn.User || restart.Status != forewarn.Scheduled ||
		!slices.Equal(restart.Resources, []string{"web_0"}) {
		t.Errorf("restart created %v from %s, want a Scheduled User Reboot of web_0", restart, restart.Source)
	}
	if got := restart.NotBefore.Sub(restart.Created); got < 15*time.Minute || got > 15*time.Minute+time.Second {
		t.Errorf("restart notice = %s, want the 15m minimum", got)
	}

	redeploy, err := h.client.Redeploy(ctx, "db_0", 25*time.Minute)
	if err != nil {
		t.Fatalf("Redeploy: %v", err)
	}
	if redeploy.Type != forewarn.Redeploy || redeploy.Source != forewarn.User || !slices.Equal(redeploy.Resources, []string{"db_0"}) {
		t.Errorf("redeploy created %v from %s, want a User Redeploy of db_0", redeploy, redeploy.Source)
	}
	if got := redeploy.NotBefore.Sub(redeploy.Created); got < 25*time.Minute || got > 25*time.Minute+time.Second {
		t.Errorf("redeploy notice = %s, want 25m", got)
	}

	vms, err := h.client.VMs(ctx)
	if err != nil {
		t.Fatalf("VMs: %v", err)
	}
	sameJSON(t, vms, h.eng.VMs())
	want := []struct {
		name    string
		set     string
		ud      int
		inc     int64
		enabled bool
		events  []string
	}{
		{"web_0", "web", 0, 2, true, []string{restart.ID}},
		{"web_1", "web", 1, 2, true, []string{restart.ID}}, // same availability set
		{"db_0", "", 0, 2, true, []string{redeploy.ID}},
		{"gce_0", "", 0, 1, false, []string{}},
		{"ss_0", "", 0, 1, true, []string{}},
		{"ss_1", "", 0, 1, true, []string{}},
		{"spot_0", "", 0, 1, false, []string{}},
		{"dup_0", "dup", 0, 1, true, []string{}},
		{"dup_1", "", 0, 1, true, []string{}},
	}
	if len(vms) != len(want) {
		t.Fatalf("VMs returned %d VMs, want %d", len(vms), len(want))
	}
	for i, w := range want {
		v := vms[i]
		if v.Name != w.name || v.AvailabilitySet != w.set || v.UpdateDomain != w.ud || v.Incarnation != w.inc ||
			v.State != "running" || v.Enabled != w.enabled || v.LastSeen.IsZero() == w.enabled || !slices.Equal(v.Events, w.events) {
			t.Errorf("VM %d = %+v, want %+v, running, last seen when enabled", i, v, w)
		}
	}
	if v := vms[4]; v.ScaleSet != "ss" || v.InstanceID != "0" || v.Spot {
		t.Errorf("ss_0 = %+v, want scale set ss, instance 0, not Spot", v)
	}

	// The exact answer, and the JSON of one VM in full.
	status, ctype, body := h.raw(t, "GET", "/v1/vms", "")
	engs, _ := json.Marshal(map[string]any{"vms": h.eng.VMs()})
	if status != 200 || ctype != "application/json" || body != string(engs)+"\n" {
		t.Errorf("GET /v1/vms: %d %s %s\nwant 200 application/json %s", status, ctype, body, engs)
	}
	spot := `{"name":"spot_0","provider":"azure","scaleSet":"spot","instanceId":"0","updateDomain":0,"spot":true,` +
		`"incarnation":1,"state":"running","enabled":false,"events":[]}`
	if !strings.Contains(body, spot) {
		t.Errorf("GET /v1/vms does not hold %s:\n%s", spot, body)
	}
	lastSeen := vms[0].LastSeen
	if lastSeen.Location() != time.UTC || lastSeen.Before(before) || lastSeen.After(time.Now()) {
		t.Errorf("web_0 last seen %v, want a UTC time since the test began (%v)", lastSeen, before)
	}

	_, err = h.client.Restart(ctx, "nope", 0)
	wantError(t, err, forewarn.ENOTFOUND, `unknown VM "nope"`)
	_, err = h.client.Redeploy(ctx, "web_1", time.Minute)
	wantError(t, err, forewarn.EINVALID, "notice 1m0s is below the 10m0s minimum for Redeploy (the server's --allow-short-notice lifts this)")
}

// TestClientErrors checks that refusals reach the client with the
// server's code and message.
func TestClientErrors(t *testing.T) {
	h := newHarness(t, nil)
	ctx := t.Context()
	tests := []struct {
		name    string
		req     admin.CreateRequest
		code    string
		message string
	}{
		{"unknown type", admin.CreateRequest{Type: "Boom", VMs: []string{"web_0"}}, forewarn.EINVALID,
			`unknown event type "Boom" (want one of Freeze, Reboot, Redeploy, Preempt, Terminate, MIGRATE_ON_HOST_MAINTENANCE, TERMINATE_ON_HOST_MAINTENANCE, instance-reboot, system-reboot, system-maintenance, instance-retirement, instance-stop)`},
		{"missing type", admin.CreateRequest{VMs: []string{"web_0"}}, forewarn.EINVALID, "missing event type"},
		{"unknown VM", admin.CreateRequest{Type: "Reboot", VMs: []string{"web_0", "nope"}}, forewarn.ENOTFOUND, `unknown VM "nope"`},
		{"no VM", admin.CreateRequest{Type: "Reboot"}, forewarn.EINVALID, "an event needs at least one VM"},
		{"GCE VM", admin.CreateRequest{Type: "Reboot", VMs: []string{"gce_0"}}, forewarn.EINVALID,
			`VM "gce_0" is a Compute Engine VM; Reboot events are not for Compute Engine VMs`},
		{"notice below minimum", admin.CreateRequest{Type: "Reboot", VMs: []string{"web_0"}, Notice: "1m"}, forewarn.EINVALID,
			"notice 1m0s is below the 15m0s minimum for Reboot (the server's --allow-short-notice lifts this)"},
		{"bad notice", admin.CreateRequest{Type: "Reboot", VMs: []string{"web_0"}, Notice: "soon"}, forewarn.EINVALID,
			`invalid notice "soon": want a duration such as 15m or 90s`},
		{"bad lasts", admin.CreateRequest{Type: "Reboot", VMs: []string{"web_0"}, Lasts: "5"}, forewarn.EINVALID,
			`invalid lasts "5": want a duration such as 15m or 90s`},
		{"bad source", admin.CreateRequest{Type: "Reboot", VMs: []string{"web_0"}, Source: "Alien"}, forewarn.EINVALID,
			`unknown event source "Alien" (want Platform or User)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := h.client.CreateEvent(ctx, tt.req)
			if ev != nil {
				t.Errorf("CreateEvent returned %v", ev)
			}
			wantError(t, err, tt.code, tt.message)
		})
	}
	if evs := h.eng.Events(); len(evs) != 0 {
		t.Errorf("refused requests created %d events", len(evs))
	}

	for name, call := range map[string]func(context.Context, string) (*forewarn.Event, error){
		"Event": h.client.Event, "Approve": h.client.Approve, "Start": h.client.Start,
		"Complete": h.client.Complete, "Cancel": h.client.Cancel,
	} {
		_, err := call(ctx, "XYZ")
		t.Run(name, func(t *testing.T) { wantError(t, err, forewarn.ENOTFOUND, `no event "XYZ"`) })
	}
}

// TestHTTPErrors checks the exact status and body of refusals, including
// those the client cannot produce.
func TestHTTPErrors(t *testing.T) {
	h := newHarness(t, nil)
	big := `{"type":"Reboot","vms":["web_0"],"description":"` + strings.Repeat("x", admin.MaxBodyBytes) + `"}`
	tests := []struct {
		name         string
		method, path string
		body         string
		status       int
		want         string
	}{
		{"unknown type", "POST", "/v1/events", `{"type":"Boom","vms":["web_0"]}`, 400,
			`{"error":{"code":"invalid","message":"unknown event type \"Boom\" (want one of Freeze, Reboot, Redeploy, Preempt, Terminate, MIGRATE_ON_HOST_MAINTENANCE, TERMINATE_ON_HOST_MAINTENANCE, instance-reboot, system-reboot, system-maintenance, instance-retirement, instance-stop)"}}`},
		{"unknown VM", "POST", "/v1/events", `{"type":"Reboot","vms":["nope"]}`, 404,
			`{"error":{"code":"not_found","message":"unknown VM \"nope\""}}`},
		{"notice below minimum", "POST", "/v1/events", `{"type":"Reboot","vms":["web_0"],"notice":"1m"}`, 400,
			`{"error":{"code":"invalid","message":"notice 1m0s is below the 15m0s minimum for Reboot (the server's --allow-short-notice lifts this)"}}`},
		{"unknown id", "GET", "/v1/events/XYZ", "", 404,
			`{"error":{"code":"not_found","message":"no event \"XYZ\""}}`},
		{"unknown id approve", "POST", "/v1/events/XYZ/approve", "", 404,
			`{"error":{"code":"not_found","message":"no event \"XYZ\""}}`},
		{"restart unknown VM", "POST", "/v1/vms/nope/restart", "", 404,
			`{"error":{"code":"not_found","message":"unknown VM \"nope\""}}`},
		{"bad syntax", "POST", "/v1/events", `{"type" "Reboot"}`, 400,
			`{"error":{"code":"invalid","message":"malformed JSON at byte 9: invalid character '\"' after object key"}}`},
		{"truncated", "POST", "/v1/events", `{"type":"Reboot",`, 400,
			`{"error":{"code":"invalid","message":"malformed JSON: unexpected end of the body"}}`},
		{"empty body", "POST", "/v1/events", "", 400,
			`{"error":{"code":"invalid","message":"missing request body: want a JSON object"}}`},
		{"not an object", "POST", "/v1/events", `["Reboot"]`, 400,
			`{"error":{"code":"invalid","message":"request body must be a JSON object, not array"}}`},
		{"unknown field", "POST", "/v1/events", `{"type":"Reboot","vms":["web_0"],"colour":"red"}`, 400,
			`{"error":{"code":"invalid","message":"unknown field \"colour\""}}`},
		{"wrong type", "POST", "/v1/events", `{"type":"Reboot","vms":"web_0"}`, 400,
			`{"error":{"code":"invalid","message":"field \"vms\" must be an array, not string"}}`},
		{"wrong number", "POST", "/v1/events", `{"type":"Reboot","vms":["web_0"],"durationInSeconds":"5"}`, 400,
			`{"error":{"code":"invalid","message":"field \"durationInSeconds\" must be a whole number, not string"}}`},
		{"trailing data", "POST", "/v1/events", `{"type":"Reboot","vms":["web_0"]} {}`, 400,
			`{"error":{"code":"invalid","message":"malformed JSON: unexpected data after the request object"}}`},
		{"restart unknown field", "POST", "/v1/vms/web_0/restart", `{"notice":"20m","when":"now"}`, 400,
			`{"error":{"code":"invalid","message":"unknown field \"when\""}}`},
		{"body too large", "POST", "/v1/events", big, 413,
			`{"error":{"code":"invalid","message":"request body is larger than 16777216 bytes"}}`},
		{"wrong method", "DELETE", "/v1/events", "", 405,
			`{"error":{"code":"invalid","message":"method DELETE is not allowed for /v1/events (allowed: GET, HEAD, POST)"}}`},
		{"wrong method on action", "GET", "/v1/events/XYZ/approve", "", 405,
			`{"error":{"code":"invalid","message":"method GET is not allowed for /v1/events/XYZ/approve (allowed: POST)"}}`},
		{"unknown path", "GET", "/v2/events", "", 404,
			`{"error":{"code":"not_found","message":"no route for GET /v2/events"}}`},
		{"unknown action", "POST", "/v1/events/XYZ/explode", "", 404,
			`{"error":{"code":"not_found","message":"no route for POST /v1/events/XYZ/explode"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, ctype, body := h.raw(t, tt.method, tt.path, tt.body)
			if status != tt.status || ctype != "application/json" || body != tt.want+"\n" {
				t.Errorf("%s %s:\ngot  %d %s %s\nwant %d application/json %s", tt.method, tt.path, status, ctype, body, tt.status, tt.want)
			}
		})
	}
	if evs := h.eng.Events(); len(evs) != 0 {
		t.Errorf("refused requests created %d events", len(evs))
	}

	t.Run("Allow header", func(t *testing.T) {
		resp, err := h.srv.Client().Post(h.srv.URL+"/v1/vms", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("POST /v1/vms: %d, Allow %q; want 405, Allow \"GET, HEAD\"", resp.StatusCode, resp.Header.Get("Allow"))
		}
	})

	t.Run("healthz", func(t *testing.T) {
		status, ctype, body := h.raw(t, "GET", "/healthz", "")
		if status != 200 || ctype != "application/json" || body != `{"status":"ok"}`+"\n" {
			t.Errorf("got %d %s %q", status, ctype, body)
		}
	})
}

// failingStore is a Store whose writes fail with an I/O-like error.
type failingStore struct{ *mem.Store }

func (failingStore) Commit(context.Context, *forewarn.Change) (int64, error) {
	return 0, errors.New("write /var/lib/forewarn/db: disk on fire")
}

// seeded returns a store that holds testFleet's inventory.
func seeded(t *testing.T) *mem.Store {
	t.Helper()
	st := mem.New()
	eng, err := engine.New(t.Context(), engine.Config{Store: st, Fleet: testFleet()})
	if err != nil {
		t.Fatal(err)
	}
	eng.Close()
	return st
}

func TestInternalErrorHidden(t *testing.T) {
	h := newHarness(t, failingStore{seeded(t)})
	status, _, body := h.raw(t, "POST", "/v1/events", `{"type":"Reboot","vms":["web_0"]}`)
	if want := `{"error":{"code":"internal","message":"internal error"}}` + "\n"; status != 500 || body != want {
		t.Errorf("got %d %s, want 500 %s", status, body, want)
	}
	if !strings.Contains(h.logs.String(), "disk on fire") {
		t.Errorf("the internal error was not logged; log:\n%s", h.logs)
	}

	_, err := h.client.CreateEvent(t.Context(), admin.CreateRequest{Type: "Reboot", VMs: []string{"web_0"}})
	wantError(t, err, forewarn.EINTERNAL, "internal error")
}

func TestUnavailable(t *testing.T) {
	h := newHarness(t, nil)
	h.eng.Close()
	status, _, body := h.raw(t, "POST", "/v1/events", `{"type":"Reboot","vms":["web_0"]}`)
	if want := `{"error":{"code":"unavailable","message":"the engine is shut down"}}` + "\n"; status != 503 || body != want {
		t.Errorf("got %d %s, want 503 %s", status, body, want)
	}
}

func TestUnreachable(t *testing.T) {
	c := admin.NewClient("http://127.0.0.1:1/", nil)
	_, err := c.Events(t.Context())
	if forewarn.ErrorCode(err) != forewarn.EUNAVAILABLE {
		t.Fatalf("error = %v, want code %s", err, forewarn.EUNAVAILABLE)
	}
	if msg, prefix := forewarn.ErrorMessage(err), "cannot reach the server at http://127.0.0.1:1: "; !strings.HasPrefix(msg, prefix) || !strings.Contains(msg, "refused") {
		t.Errorf("message = %q, want %q and the refused connection", msg, prefix)
	}
}

// ceilSecond returns t rounded up to a whole second, as the engine
// rounds NotBefore.
func ceilSecond(t time.Time) time.Time {
	if s := t.Truncate(time.Second); !s.Equal(t) {
		return s.Add(time.Second)
	}
	return t
}

// wantWave fails the test unless w has the given ID (when not empty),
// scope, type and status, and domains of the given update domains,
// statuses and VMs.
func wantWave(t *testing.T, w *engine.Wave, id, scope string, typ forewarn.EventType, status string, domains ...engine.WaveDomain) {
	t.Helper()
	if (id != "" && w.ID != id) || !idPattern.MatchString(w.ID) || w.Scope != scope || w.Type != typ || w.Status != status || w.Created.IsZero() {
		t.Errorf("wave %s: scope %q, type %s, status %s, created %v; want %s %q %s %s",
			w.ID, w.Scope, w.Type, w.Status, w.Created, id, scope, typ, status)
	}
	if len(w.Domains) != len(domains) {
		t.Fatalf("wave %s has %d domains %+v, want %d", w.ID, len(w.Domains), w.Domains, len(domains))
	}
	for i, d := range domains {
		got := w.Domains[i]
		if !idPattern.MatchString(got.Event) || got.UpdateDomain != d.UpdateDomain || got.Status != d.Status || !slices.Equal(got.VMs, d.VMs) {
			t.Errorf("wave %s domain %d = %+v, want update domain %d, %s, VMs %v", w.ID, i, got, d.UpdateDomain, d.Status, d.VMs)
		}
	}
}

func TestWaves(t *testing.T) {
	h := newHarness(t, nil)
	ctx := t.Context()

	status, ctype, body := h.raw(t, "GET", "/v1/maintenance", "")
	if want := `{"waves":[]}` + "\n"; status != 200 || ctype != "application/json" || body != want {
		t.Errorf("GET /v1/maintenance with no waves: %d %s %s, want 200 application/json %s", status, ctype, body, want)
	}

	// An availability set of two update domains: the first is Scheduled,
	// the second waits.
	web, err := h.client.StartWave(ctx, admin.WaveRequest{Scope: "web", Type: "reboot", Notice: "20m", Lasts: "3m"})
	if err != nil {
		t.Fatalf("StartWave: %v", err)
	}
	wantWave(t, web, "", "web", forewarn.Reboot, "running",
		engine.WaveDomain{UpdateDomain: 0, Status: forewarn.Scheduled, VMs: []string{"web_0"}},
		engine.WaveDomain{UpdateDomain: 1, Status: forewarn.Pending, VMs: []string{"web_1"}})
	first, err := h.client.Event(ctx, web.Domains[0].Event)
	if err != nil {
		t.Fatalf("Event: %v", err)
	}
	if first.Type != forewarn.Reboot || first.Source != forewarn.Platform || first.Wave != web.ID || first.Lasts != 3*time.Minute ||
		!first.NotBefore.Equal(ceilSecond(first.Created.Add(20*time.Minute))) || first.Description != "Platform maintenance of web, update domain 0" {
		t.Errorf("first domain's event = %+v, want a Platform Reboot of wave %s, 20m notice, lasting 3m", first, web.ID)
	}

	// A scale set of one update domain, over the raw API: 201 and the wave.
	status, ctype, body = h.raw(t, "POST", "/v1/maintenance", `{"scope":"ss","type":"Redeploy"}`)
	waves := h.eng.Waves()
	if len(waves) != 2 {
		t.Fatalf("engine has %d waves, want 2", len(waves))
	}
	ss := waves[1]
	want, _ := json.Marshal(ss)
	if status != 201 || ctype != "application/json" || body != string(want)+"\n" {
		t.Errorf("POST /v1/maintenance: %d %s %s\nwant 201 application/json %s", status, ctype, body, want)
	}
	wantWave(t, ss, "", "ss", forewarn.Redeploy, "running",
		engine.WaveDomain{UpdateDomain: 0, Status: forewarn.Scheduled, VMs: []string{"ss_0", "ss_1"}})
	if ev, _ := h.eng.Event(ss.Domains[0].Event); !ev.NotBefore.Equal(ceilSecond(ev.Created.Add(forewarn.Redeploy.MinNotice()))) || ev.Lasts != forewarn.Redeploy.DefaultLasts() {
		t.Errorf("default notice and lasts: NotBefore %v after Created %v, lasts %s", ev.NotBefore, ev.Created, ev.Lasts)
	}

	// Nobody listens on spot_0: its Platform event skips its notice.
	spot, err := h.client.StartWave(ctx, admin.WaveRequest{Scope: "spot", Type: "Freeze"})
	if err != nil {
		t.Fatalf("StartWave: %v", err)
	}
	wantWave(t, spot, "", "spot", forewarn.Freeze, "running",
		engine.WaveDomain{UpdateDomain: 0, Status: forewarn.Started, VMs: []string{"spot_0"}})

	list, err := h.client.Waves(ctx)
	if err != nil {
		t.Fatalf("Waves: %v", err)
	}
	sameJSON(t, list, h.eng.Waves())
	if len(list) != 3 || list[0].ID != web.ID || list[1].ID != ss.ID || list[2].ID != spot.ID {
		t.Errorf("Waves = %v, want web, ss and spot, oldest first", list)
	}
	status, _, body = h.raw(t, "GET", "/v1/maintenance", "")
	all, _ := json.Marshal(map[string]any{"waves": h.eng.Waves()})
	if status != 200 || body != string(all)+"\n" {
		t.Errorf("GET /v1/maintenance: %d %s\nwant 200 %s", status, body, all)
	}

	// The second domain is scheduled once the first completes, and the
	// wave is done once the second does.
	for i, id := range []string{web.Domains[0].Event, ""} {
		if i == 1 {
			list, _ = h.client.Waves(ctx)
			wantWave(t, list[0], web.ID, "web", forewarn.Reboot, "running",
				engine.WaveDomain{UpdateDomain: 0, Status: forewarn.Completed, VMs: []string{"web_0"}},
				engine.WaveDomain{UpdateDomain: 1, Status: forewarn.Scheduled, VMs: []string{"web_1"}})
			id = list[0].Domains[1].Event
		}
		if _, err := h.client.Start(ctx, id); err != nil {
			t.Fatalf("Start: %v", err)
		}
		if _, err := h.client.Complete(ctx, id); err != nil {
			t.Fatalf("Complete: %v", err)
		}
	}
	list, _ = h.client.Waves(ctx)
	wantWave(t, list[0], web.ID, "web", forewarn.Reboot, "done",
		engine.WaveDomain{UpdateDomain: 0, Status: forewarn.Completed, VMs: []string{"web_0"}},
		engine.WaveDomain{UpdateDomain: 1, Status: forewarn.Completed, VMs: []string{"web_1"}})
}

func TestWaveErrors(t *testing.T) {
	h := newHarness(t, nil)
	tests := []struct {
		name   string
		body   string
		status int
		code   string
		msg    string
	}{
		{"unknown scope", `{"scope":"nope","type":"Reboot"}`, 404, forewarn.ENOTFOUND,
			`no availability set, cloud service or scale set is named "nope"`},
		{"ambiguous scope", `{"scope":"dup","type":"Reboot"}`, 400, forewarn.EINVALID,
			`scope "dup" is ambiguous: it names more than one availability set, cloud service or scale set`},
		{"Terminate", `{"scope":"web","type":"Terminate"}`, 400, forewarn.EINVALID,
			`a maintenance wave is Freeze, Reboot or Redeploy, not "Terminate"`},
		{"Preempt", `{"scope":"web","type":"preempt"}`, 400, forewarn.EINVALID,
			`a maintenance wave is Freeze, Reboot or Redeploy, not "Preempt"`},
		{"unknown type", `{"scope":"web","type":"Boom"}`, 400, forewarn.EINVALID,
			`unknown event type "Boom" (want one of Freeze, Reboot, Redeploy, Preempt, Terminate, MIGRATE_ON_HOST_MAINTENANCE, TERMINATE_ON_HOST_MAINTENANCE, instance-reboot, system-reboot, system-maintenance, instance-retirement, instance-stop)`},
		{"missing scope", `{"type":"Reboot"}`, 400, forewarn.EINVALID, "missing scope"},
		{"missing type", `{"scope":"web"}`, 400, forewarn.EINVALID, "missing wave type"},
		{"notice below minimum", `{"scope":"web","type":"Reboot","notice":"1m"}`, 400, forewarn.EINVALID,
			"notice 1m0s is below the 15m0s minimum for Reboot (the server's --allow-short-notice lifts this)"},
		{"negative lasts", `{"scope":"web","type":"Reboot","lasts":"-1m"}`, 400, forewarn.EINVALID,
			"notice and lasts must not be negative"},
		{"bad notice", `{"scope":"web","type":"Reboot","notice":"soon"}`, 400, forewarn.EINVALID,
			`invalid notice "soon": want a duration such as 15m or 90s`},
		{"bad lasts", `{"scope":"web","type":"Reboot","lasts":"5"}`, 400, forewarn.EINVALID,
			`invalid lasts "5": want a duration such as 15m or 90s`},
		{"unknown field", `{"scope":"web","type":"Reboot","domains":[0]}`, 400, forewarn.EINVALID, `unknown field "domains"`},
		{"empty body", ``, 400, forewarn.EINVALID, "missing request body: want a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, ctype, body := h.raw(t, "POST", "/v1/maintenance", tt.body)
			want, _ := json.Marshal(map[string]any{"error": map[string]string{"code": tt.code, "message": tt.msg}})
			if status != tt.status || ctype != "application/json" || body != string(want)+"\n" {
				t.Errorf("POST /v1/maintenance %s:\ngot  %d %s %s\nwant %d application/json %s", tt.body, status, ctype, body, tt.status, want)
			}
			// The client gets the same refusal for every request it can send.
			var req admin.WaveRequest
			dec := json.NewDecoder(strings.NewReader(tt.body))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&req); err != nil {
				return
			}
			w, err := h.client.StartWave(t.Context(), req)
			if w != nil {
				t.Errorf("StartWave returned %+v", w)
			}
			wantError(t, err, tt.code, tt.msg)
		})
	}
	if n := len(h.eng.Events()); n != 0 {
		t.Errorf("refused waves created %d events", n)
	}
	status, _, body := h.raw(t, "DELETE", "/v1/maintenance", "")
	if want := `{"error":{"code":"invalid","message":"method DELETE is not allowed for /v1/maintenance (allowed: GET, HEAD, POST)"}}` + "\n"; status != 405 || body != want {
		t.Errorf("DELETE /v1/maintenance: %d %s, want 405 %s", status, body, want)
	}
}

func TestDelete(t *testing.T) {
	h := newHarness(t, nil)
	ctx := t.Context()

	// A scale set VM gets a User Terminate with the scale set's
	// notBeforeTimeout (by default 5m).
	status, ctype, body := h.raw(t, "POST", "/v1/vms/ss_0/delete", "")
	evs := h.eng.Events()
	if len(evs) != 1 {
		t.Fatalf("delete created %d events, want 1", len(evs))
	}
	term := evs[0]
	want, _ := json.Marshal(term)
	if status != 201 || ctype != "application/json" || body != string(want)+"\n" {
		t.Errorf("POST /v1/vms/ss_0/delete: %d %s %s\nwant 201 application/json %s", status, ctype, body, want)
	}
	if term.Type != forewarn.Terminate || term.Source != forewarn.User || term.Status != forewarn.Scheduled ||
		!slices.Equal(term.Resources, []string{"ss_0"}) || !term.NotBefore.Equal(ceilSecond(term.Created.Add(forewarn.DefaultTerminateTimeout))) {
		t.Errorf("delete created %+v, want a Scheduled User Terminate of ss_0 with 5m notice", term)
	}

	// A Spot VM is gone at once.
	spot, err := h.client.Delete(ctx, "spot_0")
	if err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if spot.Type != forewarn.Terminate || spot.Status != forewarn.Completed || !slices.Equal(spot.Resources, []string{"spot_0"}) ||
		spot.StartedAt.IsZero() || spot.EndedAt.IsZero() {
		t.Errorf("Spot delete created %+v, want a Completed Terminate of spot_0", spot)
	}
	stored, _ := h.eng.Event(spot.ID)
	sameJSON(t, spot, stored)
	vms, _ := h.client.VMs(ctx)
	for _, v := range vms {
		if want := map[bool]string{true: "deleted", false: "running"}[v.Name == "spot_0"]; v.State != want {
			t.Errorf("VM %s is %s, want %s", v.Name, v.State, want)
		}
	}

	tests := []struct {
		name   string
		vm     string
		status int
		code   string
		msg    string
	}{
		{"twice", "ss_0", 409, forewarn.ECONFLICT, `VM "ss_0" is already deleted or being deleted`},
		{"Spot twice", "spot_0", 409, forewarn.ECONFLICT, `VM "spot_0" is already deleted or being deleted`},
		{"availability set VM", "web_0", 400, forewarn.EINVALID, `VM "web_0" is not in a scale set; vm delete raises a scale set Terminate`},
		{"standalone VM", "db_0", 400, forewarn.EINVALID, `VM "db_0" is not in a scale set; vm delete raises a scale set Terminate`},
		{"unknown VM", "nope", 404, forewarn.ENOTFOUND, `unknown VM "nope"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, body := h.raw(t, "POST", "/v1/vms/"+tt.vm+"/delete", "")
			want, _ := json.Marshal(map[string]any{"error": map[string]string{"code": tt.code, "message": tt.msg}})
			if status != tt.status || body != string(want)+"\n" {
				t.Errorf("POST /v1/vms/%s/delete:\ngot  %d %s\nwant %d %s", tt.vm, status, body, tt.status, want)
			}
			ev, err := h.client.Delete(ctx, tt.vm)
			if ev != nil {
				t.Errorf("Delete returned %+v", ev)
			}
			wantError(t, err, tt.code, tt.msg)
		})
	}
	if n := len(h.eng.Events()); n != 2 {
		t.Errorf("refused deletes left %d events, want the 2 created", n)
	}

	// A deleted VM takes no more maintenance.
	_, err = h.client.StartWave(ctx, admin.WaveRequest{Scope: "spot", Type: "Reboot"})
	wantError(t, err, forewarn.EINVALID, `scope "spot" has no Azure VMs left`)
	_, err = h.client.Degrade(ctx, "spot_0", 0)
	wantError(t, err, forewarn.EINVALID, `VM "spot_0" has been deleted`)
}

func TestDegrade(t *testing.T) {
	h := newHarness(t, nil)
	ctx := t.Context()

	// By default, 7 days of notice.
	ev, err := h.client.Degrade(ctx, "db_0", 0)
	if err != nil {
		t.Fatalf("Degrade: %v", err)
	}
	if ev.Type != forewarn.Redeploy || ev.Source != forewarn.Platform || ev.Status != forewarn.Scheduled ||
		!slices.Equal(ev.Resources, []string{"db_0"}) || ev.Description != "Host hardware is predicted to fail; the VM will be redeployed to healthy hardware" {
		t.Errorf("degrade created %+v, want a Scheduled Platform Redeploy of db_0 for predicted hardware failure", ev)
	}
	if want := ceilSecond(ev.Created.Add(168 * time.Hour)); !ev.NotBefore.Equal(want) {
		t.Errorf("NotBefore = %v, want %v: 168h after %v, rounded up to the second", ev.NotBefore, want, ev.Created)
	}
	stored, _ := h.eng.Event(ev.ID)
	sameJSON(t, ev, stored)

	// A notice in the body.
	status, ctype, body := h.raw(t, "POST", "/v1/vms/web_1/degrade", `{"notice":"48h"}`)
	evs := h.eng.Events()
	if len(evs) != 2 {
		t.Fatalf("%d events, want 2", len(evs))
	}
	got := evs[1]
	want, _ := json.Marshal(got)
	if status != 201 || ctype != "application/json" || body != string(want)+"\n" {
		t.Errorf("POST /v1/vms/web_1/degrade: %d %s %s\nwant 201 application/json %s", status, ctype, body, want)
	}
	if !slices.Equal(got.Resources, []string{"web_1"}) || !got.NotBefore.Equal(ceilSecond(got.Created.Add(48*time.Hour))) {
		t.Errorf("degrade with notice 48h: resources %v, NotBefore %v after Created %v", got.Resources, got.NotBefore, got.Created)
	}

	tests := []struct {
		name, vm, body string
		status         int
		code, msg      string
	}{
		{"unknown VM", "nope", "", 404, forewarn.ENOTFOUND, `unknown VM "nope"`},
		{"GCE VM", "gce_0", "", 400, forewarn.EINVALID, `VM "gce_0" is a Compute Engine VM; Redeploy events are not for Compute Engine VMs`},
		{"notice below minimum", "db_0", `{"notice":"1m"}`, 400, forewarn.EINVALID,
			"notice 1m0s is below the 10m0s minimum for Redeploy (the server's --allow-short-notice lifts this)"},
		{"bad notice", "db_0", `{"notice":"next week"}`, 400, forewarn.EINVALID,
			`invalid notice "next week": want a duration such as 15m or 90s`},
		{"unknown field", "db_0", `{"notice":"48h","reason":"fan"}`, 400, forewarn.EINVALID, `unknown field "reason"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, body := h.raw(t, "POST", "/v1/vms/"+tt.vm+"/degrade", tt.body)
			want, _ := json.Marshal(map[string]any{"error": map[string]string{"code": tt.code, "message": tt.msg}})
			if status != tt.status || body != string(want)+"\n" {
				t.Errorf("POST /v1/vms/%s/degrade %s:\ngot  %d %s\nwant %d %s", tt.vm, tt.body, status, body, tt.status, want)
			}
		})
	}
	_, err = h.client.Degrade(ctx, "nope", 0)
	wantError(t, err, forewarn.ENOTFOUND, `unknown VM "nope"`)
	_, err = h.client.Degrade(ctx, "db_0", time.Minute)
	wantError(t, err, forewarn.EINVALID, "notice 1m0s is below the 10m0s minimum for Redeploy (the server's --allow-short-notice lifts this)")
	if n := len(h.eng.Events()); n != 2 {
		t.Errorf("refused degrades left %d events, want the 2 created", n)
	}
}

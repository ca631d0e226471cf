package admin_test

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// twoHosts serves the operator API of a fleet of two VMs, a on host hv1
// and b on hv2.
func twoHosts(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(fleetAdmin(t, `
vms:
  - {name: a, ip: 198.18.0.2, host: hv1, provider: azure}
  - {name: b, ip: 198.18.0.3, host: hv2, provider: azure}
`))
	t.Cleanup(srv.Close)
	return srv
}

// TestSessionRoutes: the statuses and error bodies of the session and
// host routes. The VMs never called, so a host's events start at once.
func TestSessionRoutes(t *testing.T) {
	srv := twoHosts(t)
	const json = "application/json"
	for _, c := range []struct {
		method, path, body string
		status             int
		want               string // the body's start
	}{
		{"POST", "/v1/sessions", `{"hosts":["hv1"],"allHosts":true}`, 400, `{"error":{"code":"invalid","message":"give hosts or allHosts, not both"}}`},
		{"POST", "/v1/sessions", `{"hosts":["hv1"],"maxUnavailable":{"zone":"0"}}`, 400, `{"error":{"code":"invalid","message":"max unavailable per zone: \"0\" is neither a count of at least 1 nor a percent from 1% to 100%"}}`},
		{"POST", "/v1/sessions", `{"hosts":["hv1"],"delay":"soon"}`, 400, `{"error":{"code":"invalid","message":"invalid delay \"soon\": want a duration such as 15m or 90s"}}`},
		{"POST", "/v1/sessions", `{"hosts":["hv1"],"webhooks":["ftp://x"]}`, 400, `{"error":{"code":"invalid","message":"webhook \"ftp://x\" is not an absolute http:// or https:// URL"}}`},
		{"POST", "/v1/sessions", `{"hosts":["hv1"],"webhooks":["https://hooks.example/x"]}`, 400, `{"error":{"code":"invalid","message":"this server signs no webhooks (start it with --webhook-secret-file): a session's webhooks would never be sent"}}`},
		{"POST", "/v1/sessions", `{"hosts":["hv3"]}`, 404, `{"error":{"code":"not_found","message":"no VM is on host \"hv3\""}}`},
		{"POST", "/v1/sessions", `{"hosts":["hv1"],"maxHosts":2,"delay":"1m"}`, 201, `{"id":"`},
		{"POST", "/v1/sessions", `{"allHosts":true}`, 409, `{"error":{"code":"conflict","message":"host \"hv1\" is in session `},
		{"GET", "/v1/hosts/hv1/wait?state=InMaintenance&timeout=5s", "", 200, `{"name":"hv1","vms":["a"],"session":"`},
		{"GET", "/v1/hosts/hv2/wait?state=Ready&timeout=50ms", "", 504, `{"error":{"code":"unavailable","message":"host hv2 is in no session, not Ready, after 50ms"}}`},
		{"GET", "/v1/hosts/hv1/wait?state=Ready&timeout=6m", "", 400, `{"error":{"code":"invalid","message":"timeout 6m: want more than 0s and at most 5m0s (wait longer by asking again)"}}`},
		{"POST", "/v1/hosts/hv2/done", "", 404, `{"error":{"code":"not_found","message":"host \"hv2\" is in no session"}}`},
		{"POST", "/v1/hosts/hv1/fail", `{}`, 400, `{"error":{"code":"invalid","message":"give a reason for the failure"}}`},
		{"POST", "/v1/hosts/hv1/done", "", 200, `{"name":"hv1","vms":["a"],"session":"`},
		{"POST", "/v1/sessions/nope/pause", "", 404, `{"error":{"code":"not_found","message":"no session \"nope\""}}`},
	} {
		status, _, body := invCall(t, srv, c.method, c.path, json, c.body)
		if status != c.status || !strings.HasPrefix(body, c.want) {
			t.Errorf("%s %s %s: %d %s\nwant %d %s", c.method, c.path, c.body, status, body, c.status, c.want)
		}
	}
	// A host left Pending by a cancelled session will never be Ready.
	status, _, body := invCall(t, srv, "POST", "/v1/sessions", json, `{"hosts":["hv1","hv2"]}`)
	id, _, _ := strings.Cut(strings.TrimPrefix(body, `{"id":"`), `"`)
	if status != 201 {
		t.Fatalf("a second session: %d %s", status, body)
	}
	if status, _, body = invCall(t, srv, "POST", "/v1/sessions/"+id+"/cancel", "", ""); status != 200 || !strings.Contains(body, `"state":"Cancelled"`) {
		t.Fatalf("cancel: %d %s", status, body)
	}
	status, _, body = invCall(t, srv, "GET", "/v1/hosts/hv2/wait?state=Ready&timeout=5s", "", "")
	if want := `{"error":{"code":"conflict","message":"host hv2 will not be Ready: session ` + id + ` ended before it started"}}`; status != 409 || !strings.HasPrefix(body, want) {
		t.Errorf("wait for a host its cancelled session never started: %d %s\nwant 409 %s", status, body, want)
	}
	if status, _, body = invCall(t, srv, "POST", "/v1/hosts/hv1/done", "", ""); status != 200 {
		t.Errorf("done of the cancelled session's host in maintenance: %d %s", status, body)
	}
	status, _, body = invCall(t, srv, "GET", "/v1/sessions", "", "")
	if status != 200 || !strings.Contains(body, `"state":"Done"`) || !strings.Contains(body, `"maxHosts":2,"delay":"1m0s","action":"Reboot"`) {
		t.Errorf("GET /v1/sessions: %d %s", status, body)
	}
}

// TestHostGoneFromFleet: a host whose VMs all left the fleet while it
// was InMaintenance is still its session's: done, the wait and GET
// answer it, with no VMs, as they would with its VMs still there.
func TestHostGoneFromFleet(t *testing.T) {
	srv := twoHosts(t)
	status, _, body := invCall(t, srv, "POST", "/v1/sessions", "application/json", `{"hosts":["hv1"]}`)
	if status != 201 {
		t.Fatalf("create: %d %s", status, body)
	}
	id, _, _ := strings.Cut(strings.TrimPrefix(body, `{"id":"`), `"`)
	if status, _, body = invCall(t, srv, "GET", "/v1/hosts/hv1/wait?state=InMaintenance&timeout=5s", "", ""); status != 200 {
		t.Fatalf("wait for InMaintenance: %d %s", status, body)
	}
	if status, _, body = invCall(t, srv, "DELETE", "/v1/vms/a", "", ""); status != 200 {
		t.Fatalf("DELETE a: %d %s", status, body)
	}
	done := `{"name":"hv1","vms":[],"session":"` + id + `","state":"Done"}` + "\n"
	for _, c := range []struct{ method, path string }{
		{"POST", "/v1/hosts/hv1/done"},
		{"GET", "/v1/hosts/hv1/wait?state=Done&timeout=5s"},
		{"GET", "/v1/hosts/hv1"},
	} {
		if status, _, body = invCall(t, srv, c.method, c.path, "", ""); status != 200 || body != done {
			t.Errorf("%s %s: %d %s\nwant 200 %s", c.method, c.path, status, body, done)
		}
	}
	if status, _, body = invCall(t, srv, "GET", "/v1/sessions/"+id, "", ""); status != 200 || !strings.Contains(body, `"state":"Done"`) {
		t.Errorf("GET the session: %d %s", status, body)
	}
}

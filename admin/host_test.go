package admin_test

import (
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/engine"
)

// TestInventoryHosts: a VM may name its host; PUT and PATCH set and
// move it, the definitions and the export carry it, a bad one is
// refused with the fleet file's message, and GET /v1/hosts and
// /v1/hosts/{name} follow every change, byte for byte.
func TestInventoryHosts(t *testing.T) {
	srv := inventoryServer(t)
	const json, patch = "application/json", "application/merge-patch+json"
	hosts := func(want string) {
		t.Helper()
		st, _, body := invCall(t, srv, "GET", "/v1/hosts", "", "")
		if st != 200 || body != want+"\n" {
			t.Errorf("GET /v1/hosts: %d %s\nwant 200 %s", st, body, want)
		}
	}
	hosts(`{"hosts":[]}`)
	for _, c := range []struct {
		name, method, path, ctype, body string
		status                          int
		want                            string
	}{
		{"put web_2 on hv-a", "PUT", "/v1/vms/web_2", json, `{"ip":"198.18.0.4","host":"hv-a"}`, 201,
			`{"name":"web_2","revision":2,"created":true,"definition":{"name":"web_2","ip":"198.18.0.4","host":"hv-a","provider":"azure"}}`},
		{"patch web_0 onto hv-a", "PATCH", "/v1/vms/web_0", patch, `{"host":"hv-a"}`, 200,
			`{"name":"web_0","revision":3,"definition":{"name":"web_0","ip":"198.18.0.2","host":"hv-a","provider":"azure","availabilitySet":"web"}}`},
		{"put a bad host", "PUT", "/v1/vms/web_3", json, `{"ip":"198.18.0.5","host":"hv a"}`, 400,
			`{"error":{"code":"invalid","message":"VM \"web_3\": host \"hv a\" is not a host name: 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit"}}`},
		{"patch a bad host", "PATCH", "/v1/vms/web_0", patch, `{"host":"hv/b"}`, 400,
			`{"error":{"code":"invalid","message":"VM \"web_0\": host \"hv/b\" is not a host name: 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit"}}`},
		{"put web_1 on hv-b", "PUT", "/v1/vms/web_1", json, `{"ip":"198.18.0.3","availabilitySet":"web","updateDomain":1,"host":"hv-b"}`, 200,
			`{"name":"web_1","revision":4,"definition":{"name":"web_1","ip":"198.18.0.3","host":"hv-b","provider":"azure","availabilitySet":"web","updateDomain":1}}`},
	} {
		st, _, body := invCall(t, srv, c.method, c.path, c.ctype, c.body)
		if body = strings.TrimSuffix(body, "\n"); st != c.status || body != c.want {
			t.Errorf("%s: %d %s\nwant %d %s", c.name, st, body, c.status, c.want)
		}
	}
	hosts(`{"hosts":[{"name":"hv-a","vms":["web_0","web_2"]},{"name":"hv-b","vms":["web_1"]}]}`)
	for _, c := range []struct {
		path   string
		status int
		want   string
	}{
		{"/v1/hosts/hv-a", 200, `{"name":"hv-a","vms":["web_0","web_2"]}`},
		{"/v1/hosts/hv-b", 200, `{"name":"hv-b","vms":["web_1"]}`},
		{"/v1/hosts/hv-c", 404, `{"error":{"code":"not_found","message":"no host named \"hv-c\""}}`},
	} {
		if st, _, body := invCall(t, srv, "GET", c.path, "", ""); st != c.status || body != c.want+"\n" {
			t.Errorf("GET %s: %d %s\nwant %d %s", c.path, st, body, c.status, c.want)
		}
	}
	if st, _, body := invCall(t, srv, "GET", "/v1/vms/web_2", "", ""); st != 200 || !strings.HasPrefix(body, `{"vm":{"name":"web_2","ip":"198.18.0.4","host":"hv-a","provider":"azure",`) {
		t.Errorf("GET /v1/vms/web_2: %d %s", st, body)
	}

	// Moves: web_0 to hv-b, web_2 off every host (hv-a goes), web_1
	// removed.
	for _, c := range []struct{ method, path, ctype, body string }{
		{"PATCH", "/v1/vms/web_0", patch, `{"host":"hv-b"}`},
		{"PATCH", "/v1/vms/web_2", patch, `{"host":null}`},
	} {
		if st, _, body := invCall(t, srv, c.method, c.path, c.ctype, c.body); st != 200 {
			t.Fatalf("%s %s %s: %d %s", c.method, c.path, c.body, st, body)
		}
	}
	hosts(`{"hosts":[{"name":"hv-b","vms":["web_0","web_1"]}]}`)
	st, _, export := invCall(t, srv, "GET", "/v1/fleet", "", "")
	want := "vms:\n" +
		"  - {name: web_0, ip: 198.18.0.2, host: hv-b, provider: azure, availabilitySet: web}\n" +
		"  - {name: web_1, ip: 198.18.0.3, host: hv-b, provider: azure, availabilitySet: web, updateDomain: 1}\n" +
		"  - {name: web_2, ip: 198.18.0.4, provider: azure}\n"
	if st != 200 || export != want {
		t.Fatalf("GET /v1/fleet: %d\n%s\nwant\n%s", st, export, want)
	}
	moved := strings.Replace(export, "host: hv-b", "host: hv-c", 1)
	if st, _, body := invCall(t, srv, "POST", "/v1/fleet/apply?dryRun=true", "application/yaml", moved); st != 200 ||
		body != `{"revision":6,"dryRun":true,"vms":{"changed":[{"name":"web_0","keys":["host"]}]},"scaleSets":{}}`+"\n" {
		t.Fatalf("a dry run moving web_0 to hv-c: %d %s", st, body)
	}
	if st, _, body := invCall(t, srv, "DELETE", "/v1/vms/web_1", "", ""); st != 200 {
		t.Fatalf("DELETE web_1: %d %s", st, body)
	}
	hosts(`{"hosts":[{"name":"hv-b","vms":["web_0"]}]}`)
}

// TestHostsClient drives GET /v1/hosts and /v1/hosts/{name} through the
// Go client, behind the token like every other route.
func TestHostsClient(t *testing.T) {
	s := fleetAdmin(t, "vms:\n  - {name: b, ip: 198.18.1.2, host: hv1}\n  - {name: a, ip: 198.18.1.3, host: hv1}\n  - {name: c, ip: 198.18.1.4, host: hv0}\n  - {name: d, ip: 198.18.1.5}\n")
	s.Token = "sesame"
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	c := admin.NewClient(srv.URL, srv.Client())

	if _, err := c.Hosts(t.Context()); forewarn.ErrorCode(err) != forewarn.EUNAUTHORIZED {
		t.Fatalf("Hosts without the token: %v", err)
	}
	c.Token = "sesame"
	hs, err := c.Hosts(t.Context())
	if want := []engine.HostInfo{{Name: "hv0", VMs: []string{"c"}}, {Name: "hv1", VMs: []string{"a", "b"}}}; err != nil || !reflect.DeepEqual(hs, want) {
		t.Errorf("Hosts = %v, %v; want %v", hs, err, want)
	}
	h, err := c.Host(t.Context(), "hv1")
	if err != nil || h.Name != "hv1" || !reflect.DeepEqual(h.VMs, []string{"a", "b"}) {
		t.Errorf("Host(hv1) = %+v, %v", h, err)
	}
	if _, err := c.Host(t.Context(), "hv 2/x"); forewarn.ErrorCode(err) != forewarn.ENOTFOUND || forewarn.ErrorMessage(err) != `no host named "hv 2/x"` {
		t.Errorf("Host of an unknown host: %v", err)
	}
}

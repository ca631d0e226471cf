package admin_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/fleetfile"
	"github.com/forewarn/forewarn/mem"
)

// inventoryServer serves the operator API of a fleet parsed from a fleet
// file, whose inventory exports.
func inventoryServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(fleetAdmin(t, "vms:\n  - {name: web_0, ip: 198.18.0.2, availabilitySet: web}\n  - {name: web_1, ip: 198.18.0.3, availabilitySet: web, updateDomain: 1}\n"))
	t.Cleanup(srv.Close)
	return srv
}

// fleetAdmin returns the operator API of an engine on a memory store
// whose inventory is the fleet file doc.
func fleetAdmin(t *testing.T, doc string) *admin.Server {
	t.Helper()
	f, err := fleetfile.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: f})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	return admin.NewServer(eng, slog.New(slog.DiscardHandler))
}

// call sends body as contentType with the headers hdr (pairs) and
// returns the status, the ETag and the body.
func invCall(t *testing.T, srv *httptest.Server, method, path, contentType, body string, hdr ...string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("ETag"), string(b)
}

// TestInventoryRoutes checks each inventory route's answers, exactly.
func TestInventoryRoutes(t *testing.T) {
	srv := inventoryServer(t)
	const json, yaml, patch = "application/json", "application/yaml", "application/merge-patch+json"

	st, tag, body := invCall(t, srv, "GET", "/v1/fleet", "", "")
	wantFleet := "vms:\n" +
		"  - {name: web_0, ip: 198.18.0.2, provider: azure, availabilitySet: web}\n" +
		"  - {name: web_1, ip: 198.18.0.3, provider: azure, availabilitySet: web, updateDomain: 1}\n"
	if st != 200 || tag != `"1"` || body != wantFleet {
		t.Fatalf("GET /v1/fleet: %d %s\n%s", st, tag, body)
	}

	for _, c := range []struct {
		name, method, path, ctype, body string
		hdr                             []string
		status                          int
		want                            string
	}{
		{"put a new VM", "PUT", "/v1/vms/web_2", json, `{"ip":"198.18.0.4","availabilitySet":"web"}`, nil, 201,
			`{"name":"web_2","revision":2,"created":true,"definition":{"name":"web_2","ip":"198.18.0.4","provider":"azure","availabilitySet":"web"}}`},
		{"put the same again", "PUT", "/v1/vms/web_2", json, `{"ip":"198.18.0.4","availabilitySet":"web"}`, nil, 200,
			`{"name":"web_2","revision":2,"definition":{"name":"web_2","ip":"198.18.0.4","provider":"azure","availabilitySet":"web"}}`},
		{"put an unknown key", "PUT", "/v1/vms/web_3", json, `{"ip":"198.18.0.5","colour":"blue"}`, nil, 400, ``},
		{"put a taken address", "PUT", "/v1/vms/web_3", json, `{"ip":"198.18.0.2"}`, nil, 400,
			`{"error":{"code":"invalid","message":"VM \"web_3\": ip 198.18.0.2 is already used by web_0"}}`},
		{"put another name", "PUT", "/v1/vms/web_3", json, `{"name":"web_4","ip":"198.18.0.5"}`, nil, 400,
			`{"error":{"code":"invalid","message":"VM \"web_3\": name \"web_4\" does not match the VM's name \"web_3\""}}`},
		{"put as text", "PUT", "/v1/vms/web_3", "text/plain", `{"ip":"198.18.0.5"}`, nil, 415, ``},
		{"patch", "PATCH", "/v1/vms/web_2", patch, `{"updateDomain":2}`, nil, 200,
			`{"name":"web_2","revision":3,"definition":{"name":"web_2","ip":"198.18.0.4","provider":"azure","availabilitySet":"web","updateDomain":2}}`},
		{"patch back to the default", "PATCH", "/v1/vms/web_2", patch, `{"updateDomain":null}`, nil, 200,
			`{"name":"web_2","revision":4,"definition":{"name":"web_2","ip":"198.18.0.4","provider":"azure","availabilitySet":"web"}}`},
		{"patch an unknown VM", "PATCH", "/v1/vms/nope", patch, `{"updateDomain":2}`, nil, 404,
			`{"error":{"code":"not_found","message":"no VM named \"nope\""}}`},
		{"put with a stale If-Match", "PUT", "/v1/vms/web_2", json, `{"ip":"198.18.0.9"}`, []string{"If-Match", `"3"`}, 412,
			`{"error":{"code":"precondition_failed","message":"the inventory is at revision 4, not 3: it changed since; read it again"}}`},
		{"a bad If-Match", "DELETE", "/v1/vms/web_2", "", ``, []string{"If-Match", `soon`}, 400,
			`{"error":{"code":"invalid","message":"If-Match \"soon\" is not an inventory revision such as \"12\" (GET /v1/fleet answers it as its ETag)"}}`},
		{"delete with the current If-Match", "DELETE", "/v1/vms/web_2", "", ``, []string{"If-Match", `"4"`}, 200,
			`{"name":"web_2","revision":5,"definition":null,"removed":true}`},
		{"delete an unknown VM", "DELETE", "/v1/vms/web_2", "", ``, nil, 404,
			`{"error":{"code":"not_found","message":"no VM named \"web_2\""}}`},
		{"apply, dry run", "POST", "/v1/fleet/apply?dryRun=true&prune=true", yaml,
			"vms:\n  - {name: web_0, ip: 198.18.0.2, availabilitySet: db}\n  - {name: db_1, ip: 198.18.0.7}\n", nil, 200,
			`{"revision":5,"dryRun":true,"vms":{"added":["db_1"],"changed":[{"name":"web_0","keys":["availabilitySet"]}],"removed":["web_1"]},"scaleSets":{}}`},
		{"apply taking an address", "POST", "/v1/fleet/apply", yaml, "vms:\n  - {name: db_1, ip: 198.18.0.3}\n", nil, 400,
			`{"error":{"code":"invalid","message":"vms[0] (db_1): ip 198.18.0.3 is already used by web_1"}}`},
		{"apply a bad dryRun", "POST", "/v1/fleet/apply?dryRun=maybe", yaml, "vms:\n  - {name: db_1, ip: 198.18.0.7}\n", nil, 400,
			`{"error":{"code":"invalid","message":"dryRun=\"maybe\": want true or false"}}`},
		{"apply", "POST", "/v1/fleet/apply", json, `{"vms":[{"name":"db_1","ip":"198.18.0.7"}]}`, nil, 200,
			`{"revision":6,"vms":{"added":["db_1"]},"scaleSets":{}}`},
	} {
		st, _, body := invCall(t, srv, c.method, c.path, c.ctype, c.body, c.hdr...)
		body = strings.TrimSuffix(body, "\n")
		if st != c.status || c.want != "" && body != c.want {
			t.Errorf("%s: %d %s\nwant %d %s", c.name, st, body, c.status, c.want)
		}
		if c.want == "" && !strings.Contains(body, `"code":"invalid"`) {
			t.Errorf("%s: %s, want a JSON error", c.name, body)
		}
	}
	st, tag, body = invCall(t, srv, "GET", "/v1/fleet", "", "")
	if want := wantFleet + "  - {name: db_1, ip: 198.18.0.7, provider: azure}\n"; st != 200 || tag != `"6"` || body != want {
		t.Fatalf("GET /v1/fleet at the end: %d %s\n%s\nwant\n%s", st, tag, body, want)
	}
	// The export applies back with no change.
	if st, _, body := invCall(t, srv, "POST", "/v1/fleet/apply?prune=true", yaml, wantFleet+"  - {name: db_1, ip: 198.18.0.7, provider: azure}\n"); st != 200 || body != `{"revision":6,"vms":{},"scaleSets":{}}`+"\n" {
		t.Fatalf("applying the export back: %d %s", st, body)
	}
}

// TestOneAnyVMPerProvider: as in a fleet file, one VM of a provider may
// answer every caller (ip: any); a second is refused, and the export
// stays one that apply takes.
func TestOneAnyVMPerProvider(t *testing.T) {
	srv := inventoryServer(t)
	if st, _, body := invCall(t, srv, "PUT", "/v1/vms/any_1", "application/json", `{"ip":"any"}`); st != 201 {
		t.Fatalf("the first ip: any VM: %d %s", st, body)
	}
	st, _, body := invCall(t, srv, "PUT", "/v1/vms/any_2", "application/json", `{"ip":"any"}`)
	if want := `{"error":{"code":"invalid","message":"VM \"any_2\": ip any is already used by any_1"}}` + "\n"; st != 400 || body != want {
		t.Fatalf("a second ip: any VM: %d %s, want 400 %s", st, body, want)
	}
	if st, _, body := invCall(t, srv, "PUT", "/v1/vms/any_gce", "application/json", `{"ip":"any","provider":"gce"}`); st != 201 {
		t.Fatalf("an ip: any VM of another provider: %d %s", st, body)
	}
	if st, _, body := invCall(t, srv, "GET", "/v1/fleet", "", ""); st != 200 || strings.Count(body, "ip: any") != 2 {
		t.Fatalf("GET /v1/fleet: %d\n%s", st, body)
	}
}

// TestOneAnyVMAtOnce: of PUTs of different ip: any VMs of one provider
// made at once, exactly one is taken, and the fleet still exports.
func TestOneAnyVMAtOnce(t *testing.T) {
	srv := inventoryServer(t)
	const n = 8
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			codes[i], _, _ = invCall(t, srv, "PUT", fmt.Sprintf("/v1/vms/any_%d", i), "application/json", `{"ip":"any"}`)
		})
	}
	wg.Wait()
	created, refused := 0, 0
	for _, c := range codes {
		switch c {
		case 201:
			created++
		case 400:
			refused++
		}
	}
	if created != 1 || refused != n-1 {
		t.Fatalf("%d PUTs at once answered %v: want one 201 and the rest 400", n, codes)
	}
	if st, _, body := invCall(t, srv, "GET", "/v1/fleet", "", ""); st != 200 || strings.Count(body, "ip: any") != 1 {
		t.Fatalf("GET /v1/fleet: %d\n%s", st, body)
	}
}

// TestInventoryNetworks: a VM may name its network; it may share an
// address (or ip: any, per provider) with a VM of another network, not
// of its own, and the export writes the network and applies back.
func TestInventoryNetworks(t *testing.T) {
	srv := inventoryServer(t)
	const json = "application/json"
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		want                     string
	}{
		{"put web_0's address on blue", "PUT", "/v1/vms/blue_0", `{"ip":"198.18.0.2","network":"blue"}`, 201,
			`{"name":"blue_0","revision":2,"created":true,"definition":{"name":"blue_0","ip":"198.18.0.2","network":"blue","provider":"azure"}}`},
		{"put it again on blue", "PUT", "/v1/vms/blue_1", `{"ip":"198.18.0.2","network":"blue"}`, 400,
			`{"error":{"code":"invalid","message":"VM \"blue_1\": ip 198.18.0.2 on network blue is already used by blue_0"}}`},
		{"put a bad network", "PUT", "/v1/vms/blue_1", `{"ip":"198.18.0.2","network":"blue green"}`, 400,
			`{"error":{"code":"invalid","message":"VM \"blue_1\": network \"blue green\" is not a network name: 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit"}}`},
		{"put ip any on blue", "PUT", "/v1/vms/any_blue", `{"ip":"any","network":"blue"}`, 201, ``},
		{"put ip any on the flat network", "PUT", "/v1/vms/any_0", `{"ip":"any"}`, 201, ``},
		{"put a second ip any on blue", "PUT", "/v1/vms/any_blue2", `{"ip":"any","network":"blue"}`, 400,
			`{"error":{"code":"invalid","message":"VM \"any_blue2\": ip any on network blue is already used by any_blue"}}`},
		{"patch blue_0 onto the flat network", "PATCH", "/v1/vms/blue_0", `{"network":null}`, 400,
			`{"error":{"code":"invalid","message":"VM \"blue_0\": ip 198.18.0.2 is already used by web_0"}}`},
		{"patch blue_0 onto red", "PATCH", "/v1/vms/blue_0", `{"network":"red"}`, 200,
			`{"name":"blue_0","revision":5,"definition":{"name":"blue_0","ip":"198.18.0.2","network":"red","provider":"azure"}}`},
	} {
		st, _, body := invCall(t, srv, c.method, c.path, json, c.body)
		body = strings.TrimSuffix(body, "\n")
		if st != c.status || c.want != "" && body != c.want {
			t.Errorf("%s: %d %s\nwant %d %s", c.name, st, body, c.status, c.want)
		}
	}
	st, _, export := invCall(t, srv, "GET", "/v1/fleet", "", "")
	want := "vms:\n" +
		"  - {name: web_0, ip: 198.18.0.2, provider: azure, availabilitySet: web}\n" +
		"  - {name: web_1, ip: 198.18.0.3, provider: azure, availabilitySet: web, updateDomain: 1}\n" +
		"  - {name: blue_0, ip: 198.18.0.2, network: red, provider: azure}\n" +
		"  - {name: any_blue, ip: any, network: blue, provider: azure}\n" +
		"  - {name: any_0, ip: any, provider: azure}\n"
	if st != 200 || export != want {
		t.Fatalf("GET /v1/fleet: %d\n%s\nwant\n%s", st, export, want)
	}
	if st, _, body := invCall(t, srv, "POST", "/v1/fleet/apply?prune=true", "application/yaml", export); st != 200 || body != `{"revision":5,"vms":{},"scaleSets":{}}`+"\n" {
		t.Fatalf("applying the export back: %d %s", st, body)
	}
	moved := strings.Replace(export, "network: red", "network: blue", 1)
	if st, _, body := invCall(t, srv, "POST", "/v1/fleet/apply?dryRun=true", "application/yaml", moved); st != 200 ||
		body != `{"revision":5,"dryRun":true,"vms":{"changed":[{"name":"blue_0","keys":["network"]}]},"scaleSets":{}}`+"\n" {
		t.Fatalf("a dry run moving blue_0 to blue: %d %s", st, body)
	}
}

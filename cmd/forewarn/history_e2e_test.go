package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/forewarn/forewarn/admin"
)

const historyFleet = `vms:
  - name: web_0
    ip: 127.0.0.2
  - name: gce_0
    ip: 127.0.0.6
    provider: gce
  - name: ec2_0
    ip: 127.0.0.7
    provider: aws
`

// vmGet makes one metadata request from VM ip and returns its status and
// body.
func vmGet(t *testing.T, s *server, ip, method, path string, header ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+s.metadata+path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := vmClient(ip).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// showJSON runs 'forewarn vm show NAME --json' against s.
func showJSON(t *testing.T, s *server, name string) admin.VMDetail {
	t.Helper()
	var d admin.VMDetail
	if err := json.Unmarshal([]byte(s.mustCLI(t, "vm", "show", name, "--json")), &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// brief is a history entry without its time and latency.
type brief struct {
	API, Method, Path, Version string
	Status                     int
	PollEnd                    string
	Approved                   string
}

func briefs(d admin.VMDetail) []brief {
	var out []brief
	for _, e := range d.History {
		if e.Time.IsZero() || e.Latency < 0 {
			panic("entry without a time or a latency")
		}
		out = append(out, brief{e.API, e.Method, e.Path, e.APIVersion, e.Status, e.PollEnd, strings.Join(e.Approved, ",")})
	}
	return out
}

// TestVMShow drives the real server's three metadata APIs from three VMs
// and checks what 'forewarn vm show' and GET /v1/vms/{name} report: each
// request newest first with its API, method, path, api-version, status,
// how a long-poll ended and what it approved, and the documents the VM
// sees now, byte for byte as the VM itself was answered.
func TestVMShow(t *testing.T) {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleet, []byte(historyFleet), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, filepath.Join(dir, "data"), fleet)

	// Azure: a read, a refused api-version, a Reboot approved.
	const se = "/metadata/scheduledevents"
	vmGet(t, s, "127.0.0.2", "GET", se+"?api-version=2020-07-01", "Metadata", "true")
	if code, _ := vmGet(t, s, "127.0.0.2", "GET", se+"?api-version=1999-01-01", "Metadata", "true"); code != 400 {
		t.Fatalf("bad api-version: %d, want 400", code)
	}
	id := strings.TrimSpace(s.mustCLI(t, "event", "create", "--type", "Reboot", "--vm", "web_0", "--notice", "10m"))
	if code, body := s.approve(t, "127.0.0.2", id); code != 200 {
		t.Fatalf("approval: %d %s", code, body)
	}
	d := showJSON(t, s, "web_0")
	want := []brief{
		{"azure", "POST", se, "2020-07-01", 200, "", id},
		{"azure", "GET", se, "1999-01-01", 400, "", ""},
		{"azure", "GET", se, "2020-07-01", 200, "", ""},
	}
	if got := briefs(d); !equalBriefs(got, want) {
		t.Fatalf("web_0 history:\n got %+v\nwant %+v", got, want)
	}
	if !d.History[0].Time.After(d.History[2].Time) {
		t.Errorf("not newest first: %v, then %v", d.History[0].Time, d.History[2].Time)
	}
	if d.VM.Name != "web_0" || len(d.Documents) != 1 {
		t.Fatalf("web_0: VM %q, documents of %d APIs, want web_0 and azure alone", d.VM.Name, len(d.Documents))
	}
	for path, doc := range d.Documents["azure"] {
		_, body := vmGet(t, s, "127.0.0.2", "GET", path, "Metadata", "true")
		if doc != body {
			t.Errorf("vm show's %s:\n%s\nthe VM got:\n%s", path, doc, body)
		}
		if !strings.Contains(doc, `"EventId":"`+id+`"`) || !strings.Contains(doc, `"EventStatus":"Started"`) {
			t.Errorf("vm show's document lacks the started Reboot %s: %s", id, doc)
		}
	}
	if len(d.Documents["azure"]) != 1 {
		t.Errorf("%d azure documents, want 1", len(d.Documents["azure"]))
	}

	// GCE: a read, another key, and a long-poll that times out.
	const v1 = "/computeMetadata/v1/instance/"
	vmGet(t, s, "127.0.0.6", "GET", v1+"maintenance-event", "Metadata-Flavor", "Google")
	vmGet(t, s, "127.0.0.6", "GET", v1+"nothing-here", "Metadata-Flavor", "Google")
	vmGet(t, s, "127.0.0.6", "GET", v1+"maintenance-event?wait_for_change=true&timeout_sec=1", "Metadata-Flavor", "Google")
	d = showJSON(t, s, "gce_0")
	want = []brief{
		{"gce", "GET", v1 + "maintenance-event", "", 200, "timeout", ""},
		{"gce", "GET", v1 + "nothing-here", "", 404, "", ""},
		{"gce", "GET", v1 + "maintenance-event", "", 200, "", ""},
	}
	if got := briefs(d); !equalBriefs(got, want) {
		t.Fatalf("gce_0 history:\n got %+v\nwant %+v", got, want)
	}
	if got := d.Documents["gce"][v1[:len(v1)-len("instance/")]+"instance/maintenance-event"]; got != "NONE" {
		t.Errorf("gce_0's maintenance-event in vm show: %q, want NONE", got)
	}

	// EC2: a token, then a key with it.
	code, token := vmGet(t, s, "127.0.0.7", "PUT", "/latest/api/token", "X-aws-ec2-metadata-token-ttl-seconds", "60")
	if code != 200 {
		t.Fatalf("token: %d", code)
	}
	vmGet(t, s, "127.0.0.7", "GET", "/latest/meta-data/events/maintenance/scheduled", "X-aws-ec2-metadata-token", token)
	d = showJSON(t, s, "ec2_0")
	want = []brief{
		{"aws", "GET", "/latest/meta-data/events/maintenance/scheduled", "", 200, "", ""},
		{"aws", "PUT", "/latest/api/token", "", 200, "", ""},
	}
	if got := briefs(d); !equalBriefs(got, want) {
		t.Fatalf("ec2_0 history:\n got %+v\nwant %+v", got, want)
	}
	if got := d.Documents["aws"]["/latest/meta-data/events/maintenance/scheduled"]; got != "[]" {
		t.Errorf("ec2_0's scheduled events in vm show: %q, want []", got)
	}

	// The table: the VM's fields, its document, then one row per request.
	out := s.mustCLI(t, "vm", "show", "gce_0")
	for _, re := range []string{
		`(?m)^Name: +gce_0$`,
		`(?m)^IP: +127\.0\.0\.6$`,
		`(?m)^Provider: +gce$`,
		`(?m)^gce /computeMetadata/v1/instance/maintenance-event:\nNONE$`,
		`(?m)^TIME +API +METHOD +PATH +API-VERSION +STATUS +LATENCY +LONG-POLL +APPROVED\n` +
			`\S+Z +gce +GET +/computeMetadata/v1/instance/maintenance-event +- +200 +\S+ +timeout +-\n` +
			`\S+Z +gce +GET +/computeMetadata/v1/instance/nothing-here +- +404 +\S+ +- +-\n` +
			`\S+Z +gce +GET +/computeMetadata/v1/instance/maintenance-event +- +200 +\S+ +- +-\n\z`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("vm show gce_0 does not match %s:\n%s", re, out)
		}
	}

	// A VM not in the fleet: the CLI exits 1 naming it, the API is 404.
	stdout, stderr, code := s.cli(t, "vm", "show", "nobody")
	if code != 1 || stdout != "" || !strings.Contains(stderr, `"nobody"`) {
		t.Errorf("vm show nobody: exit %d, stdout %q, stderr %q; want 1 and a message naming it", code, stdout, stderr)
	}
	resp, err := http.Get("http://" + s.adm + "/v1/vms/nobody")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || !strings.HasPrefix(string(b), `{"error":{"code":"not_found"`) {
		t.Errorf("GET /v1/vms/nobody: %d %s, want 404 and a not_found error", resp.StatusCode, b)
	}
	// Usage errors.
	if _, stderr, code := s.cli(t, "vm", "show"); code != 2 || !strings.Contains(stderr, "want one VM name") {
		t.Errorf("vm show without a name: exit %d, stderr %q", code, stderr)
	}
}

func equalBriefs(a, b []brief) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWebPagesCannotDriveTheOperatorAPI replays issue 21's attacks on
// the real binary with its defaults (loopback, no token), over real
// sockets: a cross-site POST of text/plain from https://evil.example,
// and DNS rebinding (Host: rebind.evil.example) to read the fleet, the
// dashboard, the metrics and the profiler. Each is refused and creates
// nothing; the refused writes are in the audit log; the CLI's writes,
// with a body and without, still work.
func TestWebPagesCannotDriveTheOperatorAPI(t *testing.T) {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleet, []byte(e2eFleet), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, filepath.Join(dir, "data"), fleet)
	_, port, _ := net.SplitHostPort(s.adm)
	hc := &http.Client{}
	send := func(method, path, host, body string, header ...string) (int, string, http.Header) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+s.adm+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if host != "" {
			req.Host = host
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	create := `{"type":"Freeze","vms":["web_0"],"notice":"20m"}`

	// The cross-site form or fetch of the issue: 201 before.
	code, body, _ := send("POST", "/v1/events", "", create, "Content-Type", "text/plain", "Origin", "https://evil.example")
	want := errorJSON("forbidden", `cross-origin request refused: its Origin "https://evil.example" is not this server's (Host "`+s.adm+
		`"); the operator API takes writes only from its own dashboard and from clients that are not browsers`)
	if code != 403 || body != want {
		t.Errorf("cross-site POST: %d %s\nwant 403 %s", code, body, want)
	}
	// As a current browser sends it.
	code, body, _ = send("POST", "/v1/events", "", create, "Content-Type", "text/plain", "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site")
	if code != 403 || !strings.Contains(body, "Sec-Fetch-Site: cross-site") {
		t.Errorf("cross-site POST with Sec-Fetch-Site: %d %s, want 403", code, body)
	}
	// The same body as text/plain without an Origin (not a browser's):
	// a write's body must be JSON.
	code, body, _ = send("POST", "/v1/events", "", create, "Content-Type", "text/plain")
	if want := errorJSON("invalid", `Content-Type "text/plain" is not accepted: send the body as JSON with Content-Type: application/json`); code != 415 || body != want {
		t.Errorf("text/plain POST: %d %s\nwant 415 %s", code, body, want)
	}

	// DNS rebinding: the page's own origin, the server's socket.
	rebind := "rebind.evil.example:" + port
	want = errorJSON("forbidden", `this server does not answer for host "`+rebind+`": the operator API answers only to its own address and to localhost, 127.0.0.1 and [::1], so that a web page cannot reach it by DNS rebinding; to reach it by another name, start the server with --admin-allowed-hosts NAME`)
	for _, p := range []string{"/v1/vms", "/v1/events", "/ui/", "/metrics", "/debug/pprof/", "/debug/pprof/heap", "/healthz"} {
		code, body, h := send("GET", p, rebind, "")
		if code != 421 || body != want || h.Get("Content-Type") != "application/json" {
			t.Errorf("GET %s with Host %s: %d %s %.200s\nwant 421 %s", p, rebind, code, h.Get("Content-Type"), body, want)
		}
	}
	if code, body, _ := send("POST", "/v1/events", rebind, create, "Content-Type", "application/json"); code != 421 || body != want {
		t.Errorf("POST /v1/events with Host %s: %d %s", rebind, code, body)
	}

	// Nothing was made; the refused writes were recorded.
	code, body, _ = send("GET", "/v1/events", "", "")
	if code != 200 || body != `{"events":[]}`+"\n" {
		t.Fatalf("events after the attacks: %d %s", code, body)
	}
	var audit struct {
		Entries []struct {
			Action, Who string
			Status      int
		}
	}
	if _, body, _ = send("GET", "/v1/audit", "", ""); json.Unmarshal([]byte(body), &audit) != nil || len(audit.Entries) == 0 {
		t.Fatalf("audit: %s", body)
	}
	if e := audit.Entries[0]; e.Action != "POST /v1/events" || e.Status != 403 || e.Who != "127.0.0.1" {
		t.Errorf("first audit entry %+v, want the refused cross-site POST (403)", e)
	}

	// The CLI and the dashboard's origin still write.
	id := strings.TrimSpace(s.mustCLI(t, "event", "create", "--type", "Freeze", "--vm", "web_0", "--notice", "20m"))
	if out := s.mustCLI(t, "event", "approve", id); !strings.Contains(out, id) {
		t.Errorf("event approve printed %q", out)
	}
	if code, body, _ := send("POST", "/v1/events", "", create, "Content-Type", "application/json",
		"Origin", "http://"+s.adm, "Sec-Fetch-Site", "same-origin"); code != 201 {
		t.Errorf("same-origin POST: %d %s, want 201", code, body)
	}
	if code, body, _ := send("GET", "/v1/vms", "localhost:"+port, ""); code != 200 || !strings.Contains(body, `"name":"web_0"`) {
		t.Errorf("GET /v1/vms with Host localhost: %d %.100s", code, body)
	}
}

// errorJSON is the operator API's error body for code and message.
func errorJSON(code, message string) string {
	b, _ := json.Marshal(map[string]map[string]string{"error": {"code": code, "message": message}})
	return string(b) + "\n"
}

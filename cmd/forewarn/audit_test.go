package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

// auditCLIServer runs an audited operator API, without a token, on a
// mem-store engine, and returns it, its URL and the log's path.
func auditCLIServer(t *testing.T) (*admin.Server, string, string) {
	t.Helper()
	fleet := &forewarn.Fleet{VMs: []*forewarn.VM{{Name: "db_0", Provider: forewarn.Azure}}}
	eng, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: fleet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	eng.NoteRequest("db_0")
	path := filepath.Join(t.TempDir(), "audit.log")
	audit, err := admin.OpenAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { audit.Close() })
	s := admin.NewServer(eng, nil)
	s.Audit = audit
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv.URL, path
}

// post sends an empty POST to the raw path p (already percent-encoded)
// and reads the whole answer.
func post(t *testing.T, url, p string) {
	t.Helper()
	resp, err := http.Post(url+p, "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// TestAuditCannotForgeLines: paths (and any other recorded field) with
// newlines, carriage returns, terminal escapes, bidirectional overrides
// or bytes that are not UTF-8 are printed escaped by 'forewarn audit':
// every entry is one line, and none of those characters reaches the
// terminal.
func TestAuditCannotForgeLines(t *testing.T) {
	_, url, path := auditCLIServer(t)
	forged := []struct{ raw, shown string }{
		{"/v1/events/x%0A2026-01-01T00:00:00Z%20%20token@10.0.0.1%20%20POST%20/v1/events%20%20201/approve",
			`"POST /v1/events/x\n2026-01-01T00:00:00Z  token@10.0.0.1  POST /v1/events  201/approve"`},
		{"/v1/events/a%0Db/cancel", `"POST /v1/events/a\rb/cancel"`},
		{"/v1/events/%1B%5B2J%1B%5BH/start", `"POST /v1/events/\x1b[2J\x1b[H/start"`},
		{"/v1/events/%E2%80%AE102/complete", `"POST /v1/events/\u202e102/complete"`},
		{"/v1/events/%E2%81%A6x%E2%80%A8y%C2%85z/start", `"POST /v1/events/\u2066x\u2028y\u0085z/start"`},
		// JSON keeps no bytes that are not UTF-8: the log has U+FFFD.
		{"/v1/events/%FF%FE/start", "POST /v1/events/\ufffd\ufffd/start"},
		{"/v1/events/%E2%80%8Bzero%C2%A0width/start", `"POST /v1/events/\u200bzero\u00a0width/start"`},
		{`/v1/events/%22q%5C/start`, `"POST /v1/events/\"q\\/start"`},
	}
	for _, f := range forged {
		post(t, url, f.raw)
	}
	// A line written by something else (an older server, an editor) with
	// hostile fields is escaped just the same.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"at":"2026-01-01T00:00:00Z","who":"10.0.0.9\n2026-01-01T00:00:00Z  token@10.0.0.1\u001b[1A","action":"POST /v1/vms/db_0/restart","status":201}` + "\n")
	f.Close()

	out := cliOK(t, "audit", "--server", url)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 1+len(forged)+1 {
		t.Fatalf("%d entries printed as %d lines:\n%s", len(forged)+1, len(lines), out)
	}
	for _, bad := range []string{"\r", "\x1b", "\u202e", "\u2066", "\u2028", "\u0085", "\u200b", "\u00a0", "\xff"} {
		if strings.Contains(out, bad) {
			t.Errorf("output holds %q:\n%s", bad, out)
		}
	}
	for i, f := range forged {
		if !strings.Contains(lines[1+i], f.shown) || !strings.HasSuffix(lines[1+i], "404") {
			t.Errorf("line %d: %q\nwant it to show %s and status 404", i+1, lines[1+i], f.shown)
		}
	}
	if l := lines[len(lines)-1]; !strings.Contains(l, `"10.0.0.9\n2026-01-01T00:00:00Z  token@10.0.0.1\x1b[1A"`) {
		t.Errorf("hostile who: %q", l)
	}
	// Ordinary entries print as they are.
	post(t, url, "/v1/vms/db_0/restart")
	out = cliOK(t, "audit", "--server", url)
	if !hasRow(out, "POST /v1/vms/db_0/restart 201") {
		t.Errorf("ordinary entry:\n%s", out)
	}
}

// hasRow reports whether a line of the table out ends with the
// space-separated fields of row.
func hasRow(out, row string) bool {
	for l := range strings.Lines(out) {
		if strings.HasSuffix(strings.Join(strings.Fields(l), " "), row) {
			return true
		}
	}
	return false
}

// TestAuditAfterTornLine: a crash that tore the audit log's last line
// hides none of the entries appended after a restart from 'forewarn
// audit'.
func TestAuditAfterTornLine(t *testing.T) {
	s, url, path := auditCLIServer(t)
	post(t, url, "/v1/vms/db_0/restart")
	post(t, url, "/v1/vms/db_0/redeploy")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The crash: the last line is cut half-way.
	cut := bytes.LastIndexByte(b[:len(b)-1], '\n') + 1 + (len(b)-bytes.LastIndexByte(b[:len(b)-1], '\n'))/2
	if err := os.Truncate(path, int64(cut)); err != nil {
		t.Fatal(err)
	}
	s.Audit.Close()
	reopened, err := admin.OpenAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	defer reopened.Close()
	s.Audit = reopened
	post(t, url, "/v1/events/NOPE/approve")
	post(t, url, "/v1/events/NOPE/cancel")

	out := cliOK(t, "audit", "--server", url)
	// The redeploy's outcome was the torn line: its intent shows it was
	// attempted, with its outcome unknown ("?").
	for _, want := range []string{"POST /v1/vms/db_0/restart 201", "POST /v1/vms/db_0/redeploy ?", "POST /v1/events/NOPE/approve 404", "POST /v1/events/NOPE/cancel 404"} {
		if !hasRow(out, want) {
			t.Errorf("forewarn audit does not show %q after a torn line:\n%s", want, out)
		}
	}
}

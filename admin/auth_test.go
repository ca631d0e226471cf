package admin_test

import (
	"io"
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

func TestTokenAndAudit(t *testing.T) {
	eng, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: testFleet()})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	eng.NoteRequest("db_0")
	path := filepath.Join(t.TempDir(), "audit.log")
	audit, err := admin.OpenAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	defer audit.Close()
	s := admin.NewServer(eng, nil)
	s.Token, s.Audit = "s3cret", audit
	srv := httptest.NewServer(s)
	defer srv.Close()

	call := func(method, path, token string) (int, string) {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return resp.StatusCode, b.String()
	}
	const refused = `{"error":{"code":"unauthorized","message":"missing or wrong bearer token (the CLI reads it from --token-file or $FOREWARN_TOKEN)"}}` + "\n"
	for _, tok := range []string{"", "wrong", "s3cret2", "S3CRET"} {
		if code, body := call("GET", "/v1/events", tok); code != 401 || body != refused {
			t.Errorf("token %q: %d %q", tok, code, body)
		}
	}
	if code, body := call("POST", "/v1/vms/db_0/restart", "nope"); code != 401 || body != refused {
		t.Errorf("unauthorized write: %d %s", code, body)
	}
	if n := len(eng.Events()); n != 0 {
		t.Fatalf("an unauthorized request created %d events", n)
	}
	if code, _ := call("GET", "/healthz", ""); code != 200 {
		t.Errorf("healthz needs no token, got %d", code)
	}

	// The client with the token works, and every action is audited.
	c := admin.NewClient(srv.URL, nil)
	c.Token = "s3cret"
	ev, err := c.Restart(t.Context(), "db_0", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(t.Context(), ev.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Approve(t.Context(), "NOPE"); forewarn.ErrorCode(err) != forewarn.ENOTFOUND {
		t.Fatalf("approve unknown: %v", err)
	}
	c.Token = ""
	if _, err := c.Events(t.Context()); forewarn.ErrorCode(err) != forewarn.EUNAUTHORIZED {
		t.Fatalf("client without token: %v", err)
	}
	c.Token = "s3cret"
	entries, err := c.Audit(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		action string
		status int
	}{
		{"POST /v1/vms/db_0/restart", 401}, // refused attempts are recorded too
		{"POST /v1/vms/db_0/restart", 201},
		{"POST /v1/events/" + ev.ID + "/cancel", 200},
		{"POST /v1/events/NOPE/approve", 404},
	}
	if len(entries) != len(want) {
		t.Fatalf("audit has %d entries, want %d: %+v", len(entries), len(want), entries)
	}
	for i, w := range want {
		who := "token@127.0.0.1"
		if w.status == 401 {
			who = "127.0.0.1"
		}
		if e := entries[i]; e.Who != who || e.Action != w.action || e.Status != w.status || e.At.IsZero() {
			t.Errorf("entry %d: %+v, want %s %d by %s", i, e, w.action, w.status, who)
		}
	}
	// The log survives a reopen, and a torn last line is skipped.
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"at":"2026-`)
	f.Close()
	again, _ := admin.OpenAuditLog(path)
	defer again.Close()
	if got, err := again.Entries(); err != nil || len(got) != 4 {
		t.Fatalf("reopened: %d entries, %v", len(got), err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("audit log mode %v", fi.Mode().Perm())
	}
}

// TestAuditLongPath: an absurd path is cut in the log and hides no later
// entry.
func TestAuditLongPath(t *testing.T) {
	eng, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: testFleet()})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	audit, err := admin.OpenAuditLog(filepath.Join(t.TempDir(), "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer audit.Close()
	s := admin.NewServer(eng, nil)
	s.Audit = audit
	srv := httptest.NewServer(s)
	defer srv.Close()
	for _, p := range []string{"/v1/" + strings.Repeat("%3C", 100_000), "/v1/vms/nope/restart"} {
		resp, err := http.Post(srv.URL+p, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body) // the whole answer: the handler, and its audit, are done
		resp.Body.Close()
	}
	entries, err := audit.Entries()
	if err != nil || len(entries) != 2 {
		t.Fatalf("%d entries, %v", len(entries), err)
	}
	if n := len(entries[0].Action); n > 1100 || entries[1].Action != "POST /v1/vms/nope/restart" {
		t.Fatalf("actions: %d bytes, then %q", n, entries[1].Action)
	}
}

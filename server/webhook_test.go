package server_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/server"
	"github.com/forewarn/forewarn/webhook"
)

// TestWebhookConfig: --webhook takes absolute http and https URLs and
// needs --webhook-secret-file, whose file must be private and hold at
// least 16 bytes.
func TestWebhookConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "0123456789abcdef0123456789abcdef\n", 0o600)
	for _, c := range []struct {
		name   string
		hooks  []string
		secret string
		want   string
	}{
		{"no secret", []string{"https://hooks.example/"}, "",
			"--webhook needs --webhook-secret-file FILE: the secret (at least 16 bytes, mode 0600) that signs every delivery, which the receivers check"},
		{"not http", []string{"ftp://hooks.example/"}, good, `--webhook: webhook "ftp://hooks.example/" is not an absolute http:// or https:// URL`},
		{"relative", []string{"/hooks"}, good, `--webhook: webhook "/hooks" is not an absolute http:// or https:// URL`},
		{"short secret", nil, write("short", "tiny\n", 0o600), "--webhook-secret-file " + filepath.Join(dir, "short") +
			" holds 4 bytes, fewer than 16: write a longer random secret, e.g. openssl rand -hex 32"},
		{"readable secret", nil, write("open", "0123456789abcdef0123456789abcdef", 0o644), "--webhook-secret-file " + filepath.Join(dir, "open") +
			" has mode 0644: others than its owner can read or change it; run: chmod 600 " + filepath.Join(dir, "open")},
	} {
		cfg := memConfig(t)
		cfg.Webhooks, cfg.WebhookSecretFile = c.hooks, c.secret
		s, err := server.New(t.Context(), cfg)
		if err == nil {
			s.Close()
		}
		if forewarn.ErrorCode(err) != forewarn.EINVALID || forewarn.ErrorMessage(err) != c.want {
			t.Errorf("%s: %v\nwant %s", c.name, err, c.want)
		}
	}
	cfg := memConfig(t)
	cfg.WebhookSecretFile = good
	s, err := server.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Admin().Webhooks.Configured() {
		t.Error("a server with a secret cannot send webhooks")
	}
}

// TestWebhookDelivery: a server with --webhook posts a session's
// transitions, signed with the secret file's content, over a real
// connection.
func TestWebhookDelivery(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef"
	got := make(chan string, 16)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !webhook.Verify([]byte(secret), r.Header.Get("Forewarn-Timestamp"), r.Header.Get("Forewarn-Signature"), body) {
			got <- "bad signature"
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		got <- r.Header.Get("Content-Type") + " " + string(body)
	}))
	defer recv.Close()
	cfg := memConfig(t)
	cfg.Webhooks = []string{recv.URL + "/hook"}
	cfg.WebhookSecretFile = filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(cfg.WebhookSecretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Fleet.VMs[0].Host = "hv1"
	s, err := server.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ses, err := s.Engine().CreateSession(t.Context(), forewarn.SessionSpec{Hosts: []string{"hv1"}, Notice: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-got:
		if want := `application/cloudevents+json {"specversion":"1.0","id":"`; !strings.HasPrefix(b, want) ||
			!strings.Contains(b, `"type":"io.forewarn.session.running","subject":"`+ses.ID+`"`) {
			t.Errorf("delivery: %s", b)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery within 10 s")
	}
}

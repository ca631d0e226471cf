package admin_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/history"
	"github.com/forewarn/forewarn/mem"
)

// docs is a Renderer with one fixed document per VM.
type docs struct{}

func (docs) Documents(vm string) map[string]string {
	return map[string]string{"/metadata/scheduledevents": `{"vm":"` + vm + `"}`}
}

// call sends a request with the given bearer token (none when "") and
// returns the status, Content-Type and body.
func call(t *testing.T, srv *httptest.Server, method, path, token string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// Read the stream's first event, then hang up.
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, resp.Header.Get("Content-Type"), line
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// TestUIAuth checks that with a token, the dashboard's page shell and
// static files are served without it, and every data route and the
// stream need it exactly as /v1 does.
func TestUIAuth(t *testing.T) {
	eng, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: testFleet()})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	s := admin.NewServer(eng, nil)
	s.Token = "s3cret"
	// Set after NewServer, as serve does: the dashboard reads them late.
	s.Renderers = map[string]admin.Renderer{"azure": docs{}}
	s.History = history.New([]string{"web_0"}, history.DefaultSize)
	srv := httptest.NewServer(s)
	defer srv.Close()
	defer s.Shutdown()

	const refused = `{"error":{"code":"unauthorized","message":"missing or wrong bearer token (the CLI reads it from --token-file or $FOREWARN_TOKEN)"}}` + "\n"
	for _, p := range []string{"/ui/fragment/fleet", "/ui/fragment/events", "/ui/fragment/waves", "/ui/vm/web_0", "/ui/stream", "/ui/stream?vm=web_0", "/ui/nope", "/ui/static/"} {
		for _, tok := range []string{"", "wrong"} {
			if code, _, body := call(t, srv, "GET", p, tok); code != 401 || body != refused {
				t.Errorf("GET %s with token %q: %d %s", p, tok, code, body)
			}
		}
	}
	// Public: the page shell and its files, by GET or HEAD only.
	for _, p := range []string{"/ui/", "/ui/static/app.js", "/ui/static/style.css"} {
		for _, m := range []string{"GET", "HEAD"} {
			if code, _, _ := call(t, srv, m, p, ""); code != 200 {
				t.Errorf("%s %s without the token: %d, want 200", m, p, code)
			}
		}
	}
	if code, _, body := call(t, srv, "POST", "/ui/", ""); code != 401 || body != refused {
		t.Errorf("POST /ui/ without the token: %d %s", code, body)
	}

	// With the token.
	for _, c := range []struct{ path, typ, want string }{
		{"/ui/fragment/fleet", "text/html; charset=utf-8", `<span class="name">web</span>`},
		{"/ui/fragment/events", "text/html; charset=utf-8", `<p class="empty">No events.</p>`},
		{"/ui/vm/web_0", "text/html; charset=utf-8", `<pre class="document">{&#34;vm&#34;:&#34;web_0&#34;}</pre>`},
		{"/ui/stream", "text/event-stream; charset=utf-8", "event: fleet\n"},
		{"/ui/nope", "application/json", `{"error":{"code":"not_found","message":"no route for GET /ui/nope"}}`},
		{"/ui/static/", "application/json", `{"error":{"code":"not_found","message":"no route for GET /ui/static/"}}`},
	} {
		if code, typ, body := call(t, srv, "GET", c.path, "s3cret"); typ != c.typ || !strings.Contains(body, c.want) {
			t.Errorf("GET %s with the token: %d %s %s", c.path, code, typ, body)
		}
	}
	if code, _, body := call(t, srv, "POST", "/ui/stream", "s3cret"); code != 405 ||
		body != `{"error":{"code":"invalid","message":"method POST is not allowed for /ui/stream (allowed: GET, HEAD)"}}`+"\n" {
		t.Errorf("POST /ui/stream: %d %s", code, body)
	}
}

// TestUIRefusesVMs checks that without a token, a VM's address is
// refused the dashboard's data as it is the rest of the operator API,
// and still gets the page shell.
func TestUIRefusesVMs(t *testing.T) {
	f := testFleet()
	f.VMs[0].IP = netip.MustParseAddr("127.0.0.1")
	eng, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: f})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	srv := httptest.NewServer(admin.NewServer(eng, nil))
	defer srv.Close()
	if code, _, body := call(t, srv, "GET", "/ui/fragment/fleet", ""); code != 403 || !strings.Contains(body, `"code":"forbidden"`) {
		t.Fatalf("fleet from a VM's address: %d %s", code, body)
	}
	if code, _, body := call(t, srv, "GET", "/ui/", ""); code != 200 || !strings.Contains(body, `data-token-required="false"`) {
		t.Fatalf("page shell from a VM's address: %d", code)
	}
}

// TestUIShutdown checks that Shutdown ends an open stream, so the HTTP
// server's own Shutdown need not wait for it.
func TestUIShutdown(t *testing.T) {
	eng, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: testFleet()})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	s := admin.NewServer(eng, nil)
	srv := httptest.NewUnstartedServer(s)
	srv.Config.RegisterOnShutdown(s.Shutdown)
	srv.Start()
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/ui/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	// Without the registered Shutdown, this waits for the stream until
	// ctx ends.
	if err := srv.Config.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("Shutdown took %s with a stream open", took)
	}
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatalf("stream after Shutdown: %v", err)
	}
}

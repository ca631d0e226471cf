package admin_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
	"github.com/forewarn/forewarn/metrics"
)

// TestMetricsRoute serves GET /metrics over a loopback listener: behind
// the token when there is one (401 without it), refused to a fleet VM's
// address without one (403), 404 on a server without metrics, and the
// engine's gauges read at scrape time.
func TestMetricsRoute(t *testing.T) {
	fleet := &forewarn.Fleet{VMs: []*forewarn.VM{
		{Name: "web_0", Provider: forewarn.Azure, IP: netip.MustParseAddr("127.0.0.2")},
	}}
	m := metrics.New("mem")
	eng, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: fleet, Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	m.Watch(eng)
	eng.NoteRequest("web_0")
	if _, err := eng.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_0"}}); err != nil {
		t.Fatal(err)
	}
	// serve starts an operator API with token and metrics.
	serve := func(token string, m *metrics.Metrics) string {
		s := admin.NewServer(eng, nil)
		s.Token, s.Metrics = token, m
		srv := httptest.NewServer(s)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	get := func(url, from, token string) (int, string) {
		t.Helper()
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
		c := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
		req, _ := http.NewRequest("GET", url+"/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	// No token: an operator's address is served, a VM's refused.
	open := serve("", m)
	code, body := get(open, "127.0.0.1", "")
	for _, want := range []string{
		`forewarn_events{status="Scheduled",type="Reboot"} 1`,
		`forewarn_event_transitions_total{from="none",to="Scheduled",type="Reboot"} 1`,
		`forewarn_vms_enabled 1`,
		`go_goroutines `,
		`process_open_fds `,
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("GET /metrics: %d, no %q in\n%s", code, want, body)
		}
	}
	if code, _ := get(open, "127.0.0.2", ""); code != http.StatusForbidden {
		t.Errorf("GET /metrics from VM web_0's address: %d, want 403", code)
	}

	const token = "s3cret-s3cret-s3cret"
	guarded := serve(token, m)
	for _, tok := range []string{"", "wrong"} {
		if code, body := get(guarded, "127.0.0.1", tok); code != http.StatusUnauthorized || strings.Contains(body, "forewarn_events") {
			t.Errorf("GET /metrics with token %q: %d %q, want 401", tok, code, body)
		}
	}
	if code, _ := get(guarded, "127.0.0.1", token); code != http.StatusOK {
		t.Errorf("GET /metrics with the token: %d", code)
	}

	if code, _ := get(serve(token, nil), "127.0.0.1", token); code != http.StatusNotFound {
		t.Errorf("GET /metrics without metrics: %d, want 404", code)
	}
}

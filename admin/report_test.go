package admin_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/history"
	"github.com/forewarn/forewarn/mem"
)

// TestReportRoute checks GET /v1/report over loopback: behind the
// token as every route, refused from a VM's address without one, its
// parameters checked, and the client's decoding of it.
func TestReportRoute(t *testing.T) {
	fleet := &forewarn.Fleet{VMs: []*forewarn.VM{
		{Name: "web_0", Provider: forewarn.Azure, IP: netip.MustParseAddr("127.0.0.2")},
		{Name: "web_1", Provider: forewarn.Azure, IP: netip.MustParseAddr("127.0.0.3")},
	}}
	eng, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: fleet})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	serve := func(token string) string {
		s := admin.NewServer(eng, nil)
		s.Token, s.History = token, history.New([]string{"web_0", "web_1"}, 0)
		srv := httptest.NewServer(s)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	get := func(url, from, token string) int {
		t.Helper()
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
		c := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
		req, _ := http.NewRequest("GET", url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	open := serve("")
	for _, c := range []struct {
		path, from string
		want       int
	}{
		{"/v1/report", "127.0.0.1", 200},
		{"/v1/report?vm=web_1", "127.0.0.1", 200},
		{"/v1/report", "127.0.0.2", 403},
		{"/v1/report?vm=nobody", "127.0.0.1", 404},
		{"/v1/report?vm=web_0&vm=web_1", "127.0.0.1", 400},
		{"/v1/report?since=1h", "127.0.0.1", 400},
	} {
		if got := get(open+c.path, c.from, ""); got != c.want {
			t.Errorf("GET %s from %s: %d, want %d", c.path, c.from, got, c.want)
		}
	}
	const token = "s3cret-s3cret-s3cret"
	guarded := serve(token)
	if got := get(guarded+"/v1/report", "127.0.0.1", ""); got != 401 {
		t.Errorf("GET /v1/report without the token: %d, want 401", got)
	}
	c := admin.NewClient(guarded, nil)
	c.Token = token
	rep, err := c.Report(t.Context(), "web_1")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.VMs) != 1 || rep.VMs[0].Name != "web_1" || rep.VMs[0].Requests != 0 || len(rep.VMs[0].Findings) != 0 {
		t.Errorf("report of web_1: %+v", rep.VMs)
	}
}

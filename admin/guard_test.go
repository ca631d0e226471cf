package admin_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

// guardServer returns an operator API without a token (the default)
// over an engine of testFleet.
func guardServer(t *testing.T) (*engine.Engine, *admin.Server) {
	t.Helper()
	eng, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: testFleet(), AllowShortNotice: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	return eng, admin.NewServer(eng, nil)
}

// guardRequest is one request to the operator API in process: to host,
// arrived at the local address local (none when ""), with headers.
type guardRequest struct {
	method, path, host, local, body string
	header                          map[string]string
}

func (g guardRequest) serve(h http.Handler) *httptest.ResponseRecorder {
	r := httptest.NewRequest(g.method, g.path, strings.NewReader(g.body))
	r.Host = g.host
	r.RemoteAddr = "127.0.0.1:40000"
	if g.local != "" {
		la := net.TCPAddrFromAddrPort(mustAddrPort(g.local))
		r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, net.Addr(la)))
	}
	for k, v := range g.header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// errorJSON is the API's error body for code and message.
func errorJSON(code, message string) string {
	b, _ := json.Marshal(map[string]map[string]string{"error": {"code": code, "message": message}})
	return string(b) + "\n"
}

// misdirected is the 421 answer's message for host.
func misdirected(host string) string {
	return "this server does not answer for host " + host + ": the operator API answers only to its own address and to localhost, 127.0.0.1 and [::1], so that a web page cannot reach it by DNS rebinding; to reach it by another name, start the server with --admin-allowed-hosts NAME"
}

// TestHostMustBeTheServers: a request whose Host is not the operator
// API's own address, a loopback name or an allowed host (DNS
// rebinding: rebind.evil.example resolving to 127.0.0.1) is refused
// with 421 on every route, the dashboard's public shell and /healthz
// included; the others are served.
func TestHostMustBeTheServers(t *testing.T) {
	eng, s := guardServer(t)
	s.AllowedHosts = []string{"forewarn.corp.example", "2001:db8::7"}
	create := `{"type":"Freeze","vms":["db_0"],"notice":"1m"}`
	json := map[string]string{"Content-Type": "application/json"}
	for _, host := range []string{"rebind.evil.example", "rebind.evil.example:8170", "localhost.evil.example", "127.0.0.1.nip.io:8170",
		"evil.example.", "10.1.2.4:8170", "[2001:db8::8]:8170", "0.0.0.0:8170", "forewarn.corp.example.evil.example"} {
		for _, g := range []guardRequest{
			{method: "GET", path: "/v1/vms"}, {method: "GET", path: "/ui/"}, {method: "GET", path: "/ui/static/app.js"},
			{method: "GET", path: "/metrics"}, {method: "GET", path: "/debug/pprof/"}, {method: "GET", path: "/healthz"},
			{method: "GET", path: "/v1/report"}, {method: "POST", path: "/v1/events", body: create, header: json},
		} {
			g.host, g.local = host, "10.1.2.3:8170"
			w := g.serve(s)
			want := errorJSON("forbidden", misdirected(`"`+host+`"`))
			if w.Code != 421 || w.Body.String() != want || w.Header().Get("Content-Type") != "application/json" || w.Header().Get("Connection") != "close" {
				t.Errorf("%s %s Host %s: %d %s %s\nwant 421 %s", g.method, g.path, host, w.Code, w.Header(), w.Body, want)
			}
		}
	}
	long := strings.Repeat("a", 300) + ".example"
	if w := (guardRequest{method: "GET", path: "/v1/vms", host: long}).serve(s); w.Code != 421 ||
		w.Body.String() != errorJSON("forbidden", misdirected(`"`+long[:64]+`"… (308 bytes)`)) {
		t.Errorf("long host: %d %s", w.Code, w.Body)
	}
	for _, c := range []struct{ host, local string }{
		{"localhost", ""}, {"localhost:8170", ""}, {"LOCALHOST:8170", ""}, {"localhost.:8170", ""}, {"127.0.0.1", ""}, {"127.0.0.1:8170", ""},
		{"127.9.8.7:1", ""}, {"[::1]", ""}, {"[::1]:8170", ""}, {"[::ffff:127.0.0.1]:8170", ""},
		{"10.1.2.3:8170", "10.1.2.3:8170"}, {"10.1.2.3", "10.1.2.3:8170"}, {"[::ffff:10.1.2.3]:80", "10.1.2.3:8170"},
		{"forewarn.corp.example", ""}, {"Forewarn.Corp.Example:443", ""}, {"[2001:db8::7]:8170", ""}, {"", ""},
	} {
		g := guardRequest{method: "GET", path: "/v1/events", host: c.host, local: c.local}
		if w := g.serve(s); w.Code != 200 {
			t.Errorf("GET /v1/events Host %q (to %s): %d %s, want 200", c.host, c.local, w.Code, w.Body)
		}
	}
	if n := len(eng.Events()); n != 0 {
		t.Errorf("refused requests made %d events", n)
	}
}

// TestCrossOriginWritesAreRefused: a write a browser marks as coming
// from another site (Sec-Fetch-Site, or Origin where the browser sends
// no Sec-Fetch-Site, and the opaque Origin null) is refused with 403 and
// changes nothing; the dashboard's own writes, clients that are not
// browsers, and cross-site reads are served.
func TestCrossOriginWritesAreRefused(t *testing.T) {
	eng, s := guardServer(t)
	create := `{"type":"Freeze","vms":["db_0"],"notice":"1m"}`
	refusal := func(why string) string {
		return errorJSON("forbidden", "cross-origin request refused: "+why+"; the operator API takes writes only from its own dashboard and from clients that are not browsers")
	}
	for _, c := range []struct {
		header map[string]string
		want   string
	}{
		{map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, refusal("its browser marks it Sec-Fetch-Site: cross-site")},
		{map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:9000"}, refusal("its browser marks it Sec-Fetch-Site: same-site")},
		{map[string]string{"Origin": "https://evil.example"}, refusal(`its Origin "https://evil.example" is not this server's (Host "127.0.0.1:8170")`)},
		{map[string]string{"Origin": "http://127.0.0.1:9000"}, refusal(`its Origin "http://127.0.0.1:9000" is not this server's (Host "127.0.0.1:8170")`)},
		{map[string]string{"Origin": "null"}, refusal(`its Origin "null" is not this server's (Host "127.0.0.1:8170")`)},
	} {
		for _, path := range []string{"/v1/events", "/v1/vms/db_0/restart"} {
			c.header["Content-Type"] = "application/json"
			w := guardRequest{method: "POST", path: path, host: "127.0.0.1:8170", body: create, header: c.header}.serve(s)
			if w.Code != 403 || w.Body.String() != c.want || w.Header().Get("Connection") != "close" {
				t.Errorf("POST %s %v: %d %s\nwant 403 %s", path, c.header, w.Code, w.Body, c.want)
			}
		}
	}
	// The empty Host is allowed (HTTP/1.0): Origin null still is not.
	w := guardRequest{method: "POST", path: "/v1/events", body: create,
		header: map[string]string{"Content-Type": "application/json", "Origin": "null"}}.serve(s)
	if w.Code != 403 {
		t.Errorf("Origin null without Host: %d %s, want 403", w.Code, w.Body)
	}
	if n := len(eng.Events()); n != 0 {
		t.Fatalf("refused writes made %d events", n)
	}
	for _, h := range []map[string]string{
		{"Sec-Fetch-Site": "same-origin", "Origin": "http://127.0.0.1:8170"}, // the dashboard
		{"Sec-Fetch-Site": "none"},          // typed in the address bar
		{"Origin": "http://127.0.0.1:8170"}, // a browser without Sec-Fetch-Site
		{},                                  // curl, the CLI
	} {
		h["Content-Type"] = "application/json"
		w := guardRequest{method: "POST", path: "/v1/events", host: "127.0.0.1:8170", body: create, header: h}.serve(s)
		if w.Code != 201 {
			t.Errorf("POST /v1/events %v: %d %s, want 201", h, w.Code, w.Body)
		}
	}
	w = guardRequest{method: "GET", path: "/v1/events", host: "127.0.0.1:8170",
		header: map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}}.serve(s)
	if w.Code != 200 {
		t.Errorf("cross-site GET: %d, want 200 (the page cannot read it)", w.Code)
	}
}

// TestWriteBodiesMustBeJSON: a write whose body is not declared JSON
// (the text/plain of a cross-site fetch, a form's encodings, none) gets
// 415 and changes nothing; application/json with a UTF-8 charset, and a
// write without a body and without a Content-Type, are served.
func TestWriteBodiesMustBeJSON(t *testing.T) {
	eng, s := guardServer(t)
	create := `{"type":"Freeze","vms":["db_0"],"notice":"1m"}`
	notJSON := func(ct string) string {
		return errorJSON("invalid", "Content-Type "+ct+" is not accepted: send the body as JSON with Content-Type: application/json")
	}
	for _, c := range []struct {
		method, path, ctype, body, want string
	}{
		{"POST", "/v1/events", "text/plain", create, notJSON(`"text/plain"`)},
		{"POST", "/v1/events", "text/plain;charset=UTF-8", create, notJSON(`"text/plain;charset=UTF-8"`)},
		{"POST", "/v1/events", "application/x-www-form-urlencoded", create, notJSON(`"application/x-www-form-urlencoded"`)},
		{"POST", "/v1/events", "multipart/form-data; boundary=x", create, notJSON(`"multipart/form-data; boundary=x"`)},
		{"POST", "/v1/events", "application/json; charset=latin1", create, notJSON(`"application/json; charset=latin1"`)},
		{"POST", "/v1/events", "application/jsonx", create, notJSON(`"application/jsonx"`)},
		{"POST", "/v1/events", "", create, errorJSON("invalid", "a request body needs Content-Type: application/json")},
		{"POST", "/v1/events/X/approve", "text/plain", "", notJSON(`"text/plain"`)},
		{"PATCH", "/v1/scalesets/ss", "text/plain", `{"terminateNotifications":false}`, notJSON(`"text/plain"`)},
	} {
		h := map[string]string{}
		if c.ctype != "" {
			h["Content-Type"] = c.ctype
		}
		w := guardRequest{method: c.method, path: c.path, host: "localhost:8170", body: c.body, header: h}.serve(s)
		if w.Code != 415 || w.Body.String() != c.want {
			t.Errorf("%s %s %q: %d %s\nwant 415 %s", c.method, c.path, c.ctype, w.Code, w.Body, c.want)
		}
	}
	if n := len(eng.Events()); n != 0 {
		t.Fatalf("refused writes made %d events", n)
	}
	var id string
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON;Charset=UTF-8"} {
		w := guardRequest{method: "POST", path: "/v1/events", host: "localhost:8170", body: create, header: map[string]string{"Content-Type": ct}}.serve(s)
		if w.Code != 201 {
			t.Fatalf("Content-Type %q: %d %s, want 201", ct, w.Code, w.Body)
		}
		var ev struct{ ID string }
		json.Unmarshal(w.Body.Bytes(), &ev)
		id = ev.ID
	}
	// Writes without a body need no Content-Type, as the CLI sends them.
	if w := (guardRequest{method: "POST", path: "/v1/events/" + id + "/approve", host: "localhost:8170"}).serve(s); w.Code != 200 {
		t.Errorf("approve without a body: %d %s, want 200", w.Code, w.Body)
	}
	if w := (guardRequest{method: "POST", path: "/v1/vms/db_0/restart", host: "localhost:8170"}).serve(s); w.Code != 201 {
		t.Errorf("restart without a body: %d %s, want 201", w.Code, w.Body)
	}
}

// TestValidAllowedHost: names and addresses are allowed hosts; ports,
// schemes, paths and wildcards are refused.
func TestValidAllowedHost(t *testing.T) {
	for _, h := range []string{"forewarn.example", "localhost", "10.0.0.1", "2001:db8::1", "[2001:db8::1]", "Host-1"} {
		if err := admin.ValidAllowedHost(h); err != nil {
			t.Errorf("%q: %v", h, err)
		}
	}
	for h, want := range map[string]string{
		"":                         "an allowed host is empty",
		"forewarn.example:8170":    `allowed host "forewarn.example:8170" has a port: give the name alone, which is allowed with any port`,
		"http://forewarn.example":  `allowed host "http://forewarn.example" is not a host name or an IP address (no scheme, path or wildcard)`,
		"*.example":                `allowed host "*.example" is not a host name or an IP address (no scheme, path or wildcard)`,
		"forewarn.example/x":       `allowed host "forewarn.example/x" is not a host name or an IP address (no scheme, path or wildcard)`,
		"[2001:db8::1]:8170":       `allowed host "[2001:db8::1]:8170" has a port: give the name alone, which is allowed with any port`,
		"user@forewarn.example":    `allowed host "user@forewarn.example" is not a host name or an IP address (no scheme, path or wildcard)`,
		"forewarn example":         `allowed host "forewarn example" is not a host name or an IP address (no scheme, path or wildcard)`,
		"forewarn.example?x=1#top": `allowed host "forewarn.example?x=1#top" is not a host name or an IP address (no scheme, path or wildcard)`,
	} {
		err := admin.ValidAllowedHost(h)
		if err == nil || !strings.HasSuffix(err.Error(), ": "+want) {
			t.Errorf("%q: %v, want %q", h, err, want)
		}
	}
}

// mustAddrPort parses s, an IP address and port.
func mustAddrPort(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

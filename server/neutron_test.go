package server_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/fleetfile"
	"github.com/forewarn/forewarn/server"
)

// The instances and projects of the neutron tests. instA and instB
// share an address, on the networks of projects A and B; instC is on no
// network; instAny answers every caller on project A's network; instEC2
// is an EC2 instance of project A.
const (
	projA   = "8a3b1c2d4e5f60718293a4b5c6d7e8f9"
	projB   = "1f2e3d4c5b6a79880796a5b4c3d2e1f0"
	instA   = "2f1c6a52-8d2e-4b7a-9c3e-5a1b7d0e4f61"
	instB   = "9b0d3e7a-1c4f-4a2b-8e6d-3f5a7c9b1d20"
	instC   = "5e8a2c1d-7b3f-4d6e-a9c0-2b4d6f8a0c13"
	instAny = "c3d5e7f9-0a2b-4c6d-8e0f-1a3b5c7d9e24"
	instEC2 = "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"

	neutronSecret = "neutron-shared-secret-for-tests"
	// sigA is instA's signature under neutronSecret, as neutron's
	// Python computes it: hmac.new(secret, instance_id,
	// hashlib.sha256).hexdigest().
	sigA = "4241ed53771ba05bb34e934cfed5cb374988108eff718aa2dffef7eb098b3fb3"
)

const neutronFleetYAML = `vms:
  - {name: ` + instA + `, ip: 10.0.0.5, network: ` + projA + `}
  - {name: ` + instB + `, ip: 10.0.0.5, network: ` + projB + `}
  - {name: ` + instC + `, ip: 10.0.0.7}
  - {name: ` + instAny + `, ip: any, network: ` + projA + `}
  - {name: ` + instEC2 + `, ip: 10.0.0.8, network: ` + projA + `, provider: aws, instanceId: i-0123456789abcdef0}
`

// neutronConfig returns a Config of an in-memory server of
// neutronFleetYAML with a neutron listener on an ephemeral loopback
// port, whose shared secret is neutronSecret.
func neutronConfig(t *testing.T) server.Config {
	t.Helper()
	fleet, err := fleetfile.Parse([]byte(neutronFleetYAML))
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.DefaultConfig()
	cfg.Store, cfg.DataDir, cfg.Fleet = server.StoreMem, "", fleet
	cfg.MetadataAddr, cfg.AdminAddr, cfg.NeutronAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.NeutronSecretFile = filepath.Join(t.TempDir(), "neutron-secret")
	if err := os.WriteFile(cfg.NeutronSecretFile, []byte(neutronSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// newNeutron returns a Server of cfg that is never run, closed when the
// test ends.
func newNeutron(t *testing.T, cfg server.Config) *server.Server {
	t.Helper()
	s, err := server.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// sign returns instance ID id's signature under neutronSecret.
func sign(id string) string { return signWith(neutronSecret, id) }

// signWith returns instance ID id's signature under secret.
func signWith(secret, id string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(id))
	return hex.EncodeToString(m.Sum(nil))
}

// signed returns the headers neutron's metadata proxy sets on the
// request of instance id of project tenant, from address 10.0.0.5.
func signed(id, tenant string) http.Header {
	return http.Header{
		"X-Forwarded-For":         {"10.0.0.5"},
		"X-Instance-Id":           {id},
		"X-Tenant-Id":             {tenant},
		"X-Instance-Id-Signature": {sign(id)},
	}
}

// serve sends a request with headers h to handler hd and returns the
// answer.
func serve(hd http.Handler, method, target string, h http.Header, body io.Reader) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, body)
	for k, v := range h {
		r.Header[k] = v
	}
	w := httptest.NewRecorder()
	hd.ServeHTTP(w, r)
	return w
}

// with returns h with header k set to vs.
func with(h http.Header, k string, vs ...string) http.Header {
	h = h.Clone()
	if vs == nil {
		delete(h, k)
	} else {
		h[k] = vs
	}
	return h
}

const nameURL = "/metadata/instance/compute/name?api-version=2021-02-01&format=text"

// TestNeutronSignature: neutron's signature of an instance ID is the
// lower-case hex HMAC-SHA256 of the ID under the shared secret; the one
// its Python code computes opens the instance's document.
func TestNeutronSignature(t *testing.T) {
	if got := sign(instA); got != sigA {
		t.Fatalf("sign(%s) = %s, want neutron's %s", instA, got, sigA)
	}
	s := newNeutron(t, neutronConfig(t))
	h := with(signed(instA, projA), "Metadata", "true")
	h["X-Instance-Id-Signature"] = []string{sigA}
	if w := serve(s.Neutron(), "GET", nameURL, h, nil); w.Code != 200 || w.Body.String() != instA {
		t.Fatalf("%d %q, want 200 %q", w.Code, w.Body.String(), instA)
	}
}

// TestNeutronRefusals: each refusal of Nova's handler, with its status:
// a missing or repeated header 400, a signature that is not the
// instance ID's 403, an instance the fleet does not have, or has in
// another project, 404; and a VM of no address 404.
func TestNeutronRefusals(t *testing.T) {
	s := newNeutron(t, neutronConfig(t))
	ok := with(signed(instA, projA), "Metadata", "true")
	for _, c := range []struct {
		name string
		h    http.Header
		code int
		body string
	}{
		{"no headers", http.Header{"Metadata": {"true"}}, 400, `{"error":"the X-Instance-ID header is missing"}`},
		{"no instance", with(ok, "X-Instance-Id"), 400, `{"error":"the X-Instance-ID header is missing"}`},
		{"no signature", with(ok, "X-Instance-Id-Signature"), 400, `{"error":"the X-Instance-ID-Signature header is missing"}`},
		{"no tenant", with(ok, "X-Tenant-Id"), 400, `{"error":"the X-Tenant-ID header is missing"}`},
		// Nova's order: the signature's absence before the tenant's.
		{"no signature, no tenant", with(with(ok, "X-Tenant-Id"), "X-Instance-Id-Signature"), 400, `{"error":"the X-Instance-ID-Signature header is missing"}`},
		{"two instances", with(ok, "X-Instance-Id", instA, instA), 400, `{"error":"the request carries more than one X-Instance-ID header"}`},
		{"two tenants", with(ok, "X-Tenant-Id", projA, projA), 400, `{"error":"the request carries more than one X-Tenant-ID header"}`},
		{"another instance's signature", with(ok, "X-Instance-Id-Signature", sign(instB)), 403,
			`{"error":"X-Instance-ID-Signature is not the signature of X-Instance-ID under the shared secret"}`},
		{"upper-case hex", with(ok, "X-Instance-Id-Signature", strings.ToUpper(sigA)), 403,
			`{"error":"X-Instance-ID-Signature is not the signature of X-Instance-ID under the shared secret"}`},
		{"one digit short", with(ok, "X-Instance-Id-Signature", sigA[:63]), 403,
			`{"error":"X-Instance-ID-Signature is not the signature of X-Instance-ID under the shared secret"}`},
		{"one digit more", with(ok, "X-Instance-Id-Signature", sigA+"0"), 403,
			`{"error":"X-Instance-ID-Signature is not the signature of X-Instance-ID under the shared secret"}`},
		{"empty signature", with(ok, "X-Instance-Id-Signature", ""), 403,
			`{"error":"X-Instance-ID-Signature is not the signature of X-Instance-ID under the shared secret"}`},
		{"two signatures", with(ok, "X-Instance-Id-Signature", sigA, sigA), 403,
			`{"error":"X-Instance-ID-Signature is not the signature of X-Instance-ID under the shared secret"}`},
		{"another secret", with(ok, "X-Instance-Id-Signature", signWith("another secret", instA)), 403,
			`{"error":"X-Instance-ID-Signature is not the signature of X-Instance-ID under the shared secret"}`},
		{"unknown instance", with(signed("0d1e2f3a-4b5c-4d6e-8f70-8192a3b4c5d6", projA), "Metadata", "true"), 404,
			`{"error":"no VM of the fleet is instance \"0d1e2f3a-4b5c-4d6e-8f70-8192a3b4c5d6\" of tenant \"` + projA + `\""}`},
		{"another project's instance", with(signed(instA, projB), "Metadata", "true"), 404,
			`{"error":"no VM of the fleet is instance \"` + instA + `\" of tenant \"` + projB + `\""}`},
		{"empty tenant", with(signed(instA, ""), "Metadata", "true"), 404,
			`{"error":"no VM of the fleet is instance \"` + instA + `\" of tenant \"\""}`},
		{"a VM of no address", with(signed(instAny, projA), "Metadata", "true"), 404,
			`{"error":"VM \"` + instAny + `\" has no address (ip: any): it answers every caller of its API on its network, not one instance; give it an address of its own to serve it through neutron"}`},
	} {
		w := serve(s.Neutron(), "GET", nameURL, c.h, nil)
		if w.Code != c.code || w.Body.String() != c.body+"\n" || w.Header().Get("Content-Type") != "application/json; charset=utf-8" {
			t.Errorf("%s: %d %s %q, want %d %s", c.name, w.Code, w.Header().Get("Content-Type"), w.Body.String(), c.code, c.body)
		}
	}
	if w := serve(s.Neutron(), "GET", nameURL, ok, nil); w.Code != 200 || w.Body.String() != instA {
		t.Fatalf("the request all refusals were made of: %d %q, want 200 %q", w.Code, w.Body.String(), instA)
	}
}

// TestNeutronFindsTheInstance: a signed request reaches the document of
// the VM its instance ID names, whatever other VM shares its address on
// another network; a VM on no network is any project's; the identity
// headers and X-Forwarded-For never reach the metadata APIs.
func TestNeutronFindsTheInstance(t *testing.T) {
	s := newNeutron(t, neutronConfig(t))
	for _, c := range []struct{ id, tenant string }{{instA, projA}, {instB, projB}, {instC, projA}, {instC, "any-project"}} {
		w := serve(s.Neutron(), "GET", nameURL, with(signed(c.id, c.tenant), "Metadata", "true"), nil)
		if w.Code != 200 || w.Body.String() != c.id {
			t.Errorf("%s of %s: %d %q, want 200 %q", c.id, c.tenant, w.Code, w.Body.String(), c.id)
		}
	}

	// The scheduled events of instA are instA's alone.
	ev, err := s.Engine().Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{instA}, Source: forewarn.User})
	if err != nil {
		t.Fatal(err)
	}
	const events = "/metadata/scheduledevents?api-version=2020-07-01"
	w := serve(s.Neutron(), "GET", events, with(signed(instA, projA), "Metadata", "true"), nil)
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"EventId":"`+ev.ID+`"`) || !strings.Contains(w.Body.String(), `"Resources":["`+instA+`"]`) {
		t.Errorf("instA's events: %d %s", w.Code, w.Body.String())
	}
	w = serve(s.Neutron(), "GET", events, with(signed(instB, projB), "Metadata", "true"), nil)
	if w.Code != 200 || w.Body.String() != `{"DocumentIncarnation":1,"Events":[]}` {
		t.Errorf("instB's events: %d %s", w.Code, w.Body.String())
	}

	// An EC2 instance's IMDSv1 keys need no header of the VM's.
	w = serve(s.Neutron(), "GET", "/latest/meta-data/instance-id", signed(instEC2, projA), nil)
	if w.Code != 200 || w.Body.String() != "i-0123456789abcdef0" {
		t.Errorf("EC2 instance-id: %d %q", w.Code, w.Body.String())
	}
	// neutron passes on none of the VM's own headers: without Metadata:
	// true, Azure answers what it answers any request without it.
	w = serve(s.Neutron(), "GET", nameURL, signed(instA, projA), nil)
	if w.Code != 400 || w.Body.String() != `{"error": "Bad request. Required metadata header not specified"}` {
		t.Errorf("Azure without Metadata: true: %d %q", w.Code, w.Body.String())
	}
	// The identity headers of a relay are dropped, not taken.
	h := with(signed(instA, projA), "Metadata", "true")
	h["Forewarn-Relay-Network"], h["Forewarn-Relay-Source"] = []string{projB}, []string{"10.0.0.5:1"}
	if w := serve(s.Neutron(), "GET", nameURL, h, nil); w.Code != 200 || w.Body.String() != instA {
		t.Errorf("with relay headers: %d %q, want 200 %q", w.Code, w.Body.String(), instA)
	}
}

// TestNeutronProxies: with --neutron-proxies, a request from another
// address is refused before its headers are read, and the connection
// closed after the answer.
func TestNeutronProxies(t *testing.T) {
	cfg := neutronConfig(t)
	cfg.NeutronProxies = []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24"), netip.MustParsePrefix("fd00::/64")}
	s := newNeutron(t, cfg)
	h := with(signed(instA, projA), "Metadata", "true")
	for _, c := range []struct {
		from string
		code int
		body string
	}{
		{"10.1.0.9:40000", 200, instA},
		{"[::ffff:10.1.0.9]:40000", 200, instA},
		{"[fd00::7]:40000", 200, instA},
		{"10.1.1.9:40000", 403, `{"error":"the neutron listener answers the neutron metadata proxies of --neutron-proxies only; 10.1.1.9 is none of them"}` + "\n"},
		{"192.0.2.1:1234", 403, `{"error":"the neutron listener answers the neutron metadata proxies of --neutron-proxies only; 192.0.2.1 is none of them"}` + "\n"},
	} {
		r := httptest.NewRequest("GET", nameURL, nil)
		r.RemoteAddr, r.Header = c.from, h.Clone()
		w := httptest.NewRecorder()
		s.Neutron().ServeHTTP(w, r)
		if w.Code != c.code || w.Body.String() != c.body {
			t.Errorf("from %s: %d %q, want %d %q", c.from, w.Code, w.Body.String(), c.code, c.body)
		}
		if closed := w.Header().Get("Connection") == "close"; closed != (c.code == 403) {
			t.Errorf("from %s: Connection %q", c.from, w.Header().Get("Connection"))
		}
	}
}

// TestNeutronPerVMCap: each VM holds at most its cap of requests at once
// through the neutron listener (--max-conns-per-source), counted per
// VM, not per proxy: another VM is still answered, and the VM again
// once its request ends.
func TestNeutronPerVMCap(t *testing.T) {
	cfg := neutronConfig(t)
	cfg.MaxConnsPerSource = 1
	s := newNeutron(t, cfg)

	// An approval whose body is still coming holds instA's one request.
	pr, pw := io.Pipe()
	held := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		held <- serve(s.Neutron(), "POST", "/metadata/scheduledevents?api-version=2020-07-01", with(signed(instA, projA), "Metadata", "true"), pr)
		pr.Close() // an answer that did not wait for the body fails the write below
	}()
	if _, err := pw.Write([]byte("{")); err != nil { // taken once the handler reads the body
		w := <-held
		t.Fatalf("the approval was answered without its body: %d %q", w.Code, w.Body.String())
	}
	w := serve(s.Neutron(), "GET", nameURL, with(signed(instA, projA), "Metadata", "true"), nil)
	if want := `{"error":"too many requests at once for instance \"` + instA + `\""}` + "\n"; w.Code != 503 || w.Body.String() != want {
		t.Errorf("instA's second request: %d %q, want 503 %q", w.Code, w.Body.String(), want)
	}
	if w := serve(s.Neutron(), "GET", nameURL, with(signed(instB, projB), "Metadata", "true"), nil); w.Code != 200 || w.Body.String() != instB {
		t.Errorf("instB, at instA's address on another network: %d %q", w.Code, w.Body.String())
	}
	pw.Close()
	if w := <-held; w.Code != 400 {
		t.Errorf("the held approval, a bad body: %d %q, want 400", w.Code, w.Body.String())
	}
	if w := serve(s.Neutron(), "GET", nameURL, with(signed(instA, projA), "Metadata", "true"), nil); w.Code != 200 || w.Body.String() != instA {
		t.Errorf("instA once its request ended: %d %q", w.Code, w.Body.String())
	}
}

// TestNeutronServer: a running Server answers neutron's requests on its
// neutron listener over real connections, from the proxies it lists,
// and its metadata listener still refuses neutron's headers.
func TestNeutronServer(t *testing.T) {
	cfg := neutronConfig(t)
	cfg.NeutronProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}
	s, err := server.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return")
		}
		if _, err := net.DialTimeout("tcp", s.NeutronAddr().String(), time.Second); err == nil {
			t.Error("the neutron listener is still open")
		}
	}()
	if s.NeutronAddr() == nil || s.RelayAddr() != nil {
		t.Fatalf("NeutronAddr %v, RelayAddr %v", s.NeutronAddr(), s.RelayAddr())
	}

	nt := "http://" + s.NeutronAddr().String()
	proxy := from(t, "127.0.0.2")
	hdr := func(h http.Header) []string {
		var kv []string
		for k, v := range h {
			kv = append(kv, k, v[0])
		}
		return kv
	}
	ok := with(signed(instA, projA), "Metadata", "true")
	if code, body := get(t, proxy, nt+nameURL, hdr(ok)...); code != 200 || body != instA {
		t.Errorf("instA: %d %q", code, body)
	}
	if code, body := get(t, proxy, nt+nameURL, hdr(with(signed(instB, projB), "Metadata", "true"))...); code != 200 || body != instB {
		t.Errorf("instB: %d %q", code, body)
	}
	if code, body := get(t, proxy, nt+nameURL, hdr(with(ok, "X-Instance-Id-Signature", sign(instB)))...); code != 403 ||
		body != `{"error":"X-Instance-ID-Signature is not the signature of X-Instance-ID under the shared secret"}`+"\n" {
		t.Errorf("a wrong signature: %d %q", code, body)
	}
	if code, body := get(t, proxy, nt+nameURL, hdr(with(ok, "X-Tenant-Id"))...); code != 400 || body != `{"error":"the X-Tenant-ID header is missing"}`+"\n" {
		t.Errorf("no tenant: %d %q", code, body)
	}
	if code, body := get(t, proxy, nt+nameURL, hdr(signed(instA, projB))...); code != 404 ||
		body != `{"error":"no VM of the fleet is instance \"`+instA+`\" of tenant \"`+projB+`\""}`+"\n" {
		t.Errorf("another project: %d %q", code, body)
	}
	if code, body := get(t, from(t, "127.0.0.3"), nt+nameURL, hdr(ok)...); code != 403 ||
		body != `{"error":"the neutron listener answers the neutron metadata proxies of --neutron-proxies only; 127.0.0.3 is none of them"}`+"\n" {
		t.Errorf("a stranger: %d %q", code, body)
	}
	// The metadata listener takes no identity from neutron's headers.
	if code, body := get(t, from(t, "127.0.0.2"), "http://"+s.MetadataAddr().String()+nameURL, hdr(ok)...); code != 403 ||
		body != `{"error":"identity headers are taken from authenticated relays only"}`+"\n" {
		t.Errorf("the metadata listener: %d %q", code, body)
	}
}

// TestNeutronConfig: the neutron listener needs its shared secret and
// the secret its listener, each refusal naming the flag; a secret file
// that is missing, empty or open to others is refused, and a short
// secret is taken with a warning.
func TestNeutronConfig(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(*server.Config)
		want string
	}{
		{"no secret file", func(c *server.Config) { c.NeutronSecretFile = "" },
			"--neutron-addr needs --neutron-secret-file FILE: the shared secret (neutron's metadata_proxy_shared_secret) that signs each request's instance ID"},
		{"no listener", func(c *server.Config) { c.NeutronAddr = "" },
			"--neutron-secret-file needs --neutron-addr, the neutron listener it configures"},
		{"proxies without a listener", func(c *server.Config) {
			c.NeutronAddr, c.NeutronSecretFile = "", ""
			c.NeutronProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
		}, "--neutron-proxies needs --neutron-addr, the neutron listener it configures"},
		{"a bad address", func(c *server.Config) { c.NeutronAddr = "8775" }, `--neutron-addr "8775": address 8775: missing port in address`},
		{"a missing file", func(c *server.Config) { c.NeutronSecretFile = filepath.Join(t.TempDir(), "none") },
			"--neutron-secret-file: open "},
		{"an invalid prefix", func(c *server.Config) { c.NeutronProxies = []netip.Prefix{{}} },
			"--neutron-proxies holds invalid Prefix: want address prefixes (CIDR), e.g. 10.0.0.0/24"},
	} {
		cfg := neutronConfig(t)
		c.set(&cfg)
		_, err := server.New(t.Context(), cfg)
		if forewarn.ErrorCode(err) != forewarn.EINVALID || !strings.HasPrefix(forewarn.ErrorMessage(err), c.want) {
			t.Errorf("%s: %v, want EINVALID %q", c.name, err, c.want)
		}
	}

	for _, c := range []struct {
		name   string
		secret string
		mode   os.FileMode
		want   string // %[1]s: the file
	}{
		{"empty", " \n", 0o600, "--neutron-secret-file %[1]s is empty: write neutron's metadata_proxy_shared_secret to it"},
		{"readable by others", neutronSecret, 0o644, "--neutron-secret-file %[1]s has mode 0644: others than its owner can read or change it; run: chmod 600 %[1]s"},
		{"readable by its group", neutronSecret, 0o640, "--neutron-secret-file %[1]s has mode 0640: others than its owner can read or change it; run: chmod 600 %[1]s"},
	} {
		cfg := neutronConfig(t)
		if err := os.WriteFile(cfg.NeutronSecretFile, []byte(c.secret), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(cfg.NeutronSecretFile, c.mode); err != nil {
			t.Fatal(err)
		}
		// A given listener is closed when the start is refused.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cfg.NeutronListener = ln
		_, err = server.New(t.Context(), cfg)
		if want := fmt.Sprintf(c.want, cfg.NeutronSecretFile); forewarn.ErrorCode(err) != forewarn.EINVALID || forewarn.ErrorMessage(err) != want {
			t.Errorf("%s: %v, want EINVALID %q", c.name, err, want)
		}
		if _, err := ln.Accept(); err == nil {
			t.Errorf("%s: the refused start left the given listener open", c.name)
		}
	}

	// A short secret is neutron's to change: taken, with a warning.
	cfg := neutronConfig(t)
	if err := os.WriteFile(cfg.NeutronSecretFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	s := newNeutron(t, cfg)
	if !strings.Contains(logs.String(), "the neutron shared secret is 6 bytes, shorter than 16") {
		t.Errorf("no warning of the short secret in %s", logs.String())
	}
	h := http.Header{"Metadata": {"true"}, "X-Instance-Id": {instA}, "X-Tenant-Id": {projA}, "X-Instance-Id-Signature": {signWith("s3cret", instA)}}
	if w := serve(s.Neutron(), "GET", nameURL, h, nil); w.Code != 200 || w.Body.String() != instA {
		t.Errorf("signed with the short secret: %d %q", w.Code, w.Body.String())
	}
	// Without a neutron listener there is no handler and no address.
	if s := newNeutron(t, memConfig(t)); s.Neutron() != nil || s.NeutronAddr() != nil {
		t.Errorf("a server without a neutron listener: %v %v", s.Neutron(), s.NeutronAddr())
	}
}

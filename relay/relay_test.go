package relay_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/fleetfile"
	"github.com/forewarn/forewarn/internal/testpki"
	"github.com/forewarn/forewarn/relay"
	"github.com/forewarn/forewarn/server"
)

// The fleet of these tests: on network blue, an Azure VM at 127.0.0.3,
// a GCE VM at 127.0.0.4 and an EC2 VM at 127.0.0.5; on network red, an
// Azure VM at 127.0.0.3 too; and a VM reached directly at 127.0.0.6.
const fleetYAML = `
vms:
  - {name: blue_az, ip: 127.0.0.3, network: blue}
  - {name: blue_gce, ip: 127.0.0.4, network: blue, provider: gce}
  - {name: blue_ec2, ip: 127.0.0.5, network: blue, provider: aws, instanceId: i-0123456789abcdef0, httpPutResponseHopLimit: 3}
  - {name: red_az, ip: 127.0.0.3, network: red}
  - {name: direct_az, ip: 127.0.0.6}
`

// pki is the certificates of one test: the servers' and each relay's.
type pki struct {
	dir                  string
	server, blue, redSam testpki.Files
	both                 testpki.Files // host-both: blue and green
	stranger             testpki.Files // signed by another authority
	unlisted             testpki.Files // signed, but named in no relays file
	relays               string        // the relays file
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	ca, err := testpki.NewCA("forewarn test CA")
	if err != nil {
		t.Fatal(err)
	}
	other, err := testpki.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{dir: t.TempDir()}
	must := func(f testpki.Files, err error) testpki.Files {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	p.server = must(ca.Write(p.dir, "server", "forewarn", false, "127.0.0.1", "localhost"))
	p.blue = must(ca.Write(p.dir, "host-blue", "host-blue", true))
	p.redSam = must(ca.Write(p.dir, "host-red", "host-red", true))
	p.both = must(ca.Write(p.dir, "host-both", "host-both", true))
	p.stranger = must(other.Write(p.dir, "stranger", "host-blue", true))
	p.unlisted = must(ca.Write(p.dir, "unlisted", "host-nobody", true))
	p.relays = filepath.Join(p.dir, "relays.yaml")
	if err := os.WriteFile(p.relays, []byte("host-blue: [blue]\nhost-red: [red]\nhost-both: [blue, green]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// startServer runs a server of fleetYAML with a relay listener.
func startServer(t *testing.T, p *pki) *server.Server {
	t.Helper()
	return startServerOf(t, p, fleetYAML)
}

// startServerOf runs a server of the fleet doc with a relay listener.
func startServerOf(t *testing.T, p *pki, doc string) *server.Server {
	t.Helper()
	s, _ := startStoppable(t, p, doc)
	return s
}

// startStoppable runs a server of the fleet doc with a relay listener,
// and returns a function that shuts it down (at most once).
func startStoppable(t *testing.T, p *pki, doc string) (*server.Server, func()) {
	t.Helper()
	fleet, err := fleetfile.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.DefaultConfig()
	cfg.Store, cfg.Fleet, cfg.DataDir = server.StoreMem, fleet, ""
	cfg.MetadataAddr, cfg.AdminAddr, cfg.RelayAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.RelayCertFile, cfg.RelayKeyFile, cfg.RelayCAFile, cfg.RelaysFile = p.server.Cert, p.server.Key, p.server.CA, p.relays
	s, err := server.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("server: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return s, stop
}

// startRelay runs a relay whose listener of network listens on
// 127.0.0.2, with creds, in front of servers.
func startRelay(t *testing.T, creds testpki.Files, network string, servers ...string) *relay.Relay {
	t.Helper()
	cfg := relay.DefaultConfig()
	cfg.Listeners = []relay.Listener{{Network: network, Addr: "127.0.0.2:0"}}
	cfg.Servers = servers
	cfg.CertFile, cfg.KeyFile, cfg.CAFile = creds.Cert, creds.Key, creds.CA
	cfg.MetricsAddr = "127.0.0.1:0"
	cfg.RetryFor = 300 * time.Millisecond
	r, err := relay.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	})
	return r
}

// from returns an HTTP client whose connections come from address src.
func from(src string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, Proxy: nil}}
}

// call sends a request and returns its status, headers and body.
func call(t *testing.T, c *http.Client, method, url string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Close {
		// net/http reads "Connection: close" into resp.Close.
		resp.Header.Set("Connection", "close")
	}
	return resp.StatusCode, resp.Header, string(b)
}

const azPath = "/metadata/scheduledevents?api-version=2020-07-01"

func TestRelayIdentity(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p)
	srvURL := "https://" + s.RelayAddr().String()
	blue := startRelay(t, p.blue, "blue", srvURL)
	via := "http://" + blue.Addrs()[0].String()
	direct := "http://" + s.MetadataAddr().String()

	// The Azure VM of blue at 127.0.0.3, through the relay: its own
	// document (no events yet), not red_az's, which has its address.
	status, h, body := call(t, from("127.0.0.3"), "GET", via+azPath, map[string]string{"Metadata": "true"})
	if status != 200 || body != `{"DocumentIncarnation":1,"Events":[]}` {
		t.Fatalf("blue_az through the relay: %d %q", status, body)
	}
	for k := range h {
		if strings.HasPrefix(k, "Forewarn-") {
			t.Errorf("the relay passed on the server's header %s", k)
		}
	}
	// Directly, 127.0.0.3 is no VM: blue_az and red_az are on networks.
	status, _, body = call(t, from("127.0.0.3"), "GET", direct+azPath, map[string]string{"Metadata": "true"})
	if status != 403 || !strings.Contains(body, "source address 127.0.0.3") {
		t.Fatalf("127.0.0.3 directly: %d %q", status, body)
	}
	// A VM that claims network red through the relay of blue is still
	// blue_az: its headers are dropped.
	st1, _, b1 := call(t, from("127.0.0.3"), "GET", via+"/metadata/instance/compute/name?api-version=2021-02-01&format=text",
		map[string]string{"Metadata": "true", "Forewarn-Relay-Network": "red", "Forewarn-Relay-Source": "127.0.0.6:1"})
	if st1 != 200 || b1 != "blue_az" {
		t.Fatalf("a VM's identity headers were believed: %d %q", st1, b1)
	}
	status, _, body = call(t, from("127.0.0.3"), "GET", via+azPath, map[string]string{"Metadata": "true",
		"Forewarn-Relay-Network": "red", "X-Instance-ID": "red_az"})
	if status != 200 || body != `{"DocumentIncarnation":1,"Events":[]}` {
		t.Fatalf("with identity headers through the relay: %d %q", status, body)
	}
	// The same headers sent directly are refused.
	status, _, body = call(t, from("127.0.0.6"), "GET", direct+azPath, map[string]string{"Metadata": "true", "Forewarn-Relay-Network": "blue"})
	if status != 403 || body != `{"error":"identity headers are taken from authenticated relays only"}`+"\n" {
		t.Fatalf("identity headers sent directly: %d %q", status, body)
	}
	// An address of no VM of blue is refused, naming the network.
	status, _, body = call(t, from("127.0.0.6"), "GET", via+azPath, map[string]string{"Metadata": "true"})
	if status != 403 || !strings.Contains(body, "127.0.0.6 on network blue") {
		t.Fatalf("127.0.0.6 through the relay of blue: %d %q", status, body)
	}
}

func TestRelayRefusedCredentials(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p)
	srvURL := "https://" + s.RelayAddr().String()
	for _, tc := range []struct {
		name    string
		creds   testpki.Files
		network string
		status  int
		body    string
	}{
		{"another authority", p.stranger, "blue", 502, "no metadata server answered\n"},
		{"a name no relays file lists", p.unlisted, "blue", 502, "no metadata server answered\n"},
		{"a network of another relay", p.redSam, "blue", 403, `{"error":"relay \"host-red\" does not serve network \"blue\""}` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startRelay(t, tc.creds, tc.network, srvURL)
			status, _, body := call(t, from("127.0.0.3"), "GET", "http://"+r.Addrs()[0].String()+azPath, map[string]string{"Metadata": "true"})
			if status != tc.status || body != tc.body {
				t.Fatalf("got %d %q, want %d %q", status, body, tc.status, tc.body)
			}
		})
	}
}

func TestRelayEC2Token(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p)
	r := startRelay(t, p.blue, "blue", "https://"+s.RelayAddr().String())
	via := "http://" + r.Addrs()[0].String()
	c := from("127.0.0.5")
	status, h, tok := call(t, c, "PUT", via+"/latest/api/token", map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": "60"})
	if status != 200 || len(tok) != 56 || h.Get("Connection") != "close" || h.Get("Forewarn-Hop-Limit") != "" {
		t.Fatalf("token through the relay: %d %q, headers %v", status, tok, h)
	}
	status, _, body := call(t, c, "GET", via+"/latest/meta-data/instance-id", map[string]string{"X-aws-ec2-metadata-token": tok})
	if status != 200 || body != "i-0123456789abcdef0" {
		t.Fatalf("instance-id with the token: %d %q", status, body)
	}
	// A token request that came through a proxy is refused by the relay.
	status, _, _ = call(t, c, "PUT", via+"/latest/api/token", map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": "60", "X-Forwarded-For": "10.0.0.1"})
	if status != 403 {
		t.Fatalf("token request with X-Forwarded-For: %d, want 403", status)
	}
	// A base URL with a trailing slash: the same token path, both ways.
	status, _, tok = call(t, c, "PUT", via+"//latest/api/token", map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": "60"})
	if status != 200 || len(tok) != 56 {
		t.Fatalf("PUT //latest/api/token through the relay: %d %q", status, tok)
	}
	status, _, _ = call(t, c, "PUT", via+"//latest/api/token", map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": "60", "X-Forwarded-For": "10.0.0.1"})
	if status != 403 {
		t.Fatalf("PUT //latest/api/token with X-Forwarded-For: %d, want 403", status)
	}
}

func TestRelayGCELongPoll(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p)
	r := startRelay(t, p.blue, "blue", "https://"+s.RelayAddr().String())
	via := "http://" + r.Addrs()[0].String()
	c := from("127.0.0.4")
	url := via + "/computeMetadata/v1/instance/maintenance-event"
	status, h, body := call(t, c, "GET", url, map[string]string{"Metadata-Flavor": "Google"})
	if status != 200 || body != "NONE" || h.Get("Etag") == "" {
		t.Fatalf("maintenance-event through the relay: %d %q %v", status, body, h)
	}
	got := longPoll(c, url, h.Get("Etag"))
	waitFor(t, "the long-poll held", func() bool { return heldOn(s) == 1 })
	select {
	case a := <-got:
		t.Fatalf("the long-poll was answered before any change: %+v", a)
	default:
	}
	wantMigration(t, s, got)
	if n := r.UpstreamConns(); len(n) != 1 || n[0] != 2 {
		t.Errorf("upstream connections %v, want [2]: a short one, and HTTP/2 for the long-poll", n)
	}
}

func TestRelayFailover(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p)
	// The first server is a port nobody listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "https://" + ln.Addr().String()
	ln.Close()
	r := startRelay(t, p.blue, "blue", dead, "https://"+s.RelayAddr().String())
	via := "http://" + r.Addrs()[0].String()
	for i := range 3 {
		status, _, body := call(t, from("127.0.0.3"), "GET", via+azPath, map[string]string{"Metadata": "true"})
		if status != 200 || body != `{"DocumentIncarnation":1,"Events":[]}` {
			t.Fatalf("request %d: %d %q", i, status, body)
		}
	}
	if n := r.UpstreamConns(); n[0] != 0 || n[1] != 1 {
		t.Fatalf("upstream connections %v, want [0 1]", n)
	}
	// The relay stays on the server that answered: its metrics say it
	// moved once, after one error.
	_, _, m := call(t, from("127.0.0.1"), "GET", "http://"+r.MetricsAddr().String()+"/metrics", nil)
	for _, want := range []string{"forewarn_relay_failovers_total 1\n",
		`forewarn_relay_upstream_errors_total{server="` + strings.TrimPrefix(dead, "https://") + `"} 1` + "\n",
		`forewarn_relay_requests_total{code="200",network="blue"} 3` + "\n"} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestParseListener(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want relay.Listener
		err  string
	}{
		{"blue=169.254.169.254:80", relay.Listener{Network: "blue", Addr: "169.254.169.254:80"}, ""},
		{"blue=169.254.169.254:80@br-blue", relay.Listener{Network: "blue", Addr: "169.254.169.254:80", Device: "br-blue"}, ""},
		{"169.254.169.254:80", relay.Listener{}, `--listen "169.254.169.254:80": want NETWORK=HOST:PORT[@DEVICE]`},
		{"=169.254.169.254:80", relay.Listener{}, `--listen =169.254.169.254:80: network "" is not a network name`},
		{"blue=169.254.169.254", relay.Listener{}, "--listen blue=169.254.169.254: address 169.254.169.254: missing port in address"},
		{"blue=:80@a-name-far-too-long", relay.Listener{}, `"a-name-far-too-long" is not a network interface's name`},
	} {
		l, err := relay.ParseListener(tc.in)
		if tc.err == "" && (err != nil || l != tc.want) {
			t.Errorf("%q: got %+v, %v; want %+v", tc.in, l, err, tc.want)
		}
		if tc.err != "" && (err == nil || !strings.Contains(forewarn.ErrorMessage(err), tc.err)) {
			t.Errorf("%q: got %v, want an error with %q", tc.in, err, tc.err)
		}
		if err == nil && l.String() != tc.in {
			t.Errorf("%q: String gives %q", tc.in, l.String())
		}
	}
}

func TestRelayConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*relay.Config)
		want string
	}{
		{"no listener", func(c *relay.Config) { c.Listeners = nil }, "give at least one --listen"},
		{"no server", func(c *relay.Config) { c.Servers = nil }, "give --server URL[,URL...]"},
		{"plain http", func(c *relay.Config) { c.Servers = []string{"http://198.18.0.1:8172"} }, `--server "http://198.18.0.1:8172": want https://HOST:PORT`},
		{"no key", func(c *relay.Config) { c.KeyFile = "" }, "give --key"},
		{"no upstream conns", func(c *relay.Config) { c.MaxUpstreamConns = 0 }, "--max-upstream-conns 0 must be positive"},
		{"short conns over the cap", func(c *relay.Config) { c.ShortConns = 8 }, "--short-conns 8 must be from 0 to --max-upstream-conns - 1 (7)"},
		{"negative short conns", func(c *relay.Config) { c.ShortConns = -1 }, "--short-conns -1 must be from 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := relay.DefaultConfig()
			c.Listeners = []relay.Listener{{Network: "blue", Addr: "127.0.0.2:0"}}
			c.Servers = []string{"https://198.18.0.1:8172"}
			c.CertFile, c.KeyFile, c.CAFile = "c", "k", "ca"
			tc.set(&c)
			err := c.Validate()
			if forewarn.ErrorCode(err) != forewarn.EINVALID || !strings.HasPrefix(forewarn.ErrorMessage(err), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// TestRelayShutdownFailover: a server shutting down answers the
// long-polls it holds for a relay with a request to send them again; the
// relay holds them on the next server, and the VM sees only that one's
// answer.
func TestRelayShutdownFailover(t *testing.T) {
	p := newPKI(t)
	s1, stop1 := startStoppable(t, p, fleetYAML)
	s2 := startServer(t, p)
	r := startRelay(t, p.blue, "blue", "https://"+s1.RelayAddr().String(), "https://"+s2.RelayAddr().String())
	url := "http://" + r.Addrs()[0].String() + "/computeMetadata/v1/instance/maintenance-event"
	c := from("127.0.0.4")
	status, h, body := call(t, c, "GET", url, map[string]string{"Metadata-Flavor": "Google"})
	if status != 200 || body != "NONE" {
		t.Fatalf("maintenance-event: %d %q", status, body)
	}
	got := longPoll(c, url, h.Get("Etag"))
	waitFor(t, "the long-poll held on the first server", func() bool { return heldOn(s1) == 1 })
	stop1()
	waitFor(t, "the long-poll held on the second server", func() bool { return heldOn(s2) == 1 })
	select {
	case a := <-got:
		t.Fatalf("the VM was answered when the first server shut down: %+v", a)
	default:
	}
	wantMigration(t, s2, got)
}

// wantMigration creates a live migration of blue_gce on s and checks
// that the long-poll got is answered with it.
func wantMigration(t *testing.T, s *server.Server, got <-chan answer) {
	t.Helper()
	if _, err := s.Engine().Create(context.Background(), engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"blue_gce"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-got:
		if a.status != 200 || a.body != "MIGRATE_ON_HOST_MAINTENANCE" {
			t.Fatalf("the long-poll's answer: %+v", a)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the long-poll was not answered after the event")
	}
}

// waitFor polls cond until it holds, for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// heldOn returns the long-polls s holds now, as its metrics give them.
func heldOn(s *server.Server) int {
	mfs, err := s.Metrics().Registry().Gather()
	if err != nil {
		return -1
	}
	for _, mf := range mfs {
		if mf.GetName() == "forewarn_gce_long_polls_held" {
			return int(mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
	return -1
}

// TestRelayPerVMRateLimit: behind one relay, a VM over its rate limit
// is throttled alone; its neighbour on the same relay connection is not.
func TestRelayPerVMRateLimit(t *testing.T) {
	p := newPKI(t)
	s := startServerOf(t, p, fleetYAML+"  - {name: blue_az2, ip: 127.0.0.7, network: blue}\n")
	r := startRelay(t, p.blue, "blue", "https://"+s.RelayAddr().String())
	via := "http://" + r.Addrs()[0].String() + azPath
	hdr := map[string]string{"Metadata": "true"}
	flooder, neighbour := from("127.0.0.3"), from("127.0.0.7")
	throttled := 0
	for range 40 {
		if status, _, _ := call(t, flooder, "GET", via, hdr); status == 429 {
			throttled++
		}
	}
	if throttled == 0 {
		t.Fatal("40 requests at once over Azure's 5 a second were never throttled")
	}
	for i := range 3 {
		if status, _, body := call(t, neighbour, "GET", via, hdr); status != 200 {
			t.Fatalf("the neighbour's request %d: %d %q", i, status, body)
		}
	}
	if n := r.UpstreamConns(); n[0] != 1 {
		t.Fatalf("upstream connections %v: both VMs share one", n)
	}
}

// TestRelayHopLimit: the relay sets the VM's hop limit, which the
// server names, as the IP TTL of its token answer to the VM.
func TestRelayHopLimit(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p)
	r := startRelay(t, p.blue, "blue", "https://"+s.RelayAddr().String())
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := &ttlListener{Listener: ln}
	hs := &http.Server{Handler: r.Handler("blue"), ConnContext: relay.ConnContext}
	go hs.Serve(rec)
	t.Cleanup(func() { hs.Close() })
	status, h, tok := call(t, from("127.0.0.5"), "PUT", "http://"+ln.Addr().String()+"/latest/api/token",
		map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": "60"})
	if status != 200 || len(tok) != 56 || h.Get("Connection") != "close" {
		t.Fatalf("token: %d %q %v", status, tok, h)
	}
	waitFor(t, "the VM's connection to close", func() bool { return len(rec.seen()) == 1 })
	if got := rec.seen(); got[0] != 3 {
		t.Fatalf("IP TTL of the token answer %d, want the VM's hop limit 3", got[0])
	}
}

// ttlListener notes the IP TTL of each connection as it closes.
type ttlListener struct {
	net.Listener
	mu   sync.Mutex
	ttls []int
}

func (l *ttlListener) seen() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ttls)
}

func (l *ttlListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &ttlConn{TCPConn: c.(*net.TCPConn), l: l}, nil
}

type ttlConn struct {
	*net.TCPConn
	l *ttlListener
}

func (c *ttlConn) Close() error {
	ttl := -1
	if rc, err := c.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { ttl, _ = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_TTL) })
	}
	c.l.mu.Lock()
	c.l.ttls = append(c.l.ttls, ttl)
	c.l.mu.Unlock()
	return c.TCPConn.Close()
}

// TestRelayRefusesWhatHTTP2CannotCarry: a VM's request that the relay's
// HTTP/2 connection could not carry is refused at the relay, and does
// not count as the server failing (which would move the relay on).
func TestRelayRefusesWhatHTTP2CannotCarry(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p)
	r := startRelay(t, p.blue, "blue", "https://"+s.RelayAddr().String())
	via := "http://" + r.Addrs()[0].String()
	big := map[string]string{"Metadata": "true"}
	for i := range 400 {
		big[fmt.Sprintf("X-Pad-%d", i)] = strings.Repeat("x", 20)
	}
	if status, _, body := call(t, from("127.0.0.3"), "GET", via+azPath, big); status != 431 || body != "request header fields too large\n" {
		t.Fatalf("400 headers: %d %q", status, body)
	}
	if status, _, _ := call(t, from("127.0.0.3"), "CONNECT", via+azPath, nil); status != 405 {
		t.Fatalf("CONNECT: %d", status)
	}
	_, _, m := call(t, from("127.0.0.1"), "GET", "http://"+r.MetricsAddr().String()+"/metrics", nil)
	for _, want := range []string{`forewarn_relay_refused_total{reason="headers"} 1`, `forewarn_relay_refused_total{reason="method"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(m, "forewarn_relay_failovers_total 1") || strings.Contains(m, "forewarn_relay_upstream_errors_total{") {
		t.Errorf("a VM's request counted as a server failing:\n%s", m)
	}
}

// answer is a long-poll's answer: its status and body, or status 0 and
// the client's error.
type answer struct {
	status int
	body   string
}

// longPoll sends c's GCE wait_for_change request for url after etag,
// and returns where its answer will arrive.
func longPoll(c *http.Client, url, etag string) <-chan answer {
	got := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest("GET", url+"?wait_for_change=true&last_etag="+etag, nil)
		req.Header.Set("Metadata-Flavor", "Google")
		resp, err := c.Do(req)
		if err != nil {
			got <- answer{0, err.Error()}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- answer{resp.StatusCode, string(b)}
	}()
	return got
}

// metricLine returns the line of the relay's metrics that starts with
// series, or "".
func metricLine(t *testing.T, r *relay.Relay, series string) string {
	t.Helper()
	_, _, m := call(t, from("127.0.0.1"), "GET", "http://"+r.MetricsAddr().String()+"/metrics", nil)
	for l := range strings.Lines(m) {
		if strings.HasPrefix(l, series+" ") {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// upstreamRequests returns the relay's count of requests to s on each
// kind of connection.
func upstreamRequests(t *testing.T, r *relay.Relay, s *server.Server) (short, h2 string) {
	t.Helper()
	k := `forewarn_relay_upstream_requests_total{proto="%s",server="` + s.RelayAddr().String() + `"}`
	return metricLine(t, r, fmt.Sprintf(k, "http/1.1")), metricLine(t, r, fmt.Sprintf(k, "h2"))
}

// TestRelayShortConns: requests the server answers at once go on one
// HTTP/1.1 connection, kept alive; a long-poll goes on HTTP/2; a short
// connection that broke while idle costs the VM nothing: its request
// goes on HTTP/2.
func TestRelayShortConns(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p)
	r := startRelay(t, p.blue, "blue", "https://"+s.RelayAddr().String())
	via := "http://" + r.Addrs()[0].String()
	az := func(i int) {
		t.Helper()
		status, _, body := call(t, from("127.0.0.3"), "GET", via+azPath, map[string]string{"Metadata": "true"})
		if status != 200 || body != `{"DocumentIncarnation":1,"Events":[]}` {
			t.Fatalf("request %d: %d %q", i, status, body)
		}
	}
	for i := range 3 {
		az(i)
	}
	short, h2 := upstreamRequests(t, r, s)
	if !strings.HasSuffix(short, "} 3") || !strings.HasSuffix(h2, "} 0") {
		t.Fatalf("after 3 GETs: %q and %q, want 3 on http/1.1 and none on h2", short, h2)
	}
	if n := r.UpstreamConns(); n[0] != 1 {
		t.Fatalf("upstream connections %v, want [1]: one short connection, kept alive", n)
	}

	url := via + "/computeMetadata/v1/instance/maintenance-event"
	c := from("127.0.0.4")
	status, h, _ := call(t, c, "GET", url, map[string]string{"Metadata-Flavor": "Google"})
	if status != 200 {
		t.Fatalf("maintenance-event: %d", status)
	}
	got := longPoll(c, url, h.Get("Etag"))
	waitFor(t, "the long-poll held", func() bool { return heldOn(s) == 1 })
	short, h2 = upstreamRequests(t, r, s)
	if !strings.HasSuffix(short, "} 4") || !strings.HasSuffix(h2, "} 1") {
		t.Fatalf("after a GET and a long-poll: %q and %q, want 4 on http/1.1 and 1 on h2", short, h2)
	}
	if n := r.UpstreamConns(); n[0] != 2 {
		t.Fatalf("upstream connections %v, want [2]: the short one and HTTP/2", n)
	}

	if n := r.BreakIdleShort(0); n != 1 {
		t.Fatalf("%d idle short connections, want 1", n)
	}
	az(4)
	short, h2 = upstreamRequests(t, r, s)
	if !strings.HasSuffix(short, "} 4") || !strings.HasSuffix(h2, "} 2") {
		t.Fatalf("after the broken connection: %q and %q, want the GET on h2", short, h2)
	}
	if l := metricLine(t, r, "forewarn_relay_failovers_total"); l != "forewarn_relay_failovers_total 0" {
		t.Fatalf("a broken short connection made the relay fail over: %q", l)
	}
	az(5) // a new short connection
	if short, _ = upstreamRequests(t, r, s); !strings.HasSuffix(short, "} 5") {
		t.Fatalf("after a new short connection: %q, want 5", short)
	}
	select {
	case a := <-got:
		t.Fatalf("the long-poll was answered: %+v", a)
	default:
	}
}

// TestRelayShortConnsShareTheCap: short connections count against
// --max-upstream-conns; HTTP/2 takes back the room of an idle one, and
// a short request finds no room then and goes on HTTP/2.
func TestRelayShortConnsShareTheCap(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p)
	r := startRelay(t, p.blue, "blue", "https://"+s.RelayAddr().String())
	via := "http://" + r.Addrs()[0].String()
	url := via + "/computeMetadata/v1/instance/maintenance-event"
	c := from("127.0.0.4")
	status, h, _ := call(t, c, "GET", url, map[string]string{"Metadata-Flavor": "Google"})
	if status != 200 {
		t.Fatalf("maintenance-event: %d", status)
	}
	if n := r.UpstreamConns(); n[0] != 1 {
		t.Fatalf("upstream connections %v, want [1]", n)
	}
	r.SetUpstreamMax(0, 1)
	got := longPoll(c, url, h.Get("Etag"))
	waitFor(t, "the long-poll held", func() bool { return heldOn(s) == 1 })
	if n := r.UpstreamConns(); n[0] != 1 {
		t.Fatalf("upstream connections %v, want [1]: HTTP/2 in the short one's room", n)
	}
	status, _, _ = call(t, c, "GET", url, map[string]string{"Metadata-Flavor": "Google"})
	if status != 200 {
		t.Fatalf("maintenance-event: %d", status)
	}
	short, h2 := upstreamRequests(t, r, s)
	if !strings.HasSuffix(short, "} 1") || !strings.HasSuffix(h2, "} 2") {
		t.Fatalf("%q and %q, want the GET after the cap on h2", short, h2)
	}
	if n := r.UpstreamConns(); n[0] != 1 {
		t.Fatalf("upstream connections %v, want [1]", n)
	}
	select {
	case a := <-got:
		t.Fatalf("the long-poll was answered: %+v", a)
	default:
	}
}

func TestIsShort(t *testing.T) {
	for q, want := range map[string]bool{
		"":                                 true,
		"api-version=2020-07-01":           true,
		"recursive=true&alt=json":          true,
		"wait_for_change=true":             false,
		"WAIT_FOR_CHANGE=true":             false,
		"wait_for_change=false":            false, // not worth telling apart
		"w%61it_for_change=true":           false,
		"last_etag=1&Wait_For_Change=true": false,
	} {
		if got := relay.IsShort("GET", &neturl.URL{Path: "/x", RawQuery: q}); got != want {
			t.Errorf("isShort(%q) = %v, want %v", q, got, want)
		}
	}
	if relay.IsShort("CONNECT", &neturl.URL{}) {
		t.Error("CONNECT is short")
	}
}

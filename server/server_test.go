package server_test

import (
	"context"
	"io"
	"net"
	"net/http"
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

const fleetYAML = `vms:
  - {name: web_0, ip: 127.0.0.2}
  - {name: gce_0, ip: 127.0.0.3, provider: gce}
`

// memConfig returns a Config of an in-memory server of fleetYAML on
// ephemeral loopback ports.
func memConfig(t *testing.T) server.Config {
	t.Helper()
	fleet, err := fleetfile.Parse([]byte(fleetYAML))
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.DefaultConfig()
	cfg.Store, cfg.DataDir, cfg.Fleet = server.StoreMem, "", fleet
	cfg.MetadataAddr, cfg.AdminAddr = "127.0.0.1:0", "127.0.0.1:0"
	return cfg
}

// from returns an HTTP client whose connections come from ip.
func from(t *testing.T, ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func get(t *testing.T, hc *http.Client, url string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestNewRun: a Server of a given fleet in memory serves both APIs on
// the ports it chose, to the VMs by their addresses, acts through its
// engine, and shuts down when Run's context ends, closing the engine.
func TestNewRun(t *testing.T) {
	s, err := server.New(t.Context(), memConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	md := "http://" + s.MetadataAddr().String()
	code, body := get(t, from(t, "127.0.0.2"), md+"/metadata/scheduledevents?api-version=2020-07-01", "Metadata", "true")
	if code != 200 || body != `{"DocumentIncarnation":1,"Events":[]}` {
		t.Fatalf("Azure document: %d %s", code, body)
	}
	if code, body = get(t, from(t, "127.0.0.3"), md+"/computeMetadata/v1/instance/maintenance-event", "Metadata-Flavor", "Google"); code != 200 || body != "NONE" {
		t.Fatalf("GCE key: %d %s", code, body)
	}
	if code, _ = get(t, from(t, "127.0.0.9"), md+"/metadata/scheduledevents?api-version=2020-07-01", "Metadata", "true"); code != 403 {
		t.Fatalf("a stranger got %d, want 403", code)
	}
	ev, err := s.Engine().Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_0"}, Source: forewarn.User})
	if err != nil {
		t.Fatal(err)
	}
	if _, body = get(t, from(t, "127.0.0.2"), md+"/metadata/scheduledevents?api-version=2020-07-01", "Metadata", "true"); !strings.Contains(body, ev.ID) {
		t.Fatalf("the event is not in the document: %s", body)
	}
	if code, body = get(t, from(t, "127.0.0.1"), "http://"+s.AdminAddr().String()+"/v1/events/"+ev.ID); code != 200 || !strings.Contains(body, ev.ID) {
		t.Fatalf("operator API: %d %s", code, body)
	}
	if s.Fleet().VM("gce_0") == nil || s.Admin() == nil || s.Metadata() == nil || s.Azure() == nil || s.GCE() == nil ||
		s.AWS() == nil || s.Metrics() == nil || s.History() == nil {
		t.Fatal("an accessor returned nil")
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	if _, err := s.Engine().Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_0"}}); forewarn.ErrorCode(err) != forewarn.EUNAVAILABLE {
		t.Errorf("the engine after Run: %v, want EUNAVAILABLE", err)
	}
	if _, err := net.DialTimeout("tcp", s.MetadataAddr().String(), time.Second); err == nil {
		t.Error("the metadata listener is still open")
	}
	if err := s.Run(t.Context()); forewarn.ErrorCode(err) != forewarn.ECONFLICT {
		t.Errorf("a second Run: %v, want ECONFLICT", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close after Run: %v", err)
	}
}

// TestGivenListeners: the server serves on listeners made by its caller
// and closes them; Close releases a server that never ran.
func TestGivenListeners(t *testing.T) {
	cfg := memConfig(t)
	var err error
	if cfg.MetadataListener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if cfg.AdminListener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	cfg.MetadataAddr, cfg.AdminAddr = "not an address", "nor this"
	s, err := server.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s.MetadataAddr() != cfg.MetadataListener.Addr() || s.AdminAddr() != cfg.AdminListener.Addr() {
		t.Fatalf("addresses %s and %s, want the listeners'", s.MetadataAddr(), s.AdminAddr())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.MetadataListener.Accept(); err == nil {
		t.Error("Close left the metadata listener open")
	}
	if _, err := cfg.AdminListener.Accept(); err == nil {
		t.Error("Close left the operator listener open")
	}
	if err := s.Run(t.Context()); forewarn.ErrorCode(err) != forewarn.ECONFLICT {
		t.Errorf("Run after Close: %v, want ECONFLICT", err)
	}
}

// TestNewRefuses: refused configurations are EINVALID errors naming the
// flag, and a start that fails half way closes what it opened: the
// store of a failed start opens again, and a given listener is closed.
func TestNewRefuses(t *testing.T) {
	for _, c := range []struct {
		set  func(*server.Config)
		want string
	}{
		{func(c *server.Config) { c.FleetFile = "fleet.yaml" }, "--fleet fleet.yaml: the configuration also holds a fleet"},
		{func(c *server.Config) { c.Fleet = &forewarn.Fleet{} }, "the fleet has no VMs"},
		{func(c *server.Config) { c.Store = "bolt" }, "--data must name a directory"},
		{func(c *server.Config) { c.Store, c.DataDir = "zk", "data" }, `--store "zk": want bolt`},
		{func(c *server.Config) { c.EtcdEndpoints = []string{"http://127.0.0.1:1"} }, "--etcd-endpoints needs --store etcd"},
		{func(c *server.Config) { c.AdminAddr = "0.0.0.0:0" }, "--admin-addr 0.0.0.0:0 is not a loopback address"},
		{func(c *server.Config) { c.RateLimit = -1 }, "--rate-limit -1"},
		{func(c *server.Config) { c.GCERateLimit = -1 }, "--gce-rate-limit -1"},
	} {
		cfg := memConfig(t)
		c.set(&cfg)
		_, err := server.New(t.Context(), cfg)
		if forewarn.ErrorCode(err) != forewarn.EINVALID || !strings.HasPrefix(forewarn.ErrorMessage(err), c.want) {
			t.Errorf("New: %v, want EINVALID %q", err, c.want)
		}
	}

	// A given operator listener off loopback needs a token too.
	open, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	cfg := memConfig(t)
	cfg.AdminListener = open
	if _, err := server.New(t.Context(), cfg); !strings.Contains(forewarn.ErrorMessage(err), "is not a loopback address") {
		t.Errorf("New with an operator listener on every address: %v", err)
	}
	if _, err := open.Accept(); err == nil {
		t.Error("the refused start left the given listener open")
	}

	// The operator port is taken: the store and the given metadata
	// listener are closed again.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg = memConfig(t)
	cfg.Store, cfg.DataDir = server.StoreBolt, t.TempDir()
	cfg.AdminAddr = taken.Addr().String()
	if cfg.MetadataListener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if _, err := server.New(t.Context(), cfg); err == nil || !strings.HasPrefix(err.Error(), "operator API: ") {
		t.Fatalf("New with the operator port taken: %v", err)
	}
	if _, err := cfg.MetadataListener.Accept(); err == nil {
		t.Error("the failed start left the given listener open")
	}
	cfg.MetadataListener, cfg.AdminAddr = nil, "127.0.0.1:0"
	s, err := server.New(t.Context(), cfg) // a store left open would be locked
	if err != nil {
		t.Fatalf("New after a failed start: %v", err)
	}
	s.Close()
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "audit.log")); err != nil {
		t.Errorf("no audit log: %v", err)
	}
}

// TestMemWithDataDir: an in-memory server keeps an audit log when it is
// given a data directory, and none without.
func TestMemWithDataDir(t *testing.T) {
	cfg := memConfig(t)
	cfg.DataDir = filepath.Join(t.TempDir(), "new")
	s, err := server.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "audit.log")); err != nil {
		t.Errorf("no audit log: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "forewarn.db")); err == nil {
		t.Error("an in-memory server wrote a store file")
	}
}

package server

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/internal/caller"
)

// relayReq returns a request as relay name sends it over its TLS
// connection, with the identity headers kv gives.
func relayReq(name string, kv ...string) *http.Request {
	r := httptest.NewRequest("GET", "/metadata/scheduledevents?api-version=2020-07-01", nil)
	r.RemoteAddr = "198.18.0.2:40000" // the relay's own address
	if name != "" {
		r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Subject: pkix.Name{CommonName: name}}}}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		r.Header.Add(kv[i], kv[i+1])
	}
	return r
}

// seen is what the metadata API behind the relay handler saw of a
// request.
type seen struct {
	id       caller.ID
	relayed  bool
	identity bool
}

func TestRelayHandlerIdentity(t *testing.T) {
	var got []seen
	md := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := caller.Of(r)
		got = append(got, seen{id: id, relayed: caller.Relayed(r) != nil, identity: caller.HasIdentity(r.Header)})
		w.WriteHeader(http.StatusNoContent)
	})
	h := newRelayHandler(Relays{"host-a": {"blue", "green"}, "host-b": {"red"}}, md, 0)
	const net, src = caller.NetworkHeader, caller.SourceHeader
	for _, tc := range []struct {
		name   string
		req    *http.Request
		status int
		body   string
		want   *seen
	}{
		{"no certificate", relayReq("", net, "blue", src, "198.18.10.2:5000"), 403,
			`{"error":"the relay listener answers authenticated relays only"}`, nil},
		{"a relay of no relays file", relayReq("host-z", net, "blue", src, "198.18.10.2:5000"), 403,
			`{"error":"the relay's certificate names no relay of the relays file"}`, nil},
		{"no network", relayReq("host-a", src, "198.18.10.2:5000"), 400,
			`{"error":"a relayed request carries one Forewarn-Relay-Network and one Forewarn-Relay-Source header"}`, nil},
		{"two networks", relayReq("host-a", net, "blue", net, "green", src, "198.18.10.2:5000"), 400,
			`{"error":"a relayed request carries one Forewarn-Relay-Network and one Forewarn-Relay-Source header"}`, nil},
		{"no port", relayReq("host-a", net, "blue", src, "198.18.10.2"), 400,
			`{"error":"Forewarn-Relay-Source \"198.18.10.2\" is not an IP address and port"}`, nil},
		{"a network of another relay", relayReq("host-a", net, "red", src, "198.18.10.2:5000"), 403,
			`{"error":"relay \"host-a\" does not serve network \"red\""}`, nil},
		{"the flat network", relayReq("host-a", net, "", src, "198.18.10.2:5000"), 403,
			`{"error":"relay \"host-a\" does not serve network \"\""}`, nil},
		{"its own network", relayReq("host-a", net, "green", src, "198.18.10.2:5000", "X-Instance-Id", "x", "X-Tenant-Id", "y"), 204, "",
			&seen{id: caller.ID{Network: "green", Addr: netip.MustParseAddrPort("198.18.10.2:5000"), Relay: "host-a"}, relayed: true}},
		{"a mapped address", relayReq("host-b", net, "red", src, "[::ffff:198.18.10.2]:5000"), 204, "",
			&seen{id: caller.ID{Network: "red", Addr: netip.MustParseAddrPort("198.18.10.2:5000"), Relay: "host-b"}, relayed: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got = nil
			w := httptest.NewRecorder()
			h.ServeHTTP(w, tc.req)
			if w.Code != tc.status || strings.TrimSuffix(w.Body.String(), "\n") != tc.body {
				t.Fatalf("got %d %q, want %d %q", w.Code, w.Body.String(), tc.status, tc.body)
			}
			switch {
			case tc.want == nil && len(got) != 0:
				t.Fatalf("the metadata API was reached: %+v", got)
			case tc.want != nil && (len(got) != 1 || got[0] != *tc.want):
				t.Fatalf("the metadata API saw %+v, want %+v", got, *tc.want)
			}
		})
	}
}

func TestRelayHandlerPerVMCap(t *testing.T) {
	release := make(chan struct{})
	var entered sync.WaitGroup
	md := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered.Done()
		<-release
	})
	h := newRelayHandler(Relays{"host-a": {"blue", "green"}}, md, 2)
	req := func(network, src string) *http.Request {
		return relayReq("host-a", caller.NetworkHeader, network, caller.SourceHeader, src)
	}
	var held sync.WaitGroup
	hold := func(network, src string) {
		entered.Add(1)
		held.Go(func() { h.ServeHTTP(httptest.NewRecorder(), req(network, src)) })
	}
	// Two requests of one VM are held; its third is refused, while the
	// same address on another network, and another VM, are served.
	hold("blue", "198.18.10.2:1")
	hold("blue", "198.18.10.2:2")
	entered.Wait()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req("blue", "198.18.10.2:3"))
	if want := `{"error":"too many requests at once from 198.18.10.2 on network blue"}` + "\n"; w.Code != 503 || w.Body.String() != want {
		t.Fatalf("third request of one VM: %d %q", w.Code, w.Body.String())
	}
	hold("green", "198.18.10.2:4")
	hold("blue", "198.18.10.3:5")
	entered.Wait()
	close(release)
	held.Wait()
	for i := range h.inflight.shards {
		if n := len(h.inflight.shards[i].n); n != 0 {
			t.Fatalf("shard %d keeps %d entries after every request ended", i, n)
		}
	}
	// With the first ones ended, the VM is served again.
	release = make(chan struct{})
	close(release)
	entered.Add(1)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, req("blue", "198.18.10.2:6"))
	if w.Code != 200 {
		t.Fatalf("after its requests ended: %d %q", w.Code, w.Body.String())
	}
}

func TestRelayWriterClose(t *testing.T) {
	md := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusForbidden)
	})
	h := newRelayHandler(Relays{"host-a": {"blue"}}, md, 0)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, relayReq("host-a", caller.NetworkHeader, "blue", caller.SourceHeader, "198.18.10.2:1"))
	if w.Code != 403 || w.Header().Get("Connection") != "" || w.Header().Get(caller.CloseHeader) != "1" {
		t.Fatalf("got %d %v: want 403 with %s and no Connection", w.Code, w.Header(), caller.CloseHeader)
	}
}

func TestRefuseIdentity(t *testing.T) {
	reached := false
	h := refuseIdentity(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached = true }))
	for _, k := range []string{"Forewarn-Relay-Network", "forewarn-relay-source", "X-Instance-ID", "X-Instance-ID-Signature", "X-Tenant-ID"} {
		r := httptest.NewRequest("GET", "/metadata/scheduledevents", nil)
		r.Header.Set(k, "")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 403 || w.Header().Get("Connection") != "close" || reached {
			t.Fatalf("%s: %d %v, reached %v", k, w.Code, w.Header(), reached)
		}
	}
	r := httptest.NewRequest("GET", "/metadata/scheduledevents", nil)
	r.Header.Set("X-Forwarded-For", "198.18.0.9") // not an identity here
	h.ServeHTTP(httptest.NewRecorder(), r)
	if !reached {
		t.Fatal("a request without identity headers was refused")
	}
}

func TestRelayConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("relays.yaml", "host-a: [blue]\n")
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string
	}{
		{"a relay flag alone", func(c *Config) { c.RelayCAFile = "ca.pem" }, "--relay-ca needs --relay-addr, the relay listener it configures"},
		{"no certificate", func(c *Config) { c.RelayAddr, c.RelaysFile = "127.0.0.1:0", good },
			"--relay-addr needs --relay-cert: relays and the server authenticate each other with certificates"},
		{"no relays", func(c *Config) {
			c.RelayAddr, c.RelayCertFile, c.RelayKeyFile, c.RelayCAFile = "127.0.0.1:0", "c", "k", "ca"
		}, "--relay-addr needs --relays FILE: the relays and the networks each may speak for"},
		{"a bad address", func(c *Config) { c.RelayAddr = "nowhere" }, `--relay-addr "nowhere": address nowhere: missing port in address`},
		{"relays without a network", func(c *Config) {
			c.RelayAddr, c.RelayCertFile, c.RelayKeyFile, c.RelayCAFile = "127.0.0.1:0", "c", "k", "ca"
			c.Relays = Relays{"host-a": nil}
		}, `relay "host-a" serves no network`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Store, c.DataDir = StoreMem, ""
			tc.set(&c)
			err := c.Validate()
			if forewarn.ErrorCode(err) != forewarn.EINVALID || forewarn.ErrorMessage(err) != tc.want {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
	for _, tc := range []struct{ doc, want string }{
		{"host-a: [blue, \"bad net\"]\n", `network "bad net": a network is 1 to 63 letters`},
		{"host-a: blue\n", "want a mapping of each relay's name to a list of networks"},
		{"{}\n", "no relays"},
		{"host-a: [blue]\nhost-a: [red]\n", "want a mapping"},
	} {
		_, err := LoadRelays(write("r.yaml", tc.doc))
		if forewarn.ErrorCode(err) != forewarn.EINVALID || !strings.Contains(forewarn.ErrorMessage(err), tc.want) {
			t.Errorf("relays file %q: got %v, want a message with %q", tc.doc, err, tc.want)
		}
	}
	rs, err := LoadRelays(good)
	if err != nil || len(rs) != 1 || len(rs["host-a"]) != 1 || rs["host-a"][0] != "blue" {
		t.Fatalf("LoadRelays: %v %v", rs, err)
	}
}

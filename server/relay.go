package server

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"sync"

	"go.yaml.in/yaml/v3"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/fleetfile"
	"github.com/forewarn/forewarn/internal/caller"
)

// The relay listener: where 'forewarn relay' processes, one on each
// host, forward their VMs' metadata requests. Each relay authenticates
// with a client certificate that RelayCAFile's authority signed, whose
// name (its Common Name or a DNS name) the relays file lists with the
// networks the relay may speak for. On that listener, and only there,
// the server takes the network and source address each request carries
// (caller.NetworkHeader, caller.SourceHeader) as the VM's identity.

// relayStreams is how many requests one relay connection may carry at
// once: 10,000 long-polls fit in 5 connections.
const relayStreams = 2048

// Caps of the relay listener's connections: relays hold a few each.
const (
	relayConnsPerSource = 32
	relayConnsTotal     = 1024
)

// Relays maps each relay's name, as its certificate gives it, to the
// networks it may speak for.
type Relays map[string][]string

// LoadRelays reads a relays file: a YAML (or JSON) mapping of each
// relay's name to the list of networks it serves, e.g.
//
//	host-a: [blue, green]
//	host-b: [green]
func LoadRelays(path string) (Relays, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, forewarn.Errorf(forewarn.EINVALID, "--relays: %v", err)
	}
	var rs Relays
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&rs); err != nil {
		return nil, forewarn.Errorf(forewarn.EINVALID, "--relays %s: want a mapping of each relay's name to a list of networks: %v", path, err)
	}
	if err := rs.Validate(); err != nil {
		return nil, forewarn.Errorf(forewarn.EINVALID, "--relays %s: %s", path, forewarn.ErrorMessage(err))
	}
	return rs, nil
}

// Validate reports whether rs names relays and networks that can be.
func (rs Relays) Validate() error {
	if len(rs) == 0 {
		return forewarn.Errorf(forewarn.EINVALID, "no relays")
	}
	for name, nets := range rs {
		if name == "" {
			return forewarn.Errorf(forewarn.EINVALID, "a relay has an empty name")
		}
		if len(nets) == 0 {
			return forewarn.Errorf(forewarn.EINVALID, "relay %q serves no network", name)
		}
		for _, n := range nets {
			if !fleetfile.ValidNetwork(n) {
				return forewarn.Errorf(forewarn.EINVALID, "relay %q: network %q: a network is 1 to 63 letters, digits, '.', '_' or '-', beginning with a letter or digit", name, n)
			}
		}
	}
	return nil
}

// relayTLS returns the relay listener's TLS configuration: the server's
// certificate, and client certificates required, signed by the CA in
// caFile and named in rs.
func relayTLS(certFile, keyFile, caFile string, rs Relays) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, forewarn.Errorf(forewarn.EINVALID, "--relay-cert, --relay-key: %v", err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, forewarn.Errorf(forewarn.EINVALID, "--relay-ca: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, forewarn.Errorf(forewarn.EINVALID, "--relay-ca %s holds no PEM certificate", caFile)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2", "http/1.1"},
		// A certificate the CA signed for a name the relays file does not
		// list is refused in the handshake, as a wrong one is.
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no client certificate")
			}
			if relayName(cs.PeerCertificates[0], rs) == "" {
				return fmt.Errorf("relay certificate %q names no relay of the relays file", cs.PeerCertificates[0].Subject.CommonName)
			}
			return nil
		},
	}, nil
}

// relayName returns the name under which rs lists the relay of
// certificate c: its Common Name, or else the first of its DNS names
// rs lists; "" for none.
func relayName(c *x509.Certificate, rs Relays) string {
	if _, ok := rs[c.Subject.CommonName]; ok && c.Subject.CommonName != "" {
		return c.Subject.CommonName
	}
	for _, n := range c.DNSNames {
		if _, ok := rs[n]; ok {
			return n
		}
	}
	return ""
}

// relayHandler serves the relay listener: it checks each request's
// claim against its relay's networks, holds each VM to its own cap on
// requests at once, and hands the request, with its VM's identity, to
// the metadata API.
type relayHandler struct {
	vmGate
	relays Relays
	nets   map[string]map[string]bool // relay → networks
}

func newRelayHandler(rs Relays, md http.Handler, perVM int) *relayHandler {
	h := &relayHandler{relays: rs, nets: make(map[string]map[string]bool, len(rs))}
	h.vmGate.init(md, perVM)
	for name, nets := range rs {
		m := make(map[string]bool, len(nets))
		for _, n := range nets {
			m[n] = true
		}
		h.nets[name] = m
	}
	return h
}

// relayError answers a relay's request that is refused: the relay
// passes it on to the VM.
func relayError(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	b, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{msg})
	_, _ = w.Write(append(b, '\n'))
}

func (h *relayHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		relayError(w, http.StatusForbidden, "the relay listener answers authenticated relays only")
		return
	}
	relay := relayName(r.TLS.PeerCertificates[0], h.relays)
	nets, ok := h.nets[relay]
	if !ok {
		relayError(w, http.StatusForbidden, "the relay's certificate names no relay of the relays file")
		return
	}
	netv, srcv := r.Header.Values(caller.NetworkHeader), r.Header.Values(caller.SourceHeader)
	if len(netv) != 1 || len(srcv) != 1 {
		relayError(w, http.StatusBadRequest, fmt.Sprintf("a relayed request carries one %s and one %s header", caller.NetworkHeader, caller.SourceHeader))
		return
	}
	src, err := netip.ParseAddrPort(srcv[0])
	if err != nil {
		relayError(w, http.StatusBadRequest, fmt.Sprintf("%s %q is not an IP address and port", caller.SourceHeader, srcv[0]))
		return
	}
	if !nets[netv[0]] {
		relayError(w, http.StatusForbidden, fmt.Sprintf("relay %q does not serve network %q", relay, netv[0]))
		return
	}
	k := vmKey{network: netv[0], addr: src.Addr().Unmap()}
	h.serve(w, r, k, src.Port(), relay, fmt.Sprintf("too many requests at once from %s on network %s", k.addr, k.network))
}

// vmGate hands the requests a listener has identified to the metadata
// API, each as its VM's, holding each VM to perVM requests at once.
type vmGate struct {
	md http.Handler
	// perVM caps each VM's requests at once (0: no cap).
	perVM    int
	inflight inflight
}

func (g *vmGate) init(md http.Handler, perVM int) {
	g.md, g.perVM = md, perVM
	g.inflight.init()
}

// serve serves r as a request of the VM k from port, vouched for by
// the relay named by, or answers 503 with busy when k has perVM
// requests in flight. Identity headers are dropped first, and a
// "Connection: close" the API sets is carried as caller.CloseHeader.
func (g *vmGate) serve(w http.ResponseWriter, r *http.Request, k vmKey, port uint16, by, busy string) {
	if !g.inflight.acquire(k, g.perVM) {
		relayError(w, http.StatusServiceUnavailable, busy)
		return
	}
	defer g.inflight.release(k)
	caller.Strip(r.Header)
	r = caller.With(r, caller.ID{Network: k.network, Addr: netip.AddrPortFrom(k.addr, port), Relay: by})
	g.md.ServeHTTP(&relayWriter{ResponseWriter: w}, r)
}

// vmKey is a VM's identity behind a relay.
type vmKey struct {
	network string
	addr    netip.Addr
}

// inflight counts each VM's requests at once, in shards so that VMs do
// not share one lock. A VM with none has no entry.
type inflight struct {
	seed   maphash.Seed
	shards [64]struct {
		mu sync.Mutex
		n  map[vmKey]int
	}
}

// init makes f ready for use.
func (f *inflight) init() {
	f.seed = maphash.MakeSeed()
	for i := range f.shards {
		f.shards[i].n = map[vmKey]int{}
	}
}

func (f *inflight) shard(k vmKey) int {
	var h maphash.Hash
	h.SetSeed(f.seed)
	h.WriteString(k.network)
	b := k.addr.As16()
	h.Write(b[:])
	return int(h.Sum64() % uint64(len(f.shards)))
}

// acquire counts a request of k, unless k already has max (0: no cap).
func (f *inflight) acquire(k vmKey, max int) bool {
	s := &f.shards[f.shard(k)]
	s.mu.Lock()
	defer s.mu.Unlock()
	if max > 0 && s.n[k] >= max {
		return false
	}
	s.n[k]++
	return true
}

// release ends a request of k.
func (f *inflight) release(k vmKey) {
	s := &f.shards[f.shard(k)]
	s.mu.Lock()
	if s.n[k] <= 1 {
		delete(s.n, k)
	} else {
		s.n[k]--
	}
	s.mu.Unlock()
}

// relayWriter turns the "Connection: close" a handler sets for the VM
// into caller.CloseHeader: on the relay's HTTP/2 connection it would
// end every request the relay carries.
type relayWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *relayWriter) fix() {
	if w.wrote {
		return
	}
	w.wrote = true
	h := w.ResponseWriter.Header()
	if v, ok := h["Connection"]; ok {
		delete(h, "Connection")
		if slices.ContainsFunc(v, func(s string) bool { return s == "close" }) {
			h[caller.CloseHeader] = []string{"1"}
		}
	}
}

func (w *relayWriter) WriteHeader(code int) {
	w.fix()
	w.ResponseWriter.WriteHeader(code)
}

func (w *relayWriter) Write(b []byte) (int, error) {
	w.fix()
	return w.ResponseWriter.Write(b)
}

// Flush sends what is written so far.
func (w *relayWriter) Flush() {
	w.fix()
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap returns the writer wrapped, for http.ResponseController.
func (w *relayWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

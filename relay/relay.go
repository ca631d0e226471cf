// Package relay is 'forewarn relay': the metadata relay that runs on each
// host of a private cloud. It listens where the host's VMs reach their
// metadata service (169.254.169.254:80, on a bridge or in a VM-facing
// namespace), each listener tagged with the network its callers are on,
// and forwards every request, long-polls included, to the Forewarn
// servers over HTTP/2 with mutual TLS, saying which network and source
// address it came from. The relay asserts that and nothing else: the
// server decides who the caller is and what it may see.
//
// What only the host can do stays on the host: the IP TTL of an EC2
// token answer (the VM's hop limit, which the server names), and the
// refusal of a token request that came through a proxy (one that
// carries X-Forwarded-For). Identity headers a VM sends are dropped.
//
// Requests go to one server at a time. When it fails (it cannot be
// reached, or a connection to it breaks), the relay moves to the next
// and sends the request again, so that a held long-poll is held again
// on another replica without the VM seeing an error.
package relay

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/aws"
	"github.com/forewarn/forewarn/fleetfile"
	"github.com/forewarn/forewarn/internal/caller"
	"github.com/forewarn/forewarn/internal/connlimit"
)

// Defaults of a Config.
const (
	// DefaultMaxConnsPerSource is what one VM may hold open: a GCE VM's
	// 32 long-polls and 16 more.
	DefaultMaxConnsPerSource = 48
	// DefaultMaxConns caps each listener's open connections.
	DefaultMaxConns = 16384
	// DefaultMaxUpstreamConns caps the connections to each server.
	DefaultMaxUpstreamConns = 8
	// DefaultRetryFor is how long a request keeps trying the servers
	// once they fail, before the VM is answered 502.
	DefaultRetryFor = 30 * time.Second
)

// maxBody bounds a request body the relay keeps to send again: the
// metadata APIs' bodies are a few hundred bytes.
const maxBody = 64 << 10

// maxHeaderList bounds a request's headers as HTTP/2 counts them (each
// field's name and value and 32 bytes), well under what the server
// takes (64 KiB): real clients send a few hundred bytes.
const maxHeaderList = 16 << 10

// headerListSize returns the size of h as HTTP/2 counts it.
func headerListSize(h http.Header) int {
	n := 0
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 32
		}
	}
	return n
}

// Listener is one address the relay listens on, and the network of the
// VMs that call it there.
type Listener struct {
	Network string
	// Addr is a host:port to listen on.
	Addr string
	// Device, when set, binds the listener to one network interface
	// (SO_BINDTODEVICE), so that several listeners of different networks
	// can share one address, 169.254.169.254:80, each on its own bridge.
	Device string
}

// ParseListener parses NETWORK=HOST:PORT[@DEVICE].
func ParseListener(s string) (Listener, error) {
	network, addr, ok := strings.Cut(s, "=")
	if !ok {
		return Listener{}, forewarn.Errorf(forewarn.EINVALID, "--listen %q: want NETWORK=HOST:PORT[@DEVICE]", s)
	}
	l := Listener{Network: network, Addr: addr}
	if a, dev, ok := strings.Cut(addr, "@"); ok {
		l.Addr, l.Device = a, dev
	}
	return l, l.validate()
}

func (l Listener) validate() error {
	if !fleetfile.ValidNetwork(l.Network) {
		return forewarn.Errorf(forewarn.EINVALID, "--listen %s=%s: network %q is not a network name: 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit", l.Network, l.Addr, l.Network)
	}
	if _, _, err := net.SplitHostPort(l.Addr); err != nil {
		return forewarn.Errorf(forewarn.EINVALID, "--listen %s=%s: %v", l.Network, l.Addr, err)
	}
	if l.Device != "" && (len(l.Device) > 15 || strings.ContainsAny(l.Device, "/ \t")) {
		return forewarn.Errorf(forewarn.EINVALID, "--listen %s=%s@%s: %q is not a network interface's name", l.Network, l.Addr, l.Device, l.Device)
	}
	return nil
}

// String returns l as ParseListener reads it.
func (l Listener) String() string {
	s := l.Network + "=" + l.Addr
	if l.Device != "" {
		s += "@" + l.Device
	}
	return s
}

// Config configures a Relay. Start from DefaultConfig.
type Config struct {
	// Listeners are where the VMs call, one network each.
	Listeners []Listener
	// Servers are the base URLs (https://HOST:PORT) of the Forewarn
	// servers' relay listeners, any replica; the relay uses the first
	// that answers and moves on when it fails.
	Servers []string
	// CertFile and KeyFile are the relay's client certificate and key;
	// CAFile is the authority that signed the servers' certificates.
	// TLS, when set, is used instead of the three files.
	CertFile, KeyFile, CAFile string
	TLS                       *tls.Config
	// MetricsAddr is where GET /metrics answers; "" for nowhere.
	MetricsAddr string
	// MaxConnsPerSource caps one VM's open connections to a listener;
	// MaxConns caps each listener's. MaxUpstreamConns caps the relay's
	// connections to each server: requests share them as HTTP/2
	// streams, and up to ShortConns of them carry short requests one at
	// a time (0: none).
	MaxConnsPerSource, MaxConns, MaxUpstreamConns, ShortConns int
	// RetryFor is how long a request keeps trying the servers once they
	// fail.
	RetryFor time.Duration
	// HeaderTimeout, BodyTimeout, IdleTimeout and WriteTimeout bound the
	// VMs' connections as the server's flags of those names do.
	HeaderTimeout, BodyTimeout, IdleTimeout, WriteTimeout time.Duration
	// ShutdownTimeout bounds how long requests in flight may take to
	// finish once Run's context ends.
	ShutdownTimeout time.Duration
	// Logger receives the relay's logs; nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns the defaults of 'forewarn relay'.
func DefaultConfig() Config {
	return Config{
		MetricsAddr:       "127.0.0.1:8171",
		MaxConnsPerSource: DefaultMaxConnsPerSource,
		MaxConns:          DefaultMaxConns,
		MaxUpstreamConns:  DefaultMaxUpstreamConns,
		ShortConns:        DefaultShortConns,
		RetryFor:          DefaultRetryFor,
		HeaderTimeout:     5 * time.Second,
		BodyTimeout:       5 * time.Second,
		IdleTimeout:       time.Minute,
		WriteTimeout:      10 * time.Second,
		ShutdownTimeout:   10 * time.Second,
	}
}

// Validate reports whether c can be run; its errors name the flags of
// 'forewarn relay'.
func (c *Config) Validate() error {
	if len(c.Listeners) == 0 {
		return forewarn.Errorf(forewarn.EINVALID, "give at least one --listen NETWORK=HOST:PORT, where the host's VMs of that network reach 169.254.169.254")
	}
	for _, l := range c.Listeners {
		if err := l.validate(); err != nil {
			return err
		}
	}
	if len(c.Servers) == 0 {
		return forewarn.Errorf(forewarn.EINVALID, "give --server URL[,URL...]: the relay listeners of the Forewarn servers")
	}
	for _, s := range c.Servers {
		if u, err := url.Parse(s); err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return forewarn.Errorf(forewarn.EINVALID, "--server %q: want https://HOST:PORT, a server's relay listener", s)
		}
	}
	if c.TLS == nil {
		for _, f := range []struct{ flag, v string }{{"--cert", c.CertFile}, {"--key", c.KeyFile}, {"--ca", c.CAFile}} {
			if f.v == "" {
				return forewarn.Errorf(forewarn.EINVALID, "give %s: the relay and the servers authenticate each other with certificates", f.flag)
			}
		}
	}
	for _, n := range []struct {
		flag string
		n    int
	}{{"--max-conns-per-source", c.MaxConnsPerSource}, {"--max-conns", c.MaxConns}, {"--max-upstream-conns", c.MaxUpstreamConns}} {
		if n.n <= 0 {
			return forewarn.Errorf(forewarn.EINVALID, "%s %d must be positive", n.flag, n.n)
		}
	}
	if c.ShortConns < 0 || c.ShortConns >= c.MaxUpstreamConns {
		return forewarn.Errorf(forewarn.EINVALID, "--short-conns %d must be from 0 to --max-upstream-conns - 1 (%d): HTTP/2 needs one", c.ShortConns, c.MaxUpstreamConns-1)
	}
	for _, d := range []struct {
		flag string
		d    time.Duration
	}{{"--retry-for", c.RetryFor}, {"--header-timeout", c.HeaderTimeout}, {"--body-timeout", c.BodyTimeout},
		{"--idle-timeout", c.IdleTimeout}, {"--write-timeout", c.WriteTimeout}} {
		if d.d <= 0 {
			return forewarn.Errorf(forewarn.EINVALID, "%s %s must be positive", d.flag, d.d)
		}
	}
	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			return forewarn.Errorf(forewarn.EINVALID, "--metrics-addr %q: %v", c.MetricsAddr, err)
		}
	}
	return nil
}

// clientTLS returns the relay's TLS configuration from c's files.
func (c *Config) clientTLS() (*tls.Config, error) {
	if c.TLS != nil {
		t := c.TLS.Clone()
		t.NextProtos = []string{"h2"}
		return t, nil
	}
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, forewarn.Errorf(forewarn.EINVALID, "--cert, --key: %v", err)
	}
	pem, err := os.ReadFile(c.CAFile)
	if err != nil {
		return nil, forewarn.Errorf(forewarn.EINVALID, "--ca: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, forewarn.Errorf(forewarn.EINVALID, "--ca %s holds no PEM certificate", c.CAFile)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2"}}, nil
}

// Relay is one host's metadata relay: New opens its listeners, Run
// serves them until its context ends.
type Relay struct {
	cfg       Config
	log       *slog.Logger
	ups       []*upstream
	cur       atomic.Int32 // the index of the server in use
	mets      *relayMetrics
	listeners []net.Listener
	servers   []*http.Server
	addrs     []net.Addr
	metricsLn net.Listener
	metricsHS *http.Server

	mu    sync.Mutex
	state int // 0 ready, 1 running, 2 done
}

// New validates cfg, loads the certificates and opens every listener.
// On error it closes what it opened. Errors are EINVALID for a
// configuration that is refused; others (an address in use) are
// wrapped as they come.
func New(cfg Config) (_ *Relay, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tlsCfg, err := cfg.clientTLS()
	if err != nil {
		return nil, err
	}
	r := &Relay{cfg: cfg, log: cfg.Logger}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.mets = newMetrics(r)
	for _, s := range cfg.Servers {
		u, _ := url.Parse(s)
		r.ups = append(r.ups, newUpstream(u, tlsCfg, cfg.MaxUpstreamConns, cfg.ShortConns, r.mets, r.log))
	}
	defer func() {
		if err != nil {
			r.closeListeners()
		}
	}()
	for _, l := range cfg.Listeners {
		ln, err := listen(l)
		if err != nil {
			return nil, fmt.Errorf("--listen %s: %w", l, err)
		}
		capped := connlimit.New(ln, connlimit.Config{Name: "relay " + l.Network, PerSource: cfg.MaxConnsPerSource,
			Total: cfg.MaxConns, WriteTimeout: cfg.WriteTimeout, Refusal: refusal, Logger: r.log})
		r.listeners = append(r.listeners, capped)
		r.addrs = append(r.addrs, ln.Addr())
		hs := &http.Server{
			Handler:           connlimit.BodyTimeout(r.handler(l.Network), cfg.BodyTimeout),
			ReadHeaderTimeout: cfg.HeaderTimeout,
			IdleTimeout:       cfg.IdleTimeout,
			MaxHeaderBytes:    64 << 10,
			ConnState:         capped.ConnState,
			ConnContext:       ConnContext,
			ErrorLog:          slog.NewLogLogger(r.log.Handler(), slog.LevelDebug),
		}
		hs.Protocols = new(http.Protocols)
		hs.Protocols.SetHTTP1(true) // the metadata services speak HTTP/1.1
		r.servers = append(r.servers, hs)
	}
	if cfg.MetricsAddr != "" {
		if r.metricsLn, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			return nil, fmt.Errorf("--metrics-addr: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", r.mets.handler())
		r.metricsHS = &http.Server{Handler: mux, ReadHeaderTimeout: cfg.HeaderTimeout, IdleTimeout: cfg.IdleTimeout}
	}
	return r, nil
}

// refusal is what a connection over a cap is sent before it is closed.
var refusal = []byte("HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\n" +
	"Content-Type: text/plain; charset=utf-8\r\nContent-Length: 26\r\n\r\ntoo many open connections\n")

func (r *Relay) closeListeners() {
	for _, ln := range r.listeners {
		ln.Close()
	}
	if r.metricsLn != nil {
		r.metricsLn.Close()
	}
}

// Addrs returns the addresses of the listeners, in the order of
// Config.Listeners.
func (r *Relay) Addrs() []net.Addr { return r.addrs }

// MetricsAddr returns the address of the metrics listener, or nil.
func (r *Relay) MetricsAddr() net.Addr {
	if r.metricsLn == nil {
		return nil
	}
	return r.metricsLn.Addr()
}

// Handler returns the handler of the listener of network: what the
// relay does with a VM's request, for tests and benchmarks that serve
// it on a listener of their own (with ConnContext).
func (r *Relay) Handler(network string) http.Handler { return r.handler(network) }

// UpstreamConns returns how many connections the relay holds to each
// server now, in the order of Config.Servers.
func (r *Relay) UpstreamConns() []int {
	n := make([]int, len(r.ups))
	for i, u := range r.ups {
		n[i] = u.open()
	}
	return n
}

// Run serves until ctx ends, then shuts down: it stops accepting, gives
// the requests in flight up to ShutdownTimeout, and closes the
// connections to the servers. Run may be called once.
func (r *Relay) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.state != 0 {
		r.mu.Unlock()
		return forewarn.Errorf(forewarn.ECONFLICT, "relay: Run called twice")
	}
	r.state = 1
	r.mu.Unlock()
	errc := make(chan error, len(r.servers)+1)
	for i, hs := range r.servers {
		go func() { errc <- hs.Serve(r.listeners[i]) }()
	}
	n := len(r.servers)
	if r.metricsHS != nil {
		go func() { errc <- r.metricsHS.Serve(r.metricsLn) }()
		n++
	}
	r.log.Info("relaying", "listeners", len(r.listeners), "servers", strings.Join(r.cfg.Servers, ","))
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
		n--
	}
	sctx, cancel := context.WithTimeout(context.Background(), r.cfg.ShutdownTimeout)
	defer cancel()
	all := r.servers
	if r.metricsHS != nil {
		all = append(all[:len(all):len(all)], r.metricsHS)
	}
	for _, hs := range all {
		if err := hs.Shutdown(sctx); err != nil {
			hs.Close()
		}
	}
	for ; n > 0; n-- {
		<-errc
	}
	for _, u := range r.ups {
		u.close()
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
}

// connKey is the context key of a VM's connection.
type connKey struct{}

// ConnContext records each VM connection in its requests' context, so
// that the relay can set the IP TTL of a token answer on it. Install it
// as the ConnContext of an http.Server that serves Handler.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// hopByHop are the headers that belong to one connection, not passed on.
var hopByHop = [...]string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// handler returns what serves the VMs of network.
func (r *Relay) handler(network string) http.Handler {
	m := r.mets.of(network)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		start := time.Now()
		m.start()
		code := r.forward(w, req, network)
		m.done(code, time.Since(start))
	})
}

// forward relays req of a VM on network and returns the status it
// answered (0 when the VM left first).
func (r *Relay) forward(w http.ResponseWriter, req *http.Request, network string) int {
	src, err := netip.ParseAddrPort(req.RemoteAddr)
	if err != nil {
		http.Error(w, "no source address", http.StatusInternalServerError)
		return http.StatusInternalServerError
	}
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	// EC2 refuses a token request that came through a proxy; only the
	// host sees the VM's request as it was sent.
	if req.Method == http.MethodPut && aws.CleanPath(req.URL.Path) == aws.TokenPath && len(req.Header.Values("X-Forwarded-For")) > 0 {
		w.Header().Set("Connection", "close")
		aws.RefuseForwarded(w)
		r.mets.refused.WithLabelValues("forwarded").Inc()
		return http.StatusForbidden
	}
	// What HTTP/2 cannot carry for the VM is refused here: sent on, it
	// would fail as a server failing does, and move the relay on.
	if req.Method == http.MethodConnect {
		w.Header().Set("Connection", "close")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		r.mets.refused.WithLabelValues("method").Inc()
		return http.StatusMethodNotAllowed
	}
	if headerListSize(req.Header) > maxHeaderList {
		w.Header().Set("Connection", "close")
		http.Error(w, "request header fields too large", http.StatusRequestHeaderFieldsTooLarge)
		r.mets.refused.WithLabelValues("headers").Inc()
		return http.StatusRequestHeaderFieldsTooLarge
	}
	var body []byte
	if req.Body != nil && req.Body != http.NoBody {
		body, err = io.ReadAll(io.LimitReader(req.Body, maxBody+1))
		if err != nil {
			return 0 // the body timed out, or the VM left
		}
		if len(body) > maxBody {
			w.Header().Set("Connection", "close")
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
			r.mets.refused.WithLabelValues("body").Inc()
			return http.StatusRequestEntityTooLarge
		}
	}
	hdr := make(http.Header, len(req.Header)+2)
	for k, v := range req.Header {
		hdr[k] = v
	}
	for _, c := range req.Header.Values("Connection") {
		for f := range strings.SplitSeq(c, ",") {
			if f = strings.TrimSpace(f); f != "" {
				delete(hdr, http.CanonicalHeaderKey(f))
			}
		}
	}
	for _, k := range hopByHop {
		delete(hdr, k)
	}
	caller.Strip(hdr)
	hdr[caller.NetworkHeader] = []string{network}
	hdr[caller.SourceHeader] = []string{src.String()}

	resp, err := r.send(req.Context(), req.Method, req.URL, req.Host, hdr, body)
	if err != nil {
		if req.Context().Err() != nil {
			return 0
		}
		r.log.Warn("no server answered", "network", network, "source", src, "err", err)
		http.Error(w, "no metadata server answered", http.StatusBadGateway)
		return http.StatusBadGateway
	}
	defer resp.Body.Close()
	h := w.Header()
	for k, v := range resp.Header {
		h[k] = v
	}
	for _, k := range hopByHop {
		delete(h, k)
	}
	if v := resp.Header.Get(caller.HopLimitHeader); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 1 && n <= 255 {
			if c, ok := req.Context().Value(connKey{}).(syscall.Conn); ok {
				if err := aws.SetHopLimit(c, n); err != nil {
					r.log.Warn("set the hop limit of a token answer", "source", src, "err", err)
				}
			}
		}
	}
	closeAfter := resp.Header.Get(caller.CloseHeader) != ""
	caller.Strip(h)
	if closeAfter {
		h.Set("Connection", "close")
	}
	if resp.ContentLength >= 0 {
		h.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	w.WriteHeader(resp.StatusCode)
	if _, err := io.Copy(w, resp.Body); err != nil {
		r.log.Debug("copy an answer", "source", src, "err", err)
	}
	return resp.StatusCode
}

// send sends a request to the server in use, and on failure to the
// next, until one answers, ctx ends, or RetryFor has passed since the
// first failure. Each attempt shares hdr, which nothing writes.
func (r *Relay) send(ctx context.Context, method string, target *url.URL, host string, hdr http.Header, body []byte) (*http.Response, error) {
	var failingSince time.Time
	backoff := 25 * time.Millisecond
	tried := 0
	for {
		i := int(r.cur.Load())
		u := r.ups[i]
		resp, err := u.send(ctx, method, target, host, hdr, body)
		if err == nil && resp.Header.Get(caller.RetryHeader) == "" {
			return resp, nil
		}
		if err == nil {
			// The server is going away and did not serve it.
			resp.Body.Close()
			err = fmt.Errorf("server %s is shutting down", u.base.Host)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		now := time.Now()
		if failingSince.IsZero() {
			failingSince = now
		}
		r.mets.upstreamErrors.WithLabelValues(u.base.Host).Inc()
		r.log.Debug("a server failed", "server", u.base.Host, "err", err)
		// Move on, unless another request already did.
		next := (i + 1) % len(r.ups)
		if r.cur.CompareAndSwap(int32(i), int32(next)) && next != i {
			r.mets.failovers.Inc()
			r.log.Warn("moving to another server", "from", u.base.Host, "to", r.ups[next].base.Host, "err", err)
		}
		if now.Sub(failingSince) >= r.cfg.RetryFor {
			return nil, err
		}
		tried++
		if tried < len(r.ups) {
			continue // the next server at once
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		backoff = min(backoff*2, time.Second)
	}
}

// Package aws serves the EC2 instance metadata service (IMDS) to a
// fleet's aws VMs: IMDSv2 session tokens, the instance's keys, its
// scheduled events, Spot interruption notices and rebalance
// recommendations, and its Auto Scaling target lifecycle state, all
// rendered from the engine's views. It also holds a Go client of that
// service.
//
// docs/aws-wire.md records the wire facts it follows and their sources.
package aws

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/history"
	"github.com/forewarn/forewarn/internal/caller"
	"github.com/forewarn/forewarn/internal/ratelimit"
	"github.com/forewarn/forewarn/internal/slots"
	"github.com/forewarn/forewarn/metrics"
)

// The IMDSv2 header names.
const (
	TokenHeader    = "X-aws-ec2-metadata-token"
	TokenTTLHeader = "X-aws-ec2-metadata-token-ttl-seconds"
)

// tokenKey and ttlKey are TokenHeader and TokenTTLHeader as net/http
// keys headers.
var (
	tokenKey = http.CanonicalHeaderKey(TokenHeader)
	ttlKey   = http.CanonicalHeaderKey(TokenTTLHeader)
)

// TokenPath is where a VM PUTs for a session token.
const TokenPath = "/latest/api/token"

// MaxTokenTTL is the longest session a token can ask for, six hours.
const MaxTokenTTL = 21600

var (
	hdrServer = []string{"EC2ws"}
	hdrText   = []string{"text/plain"}
	hdrHTML   = []string{"text/html"}
	hdrClose  = []string{"close"}
)

// Server serves the EC2 instance metadata service to the fleet's aws VMs.
// It follows the inventory: a VM added is served as soon as the change
// that adds it returns, and a VM removed is refused as an unknown address.
type Server struct {
	eng *engine.Engine
	log *slog.Logger
	// slots holds each EC2 VM's document, last token and throttling
	// state, made and dropped with the VM.
	slots *slots.Table[slot]
	// keys are the signers of the engine's signing keys in force: a
	// token names no VM, its signature does.
	keys atomic.Pointer[keyring]
	// ttls holds the remaining-TTL header values answers share.
	ttls ttlValues
	// limits throttles each VM; nil when throttling is off.
	limits *ratelimit.Limiter
	// metrics records requests; nil records nothing.
	metrics *metrics.API
	// history records each VM's requests; nil records nothing.
	history *history.History
}

// slot is one EC2 VM's state in the server, for one registration of it.
type slot struct {
	doc atomic.Pointer[doc]
	// lastToken holds the newest token the VM presented that checked
	// out, so that a VM reusing its token (they do, for hours) costs no
	// signature check.
	lastToken atomic.Pointer[checked]
	limit     ratelimit.State
	// reg is the VM's registration (engine.View.Registration), which
	// its tokens are signed for: a token issued before the VM left the
	// inventory is refused after it is registered again.
	reg atomic.Uint64
}

// Routes of the request metrics: the route label's values.
const (
	routeToken = iota
	routeEvents
	routeSpot
	routeAutoscaling
	routeMetaData
	routeDynamic
	routeOther
)

var routes = []string{
	routeToken:       "token",
	routeEvents:      "events",
	routeSpot:        "spot",
	routeAutoscaling: "autoscaling",
	routeMetaData:    "meta-data",
	routeDynamic:     "dynamic",
	routeOther:       "other",
}

// route returns the metrics route of a request path: the token, the
// maintenance keys (events, spot, autoscaling), the rest of meta-data,
// dynamic (at any version), and everything else.
func route(p string) int {
	if p == TokenPath {
		return routeToken
	}
	_, key, ok := split(p)
	if !ok {
		return routeOther
	}
	switch {
	case key == "meta-data/events" || strings.HasPrefix(key, "meta-data/events/"):
		return routeEvents
	case key == "meta-data/spot" || strings.HasPrefix(key, "meta-data/spot/"):
		return routeSpot
	case key == "meta-data/autoscaling" || strings.HasPrefix(key, "meta-data/autoscaling/"):
		return routeAutoscaling
	case key == "meta-data" || strings.HasPrefix(key, "meta-data/"):
		return routeMetaData
	case key == "dynamic" || strings.HasPrefix(key, "dynamic/"):
		return routeDynamic
	}
	return routeOther
}

// SetHistory records each VM's requests in h; nil records nothing.
// Call it before serving.
func (s *Server) SetHistory(h *history.History) { s.history = h }

// SetMetrics records the server's requests in m, as API "aws"; nil
// records nothing. Call it before serving.
func (s *Server) SetMetrics(m *metrics.Metrics) { s.metrics = m.API("aws", routes) }

// NewServer returns a Server answering for eng's inventory. It renders
// every aws VM's event keys now and again whenever the engine publishes
// a change, and makes and drops the VMs' slots as the inventory changes;
// a VM's keys that follow from its definition alone (its instance ID,
// hostname, identity document and the like) wait for the VM's first
// request for one of them, and are kept while its definition stays.
func NewServer(eng *engine.Engine, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Parallel: the function below touches its own slot, and the render
	// cache takes its lock.
	s := &Server{eng: eng, log: log, slots: slots.New[slot](forewarn.AWS).Parallel()}
	cache := &renderCache{}
	mk := func() *slot { return new(slot) }
	eng.SubscribeBatch(func(vs []*engine.View) {
		s.slots.Update(vs, mk, func(sl *slot, v *engine.View) {
			if sl.reg.Load() != v.Registration {
				// New, or registered again while this replica missed
				// the removal: its tokens are another registration's.
				sl.reg.Store(v.Registration)
				sl.lastToken.Store(nil)
			}
			var df *def
			if prev := sl.doc.Load(); prev != nil && *prev.def.vm == *v.VM {
				df = prev.def // and its static answers, if built
			} else {
				df = &def{vm: v.VM} // new, or a new definition
			}
			sl.doc.Store(render(v, df, cache))
		}, nil)
	})
	return s
}

// DefaultRateLimit is each EC2 VM's requests per second by default:
// about a fifth of the packets per second EC2 lets an instance send to
// its metadata service (1024), enough for any client that polls.
const DefaultRateLimit = 200

// SetRateLimit throttles each EC2 VM to rate requests per second (in
// bursts of up to rate requests); excess requests get 429. A rate that
// is not a positive finite number turns throttling off. Call it before
// serving.
func (s *Server) SetRateLimit(rate float64) {
	s.limits = ratelimit.ForRate(rate)
	s.slots.Range(func(_ string, sl *slot) bool {
		sl.limit.Reset()
		return true
	})
}

// Caller returns the VM whose requests come from r's source address in
// the inventory in force, preferring its catch-all EC2 VM for unknown
// addresses, or nil. It may be a VM of another API.
func (s *Server) Caller(r *http.Request) *forewarn.VM {
	id, ok := caller.Of(r)
	if !ok {
		return nil
	}
	return s.eng.LookupOn(id.Network, id.Addr.Addr(), forewarn.AWS)
}

// connKey is the context key of the connection a request came on.
type connKey struct{}

// ConnContext records each connection in its requests' context, so that
// the token PUT can set the IP TTL of its answer to the VM's hop limit.
// Install it as the metadata http.Server's ConnContext.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// ServeHTTP serves the version list at /, and everything under each
// version. A path with empty segments (//latest/meta-data/ or
// /latest//meta-data/) is served as the path without them, as EC2 does.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.Contains(r.URL.Path, "//") {
		r = withPath(r, CleanPath(r.URL.Path))
	}
	// The caller is looked up once, for the history and the answer.
	vm := s.Caller(r)
	// One reading of the clock at the start and one at the end serve
	// both the history and the metrics.
	start := time.Now()
	hw := s.history.StartAt(w, history.NameOf(vm), start)
	mw := s.metrics.Start(hw, r)
	s.serve(mw, r, vm)
	took := time.Since(start)
	s.metrics.Done(mw, route(r.URL.Path), took)
	if s.history != nil {
		s.history.DoneAfter(hw, took, history.AWS, r.Method, r.URL.Path, "")
	}
}

// serve answers r from vm, the VM Caller identifies, or nil.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, vm *forewarn.VM) {
	h := w.Header()
	h["Server"] = hdrServer
	var sl *slot
	if vm != nil && vm.Provider == forewarn.AWS {
		// A VM the inventory has but this server not yet, in the instant
		// between the engine installing a change and publishing it, is
		// not one yet.
		if sl = s.slots.Load(vm.Name); sl == nil {
			vm = nil
		}
	}
	switch {
	case vm == nil:
		// Refused, not mistaken: close the connection after the answer,
		// so that the caller holds nothing.
		h["Connection"] = hdrClose
		writeError(w, http.StatusForbidden)
		return
	case vm.Provider != forewarn.AWS:
		writeError(w, http.StatusNotFound)
		return
	}
	if !s.limits.Allow(&sl.limit) {
		// Refused, not mistaken: the caller holds no connection.
		h["Connection"] = hdrClose
		writeError(w, http.StatusTooManyRequests)
		return
	}
	d := sl.doc.Load()
	if d.gone {
		// A terminated instance has no metadata service.
		h["Connection"] = hdrClose
		writeError(w, http.StatusNotFound)
		return
	}
	if r.URL.Path == TokenPath {
		s.handleToken(w, r, vm, sl, d)
		return
	}
	if strings.HasSuffix(r.URL.Path, "/api/token") && r.Method == http.MethodPut {
		writeError(w, http.StatusForbidden) // a versioned token path
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		notAllowed(w, "GET, HEAD")
		return
	}
	if tok, ok := r.Header[tokenKey]; ok || d.def.tokensRequired() {
		left := s.checkAny(vm, sl, tok)
		if left == nil {
			// Refused, not mistaken, as a 403 or a 429: the caller
			// holds no connection (clients fetch a new token, on a new
			// connection, and try again).
			h["Connection"] = hdrClose
			writeError(w, http.StatusUnauthorized)
			return
		}
		// The token's remaining life, which clients use to renew it.
		h[ttlKey] = left
	}
	s.eng.NoteRequest(vm.Name) // the operator's last call; at most an hourly write
	b := lookup(d, r.URL.Path)
	if b == nil {
		writeError(w, http.StatusNotFound)
		return
	}
	if s.history != nil {
		d.see(s.history, w, b)
	}
	// net/http sets Content-Length itself for an answer this small.
	h["Content-Type"] = hdrText
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// handleToken answers PUT /latest/api/token with a session token for vm,
// valid for the seconds the TTL header asks, in a packet whose IP TTL is
// the VM's hop limit.
func (s *Server) handleToken(w http.ResponseWriter, r *http.Request, vm *forewarn.VM, sl *slot, d *doc) {
	h := w.Header()
	switch r.Method {
	case http.MethodPut:
	case http.MethodOptions:
		h.Set("Allow", "OPTIONS, PUT")
		h["Content-Type"] = hdrText
		h["Content-Length"] = []string{"0"}
		w.WriteHeader(http.StatusOK)
		return
	default:
		notAllowed(w, "OPTIONS, PUT")
		return
	}
	if len(r.Header.Values("X-Forwarded-For")) > 0 {
		writeError(w, http.StatusForbidden)
		return
	}
	vals := r.Header.Values(TokenTTLHeader)
	ttl := -1
	if len(vals) == 1 {
		ttl = parseTTL(vals[0])
	}
	if ttl < 1 || ttl > MaxTokenTTL {
		writeError(w, http.StatusBadRequest)
		return
	}
	now := time.Now()
	tok := s.issue(vm, sl, now, now.Add(time.Duration(ttl)*time.Second))
	if caller.Relayed(r) != nil {
		// The relay sets it on its answer to the VM: only the host
		// holds the VM's connection.
		h[caller.HopLimitHeader] = []string{strconv.Itoa(d.def.hopLimit())}
	} else if c, ok := r.Context().Value(connKey{}).(syscall.Conn); ok {
		// A connection without a socket (an in-memory pipe) has no hop
		// limit to set.
		if err := setTTL(c, d.def.hopLimit()); err != nil && !errors.Is(err, errors.ErrUnsupported) {
			s.log.Warn("set the hop limit of a token answer", "vm", vm.Name, "err", err)
		}
	}
	h["Content-Type"] = hdrText
	h.Set(TokenTTLHeader, strconv.Itoa(ttl))
	h["Content-Length"] = []string{strconv.Itoa(len(tok))}
	// As EC2 does: the hop limit stays on this answer's connection only,
	// and a caller too far away holds no connection.
	h["Connection"] = hdrClose
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(tok))
}

// parseTTL returns the seconds a TTL header value asks for: 1 to 5
// decimal digits and nothing else, or -1.
func parseTTL(v string) int {
	if len(v) == 0 || len(v) > 5 {
		return -1
	}
	n := 0
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return -1
		}
		n = n*10 + int(v[i]-'0')
	}
	return n
}

// setTTL sets the IP TTL and, on an IPv6 socket, the IPv6 unicast hop
// limit of the socket under c: Linux accepts IP_TTL on an IPv6 socket
// but applies it only to IPv4-mapped peers.
// SetHopLimit sets the IP TTL (IPv6 hop limit) of the packets c sends
// from now on to n, as the answer to a token request has them: a relay
// calls it on the VM's connection with the hop limit the server gives.
func SetHopLimit(c syscall.Conn, n int) error { return setTTL(c, n) }

// RefuseForwarded answers a token request that carries X-Forwarded-For
// as EC2 does: 403, for a request that came through a proxy.
func RefuseForwarded(w http.ResponseWriter) { writeError(w, http.StatusForbidden) }

func setTTL(c syscall.Conn, ttl int) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var e4, e6 error
	err = rc.Control(func(fd uintptr) {
		e4 = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_TTL, ttl)
		e6 = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IPV6, syscall.IPV6_UNICAST_HOPS, ttl)
	})
	switch {
	case err != nil:
		return err
	case e4 != nil && e6 != nil:
		return e4
	}
	return nil
}

// errorPages holds the XHTML page EC2 answers each error status with:
// its 404 page byte for byte, and the same page titled for the others
// (docs/aws-wire.md, section 2).
var errorPages = map[int][]byte{}

func init() {
	for status, title := range map[int]string{
		400: "400 - Missing or Invalid Parameters", 401: "401 - Unauthorized",
		403: "403 - Forbidden", 404: "404 - Not Found", 429: "429 - Too Many Requests",
	} {
		errorPages[status] = fmt.Appendf(nil, `<?xml version="1.0" encoding="iso-8859-1"?>
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN"
		 "http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">
<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="en" lang="en">
 <head>
  <title>%[1]s</title>
 </head>
 <body>
  <h1>%[1]s</h1>
 </body>
</html>
`, title)
	}
}

// notAllowed answers 405 as EC2 does: no body, text/plain, and Allow.
func notAllowed(w http.ResponseWriter, allow string) {
	h := w.Header()
	h.Set("Allow", allow)
	h["Content-Type"] = hdrText
	h["Content-Length"] = []string{"0"}
	w.WriteHeader(http.StatusMethodNotAllowed)
}

// writeError answers with status and EC2's error page for it.
func writeError(w http.ResponseWriter, status int) {
	b := errorPages[status]
	h := w.Header()
	h["Content-Type"] = hdrHTML
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// Documents returns what the EC2 VM named vm sees now: the values of
// events/maintenance/scheduled and spot/instance-action (left out while
// they answer 404), keyed by their paths; nil when vm is not one of the
// inventory's EC2 VMs.
func (s *Server) Documents(vm string) map[string]string {
	sl := s.slots.Load(vm)
	if sl == nil {
		return nil
	}
	d := sl.doc.Load()
	out := map[string]string{}
	if d.scheduled != nil {
		out["/latest/meta-data/events/maintenance/scheduled"] = string(d.scheduled.bytes())
	}
	if d.instanceAction != nil {
		out["/latest/meta-data/spot/instance-action"] = string(d.instanceAction)
	}
	return out
}

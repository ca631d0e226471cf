package gce

import (
	"errors"
	"fmt"
	"html"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/history"
	"github.com/forewarn/forewarn/internal/caller"
	"github.com/forewarn/forewarn/internal/echo"
	"github.com/forewarn/forewarn/internal/query"
	"github.com/forewarn/forewarn/internal/ratelimit"
	"github.com/forewarn/forewarn/internal/signal"
	"github.com/forewarn/forewarn/internal/slots"
	"github.com/forewarn/forewarn/metrics"
)

// Prefix is the path under which the metadata keys live.
const Prefix = "/computeMetadata/v1/"

var (
	hdrGoogle = []string{"Google"}
	hdrText   = []string{"application/text"}
	hdrJSON   = []string{"application/json"}
	hdrHTML   = []string{"text/html; charset=UTF-8"}
	hdrClose  = []string{"close"}
)

// Server serves the Compute Engine metadata API to the fleet's GCE VMs.
// It follows the inventory: a VM added is served as soon as the change
// that adds it returns, and a VM removed is refused as an unknown address
// and its held long-polls end (docs/wire-decisions.md).
type Server struct {
	eng *engine.Engine
	log *slog.Logger
	// slots holds each GCE VM's documents, held long-polls and throttling
	// state, made and dropped with the VM.
	slots *slots.Table[slot]
	// MaxWaiters caps each VM's concurrent held long-polls (0: no cap);
	// an excess request gets 503. Set it before serving.
	MaxWaiters int
	// limits throttles each VM; nil when throttling is off.
	limits *ratelimit.Limiter
	// closing is closed by Shutdown to release every held long-poll.
	closing   chan struct{}
	closeOnce sync.Once
	// metrics records requests and held long-polls; nil records nothing.
	metrics *metrics.API
	// history records each VM's requests; nil records nothing.
	history *history.History
}

// slot is one GCE VM's state in the server.
type slot struct {
	// doc is the VM's newest document, the end of its chain.
	doc atomic.Pointer[doc]
	// waiters counts the VM's held long-polls.
	waiters atomic.Int64
	limit   ratelimit.State
	// gone fires when the VM leaves the inventory (or stops being a GCE
	// VM), ending its held long-polls.
	gone signal.Signal
}

func newSlot() *slot { return new(slot) }

// Routes of the request metrics: the route label's values.
const (
	routeMaintenance = iota
	routePreempted
	routeUpcoming
	routeScheduling
	routeOtherKey
	routeOther
)

var routes = []string{
	routeMaintenance: "maintenance-event",
	routePreempted:   "preempted",
	routeUpcoming:    "upcoming-maintenance",
	routeScheduling:  "scheduling",
	routeOtherKey:    "other-key",
	routeOther:       "other",
}

// route returns the metrics route of a request path: the maintenance
// keys each have one, other keys under Prefix share one, and everything
// else (/, listings above Prefix, unknown paths) another.
func route(p string) int {
	key, ok := strings.CutPrefix(p, Prefix)
	switch {
	case !ok:
		return routeOther
	case key == "instance/maintenance-event":
		return routeMaintenance
	case key == "instance/preempted":
		return routePreempted
	case key == "instance/upcoming-maintenance":
		return routeUpcoming
	case key == "instance/scheduling" || strings.HasPrefix(key, "instance/scheduling/"):
		return routeScheduling
	}
	return routeOtherKey
}

// SetHistory records each VM's requests in h; nil records nothing.
// Call it before serving.
func (s *Server) SetHistory(h *history.History) { s.history = h }

// SetMetrics records the server's requests and held long-polls in m, as
// API "gce"; nil records nothing. Call it before serving.
func (s *Server) SetMetrics(m *metrics.Metrics) { s.metrics = m.API("gce", routes) }

// Shutdown releases every held wait_for_change request with a 503, which
// clients retry, as they do during real maintenance. Register it with
// http.Server.RegisterOnShutdown.
func (s *Server) Shutdown() {
	s.closeOnce.Do(func() { close(s.closing) })
}

// DefaultMaxWaiters is the default per-VM cap on held long-polls.
const DefaultMaxWaiters = 32

// DefaultRateLimit is each GCE VM's requests per second by default. The
// metadata server rate-limits with 429 but publishes no figure
// (docs/wire-decisions.md). 50 a second leaves room to spare for a VM
// that watches every maintenance key with long-polls, issued again after
// each change, and reads instance/ once a second besides: about 18 a
// second while its keys change ten times a second.
const DefaultRateLimit = 50

// SetRateLimit throttles each GCE VM to rate requests per second (in
// bursts of up to rate requests); excess requests get 429 and the
// connection is closed. A wait_for_change request counts once, when it
// is made: holding it costs nothing. A rate that is not a positive
// finite number turns throttling off. Call it before serving.
func (s *Server) SetRateLimit(rate float64) {
	s.limits = ratelimit.ForRate(rate)
	s.slots.Range(func(_ string, sl *slot) bool {
		sl.limit.Reset()
		return true
	})
}

// NewServer returns a Server answering for eng's inventory. It renders
// every GCE VM's document now and again whenever the engine publishes a
// change (the keys that change with the view; the rest of a VM's tree
// is rendered at its first request that needs it), and makes and drops
// the VMs' slots as the inventory changes.
func NewServer(eng *engine.Engine, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		eng:     eng,
		log:     log,
		slots:   slots.New[slot](forewarn.GCE).Parallel(), // render is safe for different slots at once
		closing: make(chan struct{}),
	}
	cache := &renderCache{}
	eng.SubscribeBatch(func(vs []*engine.View) {
		s.slots.Update(vs, newSlot, func(sl *slot, v *engine.View) {
			prev := sl.doc.Load()
			from := prev
			if prev != nil && *prev.statics.vm != *v.VM {
				from = nil // a new definition: its whole tree again
			}
			d := render(v, from, cache)
			if d == nil {
				return // nothing a GCE client sees changed
			}
			if old := sl.doc.Swap(d); old != nil {
				old.next = d
				old.changed.Fire()
			}
		}, func(sl *slot) { sl.gone.Fire() })
	})
	return s
}

// Caller returns the VM whose requests come from r's source address in
// the inventory in force, or nil. It may be a VM of another API.
func (s *Server) Caller(r *http.Request) *forewarn.VM {
	id, ok := caller.Of(r)
	if !ok {
		return nil
	}
	return s.eng.LookupOn(id.Network, id.Addr.Addr(), forewarn.GCE)
}

// writeError writes an HTML error page, as the real server does; clients
// read only the status.
func writeError(w http.ResponseWriter, r *http.Request, status int, detail string) {
	w.Header()["Content-Type"] = hdrHTML
	w.WriteHeader(status)
	fmt.Fprintf(w, "<!DOCTYPE html>\n<html lang=en>\n<meta charset=utf-8>\n<title>Error %d (%s)</title>\n<p><b>%d.</b> %s\n<p>URL: <code>%s</code>\n",
		status, http.StatusText(status), status, html.EscapeString(detail), html.EscapeString(echo.Clip(r.URL.Path)))
}

// pageTooMany is the error page of a request over the VM's rate limit,
// written as it is: throttled requests cost no formatting.
var pageTooMany = []byte("<!DOCTYPE html>\n<html lang=en>\n<meta charset=utf-8>\n<title>Error 429 (Too Many Requests)</title>\n<p><b>429.</b> Too many requests from this VM; retry later.\n")

// params are the query parameters the server understands.
type params struct {
	alt       string // "", "json" or "text"
	recursive bool
	wait      bool
	lastETag  string
	timeout   time.Duration
	// timeoutGiven reports whether timeout bounds the wait; a timeout_sec
	// too large for a duration leaves the wait unbounded.
	timeoutGiven  bool
	hasParameters bool
}

// maxTimeoutSec is the largest timeout_sec a time.Duration holds.
const maxTimeoutSec = uint64(math.MaxInt64 / int64(time.Second))

// parseParams reads the query string; unknown parameters are ignored, as
// the real server does, and bad values of known ones are refused. It
// does not allocate for ordinary queries.
func parseParams(raw string) (params, string) {
	var p params
	if raw == "" {
		return p, ""
	}
	var buf [8]query.Param
	q, err := query.Parse(raw, buf[:0])
	if err != nil {
		return p, "malformed query string"
	}
	p.hasParameters = true
	get := func(k string) string { v, _ := query.Get(q, k); return v }
	boolean := func(name string) (bool, string) {
		v := get(name)
		switch {
		case v == "" || strings.EqualFold(v, "false"):
			return false, ""
		case strings.EqualFold(v, "true"):
			return true, ""
		}
		return false, fmt.Sprintf("%s must be true or false, not %q", name, echo.Clip(v))
	}
	var msg string
	if p.recursive, msg = boolean("recursive"); msg != "" {
		return p, msg
	}
	if p.wait, msg = boolean("wait_for_change"); msg != "" {
		return p, msg
	}
	switch alt := get("alt"); {
	case alt == "":
	case strings.EqualFold(alt, "json"):
		p.alt = "json"
	case strings.EqualFold(alt, "text"):
		p.alt = "text"
	default:
		return p, fmt.Sprintf("alt must be json or text, not %q", echo.Clip(alt))
	}
	// An empty last_etag counts as none.
	p.lastETag = get("last_etag")
	if ts := get("timeout_sec"); ts != "" {
		n, err := strconv.ParseUint(ts, 10, 64)
		switch {
		case errors.Is(err, strconv.ErrRange) || err == nil && n > maxTimeoutSec:
			// Longer than a time.Duration holds (292 years): unbounded,
			// never wrapped round to an instant.
		case err != nil:
			return p, fmt.Sprintf("timeout_sec must be a whole number of seconds, not %q", echo.Clip(ts))
		default:
			p.timeout, p.timeoutGiven = time.Duration(n)*time.Second, true
		}
	}
	return p, ""
}

// ServeHTTP serves "/", "/computeMetadata/" and everything below
// /computeMetadata/v1/.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
		s.history.DoneAfter(hw, took, history.GCE, r.Method, r.URL.Path, "")
	}
}

// serve answers r from vm, the VM Caller identifies, or nil.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, vm *forewarn.VM) {
	h := w.Header()
	h["Metadata-Flavor"] = hdrGoogle
	var sl *slot
	if vm != nil && vm.Provider == forewarn.GCE {
		// A VM the inventory has but this server not yet, in the instant
		// between the engine installing a change and publishing it, is
		// not one yet.
		if sl = s.slots.Load(vm.Name); sl == nil {
			vm = nil
		}
	}
	switch {
	case vm == nil:
		addr := r.RemoteAddr
		if id, ok := caller.Of(r); ok {
			addr = id.Where()
		}
		// Refused, not mistaken: close the connection after the answer,
		// so that the caller holds nothing.
		h["Connection"] = hdrClose
		writeError(w, r, http.StatusForbidden, "No VM of the fleet has the source address "+addr+".")
		return
	case vm.Provider != forewarn.GCE:
		writeError(w, r, http.StatusNotFound, "The requested URL was not found on this server.")
		return
	case !s.limits.Allow(&sl.limit):
		// Refused, not mistaken: a fixed page, nothing looked up or
		// rendered, and the connection closes after it, so that a
		// caller pipelining requests holds nothing.
		h["Connection"] = hdrClose
		h["Content-Type"] = hdrHTML
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write(pageTooMany)
		return
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, r, http.StatusMethodNotAllowed, "The method "+echo.Clip(r.Method)+" is not allowed.")
		return
	case len(r.Header.Values("X-Forwarded-For")) > 0:
		writeError(w, r, http.StatusForbidden, "Requests with an X-Forwarded-For header are not allowed.")
		return
	}
	switch r.URL.Path {
	case "/":
		writeText(w, []byte("computeMetadata/\n"), nil)
		return
	case "/computeMetadata", "/computeMetadata/v1":
		http.Redirect(w, r, r.URL.Path+"/", http.StatusMovedPermanently)
		return
	case "/computeMetadata/":
		writeText(w, []byte("v1/\n"), nil)
		return
	}
	if r.Header.Get("Metadata-Flavor") != "Google" {
		history.NoteNoHeader(w)
		writeError(w, r, http.StatusForbidden, "Missing Metadata-Flavor:Google header.")
		return
	}
	key, ok := strings.CutPrefix(r.URL.Path, Prefix)
	if !ok {
		writeError(w, r, http.StatusNotFound, "The requested URL was not found on this server.")
		return
	}
	p, msg := parseParams(r.URL.RawQuery)
	if msg != "" {
		writeError(w, r, http.StatusBadRequest, "Bad request: "+msg+".")
		return
	}
	d := sl.doc.Load()
	n := d.node(key)
	if n != nil {
		n = n.ready()
	}
	if n == nil {
		if d.has(key + "/") {
			u := *r.URL
			u.Path += "/"
			http.Redirect(w, r, u.RequestURI(), http.StatusMovedPermanently)
			return
		}
		writeError(w, r, http.StatusNotFound, "The requested URL was not found on this server.")
		return
	}
	if key == "instance/maintenance-event" {
		s.eng.NoteQuery(vm.Name)
	}
	if p.wait {
		history.NoteLongPoll(w, key == "instance/maintenance-event", p.lastETag != "")
	}
	if p.wait && p.lastETag == "" {
		// No last_etag: wait for a change from the value current now, as
		// the seed's own curl and PowerShell samples expect.
		p.lastETag = n.etag[0]
	}
	if p.wait && n.etag[0] == p.lastETag {
		held := &sl.waiters
		if held.Add(1) > int64(s.MaxWaiters) && s.MaxWaiters > 0 {
			held.Add(-1)
			writeError(w, r, http.StatusServiceUnavailable, fmt.Sprintf("Too many held wait_for_change requests for this VM (at most %d).", s.MaxWaiters))
			return
		}
		s.metrics.Hold(1)
		history.NoteHeld(w)
		var end pollEnd
		d, n, end = s.wait(r, sl, d, key, n, p)
		s.metrics.Hold(-1)
		held.Add(-1)
		switch end {
		case pollShutdown:
			history.NotePoll(w, history.Shutdown)
			if caller.Relayed(r) != nil {
				// The relay sends it again to another server: the VM
				// sees no answer but that one's.
				w.Header()[caller.RetryHeader] = []string{"1"}
			}
			writeError(w, r, http.StatusServiceUnavailable, "The metadata server is shutting down; retry.")
			return
		case pollClientGone:
			history.NotePoll(w, history.ClientGone)
			return
		case pollRemoved:
			// The key is no longer defined for this caller: 404, the
			// answer on which real clients stop watching rather than
			// retry (docs/wire-decisions.md); it holds nothing more.
			h["Connection"] = hdrClose
			writeError(w, r, http.StatusNotFound, msgRemoved)
			return
		case pollChanged:
			history.NotePoll(w, history.Changed)
		case pollTimeout:
			history.NotePoll(w, history.Timeout)
		}
	}
	if n.dir && p.recursive {
		// A recursive read of instance/ or of the root (as guest
		// agents make) shows every dynamic key below it.
		for i, k := range dynamicKeys {
			if d.refs[i] != nil && strings.HasPrefix(k, key) {
				s.history.See(w, d.refs[i])
			}
		}
	} else if ref := d.ref(key); ref != nil && !n.absent {
		s.history.See(w, ref)
	}
	write(w, n, p)
}

// msgRemoved is the detail of the 404 that ends a long-poll of a VM that
// left the inventory.
const msgRemoved = "This VM left the fleet: the requested key is no longer defined."

// pollEnd is how a held long-poll ended.
type pollEnd int

const (
	pollChanged pollEnd = iota
	pollTimeout
	pollClientGone
	pollShutdown
	pollRemoved // the VM left the inventory
)

// wait holds a wait_for_change request of the VM of slot sl until key's
// ETag differs from last_etag, walking the chain of documents from d so
// that no change is missed, until timeout_sec passes, the client goes
// away, the server shuts down or the VM leaves the inventory. It returns
// the node with the document it is from, and how the wait ended.
func (s *Server) wait(r *http.Request, sl *slot, d *doc, key string, n *node, p params) (*doc, *node, pollEnd) {
	if n.etag[0] != p.lastETag {
		return d, n, pollChanged
	}
	var timeout <-chan time.Time
	if p.timeoutGiven {
		t := time.NewTimer(p.timeout)
		defer t.Stop()
		timeout = t.C
	}
	for {
		select {
		case <-r.Context().Done():
			return d, n, pollClientGone
		case <-s.closing:
			return d, n, pollShutdown
		case <-sl.gone.C():
			return d, n, pollRemoved
		case <-timeout:
			return d, n, pollTimeout
		case <-d.changed.C():
			d = d.next
			n = d.node(key).ready()
			if n.etag[0] != p.lastETag {
				return d, n, pollChanged
			}
		}
	}
}

// write sends node n in the form p asks for.
func write(w http.ResponseWriter, n *node, p params) {
	h := w.Header()
	h["ETag"] = n.etag
	if n.absent {
		h["Content-Type"] = hdrJSON
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write(n.text)
		return
	}
	switch {
	case n.dir && p.recursive && p.alt == "text":
		writeText(w, n.recursiveText, n.etag)
	case n.dir && p.recursive:
		writeJSON(w, n.recursive)
	case p.alt == "json":
		writeJSON(w, n.json)
	default:
		h["Content-Length"] = n.textLen
		writeText(w, n.text, n.etag)
	}
}

func writeText(w http.ResponseWriter, b []byte, etag []string) {
	h := w.Header()
	h["Content-Type"] = hdrText
	if etag != nil {
		h["ETag"] = etag
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

func writeJSON(w http.ResponseWriter, b []byte) {
	w.Header()["Content-Type"] = hdrJSON
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// Documents returns what the GCE VM named vm sees now: the values of
// instance/maintenance-event and instance/upcoming-maintenance (left out
// while absent), keyed by their paths; nil when vm is not one of the
// inventory's GCE VMs.
func (s *Server) Documents(vm string) map[string]string {
	sl := s.slots.Load(vm)
	if sl == nil {
		return nil
	}
	d := sl.doc.Load()
	out := map[string]string{}
	for _, key := range []string{"instance/maintenance-event", "instance/upcoming-maintenance"} {
		n := d.node(key)
		if n == nil {
			continue
		}
		n = n.ready()
		if n.absent {
			continue
		}
		if n.dir {
			out["/computeMetadata/v1/"+key] = string(n.recursive)
		} else {
			out["/computeMetadata/v1/"+key] = string(n.text)
		}
	}
	return out
}

package azure

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path"
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

// maxBody caps a StartRequests body.
const maxBody = 64 << 10

// Error bodies, in the shape real IMDS answers use.
const (
	msgNoHeader     = "Bad request. Required metadata header not specified"
	msgForwarded    = "Bad request. Requests with an X-Forwarded-For header are not allowed"
	msgBadVersion   = "Bad request. api-version is invalid or was not specified in the request. For more information refer to aka.ms/azureimds"
	msgDupParam     = "Bad request. Query parameter %s is specified more than once"
	msgNotFound     = "Not found"
	msgMethod       = "Method not allowed"
	msgBadBody      = "Bad request. The request body is not a valid StartRequests document"
	msgUnknownEvent = "Bad request. EventId %s is not a scheduled event of this VM"
	msgTooLarge     = "Request body too large"
	msgTooMany      = "Too many requests"
	msgBadFormat    = "Bad request. The format query parameter must be json or text"
	msgLeafFormat   = "Bad request. A leaf node requires format=text"
	msgNoSpace      = "Service unavailable. The approval could not be recorded, so it was not made; retry after some time"
)

// Server serves the Azure metadata API to the fleet's Azure VMs. It
// follows the inventory: a VM added is served as soon as the change that
// adds it returns, and a VM removed is refused as an unknown address.
type Server struct {
	eng *engine.Engine
	log *slog.Logger
	mux *http.ServeMux
	// slots holds each Azure VM's document and throttling state, made and
	// dropped with the VM.
	slots *slots.Table[slot]
	// limits throttles each VM; nil when throttling is off.
	limits *ratelimit.Limiter
	// closing is closed by Shutdown to release calls held by FirstCallDelay.
	closing   chan struct{}
	closeOnce sync.Once
	// FirstCallDelay holds the answer to the call that enables a VM's
	// scheduled events, as the real service's first call can take up to
	// two minutes. Set it before serving.
	FirstCallDelay time.Duration
	// metrics records requests; nil records nothing.
	metrics *metrics.API
	// history records each VM's requests; nil records nothing.
	history *history.History
}

// slot is one Azure VM's state in the server.
type slot struct {
	doc   atomic.Pointer[doc]
	limit ratelimit.State
	// gone fires when the VM leaves the inventory, releasing a call
	// FirstCallDelay holds.
	gone signal.Signal
}

func newSlot() *slot { return new(slot) }

// Routes of the request metrics: the route label's values.
const (
	routeEvents = iota
	routeInstance
	routeVersions
	routeOther
)

var routes = []string{
	routeEvents:   "scheduledevents",
	routeInstance: "instance",
	routeVersions: "versions",
	routeOther:    "other",
}

// route returns the metrics route of a request path.
func route(p string) int {
	switch {
	case p == "/metadata/scheduledevents":
		return routeEvents
	case p == "/metadata/instance" || strings.HasPrefix(p, "/metadata/instance/"):
		return routeInstance
	case p == "/metadata/versions":
		return routeVersions
	}
	return routeOther
}

// SetHistory records each VM's requests in h; nil records nothing.
// Call it before serving.
func (s *Server) SetHistory(h *history.History) { s.history = h }

// SetMetrics records the server's requests in m, as API "azure"; nil
// records nothing. Call it before serving.
func (s *Server) SetMetrics(m *metrics.Metrics) { s.metrics = m.API("azure", routes) }

// NewServer returns a Server answering for eng's inventory. It renders
// every Azure VM's document now and again whenever the engine publishes a
// change, and makes and drops the VMs' slots as the inventory changes.
func NewServer(eng *engine.Engine, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		closing: make(chan struct{}),
		eng:     eng,
		log:     log,
		mux:     http.NewServeMux(),
		slots:   slots.New[slot](forewarn.Azure),
	}
	// The inventory the views are of: the engine installs it before it
	// publishes them, and a lookup in it takes no lock.
	r := &renderer{vmNamed: eng.VMNamed}
	eng.SubscribeBatch(func(vs []*engine.View) {
		s.slots.Update(vs, newSlot, func(sl *slot, v *engine.View) {
			if old := sl.doc.Load(); old != nil && old.vm.CloudService != v.VM.CloudService {
				// The preview's "_" on IaaS names: events already
				// rendered may name the VM.
				r.forgetParts()
			}
			sl.doc.Store(r.render(v))
		}, func(sl *slot) { sl.gone.Fire() })
	})

	// The mux serves only paths with escapes (dispatch).
	looked := func(h func(http.ResponseWriter, *http.Request, *forewarn.VM)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { h(w, r, s.lookup(r)) }
	}
	s.mux.HandleFunc("/metadata/scheduledevents", looked(s.handleEvents))
	s.mux.HandleFunc("/metadata/instance", looked(s.handleInstance))
	s.mux.HandleFunc("/metadata/instance/", looked(s.handleInstance))
	s.mux.HandleFunc("/metadata/versions", looked(s.handleVersions))
	s.mux.HandleFunc("/", s.handleNotFound)
	return s
}

// Shutdown releases the calls FirstCallDelay holds, answering them at
// once. Register it with http.Server.RegisterOnShutdown.
func (s *Server) Shutdown() {
	s.closeOnce.Do(func() { close(s.closing) })
}

// DefaultRateLimit is the real service's limit: 5 requests a second per VM.
const DefaultRateLimit = 5

// SetRateLimit throttles each VM to rate requests per second (in bursts
// of up to rate requests); excess requests get 429. 0 turns throttling
// off, and so does any rate that is not a positive finite number
// (negative, NaN, +Inf); 'forewarn serve' refuses those but 0. Call it
// before serving.
func (s *Server) SetRateLimit(rate float64) {
	s.limits = ratelimit.ForRate(rate)
	s.slots.Range(func(_ string, sl *slot) bool {
		sl.limit.Reset()
		return true
	})
}

// ServeHTTP implements http.Handler. A path that is not in canonical form
// gets the JSON 404, not the mux's plain-text redirect.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	vm := s.lookup(r)
	name := ""
	if vm != nil && vm.Provider == forewarn.Azure {
		name = vm.Name
	}
	// One reading of the clock at the start and one at the end serve
	// both the history and the metrics.
	start := time.Now()
	hw := s.history.StartAt(w, name, start)
	mw := s.metrics.Start(hw, r)
	s.dispatch(mw, r, vm)
	took := time.Since(start)
	s.metrics.Done(mw, route(r.URL.Path), took)
	if s.history != nil {
		var buf [8]query.Param
		q, _ := query.Parse(r.URL.RawQuery, buf[:0])
		v, _ := query.Get(q, "api-version")
		if name != "" && r.URL.Path == "/metadata/scheduledevents" && CountedVersion(vm, v) {
			history.NoteCountedVersion(hw) // it counts in a finding: saved soon
		}
		s.history.DoneAfter(hw, took, history.Azure, r.Method, r.URL.Path, v)
	}
}

// dispatch hands r, from vm (as lookup found it), to the handler of its
// path, as the mux would: the four paths are matched here without it,
// and only a path with escapes goes through the mux, which matches
// their segments as escaped.
func (s *Server) dispatch(w http.ResponseWriter, r *http.Request, vm *forewarn.VM) {
	switch p := r.URL.Path; {
	case p != path.Clean(p) && p != path.Clean(p)+"/":
		writeError(w, http.StatusNotFound, msgNotFound)
	case r.URL.RawPath != "":
		s.mux.ServeHTTP(w, r)
	case p == "/metadata/scheduledevents":
		s.handleEvents(w, r, vm)
	case p == "/metadata/instance" || strings.HasPrefix(p, "/metadata/instance/"):
		s.handleInstance(w, r, vm)
	case p == "/metadata/versions":
		s.handleVersions(w, r, vm)
	default:
		s.handleNotFound(w, r)
	}
}

// lookup returns the VM whose requests come from r's source address in
// the inventory in force, of whichever API, or nil. A request looks it
// up once, for its history and its answer.
func (s *Server) lookup(r *http.Request) *forewarn.VM {
	id, ok := caller.Of(r)
	if !ok {
		return nil
	}
	return s.eng.LookupOn(id.Network, id.Addr.Addr(), forewarn.Azure)
}

var (
	hdrJSON       = []string{"application/json; charset=utf-8"}
	hdrText       = []string{"text/plain; charset=utf-8"}
	hdrRetryAfter = []string{"1"}
)

// writeError writes a JSON error body {"error": msg}.
func writeError(w http.ResponseWriter, status int, msg string) {
	b := append([]byte(`{"error": `), mustJSON(msg)...)
	writeJSON(w, status, append(b, '}'))
}

// writeJSON writes a JSON body with the status.
func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header()["Content-Type"] = hdrJSON
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only called with values that always marshal
	}
	return b
}

// writeBadVersion writes the 400 that real IMDS gives for a missing or
// unknown api-version, with the newest versions of the path.
func writeBadVersion(w http.ResponseWriter, list []string) {
	newest := make([]string, 0, 3)
	for i := len(list) - 1; i >= 0 && len(newest) < 3; i-- {
		newest = append(newest, list[i])
	}
	b := append([]byte(`{"error": `), mustJSON(msgBadVersion)...)
	b = append(b, `, "newest-versions": `...)
	b = append(b, '[')
	for i, v := range newest {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, mustJSON(v)...)
	}
	b = append(b, ']')
	writeJSON(w, http.StatusBadRequest, append(b, '}'))
}

func (s *Server) handleNotFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotFound, msgNotFound)
}

// caller checks that vm, the VM of r's source address (lookup), is one
// of this server's, and the headers every IMDS request must carry. It
// returns the VM and its slot, or writes the error and returns nil when
// the request may not proceed.
func (s *Server) caller(w http.ResponseWriter, r *http.Request, vm *forewarn.VM) (*forewarn.VM, *slot) {
	return s.callerHeader(w, r, vm, true)
}

// callerHeader is caller; with needHeader false a missing Metadata
// header is let through.
func (s *Server) callerHeader(w http.ResponseWriter, r *http.Request, vm *forewarn.VM, needHeader bool) (*forewarn.VM, *slot) {
	var sl *slot
	if vm != nil && vm.Provider == forewarn.Azure {
		// A VM the inventory has but this server not yet, in the instant
		// between the engine installing a change and publishing it, is
		// not one yet.
		if sl = s.slots.Load(vm.Name); sl == nil {
			vm = nil
		}
	}
	switch {
	case vm == nil:
		refuseUnknown(w, r)
		return nil, nil
	case vm.Provider != forewarn.Azure:
		writeError(w, http.StatusNotFound, msgNotFound)
		return nil, nil
	case len(r.Header.Values("X-Forwarded-For")) > 0:
		writeError(w, http.StatusBadRequest, msgForwarded)
		return nil, nil
	case !metadataHeaderOK(r.Header.Get("Metadata"), needHeader):
		history.NoteNoHeader(w)
		writeError(w, http.StatusBadRequest, msgNoHeader)
		return nil, nil
	}
	if d := sl.doc.Load(); d.deleted {
		refuse(w, http.StatusForbidden, "Forbidden. VM "+vm.Name+" has been deleted")
		return nil, nil
	}
	if !s.limits.Allow(&sl.limit) {
		refuse(w, http.StatusTooManyRequests, msgTooMany)
		return nil, nil
	}
	return vm, sl
}

// refuseUnknown refuses a caller whose source address, addr (err when
// it did not parse), is no Azure VM's of the inventory.
func refuseUnknown(w http.ResponseWriter, r *http.Request) {
	refuse(w, http.StatusForbidden, "Forbidden. No VM of the fleet has the source address "+caller.WhereOf(r))
}

// refuse writes the error for a caller that is refused, not mistaken,
// and closes the connection after it, so that a refused caller holds
// nothing: the server does not wait for the rest of its request.
func refuse(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Connection", "close")
	writeError(w, status, msg)
}

// metadataHeaderOK reports whether a Metadata header value h lets a
// request through: "true" in any case, or absent when it is not needed.
func metadataHeaderOK(h string, needed bool) bool {
	if h == "" {
		return !needed
	}
	return strings.EqualFold(h, "true")
}

// params is a parsed query string.
type params []query.Param

// Get returns the value of key, or "".
func (ps params) Get(key string) string {
	v, _ := query.Get(ps, key)
	return v
}

// parseQuery parses the query string into buf and refuses repeated
// parameters, writing the error. It does not allocate for ordinary
// queries.
func parseQuery(w http.ResponseWriter, r *http.Request, buf []query.Param) (params, bool) {
	ps, err := query.Parse(r.URL.RawQuery, buf)
	if err != nil {
		writeError(w, http.StatusBadRequest, "Bad request. The query string is malformed")
		return nil, false
	}
	if k := query.Repeated(ps); k != "" {
		writeError(w, http.StatusBadRequest, fmt.Sprintf(msgDupParam, echo.Clip(k)))
		return nil, false
	}
	return ps, true
}

func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request, vm *forewarn.VM) {
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, POST")
		writeError(w, http.StatusMethodNotAllowed, msgMethod)
		return
	}
	vm, sl := s.callerHeader(w, r, vm, r.Method != http.MethodPost || !previewQuery(r.URL.RawQuery))
	if vm == nil {
		return
	}
	var buf [8]query.Param
	q, ok := parseQuery(w, r, buf[:0])
	if !ok {
		return
	}
	vi := versionIndex(q.Get("api-version"))
	if vi < 0 {
		writeBadVersion(w, Versions())
		return
	}
	if s.eng.NoteRequest(vm.Name) && s.FirstCallDelay > 0 {
		t := time.NewTimer(s.FirstCallDelay)
		select {
		case <-t.C:
		case <-s.closing:
			t.Stop()
		case <-sl.gone.C():
			// The VM left the inventory while its call was held: the
			// answer is the one its address gets now.
			t.Stop()
			refuseUnknown(w, r)
			return
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if r.Method == http.MethodPost {
		s.approve(w, r, vm, &versions[vi])
		return
	}
	d := sl.doc.Load()
	if s.history != nil {
		for _, p := range d.parts {
			if p.json[vi] != nil {
				s.history.See(w, p.ref)
			}
		}
	}
	h := w.Header()
	h["Etag"] = d.etags[vi]
	if inm := r.Header.Get("If-None-Match"); inm != "" && etagMatch(inm, d.etags[vi][0]) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h["Content-Type"] = hdrJSON
	h["Content-Length"] = d.clens[vi]
	w.WriteHeader(http.StatusOK)
	d.writeTo(w, vi)
}

// previewQuery reports whether a query string asks for the 2017-03-01
// preview, whose POSTs need no Metadata header: the 2017-08-01 release
// enforced it "for all requests" (seeds 000 and 003), and the preview's
// C# sample approves without it (seed 001).
func previewQuery(raw string) bool {
	var buf [8]query.Param
	q, err := query.Parse(raw, buf[:0])
	if err != nil || query.Repeated(q) != "" {
		return false
	}
	v, _ := query.Get(q, "api-version")
	return v == versions[0].name
}

// etagMatch reports whether an If-None-Match header value matches etag,
// by the weak comparison RFC 9110 prescribes for If-None-Match.
func etagMatch(header, etag string) bool {
	for header != "" {
		var tag string
		tag, header, _ = strings.Cut(header, ",")
		tag = strings.TrimSpace(tag)
		if tag == "*" || strings.TrimPrefix(tag, "W/") == etag {
			return true
		}
	}
	return false
}

// startRequests is the POST body. Field names match case-insensitively,
// unknown fields are ignored and DocumentIncarnation may be a number or a
// string (2017-era clients send either); it is not checked.
type startRequests struct {
	StartRequests []struct {
		EventID string `json:"EventId"`
	} `json:"StartRequests"`
	DocumentIncarnation any `json:"DocumentIncarnation"`
}

// approve handles a POST of StartRequests from vm, whatever its
// Content-Type.
func (s *Server) approve(w http.ResponseWriter, r *http.Request, vm *forewarn.VM, ver *version) {
	body, err := readBody(w, r)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, http.StatusRequestEntityTooLarge, msgTooLarge)
			return
		}
		writeError(w, http.StatusBadRequest, msgBadBody)
		return
	}
	var req startRequests
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			writeError(w, http.StatusBadRequest, msgBadBody)
			return
		}
	}
	// Each ID once: a body may name one event a thousand times, and
	// each is looked up below.
	ids := make([]string, 0, len(req.StartRequests))
	named := make(map[string]bool, len(req.StartRequests))
	for _, sr := range req.StartRequests {
		if sr.EventID == "" {
			writeError(w, http.StatusBadRequest, msgBadBody)
			return
		}
		if !named[sr.EventID] {
			named[sr.EventID] = true
			ids = append(ids, sr.EventID)
		}
	}
	if len(ids) == 0 {
		w.WriteHeader(http.StatusOK)
		return
	}
	// An event of a type this api-version does not show is, to this
	// caller, no event at all.
	for _, id := range ids {
		if t, err := s.eng.TypeOf(id); err == nil && !ver.shows(t) {
			writeError(w, http.StatusBadRequest, fmt.Sprintf(msgUnknownEvent, echo.Clip(id)))
			return
		}
	}
	// The events as they were before this approval, to note approvals
	// the report points out: from the VM's published view, which holds
	// every event it may approve, so nothing is copied and the engine is
	// not locked (an event may name 100,000 VMs).
	var before []*forewarn.Event
	view := s.eng.View(vm.Name)
	if s.history != nil && view != nil {
		for _, ev := range view.Events {
			if named[ev.ID] {
				before = append(before, ev)
			}
		}
	}
	now := time.Now()
	if err := s.eng.Approve(r.Context(), vm.Name, ids); err != nil {
		switch code := forewarn.ErrorCode(err); {
		case code == forewarn.ENOTFOUND:
			writeError(w, http.StatusBadRequest, fmt.Sprintf(msgUnknownEvent, echo.Clip(unknownID(s.eng, vm, ids))))
		case code == forewarn.EUNAVAILABLE:
			writeError(w, http.StatusServiceUnavailable, "Service unavailable")
		case code == forewarn.ENOSPACE || forewarn.NoSpace(err):
			// The disk is full: a condition that passes, not a fault of
			// the server's, so the VM is told to retry, as IMDS tells it
			// when it cannot take a request (docs/wire-decisions.md).
			s.log.Error("approve: the store has no space left", "vm", vm.Name, "err", err)
			w.Header()["Retry-After"] = hdrRetryAfter
			writeError(w, http.StatusServiceUnavailable, msgNoSpace)
		default:
			s.log.Error("approve", "vm", vm.Name, "err", err)
			writeError(w, http.StatusInternalServerError, "Internal server error")
		}
		return
	}
	history.NoteApproved(w, ids)
	for _, ev := range before {
		s.history.NoteApproval(w, ev.ID, ev.Type == forewarn.Terminate && !view.Own(ev), s.late(ev, now))
	}
	w.WriteHeader(http.StatusOK)
}

// late reports whether an approval at now of ev, as it was before the
// approval, came after its NotBefore: when the event was about to start,
// or had started, on its own. A Started event's NotBefore is the one VMs
// last read while it was Scheduled.
func (s *Server) late(ev *forewarn.Event, now time.Time) bool {
	nb := ev.NotBefore
	if ev.Status != forewarn.Scheduled {
		seen, _ := s.history.Seen(ev.ID)
		nb = seen.NotBefore
	}
	return !nb.IsZero() && !now.Before(nb)
}

// unknownID returns the first of ids that vm cannot see, for the error.
func unknownID(eng *engine.Engine, vm *forewarn.VM, ids []string) string {
	for _, id := range ids {
		if !eng.Visible(vm.Name, id) {
			return id
		}
	}
	return ids[0]
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	// The writer net/http gave, so that a body too large closes the connection.
	return io.ReadAll(http.MaxBytesReader(metrics.Unwrap(w), r.Body, maxBody))
}

// Documents returns what the Azure VM named vm sees now: the Scheduled
// Events document as the newest api-version renders it, keyed by its
// path and query; nil when vm is not one of the inventory's Azure VMs.
func (s *Server) Documents(vm string) map[string]string {
	sl := s.slots.Load(vm)
	if sl == nil {
		return nil
	}
	d := sl.doc.Load()
	var b strings.Builder
	d.writeTo(&b, nVersions-1)
	return map[string]string{"/metadata/scheduledevents?api-version=" + versions[nVersions-1].name: b.String()}
}

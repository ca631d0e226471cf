// Package admin is the operator JSON API of Forewarn, served over HTTP,
// and the Go client the forewarn CLI uses to speak it.
//
// The API raises, lists and moves maintenance events, runs platform
// maintenance waves over a scope, and lists, deletes and degrades the
// fleet's VMs. Every change goes through the engine; the server only translates
// between JSON and engine calls. Errors are answered as
//
//	{"error":{"code":"not_found","message":"no event \"X\""}}
//
// with a status code derived from the forewarn error code; the text of an
// internal error is logged, never sent.
//
// The server also serves the operator's live dashboard, package ui,
// under /ui/: its page shell and static files, which hold no fleet data,
// without the token, and its fragments and stream behind it.
package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"path"
	"strings"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/fleetfile"
	"github.com/forewarn/forewarn/history"
	"github.com/forewarn/forewarn/metrics"
	"github.com/forewarn/forewarn/ui"
	"github.com/forewarn/forewarn/webhook"
)

// CreateRequest is the body of POST /v1/events.
type CreateRequest struct {
	// Type is an event type name, matched without regard to case.
	Type string `json:"type"`
	// VMs names the affected VMs.
	VMs []string `json:"vms"`
	// Notice is a Go duration string ("15m") from now to NotBefore; empty
	// means the type's minimum notice.
	Notice string `json:"notice,omitempty"`
	// Duration is the announced impact in seconds; nil means -1 (unknown).
	Duration *int `json:"durationInSeconds,omitempty"`
	// Source is "Platform" or "User", without regard to case; empty
	// means Platform.
	Source      string `json:"source,omitempty"`
	Description string `json:"description,omitempty"`
	// Lasts is a Go duration string: how long the event stays Started;
	// empty means the type's default.
	Lasts string `json:"lasts,omitempty"`
	// Started creates the event already Started, as an unplanned event.
	Started bool `json:"started,omitempty"`
}

// WaveRequest is the body of POST /v1/maintenance.
type WaveRequest struct {
	// Scope names an availability set, cloud service or scale set.
	Scope string `json:"scope"`
	// Type is Freeze, Reboot or Redeploy, matched without regard to case.
	Type string `json:"type"`
	// Notice is a Go duration string: each update domain's notice; empty
	// means the type's minimum.
	Notice string `json:"notice,omitempty"`
	// Lasts is a Go duration string: how long each update domain's event
	// stays Started; empty means the type's default.
	Lasts string `json:"lasts,omitempty"`
}

// scaleSetRequest is the body of PATCH /v1/scalesets/{name}; a field
// left out keeps its value.
type scaleSetRequest struct {
	// TerminateTimeout is an ISO 8601 duration (PT10M) or a Go duration
	// (10m), 5 to 15 minutes.
	TerminateTimeout       *string `json:"terminateNotBeforeTimeout,omitempty"`
	TerminateNotifications *bool   `json:"terminateNotifications,omitempty"`
}

// scaleSetsResponse is the body of GET /v1/scalesets.
type scaleSetsResponse struct {
	ScaleSets []engine.ScaleSetInfo `json:"scaleSets"`
}

// vmRequest is the optional body of POST /v1/vms/{name}/restart,
// /redeploy, /degrade, /evict and /delete.
type vmRequest struct {
	// Notice is a Go duration string; empty means the type's minimum.
	Notice string `json:"notice,omitempty"`
	// Lasts is a Go duration string: how long the event raised stays
	// Started (evict and delete); empty means the default.
	Lasts string `json:"lasts,omitempty"`
}

// rescheduleRequest is the body of POST /v1/events/{id}/reschedule.
type rescheduleRequest struct {
	// NotBefore is the new NotBefore, RFC 3339.
	NotBefore string `json:"notBefore"`
}

// eventsResponse is the body of GET /v1/events.
type eventsResponse struct {
	Events []*forewarn.Event `json:"events"`
}

// wavesResponse is the body of GET /v1/maintenance.
type wavesResponse struct {
	Waves []*engine.Wave `json:"waves"`
}

// vmsResponse is the body of GET /v1/vms.
type vmsResponse struct {
	VMs []engine.VMInfo `json:"vms"`
}

// errorResponse is the body of every error answer.
type errorResponse struct {
	Error errorBody `json:"error"`
}

// errorBody carries a forewarn error code and its message.
type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Log attribute keys.
const (
	logMethod = "method"
	logPath   = "path"
	logErr    = "err"
)

// Server serves the operator API for one engine. It is an http.Handler.
type Server struct {
	eng *engine.Engine
	log *slog.Logger
	mux *http.ServeMux
	// Token, when set, is the bearer token every request but /healthz
	// and the dashboard's page shell and static files must carry. Set it
	// before serving.
	Token string
	// Audit, when set, records every operator action. Set it before
	// serving.
	Audit *AuditLog
	// Cluster reports the replicas sharing the store; nil means this
	// server alone, its own engine's revision, leading.
	Cluster func(context.Context) (*forewarn.ClusterStatus, error)
	// Metrics, when set, are served at GET /metrics, behind the token as
	// every route but /healthz; nil answers 404. Set it before serving.
	Metrics *metrics.Metrics
	// History, when set, holds each VM's recent metadata requests, which
	// GET /v1/vms/{name} shows. Set it before serving.
	History *history.History
	// Renderers, by API name ("azure", "gce", "aws"), give what a VM
	// sees now on each metadata API, which GET /v1/vms/{name} shows. Set
	// it before serving.
	Renderers map[string]Renderer
	// AllowedHosts are the names, besides its own address and the
	// loopback names, that requests may give in Host: the names the
	// operator reaches the server by (through a reverse proxy, or on an
	// address of its own). Each is a host name or an IP address, any port
	// (see ValidAllowedHost). Set it before serving.
	AllowedHosts []string
	// cop refuses cross-origin writes.
	cop *http.CrossOriginProtection
	// large holds the turns of the large answers; largeWait is how long
	// a request waits for one.
	large     chan struct{}
	largeWait time.Duration
	// ui is the dashboard served under /ui/.
	ui *ui.Handler
	// GET /v1/watch (admin/watch.go): the recent transitions, and the
	// cap of the open streams (0 means DefaultMaxWatches; one source
	// address opens at most MaxWatchesPerSource). Set it before serving.
	watch      *watchLog
	MaxWatches int
	// Webhooks, when set, delivers the sessions' transitions; a session
	// may name webhooks only when it is Configured. Set it before serving.
	Webhooks *webhook.Sender
}

// NewServer returns a Server that acts on eng and logs internal errors to
// log; a nil log discards them.
func NewServer(eng *engine.Engine, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{eng: eng, log: log, mux: http.NewServeMux(), cop: http.NewCrossOriginProtection()}
	s.large, s.largeWait = make(chan struct{}, maxLarge), defaultLargeWait
	s.mux.HandleFunc("GET /healthz", s.handleHealth)
	s.mux.HandleFunc("GET /v1/events", s.handleListEvents)
	s.mux.HandleFunc("POST /v1/events", s.handleCreateEvent)
	s.mux.HandleFunc("GET /v1/events/{id}", s.handleGetEvent)
	s.mux.HandleFunc("POST /v1/events/{id}/approve", s.handleApprove)
	s.mux.HandleFunc("POST /v1/events/{id}/start", s.handleStart)
	s.mux.HandleFunc("POST /v1/events/{id}/complete", s.handleComplete)
	s.mux.HandleFunc("POST /v1/events/{id}/cancel", s.handleCancel)
	s.mux.HandleFunc("GET /v1/maintenance", s.handleListWaves)
	s.mux.HandleFunc("POST /v1/maintenance", s.handleStartWave)
	s.mux.HandleFunc("GET /v1/vms", s.handleListVMs)
	s.mux.HandleFunc("GET /v1/vms/{name}", s.handleGetVM)
	s.mux.HandleFunc("PUT /v1/vms/{name}", s.handlePutVM) // admin/inventory.go
	s.mux.HandleFunc("PATCH /v1/vms/{name}", s.handlePatchVM)
	s.mux.HandleFunc("DELETE /v1/vms/{name}", s.handleRemoveVM)
	s.mux.HandleFunc("GET /v1/fleet", s.handleGetFleet)
	s.mux.HandleFunc("POST /v1/fleet/apply", s.handleApplyFleet)
	s.mux.HandleFunc("POST /v1/vms/{name}/restart", s.handleRestart)
	s.mux.HandleFunc("POST /v1/vms/{name}/redeploy", s.handleRedeploy)
	s.mux.HandleFunc("POST /v1/events/{id}/reschedule", s.handleReschedule)
	s.mux.HandleFunc("POST /v1/vms/{name}/evict", s.handleEvict)
	s.mux.HandleFunc("POST /v1/vms/{name}/start", s.handleStartVM)
	s.mux.HandleFunc("POST /v1/vms/{name}/delete", s.handleDelete)
	s.mux.HandleFunc("POST /v1/vms/{name}/degrade", s.handleDegrade)
	s.mux.HandleFunc("GET /v1/scalesets", s.handleListScaleSets)
	s.mux.HandleFunc("PATCH /v1/scalesets/{name}", s.handleSetScaleSet)
	s.mux.HandleFunc("GET /v1/hosts", s.handleListHosts) // admin/host.go
	s.mux.HandleFunc("GET /v1/hosts/{name}", s.handleGetHost)
	s.mux.HandleFunc("GET /v1/hosts/{name}/wait", s.handleHostWait) // admin/session.go
	s.mux.HandleFunc("POST /v1/hosts/{name}/done", s.handleHostDone)
	s.mux.HandleFunc("POST /v1/hosts/{name}/fail", s.handleHostFail)
	s.mux.HandleFunc("GET /v1/sessions", s.handleListSessions)
	s.mux.HandleFunc("POST /v1/sessions", s.handleCreateSession)
	s.mux.HandleFunc("GET /v1/sessions/{id}", s.handleGetSession)
	s.mux.HandleFunc("POST /v1/sessions/{id}/pause", s.sessionAction(s.eng.PauseSession))
	s.mux.HandleFunc("POST /v1/sessions/{id}/resume", s.sessionAction(s.eng.ResumeSession))
	s.mux.HandleFunc("POST /v1/sessions/{id}/cancel", s.sessionAction(s.eng.CancelSession))
	s.mux.HandleFunc("GET /v1/audit", s.handleAudit)
	s.mux.HandleFunc("GET /v1/cluster", s.handleCluster)
	s.mux.HandleFunc("GET /metrics", s.handleMetrics)
	s.mux.HandleFunc("GET /v1/report", s.handleReport) // admin/report.go
	s.mux.HandleFunc("GET /v1/watch", s.handleWatch)   // admin/watch.go
	s.watch = newWatchLog(eng)
	// Go's profiler, behind the same loopback-or-token rule as the rest.
	s.mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	s.mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	s.mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	// The dashboard reads the fields set after NewServer at render time.
	s.ui = ui.New(ui.Config{Engine: eng, Logger: log, Documents: s.documents,
		History:       func(name string) []history.Entry { h, _ := s.History.Entries(name); return h },
		TokenRequired: func() bool { return s.Token != "" }})
	s.ui.Register(s.mux)
	return s
}

// Shutdown ends the dashboard's event streams and the watch streams, so that the
// http.Server's Shutdown need not wait for them. Register it with the
// server's RegisterOnShutdown.
func (s *Server) Shutdown() {
	s.ui.Shutdown()
	s.watch.shutdown()
}

// ServeHTTP routes r. Requests that match no route are answered in the
// API's JSON error shape rather than the mux's plain text. Writes are
// audited: see AuditLog. Requests for another host (421), cross-origin
// writes (403) and writes whose body is not JSON (415) are refused
// before anything else: see guard.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := s.guard(r); err != nil {
		s.refuse(w, r, caller(r), err)
		return
	}
	who, err := s.authenticate(r)
	if err != nil {
		s.refuse(w, r, who, err)
		return
	}
	if s.Audit == nil || r.Method == http.MethodGet || r.Method == http.MethodHead {
		s.route(w, r)
		return
	}
	s.audited(w, r, who)
}

// route dispatches r to its handler, answering unknown routes and
// methods in the API's JSON error shape.
func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	h, pattern := s.mux.Handler(r)
	if p := r.URL.Path; p != path.Clean(p) && p != path.Clean(p)+"/" {
		// The mux would redirect to the clean path with a plain-text body.
		s.writeError(w, r, forewarn.Errorf(forewarn.ENOTFOUND, "no route for %s %s", clip(r.Method), clip(p)))
		return
	}
	if pattern != "" {
		if largeRoutes[pattern] {
			end, err := s.turn(r.Context())
			if err != nil {
				s.writeBusy(w, r, err)
				return
			}
			defer end()
		}
		s.mux.ServeHTTP(w, r)
		return
	}
	// The mux answers 404, or 405 with an Allow header; keep its verdict.
	rec := &recorder{header: http.Header{}}
	h.ServeHTTP(rec, r)
	if rec.status == http.StatusMethodNotAllowed {
		allow := rec.header.Get("Allow")
		w.Header().Set("Allow", allow)
		s.writeError(w, r, &statusError{
			status: http.StatusMethodNotAllowed,
			err:    forewarn.Errorf(forewarn.EINVALID, "method %s is not allowed for %s (allowed: %s)", clip(r.Method), clip(r.URL.Path), allow),
		})
		return
	}
	s.writeError(w, r, forewarn.Errorf(forewarn.ENOTFOUND, "no route for %s %s", clip(r.Method), clip(r.URL.Path)))
}

// handleMetrics serves the server's metrics in the Prometheus exposition
// formats.
func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	if s.Metrics == nil {
		s.writeError(w, r, forewarn.Errorf(forewarn.ENOTFOUND, "this server has no metrics"))
		return
	}
	s.Metrics.Handler().ServeHTTP(w, r)
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	s.writeJSON(w, r, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) handleListEvents(w http.ResponseWriter, r *http.Request) {
	writeList(s, w, r, "events", s.eng.Events()) // as eventsResponse
}

func (s *Server) handleCreateEvent(w http.ResponseWriter, r *http.Request) {
	var req CreateRequest
	if err := s.decodeCreate(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	spec, err := req.spec()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	evs, err := s.eng.CreateAll(r.Context(), spec)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusCreated, newCreated(evs))
}

// Created is the answer to POST /v1/events: the first event the request
// made, with the fields of GET /v1/events/{id}, and EventIDs, the IDs of
// every event it made. A request naming VMs of several scope groups
// makes one event per group (engine.CreateAll), in the order of each
// group's first VM in the request.
type Created struct {
	forewarn.Event
	EventIDs []string
}

func newCreated(evs []*forewarn.Event) *Created {
	c := &Created{Event: *evs[0], EventIDs: make([]string, len(evs))}
	for i, ev := range evs {
		c.EventIDs[i] = ev.ID
	}
	return c
}

// MarshalJSON writes the event's fields and "eventIds".
func (c Created) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(c.Event)
	if err != nil {
		return nil, err
	}
	ids, err := json.Marshal(c.EventIDs)
	if err != nil {
		return nil, err
	}
	b = append(b[:len(b)-1], `,"eventIds":`...)
	return append(append(b, ids...), '}'), nil
}

// UnmarshalJSON reads the form MarshalJSON writes.
func (c *Created) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &c.Event); err != nil {
		return err
	}
	var ids struct {
		EventIDs []string `json:"eventIds"`
	}
	if err := json.Unmarshal(b, &ids); err != nil {
		return err
	}
	c.EventIDs = ids.EventIDs
	return nil
}

// spec checks req and converts it to an engine.Spec. The engine checks
// the rest (VMs, notice minimum, duration).
func (req *CreateRequest) spec() (engine.Spec, error) {
	if req.Type == "" {
		return engine.Spec{}, forewarn.Errorf(forewarn.EINVALID, "missing event type")
	}
	typ, err := forewarn.ParseEventType(req.Type)
	if err != nil {
		return engine.Spec{}, shorten(err, req.Type)
	}
	spec := engine.Spec{
		Type:        typ,
		VMs:         req.VMs,
		Duration:    req.Duration,
		Description: req.Description,
		Started:     req.Started,
	}
	if spec.Notice, err = parseDuration("notice", req.Notice); err != nil {
		return engine.Spec{}, err
	}
	if spec.Lasts, err = parseDuration("lasts", req.Lasts); err != nil {
		return engine.Spec{}, err
	}
	if req.Source != "" {
		if spec.Source, err = forewarn.ParseSource(req.Source); err != nil {
			return engine.Spec{}, shorten(err, req.Source)
		}
	}
	return spec, nil
}

// parseDuration parses the duration string s of the named field; ""
// is zero.
func parseDuration(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, forewarn.Errorf(forewarn.EINVALID, "invalid %s %s: want a duration such as 15m or 90s", field, quote(s))
	}
	return d, nil
}

func (s *Server) handleGetEvent(w http.ResponseWriter, r *http.Request) {
	ev, err := s.eng.Event(r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, ev)
}

func (s *Server) handleApprove(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.act(w, r, s.eng.Approve(r.Context(), forewarn.Operator, []string{id}))
}

func (s *Server) handleStart(w http.ResponseWriter, r *http.Request) {
	s.act(w, r, s.eng.Start(r.Context(), r.PathValue("id")))
}

func (s *Server) handleComplete(w http.ResponseWriter, r *http.Request) {
	s.act(w, r, s.eng.Complete(r.Context(), r.PathValue("id")))
}

func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) {
	s.act(w, r, s.eng.Cancel(r.Context(), r.PathValue("id")))
}

// handleReschedule moves an EC2 scheduled event to a new NotBefore.
func (s *Server) handleReschedule(w http.ResponseWriter, r *http.Request) {
	var req rescheduleRequest
	if err := decode(w, r, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.NotBefore == "" {
		s.writeError(w, r, forewarn.Errorf(forewarn.EINVALID, "notBefore is required"))
		return
	}
	at, err := time.Parse(time.RFC3339, req.NotBefore)
	if err != nil {
		s.writeError(w, r, forewarn.Errorf(forewarn.EINVALID, "notBefore %s is not an RFC 3339 time such as 2026-01-02T15:04:05Z", quote(req.NotBefore)))
		return
	}
	s.act(w, r, s.eng.Reschedule(r.Context(), r.PathValue("id"), at))
}

// act answers an event action: the error err, or the event as it now is.
func (s *Server) act(w http.ResponseWriter, r *http.Request, err error) {
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ev, err := s.eng.Event(r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, ev)
}

func (s *Server) handleListWaves(w http.ResponseWriter, r *http.Request) {
	waves := s.eng.Waves()
	if waves == nil {
		waves = []*engine.Wave{}
	}
	s.writeJSON(w, r, http.StatusOK, wavesResponse{Waves: waves})
}

func (s *Server) handleStartWave(w http.ResponseWriter, r *http.Request) {
	var req WaveRequest
	if err := decode(w, r, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	spec, err := req.spec()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	wave, err := s.eng.StartWave(r.Context(), spec)
	if err != nil {
		s.writeError(w, r, shorten(err, spec.Scope))
		return
	}
	s.writeJSON(w, r, http.StatusCreated, wave)
}

// spec checks req and converts it to an engine.WaveSpec. The engine
// checks the rest (scope, which types a wave may have, notice minimum).
func (req *WaveRequest) spec() (engine.WaveSpec, error) {
	switch {
	case req.Scope == "":
		return engine.WaveSpec{}, forewarn.Errorf(forewarn.EINVALID, "missing scope")
	case req.Type == "":
		return engine.WaveSpec{}, forewarn.Errorf(forewarn.EINVALID, "missing wave type")
	}
	typ, err := forewarn.ParseEventType(req.Type)
	if err != nil {
		return engine.WaveSpec{}, shorten(err, req.Type)
	}
	spec := engine.WaveSpec{Scope: req.Scope, Type: typ}
	if spec.Notice, err = parseDuration("notice", req.Notice); err != nil {
		return engine.WaveSpec{}, err
	}
	if spec.Lasts, err = parseDuration("lasts", req.Lasts); err != nil {
		return engine.WaveSpec{}, err
	}
	return spec, nil
}

func (s *Server) handleListVMs(w http.ResponseWriter, r *http.Request) {
	writeList(s, w, r, "vms", s.eng.VMs()) // as vmsResponse
}

// Renderer is a metadata server's current rendering of a VM; azure,
// gce and aws Servers implement it.
type Renderer interface {
	// Documents returns what the VM named vm sees now, keyed by path,
	// or nil when vm is not one of the API's VMs.
	Documents(vm string) map[string]string
}

// VMDetail is the body of GET /v1/vms/{name}: the VM as GET /v1/vms
// lists it, what it sees now on its metadata API (documents by API name,
// then path), and its recent metadata requests, newest first.
type VMDetail struct {
	VM        engine.VMInfo                `json:"vm"`
	Documents map[string]map[string]string `json:"documents"`
	History   []history.Entry              `json:"history"`
}

// handleGetVM answers one VM with its documents and request history.
func (s *Server) handleGetVM(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	info, err := s.eng.VM(name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	d := VMDetail{VM: info, Documents: s.documents(name), History: []history.Entry{}}
	if h, ok := s.History.Entries(name); ok {
		d.History = h
	}
	s.writeJSON(w, r, http.StatusOK, d)
}

// documents returns what the VM named name sees now, by API and path.
func (s *Server) documents(name string) map[string]map[string]string {
	docs := map[string]map[string]string{}
	for api, rd := range s.Renderers {
		if d := rd.Documents(name); d != nil {
			docs[api] = d
		}
	}
	return docs
}

func (s *Server) handleRestart(w http.ResponseWriter, r *http.Request) {
	s.vmEvent(w, r, forewarn.Reboot)
}

// handleEvict preempts a Spot or preemptible VM.
func (s *Server) handleEvict(w http.ResponseWriter, r *http.Request) {
	o, err := vmOptions(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ev, err := s.eng.EvictWith(r.Context(), r.PathValue("name"), o)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusCreated, ev)
}

// handleStartVM starts again a Compute Engine VM that a preemption
// stopped.
func (s *Server) handleStartVM(w http.ResponseWriter, r *http.Request) {
	info, err := s.eng.StartVM(r.Context(), r.PathValue("name"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, info)
}

// handleCluster answers the replicas sharing the store, the leader, and
// each replica's revision and lag behind the store.
func (s *Server) handleCluster(w http.ResponseWriter, r *http.Request) {
	if s.Cluster == nil {
		rev := s.eng.Revision()
		s.writeJSON(w, r, http.StatusOK, &forewarn.ClusterStatus{Revision: rev, Leader: "local",
			Replicas: []forewarn.Replica{{Name: "local", Revision: rev, Leader: true}}})
		return
	}
	st, err := s.Cluster(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, st)
}

func (s *Server) handleListScaleSets(w http.ResponseWriter, r *http.Request) {
	s.writeJSON(w, r, http.StatusOK, scaleSetsResponse{ScaleSets: s.eng.ScaleSets()})
}

// handleSetScaleSet changes a scale set's Terminate settings at run time.
func (s *Server) handleSetScaleSet(w http.ResponseWriter, r *http.Request) {
	var req scaleSetRequest
	if err := decode(w, r, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	var c engine.ScaleSetChange
	if req.TerminateTimeout != nil {
		d, err := parseTimeout(*req.TerminateTimeout)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		c.TerminateTimeout = &d
	}
	c.TerminateNotifications = req.TerminateNotifications
	info, err := s.eng.SetScaleSet(r.Context(), r.PathValue("name"), c)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, info)
}

// parseTimeout reads a Terminate timeout: ISO 8601 (PT10M), as the fleet
// file and Azure write it, or a Go duration (10m).
func parseTimeout(v string) (time.Duration, error) {
	if strings.HasPrefix(v, "P") {
		d, err := fleetfile.ParseISODuration(v)
		if err != nil {
			return 0, forewarn.Errorf(forewarn.EINVALID, "invalid terminateNotBeforeTimeout %s: %s", quote(v), shortened(err.Error(), v))
		}
		return d, nil
	}
	return parseDuration("terminateNotBeforeTimeout", v)
}

// handleDelete deletes a scale set VM as a scale-in does.
func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request) {
	o, err := vmOptions(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ev, err := s.eng.DeleteWith(r.Context(), r.PathValue("name"), o)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusCreated, ev)
}

// vmOptions reads the optional vmRequest body of evict and delete.
func vmOptions(w http.ResponseWriter, r *http.Request) (engine.VMOptions, error) {
	var req vmRequest
	if err := decode(w, r, &req, true); err != nil {
		return engine.VMOptions{}, err
	}
	notice, err := parseDuration("notice", req.Notice)
	if err != nil {
		return engine.VMOptions{}, err
	}
	lasts, err := parseDuration("lasts", req.Lasts)
	if err != nil {
		return engine.VMOptions{}, err
	}
	return engine.VMOptions{Notice: notice, Lasts: lasts}, nil
}

// handleDegrade raises the Platform Redeploy of a predicted hardware
// failure of the VM.
func (s *Server) handleDegrade(w http.ResponseWriter, r *http.Request) {
	var req vmRequest
	if err := decode(w, r, &req, true); err != nil {
		s.writeError(w, r, err)
		return
	}
	notice, err := parseDuration("notice", req.Notice)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ev, err := s.eng.Degrade(r.Context(), r.PathValue("name"), notice)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusCreated, ev)
}

func (s *Server) handleRedeploy(w http.ResponseWriter, r *http.Request) {
	s.vmEvent(w, r, forewarn.Redeploy)
}

// vmEvent creates a User event of type typ for the VM named in the path,
// as a VM owner's restart or redeploy would.
func (s *Server) vmEvent(w http.ResponseWriter, r *http.Request, typ forewarn.EventType) {
	var req vmRequest
	if err := decode(w, r, &req, true); err != nil {
		s.writeError(w, r, err)
		return
	}
	notice, err := parseDuration("notice", req.Notice)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ev, err := s.eng.Create(r.Context(), engine.Spec{
		Type:   typ,
		VMs:    []string{r.PathValue("name")},
		Notice: notice,
		Source: forewarn.User,
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusCreated, ev)
}

// statusError is an error whose HTTP status is not the one its code maps
// to: the few refusals (405, 413) that only HTTP has.
type statusError struct {
	status int
	err    *forewarn.Error
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

// errorStatus returns the HTTP status code for err: the status of its
// forewarn error code, or the status an HTTP-only refusal carries.
func errorStatus(err error) int {
	var se *statusError
	if errors.As(err, &se) {
		return se.status
	}
	switch forewarn.ErrorCode(err) {
	case forewarn.EINVALID:
		return http.StatusBadRequest
	case forewarn.ENOTFOUND:
		return http.StatusNotFound
	case forewarn.ECONFLICT:
		return http.StatusConflict
	case forewarn.EPRECONDITION:
		return http.StatusPreconditionFailed
	case forewarn.EFORBIDDEN:
		return http.StatusForbidden
	case forewarn.EUNAUTHORIZED:
		return http.StatusUnauthorized
	case forewarn.EUNAVAILABLE:
		return http.StatusServiceUnavailable
	case forewarn.ENOSPACE:
		return http.StatusInsufficientStorage
	}
	return http.StatusInternalServerError
}

// writeError answers err in the JSON error shape. Internal errors are
// logged and answered with a generic message.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	// The engine quotes the names and IDs of the path whole.
	err = shorten(err, r.PathValue("id"), r.PathValue("name"))
	if forewarn.ErrorCode(err) == forewarn.EINTERNAL && forewarn.NoSpace(err) {
		s.log.Error("admin request failed", logMethod, r.Method, logPath, r.URL.Path, logErr, err)
		err = errNoSpace
	}
	code := forewarn.ErrorCode(err)
	if code == forewarn.EINTERNAL {
		s.log.Error("admin request failed", logMethod, r.Method, logPath, r.URL.Path, logErr, err)
	}
	status := errorStatus(err)
	if status == http.StatusUnauthorized {
		// A caller without the token holds nothing: the connection
		// closes after the answer.
		w.Header().Set("Connection", "close")
	}
	s.writeJSON(w, r, status, errorResponse{Error: errorBody{Code: code, Message: capMessage(forewarn.ErrorMessage(err))}})
}

// writeJSON answers v as JSON with the given status.
func (s *Server) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		s.log.Error("encode response", logMethod, r.Method, logPath, r.URL.Path, logErr, err)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, `{"error":{"code":%q,"message":"internal error"}}`+"\n", forewarn.EINTERNAL)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes()) // a failed write means the client went away
}

// recorder captures the status and headers of the mux's own 404 and 405
// answers, discarding their plain-text bodies.
type recorder struct {
	header http.Header
	status int
}

func (rec *recorder) Header() http.Header         { return rec.header }
func (rec *recorder) Write(b []byte) (int, error) { return len(b), nil }
func (rec *recorder) WriteHeader(status int)      { rec.status = status }

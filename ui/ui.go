// Package ui is Forewarn's live dashboard for the operator: the fleet by
// scope and update domain, the events on a timeline, the maintenance
// waves, the host maintenance sessions with their hosts and budgets, and
// one VM's documents and requests, pushed as they change.
//
// It is served under /ui/ on the operator listener from files embedded
// in the binary: an html/template page shell, a small hand-written
// script and a style sheet; there is no build step and nothing is loaded
// from elsewhere. The server renders HTML fragments with html/template,
// which escapes every VM name, event ID and document, and pushes them
// over one text/event-stream per page, fed by the engine's subscription
// and its revision channel; nothing polls. The page acts through the
// operator JSON API (/v1/...), so its validation and errors are the
// server's, as the CLI's are.
//
// Routes (GET only):
//
//	/ui/                   the page shell (public: it holds no fleet data)
//	/ui/static/{file}      app.js and style.css (public)
//	/ui/fragment/{name}    fleet (?q=filter), events, waves or sessions, as HTML
//	/ui/vm/{name}          one VM's fragment
//	/ui/stream             the fragments as server-sent events (?q=, ?vm=)
//
// Every route but the public ones needs the operator token, as /v1 does;
// the operator API's server checks it before this package sees a request.
package ui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/history"
)

//go:embed assets
var assets embed.FS

// The parsed templates: the page shell and the fragments.
var (
	page      = template.Must(template.ParseFS(assets, "assets/index.html"))
	fragments = template.Must(template.New("fragments").Funcs(template.FuncMap{
		"maxRows": func() int { return MaxRows },
	}).ParseFS(assets, "assets/fragments.html"))
)

// static holds the public files by name, with their content types and
// ETags, read once.
var static = func() map[string]staticFile {
	m := map[string]staticFile{}
	for name, typ := range map[string]string{"app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"} {
		b, err := fs.ReadFile(assets, "assets/"+name)
		if err != nil {
			continue // embedded: only a broken build lacks one, and TestPageAndStatic fails
		}
		sum := sha256.Sum256(b)
		m[name] = staticFile{body: b, typ: typ, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
	}
	return m
}()

// version changes with the static files, so that a page never pairs
// with another build's script.
var version = func() string {
	h := sha256.New()
	for _, name := range []string{"app.js", "style.css"} {
		h.Write(static[name].body)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}()

type staticFile struct {
	body      []byte
	typ, etag string
}

// DefaultMaxStreams is how many event streams a Handler serves at once
// when its Config says 0.
const DefaultMaxStreams = 16

// Config configures a Handler.
type Config struct {
	// Engine is the engine whose state the dashboard shows. Required.
	Engine *engine.Engine
	// Documents returns what the VM named vm sees now, by API name and
	// then path; nil, or a nil answer, shows none. It is called at
	// render time.
	Documents func(vm string) map[string]map[string]string
	// History returns the VM's recent metadata requests, newest first;
	// nil shows none. It is called at render time.
	History func(vm string) []history.Entry
	// TokenRequired tells the page to ask for the operator token before
	// it connects. It is called at render time.
	TokenRequired func() bool
	// MaxStreams caps the event streams served at once; more are
	// answered 503. 0 means DefaultMaxStreams.
	MaxStreams int
	// Logger receives render and write errors; nil discards them.
	Logger *slog.Logger
}

// Handler serves the dashboard. It is an http.Handler; Register mounts
// its routes on another mux instead.
type Handler struct {
	eng        *engine.Engine
	documents  func(string) map[string]map[string]string
	history    func(string) []history.Entry
	tokenReq   func() bool
	log        *slog.Logger
	mux        *http.ServeMux
	hub        *hub
	maxStreams int
	// quit is closed by Shutdown, once, and ends every stream.
	quit     chan struct{}
	quitOnce sync.Once
}

// Log attribute keys.
const (
	logPath = "path"
	logErr  = "err"
)

// New returns a Handler for cfg.
func New(cfg Config) *Handler {
	h := &Handler{
		eng:        cfg.Engine,
		documents:  cfg.Documents,
		history:    cfg.History,
		tokenReq:   cfg.TokenRequired,
		log:        cfg.Logger,
		mux:        http.NewServeMux(),
		maxStreams: cfg.MaxStreams,
		quit:       make(chan struct{}),
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.maxStreams <= 0 {
		h.maxStreams = DefaultMaxStreams
	}
	h.hub = newHub(cfg.Engine)
	h.Register(h.mux)
	return h
}

// Register mounts the dashboard's routes on mux, under /ui.
func (h *Handler) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /ui", h.handleRedirect)
	mux.HandleFunc("GET /ui/{$}", h.handlePage)
	mux.HandleFunc("GET /ui/static/{file}", h.handleStatic)
	mux.HandleFunc("GET /ui/fragment/{name}", h.handleFragment)
	mux.HandleFunc("GET /ui/vm/{name}", h.handleVM)
	mux.HandleFunc("GET /ui/stream", h.handleStream)
}

// ServeHTTP serves the dashboard's routes.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Shutdown ends every event stream, so that an http.Server's Shutdown
// need not wait for them; later streams are refused.
func (h *Handler) Shutdown() {
	h.quitOnce.Do(func() { close(h.quit) })
}

// Public reports whether a GET of path serves only the page shell or a
// static file, which hold no fleet data and may be served without the
// operator token.
func Public(p string) bool {
	if p == "/ui" || p == "/ui/" {
		return true
	}
	file, ok := strings.CutPrefix(p, "/ui/static/")
	return ok && static[file].body != nil
}

// securityHeaders sets what every dashboard answer carries: no script,
// style or connection but the server's own, no framing, no caching of
// fleet data.
func securityHeaders(w http.ResponseWriter, cache bool) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	if !cache {
		h.Set("Cache-Control", "no-store")
	}
}

func (h *Handler) handleRedirect(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, "/ui/", http.StatusFound)
}

// pageData is the page shell's template data.
type pageData struct {
	TokenRequired bool
	Version       string
	Types         []forewarn.EventType
	MaxQuery      int
}

func (h *Handler) handlePage(w http.ResponseWriter, r *http.Request) {
	d := pageData{Version: version, Types: forewarn.EventTypes, MaxQuery: MaxQuery}
	if h.tokenReq != nil {
		d.TokenRequired = h.tokenReq()
	}
	var buf bytes.Buffer
	if err := page.Execute(&buf, d); err != nil {
		h.fail(w, r, err)
		return
	}
	securityHeaders(w, false)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(buf.Bytes()) // a failed write means the client went away
}

func (h *Handler) handleStatic(w http.ResponseWriter, r *http.Request) {
	f, ok := static[r.PathValue("file")]
	if !ok {
		h.fail(w, r, forewarn.Errorf(forewarn.ENOTFOUND, "no file %q", path.Base(r.URL.Path)))
		return
	}
	securityHeaders(w, true)
	w.Header().Set("Content-Type", f.typ)
	w.Header().Set("ETag", f.etag)
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.body))
}

// query returns r's fleet filter, refusing one over MaxQuery bytes.
func query(r *http.Request) (string, error) {
	q := r.URL.Query().Get("q")
	if len(q) > MaxQuery {
		return "", forewarn.Errorf(forewarn.EINVALID, "filter is %d bytes long; at most %d", len(q), MaxQuery)
	}
	return q, nil
}

// handleFragment renders one of the fleet, events, waves and sessions
// fragments.
func (h *Handler) handleFragment(w http.ResponseWriter, r *http.Request) {
	q, err := query(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var buf bytes.Buffer
	switch r.PathValue("name") {
	case "fleet":
		err = h.renderFleet(&buf, h.eng.VMs(), q)
	case "events":
		err = h.renderEvents(&buf, h.eng.Events(), time.Now())
	case "waves":
		err = h.renderWaves(&buf, h.eng.Waves(), h.eng.Events())
	case "sessions":
		err = h.renderSessionsAt(&buf, time.Now())
	default:
		err = forewarn.Errorf(forewarn.ENOTFOUND, "no fragment %q (want fleet, events, waves or sessions)", r.PathValue("name"))
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeHTML(w, buf.Bytes())
}

// handleVM renders one VM's fragment.
func (h *Handler) handleVM(w http.ResponseWriter, r *http.Request) {
	var buf bytes.Buffer
	if err := h.renderVM(&buf, r.PathValue("name")); err != nil {
		h.fail(w, r, err)
		return
	}
	writeHTML(w, buf.Bytes())
}

func writeHTML(w http.ResponseWriter, b []byte) {
	securityHeaders(w, false)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b) // a failed write means the client went away
}

func (h *Handler) renderFleet(buf *bytes.Buffer, vms []engine.VMInfo, q string) error {
	return render(buf, "fleet", buildFleet(vms, q))
}

func (h *Handler) renderEvents(buf *bytes.Buffer, evs []*forewarn.Event, now time.Time) error {
	return render(buf, "events", buildEvents(evs, now))
}

func (h *Handler) renderWaves(buf *bytes.Buffer, waves []*engine.Wave, evs []*forewarn.Event) error {
	byID := make(map[string]*forewarn.Event)
	for _, w := range waves {
		for _, d := range w.Domains {
			byID[d.Event] = nil
		}
	}
	for _, ev := range evs {
		if _, ok := byID[ev.ID]; ok {
			byID[ev.ID] = ev
		}
	}
	return render(buf, "waves", buildWaves(waves, byID))
}

// renderSessionsAt renders the sessions fragment as of now, reading the
// newest sessions' progress and the fleet's hosts from the engine: what
// GET /ui/fragment/sessions serves (a push reads them into its snapshot
// first).
func (h *Handler) renderSessionsAt(buf *bytes.Buffer, now time.Time) error {
	progress, total := h.eng.SessionProgress(now, MaxSessions)
	return h.renderSessions(buf, progress, total, h.eng.HostSummaries())
}

func (h *Handler) renderSessions(buf *bytes.Buffer, progress []engine.SessionProgress, total int, hosts []engine.HostSummary) error {
	return render(buf, "sessions", buildSessions(progress, total, hosts))
}

// renderVM renders the VM named name. Errors: ENOTFOUND.
func (h *Handler) renderVM(buf *bytes.Buffer, name string) error {
	info, err := h.eng.VM(name)
	if err != nil {
		return err
	}
	var docs map[string]map[string]string
	if h.documents != nil {
		docs = h.documents(name)
	}
	var hist []history.Entry
	if h.history != nil {
		hist = h.history(name)
	}
	return render(buf, "vm", buildVM(info, docs, hist))
}

// fail answers err in the operator API's JSON error shape; an internal
// error is logged and answered without its text.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	code := forewarn.ErrorCode(err)
	status := http.StatusInternalServerError
	switch code {
	case forewarn.EINVALID:
		status = http.StatusBadRequest
	case forewarn.ENOTFOUND:
		status = http.StatusNotFound
	case forewarn.EUNAVAILABLE:
		status = http.StatusServiceUnavailable
	default:
		h.log.Error("dashboard request failed", logPath, r.URL.Path, logErr, err)
	}
	body, _ := json.Marshal(map[string]map[string]string{"error": {"code": code, "message": forewarn.ErrorMessage(err)}})
	securityHeaders(w, false)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n')) // a failed write means the client went away
}

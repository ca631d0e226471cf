package metrics

import (
	"hash/maphash"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// API records the requests of one metadata API. A nil *API records
// nothing, so a server built without metrics needs no checks.
//
// Recording a request allocates nothing once its route and status code
// have been seen: the counters and histograms are resolved once, and the
// Writer that captures the status is reused.
type API struct {
	name      string
	routes    []string
	requests  *prometheus.CounterVec
	duration  []prometheus.Observer // by route
	throttled prometheus.Counter
	longPolls prometheus.Gauge
	// counters holds, by route and code index (codeIndex), the counter
	// of that pair once a request has used it.
	counters [][]atomic.Pointer[counter]
	// writers caches a Writer per slot, the slot picked by the request's
	// source address and port, so that requests on one connection reuse
	// one; no lock or counter is shared by all requests.
	writers [writerSlots]slot
	seed    maphash.Seed
}

// writerSlots is the number of cached Writers.
const writerSlots = 256

// slot is one cached Writer, padded to a cache line of its own.
type slot struct {
	w atomic.Pointer[Writer]
	_ [56]byte
}

// counter boxes a prometheus.Counter for an atomic.Pointer.
type counter struct{ prometheus.Counter }

// codes are the status codes whose counters are cached; others are
// looked up per request.
var codes = [...]int{200, 301, 304, 400, 401, 403, 404, 405, 413, 429, 500, 503}

// codeIndex returns code's index in codes, or -1.
func codeIndex(code int) int {
	for i, c := range codes {
		if c == code {
			return i
		}
	}
	return -1
}

// API returns the recorder of the metadata API name ("azure", "gce",
// "aws"), whose requests fall in routes: a small fixed set, never raw
// paths. Route indexes passed to Done index routes. A nil Metrics returns
// a nil API.
func (m *Metrics) API(name string, routes []string) *API {
	if m == nil {
		return nil
	}
	a := &API{
		name:      name,
		routes:    routes,
		requests:  m.requests,
		throttled: m.throttled.WithLabelValues(name),
		longPolls: m.longPolls,
		counters:  make([][]atomic.Pointer[counter], len(routes)),
		seed:      maphash.MakeSeed(),
	}
	for i, r := range routes {
		a.duration = append(a.duration, m.duration.WithLabelValues(name, r))
		a.counters[i] = make([]atomic.Pointer[counter], len(codes))
	}
	return a
}

// Writer is an http.ResponseWriter that notes the status code its
// request is answered with.
type Writer struct {
	http.ResponseWriter
	code int
	slot *slot // where Done puts it back
}

// WriteHeader notes the first status code and passes it on.
func (w *Writer) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write notes an implicit 200 and passes b on.
func (w *Writer) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (w *Writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Unwrap returns the writer net/http gave under w: it follows Unwrap
// methods (of a Writer, or of any other wrapper) down to one without.
func Unwrap(w http.ResponseWriter) http.ResponseWriter {
	for {
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return w
		}
		w = u.Unwrap()
	}
}

// Start begins recording the request r answered through w: serve it
// through the returned writer and pass that to Done. On a nil API it
// returns w.
func (a *API) Start(w http.ResponseWriter, r *http.Request) http.ResponseWriter {
	if a == nil {
		return w
	}
	s := &a.writers[maphash.String(a.seed, r.RemoteAddr)%writerSlots]
	mw := s.w.Swap(nil)
	if mw == nil {
		mw = new(Writer)
	}
	mw.ResponseWriter, mw.code, mw.slot = w, 0, s
	return mw
}

// Done records the request Start began, as one of route (an index into
// the API's routes), having taken took, and releases w. The caller
// measures took, so that it can share its clock readings with the
// request's history.
func (a *API) Done(w http.ResponseWriter, route int, took time.Duration) {
	if a == nil {
		return
	}
	a.duration[route].Observe(took.Seconds())
	mw := w.(*Writer)
	code := mw.code
	if code == 0 {
		code = http.StatusOK // net/http's answer to a handler that wrote nothing
	}
	if code == http.StatusTooManyRequests {
		a.throttled.Inc()
	}
	a.counter(route, code).Inc()
	s := mw.slot
	mw.ResponseWriter, mw.slot = nil, nil
	s.w.Store(mw)
}

// counter returns the request counter of route and code.
func (a *API) counter(route, code int) prometheus.Counter {
	i := codeIndex(code)
	if i < 0 {
		return a.requests.WithLabelValues(a.name, a.routes[route], strconv.Itoa(code))
	}
	p := &a.counters[route][i]
	if c := p.Load(); c != nil {
		return c.Counter
	}
	c := &counter{a.requests.WithLabelValues(a.name, a.routes[route], strconv.Itoa(code))}
	p.Store(c)
	return c.Counter
}

// Hold notes that a long-poll is held (delta 1) or released (-1).
func (a *API) Hold(delta int) {
	if a != nil {
		a.longPolls.Add(float64(delta))
	}
}

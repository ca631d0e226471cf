// Package history keeps, per VM, a bounded ring of its recent metadata
// requests: when, which API and path, the status, the latency, how a
// long-poll ended and which events a request approved.
//
// The rings follow the inventory (History.Follow): a VM of the inventory
// gets a ring when it first calls, so that a VM that never calls costs
// little more than its name's entry, and leaves it when it goes, for
// another VM's first call to reuse once the requests in flight are
// done, so that memory follows the largest fleet that called, not the
// VMs that came and went. A VM's ring is found by name without a lock,
// and recording a request into it allocates nothing once it has one:
// paths and api-versions are kept as indexes into a small, bounded
// table of the strings seen, and each VM has its own lock, so VMs never
// contend.
//
// Beside each ring, a VM has fixed-size Stats: counts and times of what
// its client did while in the inventory (how often it called, gaps
// between calls, requests refused for a missing header, throttled
// requests, api-versions, long-polls, approvals of events it should not
// approve), updated in constant time per request. Marks note, per event,
// when a VM first read a document showing it, and which VMs first read
// it only after it started. Both feed the client-behaviour report
// (package report).
package history

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/forewarn/forewarn"
)

// DefaultSize is the number of requests kept per VM unless the server
// is told otherwise: the newest DefaultSize.
const DefaultSize = 64

// MaxSize bounds the requests kept per VM.
const MaxSize = 4096

// maxStrings bounds the table of paths and api-versions; once full,
// further new strings are recorded as "(other)".
const maxStrings = 1024

// maxLen caps the length of a recorded path or api-version.
const maxLen = 128

// maxApprovals caps the event IDs recorded for one request.
const maxApprovals = 16

// API is the metadata API a request was made to.
type API uint8

// The metadata APIs.
const (
	Azure API = iota + 1
	GCE
	AWS
)

// String returns "azure", "gce" or "aws".
func (a API) String() string {
	switch a {
	case Azure:
		return "azure"
	case GCE:
		return "gce"
	case AWS:
		return "aws"
	}
	return ""
}

// Poll is how a long-poll ended.
type Poll uint8

// How a long-poll ended; NoPoll for a request that was not one.
const (
	NoPoll Poll = iota
	Changed
	Timeout
	ClientGone
	Shutdown
)

// String returns "", "changed", "timeout", "client gone" or "shutdown".
func (p Poll) String() string {
	switch p {
	case Changed:
		return "changed"
	case Timeout:
		return "timeout"
	case ClientGone:
		return "client gone"
	case Shutdown:
		return "shutdown"
	}
	return ""
}

// Entry is one recorded request as the operator API shows it.
type Entry struct {
	Time       time.Time     `json:"time"`
	API        string        `json:"api"`
	Method     string        `json:"method"`
	Path       string        `json:"path"`
	APIVersion string        `json:"apiVersion,omitempty"`
	Status     int           `json:"status"`
	Latency    time.Duration `json:"latencyNanos"`
	LongPoll   bool          `json:"longPoll,omitempty"`
	// PollEnd is how a long-poll ended: "changed", "timeout", "client
	// gone" or "shutdown"; empty for other requests.
	PollEnd string `json:"pollEnd,omitempty"`
	// Approved lists the event IDs the request approved.
	Approved []string `json:"approved,omitempty"`
}

// slot is one request as a ring stores it: 32 bytes, no strings.
type slot struct {
	time     int64     // Unix nanoseconds
	approved *[]string // nil but for approvals
	latency  uint32    // microseconds, at most about 71 minutes
	path     uint16
	version  uint16 // 0: none
	status   uint16
	api      API
	poll     Poll
	// method indexes methods: GET, POST (approvals), PUT (EC2 tokens)
	// or OTHER, kept coarse to stay small.
	method uint8
}

// methods are the recorded methods, by slot.method.
var methods = [...]string{"GET", "POST", "PUT", "OTHER"}

func methodIndex(m string) uint8 {
	switch m {
	case http.MethodGet, "":
		return 0
	case http.MethodPost:
		return 1
	case http.MethodPut:
		return 2
	}
	return 3
}

// intern returns the id of s in the table, adding it when there is room.
// It allocates only the first time it sees s. A refused request's
// strings (refused true) may fill only half the table: a VM that asks for
// endless made-up paths or api-versions must not leave no room for the
// paths other VMs are answered on, which the API's routes bound.
func (h *History) intern(s string, refused bool) uint16 {
	if s == "" {
		return 0
	}
	if len(s) > maxLen {
		s = s[:maxLen]
	}
	if id, ok := h.strs.Load().ids[s]; ok {
		return id
	}
	h.strsMu.Lock()
	defer h.strsMu.Unlock()
	t := h.strs.Load()
	if id, ok := t.ids[s]; ok {
		return id
	}
	if len(t.strs) >= maxStrings || refused && len(t.strs) >= maxStrings/2 {
		return 1
	}
	s = string([]byte(s)) // keep no part of the request
	nt := &table{ids: make(map[string]uint16, len(t.ids)+1), strs: append(t.strs[:len(t.strs):len(t.strs)], printable(s))}
	for k, v := range t.ids {
		nt.ids[k] = v
	}
	id := uint16(len(nt.strs) - 1)
	nt.ids[s] = id
	h.strs.Store(nt)
	return id
}

// printable returns s as the operator may be shown it, in the audit
// log's form (forewarn audit): as it is when it holds only printable
// characters, and Go-quoted otherwise ("/metadata/\u202eabc"), so that a
// caller's path or api-version cannot write an escape sequence to the
// operator's terminal, break a table with a tab or newline, or reorder
// the text around it with a bidirectional override or isolate: control
// and format characters, separators other than the ASCII space, and
// bytes that are not UTF-8 are escaped. A value with a quote or a
// backslash is quoted too, so an escaped value cannot pass for a raw one.
func printable(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool {
		return !strconv.IsPrint(r) || r == '"' || r == '\\'
	}) {
		return s
	}
	return strconv.Quote(s)
}

// Writer is the http.ResponseWriter a recorded request is answered
// through: it notes the status, and handlers note through it how a
// long-poll ended (NotePoll) and what was approved (NoteApproved).
type Writer struct {
	http.ResponseWriter
	code     int
	start    time.Time
	poll     Poll
	approved *[]string
	ring     *ring
	// gapFrom is when the VM's previous request ended, when none was in
	// flight as this one began; 0 for the VM's first request, -1 when
	// another was in flight.
	gapFrom int64
	// noticeGap is the longest part of the gap before the request during
	// which an event it read was Scheduled (Unix nanoseconds).
	noticeGap int64
	// since is when the latest-appearing event the request read appeared
	// (Unix nanoseconds).
	since int64
	// watch is the Scheduled events the request read, for the VM's next
	// gap; started, up to 4 Started events it read that gave a notice
	// first, for a read after the notice passed.
	watch    watch
	started  [4]*Ref
	nStarted uint8
	// read reports whether the request read a document showing an event.
	read  bool
	flags uint8
	// foreign and late count the approvals NoteApproval classed so;
	// lastForeign and lastLate are the latest of each.
	foreign, late         uint8
	lastForeign, lastLate *Mark
}

// Writer flags, noted by handlers.
const (
	flagNoHeader    uint8 = 1 << iota
	flagHeld              // a maintenance-event long-poll is held; Done releases it
	flagMaintPoll         // a maintenance-event long-poll
	flagNoETag            // a wait_for_change request without last_etag
	flagCounted           // at an api-version that counts in a finding
	flagFirstNoETag       // the VM's first wait_for_change without last_etag
)

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

// find returns the *Writer in w's chain of Unwrap, or nil.
func find(w http.ResponseWriter) *Writer {
	for {
		if hw, ok := w.(*Writer); ok {
			return hw
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
}

// NotePoll notes, on the request answered through w, that it was a
// long-poll and how it ended. It does nothing when w is not recorded.
func NotePoll(w http.ResponseWriter, p Poll) {
	if hw := find(w); hw != nil {
		hw.poll = p
	}
}

// NoteApproved notes, on the request answered through w, the event IDs
// it approved (at most 16 kept). It does nothing when w is not recorded.
func NoteApproved(w http.ResponseWriter, ids []string) {
	if hw := find(w); hw != nil && len(ids) > 0 {
		c := make([]string, 0, min(len(ids), maxApprovals))
		for _, id := range ids[:min(len(ids), maxApprovals)] {
			if len(id) > maxLen {
				id = id[:maxLen]
			}
			c = append(c, string([]byte(id)))
		}
		hw.approved = &c
	}
}

// NameOf returns vm's name, or "" for nil: the name Start takes for a
// caller that may be no VM of the fleet.
func NameOf(vm *forewarn.VM) string {
	if vm == nil {
		return ""
	}
	return vm.Name
}

// Start begins recording a request of vm answered through w: serve it
// through the returned writer and pass that to Done. When h is nil or vm
// is not in the inventory it returns w, and Done records nothing. A VM's
// first request gives it its ring, which keeps vm as the VM's name (pass
// the inventory's string, not a request's), and may allocate; later
// ones do not.
func (h *History) Start(w http.ResponseWriter, vm string) http.ResponseWriter {
	if h == nil {
		return w
	}
	return h.StartAt(w, vm, time.Now())
}

// StartAt is Start for a request that began at start, a reading of
// time.Now (with its monotonic clock) that the caller shares with its
// other records of the request; finish it with DoneAfter.
func (h *History) StartAt(w http.ResponseWriter, vm string, start time.Time) http.ResponseWriter {
	rg, g, ok := h.ring(vm)
	if !ok {
		return w
	}
	if rg == nil {
		if rg, g = h.first(vm); rg == nil {
			return w // vm left the inventory since the lookup
		}
	}
	before, ok := rg.join(g)
	if !ok {
		return w // vm left the inventory since the lookup
	}
	hw := rg.w.Swap(nil)
	if hw == nil {
		hw = new(Writer)
	}
	*hw = Writer{ResponseWriter: w, start: start, ring: rg}
	if before == 0 {
		hw.gapFrom = rg.lastEnd.Load()
	} else {
		hw.gapFrom = -1
	}
	return hw
}

// Done records the request Start began through w: its method, path and
// api-version (empty when the API has none), the status it was answered
// with and its latency.
func (h *History) Done(w http.ResponseWriter, api API, method, path, version string) {
	hw, ok := w.(*Writer)
	if !ok || h == nil {
		return
	}
	h.done(hw, time.Since(hw.start), api, method, path, version)
}

// DoneAfter is Done for a request StartAt began, which took took since
// the start it was given (the caller's reading of the clock, shared with
// its other records of the request).
func (h *History) DoneAfter(w http.ResponseWriter, took time.Duration, api API, method, path, version string) {
	hw, ok := w.(*Writer)
	if !ok || h == nil {
		return
	}
	h.done(hw, took, api, method, path, version)
}

// done records the request answered through hw, which took took.
func (h *History) done(hw *Writer, took time.Duration, api API, method, path, version string) {
	code := hw.code
	if code == 0 {
		code = http.StatusOK
	}
	start := hw.start.UnixNano()
	end := start + int64(took)
	s := slot{
		time:     start,
		latency:  uint32(min(max(took, 0)/time.Microsecond, math.MaxUint32)),
		approved: hw.approved,
		path:     h.intern(path, code >= 400),
		version:  h.intern(version, code >= 400),
		status:   uint16(code),
		api:      api,
		poll:     hw.poll,
		method:   methodIndex(method),
	}
	rg := hw.ring
	rg.mu.Lock()
	if len(rg.slots) > 0 {
		rg.slots[rg.n%uint64(len(rg.slots))] = s
		rg.n++
	}
	h.noteClient(rg, rg.st.add(hw, api, code, start, end, s.version, path))
	rg.mu.Unlock()
	if hw.flags&flagHeld != 0 {
		rg.held.Add(-1)
	}
	for {
		old := rg.lastEnd.Load()
		if end <= old || rg.lastEnd.CompareAndSwap(old, end) {
			break
		}
	}
	*hw = Writer{}
	rg.w.Store(hw)
	if rg.leave() { // the ring may be reused from now on
		h.release(rg) // its VM left the inventory meanwhile
	}
}

// Entries returns vm's recorded requests, newest first, and whether h
// has vm (a VM of the inventory).
func (h *History) Entries(vm string) ([]Entry, bool) {
	rg, g, ok := h.ring(vm)
	if !ok {
		return nil, false
	}
	if rg == nil {
		return []Entry{}, true // no request yet
	}
	size := uint64(len(rg.slots))
	buf := make([]slot, size)
	if !rg.lock(g) {
		return nil, false // vm left the inventory since the lookup
	}
	n := rg.n
	copy(buf, rg.slots)
	rg.mu.Unlock()
	t := h.strs.Load()
	str := func(id uint16) string {
		if int(id) < len(t.strs) {
			return t.strs[id]
		}
		return ""
	}
	k := min(n, size)
	out := make([]Entry, 0, k)
	for i := uint64(0); i < k; i++ {
		s := &buf[(n-1-i)%size]
		e := Entry{
			Time:       time.Unix(0, s.time).UTC(),
			API:        s.api.String(),
			Method:     methods[s.method],
			Path:       str(s.path),
			APIVersion: str(s.version),
			Status:     int(s.status),
			Latency:    time.Duration(s.latency) * time.Microsecond,
			LongPoll:   s.poll != NoPoll,
			PollEnd:    s.poll.String(),
		}
		if s.approved != nil {
			e.Approved = *s.approved
		}
		out = append(out, e)
	}
	return out, true
}

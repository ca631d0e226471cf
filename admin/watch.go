package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
)

// GET /v1/watch streams the engine's transitions (events, sessions,
// hosts) as they are applied, from a log the server keeps of the recent
// ones, so that a client can resume after a revision (?since=, or
// Last-Event-ID) without listing again. The log holds watchKept
// transitions, fewer when their events and hosts name many VMs
// (watchWeight in all); each transition is encoded once, on first use,
// for every stream. A stream holds no copy of what it has to send: it
// reads the shared log at its client's pace, and is ended when more than
// watchBehind transitions that came after it started wait for it.

// Bounds of the watch log and streams.
const (
	// watchKept is how many transitions the log keeps.
	watchKept = 65536
	// watchWeight bounds the VM names (and approvals) the kept
	// transitions' events and hosts hold in all, about 40 MB of them.
	watchWeight = 1 << 19
	// watchBehind is how many transitions that came after a stream
	// started may wait for it; one more ends it.
	watchBehind = 4096
	// watchBatch is about how many transitions a stream takes from the
	// log at once (a commit is never split).
	watchBatch = 1024
	// watchHeartbeat is how long a stream stays silent before it sends a
	// heartbeat.
	watchHeartbeat = 15 * time.Second
	// watchWriteTimeout bounds each write to a stream: a client that
	// takes none of it in that time loses the stream.
	watchWriteTimeout = 10 * time.Second
)

// The caps of the open watch streams: DefaultMaxWatches in all, unless
// Server.MaxWatches says otherwise, and MaxWatchesPerSource from one
// source address.
const (
	DefaultMaxWatches   = 16
	MaxWatchesPerSource = 4
)

// The kinds of transition a watch may ask for.
var watchKinds = []string{"event", "session", "host"}

// watchLine is a line of a watch stream that is not a transition: a
// reset (list the state again, then resume from Revision) or a
// heartbeat (every transition up to Revision was sent).
type watchLine struct {
	Kind     string `json:"kind"`
	Revision int64  `json:"revision"`
}

// watchLog keeps the recent transitions and counts the open streams.
type watchLog struct {
	mu sync.Mutex
	// floor: the log holds every transition of the commits after floor;
	// rev is the newest revision it has seen.
	floor, rev int64
	// base is the sequence number of ents[0]; a stream's place is a
	// sequence number.
	base   int64
	ents   []*watchEntry
	weight int
	// wake is closed and replaced when transitions are added.
	wake chan struct{}
	// open counts the streams, by source address and in all.
	open  map[string]int
	total int
	// quit is closed by shutdown and ends every stream.
	quit     chan struct{}
	quitOnce sync.Once
}

// watchEntry is one kept transition.
type watchEntry struct {
	t      *engine.Transition
	weight int
	// last marks the last transition of its commit.
	last bool
	// line is the transition's JSON, made by the first stream that sends
	// it.
	line atomic.Pointer[[]byte]
}

// newWatchLog returns a log of eng's transitions from now on.
func newWatchLog(eng *engine.Engine) *watchLog {
	l := &watchLog{wake: make(chan struct{}), open: map[string]int{}, quit: make(chan struct{})}
	eng.SubscribeTransitions(l.add)
	// Read after subscribing: a commit in between is both kept and
	// below the floor, never missed.
	rev := eng.Revision()
	l.mu.Lock()
	l.floor, l.rev = max(l.floor, rev), max(l.rev, rev)
	l.mu.Unlock()
	return l
}

// add is the engine's callback: it keeps a commit's transitions, or
// forgets everything at a reload (ts nil), which skipped commits.
func (l *watchLog) add(rev int64, ts []engine.Transition) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rev = max(l.rev, rev)
	if ts == nil {
		l.forget(len(l.ents))
		l.floor = max(l.floor, rev)
		// A place no transition takes: every stream's place is now
		// forgotten, so that it sends a reset.
		l.base++
	}
	for i := range ts {
		e := &watchEntry{t: &ts[i], weight: transitionWeight(&ts[i]), last: i == len(ts)-1}
		l.ents = append(l.ents, e)
		l.weight += e.weight
	}
	n := 0
	for w := l.weight; n < len(l.ents)-1 && (len(l.ents)-n > watchKept || w > watchWeight); n++ {
		w -= l.ents[n].weight
	}
	l.forget(n)
	close(l.wake)
	l.wake = make(chan struct{})
}

// forget drops the n oldest transitions. l.mu must be held.
func (l *watchLog) forget(n int) {
	for i := range n {
		e := l.ents[i]
		l.floor = max(l.floor, e.t.Revision)
		l.weight -= e.weight
		l.ents[i] = nil
	}
	l.ents = l.ents[n:]
	l.base += int64(n)
	if len(l.ents) == 0 {
		l.ents = nil // let the array go
	}
}

// transitionWeight is what a transition costs to keep, in VM names.
func transitionWeight(t *engine.Transition) int {
	w := 1
	if t.Event != nil {
		w += len(t.Event.Resources) + len(t.Event.Approvals)
	}
	if t.Host != nil {
		w += len(t.Host.VMs) + len(t.Host.Events)
	}
	return w
}

// head returns the sequence number after the newest transition. l.mu
// must be held.
func (l *watchLog) head() int64 { return l.base + int64(len(l.ents)) }

// join counts a stream of source, refusing it over the caps.
func (l *watchLog) join(source string, perSource, total int) (leave func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.quit:
		return nil, forewarn.Errorf(forewarn.EUNAVAILABLE, "the server is shutting down")
	default:
	}
	if l.total >= total {
		return nil, forewarn.Errorf(forewarn.EUNAVAILABLE, "too many watch streams are open (at most %d); close one", total)
	}
	if l.open[source] >= perSource {
		return nil, forewarn.Errorf(forewarn.EUNAVAILABLE, "too many watch streams are open from %s (at most %d); close one", source, perSource)
	}
	l.open[source]++
	l.total++
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.total--
		if l.open[source]--; l.open[source] == 0 {
			delete(l.open, source)
		}
	}, nil
}

// start returns where a stream resuming after revision since (none when
// resume is false) begins, where its replay ends (the head now), and the
// revision of the reset it must send first (-1 for none): when the log
// no longer holds every transition after since.
func (l *watchLog) start(since int64, resume bool) (at, end, reset int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	end = l.head()
	if !resume {
		return end, end, -1
	}
	if since < l.floor {
		return end, end, l.rev
	}
	i, _ := slices.BinarySearchFunc(l.ents, since+1, func(e *watchEntry, rev int64) int {
		return int(max(min(e.t.Revision-rev, 1), -1))
	})
	return l.base + int64(i), end, -1
}

// watchRead is what a stream takes from the log at once.
type watchRead struct {
	ents []*watchEntry
	next int64 // the place after ents
	// reset, when not -1, is the revision of a reset to send first: the
	// log forgot the stream's place (a reload, or its bounds).
	reset int64
	// slow: more than watchBehind transitions wait for the stream.
	slow bool
	rev  int64 // the newest revision the log has seen
	wake <-chan struct{}
}

// read returns the transitions after place at, for a stream whose
// replay ran to end.
func (l *watchLog) read(at, end int64) watchRead {
	l.mu.Lock()
	defer l.mu.Unlock()
	rd := watchRead{reset: -1, rev: l.rev, wake: l.wake}
	head := l.head()
	if at < l.base {
		rd.reset, at = l.rev, head
	}
	if head-max(at, end) > watchBehind {
		rd.slow = true
		return rd
	}
	n := int(head - at)
	if n > watchBatch {
		// Up to the end of the commit the batch reaches into.
		n = watchBatch
		for i := int(at-l.base) + n - 1; !l.ents[i].last; i++ {
			n++
		}
	}
	rd.ents = slices.Clone(l.ents[at-l.base : at-l.base+int64(n)])
	rd.next = at + int64(n)
	return rd
}

// shutdown ends every stream and refuses new ones.
func (l *watchLog) shutdown() { l.quitOnce.Do(func() { close(l.quit) }) }

// json returns e's transition as one line of JSON, without its newline.
func (e *watchEntry) json() ([]byte, error) {
	if b := e.line.Load(); b != nil {
		return *b, nil
	}
	b, err := json.Marshal(e.t)
	if err != nil {
		return nil, err
	}
	e.line.Store(&b)
	return b, nil
}

// watchRequest is what a watch asks for.
type watchRequest struct {
	kinds  map[string]bool // nil: every kind
	since  int64
	resume bool
	sse    bool
}

// parseWatch reads r's query (kind, since), Last-Event-ID and Accept.
func parseWatch(r *http.Request) (watchRequest, error) {
	q := r.URL.Query()
	var wr watchRequest
	if v := q.Get("kind"); v != "" {
		wr.kinds = map[string]bool{}
		for k := range strings.SplitSeq(v, ",") {
			if k = strings.TrimSpace(k); k == "" {
				continue
			}
			if !slices.Contains(watchKinds, k) {
				return wr, forewarn.Errorf(forewarn.EINVALID, "unknown kind %s: want event, session or host, comma-separated", quote(k))
			}
			wr.kinds[k] = true
		}
	}
	since, field := q.Get("since"), "since"
	if since == "" {
		since, field = r.Header.Get("Last-Event-ID"), "Last-Event-ID"
	}
	if since != "" {
		n, err := strconv.ParseInt(since, 10, 64)
		if err != nil || n < 0 {
			return wr, forewarn.Errorf(forewarn.EINVALID, "%s %s is not a revision: want a whole number, 0 or more", field, quote(since))
		}
		wr.since, wr.resume = n, true
	}
	for _, a := range r.Header.Values("Accept") {
		for t := range strings.SplitSeq(a, ",") {
			mt, _, _ := strings.Cut(t, ";")
			if strings.EqualFold(strings.TrimSpace(mt), "text/event-stream") {
				wr.sse = true
			}
		}
	}
	return wr, nil
}

// handleWatch streams the transitions: see the comment at the top of
// this file and docs/operator-api.md.
func (s *Server) handleWatch(w http.ResponseWriter, r *http.Request) {
	wr, err := parseWatch(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if r.Method == http.MethodHead {
		// The headers alone: a HEAD holds no stream.
		w.Header().Set("Content-Type", watchType(wr.sse))
		return
	}
	leave, err := s.watch.join(caller(r), MaxWatchesPerSource, cmp0(s.MaxWatches, DefaultMaxWatches))
	if err != nil {
		w.Header().Set("Retry-After", "5")
		s.writeError(w, r, err)
		return
	}
	defer leave()
	ws := &watchStream{w: w, rc: http.NewResponseController(w), req: wr}
	defer func() { _ = ws.rc.SetWriteDeadline(time.Time{}) }() // not every writer takes deadlines
	w.Header().Set("Content-Type", watchType(wr.sse))
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	at, end, reset := s.watch.start(wr.since, wr.resume)
	if reset >= 0 {
		ws.mark("reset", reset)
	}
	if ws.flush() != nil {
		return
	}
	beat := time.NewTimer(watchHeartbeat)
	defer beat.Stop()
	due := false
	for {
		rd := s.watch.read(at, end)
		if rd.slow {
			ws.mark("reset", rd.rev)
			_ = ws.flush()
			return
		}
		if rd.reset >= 0 {
			ws.mark("reset", rd.reset)
		}
		if err := ws.add(rd.ents); err != nil {
			if errors.Is(err, errEncode) {
				s.log.Error("encode transition", logMethod, r.Method, logPath, r.URL.Path, logErr, err)
			}
			return
		}
		at = rd.next
		if len(rd.ents) > 0 || rd.reset >= 0 {
			// More may have come while writing: written with the next
			// read's, or at once when none has.
			continue
		}
		if due {
			ws.heartbeat(rd.rev)
		}
		if ws.buf.Len() > 0 || ws.sent {
			if ws.flush() != nil {
				return
			}
			due = false
			beat.Reset(watchHeartbeat)
		}
		select {
		case <-r.Context().Done():
			return
		case <-s.watch.quit:
			return
		case <-rd.wake:
		case <-beat.C:
			due = true
		}
	}
}

// watchType is the Content-Type of a watch stream.
func watchType(sse bool) string {
	if sse {
		return "text/event-stream; charset=utf-8"
	}
	return "application/x-ndjson"
}

// cmp0 returns n, or def when n is not positive.
func cmp0(n, def int) int {
	if n <= 0 {
		return def
	}
	return n
}

// watchStream is one open watch stream.
type watchStream struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	req watchRequest
	buf bytes.Buffer
	// sent: bytes were written since the last flush.
	sent bool
}

// errEncode wraps a transition that could not be encoded.
var errEncode = errors.New("encode transition")

// watchChunk is how much a stream appends before it writes.
const watchChunk = 32 << 10

// add appends the transitions of ents the stream asked for, writing
// each watchChunk. In an event
// stream, the last of each commit's transitions carries the commit's
// revision as its id, so that a client resuming with Last-Event-ID
// never skips the rest of a commit.
func (ws *watchStream) add(ents []*watchEntry) error {
	for i, e := range ents {
		if ws.req.kinds != nil && !ws.req.kinds[e.t.Kind] {
			continue
		}
		if ws.buf.Len() >= watchChunk {
			if err := ws.write(); err != nil {
				return err
			}
		}
		line, err := e.json()
		if err != nil {
			return fmt.Errorf("%w: %w", errEncode, err)
		}
		if !ws.req.sse {
			ws.buf.Write(line)
			ws.buf.WriteByte('\n')
			continue
		}
		if ws.lastOfCommit(ents[i:]) {
			ws.buf.WriteString("id: " + strconv.FormatInt(e.t.Revision, 10) + "\n")
		}
		ws.buf.WriteString("data: ")
		ws.buf.Write(line)
		ws.buf.WriteString("\n\n")
	}
	return nil
}

// lastOfCommit reports whether ents[0] is the last transition of its
// commit, among ents, that the stream sends.
func (ws *watchStream) lastOfCommit(ents []*watchEntry) bool {
	for _, e := range ents[1:] {
		if e.t.Revision != ents[0].t.Revision {
			return true
		}
		if ws.req.kinds == nil || ws.req.kinds[e.t.Kind] {
			return false
		}
	}
	return true
}

// mark appends a line of the given kind (reset, heartbeat) at rev.
func (ws *watchStream) mark(kind string, rev int64) {
	b, _ := json.Marshal(watchLine{Kind: kind, Revision: rev}) // cannot fail
	if !ws.req.sse {
		ws.buf.Write(b)
		ws.buf.WriteByte('\n')
		return
	}
	r := strconv.FormatInt(rev, 10)
	ws.buf.WriteString("id: " + r + "\ndata: ")
	ws.buf.Write(b)
	ws.buf.WriteString("\n\n")
}

// heartbeat appends a heartbeat: a line, or in an event stream a
// comment.
func (ws *watchStream) heartbeat(rev int64) {
	if ws.req.sse {
		ws.buf.WriteString(": heartbeat " + strconv.FormatInt(rev, 10) + "\n\n")
		return
	}
	ws.mark("heartbeat", rev)
}

// write writes what was appended, within watchWriteTimeout.
func (ws *watchStream) write() error {
	defer ws.buf.Reset()
	if ws.buf.Len() == 0 {
		return nil
	}
	_ = ws.rc.SetWriteDeadline(time.Now().Add(watchWriteTimeout)) // not every writer takes deadlines
	ws.sent = true
	_, err := ws.w.Write(ws.buf.Bytes())
	return err
}

// flush writes what was appended and flushes it, within
// watchWriteTimeout.
func (ws *watchStream) flush() error {
	if err := ws.write(); err != nil {
		return err
	}
	ws.sent = false
	_ = ws.rc.SetWriteDeadline(time.Now().Add(watchWriteTimeout))
	return ws.rc.Flush()
}

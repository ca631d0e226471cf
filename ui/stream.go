package ui

import (
	"bytes"
	"net/http"
	"sync"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
)

// Pacing of a stream.
const (
	// minGap is the least time between two pushes to a stream: changes
	// within it are coalesced into one push.
	minGap = 150 * time.Millisecond
	// heartbeat is how often an idle stream sends a comment, so that
	// proxies and the browser keep it open.
	heartbeat = 15 * time.Second
	// writeTimeout bounds each write to a stream: a reader that does not
	// take its data in that time loses the stream.
	writeTimeout = 10 * time.Second
)

// hub turns the engine's changes into a broadcast: each change closes
// the channel the streams wait on and replaces it. It subscribes to the
// engine once, on the first stream; the subscription's callback, which
// runs under the engine's lock, only makes a non-blocking send. A
// goroutine runs while streams are open, waiting on that callback's
// channel and on the engine's revision channel, which also moves for
// commits that publish no view (an approval, a wave's Pending events, a
// session's step, pause or cancel, a host done). What changes with time
// alone, a session's window opening or closing or its delay ending, is
// a change too: a timer set from each snapshot broadcasts it.
type hub struct {
	eng *engine.Engine
	// notify carries the subscription's wake-ups; a full buffer drops
	// the send, since one pending wake-up covers every later change.
	notify chan struct{}

	mu         sync.Mutex
	subscribed bool
	streams    int
	stop       chan struct{} // closed when the last stream ends
	gen        uint64
	changed    chan struct{}
	snap       *snapshot // the engine's state as of gen, once loaded
	loading    sync.Mutex
	// wake is when timer broadcasts a change that time alone makes;
	// zero when it is not set.
	wake  time.Time
	timer *time.Timer
}

// snapshot is the engine's state that every stream renders from, loaded
// once per change however many streams render it.
type snapshot struct {
	gen    uint64
	at     time.Time
	vms    []engine.VMInfo
	events []*forewarn.Event
	waves  []*engine.Wave
	// sessions are the newest MaxSessions sessions' progress at at, of
	// nsessions; hosts are the fleet's hosts.
	sessions  []engine.SessionProgress
	nsessions int
	hosts     []engine.HostSummary
}

func newHub(eng *engine.Engine) *hub {
	return &hub{eng: eng, notify: make(chan struct{}, 1), changed: make(chan struct{})}
}

// join registers a stream, refusing it when max are open; it returns
// the channel closed at the next change.
func (h *hub) join(max int) (<-chan struct{}, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.streams >= max {
		return nil, false
	}
	h.streams++
	if h.streams == 1 {
		if !h.subscribed {
			h.subscribed = true
			// Under the engine's lock: O(1), no allocation, no engine call.
			h.eng.Subscribe(func(*engine.View) {
				select {
				case h.notify <- struct{}{}:
				default:
				}
			})
		}
		h.stop = make(chan struct{})
		go h.run(h.stop)
		// Changes made while no stream was open were not broadcast:
		// the snapshot held may predate them.
		h.bumpLocked()
	}
	return h.changed, true
}

// leave unregisters a stream; the goroutine stops with the last one.
func (h *hub) leave() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.streams--
	if h.streams == 0 {
		close(h.stop)
	}
}

// run broadcasts each change until stop is closed. The revision channel
// is taken anew before each broadcast, so that a commit made after the
// broadcast's renders read the state closes the channel run waits on.
func (h *hub) run(stop <-chan struct{}) {
	adv := h.eng.Advanced()
	for {
		select {
		case <-stop:
			return
		case <-h.notify:
		case <-adv:
			adv = h.eng.Advanced()
		}
		h.bump()
	}
}

func (h *hub) bump() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.bumpLocked()
}

func (h *hub) bumpLocked() {
	h.gen++
	close(h.changed)
	h.changed = make(chan struct{})
}

// current returns the generation and the channel closed at the next
// change.
func (h *hub) current() (uint64, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gen, h.changed
}

// snapshot returns the engine's state as of generation gen or later,
// loading it when the one held is older.
func (h *hub) snapshot(gen uint64) *snapshot {
	h.loading.Lock()
	defer h.loading.Unlock()
	h.mu.Lock()
	s := h.snap
	h.mu.Unlock()
	if s != nil && s.gen >= gen {
		return s
	}
	s = &snapshot{gen: gen, at: time.Now(), vms: h.eng.VMs(), events: h.eng.Events(), waves: h.eng.Waves()}
	s.sessions, s.nsessions = h.eng.SessionProgress(s.at, MaxSessions)
	s.hosts = h.eng.HostSummaries()
	var next time.Time
	for _, p := range s.sessions {
		if !p.Next.IsZero() && (next.IsZero() || p.Next.Before(next)) {
			next = p.Next
		}
	}
	h.mu.Lock()
	h.snap = s
	h.wakeLocked(next)
	h.mu.Unlock()
	return s
}

// wakeLocked sets the timer to broadcast a change at t, unless it is set
// to go sooner; a zero t sets nothing. h.mu must be held.
func (h *hub) wakeLocked(t time.Time) {
	if t.IsZero() || !h.wake.IsZero() && !t.Before(h.wake) {
		return
	}
	if h.timer != nil {
		h.timer.Stop()
	}
	h.wake = t
	h.timer = time.AfterFunc(time.Until(t), func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.wake.Equal(t) {
			h.wake = time.Time{}
		}
		h.bumpLocked()
	})
}

// handleStream serves the fragments as server-sent events: a snapshot
// of every fragment at once, then each fragment again when it changes,
// at most one push per minGap (more when a render takes long), and a
// comment every heartbeat. ?q= filters the fleet; ?vm= adds that VM's
// fragment.
func (h *Handler) handleStream(w http.ResponseWriter, r *http.Request) {
	q, err := query(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	vm := r.URL.Query().Get("vm")
	if vm != "" {
		if _, err := h.eng.VM(vm); err != nil {
			h.fail(w, r, err)
			return
		}
	}
	select {
	case <-h.quit:
		h.fail(w, r, forewarn.Errorf(forewarn.EUNAVAILABLE, "the server is shutting down"))
		return
	default:
	}
	if r.Method == http.MethodHead {
		// The headers alone: a HEAD holds no stream.
		securityHeaders(w, false)
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		return
	}
	changed, ok := h.hub.join(h.maxStreams)
	if !ok {
		w.Header().Set("Retry-After", "5")
		h.fail(w, r, forewarn.Errorf(forewarn.EUNAVAILABLE, "too many dashboard streams are open (at most %d); close one", h.maxStreams))
		return
	}
	defer h.hub.leave()

	rc := http.NewResponseController(w)
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }() // not every writer takes deadlines
	securityHeaders(w, false)
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	s := &stream{h: h, w: w, rc: rc, q: q, vm: vm, last: map[string][]byte{}}
	beat := time.NewTicker(heartbeat)
	defer beat.Stop()
	var gen uint64
	var pushed time.Time
	var took time.Duration
	for first := true; ; first = false {
		if !first {
			select {
			case <-r.Context().Done():
				return
			case <-h.quit:
				return
			case <-beat.C:
				if s.write([]byte(": keep-alive\n\n")) != nil {
					return
				}
				continue
			case <-changed:
			}
			// Coalesce: wait out the gap since the last push, longer
			// when renders are slow, so a stream takes at most a third
			// of a core.
			if wait := max(minGap, 2*took) - time.Since(pushed); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-r.Context().Done():
					t.Stop()
					return
				case <-h.quit:
					t.Stop()
					return
				case <-t.C:
				}
			}
		}
		// Take the next change's channel before reading the state.
		gen, changed = h.hub.current()
		start := time.Now()
		if err := s.push(h.hub.snapshot(gen)); err != nil {
			return
		}
		pushed, took = time.Now(), time.Since(start)
	}
}

// stream is one open event stream.
type stream struct {
	h     *Handler
	w     http.ResponseWriter
	rc    *http.ResponseController
	q, vm string
	// last holds the fragments last sent, by event name: an unchanged
	// fragment is not sent again.
	last map[string][]byte
	buf  bytes.Buffer
}

// push renders every fragment from snap and sends those that changed.
func (s *stream) push(snap *snapshot) error {
	type fragment struct {
		name   string
		render func(*bytes.Buffer) error
	}
	frags := []fragment{
		{"fleet", func(b *bytes.Buffer) error { return s.h.renderFleet(b, snap.vms, s.q) }},
		{"events", func(b *bytes.Buffer) error { return s.h.renderEvents(b, snap.events, snap.at) }},
		{"waves", func(b *bytes.Buffer) error { return s.h.renderWaves(b, snap.waves, snap.events) }},
		{"sessions", func(b *bytes.Buffer) error { return s.h.renderSessions(b, snap.sessions, snap.nsessions, snap.hosts) }},
	}
	if s.vm != "" {
		frags = append(frags, fragment{"vm", func(b *bytes.Buffer) error { return s.h.renderVM(b, s.vm) }})
	}
	s.buf.Reset()
	var html bytes.Buffer
	for _, f := range frags {
		html.Reset()
		if err := f.render(&html); err != nil {
			// The VM can only be missing if the fleet changed; anything
			// else is a bug, logged once per push.
			s.h.log.Error("render dashboard fragment", logPath, f.name, logErr, err)
			html.Reset()
			if rerr := render(&html, "problem", forewarn.Error{Code: forewarn.ErrorCode(err), Message: forewarn.ErrorMessage(err)}); rerr != nil {
				return rerr
			}
		}
		if bytes.Equal(s.last[f.name], html.Bytes()) {
			continue
		}
		s.last[f.name] = bytes.Clone(html.Bytes())
		writeEvent(&s.buf, f.name, html.Bytes())
	}
	if s.buf.Len() == 0 {
		return nil
	}
	return s.write(s.buf.Bytes())
}

// write sends b and flushes it within writeTimeout.
func (s *stream) write(b []byte) error {
	_ = s.rc.SetWriteDeadline(time.Now().Add(writeTimeout)) // not every writer takes deadlines
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	return s.rc.Flush()
}

// writeEvent appends one server-sent event to buf: its name, then each
// line of data as a data line. A carriage return, which would end a
// line, is written as a character reference (the data is HTML).
func writeEvent(buf *bytes.Buffer, name string, data []byte) {
	buf.WriteString("event: ")
	buf.WriteString(name)
	buf.WriteByte('\n')
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		buf.WriteString("data: ")
		for {
			i := bytes.IndexByte(line, '\r')
			if i < 0 {
				break
			}
			buf.Write(line[:i])
			buf.WriteString("&#13;")
			line = line[i+1:]
		}
		buf.Write(line)
		buf.WriteByte('\n')
	}
	buf.WriteByte('\n')
}

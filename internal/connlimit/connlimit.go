// Package connlimit bounds what one caller can hold of a server: a
// Listener caps open connections per source address and in total,
// shares the total out fairly when it is reached, and bounds the time
// each 64 KiB of a write may take; BodyTimeout bounds the time a request
// body may take.
//
// # Admission
//
// A connection over its source's cap is refused. When the total is
// reached, a new connection is not refused outright: a connection of
// the heaviest source (the one holding the most) is closed to make room
// for it, provided that source holds at least two more than the
// newcomer's, so that it still holds at least as many as the newcomer
// afterwards. Connections of strangers (addresses that are not Known)
// go first, whatever their number, when a known caller needs room. An
// idle connection goes first (one that has not sent a whole request
// yet, or is kept alive between requests; see Listener.ConnState): the
// oldest of the heaviest source's, or of the next heaviest that also
// hold two more than the newcomer (up to victimScan sources); when none
// of them has one, the heaviest source's oldest connection, in the
// middle of a request (a held long-poll, say), is closed without an
// answer.
//
// So a caller holding n connections is refused another only when every
// source holds at most n+1 of the total T: it takes T sources to refuse
// a caller its first connection, and T/(n+1) to refuse its (n+1)th.
// Finding the heaviest source costs O(1): sources are kept in buckets by
// the number they hold.
package connlimit

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Config sets a Listener's caps. A cap of 0 is no cap.
type Config struct {
	// PerSource caps the open connections of one known source address.
	PerSource int
	// Total caps all open connections. Once it is reached, a new
	// connection takes the place of one of the heaviest source's (see
	// the package documentation) or is refused.
	Total int
	// Known reports whether a source address is an expected caller; nil
	// means every address is. The connections of other addresses
	// (strangers) are capped by StrangerPerSource each and by
	// StrangerTotal together, so that strangers, however many, cannot
	// crowd out known callers; and when the total is reached, a known
	// caller's new connection takes the place of a stranger's first.
	// Known is asked at each new connection, outside the Listener's
	// lock, and its answer may change (a VM added to the inventory or
	// removed from it): then the connections the address holds move
	// with its next one to the known callers or the strangers, and count
	// under their caps from then on. It must be quick and safe for
	// concurrent use.
	Known             func(netip.Addr) bool
	StrangerPerSource int
	StrangerTotal     int
	// WriteTimeout, when positive, bounds how long a write to an
	// accepted connection may take: each piece of up to writeChunk bytes
	// must be taken by the client within it, give or take a tenth more
	// (the socket's deadline is moved only once it has come nearer than
	// WriteTimeout, not at every write), or the write fails with a
	// timeout (and net/http closes the connection). A connection that
	// writes nothing, such as a held long-poll, is not affected. A
	// shorter deadline set on the connection still applies.
	WriteTimeout time.Duration
	// Refusal, when set, is written (without waiting) to a refused
	// connection before it is closed, e.g. an HTTP 503.
	Refusal []byte
	// Name names the listener in log lines.
	Name string
	// Logger receives a summary of refusals and evictions at most once
	// per LogEvery (default 10 s); nil discards them.
	Logger   *slog.Logger
	LogEvery time.Duration
}

// writeChunk is the most one write deadline covers: a longer write is
// made in pieces, each with its own deadline, so that a reader that is
// slow but keeps reading is not cut off.
const writeChunk = 64 << 10

// writeSlack is the fraction of the WriteTimeout a piece of a write
// may be given beyond it: the socket's write deadline is set a
// WriteTimeout and this fraction ahead, and set again only once fewer
// than WriteTimeout remain, so that a connection answering request
// after request moves the deadline about once per tenth of the timeout
// instead of at every answer.
const writeSlack = 10

// victimScan bounds the sources looked at, heaviest first, for an idle
// connection to close before an active one of the heaviest is closed.
const victimScan = 16

// Listener is a net.Listener whose Accept enforces the caps of its
// Config. A connection over a cap is accepted, sent the Refusal and
// closed at once, so it neither waits in the kernel's backlog nor holds
// a file descriptor, and Accept goes on to the next connection.
//
// Set ConnState as the http.Server's ConnState hook, so that the
// Listener knows which connections are idle.
type Listener struct {
	net.Listener
	cfg Config

	// epoch is when the Listener was made: write deadlines are kept as
	// offsets from it, read off the monotonic clock (one clock reading
	// rather than the two of time.Now).
	epoch time.Time
	slack time.Duration // cfg.WriteTimeout / writeSlack

	mu       sync.Mutex
	sources  map[netip.Addr]*source // sources with open connections
	known    rank                   // known sources, by open connections
	strange  rank                   // strangers, by open connections
	pending  refusals               // refused and evicted since the last log line
	flushing *time.Timer            // set while a log line is due
	lastLog  time.Time

	refused, evicted atomic.Int64
}

// refusals counts refused and evicted connections between two log lines.
type refusals struct {
	n       int
	reasons map[string]int
	// sources counts the first maxLoggedSources addresses refused;
	// others count only in n.
	sources map[netip.Addr]int
	// evicted counts the connections closed to make room for others,
	// evictedFrom the first maxLoggedSources addresses they were of.
	evicted     int
	evictedFrom map[netip.Addr]int
}

// maxLoggedSources bounds the addresses one log line names.
const maxLoggedSources = 8

// Reasons a connection is refused, as logged.
const (
	reasonPerSource         = "per-source"
	reasonStrangerPerSource = "stranger-per-source"
	reasonStranger          = "strangers"
	reasonTotal             = "total"
)

// New wraps ln with the caps of cfg.
func New(ln net.Listener, cfg Config) *Listener {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.LogEvery <= 0 {
		cfg.LogEvery = 10 * time.Second
	}
	return &Listener{Listener: ln, cfg: cfg, sources: map[netip.Addr]*source{},
		epoch: time.Now(), slack: cfg.WriteTimeout / writeSlack}
}

// Accept returns the next connection within the caps, refusing the
// others on the way.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if lc := l.admit(c); lc != nil {
			return lc, nil
		}
	}
}

// admit returns c wrapped, counted under the caps, having closed a
// connection of the heaviest source if that was needed to make room; or
// refuses c and returns nil.
func (l *Listener) admit(c net.Conn) net.Conn {
	addr := sourceAddr(c.RemoteAddr())
	stranger := l.cfg.Known != nil && !l.cfg.Known(addr)
	lc := &conn{Conn: c, l: l, deadline: noDeadline, sock: noDeadline}
	victim, reason := l.acquire(lc, addr, stranger)
	if victim != nil {
		l.count(victim.src.addr, "", true)
		_ = victim.Conn.Close() // its place is lc's already
	}
	if reason != "" {
		l.refuse(c, addr, reason)
		return nil
	}
	return lc
}

// ConnState records the state net/http reports for a connection of l's:
// set it as the http.Server's ConnState. A connection is idle, and is
// closed first to make room for others, while it is StateNew (no
// complete request yet) or StateIdle (kept alive between requests);
// without the hook every connection counts as idle.
func (l *Listener) ConnState(c net.Conn, state http.ConnState) {
	if lc, ok := c.(*conn); ok && lc.l == l {
		lc.state.Store(int32(state))
	}
}

// Refused returns how many connections the listener has refused.
func (l *Listener) Refused() int64 { return l.refused.Load() }

// Evicted returns how many connections the listener has closed to make
// room for others once its total was reached.
func (l *Listener) Evicted() int64 { return l.evicted.Load() }

// Close closes the listener and logs the refusals not yet logged.
// Connections already accepted stay open.
func (l *Listener) Close() error {
	err := l.Listener.Close()
	l.mu.Lock()
	if l.flushing != nil && l.flushing.Stop() {
		l.flushing = nil
	}
	l.mu.Unlock()
	l.report()
	return err
}

// sourceAddr returns the IP address of a connection's remote end; an
// address that is not an IP (a pipe, a Unix socket) is the zero Addr.
func sourceAddr(a net.Addr) netip.Addr {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.AddrPort().Addr().Unmap()
	}
	if a == nil {
		return netip.Addr{}
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// acquire counts c, a new connection from addr, under the caps, and
// returns the connection it takes the place of (already released, to be
// closed), if any; or it returns why c may not be opened.
func (l *Listener) acquire(c *conn, addr netip.Addr, stranger bool) (victim *conn, reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sources[addr]
	held := 0
	if s != nil {
		held = s.n
		if s.stranger != stranger {
			// The address became a known caller's, or stopped being
			// one, since its first open connection: they all move.
			l.move(s, stranger)
		}
	}
	r := &l.known
	if stranger {
		r = &l.strange
	}
	switch {
	case !stranger && l.cfg.PerSource > 0 && held >= l.cfg.PerSource:
		return nil, reasonPerSource
	case stranger && l.cfg.StrangerPerSource > 0 && held >= l.cfg.StrangerPerSource:
		return nil, reasonStrangerPerSource
	case stranger && l.cfg.StrangerTotal > 0 && l.strange.total >= l.cfg.StrangerTotal:
		// Strangers make room for each other only.
		if victim = l.strange.victim(held + 2); victim == nil {
			return nil, reasonStranger
		}
	case l.cfg.Total > 0 && l.known.total+l.strange.total >= l.cfg.Total:
		if !stranger {
			victim = l.strange.victim(1)
		}
		if victim == nil {
			victim = r.victim(held + 2)
		}
		if victim == nil {
			return nil, reasonTotal
		}
	}
	if victim != nil {
		// Never of addr: its source holds at least two more than addr,
		// or is a stranger when addr is not.
		l.releaseLocked(victim)
	}
	if s == nil {
		s = &source{addr: addr, stranger: stranger}
		l.sources[addr] = s
	}
	c.src = s
	s.push(c)
	r.inc(s)
	return victim, ""
}

// move moves s, with its connections, to the strangers or to the known
// sources. l.mu is held.
func (l *Listener) move(s *source, stranger bool) {
	from, to := &l.known, &l.strange
	if !stranger {
		from, to = to, from
	}
	from.take(s)
	s.stranger = stranger
	to.put(s)
}

// release forgets a closed connection.
func (l *Listener) release(c *conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releaseLocked(c)
}

// releaseLocked forgets c, once; l.mu is held.
func (l *Listener) releaseLocked(c *conn) {
	if c.released {
		return
	}
	c.released = true
	s := c.src
	s.remove(c)
	if s.stranger {
		l.strange.dec(s)
	} else {
		l.known.dec(s)
	}
	if s.n == 0 {
		delete(l.sources, s.addr)
	}
}

// refuse counts a refusal for the log, then sends the refusal to c and
// closes it. Counting first means that once the caller sees its
// connection closed, the refusal is already in what Close logs.
func (l *Listener) refuse(c net.Conn, src netip.Addr, reason string) {
	l.count(src, reason, false)
	if len(l.cfg.Refusal) > 0 {
		// A new connection's send buffer is empty, so this does not
		// wait; the deadline only makes sure of it.
		_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		_, _ = c.Write(l.cfg.Refusal)
	}
	_ = c.Close()
}

// count adds a refusal (or, with evicted, an eviction) of a connection
// from src to the pending log line and arranges for it to be written.
func (l *Listener) count(src netip.Addr, reason string, evicted bool) {
	if evicted {
		l.evicted.Add(1)
	} else {
		l.refused.Add(1)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	p := &l.pending
	if p.n == 0 && p.evicted == 0 {
		p.reasons, p.sources, p.evictedFrom = map[string]int{}, map[netip.Addr]int{}, map[netip.Addr]int{}
	}
	if evicted {
		p.evicted++
		if _, ok := p.evictedFrom[src]; ok || len(p.evictedFrom) < maxLoggedSources {
			p.evictedFrom[src]++
		}
	} else {
		p.n++
		p.reasons[reason]++
		if _, ok := p.sources[src]; ok || len(p.sources) < maxLoggedSources {
			p.sources[src]++
		}
	}
	if l.flushing == nil {
		wait := l.cfg.LogEvery - time.Since(l.lastLog)
		l.flushing = time.AfterFunc(max(wait, 0), func() {
			l.mu.Lock()
			l.flushing = nil
			l.mu.Unlock()
			l.report()
		})
	}
}

// report logs the refusals and evictions counted since the last line,
// if any.
func (l *Listener) report() {
	l.mu.Lock()
	p := l.pending
	l.pending = refusals{}
	l.lastLog = time.Now()
	total, strange := l.known.total+l.strange.total, l.strange.total
	l.mu.Unlock()
	switch {
	case p.n > 0:
		l.cfg.Logger.Warn("refused connections over a cap",
			"listener", l.cfg.Name, "refused", p.n, "reasons", countList(p.reasons),
			"sources", countList(p.sources), "evicted", p.evicted, "evicted_from", countList(p.evictedFrom),
			"open", total, "open_strangers", strange)
	case p.evicted > 0:
		l.cfg.Logger.Warn("closed connections of the heaviest sources to make room for others",
			"listener", l.cfg.Name, "evicted", p.evicted, "evicted_from", countList(p.evictedFrom),
			"open", total, "open_strangers", strange)
	}
}

// countList formats counts as "k=n" pairs, largest first.
func countList[K comparable](m map[K]int) string {
	type kn struct {
		k string
		n int
	}
	list := make([]kn, 0, len(m))
	for k, n := range m {
		list = append(list, kn{fmt.Sprint(k), n})
	}
	slices.SortFunc(list, func(a, b kn) int {
		if c := cmp.Compare(b.n, a.n); c != 0 {
			return c
		}
		return strings.Compare(a.k, b.k)
	})
	var b strings.Builder
	for i, e := range list {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", e.k, e.n)
	}
	return b.String()
}

// conn is an accepted connection that frees its place when closed and
// bounds each write with the Listener's WriteTimeout.
type conn struct {
	net.Conn
	l *Listener
	// src, prev, next (its place in src's list) and released are
	// guarded by l.mu.
	src        *source
	prev, next *conn
	released   bool
	// state is the http.ConnState net/http last reported.
	state atomic.Int32

	// dmu guards the write deadlines, kept as offsets from l.epoch
	// (noDeadline for none): deadline is the one the connection's user
	// set (net/http, or a handler through http.ResponseController); sock
	// is the one on the socket, and byUser reports whether the user set
	// it, not Write from the WriteTimeout.
	dmu      sync.Mutex
	deadline time.Duration
	sock     time.Duration
	byUser   bool
}

// noDeadline stands for no write deadline: later than any.
const noDeadline = time.Duration(math.MaxInt64)

// idle reports whether c is between requests or has not sent a whole
// one yet, as far as net/http has told.
func (c *conn) idle() bool {
	s := http.ConnState(c.state.Load())
	return s == http.StateNew || s == http.StateIdle
}

// Close closes the connection and frees its place under the caps.
func (c *conn) Close() error {
	err := c.Conn.Close()
	c.l.release(c)
	return err
}

// Write writes p in pieces of at most writeChunk bytes, each within
// the Listener's WriteTimeout (or the connection's own write deadline,
// if sooner).
func (c *conn) Write(p []byte) (int, error) {
	if c.l.cfg.WriteTimeout <= 0 {
		return c.Conn.Write(p)
	}
	n := 0
	for {
		piece := p[:min(len(p), writeChunk)]
		c.bound()
		k, err := c.Conn.Write(piece)
		n += k
		p = p[k:]
		if err != nil || len(p) == 0 {
			return n, err
		}
	}
}

// bound makes sure that the socket's write deadline gives the next
// piece of a write at least the WriteTimeout and at most the slack more,
// or ends at the user's deadline when that is sooner. Only when the
// deadline on the socket falls outside that does it set it again, to the
// latest it may be; a connection answering many requests sets it about
// once per slack.
func (c *conn) bound() {
	now := time.Since(c.l.epoch)
	lo := now + c.l.cfg.WriteTimeout
	hi := lo + c.l.slack
	c.dmu.Lock()
	defer c.dmu.Unlock()
	if d := c.deadline; d < hi {
		lo, hi = min(lo, d), d
	}
	if c.sock >= lo && c.sock <= hi {
		return
	}
	// A closed connection fails the write that follows.
	_ = c.Conn.SetWriteDeadline(c.l.epoch.Add(hi))
	c.sock, c.byUser = hi, hi == c.deadline
}

// SetWriteDeadline sets the connection's write deadline, which bounds
// each write besides the WriteTimeout. Lifting it (the zero time, as
// net/http does after each answer) leaves the socket with the
// WriteTimeout's deadline when Write set it, and changes nothing there.
func (c *conn) SetWriteDeadline(t time.Time) error {
	if c.l.cfg.WriteTimeout <= 0 {
		return c.Conn.SetWriteDeadline(t)
	}
	c.dmu.Lock()
	defer c.dmu.Unlock()
	if t.IsZero() {
		c.deadline = noDeadline
		if !c.byUser {
			return nil
		}
		// The socket has the user's deadline: a write under way gets the
		// WriteTimeout's from now on.
		hi := time.Since(c.l.epoch) + c.l.cfg.WriteTimeout + c.l.slack
		c.sock, c.byUser = hi, false
		return c.Conn.SetWriteDeadline(c.l.epoch.Add(hi))
	}
	c.deadline = min(t.Sub(c.l.epoch), noDeadline-1)
	c.sock, c.byUser = c.deadline, true
	return c.Conn.SetWriteDeadline(t)
}

// SetDeadline sets the connection's read and write deadlines.
func (c *conn) SetDeadline(t time.Time) error {
	if err := c.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetReadDeadline(t)
}

// CloseWrite shuts down the writing side when the underlying connection
// can; net/http uses it to close a connection without losing its last
// answer.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// SyscallConn gives the underlying connection's socket, when it has one,
// so that a handler can set socket options (the EC2 token's hop limit).
func (c *conn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}

// source is the open connections of one address.
type source struct {
	addr     netip.Addr
	stranger bool
	// n counts the connections; first and last are the oldest and the
	// newest. prev and next link the sources of its rank holding as
	// many. All are guarded by the Listener's mu.
	n           int
	first, last *conn
	prev, next  *source
}

// push adds c as s's newest connection; its rank counts it.
func (s *source) push(c *conn) {
	c.prev, c.next = s.last, nil
	if s.last != nil {
		s.last.next = c
	} else {
		s.first = c
	}
	s.last = c
}

// remove takes c out of s's connections; its rank counts it.
func (s *source) remove(c *conn) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		s.first = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		s.last = c.prev
	}
	c.prev, c.next = nil, nil
}

// idleConn returns s's oldest idle connection, or nil.
func (s *source) idleConn() *conn {
	for c := s.first; c != nil; c = c.next {
		if c.idle() {
			return c
		}
	}
	return nil
}

// rank orders sources by their open connections: buckets[n] heads the
// list of the sources holding n, and top is the largest n held, so the
// heaviest source is found in O(1) and a count moves in O(1).
type rank struct {
	buckets []*source
	top     int
	total   int // connections of all its sources
}

// inc counts a new connection of s.
func (r *rank) inc(s *source) {
	if s.n > 0 {
		r.unlink(s)
	}
	s.n++
	r.total++
	r.link(s)
	r.top = max(r.top, s.n)
}

// dec counts a closed connection of s.
func (r *rank) dec(s *source) {
	r.unlink(s)
	s.n--
	r.total--
	if s.n > 0 {
		r.link(s)
	}
	for r.top > 0 && r.buckets[r.top] == nil {
		r.top--
	}
}

// take takes s, with its connections, out of r.
func (r *rank) take(s *source) {
	r.unlink(s)
	r.total -= s.n
	for r.top > 0 && r.buckets[r.top] == nil {
		r.top--
	}
}

// put puts s, with its connections, in r.
func (r *rank) put(s *source) {
	r.total += s.n
	r.link(s)
	r.top = max(r.top, s.n)
}

// link puts s at the head of the bucket of its count.
func (r *rank) link(s *source) {
	for len(r.buckets) <= s.n {
		r.buckets = append(r.buckets, nil)
	}
	s.prev, s.next = nil, r.buckets[s.n]
	if s.next != nil {
		s.next.prev = s
	}
	r.buckets[s.n] = s
}

// unlink takes s out of the bucket of its count.
func (r *rank) unlink(s *source) {
	if s.prev != nil {
		s.prev.next = s.next
	} else {
		r.buckets[s.n] = s.next
	}
	if s.next != nil {
		s.next.prev = s.prev
	}
	s.prev, s.next = nil, nil
}

// victim returns the connection to close to make room for another,
// taken from a source holding at least atLeast (≥ 1), or nil when none
// does: the oldest idle connection of the heaviest sources (looking at
// up to victimScan of them, heaviest first), or else the oldest
// connection of the heaviest.
func (r *rank) victim(atLeast int) *conn {
	var heaviest *source
	scanned := 0
	for n := r.top; n >= max(atLeast, 1) && scanned < victimScan; n-- {
		for s := r.buckets[n]; s != nil && scanned < victimScan; s = s.next {
			if heaviest == nil {
				heaviest = s
			}
			if c := s.idleConn(); c != nil {
				return c
			}
			scanned++
		}
	}
	if heaviest == nil {
		return nil
	}
	return heaviest.first
}

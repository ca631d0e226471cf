// Package connlimit bounds what one caller can hold of a server: a
// Listener caps open connections per source address and in total, and
// BodyTimeout bounds the time a request body may take.
package connlimit

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
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
	// Total caps all open connections.
	Total int
	// Known reports whether a source address is an expected caller; nil
	// means every address is. The connections of other addresses
	// (strangers) are capped by StrangerPerSource each and by
	// StrangerTotal together, so that strangers, however many, cannot
	// crowd out known callers.
	Known             func(netip.Addr) bool
	StrangerPerSource int
	StrangerTotal     int
	// Refusal, when set, is written (without waiting) to a refused
	// connection before it is closed, e.g. an HTTP 503.
	Refusal []byte
	// Name names the listener in log lines.
	Name string
	// Logger receives a summary of refusals at most once per LogEvery
	// (default 10 s); nil discards them.
	Logger   *slog.Logger
	LogEvery time.Duration
}

// Listener is a net.Listener whose Accept enforces the caps of its
// Config. A connection over a cap is accepted, sent the Refusal and
// closed at once, so it neither waits in the kernel's backlog nor holds
// a file descriptor, and Accept goes on to the next connection.
type Listener struct {
	net.Listener
	cfg Config

	mu       sync.Mutex
	open     map[netip.Addr]int // open connections per source
	total    int                // open connections
	strange  int                // open connections of strangers
	pending  refusals           // refused since the last log line
	flushing *time.Timer        // set while a log line is due
	lastLog  time.Time

	refused atomic.Int64
}

// refusals counts refused connections between two log lines.
type refusals struct {
	n       int
	reasons map[string]int
	// sources counts the first maxLoggedSources addresses refused;
	// others count only in n.
	sources map[netip.Addr]int
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
	return &Listener{Listener: ln, cfg: cfg, open: map[netip.Addr]int{}}
}

// Accept returns the next connection within the caps, refusing the
// others on the way.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src := source(c.RemoteAddr())
		stranger := l.cfg.Known != nil && !l.cfg.Known(src)
		reason := l.acquire(src, stranger)
		if reason == "" {
			return &conn{Conn: c, l: l, src: src, stranger: stranger}, nil
		}
		l.refuse(c, src, reason)
	}
}

// Refused returns how many connections the listener has refused.
func (l *Listener) Refused() int64 { return l.refused.Load() }

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

// source returns the IP address of a connection's remote end; an address
// that is not an IP (a pipe, a Unix socket) is the zero Addr.
func source(a net.Addr) netip.Addr {
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

// acquire counts a new connection from src, or returns why it may not
// be opened.
func (l *Listener) acquire(src netip.Addr, stranger bool) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case !stranger && l.cfg.PerSource > 0 && l.open[src] >= l.cfg.PerSource:
		return reasonPerSource
	case stranger && l.cfg.StrangerPerSource > 0 && l.open[src] >= l.cfg.StrangerPerSource:
		return reasonStrangerPerSource
	case stranger && l.cfg.StrangerTotal > 0 && l.strange >= l.cfg.StrangerTotal:
		return reasonStranger
	case l.cfg.Total > 0 && l.total >= l.cfg.Total:
		return reasonTotal
	}
	l.open[src]++
	l.total++
	if stranger {
		l.strange++
	}
	return ""
}

// release forgets a closed connection from src.
func (l *Listener) release(src netip.Addr, stranger bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[src]--; l.open[src] <= 0 {
		delete(l.open, src)
	}
	l.total--
	if stranger {
		l.strange--
	}
}

// refuse counts a refusal for the log, then sends the refusal to c and
// closes it. Counting first means that once the caller sees its
// connection closed, the refusal is already in what Close logs.
func (l *Listener) refuse(c net.Conn, src netip.Addr, reason string) {
	l.count(src, reason)
	if len(l.cfg.Refusal) > 0 {
		// A new connection's send buffer is empty, so this does not
		// wait; the deadline only makes sure of it.
		_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		_, _ = c.Write(l.cfg.Refusal)
	}
	_ = c.Close()
}

// count adds a refusal to the pending log line and arranges for it to
// be written.
func (l *Listener) count(src netip.Addr, reason string) {
	l.refused.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	p := &l.pending
	if p.n == 0 {
		p.reasons, p.sources = map[string]int{}, map[netip.Addr]int{}
	}
	p.n++
	p.reasons[reason]++
	if _, ok := p.sources[src]; ok || len(p.sources) < maxLoggedSources {
		p.sources[src]++
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

// report logs the refusals counted since the last line, if any.
func (l *Listener) report() {
	l.mu.Lock()
	p := l.pending
	l.pending = refusals{}
	l.lastLog = time.Now()
	total, strange := l.total, l.strange
	l.mu.Unlock()
	if p.n == 0 {
		return
	}
	l.cfg.Logger.Warn("refused connections over a cap",
		"listener", l.cfg.Name, "refused", p.n, "reasons", countList(p.reasons),
		"sources", countList(p.sources), "open", total, "open_strangers", strange)
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

// conn is an accepted connection that frees its place when closed.
type conn struct {
	net.Conn
	l        *Listener
	src      netip.Addr
	stranger bool
	once     sync.Once
}

// Close closes the connection and frees its place under the caps.
func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.src, c.stranger) })
	return err
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

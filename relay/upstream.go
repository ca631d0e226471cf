package relay

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
)

// upstream is one server: a few HTTP/2 connections to it, shared by
// every request the relay sends there. A request takes the first
// connection that has room for one more, without a lock of the relay's
// own; a new connection is dialed only when none has, one at a time,
// and never more than max. So 10,000 long-polls ride on ⌈10,000 / the
// server's stream limit⌉ connections.
type upstream struct {
	base *url.URL
	tls  *tls.Config
	max  int
	t    *http2.Transport
	mets *relayMetrics
	log  *slog.Logger

	// usable is conns as of its last change, read without mu.
	usable atomic.Pointer[[]*http2.ClientConn]

	mu      sync.Mutex
	conns   []*http2.ClientConn
	dialing int
	// room is closed and replaced when a connection is added or dropped,
	// or a dial ends: requests waiting for room look again.
	room chan struct{}
	done bool
	// failed counts the dials that failed, lastErr the last one's
	// error: a request that waited on a dial that failed fails with it.
	failed  int
	lastErr error
}

// dialTimeout bounds a connection to a server, TLS included.
const dialTimeout = 5 * time.Second

func newUpstream(base *url.URL, tlsCfg *tls.Config, max int, mets *relayMetrics, log *slog.Logger) *upstream {
	t := &tls.Config{}
	*t = *tlsCfg.Clone()
	if t.ServerName == "" {
		t.ServerName = base.Hostname()
	}
	return &upstream{
		base: base, tls: t, max: max, mets: mets, log: log,
		t: &http2.Transport{
			// A server that stops answering (a partition, not a crash,
			// which closes the connection at once) is found by pings.
			ReadIdleTimeout: 10 * time.Second,
			PingTimeout:     5 * time.Second,
		},
		room: make(chan struct{}),
	}
}

// url returns the URL on the server of a VM's request to target: its
// path and query.
func (u *upstream) url(target *url.URL) *url.URL {
	return &url.URL{Scheme: u.base.Scheme, Host: u.base.Host, Path: target.Path, RawPath: target.RawPath,
		RawQuery: target.RawQuery}
}

// open returns how many connections to the server are open.
func (u *upstream) open() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.prune()
	return len(u.conns)
}

// prune drops the connections that are closed or closing. u.mu is held.
func (u *upstream) prune() {
	kept := u.conns[:0]
	for _, cc := range u.conns {
		if st := cc.State(); !st.Closed && !st.Closing {
			kept = append(kept, cc)
		}
	}
	if len(kept) != len(u.conns) {
		clear(u.conns[len(kept):])
		u.conns = kept
		u.changed()
	}
}

// changed publishes u.conns to the requests that read it without mu,
// and tells those waiting for room. u.mu is held.
func (u *upstream) changed() {
	snap := slices.Clone(u.conns)
	u.usable.Store(&snap)
	u.wake()
	u.mets.upstreamConns.WithLabelValues(u.base.Host).Set(float64(len(snap)))
}

// reserve returns the first of conns that takes a request, or nil.
func reserve(conns []*http2.ClientConn) *http2.ClientConn {
	for _, cc := range conns {
		if cc.ReserveNewRequest() {
			return cc
		}
	}
	return nil
}

// wake tells the requests waiting for room to look again. u.mu is held.
func (u *upstream) wake() {
	close(u.room)
	u.room = make(chan struct{})
}

// roundTrip sends req on a connection with room for it.
func (u *upstream) roundTrip(ctx context.Context, req *http.Request) (*http.Response, error) {
	cc, err := u.get(ctx)
	if err != nil {
		return nil, err
	}
	return cc.RoundTrip(req)
}

// get returns a connection that has reserved a stream for a request:
// the first open one with room, or a new one when none has room and
// fewer than max are open; otherwise it waits for room until ctx ends.
// Only when no open connection has room does it take u.mu.
func (u *upstream) get(ctx context.Context) (*http2.ClientConn, error) {
	if p := u.usable.Load(); p != nil {
		if cc := reserve(*p); cc != nil {
			return cc, nil
		}
	}
	waitedOn := -1 // the dial failures counted when this request began waiting
	for {
		u.mu.Lock()
		if waitedOn >= 0 && u.failed > waitedOn {
			err := u.lastErr
			u.mu.Unlock()
			return nil, err
		}
		if u.done {
			u.mu.Unlock()
			return nil, errors.New("relay closed")
		}
		u.prune()
		if cc := reserve(u.conns); cc != nil {
			u.mu.Unlock()
			return cc, nil
		}
		// A connection being dialed will bring room for thousands:
		// wait for it rather than dial another.
		if u.dialing == 0 && len(u.conns) < u.max {
			u.dialing++
			u.mu.Unlock()
			cc, err := u.dial(ctx)
			u.mu.Lock()
			u.dialing--
			u.wake()
			if err != nil {
				u.failed++
				u.lastErr = err
				u.mu.Unlock()
				return nil, err
			}
			if u.done {
				u.mu.Unlock()
				cc.Close()
				return nil, errors.New("relay closed")
			}
			u.conns = append(u.conns, cc)
			u.changed()
			u.mets.upstreamDials.WithLabelValues(u.base.Host).Inc()
			ok := cc.ReserveNewRequest()
			u.mu.Unlock()
			if ok {
				return cc, nil
			}
			continue
		}
		room := u.room
		if waitedOn < 0 {
			waitedOn = u.failed
		}
		u.mu.Unlock()
		// Every connection is full: wait for a stream to end, a
		// connection to close or a dial to end.
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-room:
			t.Stop()
		case <-t.C: // streams end without telling us
		}
	}
}

// dial opens a connection to the server and starts HTTP/2 on it.
func (u *upstream) dial(ctx context.Context) (*http2.ClientConn, error) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dialTimeout)
	defer cancel()
	d := &tls.Dialer{NetDialer: &net.Dialer{KeepAlive: 30 * time.Second}, Config: u.tls}
	c, err := d.DialContext(dctx, "tcp", u.base.Host)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", u.base.Host, err)
	}
	tc := c.(*tls.Conn)
	if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
		c.Close()
		return nil, fmt.Errorf("server %s does not speak HTTP/2 (ALPN %q): is it a Forewarn relay listener?", u.base.Host, p)
	}
	cc, err := u.t.NewClientConn(c)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("HTTP/2 to %s: %w", u.base.Host, err)
	}
	// The server's settings come before its answer to a ping: once it
	// is back, the connection knows how many streams it may carry (until
	// then it takes 100, and a burst of requests would dial every
	// connection allowed).
	if err := cc.Ping(dctx); err != nil {
		cc.Close()
		return nil, fmt.Errorf("HTTP/2 to %s: %w", u.base.Host, err)
	}
	u.log.Debug("connected to a server", "server", u.base.Host)
	return cc, nil
}

// close closes every connection to the server.
func (u *upstream) close() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.done = true
	for _, cc := range u.conns {
		cc.Close()
	}
	u.conns = nil
	u.changed()
}

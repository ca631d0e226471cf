package relay

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
	// shortTLS and shortMax are those of the short connections (short.go).
	shortTLS *tls.Config
	shortMax int
	// reqs counts the requests sent on each kind of connection.
	reqsShort, reqsH2 prometheus.Counter

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
	// waiting counts the requests waiting for room on HTTP/2.
	waiting int
	// shortIdle are the short connections free, shortOpen those open.
	shortIdle []*shortConn
	shortOpen int
}

// dialTimeout bounds a connection to a server, TLS included.
const dialTimeout = 5 * time.Second

func newUpstream(base *url.URL, tlsCfg *tls.Config, max, shortMax int, mets *relayMetrics, log *slog.Logger) *upstream {
	t := tlsCfg.Clone()
	if t.ServerName == "" {
		t.ServerName = base.Hostname()
	}
	st := t.Clone()
	st.NextProtos = []string{"http/1.1"}
	return &upstream{
		base: base, tls: t, max: max, mets: mets, log: log, shortTLS: st, shortMax: shortMax,
		reqsShort: mets.upstreamRequests.WithLabelValues(base.Host, "http/1.1"),
		reqsH2:    mets.upstreamRequests.WithLabelValues(base.Host, "h2"),
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

// open returns how many connections to the server are open, short
// ones included.
func (u *upstream) open() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.prune()
	return len(u.conns) + u.shortOpen
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
	u.countConns()
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

// send sends a VM's request to the server: on a short connection when
// it is short and one is free, else on HTTP/2.
func (u *upstream) send(ctx context.Context, method string, target *url.URL, host string, hdr http.Header, body []byte) (*http.Response, error) {
	if u.shortMax > 0 && isShort(method, target) {
		resp, err := u.sendShort(ctx, method, target, host, hdr, body)
		if err == nil {
			u.reqsShort.Inc()
			return resp, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !errors.Is(err, errBusy) {
			u.log.Debug("a short connection failed; the request goes on HTTP/2", "server", u.base.Host, "err", err)
		}
	}
	u.reqsH2.Inc()
	out := &http.Request{Method: method, URL: u.url(target), Host: host, Header: hdr,
		Proto: "HTTP/2.0", ProtoMajor: 2}
	out = out.WithContext(ctx)
	if len(body) > 0 {
		out.Body = io.NopCloser(bytes.NewReader(body))
		out.ContentLength = int64(len(body))
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	cc, err := u.get(ctx)
	if err != nil {
		return nil, err
	}
	return cc.RoundTrip(out)
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
		// wait for it rather than dial another. An idle short
		// connection gives its room up.
		if u.dialing == 0 && len(u.conns)+u.shortOpen >= u.max {
			u.takeIdleShort()
		}
		if u.dialing == 0 && len(u.conns)+u.shortOpen < u.max {
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
		u.waiting++
		u.mu.Unlock()
		// Every connection is full: wait for a stream to end, a
		// connection to close or a dial to end.
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-room:
		case <-t.C: // streams end without telling us
		}
		t.Stop()
		u.mu.Lock()
		u.waiting--
		u.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return nil, err
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
	u.closeShort()
	for _, cc := range u.conns {
		cc.Close()
	}
	u.conns = nil
	u.changed()
}

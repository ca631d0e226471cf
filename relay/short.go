package relay

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// A short request (one the server answers at once: everything but a
// GCE long-poll) goes on an HTTP/1.1 connection of the relay's own when
// one is free, written and read by the goroutine that serves the VM.
// On HTTP/2 the same request passes through three more goroutines in
// the relay (the stream's writer and the connection's reader) and the
// server (frame reader, serve loop, frame writer), and each hand-off is
// a thread woken; on a host of few cores that doubled the relay's
// added latency.
//
// The short connections are few (DefaultShortConns per server) and
// count against MaxUpstreamConns with the HTTP/2 ones: a request never
// waits for one, but goes on HTTP/2 when none is free, and HTTP/2 takes
// back the room of an idle one when it needs another connection. Any
// failure on a short connection sends the request on HTTP/2 instead, so
// that what becomes of it (a failover, or an answer) is decided there.

// DefaultShortConns is how many of MaxUpstreamConns may carry short
// requests, one at a time each.
const DefaultShortConns = 4

// shortConn is one HTTP/1.1 connection to a server.
type shortConn struct {
	c  net.Conn
	br *bufio.Reader
	bw *bufio.Writer
}

// shortTimeout bounds a short request on its connection: the server
// answers one at once, so a connection silent that long is dead.
const shortTimeout = 15 * time.Second

// isShort reports whether the server answers a request to target at
// once. Only a GCE request with wait_for_change is held; a query that
// might spell it in any way (any case, or percent-encoded) goes on
// HTTP/2, so that no VM can hold a short connection.
func isShort(method string, target *url.URL) bool {
	q := target.RawQuery
	if method == http.MethodConnect || strings.IndexByte(q, '%') >= 0 {
		return false
	}
	for i := 0; i+4 <= len(q); i++ {
		if strings.EqualFold(q[i:i+4], "wait") {
			return false
		}
	}
	return true
}

// errBusy is getShort's answer when no short connection is free.
var errBusy = errors.New("no short connection is free")

// getShort returns an idle short connection, or a new one when there is
// room for it, or errBusy.
func (u *upstream) getShort(ctx context.Context) (*shortConn, error) {
	u.mu.Lock()
	if u.done {
		u.mu.Unlock()
		return nil, errors.New("relay closed")
	}
	if sc := u.popIdleShort(); sc != nil {
		u.mu.Unlock()
		return sc, nil
	}
	// HTTP/2 comes first: no short connection while a request waits for
	// room there.
	if u.shortOpen >= u.shortMax || len(u.conns)+u.dialing+u.shortOpen >= u.max || u.waiting > 0 {
		u.mu.Unlock()
		return nil, errBusy
	}
	u.shortOpen++
	u.countConns()
	u.mu.Unlock()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dialTimeout)
	defer cancel()
	d := &tls.Dialer{NetDialer: &net.Dialer{KeepAlive: 30 * time.Second}, Config: u.shortTLS}
	c, err := d.DialContext(dctx, "tcp", u.base.Host)
	if err != nil {
		u.dropShort()
		return nil, err
	}
	u.mets.upstreamDials.WithLabelValues(u.base.Host).Inc()
	return &shortConn{c: c, br: bufio.NewReaderSize(c, 4096), bw: bufio.NewWriterSize(c, 4096)}, nil
}

// countConns sets the connections gauges, by kind. u.mu is held.
func (u *upstream) countConns() {
	u.mets.upstreamConns.WithLabelValues(u.base.Host, "h2").Set(float64(len(u.conns)))
	u.mets.upstreamConns.WithLabelValues(u.base.Host, "http/1.1").Set(float64(u.shortOpen))
}

// dropShort counts a short connection closed, and tells the requests
// waiting for room on HTTP/2.
func (u *upstream) dropShort() {
	u.mu.Lock()
	u.shortOpen--
	u.countConns()
	if u.waiting > 0 {
		u.wake()
	}
	u.mu.Unlock()
}

// putShort returns sc, whose last answer was read whole, to the idle.
func (u *upstream) putShort(sc *shortConn) {
	u.mu.Lock()
	if u.done {
		u.mu.Unlock()
		sc.c.Close()
		u.dropShort()
		return
	}
	u.shortIdle = append(u.shortIdle, sc)
	if u.waiting > 0 {
		u.wake() // its room may be taken back
	}
	u.mu.Unlock()
}

// discardShort closes sc, whose state is unknown.
func (u *upstream) discardShort(sc *shortConn) {
	sc.c.Close()
	u.dropShort()
}

// takeIdleShort closes an idle short connection, if there is one, to
// make room for HTTP/2. u.mu is held.
func (u *upstream) takeIdleShort() bool {
	sc := u.popIdleShort()
	if sc == nil {
		return false
	}
	u.shortOpen--
	u.countConns()
	go sc.c.Close() // a TLS close writes an alert: not under u.mu
	return true
}

// popIdleShort takes the idle short connection used last, or returns
// nil. u.mu is held.
func (u *upstream) popIdleShort() *shortConn {
	n := len(u.shortIdle)
	if n == 0 {
		return nil
	}
	sc := u.shortIdle[n-1]
	u.shortIdle[n-1] = nil
	u.shortIdle = u.shortIdle[:n-1]
	return sc
}

// closeShort closes the idle short connections; busy ones are closed as
// they finish. u.mu is held and u.done set.
func (u *upstream) closeShort() {
	for _, sc := range u.shortIdle {
		sc.c.Close()
	}
	u.shortOpen -= len(u.shortIdle)
	u.shortIdle = nil
}

// sendShort sends a short request on a short connection and returns its
// answer, whose body gives the connection back when read to its end and
// closed. Any error means the request should go on HTTP/2 instead.
func (u *upstream) sendShort(ctx context.Context, method string, target *url.URL, host string, hdr http.Header, body []byte) (*http.Response, error) {
	sc, err := u.getShort(ctx)
	if err != nil {
		return nil, err
	}
	sc.c.SetDeadline(time.Now().Add(shortTimeout))
	stop := context.AfterFunc(ctx, func() { sc.c.SetDeadline(time.Unix(1, 0)) })
	writeShort(sc.bw, method, target, host, hdr, body)
	if err := sc.bw.Flush(); err != nil {
		stop()
		u.discardShort(sc)
		return nil, err
	}
	resp, err := http.ReadResponse(sc.br, &http.Request{Method: method})
	if err != nil {
		stop()
		u.discardShort(sc)
		return nil, err
	}
	resp.Body = &shortBody{rc: resp.Body, sc: sc, u: u, stop: stop, keep: !resp.Close}
	return resp, nil
}

// writeShort writes a request in HTTP/1.1 to bw. Every name and value
// in hdr passed the relay's own HTTP/1.1 parser, or is the relay's.
func writeShort(bw *bufio.Writer, method string, target *url.URL, host string, hdr http.Header, body []byte) {
	bw.WriteString(method)
	bw.WriteByte(' ')
	if p := target.EscapedPath(); p != "" {
		bw.WriteString(p)
	} else {
		bw.WriteByte('/')
	}
	if target.RawQuery != "" {
		bw.WriteByte('?')
		bw.WriteString(target.RawQuery)
	}
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(host)
	bw.WriteString("\r\n")
	for k, vs := range hdr {
		if k == "Host" || k == "Content-Length" {
			continue
		}
		for _, v := range vs {
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(v)
			bw.WriteString("\r\n")
		}
	}
	if len(body) > 0 || method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch {
		bw.WriteString("Content-Length: ")
		bw.WriteString(strconv.Itoa(len(body)))
		bw.WriteString("\r\n")
	}
	bw.WriteString("\r\n")
	bw.Write(body)
}

// shortBody is an answer's body on a short connection: read to its end
// and closed, it gives the connection back.
type shortBody struct {
	rc   io.ReadCloser
	sc   *shortConn
	u    *upstream
	stop func() bool
	keep bool
	eof  bool
	done bool
}

func (b *shortBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *shortBody) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	// stop is false when the VM left and cut the deadline short.
	if b.stop() && b.eof && b.keep {
		b.u.putShort(b.sc)
	} else {
		b.u.discardShort(b.sc)
	}
	return nil
}

package forewarntest

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
)

// The in-memory transport: a listener of net.Pipe connections whose
// server end's RemoteAddr is the caller's chosen address, so the server
// knows the VM as it knows a socket's. A goroutine blocked on a pipe is
// durably blocked in a synctest bubble, where one blocked on a socket
// is not.

// pipeAddr is the address of a pipe listener: a host name under the
// reserved .test domain, so that a client not made by this package
// fails to resolve it rather than reaching anything real.
type pipeAddr string

// Network returns "pipe".
func (pipeAddr) Network() string { return "pipe" }

// String returns the host and port.
func (a pipeAddr) String() string { return string(a) }

// errRefused is a dial to a pipe listener that is closed.
var errRefused = errors.New("connection refused")

// pipeListener accepts the connections its dial makes.
type pipeListener struct {
	addr  pipeAddr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	port  atomic.Uint32 // the last client port handed out
}

func newPipeListener(hostport string) *pipeListener {
	return &pipeListener{addr: pipeAddr(hostport), conns: make(chan net.Conn), done: make(chan struct{})}
}

// Accept waits for the next dial.
func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept; later dials are refused. Connections already made
// stay open.
func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr returns the listener's address.
func (l *pipeListener) Addr() net.Addr { return l.addr }

// dial returns the client end of a new connection whose server end has
// from as its RemoteAddr.
func (l *pipeListener) dial(ctx context.Context, from netip.Addr) (net.Conn, error) {
	srv, cli := net.Pipe()
	// Ports as a kernel hands them out, in the ephemeral range.
	port := 32768 + int(l.port.Add(1)%28232)
	remote := net.TCPAddrFromAddrPort(netip.AddrPortFrom(from, uint16(port)))
	select {
	case l.conns <- &pipeConn{Conn: srv, local: l.addr, remote: remote}:
		return &pipeConn{Conn: cli, local: remote, remote: l.addr}, nil
	case <-l.done:
	case <-ctx.Done():
	}
	srv.Close()
	cli.Close()
	err := errRefused
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	return nil, &net.OpError{Op: "dial", Net: "pipe", Source: remote, Addr: l.addr, Err: err}
}

// pipeConn is one end of a pipe with the addresses of a connection.
type pipeConn struct {
	net.Conn
	local, remote net.Addr
}

// LocalAddr returns this end's address.
func (c *pipeConn) LocalAddr() net.Addr { return c.local }

// RemoteAddr returns the other end's address.
func (c *pipeConn) RemoteAddr() net.Addr { return c.remote }

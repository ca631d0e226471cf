package bench

import (
	"context"
	"net"
	"os/exec"
	"strings"
)

// Hop is the reference of the relay's added latency: a TCP proxy that
// copies bytes and nothing else, one goroutine each way with a buffer of
// its own (no parsing, no TLS, no identity), run as 'forewarn bench-hop'
// in a process of its own as the relay is. Its connection to target
// comes from the address its caller's came from, so that the server
// tells the simulated VMs apart as it does on the direct path. What the
// hop adds over a direct request is what any user-space process in the
// path costs on the machine: two more threads woken per request.
func Hop(ctx context.Context, ln net.Listener, target string) error {
	go func() { <-ctx.Done(); ln.Close() }()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go hop(c, target)
	}
}

func hop(c net.Conn, target string) {
	defer c.Close()
	src, _ := c.RemoteAddr().(*net.TCPAddr)
	d := net.Dialer{}
	if src != nil {
		d.LocalAddr = &net.TCPAddr{IP: src.IP}
	}
	u, err := d.Dial("tcp", target)
	if err != nil {
		return
	}
	defer u.Close()
	done := make(chan struct{})
	go func() {
		pump(u, c)
		u.(*net.TCPConn).CloseWrite()
		close(done)
	}()
	pump(c, u)
	c.Close()
	<-done
}

// pump copies from src to dst until either fails: a read and a write per
// piece, as a proxy in user space does (io.Copy would splice).
func pump(dst, src net.Conn) {
	buf := make([]byte, 16<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// startHop starts 'forewarn bench-hop' in front of target.
func startHop(binary, target string) (*child, error) {
	c := &child{cmd: exec.Command(binary, "bench-hop", "--addr", "127.0.0.1:0", "--to", target)}
	err := c.start("forewarn bench-hop", func(line string) bool {
		a, ok := strings.CutPrefix(line, "hop listening on ")
		c.metadata = a
		return ok
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Package etcdtest runs real etcd servers for tests: one member, or a
// cluster of several on loopback, each with its own data directory in
// the test's temporary directory, stopped when the test ends. The
// processes are internal/etcdproc's, tuned as it says.
package etcdtest

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/forewarn/forewarn/internal/etcdproc"
)

// Limits every test server is started with (etcdproc's).
const (
	MaxTxnOps       = etcdproc.MaxTxnOps
	MaxRequestBytes = etcdproc.MaxRequestBytes
)

const (
	// startTimeout bounds how long a member may take to become healthy.
	startTimeout = 30 * time.Second
	// logTail is how many lines of a member's log a failed test prints.
	logTail = 40
)

// Server is a running single-member etcd.
type Server struct {
	c *Cluster
}

// Start runs a single-member etcd on free loopback ports and waits until
// it is healthy. It is stopped when t ends; if t failed, the tail of its
// log is printed. A missing etcd binary fails t. Flags are added to the
// member's command line after the package's own, overriding them: for
// instance "--max-txn-ops=128" restores etcd's default.
func Start(t testing.TB, flags ...string) *Server {
	t.Helper()
	return &Server{c: startCluster(t, 1, flags)}
}

// Endpoints returns the server's client URL.
func (s *Server) Endpoints() []string { return s.c.Endpoints() }

// Stop stops the server with SIGTERM and waits for it to exit.
func (s *Server) Stop() { s.c.Stop(0) }

// Kill stops the server with SIGKILL and waits for it to exit.
func (s *Server) Kill() { s.c.Kill(0) }

// Restart starts the stopped server again on its data directory and
// ports, and waits until it is healthy.
func (s *Server) Restart() { s.c.Restart(0) }

// Cluster is a running etcd cluster of several members on loopback.
type Cluster struct {
	t testing.TB
	p *etcdproc.Cluster
}

// StartCluster runs an n-member etcd cluster on free loopback ports and
// waits until every member is healthy. It is stopped when t ends; if t
// failed, the tail of each member's log is printed. A missing etcd
// binary fails t.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return startCluster(t, n, nil)
}

func startCluster(t testing.TB, n int, flags []string) *Cluster {
	t.Helper()
	bin, err := etcdproc.Binary("")
	if err != nil {
		t.Fatal(err)
	}
	p, err := etcdproc.New(bin, t.TempDir(), n, flags)
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	c := &Cluster{t: t, p: p}
	t.Cleanup(func() {
		p.StopAll()
		if t.Failed() {
			for i := range p.Len() {
				t.Logf("etcd member %s log (last %d lines):\n%s", p.Name(i), logTail, etcdproc.Tail(p.LogPath(i), logTail))
			}
		}
	})
	for i := range n {
		if err := p.Launch(i); err != nil {
			t.Fatalf("etcdtest: %v", err)
		}
	}
	for i := range n {
		c.waitHealthy(i)
	}
	return c
}

// waitHealthy fails the test unless member i is healthy within
// startTimeout.
func (c *Cluster) waitHealthy(i int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := c.p.WaitHealthy(ctx, i); err != nil {
		c.t.Fatalf("etcdtest: %v\n%s", err, etcdproc.Tail(c.p.LogPath(i), logTail))
	}
}

// Endpoints returns the client URLs of every member, stopped or not, in
// member order.
func (c *Cluster) Endpoints() []string { return c.p.Endpoints() }

// Stop stops member i with SIGTERM and waits for it to exit.
func (c *Cluster) Stop(i int) { c.p.Stop(i, syscall.SIGTERM) }

// Kill stops member i with SIGKILL and waits for it to exit.
func (c *Cluster) Kill(i int) { c.p.Stop(i, syscall.SIGKILL) }

// Restart starts the stopped member i again on its data directory and
// ports, and waits until it is healthy, which needs a quorum of the
// cluster running.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	if err := c.p.Launch(i); err != nil {
		c.t.Fatalf("etcdtest: %v", err)
	}
	c.waitHealthy(i)
}

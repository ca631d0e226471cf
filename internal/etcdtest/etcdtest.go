// Package etcdtest runs real etcd servers for tests: one member, or a
// cluster of several on loopback, each with its own data directory in
// the test's temporary directory, stopped when the test ends.
//
// The servers are the etcd binary on this machine (/usr/bin/etcd, from
// Debian's etcd-server package, or etcd on PATH); scripts/test installs it.
// They are tuned for tests: short heartbeats and elections, and limits on
// transactions and requests raised so that a fleet-wide change fits in
// one transaction (see MaxTxnOps and MaxRequestBytes).
package etcdtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Limits every test server is started with: a fleet-wide change of
// 100,000 VMs is one transaction of about 100,000 operations and a few
// megabytes.
const (
	MaxTxnOps       = 300000
	MaxRequestBytes = 128 << 20
)

const (
	// startTimeout bounds how long a member may take to become healthy.
	startTimeout = 30 * time.Second
	// stopTimeout bounds how long a member may take to exit on SIGTERM
	// before it is killed.
	stopTimeout = 10 * time.Second
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
	t       testing.TB
	bin     string
	token   string
	flags   []string // added to each member's
	members []*member
}

type member struct {
	name    string
	dir     string // data directory
	logPath string
	client  string // client URL
	peer    string // peer URL

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
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
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	if n < 1 {
		t.Fatalf("etcdtest: a cluster of %d members", n)
	}
	dir := t.TempDir()
	ports, err := freePorts(2 * n)
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	c := &Cluster{t: t, bin: bin, token: filepath.Base(dir), flags: flags}
	for i := range n {
		name := fmt.Sprintf("m%d", i)
		c.members = append(c.members, &member{
			name:    name,
			dir:     filepath.Join(dir, name),
			logPath: filepath.Join(dir, name+".log"),
			client:  fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]),
			peer:    fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
		})
	}
	t.Cleanup(func() {
		for _, m := range c.members {
			m.stop(syscall.SIGTERM)
		}
		if t.Failed() {
			for _, m := range c.members {
				t.Logf("etcd member %s log (last %d lines):\n%s", m.name, logTail, tail(m.logPath, logTail))
			}
		}
	})
	for _, m := range c.members {
		if err := c.launch(m); err != nil {
			t.Fatalf("etcdtest: %v", err)
		}
	}
	for _, m := range c.members {
		if err := m.waitHealthy(); err != nil {
			t.Fatalf("etcdtest: %v\n%s", err, tail(m.logPath, logTail))
		}
	}
	return c
}

// Endpoints returns the client URLs of every member, stopped or not, in
// member order.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.members))
	for i, m := range c.members {
		eps[i] = m.client
	}
	return eps
}

// Stop stops member i with SIGTERM and waits for it to exit.
func (c *Cluster) Stop(i int) { c.members[i].stop(syscall.SIGTERM) }

// Kill stops member i with SIGKILL and waits for it to exit.
func (c *Cluster) Kill(i int) { c.members[i].stop(syscall.SIGKILL) }

// Restart starts the stopped member i again on its data directory and
// ports, and waits until it is healthy, which needs a quorum of the
// cluster running.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	m := c.members[i]
	if err := c.launch(m); err != nil {
		c.t.Fatalf("etcdtest: %v", err)
	}
	if err := m.waitHealthy(); err != nil {
		c.t.Fatalf("etcdtest: %v\n%s", err, tail(m.logPath, logTail))
	}
}

// binary returns the etcd binary to run.
func binary() (string, error) {
	if p, err := exec.LookPath("etcd"); err == nil {
		return p, nil
	}
	const debian = "/usr/bin/etcd"
	if _, err := os.Stat(debian); err == nil {
		return debian, nil
	}
	return "", errors.New("etcd not found; ./scripts/test installs Debian's etcd-server")
}

// launch starts member m's process, appending to its log.
func (c *Cluster) launch(m *member) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil {
		return fmt.Errorf("member %s is already running", m.name)
	}
	var initial []string
	for _, o := range c.members {
		initial = append(initial, o.name+"="+o.peer)
	}
	args := []string{
		"--name", m.name,
		"--data-dir", m.dir,
		"--listen-client-urls", m.client,
		"--advertise-client-urls", m.client,
		"--listen-peer-urls", m.peer,
		"--initial-advertise-peer-urls", m.peer,
		"--initial-cluster", strings.Join(initial, ","),
		"--initial-cluster-state", "new",
		"--initial-cluster-token", c.token,
		"--heartbeat-interval", "50",
		"--election-timeout", "500",
		"--max-txn-ops", strconv.Itoa(MaxTxnOps),
		"--max-request-bytes", strconv.Itoa(MaxRequestBytes),
		"--logger", "zap",
		"--log-level", "warn",
	}
	args = append(args, c.flags...)
	log, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return fmt.Errorf("start etcd member %s: %w", m.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = log.Close()
		close(done)
	}()
	m.cmd, m.done = cmd, done
	return nil
}

// stop sends sig to m's process, unless it is not running, and waits for
// it to exit; a process that outlives stopTimeout is killed.
func (m *member) stop(sig syscall.Signal) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Signal(sig)
	select {
	case <-m.done:
	case <-time.After(stopTimeout):
		_ = m.cmd.Process.Kill()
		<-m.done
	}
	m.cmd, m.done = nil, nil
}

// waitHealthy polls m's health endpoint until it answers healthy, the
// process exits, or startTimeout passes.
func (m *member) waitHealthy() error {
	m.mu.Lock()
	done := m.done
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if healthy(ctx, m.client) {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("etcd member %s exited while starting", m.name)
		case <-ctx.Done():
			return fmt.Errorf("etcd member %s not healthy within %v", m.name, startTimeout)
		case <-tick.C:
		}
	}
}

// healthy reports whether the member at url answers its health check
// with health "true" (it has a leader and a quorum).
func healthy(ctx context.Context, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1024))
	return err == nil && resp.StatusCode == http.StatusOK && bytes.Contains(b, []byte(`"health":"true"`))
}

// freePorts returns n distinct loopback ports that were free a moment
// ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

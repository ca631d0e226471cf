// Package etcdproc runs etcd servers as child processes on loopback: one
// member, or a cluster of several, each with its own data directory and
// log. The test harness (internal/etcdtest) and the load harness
// (forewarn bench ha) both start their etcd through it.
//
// The servers are the etcd binary on this machine (/usr/bin/etcd, from
// Debian's etcd-server package, or etcd on PATH). They are tuned for
// tests and benchmarks: short heartbeats and elections, and limits on
// transactions and requests raised so that a fleet-wide change fits in
// one transaction (see MaxTxnOps and MaxRequestBytes).
package etcdproc

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
	"time"
)

// Limits every server is started with: a fleet-wide change of 100,000
// VMs is one transaction of about 100,000 operations and a few megabytes.
const (
	MaxTxnOps       = 300000
	MaxRequestBytes = 128 << 20
)

// stopTimeout bounds how long a member may take to exit on SIGTERM
// before it is killed.
const stopTimeout = 10 * time.Second

// Binary returns explicit when it is set, else etcd on PATH, else
// Debian's /usr/bin/etcd.
func Binary(explicit string) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	if p, err := exec.LookPath("etcd"); err == nil {
		return p, nil
	}
	const debian = "/usr/bin/etcd"
	if _, err := os.Stat(debian); err == nil {
		return debian, nil
	}
	return "", errors.New("etcd not found; ./scripts/test installs Debian's etcd-server")
}

// Cluster is an etcd cluster of one or more members on loopback. Members
// are started with Launch, which a stopped member may be again, on the
// same data directory and ports.
type Cluster struct {
	bin     string
	token   string
	flags   []string // added to each member's command line
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

// New lays out an n-member cluster in dir (each member's data directory
// and log) on free loopback ports, without starting it. flags are added
// to each member's command line after the package's own, overriding them.
func New(bin, dir string, n int, flags []string) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("etcd: a cluster of %d members", n)
	}
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	c := &Cluster{bin: bin, token: filepath.Base(dir), flags: flags}
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
	return c, nil
}

// Len returns the number of members.
func (c *Cluster) Len() int { return len(c.members) }

// Endpoints returns the client URLs of every member, stopped or not, in
// member order.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.members))
	for i, m := range c.members {
		eps[i] = m.client
	}
	return eps
}

// Name returns member i's name; LogPath the file its output goes to.
func (c *Cluster) Name(i int) string    { return c.members[i].name }
func (c *Cluster) LogPath(i int) string { return c.members[i].logPath }

// Launch starts member i's process, appending to its log.
func (c *Cluster) Launch(i int) error {
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil {
		return fmt.Errorf("etcd member %s is already running", m.name)
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

// Stop sends sig to member i's process, unless it is not running, and
// waits for it to exit; a process that outlives stopTimeout is killed.
func (c *Cluster) Stop(i int, sig syscall.Signal) {
	m := c.members[i]
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

// StopAll stops every member with SIGTERM.
func (c *Cluster) StopAll() {
	for i := range c.members {
		c.Stop(i, syscall.SIGTERM)
	}
}

// WaitHealthy polls member i's health endpoint until it answers healthy
// (it has a leader and a quorum), the process exits, or ctx ends.
func (c *Cluster) WaitHealthy(ctx context.Context, i int) error {
	m := c.members[i]
	m.mu.Lock()
	done := m.done
	m.mu.Unlock()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if Healthy(ctx, m.client) {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("etcd member %s exited while starting", m.name)
		case <-ctx.Done():
			return fmt.Errorf("etcd member %s not healthy: %w", m.name, ctx.Err())
		case <-tick.C:
		}
	}
}

// Healthy reports whether the member at url answers its health check
// with health "true".
func Healthy(ctx context.Context, url string) bool {
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

// Tail returns the last n lines of the file at path.
func Tail(path string, n int) string {
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

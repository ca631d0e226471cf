// Package bench is Forewarn's load harness: polling load from many VMs,
// each on its own loopback source address, against Forewarn and a
// minimal net/http server that returns the same bytes (the ceiling) in
// the same run; GCE long-poll fan-out; and engine scale.
//
// Servers run as child processes (the forewarn binary's serve and
// bench-ceiling commands), so their CPU is measured apart from the load
// generator's. The generator speaks HTTP/1.1 over raw keep-alive
// connections to stay cheap next to the server it measures.
package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Latency summarizes a latency distribution.
type Latency struct {
	P50  time.Duration `json:"p50"`
	P90  time.Duration `json:"p90"`
	P99  time.Duration `json:"p99"`
	P999 time.Duration `json:"p999"`
	Max  time.Duration `json:"max"`
}

// summarize sorts d and returns its percentiles.
func summarize(d []time.Duration) Latency {
	if len(d) == 0 {
		return Latency{}
	}
	slices.Sort(d)
	at := func(q float64) time.Duration { return d[min(len(d)-1, int(q*float64(len(d))))] }
	return Latency{P50: at(0.50), P90: at(0.90), P99: at(0.99), P999: at(0.999), Max: d[len(d)-1]}
}

// Addrs returns n consecutive addresses from base.
func Addrs(base netip.Addr, n int) []netip.Addr {
	out := make([]netip.Addr, n)
	a := base
	for i := range out {
		out[i] = a
		a = a.Next()
	}
	return out
}

// child is a server process the harness started.
type child struct {
	cmd      *exec.Cmd
	metadata string // host:port
	admin    string
	// relay is the server's relay listener, when it has one; metrics is
	// a relay's metrics listener.
	relay   string
	metrics string
	dir     string
}

// startForewarn starts 'forewarn serve' on a fleet file of its own in a
// temporary directory. With --relay-addr among extra, it also waits for
// the relay listener's address.
func startForewarn(binary, fleet string, extra ...string) (*child, error) {
	dir, err := os.MkdirTemp("", "forewarn-bench")
	if err != nil {
		return nil, err
	}
	fleetPath := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleetPath, []byte(fleet), 0o600); err != nil {
		return nil, err
	}
	c, err := startServe(binary, dir, fleetPath, append([]string{"--allow-short-notice"}, extra...)...)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c.dir = dir // stop removes it
	return c, nil
}

// startServe starts 'forewarn serve' with its store in dir/data, on the
// fleet file at fleet, and waits until it prints its listeners'
// addresses. With --relay-addr among extra, it also waits for the relay
// listener's. The child's stop leaves dir.
func startServe(binary, dir, fleet string, extra ...string) (*child, error) {
	args := append([]string{"serve", "--metadata-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
		"--data", filepath.Join(dir, "data"), "--fleet", fleet}, extra...)
	c := &child{cmd: exec.Command(binary, args...)}
	relayed := slices.Contains(extra, "--relay-addr")
	err := c.start("forewarn serve", func(line string) bool {
		if a, ok := strings.CutPrefix(line, "metadata API listening on "); ok {
			c.metadata = a
		}
		if a, ok := strings.CutPrefix(line, "operator API listening on "); ok {
			c.admin = a
		}
		if a, ok := strings.CutPrefix(line, "relay listener on "); ok {
			c.relay = a
		}
		return c.metadata != "" && c.admin != "" && (!relayed || c.relay != "")
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// start starts c's command and reads the lines it prints, handing each
// to line, until line reports that c is ready; the rest of its output
// is discarded. A command that exits first is an error that names it
// and gives its stderr.
func (c *child) start(name string, line func(string) bool) error {
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	c.cmd.Stderr = &stderr
	if err := c.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", c.cmd.Path, err)
	}
	sc := bufio.NewScanner(out)
	for ready := false; !ready; {
		if !sc.Scan() {
			c.stop()
			return fmt.Errorf("%s exited: %s", name, stderr.String())
		}
		ready = line(sc.Text())
	}
	go io.Copy(io.Discard, out)
	return nil
}

// startCeiling starts 'forewarn bench-ceiling', which answers every
// request with body and the given headers.
func startCeiling(binary string, body []byte, headers string) (*child, error) {
	dir, err := os.MkdirTemp("", "forewarn-ceiling")
	if err != nil {
		return nil, err
	}
	bodyPath := filepath.Join(dir, "body")
	if err := os.WriteFile(bodyPath, body, 0o600); err != nil {
		return nil, err
	}
	headerPath := filepath.Join(dir, "headers")
	if err := os.WriteFile(headerPath, []byte(headers), 0o600); err != nil {
		return nil, err
	}
	c := &child{cmd: exec.Command(binary, "bench-ceiling", "--addr", "127.0.0.1:0", "--body", bodyPath, "--headers", headerPath), dir: dir}
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		c.stop()
		return nil, errors.New("the ceiling server exited")
	}
	c.metadata = strings.TrimPrefix(sc.Text(), "ceiling listening on ")
	go io.Copy(io.Discard, out)
	return c, nil
}

func (c *child) stop() {
	if c.cmd.Process != nil {
		c.cmd.Process.Kill()
		c.cmd.Wait()
	}
	os.RemoveAll(c.dir)
}

// cpu returns the process's user+system CPU time so far.
func (c *child) cpu() (time.Duration, error) { return procCPU(c.cmd.Process.Pid) }

// rss returns the process's resident set size.
func (c *child) rss() (int64, error) { return procRSS(c.cmd.Process.Pid) }

// procCPU reads utime+stime of pid from /proc.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * time.Second / 100, nil // USER_HZ is 100 on Linux
}

// procRSS reads VmRSS of pid from /proc.
func procRSS(pid int) (int64, error) { return procMemory(pid, "VmRSS") }

// procMemory reads the memory figure key (VmRSS, VmHWM) of pid from
// /proc, in bytes.
func procMemory(pid int, key string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no " + key)
}

// conn is one keep-alive HTTP/1.1 connection from a VM's address.
type conn struct {
	c   net.Conn
	r   *bufio.Reader
	req []byte
}

func dial(ctx context.Context, from netip.Addr, to string, req []byte) (*conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from.AsSlice()}, Timeout: 5 * time.Second}
	c, err := d.DialContext(ctx, "tcp", to)
	if err != nil {
		return nil, err
	}
	return &conn{c: c, r: bufio.NewReaderSize(c, 16<<10), req: req}, nil
}

// do sends the connection's request and reads the response, returning
// the status code and, when want is set, a copy of the named header and
// the body.
func (c *conn) do(want string) (status int, header string, body []byte, err error) {
	if _, err := c.c.Write(c.req); err != nil {
		return 0, "", nil, err
	}
	return readResponse(c.r, want)
}

// AllHeaders, as the header readResponse is to return, asks for every
// header line but Content-Length and Date (which net/http writes itself),
// each "Name: value\n", in the order they came.
const AllHeaders = "*"

// readResponse reads one HTTP/1.1 response with a Content-Length body,
// returning the value of its header want (see AllHeaders).
func readResponse(r *bufio.Reader, want string) (status int, header string, body []byte, err error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return 0, "", nil, err
	}
	if len(line) < 12 {
		return 0, "", nil, fmt.Errorf("bad status line %q", line)
	}
	status = int(line[9]-'0')*100 + int(line[10]-'0')*10 + int(line[11]-'0')
	length := 0
	for {
		line, err = r.ReadSlice('\n')
		if err != nil {
			return 0, "", nil, err
		}
		if len(line) <= 2 {
			break
		}
		k, v, _ := bytes.Cut(line, []byte(":"))
		v = bytes.TrimSpace(v)
		if bytes.EqualFold(k, []byte("Content-Length")) {
			length, _ = strconv.Atoi(string(v))
		}
		switch {
		case want == AllHeaders:
			if !bytes.EqualFold(k, []byte("Content-Length")) && !bytes.EqualFold(k, []byte("Date")) {
				header += string(k) + ": " + string(v) + "\n"
			}
		case want != "" && bytes.EqualFold(k, []byte(want)):
			header = string(v)
		}
	}
	if want == "" {
		_, err = r.Discard(length)
		return status, "", nil, err
	}
	body = make([]byte, length)
	_, err = io.ReadFull(r, body)
	return status, header, body, err
}

// closedLoop runs one goroutine per connection, each sending its request
// as soon as the last answer arrives, for d. It returns every latency,
// the count of responses whose status is not ok, and the first error.
func closedLoop(ctx context.Context, conns []*conn, d time.Duration, ok func(int) bool) ([]time.Duration, int, error) {
	var mu sync.Mutex
	var all []time.Duration
	bad := 0
	var firstErr error
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			lat := make([]time.Duration, 0, 1<<16)
			nbad := 0
			var err error
			for ctx.Err() == nil {
				t0 := time.Now()
				if t0.After(end) {
					break
				}
				var status int
				status, _, _, err = c.do("")
				if err != nil {
					break
				}
				lat = append(lat, time.Since(t0))
				if !ok(status) {
					nbad++
				}
			}
			mu.Lock()
			all = append(all, lat...)
			bad += nbad
			if err != nil && firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	return all, bad, firstErr
}

// cpuProfile starts a CPU profile, of d, of the server whose operator
// API is at admin, and returns the function that waits for it to end
// and writes it to file; what names the profile in errors. The profile
// has begun when cpuProfile returns.
func cpuProfile(ctx context.Context, hc *http.Client, admin string, d, timeout time.Duration, file, what string) (wait func() error, err error) {
	ctx, cancel := context.WithTimeout(ctx, d+timeout)
	secs := strconv.Itoa(max(int(d/time.Second), 1))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/debug/pprof/profile?seconds="+secs, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(b))
			}
			return os.WriteFile(file, b, 0o644)
		}()
	}()
	// The profile starts when the server has the request.
	time.Sleep(200 * time.Millisecond)
	return func() error {
		defer cancel()
		if err := <-done; err != nil {
			return fmt.Errorf("CPU profile of %s: %w", what, err)
		}
		return nil
	}, nil
}

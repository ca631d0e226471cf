package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// bigFleet writes a fleet file of n Azure VMs named vm0, vm1, … with
// consecutive addresses from 127.64.0.1 and returns its path and the
// addresses.
func bigFleet(t *testing.T, n int) (string, []netip.Addr) {
	t.Helper()
	var b strings.Builder
	b.Grow(n * 40)
	b.WriteString("vms:\n")
	addrs := make([]netip.Addr, n)
	a := netip.MustParseAddr("127.64.0.1")
	for i := range n {
		addrs[i] = a
		fmt.Fprintf(&b, "  - {name: vm%d, ip: %s}\n", i, a)
		a = a.Next()
	}
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, addrs
}

// dialFrom opens a TCP connection to addr from the local address ip.
func dialFrom(ip netip.Addr, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: ip.AsSlice()}, Timeout: 5 * time.Second}
	return d.Dial("tcp", addr)
}

// holder dials silent connections and keeps each until the server
// closes it (a refusal or an eviction) or the test ends.
type holder struct {
	open, refused, dialErrs atomic.Int64
	mu                      sync.Mutex
	conns                   []net.Conn
	by                      map[netip.Addr]int // open connections by address
	readers                 sync.WaitGroup
	firstErr                error // of the first failed dial
}

// hold dials a silent connection from ip to addr and watches it.
func (h *holder) hold(ip netip.Addr, addr string) {
	c, err := dialFrom(ip, addr)
	if err != nil {
		if h.dialErrs.Add(1) == 1 {
			h.firstErr = err
		}
		return
	}
	h.open.Add(1)
	h.mu.Lock()
	h.conns = append(h.conns, c)
	if h.by == nil {
		h.by = map[netip.Addr]int{}
	}
	h.by[ip]++
	h.mu.Unlock()
	h.readers.Go(func() {
		b, _ := io.ReadAll(c) // until the server closes it, or the test does
		if strings.HasPrefix(string(b), "HTTP/1.1 503") {
			h.refused.Add(1)
		}
		h.open.Add(-1)
		h.mu.Lock()
		h.by[ip]--
		h.mu.Unlock()
		c.Close()
	})
}

// spread returns the fewest and the most connections an address holds.
func (h *holder) spread() (least, most int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	least = -1
	for _, n := range h.by {
		if least < 0 || n < least {
			least = n
		}
		most = max(most, n)
	}
	return least, most
}

// settle waits until the number of open connections stays put for
// 300 ms (the server has answered every dial), at most 20 s.
func (h *holder) settle() int64 {
	last, since := h.open.Load(), time.Now()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		if n := h.open.Load(); n != last {
			last, since = n, time.Now()
		} else if time.Since(since) > 300*time.Millisecond {
			break
		}
	}
	return last
}

// closeAll closes every connection and waits for the watchers.
func (h *holder) closeAll() {
	h.mu.Lock()
	for _, c := range h.conns {
		c.Close()
	}
	h.mu.Unlock()
	h.readers.Wait()
}

// scheduledEventsRequest is an Azure VM's poll, kept alive.
const scheduledEventsRequest = "GET /metadata/scheduledevents?api-version=2020-07-01 HTTP/1.1\r\nHost: x\r\nMetadata: true\r\n\r\n"

// askOn sends an Azure poll on c and returns the answer's status code.
func askOn(c net.Conn, r *bufio.Reader) (int, error) {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, scheduledEventsRequest); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestFewVMsCannotFillTheTotal: in a fleet of 100,000 VMs, 500 of them
// (0.5%) open 48 silent connections each, as many as their per-source
// cap allows and more than the metadata API's total. Then 1,000 other
// VMs each open a connection and poll on it, keeping it open: every one
// must be admitted and answered 200, and asked again at the end on the
// same connection, answered again (an admitted VM is not evicted in
// favour of others while the attackers hold more). Run with --max-conns
// 2000, and with the total derived from the limit on open files (17,936
// on a hard limit of 20,000) when the limit allows it.
func TestFewVMsCannotFillTheTotal(t *testing.T) {
	const (
		vms       = 100_000
		attackers = 500
		perVM     = 48 // the derived per-source cap: --max-long-polls 32 + 16
		honest    = 1000
	)
	fleet, addrs := bigFleet(t, vms)
	for _, c := range []struct {
		name     string
		maxConns string // "" derives it
		total    int
	}{
		{"max-conns 2000", "2000", 2000},
		{"derived total", "", 17_936},
	} {
		t.Run(c.name, func(t *testing.T) {
			if limit, err := hardFileLimit(); err != nil || limit < uint64(c.total+honest+1000) {
				t.Skipf("needs %d open files; the hard limit is %d (%v)", c.total+honest+1000, limit, err)
			}
			if c.maxConns == "" {
				if limit, _ := hardFileLimit(); limit != 20000 {
					t.Skipf("the derived total is checked on a hard limit of 20,000 open files; it is %d", limit)
				}
			}
			args := []string{"--store", "mem", "--request-history", "0", "--header-timeout", "2m"}
			if c.maxConns != "" {
				args = append(args, "--max-conns", c.maxConns)
			}
			begin := time.Now()
			s := startServerArgs(t, filepath.Join(t.TempDir(), "data"), fleet, args...)
			t.Logf("the server started in %v", time.Since(begin).Round(time.Millisecond))

			// The attack: 500 VMs, 48 silent connections each, dialled by
			// 8 workers. This process has the same limit on open files as
			// the server: while a slow server leaves dialled connections
			// in its accept queue, the attackers wait rather than take the
			// files the 1,000 other VMs need.
			limit, _ := hardFileLimit()
			maxOpen := int64(limit) - honest - 500
			start := time.Now()
			var h holder
			defer h.closeAll()
			var dialers sync.WaitGroup
			for w := range 8 {
				dialers.Go(func() {
					for i := w; i < attackers; i += 8 {
						for range perVM {
							for wait := time.Now().Add(20 * time.Second); h.open.Load() >= maxOpen && time.Now().Before(wait); {
								time.Sleep(10 * time.Millisecond)
							}
							h.hold(addrs[i], s.metadata)
						}
					}
				})
			}
			dialers.Wait()
			held := h.settle()
			t.Logf("attack: %d connections dialled from %d VMs in %v (%d dial errors, the first %v): %d held, %d refused",
				attackers*perVM, attackers, time.Since(start).Round(time.Millisecond), h.dialErrs.Load(), h.firstErr, held, h.refused.Load())
			least, most := h.spread()
			t.Logf("each attacker holds %d to %d connections", least, most)
			if held < int64(c.total)*9/10 {
				t.Fatalf("the attackers hold %d connections, want the total (%d) filled", held, c.total)
			}

			// 1,000 other VMs each open a connection and poll on it.
			type vmConn struct {
				c net.Conn
				r *bufio.Reader
			}
			var (
				mu       sync.Mutex
				kept     []vmConn
				failures = map[string]int{}
				example  string
			)
			fail := func(what string, err error) {
				mu.Lock()
				defer mu.Unlock()
				failures[what]++
				if example == "" && err != nil {
					example = err.Error()
				}
			}
			start = time.Now()
			var polls sync.WaitGroup
			for w := range 8 {
				polls.Go(func() {
					for i := attackers + w; i < attackers+honest; i += 8 {
						c, err := dialFrom(addrs[i], s.metadata)
						if err != nil {
							fail("dial", err)
							continue
						}
						r := bufio.NewReader(c)
						code, err := askOn(c, r)
						switch {
						case err != nil:
							fail("error", err)
							c.Close()
							continue
						case code != 200:
							fail(fmt.Sprint(code), nil)
							c.Close()
							continue
						}
						mu.Lock()
						kept = append(kept, vmConn{c, r})
						mu.Unlock()
					}
				})
			}
			polls.Wait()
			t.Logf("other VMs: %d of %d answered 200 on a new connection in %v; failures %v %s",
				len(kept), honest, time.Since(start).Round(time.Millisecond), failures, example)
			if len(kept) != honest {
				t.Errorf("%d of %d other VMs were not served while 500 VMs held the total: %v %s", honest-len(kept), honest, failures, example)
			}

			// Their connections are still theirs.
			again := 0
			for _, k := range kept {
				if code, err := askOn(k.c, k.r); err == nil && code == 200 {
					again++
				}
				k.c.Close()
			}
			least, most = h.spread()
			t.Logf("asked again on the same connections: %d of %d answered 200; the attackers hold %d, %d to %d each",
				again, len(kept), h.open.Load(), least, most)
			if again != len(kept) {
				t.Errorf("%d of the other VMs' admitted connections were closed while the attackers held more", len(kept)-again)
			}
		})
	}
}

// TestVMsCannotFillTheOperatorAPI: 4 fleet VMs open 16 silent
// connections each to the operator API, as many as its per-source cap
// and together its total. The operator's /healthz and /v1/vms from
// 127.0.0.1 must still be answered 200, and each VM holds at most 4
// connections: on the operator listener a VM's address is a stranger,
// with a token configured or not.
func TestVMsCannotFillTheOperatorAPI(t *testing.T) {
	const vms, perVM = 4, 16
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	var b strings.Builder
	b.WriteString("vms:\n")
	for i := range vms {
		fmt.Fprintf(&b, "  - {name: vm%d, ip: 127.0.9.%d}\n", i, i+1)
	}
	if err := os.WriteFile(fleet, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, token := range []bool{false, true} {
		t.Run(fmt.Sprint("token ", token), func(t *testing.T) {
			var s *server
			if token {
				s = startServerToken(t, filepath.Join(t.TempDir(), "data"), fleet)
			} else {
				s = startServer(t, filepath.Join(t.TempDir(), "data"), fleet)
			}
			var h holder
			defer h.closeAll()
			for i := range vms {
				for range perVM {
					h.hold(netip.AddrFrom4([4]byte{127, 0, 9, byte(i + 1)}), s.adm)
				}
			}
			held := h.settle()
			t.Logf("%d VMs × %d connections to the operator API: %d held, %d refused", vms, perVM, held, h.refused.Load())
			for _, path := range []string{"/healthz", "/v1/vms"} {
				req, _ := http.NewRequest("GET", "http://"+s.adm+path, nil)
				if s.token != "" {
					req.Header.Set("Authorization", "Bearer "+s.token)
				}
				resp, err := vmClient("127.0.0.1").Do(req)
				if err != nil {
					t.Errorf("the operator's %s: %v", path, err)
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				t.Logf("the operator's %s: %d", path, resp.StatusCode)
				if resp.StatusCode != 200 {
					t.Errorf("the operator's %s: %d %s, want 200", path, resp.StatusCode, body)
				}
			}
			if held > vms*4 {
				t.Errorf("the VMs hold %d connections to the operator API, want at most 4 each (%d)", held, vms*4)
			}
		})
	}
}

// pipeline writes requests to c without ever reading, until a write
// fails, and returns when and why it failed.
func pipeline(c net.Conn, request string) (time.Time, error) {
	batch := []byte(strings.Repeat(request, 64))
	for {
		if _, err := c.Write(batch); err != nil {
			return time.Now(), err
		}
	}
}

// TestUnreadAnswersAreCut: with --write-timeout 1s, a VM that pipelines
// requests to the metadata API and never reads its answers, and an
// operator that does the same to the operator API, have their
// connections closed once the server's writes stop making progress for
// the write timeout (the test allows 10 s in all for the buffers to fill
// and the closing); meanwhile a GCE long-poll held 3 s, longer than the
// write timeout, is answered 200.
func TestUnreadAnswersAreCut(t *testing.T) {
	const window = 20 * time.Second
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	os.WriteFile(fleet, []byte("vms:\n  - {name: az, ip: 127.0.9.11}\n  - {name: g, ip: 127.0.9.12, provider: gce}\n"), 0o600)
	s := startServerArgs(t, filepath.Join(dir, "data"), fleet, "--write-timeout", "1s")

	type cut struct {
		who string
		at  time.Duration
		err error
	}
	start := time.Now()
	cuts := make(chan cut, 2)
	for _, p := range []struct{ who, ip, addr, request string }{
		{"metadata", "127.0.9.11", s.metadata, scheduledEventsRequest},
		{"operator", "127.0.0.1", s.adm, "GET /v1/vms HTTP/1.1\r\nHost: x\r\n\r\n"},
	} {
		c, err := dialFrom(netip.MustParseAddr(p.ip), p.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		go func() {
			at, err := pipeline(c, p.request)
			cuts <- cut{p.who, at.Sub(start), err}
		}()
	}

	// The long-poll, held longer than the write timeout.
	g := vmClient("127.0.9.12")
	maintenance := "http://" + s.metadata + "/computeMetadata/v1/instance/maintenance-event"
	req, _ := http.NewRequest("GET", maintenance, nil)
	req.Header.Set("Metadata-Flavor", "Google")
	resp, err := g.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	req, _ = http.NewRequest("GET", maintenance+"?wait_for_change=true&timeout_sec=3&last_etag="+resp.Header.Get("ETag"), nil)
	req.Header.Set("Metadata-Flavor", "Google")
	held := time.Now()
	resp, err = g.Do(req)
	if err != nil {
		t.Errorf("a long-poll held 3 s: %v", err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Logf("a long-poll held %v: %d %q", time.Since(held).Round(time.Millisecond), resp.StatusCode, body)
		if resp.StatusCode != 200 || time.Since(held) < 3*time.Second {
			t.Errorf("a long-poll held %v answered %d %q, want 200 after 3 s", time.Since(held), resp.StatusCode, body)
		}
	}

	timeout := time.After(window - time.Since(start))
	for range 2 {
		select {
		case c := <-cuts:
			t.Logf("the %s connection that never reads was closed %v after it started writing (%v)", c.who, c.at.Round(time.Millisecond), c.err)
			if c.at > 10*time.Second {
				t.Errorf("the %s connection that never reads was closed after %v, want within 10 s", c.who, c.at)
			}
			var ne net.Error
			if errors.As(c.err, &ne) && ne.Timeout() {
				t.Errorf("the %s connection: the client's own write timed out: %v", c.who, c.err)
			}
		case <-timeout:
			t.Fatalf("a connection that never reads is still open %v after it started writing", window)
		}
	}
}

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forewarn/forewarn/admin"
)

// TestConnectionFlood: for 3 s, connections that stall their body,
// stall their headers or send nothing pour in from 50 addresses of no VM
// and from one VM of the fleet, 3,000 of them open at a time. Meanwhile
// two other VMs poll, a GCE VM holds its --max-long-polls long-polls and
// polls besides, and the operator checks /healthz, each on a new
// connection every 250 ms. Every one of those requests must succeed
// within a second, the held long-polls must be woken by an event the
// operator raises at the end, the server must close every flood
// connection within its deadlines, its goroutines stay within the caps,
// refusals are logged in a few summary lines, and goroutines and heap
// return to their baseline afterwards.
func TestConnectionFlood(t *testing.T) {
	const (
		attackFor  = 3 * time.Second
		openAtOnce = 3000 // flood connections open at once, client side
		strangers  = 50
		longPolls  = 4 // --max-long-polls, so the per-source cap is 20
		slowest    = time.Second
	)
	if limit, err := hardFileLimit(); err == nil && limit < openAtOnce+1000 {
		t.Skipf("needs %d open files; the limit is %d (raise the hard limit, ulimit -Hn)", openAtOnce+1000, limit)
	}
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	os.WriteFile(fleet, []byte(`vms:
  - {name: a1, ip: 127.0.4.1}
  - {name: a2, ip: 127.0.4.2}
  - {name: flooder, ip: 127.0.4.9}
  - {name: g1, ip: 127.0.4.11, provider: gce}
`), 0o600)
	cfg := defaultServeConfig()
	cfg.MetadataAddr, cfg.AdminAddr, cfg.DataDir, cfg.FleetFile, cfg.AllowShortNotice = "127.0.0.1:0", "127.0.0.1:0", filepath.Join(dir, "data"), fleet, true
	cfg.MaxLongPolls = longPolls
	cfg.MaxStrangerConns = 64
	cfg.HeaderTimeout, cfg.BodyTimeout, cfg.IdleTimeout = time.Second, time.Second, time.Second
	// What the metadata API's connections can reach: 4 VMs × 20 (a VM may
	// hold 16 connections besides its long-polls) + 64 strangers; its
	// total, derived from the limit on open files, is larger.
	mdTotal, admTotal := 4*(longPolls+16)+64, cfg.AdminMaxConns

	var logs lockedBuffer
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	pr, pw := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, cfg, slog.New(slog.NewTextHandler(&logs, nil)), pw) }()
	sc := bufio.NewScanner(pr)
	if !sc.Scan() {
		t.Fatalf("Serve: %v\n%s", <-served, logs.String())
	}
	md := strings.TrimPrefix(sc.Text(), "metadata API listening on ")
	sc.Scan()
	adm := strings.TrimPrefix(sc.Text(), "operator API listening on ")
	go io.Copy(io.Discard, pr)
	baseG, baseHeap := settled()
	baseRSS := rss()

	// The GCE VM holds its long-polls all along.
	get := func(ip, url string, header ...string) (int, string, error) {
		req, _ := http.NewRequest("GET", url, nil)
		for i := 0; i < len(header); i += 2 {
			if header[i] != "" {
				req.Header.Set(header[i], header[i+1])
			}
		}
		resp, err := vmClient(ip).Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("ETag") + " " + string(b), nil
	}
	maintenance := "http://" + md + "/computeMetadata/v1/instance/maintenance-event"
	code, etag, err := get("127.0.4.11", maintenance, "Metadata-Flavor", "Google")
	if err != nil || code != 200 {
		t.Fatalf("maintenance-event: %d %v", code, err)
	}
	etag, _, _ = strings.Cut(etag, " ")
	type answer struct {
		code int
		body string
		err  error
	}
	woken := make(chan answer, longPolls)
	var pollers sync.WaitGroup
	for range longPolls {
		pollers.Go(func() {
			c := vmClient("127.0.4.11")
			c.Timeout = 0
			req, _ := http.NewRequest("GET", maintenance+"?wait_for_change=true&last_etag="+etag, nil)
			req.Header.Set("Metadata-Flavor", "Google")
			resp, err := c.Do(req)
			if err != nil {
				woken <- answer{err: err}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			woken <- answer{resp.StatusCode, string(b), nil}
		})
	}

	// The other callers: a request each every 250 ms (within the rate
	// limit), on a new connection.
	type sample struct {
		who     string
		code    int
		err     error
		latency time.Duration
	}
	var (
		mu      sync.Mutex
		samples []sample
	)
	load, endLoad := context.WithCancel(context.Background())
	var callers sync.WaitGroup
	for _, c := range []struct{ who, ip, url, k, v string }{
		{"a1", "127.0.4.1", "http://" + md + "/metadata/scheduledevents?api-version=2020-07-01", "Metadata", "true"},
		{"a2", "127.0.4.2", "http://" + md + "/metadata/scheduledevents?api-version=2020-07-01", "Metadata", "true"},
		{"g1", "127.0.4.11", maintenance, "Metadata-Flavor", "Google"},
		{"operator", "127.0.0.1", "http://" + adm + "/healthz", "", ""},
	} {
		callers.Go(func() {
			tick := time.NewTicker(250 * time.Millisecond)
			defer tick.Stop()
			for {
				start := time.Now()
				code, _, err := get(c.ip, c.url, c.k, c.v)
				mu.Lock()
				samples = append(samples, sample{c.who, code, err, time.Since(start)})
				mu.Unlock()
				select {
				case <-load.Done():
					return
				case <-tick.C:
				}
			}
		})
	}
	time.Sleep(time.Second) // the usual latency, before the flood
	mu.Lock()
	before := len(samples)
	mu.Unlock()

	// The flood: three kinds of connection, from strangers and from a VM.
	kinds := []string{
		"", // sends nothing
		"GET /metadata/scheduledevents?api-version=2020-07-01 HTTP/1.1\r\nHost: x\r\nMeta",
		"POST /metadata/scheduledevents?api-version=2020-07-01 HTTP/1.1\r\nHost: x\r\nMetadata: true\r\nContent-Length: 65536\r\n\r\n{",
	}
	var (
		open               = make([]net.Conn, 0, openAtOnce)
		next, dialled      int
		dialErrs, peakG    int
		attackEnd          = time.Now().Add(attackFor)
		dialers            = map[string]*net.Dialer{}
		flooderConnsOpened int
	)
	for i := range strangers {
		ip := fmt.Sprintf("127.0.5.%d", i+1)
		dialers[ip] = &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	}
	dialers["127.0.4.9"] = &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.4.9")}, Timeout: 5 * time.Second}
	for time.Now().Before(attackEnd) {
		// 2,000 connections a second, in bursts of 20.
		burstEnd := time.Now().Add(10 * time.Millisecond)
		for range 20 {
			i := dialled
			dialled++
			ip := fmt.Sprintf("127.0.5.%d", i%strangers+1)
			if i%3 == 0 {
				ip = "127.0.4.9"
				flooderConnsOpened++
			}
			c, err := dialers[ip].Dial("tcp", md)
			if err != nil {
				dialErrs++
				continue
			}
			if k := kinds[i/3%len(kinds)]; k != "" {
				c.SetWriteDeadline(time.Now().Add(time.Second))
				io.WriteString(c, k)
			}
			if len(open) < openAtOnce {
				open = append(open, c)
			} else {
				open[next].Close()
				open[next] = c
				next = (next + 1) % openAtOnce
			}
		}
		peakG = max(peakG, runtime.NumGoroutine())
		time.Sleep(time.Until(burstEnd))
	}
	attackStopped := time.Now()

	// The operator raises an event for the GCE VM, which wakes its
	// long-polls, held through the whole flood.
	ev, err := admin.NewClient("http://"+adm, nil).CreateEvent(context.Background(),
		admin.CreateRequest{Type: "MIGRATE_ON_HOST_MAINTENANCE", VMs: []string{"g1"}, Notice: "2s", Lasts: "1s"})
	if err != nil {
		t.Errorf("the operator API during the flood: %v", err)
	}
	for range longPolls {
		select {
		case a := <-woken:
			if a.err != nil || a.code != 200 || !strings.Contains(a.body, "MIGRATE_ON_HOST_MAINTENANCE") {
				t.Errorf("a long-poll held through the flood answered %d %q %v, want 200 MIGRATE_ON_HOST_MAINTENANCE", a.code, a.body, a.err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("a long-poll held through the flood was not woken by event %v", ev)
		}
	}
	pollers.Wait()
	endLoad()
	callers.Wait()

	// Every flood connection the server accepted is closed by now or
	// within its deadlines (1 s for headers or body, 0.5 s to close).
	closedBy := attackStopped.Add(cfg.HeaderTimeout + cfg.BodyTimeout + time.Second)
	outcomes := map[string]int{}
	stillOpen := 0
	for _, c := range open {
		c.SetReadDeadline(closedBy)
		b, err := io.ReadAll(c)
		var ne net.Error
		switch line, _, _ := strings.Cut(string(b), "\r\n"); {
		case errors.As(err, &ne) && ne.Timeout():
			stillOpen++
		case line != "":
			outcomes[line]++
		case err != nil:
			outcomes["reset"]++
		default:
			outcomes["closed without an answer"]++
		}
		c.Close()
	}

	// The other callers' requests.
	var during []time.Duration
	failed := 0
	for i, s := range samples {
		if s.err != nil || s.code != 200 {
			failed++
			t.Errorf("%s: %d %v during the flood", s.who, s.code, s.err)
		}
		if i >= before {
			during = append(during, s.latency)
		}
	}
	usual := make([]time.Duration, 0, before)
	for _, s := range samples[:before] {
		usual = append(usual, s.latency)
	}
	slices.Sort(usual)
	slices.Sort(during)
	pct := func(d []time.Duration, p float64) time.Duration {
		if len(d) == 0 {
			return 0
		}
		return d[int(float64(len(d)-1)*p)]
	}
	refusalLines := strings.Count(logs.String(), "refused connections over a cap")
	t.Logf("flood: %d connections dialled in %v (%d from the flooding VM, %d dial errors), at most %d open at once client side",
		dialled, attackFor, flooderConnsOpened, dialErrs, openAtOnce)
	t.Logf("the last %d flood connections: %v; still open %v after the flood: %d", len(open), outcomes, closedBy.Sub(attackStopped), stillOpen)
	t.Logf("other callers: %d requests before the flood p50 %v max %v; %d during it p50 %v p99 %v max %v; %d failed",
		len(usual), pct(usual, .5), pct(usual, 1), len(during), pct(during, .5), pct(during, .99), pct(during, 1), failed)
	t.Logf("goroutines: %d at start, peak %d during the flood (caps %d + %d connections)", baseG, peakG, mdTotal, admTotal)
	t.Logf("%d refusal log lines", refusalLines)
	if stillOpen > 0 {
		t.Errorf("%d flood connections still open %v after the flood: the server holds them", stillOpen, closedBy.Sub(attackStopped))
	}
	if len(during) < 30 {
		t.Errorf("only %d requests of the other callers during the flood", len(during))
	}
	if worst := pct(during, 1); worst > slowest {
		t.Errorf("the slowest request of another caller during the flood took %v, want at most %v", worst, slowest)
	}
	// Each server connection is a goroutine, two while a handler runs;
	// the callers' clients add a few.
	if limit := baseG + 2*(mdTotal+admTotal) + 50; peakG > limit {
		t.Errorf("%d goroutines during the flood, more than the caps allow (%d)", peakG, limit)
	}
	if refusalLines < 1 || refusalLines > 3 {
		t.Errorf("%d log lines about refused connections, want 1 to 3 summaries:\n%s", refusalLines, logs.String())
	}

	// Back to baseline.
	deadline := time.Now().Add(10 * time.Second)
	for {
		g, heap := settled()
		if g <= baseG+15 && heap <= baseHeap*2+8<<20 {
			t.Logf("goroutines %d → %d, heap %d KiB → %d KiB, RSS %d MiB → %d MiB", baseG, g, baseHeap>>10, heap>>10, baseRSS>>20, rss()>>20)
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("goroutines %d → %d, heap %d KiB → %d KiB: not back to baseline", baseG, g, baseHeap>>10, heap>>10)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// rss returns the resident memory of this process, or 0 where
// /proc/self/statm cannot tell.
func rss() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var size, resident int64
	fmt.Sscan(string(b), &size, &resident)
	return resident * int64(os.Getpagesize())
}

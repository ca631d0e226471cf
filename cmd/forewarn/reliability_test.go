package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/forewarn/forewarn/admin"
)

var soakDuration = flag.Duration("soak.duration", 2*time.Minute, "how long TestSoak runs")

// TestGracefulShutdown: on SIGTERM an in-flight request finishes, a held
// long-poll is released with 503 at once, the process exits 0 and the
// store reopens cleanly.
func TestGracefulShutdown(t *testing.T) {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	os.WriteFile(fleet, []byte("vms:\n  - {name: az, ip: 127.0.0.50}\n  - {name: g, ip: 127.0.0.51, provider: gce}\n"), 0o600)
	data := filepath.Join(dir, "data")
	cmd := exec.Command(binary, "serve", "--metadata-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
		"--data", data, "--fleet", fleet, "--first-call-delay", "2s")
	out, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(out)
	sc.Scan()
	md := strings.TrimPrefix(sc.Text(), "metadata API listening on ")
	go io.Copy(io.Discard, out)

	// A held long-poll.
	g := vmClient("127.0.0.51")
	g.Timeout = 0
	req, _ := http.NewRequest("GET", "http://"+md+"/computeMetadata/v1/instance/maintenance-event", nil)
	req.Header.Set("Metadata-Flavor", "Google")
	resp, err := g.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	etag := resp.Header.Get("ETag")
	type result struct {
		code int
		at   time.Time
	}
	held, inflight := make(chan result, 1), make(chan result, 1)
	go func() {
		req, _ := http.NewRequest("GET", "http://"+md+"/computeMetadata/v1/instance/maintenance-event?wait_for_change=true&last_etag="+etag, nil)
		req.Header.Set("Metadata-Flavor", "Google")
		resp, err := g.Do(req)
		if err != nil {
			held <- result{-1, time.Now()}
			return
		}
		resp.Body.Close()
		held <- result{resp.StatusCode, time.Now()}
	}()
	// An in-flight request: the Azure VM's first call is held 2 s.
	go func() {
		req, _ := http.NewRequest("GET", "http://"+md+"/metadata/scheduledevents?api-version=2020-07-01", nil)
		req.Header.Set("Metadata", "true")
		resp, err := vmClient("127.0.0.50").Do(req)
		if err != nil {
			inflight <- result{-1, time.Now()}
			return
		}
		resp.Body.Close()
		inflight <- result{resp.StatusCode, time.Now()}
	}()
	time.Sleep(500 * time.Millisecond)
	term := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	h := <-held
	if h.code != 503 || h.at.Sub(term) > time.Second {
		t.Errorf("held long-poll: %d after %v, want 503 at once", h.code, h.at.Sub(term))
	}
	f := <-inflight
	if f.code != 200 {
		t.Errorf("in-flight request: %d, want it to finish with 200", f.code)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "shutting down") {
		t.Errorf("no shutdown log: %s", stderr.String())
	}
	// The store was closed cleanly: it opens at once.
	s := startServer(t, data, fleet)
	s.stop(t)
}

// TestSoak runs the server in-process for -soak.duration: 500 Azure VMs
// poll once a second, 200 GCE VMs hold long-polls, and events churn. No
// request may fail but by the documented limits, and goroutines and heap
// return to their baseline afterwards.
func TestSoak(t *testing.T) {
	const azureVMs, gceVMs = 500, 200
	dir := t.TempDir()
	var fb strings.Builder
	fb.WriteString("vms:\n")
	ip := func(i int) string { return fmt.Sprintf("127.0.%d.%d", 10+i/250, 1+i%250) }
	for i := range azureVMs {
		fmt.Fprintf(&fb, "  - {name: a%d, ip: %s, availabilitySet: s%d}\n", i, ip(i), i/10)
	}
	for i := range gceVMs {
		fmt.Fprintf(&fb, "  - {name: g%d, ip: %s, provider: gce}\n", i, ip(azureVMs+i))
	}
	fleet := filepath.Join(dir, "fleet.yaml")
	os.WriteFile(fleet, []byte(fb.String()), 0o600)

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	pr, pw := io.Pipe()
	served := make(chan error, 1)
	cfg := defaultServeConfig()
	cfg.MetadataAddr, cfg.AdminAddr, cfg.DataDir, cfg.FleetFile, cfg.AllowShortNotice = "127.0.0.1:0", "127.0.0.1:0", filepath.Join(dir, "data"), fleet, true
	go func() { served <- Serve(ctx, cfg, slog.New(slog.DiscardHandler), pw) }()
	sc := bufio.NewScanner(pr)
	sc.Scan()
	md := strings.TrimPrefix(sc.Text(), "metadata API listening on ")
	sc.Scan()
	adm := strings.TrimPrefix(sc.Text(), "operator API listening on ")
	go io.Copy(io.Discard, pr)

	clients := map[string]*http.Client{}
	for i := range azureVMs + gceVMs {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip(i))}}
		clients[ip(i)] = &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 2}}
	}
	baseG, baseHeap := settled()

	var requests, failures atomic.Int64
	var failMu sync.Mutex
	failed := map[string]int{}
	fail := func(what string) {
		failures.Add(1)
		failMu.Lock()
		failed[what]++
		failMu.Unlock()
	}
	load, endLoad := context.WithTimeout(context.Background(), *soakDuration)
	defer endLoad()
	var wg sync.WaitGroup
	// Azure VMs: a poll a second, with If-None-Match; approve what they see now and then.
	for i := range azureVMs {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 7))
			time.Sleep(time.Duration(r.IntN(1000)) * time.Millisecond)
			hc, etag := clients[ip(i)], ""
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				req, _ := http.NewRequestWithContext(load, "GET", "http://"+md+"/metadata/scheduledevents?api-version=2020-07-01", nil)
				req.Header.Set("Metadata", "true")
				if etag != "" {
					req.Header.Set("If-None-Match", etag)
				}
				resp, err := hc.Do(req)
				if load.Err() != nil {
					return
				}
				requests.Add(1)
				if err != nil {
					fail("azure GET: " + err.Error())
				} else {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					switch resp.StatusCode {
					case 200:
						etag = resp.Header.Get("ETag")
						var d struct {
							Events []struct{ EventId, EventStatus string }
						}
						json.Unmarshal(b, &d)
						for _, ev := range d.Events {
							if ev.EventStatus == "Scheduled" && r.IntN(20) == 0 {
								req, _ := http.NewRequestWithContext(load, "POST", "http://"+md+"/metadata/scheduledevents?api-version=2020-07-01",
									strings.NewReader(`{"StartRequests":[{"EventId":"`+ev.EventId+`"}]}`))
								req.Header.Set("Metadata", "true")
								resp, err := hc.Do(req)
								if load.Err() != nil {
									return
								}
								requests.Add(1)
								if err != nil || resp.StatusCode != 200 {
									fail(fmt.Sprintf("azure POST: %v %v", err, resp))
								}
								if resp != nil {
									resp.Body.Close()
								}
							}
						}
					case 304:
					default:
						fail(fmt.Sprintf("azure GET status %d", resp.StatusCode))
					}
				}
				select {
				case <-load.Done():
					return
				case <-tick.C:
				}
			}
		})
	}
	// GCE VMs: one long-poll held at all times.
	for i := range gceVMs {
		wg.Go(func() {
			hc, etag := clients[ip(azureVMs+i)], "0"
			for load.Err() == nil {
				req, _ := http.NewRequestWithContext(load, "GET", "http://"+md+"/computeMetadata/v1/instance/maintenance-event?wait_for_change=true&last_etag="+etag, nil)
				req.Header.Set("Metadata-Flavor", "Google")
				resp, err := hc.Do(req)
				if load.Err() != nil {
					return
				}
				requests.Add(1)
				if err != nil || resp.StatusCode != 200 {
					fail(fmt.Sprintf("gce long-poll: %v %v", err, resp))
					time.Sleep(100 * time.Millisecond)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				etag = resp.Header.Get("ETag")
			}
		})
	}
	// Churn: the operator raises events all the while.
	cl := admin.NewClient("http://"+adm, nil)
	var churned atomic.Int64
	wg.Go(func() {
		r := rand.New(rand.NewPCG(1, 2))
		for load.Err() == nil {
			var req admin.CreateRequest
			if r.IntN(2) == 0 {
				req = admin.CreateRequest{Type: "Freeze", VMs: []string{fmt.Sprintf("a%d", r.IntN(azureVMs))}, Notice: "3s", Lasts: "2s", Source: "User"}
			} else {
				req = admin.CreateRequest{Type: "MIGRATE_ON_HOST_MAINTENANCE", VMs: []string{fmt.Sprintf("g%d", r.IntN(gceVMs))}, Notice: "2s", Lasts: "1s"}
			}
			if _, err := cl.CreateEvent(load, req); err == nil {
				churned.Add(1)
			} else if load.Err() == nil {
				fail("create: " + err.Error())
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	wg.Wait()
	t.Logf("%d requests, %d events raised, %d failures over %v", requests.Load(), churned.Load(), failures.Load(), *soakDuration)
	if failures.Load() > 0 {
		t.Errorf("failed requests: %v", failed)
	}
	if min := int64(*soakDuration/time.Second) * azureVMs / 2; requests.Load() < min {
		t.Errorf("only %d requests; the load did not run", requests.Load())
	}
	for _, c := range clients {
		c.CloseIdleConnections()
	}
	// Back to baseline: the server's goroutines and heap.
	deadline := time.Now().Add(30 * time.Second)
	for {
		g, heap := settled()
		if g <= baseG+10 && heap <= baseHeap*2+8<<20 {
			t.Logf("goroutines %d → %d, heap %d KiB → %d KiB", baseG, g, baseHeap>>10, heap>>10)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines %d → %d, heap %d KiB → %d KiB: not back to baseline", baseG, g, baseHeap>>10, heap>>10)
		}
		time.Sleep(200 * time.Millisecond)
	}
	stop()
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// settled collects garbage and returns the goroutines and live heap, for
// tests that check both return to their baseline.
func settled() (goroutines int, heap uint64) {
	for range 3 {
		runtime.GC()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return runtime.NumGoroutine(), ms.HeapAlloc
}

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The GCE flood's shape: flooding VMs, the connections each may open
// (the default --max-conns-per-source), the GETs pipelined in one write.
const (
	gceFlooders      = 8
	gceFloodConns    = 48
	gceFloodPipeline = 512
	gceMaintenance   = "/computeMetadata/v1/instance/maintenance-event"
)

// floodHelperEnv, set to the metadata API's address, makes the test
// binary the flooding VMs of TestGCEPipelineFlood (see TestMain) instead
// of running tests: the attack then runs in a process of its own, as it
// would on other machines, and the CPU it burns does not delay the
// polling VMs' goroutines in the test process.
const floodHelperEnv = "FOREWARN_TEST_GCE_FLOOD_ADDR"

func gceFlooderIP(i int) string { return fmt.Sprintf("127.0.6.%d", i+1) }

// gcePipeline returns gceFloodPipeline GETs of maintenance-event.
func gcePipeline() []byte {
	var b strings.Builder
	for range gceFloodPipeline {
		b.WriteString("GET " + gceMaintenance + " HTTP/1.1\r\nHost: metadata.google.internal\r\nMetadata-Flavor: Google\r\n\r\n")
	}
	return []byte(b.String())
}

// floodHelper is the flooding VMs: from each flooder's address, on every
// connection it may open, GETs pipelined and never read, each connection
// dialled again as soon as the server closes it. It stops when its
// standard input closes (or after a minute), prints the connections it
// dialled, and returns the exit code.
func floodHelper(addr string) int {
	pipeline := gcePipeline()
	var dials atomic.Int64
	for i := range gceFlooders {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(gceFlooderIP(i))}, Timeout: 5 * time.Second}
		for range gceFloodConns {
			go func() {
				for {
					c, err := d.Dial("tcp", addr)
					if err != nil {
						time.Sleep(10 * time.Millisecond)
						continue
					}
					dials.Add(1)
					for {
						if _, err := c.Write(pipeline); err != nil {
							break
						}
					}
					c.Close()
				}
			}()
		}
	}
	stdin := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(stdin) }()
	select {
	case <-stdin:
	case <-time.After(time.Minute):
	}
	fmt.Println(dials.Load())
	return 0
}

// TestGCEPipelineFlood: with the real binary and its default flags, 8
// GCE VMs each pipeline GETs of maintenance-event on as many connections
// as their address may open (48), never reading an answer and dialling
// again whenever the server closes one (in a process of their own).
// Meanwhile 16 other GCE VMs poll the key once a second on kept-alive
// connections. Each flooder is held to --gce-rate-limit: past its budget
// it gets 429 (Metadata-Flavor: Google, the connection closed) before
// anything is rendered, so the pollers' p99 stays under 100 ms (8 to
// 14 ms measured; 0.5 to 2.9 s before the limit) and every poll gets 200.
func TestGCEPipelineFlood(t *testing.T) {
	const (
		pollers   = 16
		attackFor = 8 * time.Second
		p99Bound  = 100 * time.Millisecond
	)
	if limit, err := hardFileLimit(); err == nil && limit < gceFlooders*gceFloodConns*2+1000 {
		t.Skipf("needs %d open files; the limit is %d", gceFlooders*gceFloodConns*2+1000, limit)
	}
	dir := t.TempDir()
	var fleet strings.Builder
	fleet.WriteString("vms:\n")
	pollerIP := func(i int) string { return fmt.Sprintf("127.0.6.%d", 100+i) }
	for i := range gceFlooders {
		fmt.Fprintf(&fleet, "  - {name: flood%d, ip: %s, provider: gce}\n", i, gceFlooderIP(i))
	}
	for i := range pollers {
		fmt.Fprintf(&fleet, "  - {name: poll%d, ip: %s, provider: gce}\n", i, pollerIP(i))
	}
	fleetFile := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleetFile, []byte(fleet.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, filepath.Join(dir, "data"), fleetFile)
	url := "http://" + s.metadata + gceMaintenance

	// The pollers: once a second each, on a kept-alive connection, as the
	// real client does.
	type sample struct {
		code    int
		err     error
		latency time.Duration
	}
	var (
		mu      sync.Mutex
		samples []sample
	)
	stop := make(chan struct{})
	var polling sync.WaitGroup
	for i := range pollers {
		polling.Go(func() {
			d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(pollerIP(i))}, Timeout: 5 * time.Second}
			c := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}, Timeout: 10 * time.Second}
			defer c.CloseIdleConnections()
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				req, _ := http.NewRequest("GET", url, nil)
				req.Header.Set("Metadata-Flavor", "Google")
				start := time.Now()
				resp, err := c.Do(req)
				code := 0
				if err == nil {
					code = resp.StatusCode
					_, err = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				mu.Lock()
				samples = append(samples, sample{code, err, time.Since(start)})
				mu.Unlock()
			}
		})
	}

	// The flood, from the test binary run again as the flooding VMs.
	flood := exec.Command(os.Args[0], "-test.run=^$")
	// On one core: were the flooders other machines, as VMs are, they
	// would leave the server's cores alone.
	flood.Env = append(os.Environ(), floodHelperEnv+"="+s.metadata, "GOMAXPROCS=1")
	in, err := flood.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var dialled strings.Builder
	flood.Stdout, flood.Stderr = &dialled, os.Stderr
	if err := flood.Start(); err != nil {
		t.Fatal(err)
	}
	defer flood.Process.Kill()
	serverCPU := processCPU(s.cmd.Process.Pid)
	time.Sleep(attackFor)
	serverCPU = processCPU(s.cmd.Process.Pid) - serverCPU
	in.Close()
	if err := flood.Wait(); err != nil {
		t.Fatalf("flooding VMs: %v", err)
	}
	close(stop)
	polling.Wait()

	mu.Lock()
	defer mu.Unlock()
	var lat []time.Duration
	for i, sm := range samples {
		if sm.err != nil || sm.code != 200 {
			t.Errorf("poll %d: %d %v, want 200", i, sm.code, sm.err)
		}
		lat = append(lat, sm.latency)
	}
	if len(lat) == 0 {
		t.Fatalf("no poll answered in %v", attackFor)
	}
	slices.Sort(lat)
	p99 := lat[(len(lat)*99+99)/100-1]
	t.Logf("%d polls during the flood: p50 %v, p99 %v, slowest %v; the flooders dialled %s connections and used %v of CPU, the server %v",
		len(lat), lat[len(lat)/2], p99, lat[len(lat)-1], strings.TrimSpace(dialled.String()),
		flood.ProcessState.UserTime()+flood.ProcessState.SystemTime(), serverCPU)
	if p99 > p99Bound {
		t.Errorf("pollers' p99 during the flood: %v, want under %v", p99, p99Bound)
	}
	// Once a second each: a poll that took long delayed the next.
	if len(lat) < pollers*int(attackFor/time.Second)*3/4 {
		t.Errorf("only %d polls made in %v, want about %d", len(lat), attackFor, pollers*int(attackFor/time.Second))
	}

	// A flooder past its budget: its pipelined GETs get at most a
	// second's budget of answers, then 429 with Metadata-Flavor, then the
	// end of the connection. The server counted the refusals.
	c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(gceFlooderIP(0))}}).Dial("tcp", s.metadata)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	go c.Write(gcePipeline())
	br := bufio.NewReader(c)
	var codes []int
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			break
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		if resp.StatusCode == 429 && (resp.Header.Get("Metadata-Flavor") != "Google" || !resp.Close) {
			t.Errorf("429: Metadata-Flavor %q, closes %v; want Google and closed", resp.Header.Get("Metadata-Flavor"), resp.Close)
		}
	}
	if n := len(codes); n == 0 || codes[n-1] != 429 || n > 51 {
		t.Errorf("a flooder's %d pipelined GETs: %d answered, the last %v; want at most 51, the last 429, then the end of the connection",
			gceFloodPipeline, n, codes[max(n-3, 0):])
	}
	resp, err := http.Get("http://" + s.adm + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`(?m)^forewarn_metadata_throttled_total\{api="gce"\} (\d+)$`).FindSubmatch(body)
	if n := 0; m == nil {
		t.Errorf("no GCE throttled count in /metrics")
	} else if n, _ = strconv.Atoi(string(m[1])); n == 0 {
		t.Errorf(`forewarn_metadata_throttled_total{api="gce"} is 0`)
	}
}

// processCPU returns the CPU time process pid has used, from /proc; 0
// where there is none.
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses.
	_, rest, _ := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.Atoi(f[11])
	stime, _ := strconv.Atoi(f[12])
	return time.Duration(utime+stime) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

// TestGCERateLimitFlag: the real binary holds a GCE VM to
// --gce-rate-limit (2 a second: the third request at once gets 429 with
// Metadata-Flavor and a closed connection, and a throttled finding in
// the client-behaviour report), and --gce-rate-limit 0 turns throttling
// off.
func TestGCERateLimitFlag(t *testing.T) {
	dir := t.TempDir()
	fleetFile := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleetFile, []byte("vms:\n  - {name: g, ip: 127.0.6.200, provider: gce}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		rate      string
		codes     []int
		throttled int
	}{
		{"2", []int{200, 200, 429}, 1},
		{"0", []int{200, 200, 200, 200, 200, 200, 200, 200, 200, 200}, 0},
	} {
		s := startServerArgs(t, filepath.Join(dir, "data"+c.rate), fleetFile, "--gce-rate-limit", c.rate)
		var got []int
		for range c.codes {
			req, _ := http.NewRequest("GET", "http://"+s.metadata+gceMaintenance, nil)
			req.Header.Set("Metadata-Flavor", "Google")
			resp, err := vmClient("127.0.6.200").Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			got = append(got, resp.StatusCode)
			if resp.StatusCode == 429 && (resp.Header.Get("Metadata-Flavor") != "Google" || !resp.Close) {
				t.Errorf("--gce-rate-limit %s: 429 with Metadata-Flavor %q, closed %v", c.rate, resp.Header.Get("Metadata-Flavor"), resp.Close)
			}
		}
		if !slices.Equal(got, c.codes) {
			t.Errorf("--gce-rate-limit %s: %v, want %v", c.rate, got, c.codes)
		}
		// The client-behaviour report counts the VM's 429s.
		var rep struct {
			VMs []struct {
				Name     string
				Findings []struct {
					Kind  string
					Count int
				}
			}
		}
		if err := json.Unmarshal([]byte(s.mustCLI(t, "report", "--vm", "g", "--json")), &rep); err != nil || len(rep.VMs) != 1 {
			t.Fatalf("report: %v %+v", err, rep)
		}
		throttled := 0
		for _, f := range rep.VMs[0].Findings {
			if f.Kind == "throttled" {
				throttled = f.Count
			}
		}
		if throttled != c.throttled {
			t.Errorf("--gce-rate-limit %s: the report's throttled finding counts %d, want %d", c.rate, throttled, c.throttled)
		}
		s.stop(t)
	}
}

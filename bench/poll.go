package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"
)

// PollConfig configures a polling-load run.
type PollConfig struct {
	// API is "azure" (scheduledevents, with an event present) or "gce"
	// (maintenance-event).
	API string `json:"api"`
	// VMs is the number of simulated VMs, one keep-alive connection each,
	// from consecutive addresses starting at AddrBase: the -c of wrk.
	VMs      int           `json:"vms"`
	AddrBase netip.Addr    `json:"addrBase"`
	Duration time.Duration `json:"duration"`
	Warmup   time.Duration `json:"warmup"`
	// Rounds alternates Forewarn and the ceiling this many times.
	Rounds int `json:"rounds"`
	// RateLimit is passed to the Forewarn server as --rate-limit; 0 is off.
	RateLimit float64 `json:"rateLimit"`
	// Ceiling also measures a minimal net/http server with the same bytes.
	Ceiling bool `json:"ceiling"`
	// Binary is the forewarn binary that runs the servers.
	Binary string `json:"-"`
	// Target, when set, is the host:port of a running Forewarn server
	// whose fleet has the VMs at AddrBase; then nothing is started.
	Target string `json:"target,omitempty"`
}

// Run is one server's measured result.
type Run struct {
	Server     string  `json:"server"`
	Requests   int     `json:"requests"`
	Errors     int     `json:"errors"`
	Throughput float64 `json:"throughputPerSecond"`
	Latency    Latency `json:"latency"`
	// ServerCPU is the server's CPU use in cores, and CPUPerRequest its
	// CPU time per request; zero for a Target not started here.
	ServerCPU     float64       `json:"serverCPUCores"`
	CPUPerRequest time.Duration `json:"serverCPUPerRequest"`
}

// PollReport is the result of a polling-load run.
type PollReport struct {
	Config    PollConfig `json:"config"`
	BodyBytes int        `json:"bodyBytes"`
	Forewarn  Run        `json:"forewarn"`
	Ceiling   *Run       `json:"ceiling,omitempty"`
	// Ratio is Forewarn's throughput over the ceiling's.
	Ratio float64 `json:"ratio,omitempty"`
}

func (c *PollConfig) request() string {
	if c.API == "gce" {
		return "GET /computeMetadata/v1/instance/maintenance-event HTTP/1.1\r\nHost: metadata.google.internal\r\nMetadata-Flavor: Google\r\n\r\n"
	}
	return "GET /metadata/scheduledevents?api-version=2020-07-01 HTTP/1.1\r\nHost: 169.254.169.254\r\nMetadata: true\r\n\r\n"
}

// fleet returns the fleet file of cfg's VMs: Azure VMs in one
// availability set, so one event is in every VM's document, or GCE VMs.
func fleet(api string, addrs []netip.Addr) string {
	var b strings.Builder
	b.WriteString("vms:\n")
	for i, a := range addrs {
		if api == "gce" {
			fmt.Fprintf(&b, "  - {name: vm%d, ip: %s, provider: gce}\n", i, a)
		} else {
			fmt.Fprintf(&b, "  - {name: vm%d, ip: %s, availabilitySet: bench}\n", i, a)
		}
	}
	return b.String()
}

// createEvent raises an event through the operator API at admin.
func createEvent(ctx context.Context, admin, body string) error {
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+admin+"/v1/events", strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("create event: %s", resp.Status)
	}
	return nil
}

// Poll measures polling load on Forewarn and, when asked, on the ceiling
// server in the same run.
func Poll(ctx context.Context, cfg PollConfig) (*PollReport, error) {
	cfg.VMs = max(cfg.VMs, 1)
	cfg.Rounds = max(cfg.Rounds, 1)
	addrs := Addrs(cfg.AddrBase, cfg.VMs)
	rep := &PollReport{Config: cfg}
	target := cfg.Target
	var fw *child
	if target == "" {
		var err error
		fw, err = startForewarn(cfg.Binary, fleet(cfg.API, addrs), "--rate-limit", fmt.Sprint(cfg.RateLimit))
		if err != nil {
			return nil, err
		}
		defer fw.stop()
		target = fw.metadata
		if cfg.API != "gce" {
			if err := createEvent(ctx, fw.admin, `{"type":"Reboot","vms":["vm0"],"notice":"24h","source":"User","description":"Forewarn benchmark"}`); err != nil {
				return nil, err
			}
		}
	}
	req := []byte(cfg.request())
	probe, err := dial(ctx, addrs[0], target, req)
	if err != nil {
		return nil, err
	}
	status, ctype, body, err := probe.do("Content-Type")
	probe.c.Close()
	if err != nil || status != 200 {
		return nil, fmt.Errorf("probe of %s: status %d, %v", target, status, err)
	}
	rep.BodyBytes = len(body)

	var ceil *child
	if cfg.Ceiling {
		if ceil, err = startCeiling(cfg.Binary, body, ctype); err != nil {
			return nil, err
		}
		defer ceil.stop()
		rep.Ceiling = &Run{Server: "ceiling (net/http, same bytes)"}
	}
	rep.Forewarn.Server = "forewarn " + cfg.API
	var fwLat, ceilLat []time.Duration
	var fwTime, ceilTime, fwCPU, ceilCPU time.Duration
	for round := range cfg.Rounds {
		lat, bad, cpu, elapsed, err := measure(ctx, cfg, addrs, target, req, fw, round == 0)
		if err != nil {
			return nil, err
		}
		fwLat, fwTime, fwCPU = append(fwLat, lat...), fwTime+elapsed, fwCPU+cpu
		rep.Forewarn.Errors += bad
		if ceil != nil {
			lat, bad, cpu, elapsed, err := measure(ctx, cfg, addrs, ceil.metadata, req, ceil, round == 0)
			if err != nil {
				return nil, err
			}
			ceilLat, ceilTime, ceilCPU = append(ceilLat, lat...), ceilTime+elapsed, ceilCPU+cpu
			rep.Ceiling.Errors += bad
		}
	}
	finish(&rep.Forewarn, fwLat, fwTime, fwCPU)
	if ceil != nil {
		finish(rep.Ceiling, ceilLat, ceilTime, ceilCPU)
		rep.Ratio = rep.Forewarn.Throughput / rep.Ceiling.Throughput
	}
	return rep, nil
}

func finish(r *Run, lat []time.Duration, elapsed, cpu time.Duration) {
	r.Requests = len(lat)
	r.Throughput = float64(len(lat)) / elapsed.Seconds()
	r.Latency = summarize(lat)
	if cpu > 0 {
		r.ServerCPU = cpu.Seconds() / elapsed.Seconds()
		r.CPUPerRequest = cpu / time.Duration(max(len(lat), 1))
	}
}

// measure opens one connection per VM to target, warms up, and runs the
// closed loop, returning latencies, non-200 answers, the server's CPU
// time (when it is a child) and the elapsed time.
func measure(ctx context.Context, cfg PollConfig, addrs []netip.Addr, target string, req []byte, server *child, warm bool) ([]time.Duration, int, time.Duration, time.Duration, error) {
	conns := make([]*conn, 0, len(addrs))
	defer func() {
		for _, c := range conns {
			c.c.Close()
		}
	}()
	for _, a := range addrs {
		c, err := dial(ctx, a, target, req)
		if err != nil {
			return nil, 0, 0, 0, err
		}
		conns = append(conns, c)
	}
	ok := func(s int) bool { return s == 200 }
	if warm && cfg.Warmup > 0 {
		if _, _, err := closedLoop(ctx, conns, cfg.Warmup, ok); err != nil {
			return nil, 0, 0, 0, err
		}
	}
	var cpu0 time.Duration
	if server != nil {
		cpu0, _ = server.cpu()
	}
	start := time.Now()
	lat, bad, err := closedLoop(ctx, conns, cfg.Duration/time.Duration(cfg.Rounds), ok)
	elapsed := time.Since(start)
	if err != nil {
		return nil, 0, 0, 0, err
	}
	var cpu time.Duration
	if server != nil {
		cpu1, _ := server.cpu()
		cpu = cpu1 - cpu0
	}
	return lat, bad, cpu, elapsed, nil
}

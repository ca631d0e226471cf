package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// PollConfig configures a polling-load run.
type PollConfig struct {
	// API is "azure" (scheduledevents, with an event present), "gce"
	// (maintenance-event) or "aws" (events/maintenance/scheduled, with an
	// event present, each VM sending its IMDSv2 token on every GET).
	API string `json:"api"`
	// VMs is the number of simulated VMs, one keep-alive connection each,
	// from consecutive addresses starting at AddrBase: the -c of wrk.
	VMs      int           `json:"vms"`
	AddrBase netip.Addr    `json:"addrBase"`
	Duration time.Duration `json:"duration"`
	Warmup   time.Duration `json:"warmup"`
	// Rounds alternates Forewarn and the ceiling this many times.
	Rounds int `json:"rounds"`
	// RateLimit is passed to the Forewarn server as --rate-limit,
	// --aws-rate-limit and --gce-rate-limit; 0 is off.
	RateLimit float64 `json:"rateLimit"`
	// Ceiling also measures a minimal net/http server with the same bytes:
	// the body and headers of Forewarn's answer to the first VM.
	Ceiling bool `json:"ceiling"`
	// Binary is the forewarn binary that runs the servers.
	Binary string `json:"-"`
	// Target, when set, is the host:port of a running Forewarn server
	// whose fleet has the VMs at AddrBase; then nothing is started.
	Target string `json:"target,omitempty"`
	// CPUProfile, when set, is a file to write a CPU profile of the
	// Forewarn server to, started as the second measured round begins
	// (the first, with one round) and lasting that round's length in
	// whole seconds, at least one. The profiler's own cost is in the
	// server CPU measured. Not with Target: the server is not a child.
	CPUProfile string `json:"-"`
}

// CPUTarget is the least ratio of the ceiling's CPU per request to
// Forewarn's that the GET path is held to.
const CPUTarget = 0.9

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
	// Headers is Forewarn's answer's headers but Date and Content-Length,
	// a "Name: value" line each: the ceiling sends the same ones.
	Headers  string `json:"headers"`
	Forewarn Run    `json:"forewarn"`
	Ceiling  *Run   `json:"ceiling,omitempty"`
	// Ratio is Forewarn's throughput over the ceiling's.
	Ratio float64 `json:"ratio,omitempty"`
	// CPURatio is the ceiling's server CPU per request over Forewarn's
	// (1 is the floor's cost; less is dearer), and CPUMet whether it is
	// at least CPUTarget; zero when either was not measured.
	CPURatio float64 `json:"cpuRatio,omitempty"`
	CPUMet   bool    `json:"cpuMet"`
}

// request returns one VM's poll request; token is its IMDSv2 session
// token (aws only; "" sends none).
func (c *PollConfig) request(token string) string {
	switch c.API {
	case "gce":
		return "GET /computeMetadata/v1/instance/maintenance-event HTTP/1.1\r\nHost: metadata.google.internal\r\nMetadata-Flavor: Google\r\n\r\n"
	case "aws":
		if token == "" {
			return "GET /latest/meta-data/events/maintenance/scheduled HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n"
		}
		return "GET /latest/meta-data/events/maintenance/scheduled HTTP/1.1\r\nHost: 169.254.169.254\r\nX-aws-ec2-metadata-token: " + token + "\r\n\r\n"
	}
	return "GET /metadata/scheduledevents?api-version=2020-07-01 HTTP/1.1\r\nHost: 169.254.169.254\r\nMetadata: true\r\n\r\n"
}

// tokenRequest is the IMDSv2 session token PUT, for six hours.
const tokenRequest = "PUT /latest/api/token HTTP/1.1\r\nHost: 169.254.169.254\r\nX-aws-ec2-metadata-token-ttl-seconds: 21600\r\nContent-Length: 0\r\n\r\n"

// fleet returns the fleet file of cfg's VMs: Azure VMs in one
// availability set, so one event is in every VM's document, GCE VMs, or
// EC2 VMs that require IMDSv2 tokens.
func fleet(api string, addrs []netip.Addr) string {
	var b strings.Builder
	b.WriteString("vms:\n")
	for i, a := range addrs {
		switch api {
		case "gce":
			fmt.Fprintf(&b, "  - {name: vm%d, ip: %s, provider: gce}\n", i, a)
		case "aws":
			fmt.Fprintf(&b, "  - {name: vm%d, ip: %s, provider: aws, httpTokens: required}\n", i, a)
		default:
			fmt.Fprintf(&b, "  - {name: vm%d, ip: %s, availabilitySet: bench}\n", i, a)
		}
	}
	return b.String()
}

// wideEvent is the operator request of one event naming every VM of a
// fleet of api: an Azure Freeze (one event for the fleet's one
// availability set), a GCE live migration or an EC2 system-maintenance
// (an event per VM).
func wideEvent(api string, vms int) string {
	names := make([]string, vms)
	for i := range names {
		names[i] = fmt.Sprintf("vm%d", i)
	}
	typ := map[string]string{"aws": "system-maintenance", "gce": "MIGRATE_ON_HOST_MAINTENANCE"}[api]
	b, _ := json.Marshal(map[string]any{"type": cmp.Or(typ, "Freeze"), "vms": names, "notice": "24h", "description": "Forewarn benchmark"})
	return string(b)
}

// requests returns each VM's poll request. For aws, each VM first PUTs
// for its IMDSv2 session token, from its own address, at target; its
// request then carries that token, which the server verifies on every
// GET. The ceiling gets the same bytes and ignores the token.
func requests(ctx context.Context, cfg PollConfig, addrs []netip.Addr, target string) ([][]byte, error) {
	if cfg.API != "aws" {
		return slices.Repeat([][]byte{[]byte(cfg.request(""))}, len(addrs)), nil
	}
	reqs := make([][]byte, len(addrs))
	for i, a := range addrs {
		c, err := dial(ctx, a, target, []byte(tokenRequest))
		if err != nil {
			return nil, err
		}
		status, _, tok, err := c.do("Content-Type")
		c.c.Close()
		if err != nil || status != http.StatusOK || len(tok) == 0 {
			return nil, fmt.Errorf("token PUT from %s: status %d, %v", a, status, err)
		}
		reqs[i] = []byte(cfg.request(string(tok)))
	}
	return reqs, nil
}

// createEvent raises an event through the operator API at admin.
func createEvent(ctx context.Context, admin, body string) error {
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+admin+"/v1/events", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
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
	if cfg.CPUProfile != "" && cfg.Target != "" {
		return nil, errors.New("a CPU profile is taken of a server the harness starts, not of a --target")
	}
	addrs := Addrs(cfg.AddrBase, cfg.VMs)
	rep := &PollReport{Config: cfg}
	target := cfg.Target
	var fw *child
	if target == "" {
		var err error
		fw, err = startForewarn(cfg.Binary, fleet(cfg.API, addrs), "--rate-limit", fmt.Sprint(cfg.RateLimit),
			"--aws-rate-limit", fmt.Sprint(cfg.RateLimit), "--gce-rate-limit", fmt.Sprint(cfg.RateLimit))
		if err != nil {
			return nil, err
		}
		defer fw.stop()
		target = fw.metadata
		switch cfg.API {
		case "gce":
		case "aws":
			// Each VM's scheduled key lists its own EC2 event.
			if err := createEvent(ctx, fw.admin, wideEvent("aws", cfg.VMs)); err != nil {
				return nil, err
			}
			// The fleet requires tokens: a GET without one is refused.
			if status, err := probe(ctx, addrs[0], target, cfg.request("")); err != nil || status != http.StatusUnauthorized {
				return nil, fmt.Errorf("probe of %s without a token: status %d (want 401), %v", target, status, err)
			}
		default:
			if err := createEvent(ctx, fw.admin, `{"type":"Reboot","vms":["vm0"],"notice":"24h","source":"User","description":"Forewarn benchmark"}`); err != nil {
				return nil, err
			}
		}
	}
	reqs, err := requests(ctx, cfg, addrs, target)
	if err != nil {
		return nil, err
	}
	first, err := dial(ctx, addrs[0], target, reqs[0])
	if err != nil {
		return nil, err
	}
	status, headers, body, err := first.do(AllHeaders)
	first.c.Close()
	if err != nil || status != 200 {
		return nil, fmt.Errorf("probe of %s: status %d, %v", target, status, err)
	}
	if fw != nil && cfg.API == "aws" && !strings.Contains(string(body), `"system-maintenance"`) {
		return nil, fmt.Errorf("probe of %s: the event is not listed: %s", target, body)
	}
	rep.BodyBytes, rep.Headers = len(body), headers

	var ceil *child
	if cfg.Ceiling {
		if ceil, err = startCeiling(cfg.Binary, body, headers); err != nil {
			return nil, err
		}
		defer ceil.stop()
		// Same bytes: the ceiling's answer has Forewarn's headers.
		c, err := dial(ctx, addrs[0], ceil.metadata, reqs[0])
		if err != nil {
			return nil, err
		}
		_, got, cbody, err := c.do(AllHeaders)
		c.c.Close()
		if err != nil || got != headers || !bytes.Equal(cbody, body) {
			return nil, fmt.Errorf("the ceiling answers %q and %q, not Forewarn's %q and %q (%v)", got, cbody, headers, body, err)
		}
		rep.Ceiling = &Run{Server: "ceiling (net/http, same bytes)"}
	}
	rep.Forewarn.Server = "forewarn " + cfg.API
	var fwLat, ceilLat []time.Duration
	var fwTime, ceilTime, fwCPU, ceilCPU time.Duration
	for round := range cfg.Rounds {
		wait := func() error { return nil }
		// The first round warms up first: the profile takes the second,
		// when there is one.
		if round == min(1, cfg.Rounds-1) && fw != nil && cfg.CPUProfile != "" {
			d := cfg.Duration / time.Duration(cfg.Rounds)
			if wait, err = cpuProfile(ctx, &http.Client{}, fw.admin, d, time.Minute, cfg.CPUProfile, "the Forewarn server"); err != nil {
				return nil, err
			}
		}
		lat, bad, cpu, elapsed, err := measure(ctx, cfg, addrs, target, reqs, fw, round == 0)
		if err != nil {
			return nil, err
		}
		if err := wait(); err != nil {
			return nil, err
		}
		fwLat, fwTime, fwCPU = append(fwLat, lat...), fwTime+elapsed, fwCPU+cpu
		rep.Forewarn.Errors += bad
		if ceil != nil {
			lat, bad, cpu, elapsed, err := measure(ctx, cfg, addrs, ceil.metadata, reqs, ceil, round == 0)
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
		if rep.Forewarn.CPUPerRequest > 0 && rep.Ceiling.CPUPerRequest > 0 {
			rep.CPURatio = float64(rep.Ceiling.CPUPerRequest) / float64(rep.Forewarn.CPUPerRequest)
			rep.CPUMet = rep.CPURatio >= CPUTarget
		}
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

// probe sends req once from addr to target and returns the status.
func probe(ctx context.Context, addr netip.Addr, target, req string) (int, error) {
	c, err := dial(ctx, addr, target, []byte(req))
	if err != nil {
		return 0, err
	}
	defer c.c.Close()
	status, _, _, err := c.do("")
	return status, err
}

// measure opens one connection per VM to target, warms up, and runs the
// closed loop, each VM sending its request of reqs, returning latencies,
// non-200 answers, the server's CPU time (when it is a child) and the
// elapsed time.
func measure(ctx context.Context, cfg PollConfig, addrs []netip.Addr, target string, reqs [][]byte, server *child, warm bool) ([]time.Duration, int, time.Duration, time.Duration, error) {
	conns := make([]*conn, 0, len(addrs))
	defer func() {
		for _, c := range conns {
			c.c.Close()
		}
	}()
	for i, a := range addrs {
		c, err := dial(ctx, a, target, reqs[i])
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

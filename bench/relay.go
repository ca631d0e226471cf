package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/forewarn/forewarn/internal/testpki"
	"github.com/forewarn/forewarn/relay"
)

// The relay's targets, which RelayReport judges.
const (
	// RelayAddedP50Target bounds the relay's added latency per GET at
	// p50, sequential requests: the relay's p50 less the direct one.
	RelayAddedP50Target = 100 * time.Microsecond
	// RelayUpstreamTarget bounds the connections one relay holding the
	// fan-out's long-polls opens to the server.
	RelayUpstreamTarget = 8
)

// relayNetwork is the network of the VMs reached through the relay.
const relayNetwork = "bench"

// RelayConfig configures a relay run.
type RelayConfig struct {
	// API is the API of the latency measurements: "azure"
	// (scheduledevents, with an event present), "gce"
	// (maintenance-event) or "aws" (events/maintenance/scheduled, with an
	// event present and an IMDSv2 token on every GET).
	API string `json:"api"`
	// Sizes are the fleet sizes: at each, a fresh server serves that many
	// GCE VMs on network "" (reached directly) and as many on network
	// "bench" (reached through the relay) at the same addresses,
	// consecutive from AddrBase, beside the Conns latency VMs of API on
	// each network.
	Sizes    []int      `json:"sizes"`
	AddrBase netip.Addr `json:"addrBase"`
	// Requests is the number of sequential requests per path, from one
	// keep-alive connection, split over the rounds.
	Requests int `json:"requests"`
	// Conns is the number of VMs, one keep-alive connection each, of the
	// concurrent measurement (the -c of wrk), which runs Duration per
	// path, split over the rounds (0: skip it).
	Conns    int           `json:"conns"`
	Duration time.Duration `json:"duration"`
	// Warmup is the unmeasured time of each path before its first round.
	Warmup time.Duration `json:"warmup"`
	// Rounds alternates the direct path and the relay this many times.
	Rounds int `json:"rounds"`
	// Waiters caps the fan-out's long-polls: at each size N, min(N,
	// Waiters) GCE VMs each hold one, directly and then through the
	// relay (0: no fan-out).
	Waiters int `json:"waiters"`
	// Settle is how long to wait, once the server holds every waiter,
	// before measuring memory and waking them.
	Settle time.Duration `json:"settle"`
	// Binary is the forewarn binary that runs the server and the relay.
	Binary string `json:"-"`
}

// RelayPath is one path's result under one load.
type RelayPath struct {
	Requests   int     `json:"requests"`
	Errors     int     `json:"errors"`
	Throughput float64 `json:"throughputPerSecond"`
	Latency    Latency `json:"latency"`
	// ServerCPU and RelayCPU are each process's CPU time (utime+stime)
	// per request, while only this path was measured.
	ServerCPU time.Duration `json:"serverCPUPerRequest"`
	RelayCPU  time.Duration `json:"relayCPUPerRequest"`
}

// RelayCompare is the same GET directly, through the relay, and
// through the reference hop ('forewarn bench-hop': a TCP proxy that
// copies bytes and nothing else), under one load. On the hop's path,
// RelayCPU is the hop's.
type RelayCompare struct {
	Direct RelayPath `json:"direct"`
	Relay  RelayPath `json:"relay"`
	Hop    RelayPath `json:"hop"`
	// AddedP50 and AddedP99 are the relay's percentile less the direct
	// one's; HopAddedP50 the hop's p50 less the direct one's, and
	// OverHop AddedP50 over HopAddedP50.
	AddedP50    time.Duration `json:"addedP50"`
	AddedP99    time.Duration `json:"addedP99"`
	HopAddedP50 time.Duration `json:"hopAddedP50"`
	OverHop     float64       `json:"overHop"`
	// CPURatio is the relay's CPU per request over the server's per
	// direct request.
	CPURatio float64 `json:"cpuRatio"`
}

// FanoutPath is one path's fan-out.
type FanoutPath struct {
	Delivered int `json:"delivered"`
	// Delay is from the operator's request that flips every waiter's
	// key to each waiter's answer.
	Delay       Latency       `json:"delay"`
	FlipRequest time.Duration `json:"flipRequest"`
	// ServerCPU and RelayCPU are each process's CPU time from that
	// request until every answer arrived.
	ServerCPU time.Duration `json:"serverCPU"`
	RelayCPU  time.Duration `json:"relayCPU"`
}

// RelayFanout is the fan-out directly and through the relay.
type RelayFanout struct {
	Waiters int        `json:"waiters"`
	Direct  FanoutPath `json:"direct"`
	Relay   FanoutPath `json:"relay"`
	// P50Ratio and P99Ratio are the relay's delay over the direct one's.
	P50Ratio float64 `json:"p50Ratio"`
	P99Ratio float64 `json:"p99Ratio"`
	// UpstreamConns is the relay's HTTP/2 connections to the server,
	// which carry the long-polls, while it holds every waiter
	// (forewarn_relay_upstream_connections{proto="h2"}); ShortConns its
	// short ones then, left by the latency runs; UpstreamDials the
	// connections of both kinds it opened since it started.
	UpstreamConns int `json:"upstreamConns"`
	ShortConns    int `json:"shortConns"`
	UpstreamDials int `json:"upstreamDials"`
	// RelayBytesPerWaiter is the relay's RSS growth from after each
	// waiter's connection and first GET to while all their long-polls
	// are held, per waiter (what a held poll costs beyond an open
	// connection); ServerBytes the server's, through the relay and
	// directly (the relayed path runs second, on heap the direct one
	// may have freed).
	RelayBytesPerWaiter        float64 `json:"relayBytesPerWaiter"`
	ServerBytesPerRelayWaiter  float64 `json:"serverBytesPerRelayWaiter"`
	ServerBytesPerDirectWaiter float64 `json:"serverBytesPerDirectWaiter"`
	// Met reports whether every waiter woke on both paths and the relay
	// carried them all on at most RelayUpstreamTarget HTTP/2 connections
	// to the server. The bench starts the relay with a cap four times
	// that, so the count is what the long-polls needed.
	Met bool `json:"met"`
}

// RelayRun is the result at one fleet size.
type RelayRun struct {
	// VMs is the GCE VMs on each network.
	VMs int `json:"vms"`
	// BodyBytes is the size of the latency GET's answer, the same on both
	// paths.
	BodyBytes  int           `json:"bodyBytes"`
	Sequential RelayCompare  `json:"sequential"`
	Concurrent *RelayCompare `json:"concurrent,omitempty"`
	Fanout     *RelayFanout  `json:"fanout,omitempty"`
	// LatencyMet reports whether the sequential AddedP50 is under
	// RelayAddedP50Target.
	LatencyMet bool `json:"latencyMet"`
}

// RelayReport is the result of a relay run.
type RelayReport struct {
	Config RelayConfig `json:"config"`
	Runs   []RelayRun  `json:"runs"`
}

// Relay measures 'forewarn relay' in front of 'forewarn serve', both
// child processes, at each fleet size: the same GET directly and through
// the relay, sequential and concurrent, with each process's CPU per
// request; and a GCE long-poll fan-out directly and through the relay,
// with the connections the relay opened to the server.
func Relay(ctx context.Context, cfg RelayConfig) (*RelayReport, error) {
	cfg.Requests = max(cfg.Requests, 1)
	cfg.Rounds = max(cfg.Rounds, 1)
	cfg.Conns = max(cfg.Conns, 0)
	if cfg.Settle == 0 {
		cfg.Settle = 2 * time.Second
	}
	if len(cfg.Sizes) == 0 {
		return nil, errors.New("no fleet sizes")
	}
	largest := 0
	for _, n := range cfg.Sizes {
		if n < 1 {
			return nil, fmt.Errorf("fleet size %d: want at least 1", n)
		}
		largest = max(largest, min(n, cfg.Waiters))
	}
	// The harness holds each waiter's connection, and the server and the
	// relay their ends of them; both inherit this process's limit, and
	// the server keeps a tenth of it for other files.
	if err := raiseFiles(uint64(largest+max(cfg.Conns, 1))*5/4 + 1024); err != nil {
		return nil, err
	}
	pki, err := newRelayPKI()
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(pki.dir)
	rep := &RelayReport{Config: cfg}
	for _, n := range cfg.Sizes {
		run, err := relayRun(ctx, cfg, pki, n)
		if err != nil {
			return nil, fmt.Errorf("%d VMs: %w", n, err)
		}
		rep.Runs = append(rep.Runs, *run)
	}
	return rep, nil
}

// raiseFiles raises this process's limit on open files to at least n,
// the hard limit too when it is lower (which takes privilege).
func raiseFiles(n uint64) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Cur >= n {
		return nil
	}
	want := syscall.Rlimit{Cur: max(n, lim.Cur), Max: max(n, lim.Max)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		return fmt.Errorf("the run needs %d open files; the limit is %d (hard %d) and raising it failed: %w (raise ulimit -Hn)", n, lim.Cur, lim.Max, err)
	}
	return nil
}

// relayPKI is the certificates of a run: the server's relay listener's
// and the relay's, both signed by one authority, and the relays file
// that lets the relay speak for network bench.
type relayPKI struct {
	dir           string
	server, relay testpki.Files
	relays        string
}

func newRelayPKI() (*relayPKI, error) {
	ca, err := testpki.NewCA("forewarn bench CA")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "forewarn-bench-pki")
	if err != nil {
		return nil, err
	}
	p := &relayPKI{dir: dir, relays: filepath.Join(dir, "relays.yaml")}
	if p.server, err = ca.Write(dir, "server", "forewarn", false, "127.0.0.1"); err == nil {
		if p.relay, err = ca.Write(dir, "relay", "bench-relay", true); err == nil {
			err = os.WriteFile(p.relays, []byte("bench-relay: ["+relayNetwork+"]\n"), 0o644)
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return p, nil
}

// relayFleet returns the fleet file of a run: n GCE VMs on each network
// at addrs (d0 and up directly, r0 and up on network bench), and the
// latency VMs of api at lat (ld0 and up, lr0 and up).
func relayFleet(api string, addrs, lat []netip.Addr) string {
	var b strings.Builder
	b.Grow(100 * 2 * (len(addrs) + len(lat)))
	b.WriteString("vms:\n")
	for i, a := range addrs {
		fmt.Fprintf(&b, "  - {name: d%d, ip: %s, provider: gce}\n  - {name: r%d, ip: %s, provider: gce, network: %s}\n", i, a, i, a, relayNetwork)
	}
	provider := ""
	switch api {
	case "gce":
		provider = ", provider: gce"
	case "aws":
		provider = ", provider: aws, httpTokens: required"
	}
	for i, a := range lat {
		fmt.Fprintf(&b, "  - {name: ld%d, ip: %s%s}\n  - {name: lr%d, ip: %s%s, network: %s}\n", i, a, provider, i, a, provider, relayNetwork)
	}
	return b.String()
}

// startRelay starts 'forewarn relay' with one listener, of network
// bench, in front of the server's relay listener at server.
func startRelay(binary string, p *relayPKI, server string, maxConns int) (*child, error) {
	c := &child{cmd: exec.Command(binary, "relay", "--listen", relayNetwork+"=127.0.0.1:0", "--server", "https://"+server,
		"--cert", p.relay.Cert, "--key", p.relay.Key, "--ca", p.relay.CA, "--metrics-addr", "127.0.0.1:0",
		"--max-conns", strconv.Itoa(maxConns),
		// Well above the target, so that the fan-out shows how many
		// connections the long-polls need, not the relay's cap.
		"--max-upstream-conns", strconv.Itoa(4*RelayUpstreamTarget))}
	err := c.start("forewarn relay", func(line string) bool {
		if a, ok := strings.CutPrefix(line, "relay listening on "); ok {
			c.metadata, _, _ = strings.Cut(a, " ")
		}
		if a, ok := strings.CutPrefix(line, "metrics listening on "); ok {
			c.metrics = a
		}
		return c.metadata != "" && c.metrics != ""
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// metric returns the sum of the samples of the metric name that
// GET /metrics at addr lists.
func metric(ctx context.Context, addr, name string) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s/metrics: %s", addr, resp.Status)
	}
	sum, found := 0.0, false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		// name may end in the first labels of the series to sum:
		// `m{a="x",`.
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{' && !strings.HasSuffix(name, ",")) {
			continue
		}
		v, err := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("metric line %q: %w", line, err)
		}
		sum, found = sum+v, true
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("GET %s/metrics lists no %s", addr, name)
	}
	return sum, nil
}

// relayRun measures one fleet size on a fresh server and relay.
func relayRun(ctx context.Context, cfg RelayConfig, p *relayPKI, n int) (*RelayRun, error) {
	waiters := min(n, cfg.Waiters)
	addrs := Addrs(cfg.AddrBase, n+max(cfg.Conns, 1))
	fleetAddrs, latAddrs := addrs[:n], addrs[n:]
	srv, err := startForewarn(cfg.Binary, relayFleet(cfg.API, fleetAddrs, latAddrs),
		"--store", "mem", "--max-long-polls", "0", "--rate-limit", "0", "--gce-rate-limit", "0", "--aws-rate-limit", "0",
		"--relay-addr", "127.0.0.1:0", "--relay-cert", p.server.Cert, "--relay-key", p.server.Key,
		"--relay-ca", p.server.CA, "--relays", p.relays)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	rel, err := startRelay(cfg.Binary, p, srv.relay, max(relay.DefaultMaxConns, waiters+len(latAddrs)+1024))
	if err != nil {
		return nil, err
	}
	defer rel.stop()
	hop, err := startHop(cfg.Binary, srv.metadata)
	if err != nil {
		return nil, err
	}
	defer hop.stop()
	// A large fleet keeps the server busy for seconds after it listens.
	if err := quiet(ctx, srv, 30*time.Second); err != nil {
		return nil, err
	}
	run := &RelayRun{VMs: n}

	// The latency VMs' event, so that each one's answer lists one.
	names := func(prefix string, k int) string {
		v := make([]string, k)
		for i := range v {
			v[i] = fmt.Sprintf("%s%d", prefix, i)
		}
		b, _ := json.Marshal(v)
		return string(b)
	}
	both := strings.TrimSuffix(names("ld", len(latAddrs)), "]") + "," + strings.TrimPrefix(names("lr", len(latAddrs)), "[")
	switch cfg.API {
	case "azure":
		err = createEvent(ctx, srv.admin, `{"type":"Reboot","notice":"24h","source":"User","description":"Forewarn benchmark","vms":`+both+`}`)
	case "aws":
		err = createEvent(ctx, srv.admin, `{"type":"system-maintenance","notice":"24h","description":"Forewarn benchmark","vms":`+both+`}`)
	}
	if err != nil {
		return nil, err
	}
	pc := PollConfig{API: cfg.API}
	directReqs, err := requests(ctx, pc, latAddrs, srv.metadata)
	if err != nil {
		return nil, fmt.Errorf("direct: %w", err)
	}
	relayReqs, err := requests(ctx, pc, latAddrs, rel.metadata)
	if err != nil {
		return nil, fmt.Errorf("through the relay: %w", err)
	}
	// Both paths answer a VM's document of the same size.
	var sizes [3]int
	for i, pr := range []struct {
		target string
		req    []byte
	}{{srv.metadata, directReqs[0]}, {rel.metadata, relayReqs[0]}, {hop.metadata, directReqs[0]}} {
		c, err := dial(ctx, latAddrs[0], pr.target, pr.req)
		if err != nil {
			return nil, err
		}
		status, _, body, err := c.do("Content-Type")
		c.c.Close()
		if err != nil || status != http.StatusOK {
			return nil, fmt.Errorf("probe of %s: status %d, %v", pr.target, status, err)
		}
		if cfg.API != "gce" && !strings.Contains(string(body), "Forewarn benchmark") {
			return nil, fmt.Errorf("probe of %s: the event is not listed: %s", pr.target, body)
		}
		sizes[i] = len(body)
	}
	if sizes[0] != sizes[1] || sizes[0] != sizes[2] {
		return nil, fmt.Errorf("the answer is %d bytes directly, %d through the relay and %d through the hop", sizes[0], sizes[1], sizes[2])
	}
	run.BodyBytes = sizes[0]

	lp := latencyPaths{cfg: cfg, srv: srv, rel: rel, hop: hop, addrs: latAddrs, direct: directReqs, relayed: relayReqs}
	seq, err := lp.compare(ctx, 1)
	if err != nil {
		return nil, fmt.Errorf("sequential: %w", err)
	}
	run.Sequential = *seq
	run.LatencyMet = seq.AddedP50 < RelayAddedP50Target
	if cfg.Conns > 0 && cfg.Duration > 0 {
		if run.Concurrent, err = lp.compare(ctx, cfg.Conns); err != nil {
			return nil, fmt.Errorf("concurrent: %w", err)
		}
	}
	if waiters > 0 {
		if run.Fanout, err = relayFanout(ctx, cfg, srv, rel, fleetAddrs[:waiters]); err != nil {
			return nil, fmt.Errorf("fan-out: %w", err)
		}
	}
	return run, nil
}

// quiet waits, for at most limit, until c spends under a tenth of a
// core over a quarter of a second.
func quiet(ctx context.Context, c *child, limit time.Duration) error {
	const window = 250 * time.Millisecond
	end := time.Now().Add(limit)
	for time.Now().Before(end) {
		c0, err := c.cpu()
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(window):
		}
		c1, err := c.cpu()
		if err != nil {
			return err
		}
		if c1-c0 < window/10 {
			return nil
		}
	}
	return nil // measure anyway; the numbers will show it
}

// latencyPaths measures the latency VMs' GET on each path: 0 direct, 1
// the relay, 2 the hop.
type latencyPaths struct {
	cfg             RelayConfig
	srv, rel, hop   *child
	addrs           []netip.Addr
	direct, relayed [][]byte // each VM's request on each path
}

// compare measures k VMs' GETs on each path, alternating in rounds
// after a warm-up. With k = 1 it sends Requests requests one after
// another per path; otherwise each VM sends its next as soon as its
// last is answered, for Duration per path.
func (lp *latencyPaths) compare(ctx context.Context, k int) (*RelayCompare, error) {
	cfg := lp.cfg
	var lat [3][]time.Duration
	var bad [3]int
	var elapsed, srvCPU, relCPU [3]time.Duration
	for round := range cfg.Rounds {
		for p := range 3 {
			// Connections of their own for each round: a server closes a
			// connection kept idle too long, or one that sends nothing in
			// its first seconds, while the other path is measured.
			conns, err := lp.open(ctx, p, k)
			if err != nil {
				return nil, err
			}
			l, b, sp, err := lp.measure(ctx, p, conns, k, round == 0)
			closeAll(conns)
			if err != nil {
				return nil, err
			}
			lat[p], bad[p] = append(lat[p], l...), bad[p]+b
			elapsed[p] += sp.elapsed
			srvCPU[p] += sp.server
			relCPU[p] += sp.relay
		}
	}
	var paths [3]RelayPath
	for p := range paths {
		r := &paths[p]
		r.Requests, r.Errors = len(lat[p]), bad[p]
		r.Throughput = float64(len(lat[p])) / elapsed[p].Seconds()
		r.Latency = summarize(lat[p])
		r.ServerCPU = srvCPU[p] / time.Duration(max(len(lat[p]), 1))
		r.RelayCPU = relCPU[p] / time.Duration(max(len(lat[p]), 1))
	}
	c := &RelayCompare{Direct: paths[0], Relay: paths[1], Hop: paths[2],
		AddedP50:    paths[1].Latency.P50 - paths[0].Latency.P50,
		AddedP99:    paths[1].Latency.P99 - paths[0].Latency.P99,
		HopAddedP50: paths[2].Latency.P50 - paths[0].Latency.P50}
	if c.HopAddedP50 > 0 {
		c.OverHop = float64(c.AddedP50) / float64(c.HopAddedP50)
	}
	if paths[0].ServerCPU > 0 {
		c.CPURatio = float64(paths[1].RelayCPU) / float64(paths[0].ServerCPU)
	}
	return c, nil
}

// open dials one connection from each of the first k latency VMs to
// path p.
func (lp *latencyPaths) open(ctx context.Context, p, k int) ([]*conn, error) {
	target, reqs := lp.srv.metadata, lp.direct
	switch p {
	case 1:
		target, reqs = lp.rel.metadata, lp.relayed
	case 2:
		target = lp.hop.metadata
	}
	conns := make([]*conn, 0, k)
	for i := range k {
		c, err := dial(ctx, lp.addrs[i], target, reqs[i])
		if err != nil {
			closeAll(conns)
			return nil, err
		}
		conns = append(conns, c)
	}
	return conns, nil
}

// spent is what one measurement took: time, and each process's CPU
// (relay: the relay's, or on the hop's path the hop's).
type spent struct{ elapsed, server, relay time.Duration }

// measure runs one round on conns, after the warm-up when warm is set:
// Requests/Rounds sequential requests on the one connection when k is
// 1, else Duration/Rounds of the closed loop.
func (lp *latencyPaths) measure(ctx context.Context, p int, conns []*conn, k int, warm bool) ([]time.Duration, int, spent, error) {
	via := lp.rel
	if p == 2 {
		via = lp.hop
	}
	cfg := lp.cfg
	ok := func(s int) bool { return s == http.StatusOK }
	if warm && cfg.Warmup > 0 {
		if _, _, err := closedLoop(ctx, conns, cfg.Warmup, ok); err != nil {
			return nil, 0, spent{}, err
		}
	}
	s0, err := lp.srv.cpu()
	if err != nil {
		return nil, 0, spent{}, err
	}
	r0, err := via.cpu()
	if err != nil {
		return nil, 0, spent{}, err
	}
	start := time.Now()
	var lat []time.Duration
	var bad int
	if k == 1 {
		lat, bad, err = sequence(ctx, conns[0], max(cfg.Requests/cfg.Rounds, 1))
	} else {
		lat, bad, err = closedLoop(ctx, conns, cfg.Duration/time.Duration(cfg.Rounds), ok)
	}
	sp := spent{elapsed: time.Since(start)}
	if err != nil {
		return nil, 0, spent{}, err
	}
	s1, _ := lp.srv.cpu()
	r1, _ := via.cpu()
	sp.server, sp.relay = s1-s0, r1-r0
	return lat, bad, sp, nil
}

func closeAll(conns []*conn) {
	for _, c := range conns {
		c.c.Close()
	}
}

// sequence sends c's request n times, each once the last is answered,
// and returns each latency and the count of answers not 200.
func sequence(ctx context.Context, c *conn, n int) ([]time.Duration, int, error) {
	lat := make([]time.Duration, 0, n)
	bad := 0
	for range n {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		t0 := time.Now()
		status, _, _, err := c.do("")
		if err != nil {
			return nil, 0, err
		}
		lat = append(lat, time.Since(t0))
		if status != http.StatusOK {
			bad++
		}
	}
	return lat, bad, nil
}

// relayFanout holds one long-poll per VM at addrs directly (VMs d0 and
// up), wakes them with one event, then does the same through the relay
// (VMs r0 and up).
func relayFanout(ctx context.Context, cfg RelayConfig, srv, rel *child, addrs []netip.Addr) (*RelayFanout, error) {
	f := &RelayFanout{Waiters: len(addrs)}
	direct, err := fanoutPath(ctx, cfg, srv, nil, srv.metadata, "d", addrs)
	if err != nil {
		return nil, fmt.Errorf("direct: %w", err)
	}
	relayed, err := fanoutPath(ctx, cfg, srv, rel, rel.metadata, "r", addrs)
	if err != nil {
		return nil, fmt.Errorf("through the relay: %w", err)
	}
	f.Direct, f.Relay = direct.FanoutPath, relayed.FanoutPath
	f.ServerBytesPerDirectWaiter = direct.serverBytes
	f.ServerBytesPerRelayWaiter, f.RelayBytesPerWaiter = relayed.serverBytes, relayed.relayBytes
	f.UpstreamConns, f.ShortConns = relayed.upstream, relayed.short
	dials, err := metric(ctx, rel.metrics, "forewarn_relay_upstream_dials_total")
	if err != nil {
		return nil, err
	}
	f.UpstreamDials = int(dials)
	if f.Direct.Delay.P50 > 0 && f.Direct.Delay.P99 > 0 {
		f.P50Ratio = float64(f.Relay.Delay.P50) / float64(f.Direct.Delay.P50)
		f.P99Ratio = float64(f.Relay.Delay.P99) / float64(f.Direct.Delay.P99)
	}
	f.Met = f.Direct.Delivered == f.Waiters && f.Relay.Delivered == f.Waiters &&
		f.UpstreamConns >= 1 && f.UpstreamConns <= RelayUpstreamTarget
	return f, nil
}

// fanoutResult is one path's fan-out and what was read while its
// waiters were held.
type fanoutResult struct {
	FanoutPath
	// serverBytes and relayBytes are the RSS growth per held waiter.
	serverBytes, relayBytes float64
	// upstream and short are the relay's HTTP/2 and short connections
	// to the server.
	upstream, short int
}

// fanoutPath holds one wait_for_change long-poll of maintenance-event
// from each of addrs at target, the VMs named prefix0 and up; once the
// server holds them all, it raises one Started live migration naming
// them, and measures each answer's delay. rel is the relay in between,
// or nil.
func fanoutPath(ctx context.Context, cfg RelayConfig, srv, rel *child, target, prefix string, addrs []netip.Addr) (*fanoutResult, error) {
	res := &fanoutResult{}
	plain := []byte("GET /computeMetadata/v1/instance/maintenance-event HTTP/1.1\r\nHost: metadata.google.internal\r\nMetadata-Flavor: Google\r\n\r\n")
	conns := make([]*conn, len(addrs))
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.c.Close()
			}
		}
	}()
	// Each VM's ETag of maintenance-event (NONE): reading it also makes
	// the VM one that watches its key.
	etags := make([]string, len(addrs))
	for i, a := range addrs {
		c, err := dial(ctx, a, target, plain)
		if err != nil {
			return nil, err
		}
		conns[i] = c
		status, e, _, err := c.do("ETag")
		if err != nil || status != http.StatusOK {
			return nil, fmt.Errorf("GET from %s: %d %v", a, status, err)
		}
		etags[i] = e
	}
	held0, err := metric(ctx, srv.admin, "forewarn_gce_long_polls_held")
	if err != nil {
		return nil, err
	}
	srvIdle, err := srv.rss()
	if err != nil {
		return nil, err
	}
	var relIdle int64
	if rel != nil {
		if relIdle, err = rel.rss(); err != nil {
			return nil, err
		}
	}
	var wg sync.WaitGroup
	answers, err := holdLongPolls(conns, func(i int) string { return etags[i] }, &wg)
	if err != nil {
		return nil, err
	}
	// Wait for the server to hold every one.
	deadline := time.Now().Add(60 * time.Second)
	for {
		held, err := metric(ctx, srv.admin, "forewarn_gce_long_polls_held")
		if err != nil {
			return nil, err
		}
		if int(held-held0) >= len(addrs) {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the server holds %.0f of %d long-polls after 60 s", held-held0, len(addrs))
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(cfg.Settle)
	srvHeld, err := srv.rss()
	if err != nil {
		return nil, err
	}
	res.serverBytes = float64(srvHeld-srvIdle) / float64(len(addrs))
	if rel != nil {
		relHeld, err := rel.rss()
		if err != nil {
			return nil, err
		}
		res.relayBytes = float64(relHeld-relIdle) / float64(len(addrs))
		up, err := metric(ctx, rel.metrics, `forewarn_relay_upstream_connections{proto="h2",`)
		if err != nil {
			return nil, err
		}
		short, err := metric(ctx, rel.metrics, `forewarn_relay_upstream_connections{proto="http/1.1",`)
		if err != nil {
			return nil, err
		}
		res.upstream, res.short = int(up), int(short)
	}

	names := make([]string, len(addrs))
	for i := range names {
		names[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	vms, _ := json.Marshal(names)
	s0, _ := srv.cpu()
	var r0 time.Duration
	if rel != nil {
		r0, _ = rel.cpu()
	}
	flip := time.Now()
	if err := createEvent(ctx, srv.admin, `{"type":"MIGRATE_ON_HOST_MAINTENANCE","started":true,"lasts":"1h","vms":`+string(vms)+`}`); err != nil {
		return nil, err
	}
	res.FlipRequest = time.Since(flip)
	woke, err := awaitMigrations(ctx, answers, len(conns))
	if err != nil {
		return nil, err
	}
	wg.Wait()
	s1, _ := srv.cpu()
	res.ServerCPU = s1 - s0
	if rel != nil {
		r1, _ := rel.cpu()
		res.RelayCPU = r1 - r0
	}
	delays := make([]time.Duration, len(woke))
	for i, at := range woke {
		delays[i] = at.Sub(flip)
	}
	res.Delivered = len(delays)
	res.Delay = summarize(delays)
	return res, nil
}

package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/internal/etcdproc"
)

// HAConfig configures a run of replicas sharing one fleet through etcd,
// measured against one server on the embedded bbolt store. A zero count
// (Writes, Waiters, Kills, Duration) skips its measurement.
type HAConfig struct {
	// Writes is how many sequential operator creates, and then approvals
	// of the events created, each setup is measured with.
	Writes int `json:"writes"`
	// Waiters is the number of GCE VMs, each holding one wait_for_change
	// long-poll from its own address, in each propagation run.
	Waiters int `json:"waiters"`
	// Kills is how many times the leader is killed with SIGKILL.
	Kills int `json:"kills"`
	// LeaderTTL is the replicas' --leader-ttl, whole seconds.
	LeaderTTL time.Duration `json:"leaderTTL"`
	// VMs, Duration, Warmup and Rounds are the GET throughput test's, as
	// in PollConfig (Azure scheduledevents with an event present).
	VMs      int           `json:"vms"`
	Duration time.Duration `json:"duration"`
	Warmup   time.Duration `json:"warmup"`
	Rounds   int           `json:"rounds"`
	// Settle is how long the servers get to hold every waiter.
	Settle time.Duration `json:"settle"`
	// AddrBase is the first VM address: the polling VMs, then the GCE
	// waiters, then the VMs that operator writes name.
	AddrBase netip.Addr `json:"addrBase"`
	// Binary is the forewarn binary; Etcd the etcd binary (default: etcd
	// on PATH, else /usr/bin/etcd).
	Binary string `json:"-"`
	Etcd   string `json:"-"`
}

// HAReport is the result of an HA run.
type HAReport struct {
	Config      HAConfig         `json:"config"`
	Writes      []WriteRun       `json:"writes,omitempty"`
	Get         []GetRun         `json:"get,omitempty"`
	Propagation []PropagationRun `json:"propagation,omitempty"`
	Failover    *FailoverReport  `json:"failover,omitempty"`
}

// WriteRun is the latency of sequential operator writes in one setup:
// from sending the request until its answer, which comes once the write
// is committed (to bbolt's file, or to etcd's quorum).
type WriteRun struct {
	Setup   string  `json:"setup"`
	Op      string  `json:"op"` // "create" or "approve"
	Writes  int     `json:"writes"`
	Latency Latency `json:"latency"`
}

// GetRun is the GET throughput of one server or replica and of the
// same-run ceiling.
type GetRun struct {
	Setup  string      `json:"setup"`
	Report *PollReport `json:"report"`
}

// PropagationRun is the delay from a commit to the wake-up of the
// long-polls it changes, in one setup.
type PropagationRun struct {
	Setup     string `json:"setup"`
	Waiters   int    `json:"waiters"`
	Delivered int    `json:"delivered"`
	// CreateRequest is how long the create took to be acknowledged.
	CreateRequest time.Duration `json:"createRequest"`
	// FromAck runs from the create's acknowledgement to each wake-up,
	// FromRequest from sending it; BeforeAck counts wake-ups that came
	// before the acknowledgement (negative in FromAck).
	FromAck     Latency `json:"fromAck"`
	FromRequest Latency `json:"fromRequest"`
	BeforeAck   int     `json:"beforeAck"`
}

// FailoverReport is the result of killing the leader Kills times.
type FailoverReport struct {
	Kills     int           `json:"kills"`
	LeaderTTL time.Duration `json:"leaderTTL"`
	// Leader runs from the SIGKILL until a surviving replica reports
	// itself leader in /v1/cluster (replicas announce every 500 ms);
	// Elected until /v1/cluster names a survivor as the leader (the
	// election key).
	Leader  Latency `json:"leader"`
	Elected Latency `json:"elected"`
	// Deadline runs from the SIGKILL until an event due about a second
	// after it shows Started on a surviving replica; Late from that
	// event's NotBefore until then.
	Deadline Latency `json:"deadline"`
	Late     Latency `json:"late"`
	// Rejoin is how long the killed replica took to start again and
	// appear in /v1/cluster.
	Rejoin Latency        `json:"rejoin"`
	Runs   []FailoverKill `json:"runs"`
}

// FailoverKill is one kill.
type FailoverKill struct {
	Killed   string        `json:"killed"`
	Leader   string        `json:"leader"` // the next one
	Elected  time.Duration `json:"elected"`
	Reported time.Duration `json:"reported"`
	Deadline time.Duration `json:"deadline"`
	Late     time.Duration `json:"late"`
}

// haFleet is the VMs of an HA run: Azure VMs in one availability set
// that poll, GCE VMs that hold long-polls, and standalone Azure VMs that
// operator writes name.
type haFleet struct {
	pollAddrs, gceAddrs []netip.Addr
	gceNames, writeVMs  []string
	yaml                string
}

// haWriteVMs is how many VMs the operator writes go round.
const haWriteVMs = 32

func newHAFleet(cfg HAConfig) *haFleet {
	all := Addrs(cfg.AddrBase, cfg.VMs+cfg.Waiters+haWriteVMs)
	f := &haFleet{pollAddrs: all[:cfg.VMs], gceAddrs: all[cfg.VMs : cfg.VMs+cfg.Waiters]}
	var b strings.Builder
	b.WriteString("vms:\n")
	for i, a := range f.pollAddrs {
		fmt.Fprintf(&b, "  - {name: a%d, ip: %s, availabilitySet: bench}\n", i, a)
	}
	for i, a := range f.gceAddrs {
		f.gceNames = append(f.gceNames, fmt.Sprintf("g%d", i))
		fmt.Fprintf(&b, "  - {name: g%d, ip: %s, provider: gce}\n", i, a)
	}
	for i, a := range all[cfg.VMs+cfg.Waiters:] {
		f.writeVMs = append(f.writeVMs, fmt.Sprintf("w%d", i))
		fmt.Fprintf(&b, "  - {name: w%d, ip: %s}\n", i, a)
	}
	f.yaml = b.String()
	return f
}

// haServeFlags are given to every server of an HA run: no throttling and
// no cap on held long-polls, as in the poll and fanout modes.
var haServeFlags = []string{"--rate-limit", "0", "--gce-rate-limit", "0", "--max-long-polls", "0"}

// HA measures, on one bbolt server and on replicas sharing an etcd that
// it starts itself: operator write latency, GET throughput against the
// same-run ceiling, the delay from a commit to the long-polls it wakes
// (on the committing replica and on others), and the time a failover of
// the leader takes, for leadership and for a deadline due during it.
func HA(ctx context.Context, cfg HAConfig) (*HAReport, error) {
	if cfg.LeaderTTL == 0 {
		cfg.LeaderTTL = 2 * time.Second
	}
	if cfg.LeaderTTL < time.Second || cfg.LeaderTTL%time.Second != 0 {
		return nil, fmt.Errorf("leader TTL %s: want whole seconds, at least 1s", cfg.LeaderTTL)
	}
	cfg.VMs = max(cfg.VMs, 1)
	cfg.Rounds = max(cfg.Rounds, 1)
	if cfg.Settle == 0 {
		cfg.Settle = 2 * time.Second
	}
	if !cfg.AddrBase.IsValid() {
		cfg.AddrBase = netip.MustParseAddr("127.1.0.1")
	}
	rep := &HAReport{Config: cfg}
	fl := newHAFleet(cfg)
	if err := haBolt(ctx, cfg, fl, rep); err != nil {
		return nil, fmt.Errorf("bolt: %w", err)
	}
	if err := haEtcd(ctx, cfg, fl, rep); err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	return rep, nil
}

// haBolt measures one server on the embedded store.
func haBolt(ctx context.Context, cfg HAConfig, fl *haFleet, rep *HAReport) error {
	srv, err := startForewarn(cfg.Binary, fl.yaml, haServeFlags...)
	if err != nil {
		return err
	}
	defer srv.stop()
	const setup = "bolt, one server"
	if cfg.Writes > 0 {
		runs, err := writeLatency(ctx, cfg.Writes, fl.writeVMs, []*child{srv}, setup)
		if err != nil {
			return err
		}
		rep.Writes = append(rep.Writes, runs...)
	}
	if cfg.Duration > 0 {
		g, err := getThroughput(ctx, cfg, fl, srv, srv, setup)
		if err != nil {
			return err
		}
		rep.Get = append(rep.Get, *g)
	}
	if cfg.Waiters > 0 {
		p, err := propagation(ctx, cfg, fl, srv, []*child{srv}, setup)
		if err != nil {
			return err
		}
		rep.Propagation = append(rep.Propagation, *p)
	}
	return nil
}

// replica is one 'forewarn serve --store etcd' of an HA run.
type replica struct {
	name string
	*child
}

// haEtcd starts an etcd and replicas A, B and C on it, and measures them.
func haEtcd(ctx context.Context, cfg HAConfig, fl *haFleet, rep *HAReport) error {
	etcd, err := startEtcd(ctx, cfg.Etcd)
	if err != nil {
		return err
	}
	defer etcd.stop()
	start := func(name string) (*replica, error) {
		args := append([]string{"--store", "etcd", "--etcd-endpoints", etcd.url, "--etcd-prefix", "/forewarn-bench/",
			"--replica-name", name, "--leader-ttl", cfg.LeaderTTL.String()}, haServeFlags...)
		c, err := startForewarn(cfg.Binary, fl.yaml, args...)
		if err != nil {
			return nil, fmt.Errorf("replica %s: %w", name, err)
		}
		return &replica{name: name, child: c}, nil
	}
	var reps []*replica
	defer func() {
		for _, r := range reps {
			r.stop()
		}
	}()
	a, err := start("A")
	if err != nil {
		return err
	}
	reps = append(reps, a)
	if _, err := waitCluster(ctx, a.admin, 30*time.Second, steady(reps)); err != nil {
		return err
	}
	if cfg.Writes > 0 {
		runs, err := writeLatency(ctx, cfg.Writes, fl.writeVMs, []*child{a.child}, "etcd, one replica")
		if err != nil {
			return err
		}
		rep.Writes = append(rep.Writes, runs...)
	}
	for _, name := range []string{"B", "C"} {
		r, err := start(name)
		if err != nil {
			return err
		}
		reps = append(reps, r)
	}
	if _, err := waitCluster(ctx, a.admin, 30*time.Second, steady(reps)); err != nil {
		return err
	}
	b, c := reps[1], reps[2]
	if cfg.Writes > 0 {
		runs, err := writeLatency(ctx, cfg.Writes, fl.writeVMs, []*child{a.child, b.child, c.child}, "etcd, spread over three replicas")
		if err != nil {
			return err
		}
		rep.Writes = append(rep.Writes, runs...)
	}
	if cfg.Duration > 0 {
		g, err := getThroughput(ctx, cfg, fl, a.child, b.child, "etcd, replica B of three (event created on A)")
		if err != nil {
			return err
		}
		rep.Get = append(rep.Get, *g)
	}
	if cfg.Waiters > 0 {
		for _, run := range []struct {
			setup   string
			holders []*child
		}{
			{"etcd, waiters on A (the writer)", []*child{a.child}},
			{"etcd, waiters on B", []*child{b.child}},
			{"etcd, waiters on B and C", []*child{b.child, c.child}},
		} {
			p, err := propagation(ctx, cfg, fl, a.child, run.holders, run.setup)
			if err != nil {
				return err
			}
			rep.Propagation = append(rep.Propagation, *p)
		}
	}
	if cfg.Kills > 0 {
		f, err := failover(ctx, cfg, fl, reps, start)
		if err != nil {
			return err
		}
		rep.Failover = f
	}
	return nil
}

// haEvent is the part of the operator API's event object a run reads.
type haEvent struct {
	ID string `json:"id"`
	// EventIDs are the IDs of every event a create made: one per scope
	// group of the VMs it named.
	EventIDs  []string  `json:"eventIds"`
	Status    string    `json:"status"`
	NotBefore time.Time `json:"notBefore"`
	StartedAt time.Time `json:"startedAt"`
}

// operator calls the operator API at admin and decodes the answer into
// out unless it is nil; an answer other than want is an error.
func operator(ctx context.Context, admin, method, path, body string, want int, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+admin+path, r)
	if err != nil {
		return err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(b, out)
}

// writeLatency creates n events, one after the other, on the servers in
// turn, then approves each on the next server in turn, and returns the
// latency of each kind of write.
func writeLatency(ctx context.Context, n int, vms []string, servers []*child, setup string) ([]WriteRun, error) {
	create := func(i int) (string, error) {
		var ev haEvent
		body := `{"type":"Reboot","vms":["` + vms[i%len(vms)] + `"],"notice":"24h","lasts":"24h","source":"User","description":"forewarn bench ha"}`
		err := operator(ctx, servers[i%len(servers)].admin, "POST", "/v1/events", body, http.StatusCreated, &ev)
		return ev.ID, err
	}
	// One unmeasured write per server opens its connection.
	for i := range servers {
		if _, err := create(i); err != nil {
			return nil, err
		}
	}
	ids := make([]string, n)
	lat := make([]time.Duration, n)
	for i := range n {
		t0 := time.Now()
		id, err := create(i)
		if err != nil {
			return nil, err
		}
		lat[i], ids[i] = time.Since(t0), id
	}
	creates := WriteRun{Setup: setup, Op: "create", Writes: n, Latency: summarize(lat)}
	lat = make([]time.Duration, n)
	for i, id := range ids {
		t0 := time.Now()
		if err := operator(ctx, servers[(i+1)%len(servers)].admin, "POST", "/v1/events/"+id+"/approve", "", http.StatusOK, nil); err != nil {
			return nil, err
		}
		lat[i] = time.Since(t0)
	}
	approvals := WriteRun{Setup: setup, Op: "approve", Writes: n, Latency: summarize(lat)}
	return []WriteRun{creates, approvals}, nil
}

// getThroughput raises a Reboot for the polling VMs' availability set on
// writer, and measures Azure GETs on srv, and the ceiling with the same
// bytes, as the poll mode does.
func getThroughput(ctx context.Context, cfg HAConfig, fl *haFleet, writer, srv *child, setup string) (*GetRun, error) {
	if err := operator(ctx, writer.admin, "POST", "/v1/events",
		`{"type":"Reboot","vms":["a0"],"notice":"24h","source":"User","description":"Forewarn benchmark"}`, http.StatusCreated, nil); err != nil {
		return nil, err
	}
	pc := PollConfig{API: "azure", VMs: cfg.VMs, AddrBase: cfg.AddrBase, Duration: cfg.Duration, Warmup: cfg.Warmup,
		Rounds: cfg.Rounds, Ceiling: true, Binary: cfg.Binary}
	req := []byte(pc.request(""))
	reqs := slices.Repeat([][]byte{req}, len(fl.pollAddrs))
	// The event may still be on its way to srv: wait until its document
	// shows it.
	var status int
	var headers string
	var body []byte
	for deadline := time.Now().Add(10 * time.Second); ; {
		probe, err := dial(ctx, fl.pollAddrs[0], srv.metadata, req)
		if err != nil {
			return nil, err
		}
		status, headers, body, err = probe.do(AllHeaders)
		probe.c.Close()
		if err != nil || status != http.StatusOK {
			return nil, fmt.Errorf("probe of %s: status %d, %v", srv.metadata, status, err)
		}
		if bytes.Contains(body, []byte(`"Reboot"`)) {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the Reboot did not reach %s in 10 s: %s", srv.metadata, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ceil, err := startCeiling(cfg.Binary, body, headers)
	if err != nil {
		return nil, err
	}
	defer ceil.stop()
	rep := &PollReport{Config: pc, BodyBytes: len(body), Forewarn: Run{Server: "forewarn azure"},
		Ceiling: &Run{Server: "ceiling (net/http, same bytes)"}}
	var fwLat, ceilLat []time.Duration
	var fwTime, ceilTime, fwCPU, ceilCPU time.Duration
	for round := range pc.Rounds {
		lat, bad, cpu, elapsed, err := measure(ctx, pc, fl.pollAddrs, srv.metadata, reqs, srv, round == 0)
		if err != nil {
			return nil, err
		}
		fwLat, fwTime, fwCPU = append(fwLat, lat...), fwTime+elapsed, fwCPU+cpu
		rep.Forewarn.Errors += bad
		lat, bad, cpu, elapsed, err = measure(ctx, pc, fl.pollAddrs, ceil.metadata, reqs, ceil, round == 0)
		if err != nil {
			return nil, err
		}
		ceilLat, ceilTime, ceilCPU = append(ceilLat, lat...), ceilTime+elapsed, ceilCPU+cpu
		rep.Ceiling.Errors += bad
	}
	finish(&rep.Forewarn, fwLat, fwTime, fwCPU)
	finish(rep.Ceiling, ceilLat, ceilTime, ceilCPU)
	rep.Ratio = rep.Forewarn.Throughput / rep.Ceiling.Throughput
	return &GetRun{Setup: setup, Report: rep}, nil
}

// propagation holds one wait_for_change long-poll per GCE VM, the VMs
// spread over holders in turn, raises one Started live migration naming
// every VM on writer, and measures when each long-poll wakes. It
// completes the event afterwards, so that the next run starts from NONE.
func propagation(ctx context.Context, cfg HAConfig, fl *haFleet, writer *child, holders []*child, setup string) (*PropagationRun, error) {
	plain := []byte("GET /computeMetadata/v1/instance/maintenance-event HTTP/1.1\r\nHost: metadata.google.internal\r\nMetadata-Flavor: Google\r\n\r\n")
	conns := make([]*conn, len(fl.gceAddrs))
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.c.Close()
			}
		}
	}()
	etags := make([]string, len(conns))
	for i, a := range fl.gceAddrs {
		c, err := dial(ctx, a, holders[i%len(holders)].metadata, plain)
		if err != nil {
			return nil, err
		}
		conns[i] = c
		// A replica may not have applied the last run's completion yet.
		for deadline := time.Now().Add(10 * time.Second); ; {
			status, etag, body, err := c.do("ETag")
			if err != nil || status != http.StatusOK {
				return nil, fmt.Errorf("GET from %s: %d %v", a, status, err)
			}
			if string(body) == "NONE" {
				etags[i] = etag
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("%s reads %q, not NONE, after 10 s", a, body)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	answers, err := holdLongPolls(conns, func(i int) string { return etags[i] }, &wg)
	if err != nil {
		return nil, err
	}
	time.Sleep(cfg.Settle)

	vms, _ := json.Marshal(fl.gceNames)
	var ev haEvent
	sent := time.Now()
	if err := operator(ctx, writer.admin, "POST", "/v1/events",
		`{"type":"MIGRATE_ON_HOST_MAINTENANCE","started":true,"lasts":"1h","vms":`+string(vms)+`}`, http.StatusCreated, &ev); err != nil {
		return nil, err
	}
	ack := time.Now()
	run := &PropagationRun{Setup: setup, Waiters: len(conns), CreateRequest: ack.Sub(sent)}
	woke, err := awaitMigrations(ctx, answers, len(conns))
	if err != nil {
		return nil, err
	}
	fromAck := make([]time.Duration, 0, len(woke))
	fromReq := make([]time.Duration, 0, len(woke))
	for _, at := range woke {
		fromAck, fromReq = append(fromAck, at.Sub(ack)), append(fromReq, at.Sub(sent))
		if at.Before(ack) {
			run.BeforeAck++
		}
	}
	run.Delivered = len(fromAck)
	run.FromAck, run.FromRequest = summarize(fromAck), summarize(fromReq)
	// Each GCE VM is a scope group of its own: the create made an event
	// per VM, and each is completed, so the next run starts from NONE.
	if err := completeAll(ctx, writer.admin, ev.EventIDs); err != nil {
		return nil, err
	}
	return run, nil
}

// waitCluster polls admin's /v1/cluster until ok holds, for at most d.
func waitCluster(ctx context.Context, admin string, d time.Duration, ok func(*forewarn.ClusterStatus) bool) (*forewarn.ClusterStatus, error) {
	deadline := time.Now().Add(d)
	var last *forewarn.ClusterStatus
	var lastErr error
	for {
		var st forewarn.ClusterStatus
		if lastErr = operator(ctx, admin, "GET", "/v1/cluster", "", http.StatusOK, &st); lastErr == nil {
			if ok(&st) {
				return &st, nil
			}
			last = &st
		}
		if time.Now().After(deadline) {
			if lastErr != nil {
				return nil, fmt.Errorf("cluster not as expected within %v: %w", d, lastErr)
			}
			b, _ := json.Marshal(last)
			return nil, fmt.Errorf("cluster not as expected within %v: %s", d, b)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// steady returns the condition of a cluster of exactly reps: each has
// announced itself from its current process (its operator address), one
// of them leads by the election, and it alone reports itself leader.
func steady(reps []*replica) func(*forewarn.ClusterStatus) bool {
	return func(st *forewarn.ClusterStatus) bool {
		if len(st.Replicas) != len(reps) {
			return false
		}
		leaders := 0
		for _, r := range st.Replicas {
			i := indexOf(reps, r.Name)
			if i < 0 || r.Address != reps[i].admin {
				return false
			}
			if r.Leader {
				if r.Name != st.Leader {
					return false
				}
				leaders++
			}
		}
		return leaders == 1
	}
}

func indexOf(reps []*replica, name string) int {
	for i, r := range reps {
		if r.name == name {
			return i
		}
	}
	return -1
}

// failover kills the leader of reps kills times. Before each kill it
// creates, on a survivor, a Reboot due about a second after the kill;
// it then polls the survivors until one reports itself leader and the
// Reboot shows Started, and starts the killed replica again.
func failover(ctx context.Context, cfg HAConfig, fl *haFleet, reps []*replica, start func(string) (*replica, error)) (*FailoverReport, error) {
	rep := &FailoverReport{Kills: cfg.Kills, LeaderTTL: cfg.LeaderTTL}
	var elected, reported, deadlines, late, rejoin []time.Duration
	bound := 10*cfg.LeaderTTL + 10*time.Second
	for k := range cfg.Kills {
		st, err := waitCluster(ctx, reps[0].admin, bound, steady(reps))
		if err != nil {
			return nil, fmt.Errorf("before kill %d: %w", k+1, err)
		}
		li := indexOf(reps, st.Leader)
		leader := reps[li]
		var survivors []*replica
		for _, r := range reps {
			if r != leader {
				survivors = append(survivors, r)
			}
		}
		var ev haEvent
		body := `{"type":"Reboot","vms":["` + fl.writeVMs[k%len(fl.writeVMs)] + `"],"notice":"2s","lasts":"1h","source":"User","description":"forewarn bench ha failover"}`
		if err := operator(ctx, survivors[0].admin, "POST", "/v1/events", body, http.StatusCreated, &ev); err != nil {
			return nil, err
		}
		time.Sleep(time.Until(ev.NotBefore.Add(-time.Second)))
		killed := time.Now()
		leader.stop() // SIGKILL
		run := FailoverKill{Killed: leader.name}
		var seenReported, seenStarted bool
		for !seenReported || !seenStarted {
			if time.Since(killed) > bound {
				return nil, fmt.Errorf("kill %d of %s: no new leader or no Started %s within %v: %+v", k+1, leader.name, ev.ID, bound, run)
			}
			var st forewarn.ClusterStatus
			if err := operator(ctx, survivors[0].admin, "GET", "/v1/cluster", "", http.StatusOK, &st); err == nil {
				now := time.Since(killed)
				if run.Elected == 0 && st.Leader != "" && st.Leader != leader.name {
					run.Elected, run.Leader = now, st.Leader
				}
				for _, r := range st.Replicas {
					if !seenReported && r.Leader && r.Name != leader.name {
						seenReported, run.Reported = true, now
						if run.Elected == 0 {
							run.Elected, run.Leader = now, r.Name
						}
					}
				}
			}
			for _, s := range survivors {
				var got haEvent
				if seenStarted || operator(ctx, s.admin, "GET", "/v1/events/"+ev.ID, "", http.StatusOK, &got) != nil {
					continue
				}
				if !got.StartedAt.IsZero() {
					seenStarted, run.Deadline = true, time.Since(killed)
					run.Late = time.Since(ev.NotBefore)
				}
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
		rep.Runs = append(rep.Runs, run)
		elected, reported = append(elected, run.Elected), append(reported, run.Reported)
		deadlines, late = append(deadlines, run.Deadline), append(late, run.Late)

		t0 := time.Now()
		r, err := start(leader.name)
		if err != nil {
			return nil, err
		}
		reps[li] = r
		if _, err := waitCluster(ctx, survivors[0].admin, bound, func(st *forewarn.ClusterStatus) bool {
			return lists(st, r.name, r.admin)
		}); err != nil {
			return nil, fmt.Errorf("restart of %s: %w", r.name, err)
		}
		rejoin = append(rejoin, time.Since(t0))
	}
	rep.Elected, rep.Leader = summarize(elected), summarize(reported)
	rep.Deadline, rep.Late, rep.Rejoin = summarize(deadlines), summarize(late), summarize(rejoin)
	return rep, nil
}

// lists reports whether st lists the replica name at the operator
// address addr.
func lists(st *forewarn.ClusterStatus, name, addr string) bool {
	for _, r := range st.Replicas {
		if r.Name == name && r.Address == addr {
			return true
		}
	}
	return false
}

// etcdServer is a single-member etcd the harness started, with its data
// directory in a temporary directory.
type etcdServer struct {
	p   *etcdproc.Cluster
	dir string
	url string
}

// startEtcd starts a single-member etcd (bin, or the machine's) on two
// free loopback ports, tuned as etcdproc tunes its servers (short
// heartbeats and elections, limits raised so that one event naming a
// fleet is one transaction), and waits until it is healthy.
func startEtcd(ctx context.Context, bin string) (*etcdServer, error) {
	bin, err := etcdproc.Binary(bin)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "forewarn-bench-etcd")
	if err != nil {
		return nil, err
	}
	p, err := etcdproc.New(bin, dir, 1, nil)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	e := &etcdServer{p: p, dir: dir, url: p.Endpoints()[0]}
	if err := p.Launch(0); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := p.WaitHealthy(wctx, 0); err != nil {
		tail := etcdproc.Tail(p.LogPath(0), 10)
		e.stop()
		return nil, fmt.Errorf("%w: %s", err, tail)
	}
	return e, nil
}

// stop stops etcd with SIGTERM, killing it after 10 s, and removes its
// directory.
func (e *etcdServer) stop() {
	e.p.StopAll()
	os.RemoveAll(e.dir)
}

// completeAll completes the events ids on the operator API at admin,
// eight calls at a time.
func completeAll(ctx context.Context, admin string, ids []string) error {
	var wg sync.WaitGroup
	errs := make([]error, len(ids))
	sem := make(chan struct{}, 8)
	for i, id := range ids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = operator(ctx, admin, "POST", "/v1/events/"+id+"/complete", "", http.StatusOK, nil)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

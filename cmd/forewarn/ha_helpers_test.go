package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
)

// Helpers of the end-to-end tests of several replicas sharing one fleet
// through etcd (ha_test.go): replicas as child processes that can be
// killed and restarted, their logs kept for failures, and the store's
// history read back from etcd.

const (
	// haStartTimeout bounds how long a replica may take to listen.
	haStartTimeout = 30 * time.Second
	// haLogTail is how many lines of each replica's log a failed test
	// prints.
	haLogTail = 40
)

// haCluster is a set of 'forewarn serve --store etcd' replicas sharing
// one fleet file, etcd and prefix.
type haCluster struct {
	t         *testing.T
	endpoints []string
	prefix    string
	fleet     string
	ttl       string // --leader-ttl
	timeout   string // --etcd-timeout
	// args are further flags of every replica's 'forewarn serve', set
	// before the first add: a relay listener's, say.
	args     []string
	replicas []*replica
}

// replica is one named replica: a run of the binary at a time, its own
// data directory, and the log of every run.
type replica struct {
	name string
	data string
	log  *lockedBuffer

	mu   sync.Mutex
	srv  *server       // the running process; nil while down
	done chan struct{} // closed when srv's process has exited
	runs int
}

// logTail returns the last n lines of a replica's log.
func logTail(l *lockedBuffer, n int) string {
	lines := strings.Split(strings.TrimRight(l.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// listenWriter takes a replica's standard output and reports the
// addresses it prints once all are known: the metadata and operator
// APIs', and the relay listener's when it has one (wantRelay).
type listenWriter struct {
	mu                   sync.Mutex
	partial              string
	metadata, adm, relay string
	wantRelay            bool
	ready                chan struct{}
	closed               bool
}

func (w *listenWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial += string(p)
	for {
		line, rest, ok := strings.Cut(w.partial, "\n")
		if !ok {
			break
		}
		w.partial = rest
		if a, ok := strings.CutPrefix(line, "metadata API listening on "); ok {
			w.metadata = a
		}
		if a, ok := strings.CutPrefix(line, "operator API listening on "); ok {
			w.adm = a
		}
		if a, ok := strings.CutPrefix(line, "relay listener on "); ok {
			w.relay = a
		}
		if !w.closed && w.metadata != "" && w.adm != "" && (!w.wantRelay || w.relay != "") {
			close(w.ready)
			w.closed = true
		}
	}
	return len(p), nil
}

// newHACluster returns a cluster on etcd at endpoints, under prefix,
// serving fleetYAML. Every replica still running is killed when t ends;
// if t failed, the tail of each replica's log is printed.
func newHACluster(t *testing.T, endpoints []string, prefix, fleetYAML, ttl, timeout string) *haCluster {
	t.Helper()
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleet, []byte(fleetYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &haCluster{t: t, endpoints: endpoints, prefix: prefix, fleet: fleet, ttl: ttl, timeout: timeout}
	t.Cleanup(func() {
		for _, r := range c.replicas {
			r.kill()
		}
		if t.Failed() {
			for _, r := range c.replicas {
				t.Logf("replica %s log (last %d lines):\n%s", r.name, haLogTail, logTail(r.log, haLogTail))
			}
		}
	})
	return c
}

// add starts a new replica named name.
func (c *haCluster) add(name string) *replica {
	c.t.Helper()
	r := &replica{name: name, data: filepath.Join(c.t.TempDir(), name), log: new(lockedBuffer)}
	c.replicas = append(c.replicas, r)
	c.start(r)
	return r
}

// start runs replica r, which must be down, and waits until it listens.
func (c *haCluster) start(r *replica) {
	c.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.srv != nil {
		c.t.Fatalf("replica %s is already running", r.name)
	}
	r.runs++
	args := []string{"serve", "--store", "etcd", "--etcd-endpoints", strings.Join(c.endpoints, ","),
		"--etcd-prefix", c.prefix, "--replica-name", r.name, "--leader-ttl", c.ttl, "--etcd-timeout", c.timeout,
		"--metadata-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--data", r.data, "--fleet", c.fleet,
		"--allow-short-notice", "--rate-limit", "0"}
	args = append(args, c.args...)
	cmd := exec.Command(binary, args...)
	lw := &listenWriter{ready: make(chan struct{}), wantRelay: slices.Contains(c.args, "--relay-addr")}
	cmd.Stdout, cmd.Stderr = lw, r.log
	fmt.Fprintf(r.log, "--- %s run %d at %s ---\n", r.name, r.runs, time.Now().Format(time.RFC3339Nano))
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	select {
	case <-lw.ready:
	case <-done:
		c.t.Fatalf("replica %s exited before listening:\n%s", r.name, logTail(r.log, haLogTail))
	case <-time.After(haStartTimeout):
		_ = cmd.Process.Kill()
		<-done
		c.t.Fatalf("replica %s not listening within %v:\n%s", r.name, haStartTimeout, logTail(r.log, haLogTail))
	}
	lw.mu.Lock()
	r.srv = &server{cmd: cmd, metadata: lw.metadata, adm: lw.adm, relay: lw.relay, stderr: new(bytes.Buffer)}
	lw.mu.Unlock()
	r.done = done
}

// kill stops r's process with SIGKILL, if it runs, and waits for it to
// exit.
func (r *replica) kill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.srv == nil {
		return
	}
	_ = r.srv.cmd.Process.Kill()
	<-r.done
	r.srv, r.done = nil, nil
}

// current returns r's running process, or nil while it is down.
func (r *replica) current() *server {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.srv
}

// s returns r's running process, failing t when it is down.
func (r *replica) s(t *testing.T) *server {
	t.Helper()
	s := r.current()
	if s == nil {
		t.Fatalf("replica %s is down", r.name)
	}
	return s
}

// client returns an operator API client of r's running process.
func (r *replica) client(t *testing.T) *admin.Client {
	t.Helper()
	return admin.NewClient("http://"+r.s(t).adm, &http.Client{Timeout: 10 * time.Second})
}

// addSettled starts replicas named names, waits until their cluster has
// settled with one leader, and returns it and the others.
func (c *haCluster) addSettled(t *testing.T, names ...string) (leader *replica, others []*replica) {
	t.Helper()
	for _, n := range names {
		c.add(n)
	}
	var name string
	var st *forewarn.ClusterStatus
	eventually(t, 10*time.Second, func() bool {
		st = replicaStatus(t, c.replicas[0])
		var ok bool
		name, ok = settledStatus(st, names...)
		return ok
	}, func() string { return fmt.Sprintf("cluster status %+v", st) })
	leader = c.byName(name)
	for _, r := range c.replicas {
		if r != leader {
			others = append(others, r)
		}
	}
	return leader, others
}

// byName returns the replica named name.
func (c *haCluster) byName(name string) *replica {
	for _, r := range c.replicas {
		if r.name == name {
			return r
		}
	}
	return nil
}

// haCLI runs the CLI with --server naming replica r's operator API.
func haCLI(t *testing.T, r *replica, args ...string) string {
	t.Helper()
	if len(args) < 2 {
		t.Fatalf("haCLI %v: want a command and a subcommand", args)
	}
	full := append([]string{args[0], args[1], "--server", "http://" + r.s(t).adm}, args[2:]...)
	cmd := exec.Command(binary, full...)
	cmd.Env = append(os.Environ(), quickExitEnv())
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("forewarn %v on %s: %v: %s", full, r.name, err, e.String())
	}
	return o.String()
}

// quickExitEnv returns the environment entry that spares a run of the
// CLI the second the race detector's runtime sleeps before a clean exit.
func quickExitEnv() string {
	return "GORACE=" + quickExitRace()
}

// quickExitRace is GORACE with the race detector's sleep before exit
// turned off: set it as the test's GORACE for every CLI run it starts.
func quickExitRace() string {
	return strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
}

// httpAnswer is a whole HTTP answer.
type httpAnswer struct {
	status int
	header http.Header
	body   string
}

// vmDo sends a request of the VM at ip to the metadata API at addr; it
// is safe to call from any goroutine.
func vmDo(ctx context.Context, addr, ip, method, path, body string) (*httpAnswer, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, rd)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(path, "/computeMetadata/") {
		req.Header.Set("Metadata-Flavor", "Google")
	} else {
		req.Header.Set("Metadata", "true")
	}
	hc := vmClient(ip)
	hc.Timeout = 0 // long-polls are bounded by ctx
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &httpAnswer{status: resp.StatusCode, header: resp.Header, body: string(b)}, nil
}

// azurePath is the scheduled events path the tests read.
const azurePath = "/metadata/scheduledevents?api-version=2020-07-01"

// azureDoc GETs the scheduled events document of the VM at ip from r,
// failing t unless it answers 200.
func azureDoc(t *testing.T, r *replica, ip string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := vmDo(ctx, r.s(t).metadata, ip, "GET", azurePath, "")
	if err != nil {
		t.Fatalf("GET %s from %s on %s: %v", azurePath, ip, r.name, err)
	}
	if a.status != 200 {
		t.Fatalf("GET %s from %s on %s: %d %s", azurePath, ip, r.name, a.status, a.body)
	}
	return a.body
}

// waitAzureDoc polls r until the document of the VM at ip is want.
func waitAzureDoc(t *testing.T, r *replica, ip, want string) {
	t.Helper()
	var got string
	eventually(t, 10*time.Second, func() bool {
		got = azureDoc(t, r, ip)
		return got == want
	}, func() string {
		return fmt.Sprintf("document of %s on %s:\n got %s\nwant %s", ip, r.name, got, want)
	})
}

// eventually polls cond every 20 ms until it holds, failing t with
// what's message after timeout.
func eventually(t *testing.T, timeout time.Duration, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", timeout, what())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// replicaStatus returns r's GET /v1/cluster.
func replicaStatus(t *testing.T, r *replica) *forewarn.ClusterStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := r.client(t).Cluster(ctx)
	if err != nil {
		t.Fatalf("cluster status of %s: %v", r.name, err)
	}
	return st
}

// settledStatus reports whether st lists exactly the replicas named,
// each at the store's revision, and one leader among them that believes
// it leads; it returns the leader.
func settledStatus(st *forewarn.ClusterStatus, names ...string) (string, bool) {
	if len(st.Replicas) != len(names) || st.Leader == "" {
		return "", false
	}
	leaders := 0
	for i, r := range st.Replicas {
		if r.Name != names[i] || r.Revision != st.Revision {
			return "", false
		}
		if r.Leader {
			leaders++
			if r.Name != st.Leader {
				return "", false
			}
		}
	}
	return st.Leader, leaders == 1
}

// replicaEvents returns r's operator event list, as 'event list --json'
// would print it, and the events decoded.
func replicaEvents(t *testing.T, r *replica) (string, []*forewarn.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+r.s(t).adm+"/v1/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("event list of %s: %v", r.name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("event list of %s: %d %v %s", r.name, resp.StatusCode, err, b)
	}
	var list struct{ Events []*forewarn.Event }
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatalf("event list of %s: %v", r.name, err)
	}
	return string(b), list.Events
}

// converge waits until every replica of c that runs is at the store's
// revision, all at the same one, with the same event list; it returns
// that list.
func (c *haCluster) converge(t *testing.T, timeout time.Duration) []*forewarn.Event {
	t.Helper()
	var why string
	var events []*forewarn.Event
	eventually(t, timeout, func() bool {
		var revs []string
		var lists []string
		for _, r := range c.replicas {
			if r.current() == nil {
				continue
			}
			st := replicaStatus(t, r)
			mine := int64(-1)
			for _, rr := range st.Replicas {
				if rr.Name == r.name {
					mine = rr.Revision
				}
			}
			revs = append(revs, fmt.Sprintf("%s: store %d, applied %d", r.name, st.Revision, mine))
			raw, evs := replicaEvents(t, r)
			lists = append(lists, raw)
			events = evs
		}
		why = strings.Join(revs, "; ")
		for i := range revs {
			_, a, _ := strings.Cut(revs[i], ": ")
			_, b, _ := strings.Cut(revs[0], ": ")
			if a != b || lists[i] != lists[0] {
				return false
			}
			store, applied, _ := strings.Cut(a, ", ")
			if strings.TrimPrefix(store, "store ") != strings.TrimPrefix(applied, "applied ") {
				return false
			}
		}
		return true
	}, func() string { return "replicas did not converge: " + why })
	// And as the CLI prints it, byte for byte.
	var first string
	for _, r := range c.replicas {
		if r.current() == nil {
			continue
		}
		out := haCLI(t, r, "event", "list", "--json")
		if first == "" {
			first = out
		} else if out != first {
			t.Errorf("event list --json on %s:\n%s\ndiffers from\n%s", r.name, out, first)
		}
	}
	return events
}

// evPut is one write of an event's key in etcd.
type evPut struct {
	etcdRev int64 // the etcd revision of the write
	version int64 // the key's version: 1 for its first write
	deleted bool
	ev      *forewarn.Event
}

// etcdHistory reads from etcd every write of every event key under
// prefix, oldest first, up to the store's current Forewarn revision.
func etcdHistory(t *testing.T, endpoints []string, prefix string) map[string][]evPut {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix+"rev")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read %srev: %v %v", prefix, err, resp)
	}
	final := string(resp.Kvs[0].Value)
	out := map[string][]evPut{}
	evPrefix := prefix + "ev/"
	for wr := range cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(1)) {
		if err := wr.Err(); err != nil {
			t.Fatalf("watch %s from revision 1: %v", prefix, err)
		}
		done := false
		for _, e := range wr.Events {
			key := string(e.Kv.Key)
			if key == prefix+"rev" && string(e.Kv.Value) == final {
				done = true
			}
			id, ok := strings.CutPrefix(key, evPrefix)
			if !ok {
				continue
			}
			p := evPut{etcdRev: e.Kv.ModRevision, version: e.Kv.Version}
			if e.Type == clientv3.EventTypeDelete {
				p.deleted = true
			} else {
				p.ev = new(forewarn.Event)
				if err := json.Unmarshal(e.Kv.Value, p.ev); err != nil {
					t.Fatalf("event %s at etcd revision %d: %v", id, p.etcdRev, err)
				}
			}
			out[id] = append(out[id], p)
		}
		if done {
			return out
		}
	}
	t.Fatalf("watch of %s ended before Forewarn revision %s: %v", prefix, final, ctx.Err())
	return nil
}

// statuses returns the statuses of an event's writes, "deleted" for a
// delete.
func statuses(puts []evPut) []string {
	var out []string
	for _, p := range puts {
		if p.deleted {
			out = append(out, "deleted")
			continue
		}
		out = append(out, string(p.ev.Status))
	}
	return out
}

// describePuts renders an event's writes for a failure message.
func describePuts(puts []evPut) string {
	var b strings.Builder
	for _, p := range puts {
		if p.deleted {
			fmt.Fprintf(&b, "\n  etcd rev %d: deleted", p.etcdRev)
			continue
		}
		fmt.Fprintf(&b, "\n  etcd rev %d version %d: %s started %v ended %v approvals %v",
			p.etcdRev, p.version, p.ev.Status, p.ev.StartedAt, p.ev.EndedAt, p.ev.Approvals)
	}
	return b.String()
}

// statusRank orders the statuses an event goes through.
func statusRank(s forewarn.Status) int {
	switch s {
	case forewarn.Pending:
		return 0
	case forewarn.Scheduled:
		return 1
	case forewarn.Started:
		return 2
	}
	return 3 // Completed, Canceled
}

// checkMonotonic checks one event's writes: versions 1, 2, 3, ... with
// no key deleted; its status never goes back; once Started its StartedAt
// stays, once ended its EndedAt and everything else stays, so no
// transition is applied twice; a Canceled event was never Started.
func checkMonotonic(t *testing.T, id string, puts []evPut) {
	t.Helper()
	var prev *forewarn.Event
	for i, p := range puts {
		if p.deleted || p.version != int64(i+1) {
			t.Errorf("event %s: write %d is version %d (deleted %v), want version %d:%s", id, i, p.version, p.deleted, i+1, describePuts(puts))
			return
		}
		ev := p.ev
		if prev != nil {
			switch {
			case statusRank(ev.Status) < statusRank(prev.Status):
				t.Errorf("event %s went back from %s to %s:%s", id, prev.Status, ev.Status, describePuts(puts))
				return
			case !prev.Status.Active():
				t.Errorf("event %s was written again after it ended (%s):%s", id, prev.Status, describePuts(puts))
				return
			case prev.Status == forewarn.Started && !ev.StartedAt.Equal(prev.StartedAt):
				t.Errorf("event %s started twice, at %v and %v:%s", id, prev.StartedAt, ev.StartedAt, describePuts(puts))
				return
			case ev.Status == forewarn.Canceled && prev.Status == forewarn.Started:
				t.Errorf("event %s canceled after it started:%s", id, describePuts(puts))
				return
			}
		}
		prev = ev
	}
}

// incWatch checks that the DocumentIncarnation each replica serves each
// VM never goes back, across the replica's restarts too.
type incWatch struct {
	t     *testing.T
	mu    sync.Mutex
	max   map[string]map[string]int64 // replica → VM → highest served
	reads int
}

func newIncWatch(t *testing.T) *incWatch {
	return &incWatch{t: t, max: map[string]map[string]int64{}}
}

// note records that replica served vm's document at incarnation inc.
func (w *incWatch) note(replica, vm string, inc int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reads++
	m := w.max[replica]
	if m == nil {
		m = map[string]int64{}
		w.max[replica] = m
	}
	if inc < m[vm] {
		w.t.Errorf("replica %s served %s incarnation %d after %d", replica, vm, inc, m[vm])
	}
	m[vm] = max(m[vm], inc)
}

// highest returns the highest incarnation any replica served vm.
func (w *incWatch) highest(vm string) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var n int64
	for _, m := range w.max {
		n = max(n, m[vm])
	}
	return n
}

// readDoc GETs the scheduled events document of the VM at ip from s
// and decodes it; it is safe to call from any goroutine.
func readDoc(ctx context.Context, s *server, ip string) (*doc, error) {
	a, err := vmDo(ctx, s.metadata, ip, "GET", azurePath, "")
	if err != nil {
		return nil, err
	}
	if a.status != 200 {
		return nil, fmt.Errorf("GET from %s: %d %s", ip, a.status, a.body)
	}
	var d doc
	if err := json.Unmarshal([]byte(a.body), &d); err != nil {
		return nil, fmt.Errorf("GET from %s: %v: %s", ip, err, a.body)
	}
	return &d, nil
}

// haVM is a VM of a test fleet.
type haVM struct{ name, ip string }

// standaloneFleet returns the fleet file of Azure VMs that share no
// scope.
func standaloneFleet(vms []haVM) string {
	var b strings.Builder
	b.WriteString("vms:\n")
	for _, vm := range vms {
		fmt.Fprintf(&b, "  - {name: %s, ip: %s}\n", vm.name, vm.ip)
	}
	return b.String()
}

// haLedger holds the writes the replicas acknowledged.
type haLedger struct {
	mu sync.Mutex
	// created holds acknowledged creates.
	created map[string]bool
	// approved holds acknowledged approvals: event → approver → when.
	approved map[string]map[string]time.Time
	// started holds events an operator start was acknowledged for, or a
	// VM was shown Started.
	started map[string]bool
	// canceled holds events an operator cancel was acknowledged for.
	canceled map[string]bool
}

func newLedger() *haLedger {
	return &haLedger{created: map[string]bool{}, approved: map[string]map[string]time.Time{},
		started: map[string]bool{}, canceled: map[string]bool{}}
}

func (l *haLedger) create(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.created[id] = true
}

func (l *haLedger) approve(id, by string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.approved[id] == nil {
		l.approved[id] = map[string]time.Time{}
	}
	l.approved[id][by] = time.Now()
}

func (l *haLedger) start(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.started[id] = true
}

func (l *haLedger) cancel(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.canceled[id] = true
}

// check checks the events a replica lists against the ledger: every
// acknowledged write is there.
func (l *haLedger) check(t *testing.T, replica string, events []*forewarn.Event) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	byID := map[string]*forewarn.Event{}
	for _, ev := range events {
		byID[ev.ID] = ev
	}
	for id := range l.created {
		if byID[id] == nil {
			t.Errorf("%s: acknowledged event %s is missing", replica, id)
		}
	}
	for id, by := range l.approved {
		ev := byID[id]
		if ev == nil {
			t.Errorf("%s: approved event %s is missing", replica, id)
			continue
		}
		for who, at := range by {
			has := slices.ContainsFunc(ev.Approvals, func(a forewarn.Approval) bool { return a.By == who })
			// An approval of an event that had already ended records
			// nothing.
			if !has && (ev.EndedAt.IsZero() || ev.EndedAt.After(at)) {
				t.Errorf("%s: approval of %s by %s acknowledged at %v is missing: %s, ended %v, approvals %+v",
					replica, id, who, at, ev.Status, ev.EndedAt, ev.Approvals)
			}
		}
	}
	for id := range l.started {
		if ev := byID[id]; ev == nil || ev.Status == forewarn.Scheduled || ev.Status == forewarn.Pending || ev.StartedAt.IsZero() {
			t.Errorf("%s: event %s was started, and is now %+v", replica, id, ev)
		}
	}
	for id := range l.canceled {
		if ev := byID[id]; ev == nil || ev.Status != forewarn.Canceled {
			t.Errorf("%s: event %s was canceled, and is now %+v", replica, id, ev)
		}
	}
}

// size returns how many creates and approvals the ledger holds.
func (l *haLedger) size() (created, approved int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, by := range l.approved {
		approved += len(by)
	}
	return len(l.created), approved
}

// logErrors logs the lines of every replica's log at level ERROR.
func (c *haCluster) logErrors(t *testing.T) {
	t.Helper()
	for _, r := range c.replicas {
		for line := range strings.SplitSeq(r.log.String(), "\n") {
			if strings.Contains(line, "level=ERROR") {
				t.Logf("replica %s logged: %s", r.name, line)
			}
		}
	}
}

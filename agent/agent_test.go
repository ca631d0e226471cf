package agent_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/agent"
	"github.com/forewarn/forewarn/aws"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/forewarntest"
)

// The test fleet: two Azure VMs in one availability set and update
// domain, a standalone one, two Compute Engine VMs, and an EC2 Spot VM
// whose tokens are required. Each VM's requests come from its own
// loopback address.
const testFleet = `vms:
  - name: web_0
    ip: 127.0.0.2
    scaleSet: web
    instanceId: "0"
  - name: web_1
    ip: 127.0.0.3
    scaleSet: web
    instanceId: "1"
  - name: solo
    ip: 127.0.0.4
  - name: gce_0
    ip: 127.0.0.6
    provider: gce
  - name: spot_0
    ip: 127.0.0.7
    provider: gce
    provisioningModel: SPOT
  - name: ec2_0
    ip: 127.0.0.8
    provider: aws
    instanceId: i-0123456789abcdef0
    market: spot
    httpTokens: required
`

// newWorld starts the metadata server for testFleet, as 'forewarn serve'
// wires it, for the rest of the test.
func newWorld(t *testing.T) *forewarntest.Server {
	t.Helper()
	return forewarntest.NewServer(t, forewarntest.Fleet(t, testFleet))
}

// logBuffer collects the agent's JSON logs.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// running is an Agent running in the background.
type running struct {
	*agent.Agent
	logs    *logBuffer
	metrics string // base URL of the Handler
	cancel  context.CancelFunc
	done    chan error
}

// config returns a Config for the VM name of w, polling fast from the
// VM's address.
func config(w *forewarntest.Server, name string) agent.Config {
	p := agent.ProviderAzure
	switch {
	case strings.HasPrefix(name, "gce") || strings.HasPrefix(name, "spot"):
		p = agent.ProviderGCE
	case strings.HasPrefix(name, "ec2"):
		p = agent.ProviderAWS
	}
	return agent.Config{
		Provider:     p,
		Endpoint:     w.URL(),
		HTTPClient:   w.HTTPClient(name),
		PollInterval: 50 * time.Millisecond,
	}
}

// start runs an agent for cfg until the test ends, and waits until it
// watches.
func start(t *testing.T, cfg agent.Config) *running {
	t.Helper()
	r := &running{logs: new(logBuffer), done: make(chan error, 1)}
	cfg.Logger = slog.New(slog.NewJSONHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.Agent = a
	hs := httptest.NewServer(a.Handler())
	t.Cleanup(hs.Close)
	r.metrics = hs.URL
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	waitFor(t, "the agent to watch", 5*time.Second, a.Ready)
	return r
}

// stop cancels the agent and checks Run returns nil promptly.
func (r *running) stop(t *testing.T) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run returned %v\nlogs:\n%s", err, r.logs)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("Run did not return within 10 s of the cancel\nlogs:\n%s", r.logs)
	}
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// scrape GETs /metrics and returns the samples by "name{labels}".
func (r *running) scrape(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := http.Get(r.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	return parseMetrics(t, resp.Body)
}

func parseMetrics(t *testing.T, body io.Reader) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// wantMetrics checks the samples named in want.
// wantMetrics checks the agent's metrics against want, scraping until
// they match or 5 s pass: a hook's files are written before the agent
// sees the hook exit and counts the run.
func (r *running) wantMetrics(t *testing.T, want map[string]float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := r.scrape(t)
		match := true
		for k, v := range want {
			if g, ok := got[k]; !ok || g != v {
				match = false
			}
		}
		if match || time.Now().After(deadline) {
			wantMetrics(t, got, want)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func wantMetrics(t *testing.T, got map[string]float64, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("metric %s missing", k)
		} else if g != v {
			t.Errorf("metric %s = %v, want %v", k, g, v)
		}
	}
}

// hook is a shell command that records each run's environment and stdin
// in dir, one pair of files per run, named by event ID and run number.
func hook(dir, name string) string {
	return fmt.Sprintf(`set -e; d=%q; n=$(ls "$d" | grep -c "^%s\.env\.$FOREWARN_EVENT_ID\." || true); `+
		`env > "$d/.tmp.$$"; cat > "$d/.in.$$"; `+
		`mv "$d/.in.$$" "$d/%s.stdin.$FOREWARN_EVENT_ID.$n"; mv "$d/.tmp.$$" "$d/%s.env.$FOREWARN_EVENT_ID.$n"`,
		dir, name, name, name)
}

// runs returns the recorded runs of hook name for event id.
func runs(t *testing.T, dir, name, id string) []run {
	t.Helper()
	var out []run
	for n := 0; ; n++ {
		env, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%s.env.%s.%d", name, id, n)))
		if os.IsNotExist(err) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		st, _ := os.Stat(filepath.Join(dir, fmt.Sprintf("%s.env.%s.%d", name, id, n)))
		in, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%s.stdin.%s.%d", name, id, n)))
		if err != nil {
			t.Fatal(err)
		}
		r := run{env: map[string]string{}, stdin: string(in), at: st.ModTime()}
		for line := range strings.SplitSeq(string(env), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok && (strings.HasPrefix(k, "FOREWARN_") || k == "AGENT_TEST_MARK") {
				r.env[k] = v
			}
		}
		out = append(out, r)
	}
}

type run struct {
	env   map[string]string
	stdin string
	at    time.Time
}

// wantEnv checks the FOREWARN_* variables of a run.
func wantEnv(t *testing.T, got map[string]string, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok && strings.HasPrefix(k, "FOREWARN_") {
			t.Errorf("unexpected variable %s=%q", k, got[k])
		}
	}
}

// noticeJSON is the stdin and webhook body a handler gets for ev as vm
// sees it.
func noticeJSON(t *testing.T, ev *forewarn.Event, status string, provider forewarn.Provider) string {
	t.Helper()
	n := forewarn.Notice{ID: ev.ID, Type: string(ev.Type), Status: status, Resources: ev.Resources,
		Duration: ev.Duration, Source: string(ev.Source), Description: ev.Description, Provider: provider}
	if status == "Scheduled" {
		n.NotBefore = ev.NotBefore.UTC()
	}
	b, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// receiver is a webhook endpoint that records what it gets.
type receiver struct {
	mu     sync.Mutex
	bodies []string
	ctypes []string
	status int
	url    string
}

func newReceiver(t *testing.T, status int) *receiver {
	rc := &receiver{status: status}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		if r.Method == http.MethodPost {
			rc.bodies = append(rc.bodies, string(b))
			rc.ctypes = append(rc.ctypes, r.Header.Get("Content-Type"))
		}
		rc.mu.Unlock()
		w.WriteHeader(rc.status)
	}))
	t.Cleanup(srv.Close)
	rc.url = srv.URL + "/hook"
	return rc
}

func (rc *receiver) got() ([]string, []string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.bodies), slices.Clone(rc.ctypes)
}

func intp(n int) *int { return &n }

// TestExecWebhookApprove: an event of this VM runs the command with the
// event on stdin and in exact variables, posts it to the webhook, and
// is approved (the VM leads it): it starts at once.
func TestExecWebhookApprove(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	rc := newReceiver(t, http.StatusNoContent)
	t.Setenv("AGENT_TEST_MARK", "inherited")
	cfg := config(w, "web_0")
	cfg.Exec = []string{hook(dir, "drain")}
	cfg.Webhooks = []string{rc.url}
	cfg.Approve = true
	a := start(t, cfg)

	ev := w.Create(engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_0"}, Notice: 10 * time.Minute,
		Duration: intp(30), Source: forewarn.User, Description: "Host server is undergoing maintenance."})
	w.Wait(ev.ID, forewarn.Started)
	// Wait returns as the approval starts the event, which may be before
	// the agent's approval request has returned and been counted.
	waitFor(t, "the agent to count its approval", 5*time.Second, func() bool {
		return a.scrape(t)[`forewarn_agent_approvals_total`] == 1
	})

	got := runs(t, dir, "drain", ev.ID)
	if len(got) != 1 {
		t.Fatalf("hook ran %d times, want 1", len(got))
	}
	wantEnv(t, got[0].env, map[string]string{
		"FOREWARN_EVENT_ID":         ev.ID,
		"FOREWARN_EVENT_TYPE":       "Reboot",
		"FOREWARN_EVENT_STATUS":     "Scheduled",
		"FOREWARN_NOT_BEFORE":       ev.NotBefore.UTC().Format(time.RFC3339),
		"FOREWARN_RESOURCES":        "web_0",
		"FOREWARN_EVENT_SOURCE":     "User",
		"FOREWARN_DURATION_SECONDS": "30",
		"FOREWARN_DESCRIPTION":      "Host server is undergoing maintenance.",
		"FOREWARN_PROVIDER":         "azure",
		"FOREWARN_VM":               "web_0",
	})
	if got[0].env["AGENT_TEST_MARK"] != "inherited" {
		t.Errorf("the agent's own environment was not passed on: AGENT_TEST_MARK=%q", got[0].env["AGENT_TEST_MARK"])
	}
	want := noticeJSON(t, ev, "Scheduled", forewarn.Azure)
	if got[0].stdin != want {
		t.Errorf("stdin:\n got %s\nwant %s", got[0].stdin, want)
	}
	bodies, ctypes := rc.got()
	if len(bodies) != 1 || bodies[0] != want || ctypes[0] != "application/json" {
		t.Errorf("webhook got %q (%q), want one %s as application/json", bodies, ctypes, want)
	}
	final := w.Event(ev.ID)
	if len(final.Approvals) != 1 || final.Approvals[0].By != "web_0" {
		t.Errorf("approvals %+v, want one by web_0", final.Approvals)
	}
	m := a.scrape(t)
	wantMetrics(t, m, map[string]float64{
		`forewarn_agent_events_seen_total{type="Reboot"}`:                     1,
		`forewarn_agent_handler_runs_total{kind="exec",result="success"}`:     1,
		`forewarn_agent_handler_runs_total{kind="exec",result="failure"}`:     0,
		`forewarn_agent_handler_runs_total{kind="webhook",result="success"}`:  1,
		`forewarn_agent_handler_runs_total{kind="webhook",result="failure"}`:  0,
		`forewarn_agent_handler_runs_total{kind="on_clear",result="success"}`: 0,
		`forewarn_agent_handler_failures_total{kind="exec"}`:                  0,
		`forewarn_agent_handler_duration_seconds_count{kind="exec"}`:          1,
		`forewarn_agent_handler_duration_seconds_count{kind="webhook"}`:       1,
		`forewarn_agent_approvals_total`:                                      1,
		`forewarn_agent_approval_errors_total`:                                0,
		`forewarn_agent_approval_lead_seconds_count`:                          1,
		`forewarn_agent_approval_lead_seconds_bucket{le="300"}`:               0,
		`forewarn_agent_approval_lead_seconds_bucket{le="900"}`:               1,
	})
	// The lead is NotBefore (10 minutes after the creation, rounded up to
	// a whole second) minus the approval time.
	if s, want := m[`forewarn_agent_approval_lead_seconds_sum`], time.Until(ev.NotBefore).Seconds(); s < want || s > want+2 {
		t.Errorf("approval lead %v s, want just over %v", s, want)
	}
	// The event started: Started is seen, nothing runs again.
	time.Sleep(200 * time.Millisecond)
	if n := len(runs(t, dir, "drain", ev.ID)); n != 1 {
		t.Errorf("hook ran %d times after the start, want 1", n)
	}
}

// TestLeaderRule: approving starts an event for all its Resources, so
// only the first of them approves; a Terminate is approved by the VM it
// deletes.
func TestLeaderRule(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	cfg := config(w, "web_0")
	cfg.Exec = []string{hook(dir, "drain")}
	cfg.Approve = true
	cfg.Types = []string{"reboot", "Terminate"}
	a := start(t, cfg)

	// web_1 leads: web_0 runs its handlers but does not approve.
	led := w.Create(engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_1", "web_0"}, Notice: 10 * time.Minute})
	waitFor(t, "the hook", 5*time.Second, func() bool { return len(runs(t, dir, "drain", led.ID)) == 1 })
	waitFor(t, "the decision", 5*time.Second, func() bool {
		return strings.Contains(a.logs.String(), "not approving: this VM is not the leader")
	})
	if ev := w.Event(led.ID); ev.Status != forewarn.Scheduled || len(ev.Approvals) != 0 {
		t.Fatalf("led event: %s approvals %+v, want Scheduled and none", ev.Status, ev.Approvals)
	}
	if got := runs(t, dir, "drain", led.ID)[0].env["FOREWARN_RESOURCES"]; got != "web_1,web_0" {
		t.Errorf("FOREWARN_RESOURCES %q", got)
	}

	// A Terminate of web_1 and web_0: web_0 approves its own.
	term := w.Create(engine.Spec{Type: forewarn.Terminate, VMs: []string{"web_1", "web_0"}, Notice: 10 * time.Minute})
	waitFor(t, "the approval", 5*time.Second, func() bool { return len(w.Event(term.ID).Approvals) == 1 })
	if ev := w.Event(term.ID); ev.Approvals[0].By != "web_0" {
		t.Fatalf("Terminate approvals %+v", ev.Approvals)
	}

	// An event of web_1 alone is not this VM's: nothing runs.
	other := w.Create(engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_1"}, Notice: 10 * time.Minute})
	time.Sleep(300 * time.Millisecond)
	if n := len(runs(t, dir, "drain", other.ID)); n != 0 {
		t.Errorf("the hook ran %d times for another VM's event", n)
	}
	a.wantMetrics(t, map[string]float64{
		`forewarn_agent_events_seen_total{type="Reboot"}`:                 1,
		`forewarn_agent_events_seen_total{type="Terminate"}`:              1,
		`forewarn_agent_handler_runs_total{kind="exec",result="success"}`: 2,
		`forewarn_agent_approvals_total`:                                  1,
	})
}

// TestFailureMeansNoApproval: a failing command or webhook leaves the
// event to start at its NotBefore, and is counted.
func TestFailureMeansNoApproval(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	rc := newReceiver(t, http.StatusInternalServerError)
	cfg := config(w, "solo")
	cfg.Exec = []string{"exit 3", hook(dir, "after")}
	cfg.Webhooks = []string{rc.url}
	cfg.Approve = true
	a := start(t, cfg)

	ev := w.Create(engine.Spec{Type: forewarn.Redeploy, VMs: []string{"solo"}, Notice: 10 * time.Minute})
	waitFor(t, "the webhook", 5*time.Second, func() bool { b, _ := rc.got(); return len(b) == 1 })
	waitFor(t, "the failure to be counted", 5*time.Second, func() bool {
		return a.scrape(t)[`forewarn_agent_handler_runs_total{kind="webhook",result="failure"}`] == 1
	})
	// Every handler runs, in order, even after a failure.
	if n := len(runs(t, dir, "after", ev.ID)); n != 1 {
		t.Errorf("the second command ran %d times, want 1", n)
	}
	time.Sleep(200 * time.Millisecond)
	if got := w.Event(ev.ID); got.Status != forewarn.Scheduled || len(got.Approvals) != 0 {
		t.Fatalf("after failed handlers: %s approvals %+v, want Scheduled and none", got.Status, got.Approvals)
	}
	a.wantMetrics(t, map[string]float64{
		`forewarn_agent_events_seen_total{type="Redeploy"}`:                  1,
		`forewarn_agent_handler_runs_total{kind="exec",result="success"}`:    1,
		`forewarn_agent_handler_runs_total{kind="exec",result="failure"}`:    1,
		`forewarn_agent_handler_runs_total{kind="webhook",result="failure"}`: 1,
		`forewarn_agent_handler_failures_total{kind="exec"}`:                 1,
		`forewarn_agent_handler_failures_total{kind="webhook"}`:              1,
		`forewarn_agent_approvals_total`:                                     0,
	})
}

// TestHandlerTimeoutKillsProcessGroup: a command past --handler-timeout
// is killed with its children and counts as a failure.
func TestHandlerTimeoutKillsProcessGroup(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	cfg := config(w, "solo")
	cfg.Exec = []string{fmt.Sprintf("sleep 60 & echo $! > %s.tmp; mv %[1]s.tmp %[1]s; wait", pidFile)}
	cfg.HandlerTimeout = 300 * time.Millisecond
	cfg.Approve = true
	a := start(t, cfg)

	ev := w.Create(engine.Spec{Type: forewarn.Reboot, VMs: []string{"solo"}, Notice: 10 * time.Minute})
	waitFor(t, "the timeout", 5*time.Second, func() bool {
		return a.scrape(t)[`forewarn_agent_handler_failures_total{kind="exec"}`] == 1
	})
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	waitFor(t, "the child to die", 2*time.Second, func() bool {
		// Dead, or a zombie waiting for a reaper.
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		return syscall.Kill(pid, 0) != nil || err == nil && strings.Contains(string(stat), ") Z ")
	})
	if got := w.Event(ev.ID); got.Status != forewarn.Scheduled {
		t.Fatalf("a timed-out handler's event is %s, want Scheduled (not approved)", got.Status)
	}
	if !strings.Contains(a.logs.String(), "handler timed out") {
		t.Errorf("no timeout logged:\n%s", a.logs)
	}
}

// TestLead: with a lead time the handlers run that long before
// NotBefore; an event already Started runs at once.
func TestLead(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	cfg := config(w, "solo")
	cfg.Exec = []string{hook(dir, "drain")}
	cfg.Lead = 2 * time.Second
	start(t, cfg)

	ev := w.Create(engine.Spec{Type: forewarn.Reboot, VMs: []string{"solo"}, Notice: 4 * time.Second, Source: forewarn.User})
	due := ev.NotBefore.Add(-2 * time.Second)
	time.Sleep(time.Until(due) - 300*time.Millisecond)
	if n := len(runs(t, dir, "drain", ev.ID)); n != 0 {
		t.Fatalf("the hook ran %v before its lead time", time.Until(due))
	}
	waitFor(t, "the hook", 5*time.Second, func() bool { return len(runs(t, dir, "drain", ev.ID)) == 1 })
	r := runs(t, dir, "drain", ev.ID)[0]
	if d := r.at.Sub(due); d < 0 || d > 500*time.Millisecond {
		t.Errorf("hook ran %v after NotBefore-lead, want within 500ms", d)
	}
	if r.env["FOREWARN_EVENT_STATUS"] != "Scheduled" {
		t.Errorf("status %q", r.env["FOREWARN_EVENT_STATUS"])
	}

	// Lead longer than the notice left: at once.
	soon := w.Create(engine.Spec{Type: forewarn.Reboot, VMs: []string{"solo"}, Notice: time.Second, Source: forewarn.User})
	created := time.Now()
	waitFor(t, "the hook", 5*time.Second, func() bool { return len(runs(t, dir, "drain", soon.ID)) == 1 })
	if d := runs(t, dir, "drain", soon.ID)[0].at.Sub(created); d > 500*time.Millisecond {
		t.Errorf("an event inside the lead time ran after %v, want at once", d)
	}

	// Already Started: at once.
	started := w.Create(engine.Spec{Type: forewarn.Redeploy, VMs: []string{"solo"}, Started: true, Source: forewarn.User})
	waitFor(t, "the hook", 5*time.Second, func() bool { return len(runs(t, dir, "drain", started.ID)) == 1 })
	if r := runs(t, dir, "drain", started.ID)[0]; r.env["FOREWARN_EVENT_STATUS"] != "Started" || r.env["FOREWARN_NOT_BEFORE"] != "" {
		t.Errorf("started event: status %q not before %q", r.env["FOREWARN_EVENT_STATUS"], r.env["FOREWARN_NOT_BEFORE"])
	}
}

// TestLeadWaitEndsWhenStarted: an approval by another VM starts the
// event, which ends the wait for the lead time.
func TestLeadWaitEndsWhenStarted(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	cfg := config(w, "web_0")
	cfg.Exec = []string{hook(dir, "drain")}
	cfg.Lead = time.Minute
	start(t, cfg)
	ev := w.Create(engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_0"}, Notice: 10 * time.Minute})
	time.Sleep(200 * time.Millisecond)
	if n := len(runs(t, dir, "drain", ev.ID)); n != 0 {
		t.Fatal("the hook ran before its lead time")
	}
	w.Approve("web_1", ev.ID)
	waitFor(t, "the hook", 5*time.Second, func() bool { return len(runs(t, dir, "drain", ev.ID)) == 1 })
	if s := runs(t, dir, "drain", ev.ID)[0].env["FOREWARN_EVENT_STATUS"]; s != "Started" {
		t.Errorf("status %q, want Started", s)
	}
}

// TestOnClearAndState: on-clear runs when a handled event completes; a
// restarted agent with the same state file does not handle an event
// again, but still runs on-clear for it; an event that cleared while
// the agent was down is cleared at start.
func TestOnClearAndState(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state", "state.json")
	if err := os.Mkdir(filepath.Dir(state), 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := config(w, "solo")
	cfg.Exec = []string{hook(dir, "drain")}
	cfg.OnClear = []string{hook(dir, "undrain")}
	cfg.Approve = true
	cfg.StateFile = state
	a := start(t, cfg)

	ev := w.Create(engine.Spec{Type: forewarn.Reboot, VMs: []string{"solo"}, Notice: 10 * time.Minute, Lasts: time.Hour})
	w.Wait(ev.ID, forewarn.Started) // the agent approved it
	waitFor(t, "the state file", 5*time.Second, func() bool {
		b, _ := os.ReadFile(state)
		return strings.Contains(string(b), ev.ID)
	})
	if st, err := os.Stat(state); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("state file: %v %v, want mode 0600", st.Mode(), err)
	}

	// Restart: the Started event is not handled again.
	a.stop(t)
	b := start(t, cfg)
	time.Sleep(300 * time.Millisecond)
	if n := len(runs(t, dir, "drain", ev.ID)); n != 1 {
		t.Fatalf("after a restart the hook ran %d times, want 1", n)
	}
	if !strings.Contains(b.logs.String(), "event already handled before a restart") {
		t.Errorf("restart not logged:\n%s", b.logs)
	}

	// Completion: on-clear runs once, describing the event as last seen.
	w.Complete(ev.ID)
	waitFor(t, "on-clear", 5*time.Second, func() bool { return len(runs(t, dir, "undrain", ev.ID)) == 1 })
	r := runs(t, dir, "undrain", ev.ID)[0]
	wantEnv(t, r.env, map[string]string{
		"FOREWARN_EVENT_ID": ev.ID, "FOREWARN_EVENT_TYPE": "Reboot", "FOREWARN_EVENT_STATUS": "Started",
		"FOREWARN_NOT_BEFORE": "", "FOREWARN_RESOURCES": "solo", "FOREWARN_EVENT_SOURCE": "Platform",
		"FOREWARN_DURATION_SECONDS": "-1", "FOREWARN_DESCRIPTION": "", "FOREWARN_PROVIDER": "azure", "FOREWARN_VM": "solo",
	})
	if want := noticeJSON(t, ev, "Started", forewarn.Azure); r.stdin != want {
		t.Errorf("on-clear stdin:\n got %s\nwant %s", r.stdin, want)
	}
	waitFor(t, "the state file to forget the event", 5*time.Second, func() bool {
		b, _ := os.ReadFile(state)
		return !strings.Contains(string(b), ev.ID)
	})
	b.wantMetrics(t, map[string]float64{
		`forewarn_agent_events_seen_total{type="Reboot"}`:                     1,
		`forewarn_agent_handler_runs_total{kind="exec",result="success"}`:     0,
		`forewarn_agent_handler_runs_total{kind="on_clear",result="success"}`: 1,
	})

	// An event handled, then completed while the agent is down, is
	// cleared when it starts again.
	ev2 := w.Create(engine.Spec{Type: forewarn.Reboot, VMs: []string{"solo"}, Notice: 10 * time.Minute, Lasts: time.Hour})
	w.Wait(ev2.ID, forewarn.Started)
	waitFor(t, "the state file to hold the Started event", 5*time.Second, func() bool {
		b, _ := os.ReadFile(state)
		return strings.Contains(string(b), ev2.ID) && strings.Contains(string(b), `"status": "Started"`)
	})
	b.stop(t)
	w.Complete(ev2.ID)
	start(t, cfg)
	waitFor(t, "on-clear after the restart", 5*time.Second, func() bool { return len(runs(t, dir, "undrain", ev2.ID)) == 1 })
	if got := runs(t, dir, "undrain", ev2.ID)[0]; got.env["FOREWARN_EVENT_STATUS"] != "Started" || got.stdin != noticeJSON(t, ev2, "Started", forewarn.Azure) {
		t.Errorf("on-clear after a restart: status %q stdin %s", got.env["FOREWARN_EVENT_STATUS"], got.stdin)
	}
	if n := len(runs(t, dir, "drain", ev2.ID)); n != 1 {
		t.Errorf("hook ran %d times, want 1", n)
	}
	// No temporary files are left next to the state file. The agent may be
	// mid-save (a temporary file exists until its rename), so wait for the
	// directory to settle rather than read it once.
	waitFor(t, "the state directory to hold only state.json", 5*time.Second, func() bool {
		entries, _ := os.ReadDir(filepath.Dir(state))
		return len(entries) == 1 && entries[0].Name() == filepath.Base(state)
	})
}

// TestCorruptStateRefused: New refuses a corrupt state file, naming it.
func TestCorruptStateRefused(t *testing.T) {
	dir := t.TempDir()
	for _, body := range []string{"{not json", `{"version":1,"events":[{"notice":{}}]}`, `{"version":9,"events":[]}`, `{"version":1}{}`} {
		state := filepath.Join(dir, "state.json")
		os.WriteFile(state, []byte(body), 0o600)
		_, err := agent.New(agent.Config{Provider: agent.ProviderAzure, StateFile: state})
		if err == nil || !strings.Contains(err.Error(), state) {
			t.Errorf("state %q: New returned %v, want an error naming %s", body, err, state)
		}
	}
	// A state file in a directory that does not exist stops the start too.
	missing := filepath.Join(dir, "nope", "state.json")
	if _, err := agent.New(agent.Config{Provider: agent.ProviderAzure, StateFile: missing}); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("state in a missing directory: %v", err)
	}
}

// TestDryRun: nothing runs and nothing is approved; the log says what
// would have.
func TestDryRun(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	rc := newReceiver(t, 200)
	cfg := config(w, "solo")
	cfg.Exec = []string{hook(dir, "drain")}
	cfg.Webhooks = []string{rc.url}
	cfg.OnClear = []string{hook(dir, "undrain")}
	cfg.Approve = true
	cfg.DryRun = true
	cfg.StateFile = filepath.Join(dir, "state.json")
	a := start(t, cfg)

	ev := w.Create(engine.Spec{Type: forewarn.Reboot, VMs: []string{"solo"}, Notice: 10 * time.Minute})
	waitFor(t, "the dry-run approval", 5*time.Second, func() bool {
		return strings.Contains(a.logs.String(), "dry run: would approve")
	})
	w.Cancel(ev.ID)
	waitFor(t, "the dry-run on-clear", 5*time.Second, func() bool {
		return strings.Count(a.logs.String(), "dry run: would run") == 2
	})
	logs := a.logs.String()
	for _, want := range []string{`"kind":"exec"`, `"kind":"on_clear"`, `"msg":"dry run: would post"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %s:\n%s", want, logs)
		}
	}
	if got := w.Event(ev.ID); len(got.Approvals) != 0 {
		t.Errorf("dry run approved: %+v", got.Approvals)
	}
	if entries, _ := filepath.Glob(filepath.Join(dir, "*.env.*")); len(entries) != 0 {
		t.Errorf("dry run ran commands: %v", entries)
	}
	if b, _ := rc.got(); len(b) != 0 {
		t.Errorf("dry run posted %q", b)
	}
	if _, err := os.Stat(cfg.StateFile); !os.IsNotExist(err) {
		t.Errorf("dry run wrote the state file: %v", err)
	}
	a.wantMetrics(t, map[string]float64{
		`forewarn_agent_events_seen_total{type="Reboot"}`:                 1,
		`forewarn_agent_handler_runs_total{kind="exec",result="success"}`: 0,
		`forewarn_agent_approvals_total`:                                  0,
	})
}

// TestTypesFilter: a type not selected (Freeze by default) is seen and
// counted but not acted on.
func TestTypesFilter(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	cfg := config(w, "solo")
	cfg.Exec = []string{hook(dir, "drain")}
	cfg.OnClear = []string{hook(dir, "undrain")}
	a := start(t, cfg)
	fz := w.Create(engine.Spec{Type: forewarn.Freeze, VMs: []string{"solo"}, Notice: time.Second, Lasts: time.Second})
	w.Wait(fz.ID, forewarn.Completed)
	time.Sleep(200 * time.Millisecond)
	if entries, _ := filepath.Glob(filepath.Join(dir, "*.env.*")); len(entries) != 0 {
		t.Errorf("a Freeze ran handlers: %v", entries)
	}
	a.wantMetrics(t, map[string]float64{
		`forewarn_agent_events_seen_total{type="Freeze"}`:                     1,
		`forewarn_agent_handler_runs_total{kind="exec",result="success"}`:     0,
		`forewarn_agent_handler_runs_total{kind="on_clear",result="success"}`: 0,
	})
}

// TestHealthz: 503 until the agent watches, then 200 "ok".
func TestHealthz(t *testing.T) {
	w := newWorld(t)
	cfg := config(w, "solo")
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(a.Handler())
	defer hs.Close()
	get := func() (int, string) {
		resp, err := http.Get(hs.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get(); code != http.StatusServiceUnavailable {
		t.Fatalf("healthz before Run: %d", code)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	waitFor(t, "ready", 5*time.Second, a.Ready)
	if code, body := get(); code != 200 || body != "ok\n" {
		t.Fatalf("healthz: %d %q", code, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestRunErrors: a VM the metadata service does not know stops Run with
// an error; auto finds the provider of the calling VM.
func TestRunErrors(t *testing.T) {
	w := newWorld(t)
	cfg := config(w, "solo")
	cfg.HTTPClient = w.HTTPClientFrom(netip.MustParseAddr("127.0.0.99"))
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Run(ctx); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("Run for an unknown VM: %v, want a 403", err)
	}

	bad := []agent.Config{
		{Provider: "ec2"},
		{Types: []string{"Reboot", "Nap"}},
		{Lead: -time.Second},
		{Webhooks: []string{"ftp://x"}},
		{Exec: []string{" "}},
		{Endpoint: "169.254.169.254"},
	}
	for _, c := range bad {
		if _, err := agent.New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
}

// TestAutoProbe: auto picks the API that answers for the calling VM.
func TestAutoProbe(t *testing.T) {
	w := newWorld(t)
	// An EC2 VM's name is its instance ID.
	for name, want := range map[string][2]string{"solo": {"azure", "solo"}, "gce_0": {"gce", "gce_0"}, "ec2_0": {"aws", "i-0123456789abcdef0"}} {
		cfg := config(w, name)
		cfg.Provider = agent.ProviderAuto
		a := start(t, cfg)
		if !strings.Contains(a.logs.String(), `"msg":"provider detected","provider":"`+want[0]+`"`) {
			t.Errorf("%s: provider not detected as %s:\n%s", name, want[0], a.logs)
		}
		if !strings.Contains(a.logs.String(), `"vm":"`+want[1]+`"`) {
			t.Errorf("%s: VM name not read:\n%s", name, a.logs)
		}
		a.stop(t)
	}
	// Nothing answers: a clear error.
	a, err := agent.New(agent.Config{Endpoint: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "no metadata service answered") {
		t.Fatalf("Run with nothing to probe: %v", err)
	}
}

// TestGCEMigrationAndPreemption: a live migration reaches the command
// when maintenance-event flips, on-clear runs when it flips back; a
// preemption reaches the command too.
func TestGCEMigrationAndPreemption(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	cfg := config(w, "gce_0")
	cfg.Exec = []string{hook(dir, "drain")}
	cfg.OnClear = []string{hook(dir, "undrain")}
	a := start(t, cfg)

	created := time.Now()
	ev := w.Create(engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"gce_0"}, Notice: 2 * time.Second, Lasts: 2 * time.Second})
	var id string
	waitFor(t, "the hook", 5*time.Second, func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "drain.env.maintenance-event-*"))
		if len(m) == 1 {
			id = strings.TrimSuffix(strings.TrimPrefix(filepath.Base(m[0]), "drain.env."), ".0")
		}
		return len(m) == 1
	})
	r := runs(t, dir, "drain", id)[0]
	if d := r.at.Sub(created); d > time.Second {
		t.Errorf("hook ran %v after the event was raised, want within 1 s", d)
	}
	if r.env["FOREWARN_EVENT_TYPE"] != "MIGRATE_ON_HOST_MAINTENANCE" || r.env["FOREWARN_PROVIDER"] != "gce" ||
		r.env["FOREWARN_EVENT_STATUS"] != "Started" || r.env["FOREWARN_VM"] != "gce_0" {
		t.Errorf("migration env %v", r.env)
	}
	w.Wait(ev.ID, forewarn.Completed)
	waitFor(t, "on-clear", 5*time.Second, func() bool { return len(runs(t, dir, "undrain", id)) == 1 })
	a.wantMetrics(t, map[string]float64{
		`forewarn_agent_events_seen_total{type="MIGRATE_ON_HOST_MAINTENANCE"}`: 1,
		`forewarn_agent_handler_runs_total{kind="exec",result="success"}`:      1,
		`forewarn_agent_handler_runs_total{kind="on_clear",result="success"}`:  1,
	})

	// Preemption of a Spot VM.
	scfg := config(w, "spot_0")
	scfg.Exec = []string{hook(dir, "spot")}
	start(t, scfg)
	w.Evict("spot_0")
	waitFor(t, "the preemption hook", 5*time.Second, func() bool { return len(runs(t, dir, "spot", "preempted")) == 1 })
	if r := runs(t, dir, "spot", "preempted")[0]; r.env["FOREWARN_EVENT_TYPE"] != "Preempt" || r.env["FOREWARN_PROVIDER"] != "gce" {
		t.Errorf("preemption env %v", r.env)
	}
}

// TestAWSSpotInterruption: on EC2 the agent's name is the instance ID;
// an active scheduled event reaches the command as its Code, with
// on-clear when it completes; a Spot interruption's notice reaches the
// command as Preempt, once, within a poll of its appearance, while the
// rebalance recommendation, not a default type, is only seen; --approve
// approves nothing, and says so at debug level.
func TestAWSSpotInterruption(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	cfg := config(w, "ec2_0")
	cfg.Exec = []string{hook(dir, "drain")}
	cfg.OnClear = []string{hook(dir, "undrain")}
	cfg.Approve = true
	a := start(t, cfg)
	if !strings.Contains(a.logs.String(), `"vm":"i-0123456789abcdef0"`) ||
		!strings.Contains(a.logs.String(), `"msg":"--approve has no effect: the provider has no approval API","provider":"aws"`) {
		t.Fatalf("start logs:\n%s", a.logs)
	}

	ev := w.Create(engine.Spec{Type: forewarn.SystemReboot, VMs: []string{"ec2_0"}, Notice: 2 * time.Second, Lasts: time.Second})
	id := aws.EventID(ev.ID)
	waitFor(t, "the scheduled event's hook", 5*time.Second, func() bool { return len(runs(t, dir, "drain", id)) == 1 })
	r := runs(t, dir, "drain", id)[0]
	if r.env["FOREWARN_EVENT_TYPE"] != "system-reboot" || r.env["FOREWARN_PROVIDER"] != "aws" || r.env["FOREWARN_EVENT_STATUS"] != "Scheduled" ||
		r.env["FOREWARN_VM"] != "i-0123456789abcdef0" || r.env["FOREWARN_RESOURCES"] != "i-0123456789abcdef0" ||
		r.env["FOREWARN_NOT_BEFORE"] != ev.NotBefore.UTC().Format(time.RFC3339) || r.env["FOREWARN_DESCRIPTION"] != "scheduled reboot" {
		t.Errorf("scheduled event env %v", r.env)
	}
	waitFor(t, "on-clear once completed", 10*time.Second, func() bool { return len(runs(t, dir, "undrain", id)) == 1 })
	if w.Approved(ev.ID) {
		t.Error("an EC2 event was approved")
	}
	if want := `"msg":"not approving: the provider has no approval API","event":"` + id + `","type":"system-reboot","provider":"aws"`; !strings.Contains(a.logs.String(), want) {
		t.Errorf("no debug line %s in\n%s", want, a.logs)
	}

	evicted := time.Now()
	pre, err := w.Engine().EvictWith(t.Context(), "ec2_0", engine.VMOptions{Notice: 3 * time.Second, Lasts: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	nid := "spot-instance-action-" + pre.NotBefore.UTC().Format(time.RFC3339)
	waitFor(t, "the interruption hook", 5*time.Second, func() bool { return len(runs(t, dir, "drain", nid)) == 1 })
	r = runs(t, dir, "drain", nid)[0]
	if d := r.at.Sub(evicted); d > time.Second {
		t.Errorf("the interruption hook ran %v after the evict, want within 1 s", d)
	}
	if r.env["FOREWARN_EVENT_TYPE"] != "Preempt" || r.env["FOREWARN_PROVIDER"] != "aws" || r.env["FOREWARN_EVENT_STATUS"] != "Scheduled" ||
		r.env["FOREWARN_NOT_BEFORE"] != pre.NotBefore.UTC().Format(time.RFC3339) {
		t.Errorf("interruption env %v", r.env)
	}
	rb := "rebalance-recommendation-" + pre.Created.UTC().Format(time.RFC3339)
	w.Wait(pre.ID, forewarn.Started)
	time.Sleep(200 * time.Millisecond) // a few polls after the start; the hook must not run again
	if n := len(runs(t, dir, "drain", nid)); n != 1 {
		t.Errorf("the interruption hook ran %d times, want once", n)
	}
	if n := len(runs(t, dir, "drain", rb)); n != 0 {
		t.Errorf("the rebalance recommendation ran the hook %d times, want none", n)
	}
	a.wantMetrics(t, map[string]float64{
		`forewarn_agent_events_seen_total{type="system-reboot"}`:            1,
		`forewarn_agent_events_seen_total{type="Preempt"}`:                  1,
		`forewarn_agent_events_seen_total{type="REBALANCE_RECOMMENDATION"}`: 1,
		`forewarn_agent_handler_runs_total{kind="exec",result="success"}`:   2,
		`forewarn_agent_approvals_total`:                                    0,
	})
}

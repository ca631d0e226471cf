package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
)

// The agent's requests come from 127.0.0.1, so its VM has that address;
// the CLI's come from there too, so the tests' servers have a token.
const agentFleet = `vms:
  - name: agent_vm
    ip: 127.0.0.1
    availabilitySet: web
  - name: peer_vm
    ip: 127.0.0.21
    availabilitySet: web
`

// hookScript records each run of a handler named $1 in its directory:
// the environment and stdin, in files named by event ID and run number.
// It fails when the event's description is "fail".
const hookScript = `#!/bin/sh
d=$(dirname "$0")
n=$(ls "$d" | grep -c "^$1\.env\.$FOREWARN_EVENT_ID\." || true)
env > "$d/.env.$$"
cat > "$d/.in.$$"
mv "$d/.in.$$" "$d/$1.stdin.$FOREWARN_EVENT_ID.$n"
mv "$d/.env.$$" "$d/$1.env.$FOREWARN_EVENT_ID.$n"
[ "$FOREWARN_DESCRIPTION" != fail ]
`

// lockedBuffer is a bytes.Buffer safe to read while a child writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// agentProc is one run of 'forewarn agent' as a child process.
type agentProc struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	addr   string // of /healthz and /metrics
	exited chan struct{}
}

// startAgent runs 'forewarn agent args... --listen 127.0.0.1:0' and
// waits until /healthz answers ok.
func startAgent(t *testing.T, args ...string) *agentProc {
	t.Helper()
	p := &agentProc{stderr: new(lockedBuffer), exited: make(chan struct{})}
	p.cmd = exec.Command(binary, append(append([]string{"agent"}, args...), "--listen", "127.0.0.1:0")...)
	p.cmd.Stderr = p.stderr
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
	})
	lines := bufio.NewScanner(out)
	if !lines.Scan() {
		p.cmd.Wait()
		close(p.exited)
		t.Fatalf("agent exited before listening: %s", p.stderr)
	}
	a, ok := strings.CutPrefix(lines.Text(), "agent listening on ")
	if !ok {
		t.Fatalf("agent printed %q", lines.Text())
	}
	p.addr = a
	go func() {
		io.Copy(io.Discard, out)
		p.cmd.Wait()
		close(p.exited)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + p.addr + "/healthz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && string(b) == "ok\n" {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent not healthy within 10 s: %v\n%s", err, p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends SIGTERM and checks the agent exits 0 promptly.
func (p *agentProc) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("agent did not exit within 10 s of SIGTERM\n%s", p.stderr)
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("agent exit %d after SIGTERM\n%s", code, p.stderr)
	}
}

// metrics scrapes the agent's /metrics into samples by "name{labels}".
func (p *agentProc) metrics(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

// wantMetrics waits up to 5 s for the samples in want (a handler's run
// is counted when its process has exited, just after its last write).
func (p *agentProc) wantMetrics(t *testing.T, want map[string]float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := p.metrics(t)
		var bad []string
		for k, v := range want {
			if g, ok := got[k]; !ok || g != v {
				bad = append(bad, fmt.Sprintf("%s = %v (present %v), want %v", k, g, ok, v))
			}
		}
		if len(bad) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics:\n%s", strings.Join(bad, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// hookRun is one recorded run of a hook.
type hookRun struct {
	env   map[string]string
	stdin string
	at    time.Time
}

// hookRuns returns the runs of hook name for event id recorded in dir.
func hookRuns(t *testing.T, dir, name, id string) []hookRun {
	t.Helper()
	var out []hookRun
	for n := 0; ; n++ {
		envFile := filepath.Join(dir, fmt.Sprintf("%s.env.%s.%d", name, id, n))
		env, err := os.ReadFile(envFile)
		if os.IsNotExist(err) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(envFile)
		if err != nil {
			t.Fatal(err)
		}
		in, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%s.stdin.%s.%d", name, id, n)))
		if err != nil {
			t.Fatal(err)
		}
		r := hookRun{env: map[string]string{}, stdin: string(in), at: st.ModTime()}
		for line := range strings.SplitSeq(string(env), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok && strings.HasPrefix(k, "FOREWARN_") {
				r.env[k] = v
			}
		}
		out = append(out, r)
	}
}

// waitRuns waits until hook name ran n times for event id.
func waitRuns(t *testing.T, dir, name, id string, n int, timeout time.Duration) []hookRun {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r := hookRuns(t, dir, name, id)
		if len(r) >= n {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("hook %s ran %d times for %s within %v, want %d", name, len(r), id, timeout, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// writeHooks writes the hook script into dir and returns the commands
// that run it as the drain and undrain hooks.
func writeHooks(t *testing.T, dir string) (drain, undrain string) {
	t.Helper()
	script := filepath.Join(dir, "hook.sh")
	if err := os.WriteFile(script, []byte(hookScript), 0o700); err != nil {
		t.Fatal(err)
	}
	return script + " drain", script + " undrain"
}

// webhookSink records the JSON POSTs it receives.
type webhookSink struct {
	mu     sync.Mutex
	bodies []string
	ctypes []string
}

func newWebhookSink(t *testing.T) (*webhookSink, string) {
	w := &webhookSink{}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.mu.Lock()
		w.bodies = append(w.bodies, string(b))
		w.ctypes = append(w.ctypes, r.Header.Get("Content-Type"))
		w.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return w, srv.URL + "/maintenance"
}

func (w *webhookSink) got() ([]string, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.bodies...), append([]string(nil), w.ctypes...)
}

// noticeOf is the Notice JSON the handlers get for ev seen Scheduled.
func noticeOf(t *testing.T, ev *forewarn.Event, p forewarn.Provider) string {
	t.Helper()
	b, err := json.Marshal(forewarn.Notice{ID: ev.ID, Type: string(ev.Type), Status: "Scheduled", Resources: ev.Resources,
		NotBefore: ev.NotBefore.UTC(), Duration: ev.Duration, Source: string(ev.Source), Description: ev.Description, Provider: p})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestAgentAzureEndToEnd runs the real agent against the real server:
// handlers with every variable, a webhook, approval after success and
// none after a failure, on-clear after completion, a restart with
// --state, and --lead.
func TestAgentAzureEndToEnd(t *testing.T) {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleet, []byte(agentFleet), 0o600); err != nil {
		t.Fatal(err)
	}
	hooks := filepath.Join(dir, "hooks")
	if err := os.Mkdir(hooks, 0o700); err != nil {
		t.Fatal(err)
	}
	drain, undrain := writeHooks(t, hooks)
	sink, webhook := newWebhookSink(t)
	s := startServerToken(t, filepath.Join(dir, "data"), fleet)
	state := filepath.Join(dir, "state.json")
	args := []string{"--provider", "azure", "--endpoint", "http://" + s.metadata, "--vm", "agent_vm",
		"--exec", drain, "--webhook", webhook, "--on-clear", undrain, "--approve", "--state", state, "--poll-interval", "100ms"}
	a := startAgent(t, args...)

	// 1. A Reboot of this VM: the hook gets every variable and the JSON,
	// the webhook the same JSON, and the approval starts the event.
	id := strings.TrimSpace(s.mustCLI(t, "event", "create", "--type", "Reboot", "--vm", "agent_vm",
		"--duration", "60", "--description", "Planned maintenance", "--lasts", "1h"))
	r := waitRuns(t, hooks, "drain", id, 1, 5*time.Second)[0]
	// The approval may have started the event already, which clears its
	// NotBefore: it was the 15-minute notice rounded up to a second.
	ev := s.event(t, id)
	ev.NotBefore = ev.Created.Add(15 * time.Minute).Truncate(time.Second)
	if !ev.NotBefore.Equal(ev.Created.Add(15 * time.Minute)) {
		ev.NotBefore = ev.NotBefore.Add(time.Second)
	}
	want := map[string]string{
		"FOREWARN_EVENT_ID":         id,
		"FOREWARN_EVENT_TYPE":       "Reboot",
		"FOREWARN_EVENT_STATUS":     "Scheduled",
		"FOREWARN_NOT_BEFORE":       ev.NotBefore.UTC().Format(time.RFC3339),
		"FOREWARN_RESOURCES":        "agent_vm",
		"FOREWARN_EVENT_SOURCE":     "Platform",
		"FOREWARN_DURATION_SECONDS": "60",
		"FOREWARN_DESCRIPTION":      "Planned maintenance",
		"FOREWARN_PROVIDER":         "azure",
		"FOREWARN_VM":               "agent_vm",
	}
	for k, v := range want {
		if r.env[k] != v {
			t.Errorf("%s = %q, want %q", k, r.env[k], v)
		}
	}
	if len(r.env) != len(want) {
		t.Errorf("FOREWARN_ variables %v, want exactly %v", r.env, want)
	}
	notice := noticeOf(t, ev, forewarn.Azure)
	if r.stdin != notice {
		t.Errorf("stdin:\n got %s\nwant %s", r.stdin, notice)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.event(t, id).Status != forewarn.Started {
		if time.Now().After(deadline) {
			t.Fatalf("event not Started after the hook succeeded\n%s", a.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	started := s.event(t, id)
	if len(started.Approvals) != 1 || started.Approvals[0].By != "agent_vm" {
		t.Errorf("approvals %+v, want one by agent_vm", started.Approvals)
	}
	if d := started.StartedAt.Sub(r.at); d < 0 || d > time.Second {
		t.Errorf("event started %v after the hook ran, want right after", d)
	}
	bodies, ctypes := sink.got()
	if len(bodies) != 1 || bodies[0] != notice || ctypes[0] != "application/json" {
		t.Errorf("webhook got %q %q, want %s as application/json", bodies, ctypes, notice)
	}

	// 2. A failing hook: no approval, the event stays Scheduled.
	fid := strings.TrimSpace(s.mustCLI(t, "event", "create", "--type", "Redeploy", "--vm", "agent_vm", "--description", "fail"))
	waitRuns(t, hooks, "drain", fid, 1, 5*time.Second)
	deadline = time.Now().Add(5 * time.Second)
	for a.metrics(t)[`forewarn_agent_handler_failures_total{kind="exec"}`] != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("failure not counted\n%s", a.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	if ev := s.event(t, fid); ev.Status != forewarn.Scheduled || len(ev.Approvals) != 0 {
		t.Fatalf("after a failed hook: %s approvals %+v, want Scheduled and none", ev.Status, ev.Approvals)
	}

	// 3. Completion of the first event runs on-clear with its last view.
	s.mustCLI(t, "event", "complete", id)
	u := waitRuns(t, hooks, "undrain", id, 1, 5*time.Second)[0]
	if u.env["FOREWARN_EVENT_ID"] != id || u.env["FOREWARN_EVENT_STATUS"] != "Started" || u.env["FOREWARN_NOT_BEFORE"] != "" {
		t.Errorf("on-clear env %v", u.env)
	}
	a.wantMetrics(t, map[string]float64{
		`forewarn_agent_events_seen_total{type="Reboot"}`:                     1,
		`forewarn_agent_events_seen_total{type="Redeploy"}`:                   1,
		`forewarn_agent_handler_runs_total{kind="exec",result="success"}`:     1,
		`forewarn_agent_handler_runs_total{kind="exec",result="failure"}`:     1,
		`forewarn_agent_handler_runs_total{kind="webhook",result="success"}`:  2,
		`forewarn_agent_handler_runs_total{kind="webhook",result="failure"}`:  0,
		`forewarn_agent_handler_runs_total{kind="on_clear",result="success"}`: 1,
		`forewarn_agent_handler_failures_total{kind="exec"}`:                  1,
		`forewarn_agent_handler_duration_seconds_count{kind="exec"}`:          2,
		`forewarn_agent_approvals_total`:                                      1,
		`forewarn_agent_approval_lead_seconds_count`:                          1,
	})

	// 4. A restart with the same --state: the failed event was handled
	// and is not handled again; its cancellation runs on-clear.
	a.stop(t)
	if !strings.Contains(a.stderr.String(), `"msg":"stopping"`) {
		t.Errorf("no clean stop logged:\n%s", a.stderr)
	}
	a = startAgent(t, args...)
	time.Sleep(500 * time.Millisecond)
	if n := len(hookRuns(t, hooks, "drain", fid)); n != 1 {
		t.Fatalf("after the restart the hook ran %d times for %s, want 1\n%s", n, fid, a.stderr)
	}
	s.mustCLI(t, "event", "cancel", fid)
	waitRuns(t, hooks, "undrain", fid, 1, 5*time.Second)
	// The hook fails for this event's description, on-clear included.
	a.wantMetrics(t, map[string]float64{
		`forewarn_agent_events_seen_total{type="Redeploy"}`:                   1,
		`forewarn_agent_handler_runs_total{kind="exec",result="success"}`:     0,
		`forewarn_agent_handler_runs_total{kind="exec",result="failure"}`:     0,
		`forewarn_agent_handler_runs_total{kind="on_clear",result="failure"}`: 1,
		`forewarn_agent_handler_failures_total{kind="on_clear"}`:              1,
	})
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile(state)
		if err == nil && !strings.Contains(string(b), fid) && !strings.Contains(string(b), id) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("state file after both events cleared: %s %v", b, err)
		}
	}
	a.stop(t)

	// 5. --lead 3s (and --provider auto): the hook runs 3 s before
	// NotBefore, not when the event appears.
	a = startAgent(t, "--provider", "auto", "--endpoint", "http://"+s.metadata, "--vm", "agent_vm",
		"--exec", drain, "--lead", "3s", "--poll-interval", "100ms")
	lid := strings.TrimSpace(s.mustCLI(t, "event", "create", "--type", "Reboot", "--vm", "agent_vm", "--notice", "6s"))
	lr := waitRuns(t, hooks, "drain", lid, 1, 10*time.Second)[0]
	due := s.event(t, lid).NotBefore.Add(-3 * time.Second)
	if d := lr.at.Sub(due); d < -time.Second || d > time.Second {
		t.Errorf("hook ran %v from NotBefore-3s, want within ±1 s", d)
	}
	a.stop(t)
	s.stop(t)
}

// TestAgentGCEEndToEnd: a live migration reaches the hook within a
// second of the maintenance-event flip and on-clear runs when it ends; a
// Spot VM's preemption reaches the hook too.
func TestAgentGCEEndToEnd(t *testing.T) {
	dir := t.TempDir()
	hooks := filepath.Join(dir, "hooks")
	if err := os.Mkdir(hooks, 0o700); err != nil {
		t.Fatal(err)
	}
	drain, undrain := writeHooks(t, hooks)

	fleet := filepath.Join(dir, "gce.yaml")
	if err := os.WriteFile(fleet, []byte("vms:\n  - name: gce_vm\n    ip: 127.0.0.1\n    provider: gce\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServerToken(t, filepath.Join(dir, "data"), fleet)
	a := startAgent(t, "--provider", "gce", "--endpoint", "http://"+s.metadata, "--exec", drain, "--on-clear", undrain)
	created := time.Now()
	id := strings.TrimSpace(s.mustCLI(t, "event", "create", "--type", "MIGRATE_ON_HOST_MAINTENANCE", "--vm", "gce_vm", "--notice", "2s", "--lasts", "2s"))
	var nid string
	deadline := time.Now().Add(5 * time.Second)
	for nid == "" {
		m, _ := filepath.Glob(filepath.Join(hooks, "drain.env.maintenance-event-*.0"))
		if len(m) == 1 {
			nid = strings.TrimSuffix(strings.TrimPrefix(filepath.Base(m[0]), "drain.env."), ".0")
		} else if time.Now().After(deadline) {
			t.Fatalf("no migration hook within 5 s\n%s", a.stderr)
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	r := hookRuns(t, hooks, "drain", nid)[0]
	// The agent watches the key, so the migration, inside its 60 s
	// lead, flips it at once.
	if ev := s.event(t, id); ev.WarnedAt.IsZero() || ev.Created.Before(created) {
		t.Fatalf("event %+v: want warned, created after %v", ev, created)
	}
	if d := r.at.Sub(created); d > time.Second {
		t.Errorf("hook ran %v after the key flipped, want within 1 s", d)
	}
	if r.env["FOREWARN_EVENT_TYPE"] != "MIGRATE_ON_HOST_MAINTENANCE" || r.env["FOREWARN_PROVIDER"] != "gce" ||
		r.env["FOREWARN_EVENT_STATUS"] != "Started" || r.env["FOREWARN_RESOURCES"] != "gce_vm" || r.env["FOREWARN_VM"] != "gce_vm" {
		t.Errorf("migration env %v", r.env)
	}
	waitRuns(t, hooks, "undrain", nid, 1, 10*time.Second)
	a.wantMetrics(t, map[string]float64{
		`forewarn_agent_events_seen_total{type="MIGRATE_ON_HOST_MAINTENANCE"}`: 1,
		`forewarn_agent_handler_runs_total{kind="exec",result="success"}`:      1,
		`forewarn_agent_handler_runs_total{kind="on_clear",result="success"}`:  1,
		`forewarn_agent_approvals_total`:                                       0,
	})
	a.stop(t)
	s.stop(t)

	// A Spot VM, found with --provider auto and named by the server.
	spotFleet := filepath.Join(dir, "spot.yaml")
	if err := os.WriteFile(spotFleet, []byte("vms:\n  - name: spot_vm\n    ip: 127.0.0.1\n    provider: gce\n    provisioningModel: SPOT\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s = startServerToken(t, filepath.Join(dir, "spot-data"), spotFleet)
	a = startAgent(t, "--provider", "auto", "--endpoint", "http://"+s.metadata, "--exec", drain, "--approve")
	s.mustCLI(t, "vm", "evict", "spot_vm")
	pr := waitRuns(t, hooks, "drain", "preempted", 1, 5*time.Second)[0]
	if pr.env["FOREWARN_EVENT_TYPE"] != "Preempt" || pr.env["FOREWARN_PROVIDER"] != "gce" || pr.env["FOREWARN_VM"] != "spot_vm" {
		t.Errorf("preemption env %v", pr.env)
	}
	a.stop(t)
	s.stop(t)
}

// TestAgentRefusesBadStart checks the agent's start-up errors.
func TestAgentRefusesBadStart(t *testing.T) {
	dir := t.TempDir()
	corrupt := filepath.Join(dir, "state.json")
	os.WriteFile(corrupt, []byte("{oops"), 0o600)
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"agent", "--state", corrupt, "--provider", "azure"}, 1, "state file " + corrupt + " is corrupt"},
		{[]string{"agent", "--provider", "ec2"}, 1, `--provider "ec2": want azure, gce, aws or auto`},
		{[]string{"agent", "--types", "Reboot,Nap"}, 1, `unknown event type "Nap"`},
		{[]string{"agent", "--endpoint", "http://127.0.0.1:1", "--listen", ""}, 1, "no metadata service answered"},
		{[]string{"agent", "extra"}, 2, `unexpected argument "extra"`},
	}
	for _, c := range cases {
		cmd := exec.Command(binary, c.args...)
		out, _ := cmd.CombinedOutput()
		if cmd.ProcessState.ExitCode() != c.code || !strings.Contains(string(out), c.msg) {
			t.Errorf("forewarn %v: exit %d, output %q; want exit %d and %q", c.args, cmd.ProcessState.ExitCode(), out, c.code, c.msg)
		}
	}
}

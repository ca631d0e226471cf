package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
)

// TestAgentAWSEndToEnd runs the real agent with --provider aws as an EC2
// Spot VM whose tokens are required, against the real server: after vm
// evict, the drain hook runs once, as Preempt, within one second of the
// interruption notice appearing (the event's WarnedAt), and not again
// when the interruption starts; the rebalance recommendation that comes
// with it runs nothing.
func TestAgentAWSEndToEnd(t *testing.T) {
	dir := t.TempDir()
	hooks := filepath.Join(dir, "hooks")
	if err := os.Mkdir(hooks, 0o700); err != nil {
		t.Fatal(err)
	}
	drain, _ := writeHooks(t, hooks)
	fleet := filepath.Join(dir, "aws.yaml")
	// The agent's requests come from 127.0.0.1, so its VM has that address.
	if err := os.WriteFile(fleet, []byte(`vms:
  - name: ec2_vm
    ip: 127.0.0.1
    provider: aws
    instanceId: i-00000000000000e2e
    market: spot
    httpTokens: required
`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServerToken(t, filepath.Join(dir, "data"), fleet)
	// Half-second polls: a notice is seen within 0.5 s, and the hook
	// starts within a second of it with room to spare.
	a := startAgent(t, "--provider", "aws", "--endpoint", "http://"+s.metadata, "--exec", drain, "--approve",
		"--poll-interval", "500ms")

	// The notice 3 s ahead rather than 2 minutes, so that the
	// interruption also starts during the test.
	id := strings.TrimSpace(s.mustCLI(t, "vm", "evict", "ec2_vm", "--notice", "3s", "--lasts", "1m"))
	var nid string
	deadline := time.Now().Add(5 * time.Second)
	for nid == "" {
		m, _ := filepath.Glob(filepath.Join(hooks, "drain.env.*"))
		switch {
		case len(m) == 1:
			nid = strings.TrimSuffix(strings.TrimPrefix(filepath.Base(m[0]), "drain.env."), ".0")
		case len(m) > 1:
			t.Fatalf("hook runs %v", m)
		case time.Now().After(deadline):
			t.Fatalf("no hook within 5 s of the evict\n%s", a.stderr)
		default:
			time.Sleep(10 * time.Millisecond)
		}
	}
	ev := s.event(t, id)
	if ev.Type != forewarn.Preempt || ev.Action != "terminate" || ev.WarnedAt.IsZero() {
		t.Fatalf("event %+v: want a warned Preempt that terminates", ev)
	}
	if want := "spot-instance-action-" + ev.NotBefore.UTC().Format(time.RFC3339); nid != want {
		t.Fatalf("hook ran for %q, want %q", nid, want)
	}
	r := hookRuns(t, hooks, "drain", nid)[0]
	latency := r.at.Sub(ev.WarnedAt)
	t.Logf("the hook ran %v after the interruption notice appeared", latency)
	if latency < 0 || latency > time.Second {
		t.Errorf("hook ran %v after the notice appeared (WarnedAt %s), want within 1 s", latency, ev.WarnedAt.Format(time.RFC3339Nano))
	}
	if r.env["FOREWARN_EVENT_TYPE"] != "Preempt" || r.env["FOREWARN_PROVIDER"] != "aws" || r.env["FOREWARN_EVENT_STATUS"] != "Scheduled" ||
		r.env["FOREWARN_VM"] != "i-00000000000000e2e" || r.env["FOREWARN_RESOURCES"] != "i-00000000000000e2e" ||
		r.env["FOREWARN_NOT_BEFORE"] != ev.NotBefore.UTC().Format(time.RFC3339) || r.env["FOREWARN_EVENT_SOURCE"] != "Platform" {
		t.Errorf("hook env %v", r.env)
	}

	// Once: not again when the interruption starts, a few polls later.
	deadline = time.Now().Add(10 * time.Second)
	for s.event(t, id).Status != forewarn.Started {
		if time.Now().After(deadline) {
			t.Fatalf("the interruption did not start within 10 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // three polls after the start
	if m, _ := filepath.Glob(filepath.Join(hooks, "drain.env.*")); len(m) != 1 {
		t.Fatalf("hook runs %v, want one", m)
	}
	a.wantMetrics(t, map[string]float64{
		`forewarn_agent_events_seen_total{type="Preempt"}`:                  1,
		`forewarn_agent_events_seen_total{type="REBALANCE_RECOMMENDATION"}`: 1,
		`forewarn_agent_handler_runs_total{kind="exec",result="success"}`:   1,
		`forewarn_agent_approvals_total`:                                    0,
	})
	a.stop(t)
	s.stop(t)
}

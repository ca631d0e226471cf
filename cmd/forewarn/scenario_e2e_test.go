package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/scenario"
)

// player modes: how a test client plays its VM.
const (
	playGood      = "good"       // polls its API as the seeds ask, approves as a correct handler
	playNoApprove = "no-approve" // polls, never approves
	playNoHeader  = "no-header"  // sends no Metadata header
	playGreedy    = "greedy"     // approves every event it sees, others' Terminates too
	playNoSpot    = "no-spot"    // (EC2) never reads spot/instance-action
	playNoLong    = "no-long"    // (GCE) polls maintenance-event twice a second, no long-poll
	playNoETag    = "no-etag"    // (GCE) long-polls without last_etag
)

// play runs a client for vm against the metadata API at addr, from the
// VM's address, until ctx ends.
func play(ctx context.Context, addr string, vm *forewarn.VM, mode string) {
	c := vmClient(vm.IP.String())
	c.Timeout = 0 // long-polls; ctx bounds every request
	base := "http://" + addr
	do := func(method, path string, body io.Reader, header ...string) (*http.Response, []byte) {
		req, _ := http.NewRequestWithContext(ctx, method, base+path, body)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			return nil, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	pause := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	switch vm.Provider {
	case forewarn.Azure:
		const se = "/metadata/scheduledevents?api-version=2020-07-01"
		hdr := []string{"Metadata", "true"}
		if mode == playNoHeader {
			hdr = nil
		}
		approved := map[string]bool{}
		seen := map[string]int{} // the polls that saw each event
		for {
			resp, b := do("GET", se, nil, hdr...)
			var doc struct {
				Events []struct {
					EventID     string `json:"EventId"`
					EventType   string
					EventStatus string
					Resources   []string
				}
			}
			if resp != nil && resp.StatusCode == 200 && json.Unmarshal(b, &doc) == nil {
				for _, ev := range doc.Events {
					var mine bool
					seen[ev.EventID]++
					switch {
					case mode == playGreedy:
						// Others' events on its third sight, 600 ms on:
						// their owners, polling as often, approve first,
						// so the run fails only the check it means to.
						mine = slices.Contains(ev.Resources, vm.Name) || seen[ev.EventID] >= 3
					case mode == playNoApprove || ev.EventStatus != "Scheduled":
					case ev.EventType == "Terminate":
						mine = slices.Contains(ev.Resources, vm.Name) // seed 004: only its own
					default:
						mine = len(ev.Resources) > 0 && ev.Resources[0] == vm.Name // the leader approves
					}
					if mine && !approved[ev.EventID] {
						approved[ev.EventID] = true
						do("POST", se, strings.NewReader(`{"StartRequests":[{"EventId":"`+ev.EventID+`"}]}`), hdr...)
					}
				}
			}
			if !pause(300 * time.Millisecond) {
				return
			}
		}
	case forewarn.GCE:
		const me = "/computeMetadata/v1/instance/maintenance-event"
		hdr := []string{"Metadata-Flavor", "Google"}
		etag := "0"
		for {
			switch mode {
			case playNoLong:
				do("GET", me, nil, hdr...)
				if !pause(500 * time.Millisecond) {
					return
				}
				continue
			case playNoETag:
				do("GET", me+"?wait_for_change=true", nil, hdr...)
			default:
				if resp, _ := do("GET", me+"?wait_for_change=true&last_etag="+etag, nil, hdr...); resp != nil {
					etag = resp.Header.Get("ETag")
				}
			}
			if !pause(10 * time.Millisecond) {
				return
			}
		}
	case forewarn.AWS:
		key := "/latest/meta-data/spot/instance-action"
		if mode == playNoSpot {
			key = "/latest/meta-data/events/maintenance/scheduled"
		}
		token := ""
		for {
			if token == "" {
				if resp, b := do("PUT", "/latest/api/token", nil, "X-aws-ec2-metadata-token-ttl-seconds", "300"); resp != nil && resp.StatusCode == 200 {
					token = string(b)
				}
			}
			if resp, _ := do("GET", key, nil, "X-aws-ec2-metadata-token", token); resp != nil && resp.StatusCode == 401 {
				token = ""
			}
			if !pause(500 * time.Millisecond) {
				return
			}
		}
	}
}

// scenarioRunResult is one run of 'forewarn scenario run FILE --serve'
// with test clients playing its fleet.
type scenarioRunResult struct {
	code   int
	stdout string
	stderr string
	junit  junitRead
}

// runScenarioFile runs file with --serve and --junit, and starts a client
// per VM of its fleet as soon as the metadata address is printed, in the
// mode modes gives it (playGood when absent).
func runScenarioFile(t *testing.T, file string, modes map[string]string) scenarioRunResult {
	t.Helper()
	sc, err := scenario.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	junit := filepath.Join(t.TempDir(), "junit.xml")
	cmd := exec.Command(binary, "scenario", "run", file, "--serve", "--junit", junit)
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	var stdout strings.Builder
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		stdout.WriteString(lines.Text() + "\n")
		if addr, ok := strings.CutPrefix(lines.Text(), "metadata API listening on "); ok {
			for _, vm := range sc.Fleet().VMs {
				mode := modes[vm.Name]
				if mode == "" {
					mode = playGood
				}
				wg.Go(func() { play(ctx, addr, vm, mode) })
			}
		}
	}
	cmd.Wait()
	res := scenarioRunResult{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: errOut.String()}
	b, err := os.ReadFile(junit)
	if err != nil {
		t.Fatalf("no JUnit report (exit %d): %v\n%s%s", res.code, err, res.stdout, res.stderr)
	}
	if err := xml.Unmarshal(b, &res.junit); err != nil {
		t.Fatalf("JUnit report: %v\n%s", err, b)
	}
	return res
}

// failedCases returns the names of the JUnit testcases that failed, and
// checks the counts agree.
func failedCases(t *testing.T, r scenarioRunResult) []string {
	t.Helper()
	if len(r.junit.Suites) != 1 {
		t.Fatalf("%d testsuites, want 1", len(r.junit.Suites))
	}
	s := r.junit.Suites[0]
	var failed []string
	for _, c := range s.Cases {
		if c.Failure != nil {
			if c.Failure.Message == "" || c.Failure.Body == "" {
				t.Errorf("testcase %q failed without a message or evidence", c.Name)
			}
			failed = append(failed, c.Name)
		}
	}
	if s.Tests != len(s.Cases) || s.Failures != len(failed) || r.junit.Failures != len(failed) || r.junit.Tests != s.Tests {
		t.Errorf("counts: testsuites %d/%d, testsuite %d/%d, for %d cases with %d failures",
			r.junit.Tests, r.junit.Failures, s.Tests, s.Failures, len(s.Cases), len(failed))
	}
	return failed
}

// TestScenarioExamples runs every scenario in examples/scenarios with
// --serve and test clients: once with clients that do what the seeds ask
// (exit 0, no JUnit failure), and once with clients that misbehave in a
// way each scenario catches (exit 1, exactly the testcases that must
// fail, each with its evidence).
func TestScenarioExamples(t *testing.T) {
	files, err := filepath.Glob("../../examples/scenarios/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	bad := map[string]struct {
		modes  map[string]string
		failed []string
	}{
		"rolling-reboot.yaml": {
			modes:  map[string]string{"web_1": playNoHeader},
			failed: []string{"approved reboots within 2s", "approved reboots before its NotBefore", "no finding no-metadata-header"},
		},
		"scale-in.yaml": {
			modes:  map[string]string{"vmss_2": playGreedy},
			failed: []string{"vmss_0, vmss_1, vmss_2 approves only its own Terminate"},
		},
		"spot-eviction.yaml": {
			modes:  map[string]string{"spot_0": playNoApprove, "ec2_spot_0": playNoSpot},
			failed: []string{"approved preempt by spot_0 within 3s", "seen interruption within 3s"},
		},
		"gce-live-migration.yaml": {
			modes:  map[string]string{"gce_0": playNoLong, "gce_1": playNoETag},
			failed: []string{"gce_0, gce_1 holds a long-poll on maintenance-event", "no finding long-poll-without-etag"},
		},
	}
	for _, file := range files {
		name := filepath.Base(file)
		b, ok := bad[name]
		if !ok {
			t.Errorf("%s: no misbehaving run in this test; add one", name)
			continue
		}
		t.Run(name+"/good", func(t *testing.T) {
			t.Parallel()
			r := runScenarioFile(t, file, nil)
			if failed := failedCases(t, r); r.code != 0 || len(failed) != 0 || r.junit.Tests == 0 {
				t.Errorf("exit %d, %d testcases, failed %q; want exit 0 and none failed\n%s%s", r.code, r.junit.Tests, failed, r.stdout, r.stderr)
			}
		})
		t.Run(name+"/bad", func(t *testing.T) {
			t.Parallel()
			r := runScenarioFile(t, file, b.modes)
			failed := failedCases(t, r)
			if r.code != 1 || !slices.Equal(failed, b.failed) {
				t.Errorf("exit %d, failed %q; want exit 1 and %q\n%s%s", r.code, failed, b.failed, r.stdout, r.stderr)
			}
			for _, f := range b.failed {
				if !strings.Contains(r.stdout, "FAIL "+f+": ") {
					t.Errorf("stdout does not show the failure of %q:\n%s", f, r.stdout)
				}
			}
		})
	}
}

// junitRead is the JUnit XML as the test reads it back.
type junitRead struct {
	Tests    int `xml:"tests,attr"`
	Failures int `xml:"failures,attr"`
	Suites   []struct {
		Name     string `xml:"name,attr"`
		Tests    int    `xml:"tests,attr"`
		Failures int    `xml:"failures,attr"`
		Cases    []struct {
			Name    string `xml:"name,attr"`
			Failure *struct {
				Message string `xml:"message,attr"`
				Body    string `xml:",chardata"`
			} `xml:"failure"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// TestScenarioAgainstServer runs a scenario with --server against a
// running server that has an operator token: its fleet must agree with
// the server's, its counts start when its timeline does, and a client
// that approves passes.
func TestScenarioAgainstServer(t *testing.T) {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleet, []byte("vms:\n  - {name: web_0, ip: 127.0.0.2}\n  - {name: web_1, ip: 127.0.0.3}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServerToken(t, filepath.Join(dir, "data"), fleet)
	// Before the scenario: a request without the header, which its
	// counts must leave out.
	if code, _ := vmGet(t, s, "127.0.0.2", "GET", "/metadata/scheduledevents?api-version=2020-07-01"); code != 400 {
		t.Fatalf("GET without Metadata: %d", code)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() {
		play(ctx, s.metadata, &forewarn.VM{Name: "web_0", IP: netipOf("127.0.0.2"), Provider: forewarn.Azure}, playGood)
	})

	runFile := func(src string) (string, string, int) {
		file := filepath.Join(t.TempDir(), "s.yaml")
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return s.cli(t, "scenario", "run", file, "--server", "http://"+s.adm, "--wait-for-clients", "5s")
	}
	out, errOut, code := runFile(`fleet:
  vms:
    - {name: web_0, ip: 127.0.0.2}
steps:
  - create: {type: Reboot, vm: web_0, notice: 3s, lasts: 1s, id: r1}
expect:
  - approved: {event: r1, by: web_0, within: 2s}
  - noFinding: {kind: no-metadata-header, vm: web_0}
`)
	if code != 0 || !strings.Contains(out, "ok   approved r1 by web_0 within 2s") || !strings.Contains(out, "ok   web_0: no finding no-metadata-header") {
		t.Errorf("exit %d\n%s%s", code, out, errOut)
	}
	_, errOut, code = runFile("fleet:\n  vms:\n    - {name: web_0, ip: 127.0.0.9}\nsteps:\n  - create: {type: Reboot, vm: web_0}\n")
	if code != 2 || !strings.Contains(errOut, "fleet: VM web_0 is azure 127.0.0.9 in the scenario but azure 127.0.0.2 on the server") {
		t.Errorf("a fleet that differs: exit %d, %q; want 2 naming the difference", code, errOut)
	}
	_, errOut, code = runFile("steps:\n  - create: {type: Reboot, vm: web_1, notice: 3s}\n")
	if code != 1 || !strings.Contains(errOut, "no call from web_1 within --wait-for-clients 5s") {
		t.Errorf("a silent client: exit %d, %q; want 1 naming it", code, errOut)
	}
}

func netipOf(s string) netip.Addr { return netip.MustParseAddr(s) }

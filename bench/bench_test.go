package bench_test

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/forewarn/forewarn/bench"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "forewarn-bench-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "forewarn")
	if out, err := exec.Command("go", "build", "-o", binary, "../cmd/forewarn").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// These runs are short and bounded: they keep the harness working, and
// assert what it reports, never how fast anything is.

func TestPoll(t *testing.T) {
	// aws polls with an IMDSv2 token on every GET, on a fleet that
	// requires them: a token refused is an error here.
	for i, api := range []string{"azure", "gce", "aws"} {
		// azure's run takes a CPU profile of the server as well.
		profile := ""
		if api == "azure" {
			profile = filepath.Join(t.TempDir(), "azure.pprof")
		}
		rep, err := bench.Poll(t.Context(), bench.PollConfig{API: api, VMs: 4, AddrBase: netip.MustParseAddr(fmt.Sprintf("127.3.%d.1", 10+i)),
			Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond, Rounds: 2, Ceiling: true, Binary: binary, CPUProfile: profile})
		if err != nil {
			t.Fatal(err)
		}
		if profile != "" {
			if b, err := os.ReadFile(profile); err != nil || len(b) == 0 {
				t.Errorf("%s: the CPU profile: %d bytes, %v", api, len(b), err)
			}
		}
		if want := float64(rep.Ceiling.CPUPerRequest) / float64(rep.Forewarn.CPUPerRequest); rep.CPURatio != want || rep.CPUMet != (want >= bench.CPUTarget) {
			t.Errorf("%s: CPU ratio %v (met %v), want %v from %v and %v", api, rep.CPURatio, rep.CPUMet, want, rep.Ceiling.CPUPerRequest, rep.Forewarn.CPUPerRequest)
		}
		for _, r := range []*bench.Run{&rep.Forewarn, rep.Ceiling} {
			if r.Requests == 0 || r.Errors != 0 || r.Throughput <= 0 || r.Latency.P50 <= 0 || r.Latency.P999 < r.Latency.P50 || r.ServerCPU <= 0 {
				t.Errorf("%s %s: %+v", api, r.Server, r)
			}
		}
		if rep.Ratio <= 0 || rep.BodyBytes == 0 {
			t.Errorf("%s: ratio %v, body %d bytes", api, rep.Ratio, rep.BodyBytes)
		}
		// The ceiling sends these too (Poll checks it): the same bytes.
		if want := pollHeaders[api]; !want.MatchString(rep.Headers) {
			t.Errorf("%s: headers %q, want %v", api, rep.Headers, want)
		}
	}
}

// pollHeaders is each API's headers on the polled answer, but Date and
// Content-Length.
var pollHeaders = map[string]*regexp.Regexp{
	"azure": regexp.MustCompile(`^Content-Type: application/json; charset=utf-8\nEtag: "[0-9]+-[0-9a-f]{8}"\n$`),
	"gce":   regexp.MustCompile(`^Content-Type: application/text\nETag: [0-9a-f]{16}\nMetadata-Flavor: Google\n$`),
	"aws":   regexp.MustCompile(`^Content-Type: text/plain\nServer: EC2ws\nX-Aws-Ec2-Metadata-Token-Ttl-Seconds: [0-9]+\n$`), // the token GET's
}

func TestFanout(t *testing.T) {
	rep, err := bench.Fanout(t.Context(), bench.FanoutConfig{Waiters: 50, AddrBase: netip.MustParseAddr("127.3.2.1"), Settle: 300 * time.Millisecond, Binary: binary})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Delivered != 50 || rep.Delay.P50 <= 0 || rep.RSSHeld <= 0 {
		t.Fatalf("fanout: %+v", rep)
	}
}

func TestEngine(t *testing.T) {
	rep, err := bench.Engine(t.Context(), bench.EngineConfig{VMs: 200, Events: 400, Fire: 50, SmallPending: 100})
	if err != nil {
		t.Fatal(err)
	}
	if rep.PerCreate <= 0 || rep.MemoryBytes <= 0 || rep.PerFireSmall <= 0 || rep.PerFireLarge <= 0 || rep.Growth <= 0 {
		t.Fatalf("engine: %+v", rep)
	}
}

// TestCommand runs 'forewarn bench' as a user would, in both output forms.
func TestCommand(t *testing.T) {
	out, err := exec.Command(binary, "bench", "engine", "--vms", "50", "--events", "50", "--fire", "10", "--small-pending", "20", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.EngineReport
	if err := json.Unmarshal(out, &rep); err != nil || rep.Config.VMs != 50 {
		t.Fatalf("--json: %v %s", err, out)
	}
	out, err = exec.Command(binary, "bench", "poll", "--vms", "2", "--duration", "200ms", "--warmup", "0s", "--rounds", "1", "--addr-base", "127.3.3.1").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"poll azure: 2 VMs", "forewarn azure", "ceiling (net/http, same bytes)", "ratio to the ceiling"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if err := exec.Command(binary, "bench", "nope").Run(); err == nil {
		t.Error("an unknown mode succeeded")
	}
}

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
)

// binary is the forewarn binary built once for the end-to-end tests.
var binary string

func TestMain(m *testing.M) {
	if addr := os.Getenv(floodHelperEnv); addr != "" {
		os.Exit(floodHelper(addr)) // TestGCEPipelineFlood's flooding VMs
	}
	if mode := os.Getenv(netnsChildEnv); mode != "" {
		os.Exit(netnsChild(mode)) // TestRelayNetns's clients inside its VMs' namespaces
	}
	dir, err := os.MkdirTemp("", "forewarn-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "forewarn")
	out, err := exec.Command("go", "build", "-race", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build forewarn: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const e2eFleet = `vms:
  - name: web_0
    ip: 127.0.0.2
    provider: azure
    availabilitySet: web
    updateDomain: 0
  - name: web_1
    ip: 127.0.0.3
    availabilitySet: web
    updateDomain: 1
  - name: db_0
    ip: 127.0.0.4
    availabilitySet: db
  - name: db_1
    ip: 127.0.0.5
    availabilitySet: db
    updateDomain: 1
`

// server is one run of 'forewarn serve' as a child process.
type server struct {
	cmd            *exec.Cmd
	metadata, adm  string // host:port
	relay          string // host:port of the relay listener, if it has one
	stderr         *bytes.Buffer
	data, fleetArg string
	token          string // the operator token cli sends, if any
}

func startServer(t *testing.T, data, fleet string) *server {
	t.Helper()
	return startServerArgs(t, data, fleet)
}

// startServerToken is startServer with an operator token, which cli
// sends: for fleets in which a VM has the CLI's address, 127.0.0.1, since
// the operator API refuses a VM's address without the token.
func startServerToken(t *testing.T, data, fleet string) *server {
	t.Helper()
	file := filepath.Join(t.TempDir(), "token")
	s := startServerArgs(t, data, fleet, "--admin-token-file", file)
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s.token = strings.TrimSpace(string(b))
	return s
}

// startServerArgs is startServer with further serve flags.
func startServerArgs(t *testing.T, data, fleet string, args ...string) *server {
	t.Helper()
	s := &server{data: data, fleetArg: fleet, stderr: new(bytes.Buffer)}
	s.cmd = exec.Command(binary, append([]string{"serve", "--metadata-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
		"--data", data, "--fleet", fleet, "--allow-short-notice", "--rate-limit", "0"}, args...)...)
	s.cmd.Stderr = s.stderr
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.cmd.Process.Kill(); s.cmd.Wait() })
	lines := bufio.NewScanner(out)
	for s.metadata == "" || s.adm == "" {
		if !lines.Scan() {
			t.Fatalf("server exited before listening: %s", s.stderr)
		}
		if a, ok := strings.CutPrefix(lines.Text(), "metadata API listening on "); ok {
			s.metadata = a
		}
		if a, ok := strings.CutPrefix(lines.Text(), "operator API listening on "); ok {
			s.adm = a
		}
	}
	go io.Copy(io.Discard, out)
	return s
}

// stop sends SIGTERM and checks the server exits 0.
func (s *server) stop(t *testing.T) {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	if err := s.cmd.Wait(); err != nil {
		t.Fatalf("server exit after SIGTERM: %v\n%s", err, s.stderr)
	}
}

// vmClient returns an HTTP client whose connections come from ip.
func vmClient(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}, Timeout: 10 * time.Second}
}

// events GETs the scheduled events document as VM ip sees it.
func (s *server) events(t *testing.T, ip, version string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+s.metadata+"/metadata/scheduledevents?api-version="+version, nil)
	req.Header.Set("Metadata", "true")
	resp, err := vmClient(ip).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET from %s: %d %s", ip, resp.StatusCode, b)
	}
	return string(b)
}

// approve POSTs StartRequests from VM ip.
func (s *server) approve(t *testing.T, ip string, ids ...string) (int, string) {
	t.Helper()
	var reqs []string
	for _, id := range ids {
		reqs = append(reqs, `{"EventId":"`+id+`"}`)
	}
	req, _ := http.NewRequest("POST", "http://"+s.metadata+"/metadata/scheduledevents?api-version=2020-07-01",
		strings.NewReader(`{"StartRequests":[`+strings.Join(reqs, ",")+`]}`))
	req.Header.Set("Metadata", "true")
	resp, err := vmClient(ip).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// cli runs the forewarn CLI against the server and returns its output.
func (s *server) cli(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "FOREWARN_SERVER=http://"+s.adm)
	if s.token != "" {
		cmd.Env = append(cmd.Env, "FOREWARN_TOKEN="+s.token)
	}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code = cmd.ProcessState.ExitCode()
	if err != nil && code < 0 {
		t.Fatalf("run %v: %v", args, err)
	}
	return o.String(), e.String(), code
}

func (s *server) mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := s.cli(t, args...)
	if code != 0 {
		t.Fatalf("forewarn %v: exit %d: %s", args, code, errOut)
	}
	return out
}

func (s *server) event(t *testing.T, id string) *forewarn.Event {
	t.Helper()
	var list struct{ Events []*forewarn.Event }
	if err := json.Unmarshal([]byte(s.mustCLI(t, "event", "list", "--json")), &list); err != nil {
		t.Fatal(err)
	}
	for _, ev := range list.Events {
		if ev.ID == id {
			return ev
		}
	}
	t.Fatalf("event %s not listed", id)
	return nil
}

func wantDoc(t *testing.T, got, want string) {
	t.Helper()
	if got != want {
		t.Fatalf("document:\n got %s\nwant %s", got, want)
	}
}

func eventJSON(id, status, typ, resources, notBefore, source string, duration int) string {
	return fmt.Sprintf(`{"EventId":"%s","EventStatus":"%s","EventType":"%s","ResourceType":"VirtualMachine","Resources":[%s],"NotBefore":"%s","Description":"","EventSource":"%s","DurationInSeconds":%d}`,
		id, status, typ, resources, notBefore, source, duration)
}

// waitDoc polls until VM ip's document equals want, for time-driven steps.
func waitDoc(t *testing.T, s *server, ip, want string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := s.events(t, ip, "2020-07-01")
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for document:\n got %s\nwant %s", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestEndToEnd drives the whole lifecycle through the real binary: the
// CLI and the operator HTTP API raise events, VMs on distinct loopback
// addresses read and approve them, and restarts lose nothing.
func TestEndToEnd(t *testing.T) {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleet, []byte(e2eFleet), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	s := startServer(t, data, fleet)
	const web0, web1, db0, db1 = "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"
	empty := func(inc int) string { return fmt.Sprintf(`{"DocumentIncarnation":%d,"Events":[]}`, inc) }

	for _, ip := range []string{web0, web1, db0, db1} {
		wantDoc(t, s.events(t, ip, "2020-07-01"), empty(1))
	}

	// 1. A Reboot raised with the CLI: web_0 and web_1 (availability set
	// "web") see it; db_0 and db_1 do not.
	before := time.Now().UTC()
	out := s.mustCLI(t, "event", "create", "--type", "Reboot", "--vm", "web_0", "--source", "User")
	id := strings.TrimSpace(out)
	if len(id) != 36 || out != id+"\n" || strings.ToUpper(id) != id {
		t.Fatalf("event create printed %q, want an upper-case GUID and a newline", out)
	}
	ev := s.event(t, id)
	nb := ev.NotBefore.UTC()
	if nb.Before(before.Add(15*time.Minute)) || nb.After(before.Add(15*time.Minute+5*time.Second)) || nb.Nanosecond() != 0 {
		t.Fatalf("NotBefore %v: want whole seconds, 15 minutes after %v", nb, before)
	}
	scheduled := `{"DocumentIncarnation":2,"Events":[` + eventJSON(id, "Scheduled", "Reboot", `"web_0"`, nb.Format("Mon, 02 Jan 2006 15:04:05 GMT"), "User", -1) + `]}`
	wantDoc(t, s.events(t, web0, "2020-07-01"), scheduled)
	wantDoc(t, s.events(t, web1, "2020-07-01"), scheduled)
	wantDoc(t, s.events(t, db0, "2020-07-01"), empty(1))

	// 2. db_0 cannot approve it; web_1 can, for all Resources.
	if code, body := s.approve(t, db0, id); code != 400 || body != `{"error": "Bad request. EventId `+id+` is not a scheduled event of this VM"}` {
		t.Fatalf("approval from db_0: %d %s", code, body)
	}
	if code, body := s.approve(t, web1, id); code != 200 || body != "" {
		t.Fatalf("approval from web_1: %d %q", code, body)
	}
	started := `{"DocumentIncarnation":3,"Events":[` + eventJSON(id, "Started", "Reboot", `"web_0"`, "", "User", -1) + `]}`
	wantDoc(t, s.events(t, web0, "2020-07-01"), started)
	if ev := s.event(t, id); ev.Status != forewarn.Started || len(ev.Approvals) != 1 || ev.Approvals[0].By != "web_1" {
		t.Fatalf("after approval: %s approvals %+v", ev.Status, ev.Approvals)
	}

	// 3. A clean restart loses nothing and keeps the incarnations.
	s.stop(t)
	s = startServer(t, data, fleet)
	wantDoc(t, s.events(t, web0, "2020-07-01"), started)
	wantDoc(t, s.events(t, web1, "2020-07-01"), started)
	wantDoc(t, s.events(t, db1, "2020-07-01"), empty(1))

	// 4. Complete with the CLI: the event is gone.
	if out := s.mustCLI(t, "event", "complete", id); out != "event "+id+" is Completed\n" {
		t.Fatalf("event complete printed %q", out)
	}
	wantDoc(t, s.events(t, web0, "2020-07-01"), empty(4))
	wantDoc(t, s.events(t, web1, "2020-07-01"), empty(4))

	// 5. The operator HTTP API: a Freeze on db_1 with 2 s notice that
	// lasts 2 s runs its whole life on its deadlines.
	resp, err := http.Post("http://"+s.adm+"/v1/events", "application/json",
		strings.NewReader(`{"type":"Freeze","vms":["db_1"],"notice":"2s","lasts":"2s","durationInSeconds":5}`))
	if err != nil {
		t.Fatal(err)
	}
	var fz forewarn.Event
	if err := json.NewDecoder(resp.Body).Decode(&fz); err != nil || resp.StatusCode != 201 {
		t.Fatalf("POST /v1/events: %d %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	fzScheduled := `{"DocumentIncarnation":2,"Events":[` + eventJSON(fz.ID, "Scheduled", "Freeze", `"db_1"`, fz.NotBefore.UTC().Format("Mon, 02 Jan 2006 15:04:05 GMT"), "Platform", 5) + `]}`
	wantDoc(t, s.events(t, db0, "2020-07-01"), fzScheduled)
	waitDoc(t, s, db0, `{"DocumentIncarnation":3,"Events":[`+eventJSON(fz.ID, "Started", "Freeze", `"db_1"`, "", "Platform", 5)+`]}`)
	waitDoc(t, s, db1, empty(4))
	wantDoc(t, s.events(t, web0, "2020-07-01"), empty(4))

	// 6. vm restart raises a User Reboot; cancel withdraws it.
	rid := strings.TrimSpace(s.mustCLI(t, "vm", "restart", "web_1"))
	rev := s.event(t, rid)
	if rev.Type != forewarn.Reboot || rev.Source != forewarn.User || rev.Resources[0] != "web_1" {
		t.Fatalf("vm restart raised %+v", rev)
	}
	wantDoc(t, s.events(t, web0, "2020-07-01"), `{"DocumentIncarnation":5,"Events":[`+
		eventJSON(rid, "Scheduled", "Reboot", `"web_1"`, rev.NotBefore.UTC().Format("Mon, 02 Jan 2006 15:04:05 GMT"), "User", -1)+`]}`)
	s.mustCLI(t, "event", "cancel", rid)
	wantDoc(t, s.events(t, web0, "2020-07-01"), empty(6))

	// 7. A crash (SIGKILL) loses no acknowledged write either.
	did := strings.TrimSpace(s.mustCLI(t, "vm", "redeploy", "db_0"))
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s = startServer(t, data, fleet)
	dev := s.event(t, did)
	wantDoc(t, s.events(t, db1, "2020-07-01"), `{"DocumentIncarnation":5,"Events":[`+
		eventJSON(did, "Scheduled", "Redeploy", `"db_0"`, dev.NotBefore.UTC().Format("Mon, 02 Jan 2006 15:04:05 GMT"), "User", -1)+`]}`)
	wantDoc(t, s.events(t, web0, "2020-07-01"), empty(6))
	s.stop(t)
}

// TestCLIErrors checks that bad operator commands exit non-zero with a
// message naming the problem, against the real server.
func TestCLIErrors(t *testing.T) {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleet, []byte(e2eFleet), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, filepath.Join(dir, "data"), fleet)
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"event", "create", "--type", "Reboot", "--vm", "nope"}, 1, `unknown VM "nope"`},
		{[]string{"event", "create", "--type", "Boom", "--vm", "web_0"}, 2, `unknown event type "Boom"`},
		{[]string{"event", "approve", "00000000-0000-0000-0000-000000000000"}, 1, `no event "00000000-0000-0000-0000-000000000000"`},
		{[]string{"event", "create", "--type", "Reboot", "--vm", "web_0", "--server", "http://127.0.0.1:1"}, 1, "cannot reach the server at http://127.0.0.1:1"},
	}
	for _, c := range cases {
		out, errOut, code := s.cli(t, c.args...)
		if code != c.code || out != "" || !strings.Contains(errOut, c.msg) {
			t.Errorf("forewarn %v: exit %d, stdout %q, stderr %q; want exit %d and %q", c.args, code, out, errOut, c.code, c.msg)
		}
	}
	s.stop(t)
}

// TestServeRefusesBadStart checks the server's own start-up errors.
func TestServeRefusesBadStart(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("vms:\n  - name: a\n    ip: nope\n"), 0o600)
	corrupt := filepath.Join(dir, "corrupt")
	os.MkdirAll(corrupt, 0o700)
	os.WriteFile(filepath.Join(corrupt, "forewarn.db"), []byte(strings.Repeat("torn page ", 2000)), 0o600)
	cases := []struct {
		args []string
		msg  string
	}{
		{[]string{"serve", "--fleet", bad, "--data", dir}, "fleet file " + bad + `: vms[0] (a): ip "nope" is not an IP address (or any)`},
		{[]string{"serve", "--fleet", bad + ".missing", "--data", dir}, "read fleet file: open " + bad + ".missing: no such file or directory"},
		{[]string{"serve", "--data", corrupt, "--metadata-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}, filepath.Join(corrupt, "forewarn.db")},
		{[]string{"serve", "--admin-addr", "0.0.0.0:0", "--data", dir}, "--admin-addr 0.0.0.0:0 is not a loopback address"},
		{[]string{"serve", "--store", "zk", "--data", dir}, `--store "zk": want bolt (embedded, one server) or etcd (several replicas)`},
		{[]string{"serve", "--store", "etcd", "--data", dir}, "--store etcd needs --etcd-endpoints URL[,URL...]"},
		{[]string{"serve", "--etcd-endpoints", "http://127.0.0.1:1", "--data", dir}, "--etcd-endpoints needs --store etcd"},
		{[]string{"serve", "--store", "etcd", "--etcd-endpoints", "127.0.0.1:2379", "--data", dir}, `--etcd-endpoints: "127.0.0.1:2379" is not an http:// or https:// URL`},
		{[]string{"serve", "--store", "etcd", "--etcd-endpoints", "http://127.0.0.1:1", "--leader-ttl", "1500ms", "--data", dir}, "--leader-ttl 1.5s must be a whole number of seconds, at least 1s"},
		{[]string{"serve", "--store", "etcd", "--etcd-endpoints", "http://127.0.0.1:1", "--etcd-prefix", "forewarn", "--data", dir}, `--etcd-prefix "forewarn" must begin with /`},
		// Nothing listens on port 1: the start fails after --etcd-timeout, naming etcd.
		{[]string{"serve", "--store", "etcd", "--etcd-endpoints", "http://127.0.0.1:1", "--etcd-timeout", "1s", "--data", dir,
			"--metadata-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}, "etcd unavailable (no quorum or unreachable): no answer from http://127.0.0.1:1 within 1s"},
	}
	for _, c := range cases {
		cmd := exec.Command(binary, c.args...)
		out, _ := cmd.CombinedOutput()
		if cmd.ProcessState.ExitCode() != 1 || !strings.Contains(string(out), c.msg) {
			t.Errorf("forewarn %v: exit %d, output %q; want exit 1 and %q", c.args, cmd.ProcessState.ExitCode(), out, c.msg)
		}
	}
}

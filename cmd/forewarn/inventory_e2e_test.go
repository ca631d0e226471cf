package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/internal/etcdtest"
)

const inventoryFleet = `vms:
  - name: web_0
    ip: 127.0.9.2
    availabilitySet: web
  - name: gce_0
    ip: 127.0.9.3
    provider: gce
`

// fleetOf returns the inventory GET /v1/fleet exports, and its ETag.
func fleetOf(t *testing.T, s *server) (string, string) {
	t.Helper()
	resp, err := http.Get("http://" + s.adm + "/v1/fleet")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/yaml" {
		t.Fatalf("GET /v1/fleet: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	return string(b), resp.Header.Get("ETag")
}

// metadataStatus returns the status of a GET of path by the VM at ip,
// with its API's header.
func metadataStatus(t *testing.T, s *server, ip, path string) (int, string) {
	t.Helper()
	a, err := vmDo(t.Context(), s.metadata, ip, "GET", path, "")
	if err != nil {
		t.Fatalf("GET %s from %s: %v", path, ip, err)
	}
	return a.status, a.body
}

const azureEventsPath = "/metadata/scheduledevents?api-version=2020-07-01"

// TestInventoryEndToEnd drives the inventory through the real binary and
// its CLI: a dry run's exact diff, an add served at once, a refused
// apply that changes nothing, a stale If-Match, a removal refused at
// once, and an export that applies back unchanged.
func TestInventoryEndToEnd(t *testing.T) {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleet, []byte(inventoryFleet), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, filepath.Join(dir, "data"), fleet)

	// A dry run prints the exact diff and changes nothing.
	doc := filepath.Join(dir, "next.yaml")
	if err := os.WriteFile(doc, []byte(`vms:
  - {name: web_0, ip: 127.0.9.2, availabilitySet: web, updateDomain: 1}
  - {name: web_1, ip: 127.0.9.4, availabilitySet: web}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	before, tag := fleetOf(t, s)
	want := "CHANGE  KIND  NAME   KEYS\n" +
		"add     vm    web_1  -\n" +
		"change  vm    web_0  updateDomain\n" +
		"remove  vm    gce_0  -\n" +
		"would change: 1 added, 1 changed, 1 removed (VMs); inventory revision " + strings.Trim(tag, `"`) + "\n"
	if got := s.mustCLI(t, "fleet", "apply", doc, "--dry-run", "--prune"); got != want {
		t.Fatalf("fleet apply --dry-run --prune printed:\n%s\nwant:\n%s", got, want)
	}
	if after, _ := fleetOf(t, s); after != before {
		t.Fatalf("a dry run changed the inventory:\n%s\nwas:\n%s", after, before)
	}

	// An add is served at once.
	if st, _ := metadataStatus(t, s, "127.0.9.5", azureEventsPath); st != http.StatusForbidden {
		t.Fatalf("an address of no VM: %d", st)
	}
	if out := s.mustCLI(t, "vm", "add", "web_2", "--ip", "127.0.9.5", "--set", "availabilitySet=web", "--set", "updateDomain=2"); !strings.HasPrefix(out, "web_2 added (inventory revision ") {
		t.Fatalf("vm add printed %q", out)
	}
	if st, body := metadataStatus(t, s, "127.0.9.5", azureEventsPath); st != 200 || body != `{"DocumentIncarnation":1,"Events":[]}` {
		t.Fatalf("web_2 right after vm add: %d %s", st, body)
	}

	// An apply that fails validation changes nothing.
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("vms:\n  - {name: web_3, ip: 127.0.9.2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	before, _ = fleetOf(t, s)
	_, errOut, code := s.cli(t, "fleet", "apply", bad)
	if code != 1 || errOut != "forewarn: vms[0] (web_3): ip 127.0.9.2 is already used by web_0\n" {
		t.Fatalf("an apply taking web_0's address: exit %d, %q", code, errOut)
	}
	if after, _ := fleetOf(t, s); after != before {
		t.Fatalf("a refused apply changed the inventory:\n%s\nwas:\n%s", after, before)
	}
	_, errOut, code = s.cli(t, "vm", "set", "web_2", "colour=blue")
	if code != 1 || errOut != "forewarn: VM \"web_2\": line 1: unknown key colour of a VM\n" {
		t.Fatalf("vm set with an unknown key: exit %d, %q", code, errOut)
	}

	// A PUT against a stale revision gets 412 and changes nothing.
	_, tag = fleetOf(t, s)
	s.mustCLI(t, "vm", "set", "web_2", "updateDomain=3")
	req, _ := http.NewRequest("PUT", "http://"+s.adm+"/v1/vms/web_2", strings.NewReader(`{"ip":"127.0.9.5","availabilitySet":"web","updateDomain":4}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("If-Match", tag)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusPreconditionFailed || !strings.Contains(string(b), `"code":"precondition_failed"`) {
		t.Fatalf("PUT with a stale If-Match: %d %s", resp.StatusCode, b)
	}
	if out := s.mustCLI(t, "fleet", "export"); !strings.Contains(out, "name: web_2, ip: 127.0.9.5") || !strings.Contains(out, "updateDomain: 3") {
		t.Fatalf("after the refused PUT the export is:\n%s", out)
	}

	// A removed VM's address is refused at once.
	if out := s.mustCLI(t, "vm", "remove", "web_2"); !strings.HasPrefix(out, "web_2 removed (inventory revision ") {
		t.Fatalf("vm remove printed %q", out)
	}
	if st, _ := metadataStatus(t, s, "127.0.9.5", azureEventsPath); st != http.StatusForbidden {
		t.Fatalf("web_2's address after vm remove: %d", st)
	}

	// A removed GCE VM's held long-poll ends (404, which the real client
	// takes as the key gone), and its address is refused from then on.
	held := make(chan *httpAnswer, 1)
	go func() {
		a, err := vmDo(context.Background(), s.metadata, "127.0.9.3", "GET", "/computeMetadata/v1/instance/maintenance-event?wait_for_change=true", "")
		if err != nil {
			a = &httpAnswer{status: -1, body: err.Error()}
		}
		held <- a
	}()
	time.Sleep(300 * time.Millisecond) // the long-poll is held
	removed := time.Now()
	s.mustCLI(t, "vm", "remove", "gce_0")
	select {
	case a := <-held:
		if a.status != http.StatusNotFound {
			t.Fatalf("gce_0's held long-poll ended with %d %s, want 404", a.status, a.body)
		}
		t.Logf("gce_0's held long-poll ended %v after vm remove began", time.Since(removed))
	case <-time.After(5 * time.Second):
		t.Fatal("gce_0's held long-poll still held 5 s after vm remove")
	}
	if st, _ := metadataStatus(t, s, "127.0.9.3", "/computeMetadata/v1/instance/maintenance-event"); st != http.StatusForbidden {
		t.Fatalf("gce_0's address after vm remove: %d", st)
	}

	// The export applies back unchanged, across a restart too.
	exported := s.mustCLI(t, "fleet", "export")
	exp := filepath.Join(dir, "exported.yaml")
	if err := os.WriteFile(exp, []byte(exported), 0o600); err != nil {
		t.Fatal(err)
	}
	s.stop(t)
	s = startServerArgs(t, filepath.Join(dir, "data"), exp)
	if out := s.mustCLI(t, "fleet", "apply", exp, "--prune"); !strings.HasPrefix(out, "changed: 0 added, 0 changed, 0 removed (VMs)") {
		t.Fatalf("applying the export back printed %q", out)
	}
	if again := s.mustCLI(t, "fleet", "export"); again != exported {
		t.Fatalf("export after a restart:\n%s\nbefore:\n%s", again, exported)
	}
}

// TestInventoryCrashDuringApply kills the server with SIGKILL while it
// applies 100,000 VMs: after a restart the inventory is the old one or
// the new one, never a mix.
func TestInventoryCrashDuringApply(t *testing.T) {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleet, []byte(inventoryFleet), 0o600); err != nil {
		t.Fatal(err)
	}
	var big strings.Builder
	big.WriteString("vms:\n")
	const n = 100000
	for i := range n {
		fmt.Fprintf(&big, "  - {name: vm_%06d, ip: 198.%d.%d.%d}\n", i, 18+i/250/256, i/250%256, i%250+1)
	}
	outcomes := map[int]int{}
	for round, delay := range []time.Duration{300 * time.Millisecond, 900 * time.Millisecond, 1500 * time.Millisecond} {
		data := filepath.Join(dir, fmt.Sprint("data", round))
		s := startServer(t, data, fleet)
		cl := admin.NewClient("http://"+s.adm, &http.Client{Timeout: time.Minute})
		done := make(chan error, 1)
		go func() {
			_, err := cl.ApplyFleet(context.Background(), []byte(big.String()), false, false)
			done <- err
		}()
		time.Sleep(delay)
		s.cmd.Process.Signal(syscall.SIGKILL)
		s.cmd.Wait()
		acked := false
		select {
		case err := <-done:
			acked = err == nil
		case <-time.After(10 * time.Second):
			t.Fatal("the apply's request did not end after the kill")
		}
		s = startServer(t, data, fleet)
		doc, _ := fleetOf(t, s)
		vms := strings.Count(doc, "\n  - ")
		switch {
		case vms == 2 && !acked, vms == n+2:
			outcomes[vms]++
		default:
			t.Fatalf("after a kill %v into the apply: %d VMs (acknowledged %v); want 2 or %d", delay, vms, acked, n+2)
		}
		s.stop(t)
	}
	t.Logf("inventories after the kills: %v (VMs: rounds)", outcomes)
}

// TestInventoryOnReplicas adds a VM through one replica of three on
// etcd: every replica answers it within 100 ms, and a removal is
// refused on every replica.
func TestInventoryOnReplicas(t *testing.T) {
	etcd := etcdtest.Start(t)
	c := newHACluster(t, etcd.Endpoints(), "/forewarn/inventory/", haShareFleet, "2s", "5s")
	a := c.add("A")
	c.add("B")
	c.add("C")
	var worst time.Duration
	for i, ip := range []string{"127.0.8.20", "127.0.8.21", "127.0.8.22"} {
		name := fmt.Sprintf("added_%d", i)
		if _, err := a.client(t).PutVM(t.Context(), name, []byte(`{"ip":"`+ip+`"}`), 0); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for _, r := range c.replicas {
			for {
				ans, err := vmDo(t.Context(), r.s(t).metadata, ip, "GET", azureEventsPath, "")
				if err == nil && ans.status == 200 {
					break
				}
				if time.Since(start) > 5*time.Second {
					t.Fatalf("%s not served by %s 5 s after its PUT: %v %+v", name, r.name, err, ans)
				}
				time.Sleep(2 * time.Millisecond)
			}
		}
		took := time.Since(start)
		worst = max(worst, took)
		if took > 100*time.Millisecond {
			t.Errorf("%s served by all three replicas %v after its PUT; want within 100 ms", name, took)
		}
	}
	t.Logf("an added VM is served by all three replicas at most %v after its PUT", worst)
	if _, err := c.byName("C").client(t).RemoveVM(t.Context(), "added_0", 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() bool {
		for _, r := range c.replicas {
			if ans, err := vmDo(t.Context(), r.s(t).metadata, "127.0.8.20", "GET", azureEventsPath, ""); err != nil || ans.status != http.StatusForbidden {
				return false
			}
		}
		return true
	}, func() string { return "added_0 is still served after its removal on C" })

	// A replica started with a fleet file that differs from the shared
	// inventory applies it: every replica then serves the result.
	other := filepath.Join(t.TempDir(), "other.yaml")
	if err := os.WriteFile(other, []byte(haShareFleet+"  - {name: late_0, ip: 127.0.8.30}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.fleet = other
	d := c.add("D")
	// The log comes through its own pipe from stderr, so it may reach
	// d.log a moment after the addresses on stdout that add waits for.
	eventually(t, 5*time.Second, func() bool {
		log := d.log.String()
		return strings.Contains(log, "inventory changed") && strings.Contains(log, "vms_set=1")
	}, func() string { return "D's start did not log the change it applied:\n" + logTail(d.log, 20) })
	eventually(t, 5*time.Second, func() bool {
		for _, r := range c.replicas {
			if ans, err := vmDo(t.Context(), r.s(t).metadata, "127.0.8.30", "GET", azureEventsPath, ""); err != nil || ans.status != 200 {
				return false
			}
		}
		return true
	}, func() string { return "late_0, in D's fleet file, is not served by every replica" })
	for _, r := range c.replicas {
		if out := haCLI(t, r, "fleet", "export"); !strings.Contains(out, "name: late_0") || strings.Contains(out, "added_0") || !strings.Contains(out, "added_1") {
			t.Fatalf("%s exports:\n%s", r.name, out)
		}
	}
}

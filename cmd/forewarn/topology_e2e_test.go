package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const topologyFleet = `vms:
  - {name: a1_0, ip: 127.0.0.30, availabilitySet: as1, updateDomain: 0}
  - {name: a1_1, ip: 127.0.0.31, availabilitySet: as1, updateDomain: 1}
  - {name: a2_0, ip: 127.0.0.32, availabilitySet: as2, updateDomain: 0}
  - {name: a2_1, ip: 127.0.0.33, availabilitySet: as2, updateDomain: 1}
  - {name: vmss_0, ip: 127.0.0.34, scaleSet: vmss, instanceId: "0", placementGroup: pg0}
  - {name: vmss_1, ip: 127.0.0.35, scaleSet: vmss, instanceId: "1", placementGroup: pg0}
  - {name: vmss_2, ip: 127.0.0.36, scaleSet: vmss, instanceId: "2", placementGroup: pg1}
  - {name: spot_0, ip: 127.0.0.37, priority: Spot}
  - {name: zonal_0, ip: 127.0.0.38, zone: "2"}
scaleSets:
  - {name: vmss, terminateNotBeforeTimeout: PT6M}
`

var topologyIPs = map[string]string{
	"a1_0": "127.0.0.30", "a1_1": "127.0.0.31", "a2_0": "127.0.0.32", "a2_1": "127.0.0.33",
	"vmss_0": "127.0.0.34", "vmss_1": "127.0.0.35", "vmss_2": "127.0.0.36", "spot_0": "127.0.0.37", "zonal_0": "127.0.0.38",
}

// seers returns the VMs whose document lists event id, sorted.
func seers(t *testing.T, s *server, id string) []string {
	t.Helper()
	var out []string
	for name, ip := range topologyIPs {
		if strings.Contains(s.events(t, ip, "2020-07-01"), id) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// TestTopologyEndToEnd checks, on the real binary, exactly which VMs see
// each kind of event and that out-of-scope approvals are refused.
func TestTopologyEndToEnd(t *testing.T) {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleet, []byte(topologyFleet), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, filepath.Join(dir, "data"), fleet)
	for _, ip := range topologyIPs { // every VM polls once: enabled
		s.events(t, ip, "2020-07-01")
	}
	id := func(args ...string) string { return strings.TrimSpace(s.mustCLI(t, args...)) }
	cases := []struct {
		kind    string
		id      string
		want    []string
		outside string
	}{
		{"Freeze in availability set as1", id("event", "create", "--type", "Freeze", "--vm", "a1_0"), []string{"a1_0", "a1_1"}, "a2_0"},
		{"Terminate of vmss_0 (placement group pg0)", id("vm", "delete", "vmss_0"), []string{"vmss_0", "vmss_1"}, "vmss_2"},
		{"Preempt of the Spot VM", id("vm", "evict", "spot_0"), []string{"spot_0"}, "zonal_0"},
		{"Redeploy of the standalone zonal VM", id("vm", "degrade", "zonal_0"), []string{"zonal_0"}, "spot_0"},
	}
	wave := id("maintenance", "start", "--scope", "as2", "--type", "Reboot")
	var list struct {
		Waves []struct{ Domains []struct{ Event string } }
	}
	if err := jsonUnmarshal(s.mustCLI(t, "maintenance", "list", "--json"), &list); err != nil || len(list.Waves) != 1 || len(list.Waves[0].Domains) != 2 {
		t.Fatalf("maintenance list for wave %s: %v %+v", wave, err, list)
	}
	cases = append(cases, struct {
		kind    string
		id      string
		want    []string
		outside string
	}{"wave over as2, update domain 0", list.Waves[0].Domains[0].Event, []string{"a2_0", "a2_1"}, "a1_0"})
	// The wave's second domain is Pending: nobody sees it yet.
	if got := seers(t, s, list.Waves[0].Domains[1].Event); len(got) != 0 {
		t.Errorf("the Pending domain is seen by %v", got)
	}

	for _, c := range cases {
		if got := seers(t, s, c.id); !slices.Equal(got, c.want) {
			t.Errorf("%s: seen by %v, want %v", c.kind, got, c.want)
		}
		code, body := s.approve(t, topologyIPs[c.outside], c.id)
		if want := fmt.Sprintf(`{"error": "Bad request. EventId %s is not a scheduled event of this VM"}`, c.id); code != 400 || body != want {
			t.Errorf("%s: approval from %s: %d %s", c.kind, c.outside, code, body)
		}
	}
	// Terminate: exact bytes, the scale set's 6-minute notice.
	term := s.event(t, cases[1].id)
	if d := term.NotBefore.Sub(term.Created); d < 6*60e9 || d > 6*60e9+1e9 {
		t.Errorf("Terminate notice %v, want the scale set's PT6M", d)
	}
	wantDoc(t, s.events(t, topologyIPs["vmss_1"], "2020-07-01"), `{"DocumentIncarnation":2,"Events":[`+
		eventJSON(term.ID, "Scheduled", "Terminate", `"vmss_0"`, term.NotBefore.UTC().Format("Mon, 02 Jan 2006 15:04:05 GMT"), "User", -1)+`]}`)
	// Terminate is not shown to api-versions before 2019-01-01.
	wantDoc(t, s.events(t, topologyIPs["vmss_1"], "2017-11-01"), `{"DocumentIncarnation":2,"Events":[]}`)

	// The Spot VM's Preempt completes: the VM is gone and gets 403.
	s.mustCLI(t, "event", "start", cases[2].id)
	s.mustCLI(t, "event", "complete", cases[2].id)
	req, _ := http.NewRequest("GET", "http://"+s.metadata+"/metadata/scheduledevents?api-version=2020-07-01", nil)
	req.Header.Set("Metadata", "true")
	resp, err := vmClient(topologyIPs["spot_0"]).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || string(b) != `{"error": "Forbidden. VM spot_0 has been deleted"}` {
		t.Fatalf("deleted VM: %d %s", resp.StatusCode, b)
	}
	if out := s.mustCLI(t, "vm", "list"); !strings.Contains(out, "spot_0") || !strings.Contains(out, "deleted") {
		t.Fatalf("vm list does not show the deleted VM:\n%s", out)
	}
	s.stop(t)
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

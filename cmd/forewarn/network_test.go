package main

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/report"
)

// TestVMNetworks: vm list shows a NETWORK column once a VM has a
// network, vm show a Network line, and fleet export writes the network
// so that fleet apply takes the export back unchanged.
func TestVMNetworks(t *testing.T) {
	a := netip.MustParseAddr("10.0.0.4")
	fleet := &forewarn.Fleet{VMs: []*forewarn.VM{
		{Name: "web_0", IP: a, Provider: forewarn.Azure},
		{Name: "gce_0", IP: netip.MustParseAddr("10.1.0.2"), Provider: forewarn.GCE, Zone: "us-central1-a",
			OnHostMaintenance: "MIGRATE", MachineType: "e2-standard-2", Project: "forewarn-project"},
	}}
	_, url := fleetServer(t, fleet)
	t.Setenv(serverEnv, url)

	flat := "NAME   IP        PROVIDER  STATE    ENABLED  LAST SEEN  SCOPE  ZONE           UD  SPOT  INCARNATION  EVENTS\n" +
		"web_0  10.0.0.4  azure     running  no       -          -      -              0   -     1            -\n" +
		"gce_0  10.1.0.2  gce       running  no       -          -      us-central1-a  -   -     1            -\n"
	if got := cliOK(t, "vm", "list"); got != flat {
		t.Errorf("vm list of a fleet of no network:\n%s\nwant:\n%s", got, flat)
	}
	if out := cliOK(t, "vm", "add", "blue_0", "--ip", "10.0.0.4", "--set", "network=blue"); !strings.HasPrefix(out, "blue_0 added") {
		t.Fatalf("vm add on blue printed %q", out)
	}
	if r := runCLI(t, "vm", "add", "blue_1", "--ip", "10.0.0.4", "--set", "network=blue"); r.code == 0 ||
		!strings.Contains(r.stderr, `VM "blue_1": ip 10.0.0.4 on network blue is already used by blue_0`) {
		t.Errorf("vm add of blue_0's address on blue: exit %d, stderr %q", r.code, r.stderr)
	}
	want := "NAME    IP        NETWORK  PROVIDER  STATE    ENABLED  LAST SEEN  SCOPE  ZONE           UD  SPOT  INCARNATION  EVENTS\n" +
		"web_0   10.0.0.4  -        azure     running  no       -          -      -              0   -     1            -\n" +
		"gce_0   10.1.0.2  -        gce       running  no       -          -      us-central1-a  -   -     1            -\n" +
		"blue_0  10.0.0.4  blue     azure     running  no       -          -      -              0   -     1            -\n"
	if got := cliOK(t, "vm", "list"); got != want {
		t.Errorf("vm list:\n%s\nwant:\n%s", got, want)
	}
	if out := cliOK(t, "vm", "list", "--json"); !strings.Contains(out, `"name": "blue_0",`+"\n"+`      "ip": "10.0.0.4",`+"\n"+`      "network": "blue",`) {
		t.Errorf("vm list --json:\n%s", out)
	}
	if out := cliOK(t, "vm", "show", "blue_0"); !strings.Contains(out, "IP:           10.0.0.4\nNetwork:      blue\nProvider:") {
		t.Errorf("vm show blue_0:\n%s", out)
	}
	if out := cliOK(t, "vm", "show", "web_0"); strings.Contains(out, "Network:") {
		t.Errorf("vm show web_0, of no network:\n%s", out)
	}

	exported := cliOK(t, "fleet", "export")
	if !strings.Contains(exported, "  - {name: blue_0, ip: 10.0.0.4, network: blue, provider: azure}\n") ||
		!strings.Contains(exported, "  - {name: web_0, ip: 10.0.0.4, provider: azure}\n") {
		t.Fatalf("fleet export:\n%s", exported)
	}
	exp := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(exp, []byte(exported), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := cliOK(t, "fleet", "apply", exp, "--prune"); !strings.HasPrefix(out, "changed: 0 added, 0 changed, 0 removed (VMs)") {
		t.Errorf("applying the export back printed %q", out)
	}
	moved := strings.Replace(exported, "network: blue", "network: red", 1)
	if err := os.WriteFile(exp, []byte(moved), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := cliOK(t, "fleet", "apply", exp, "--dry-run"); !strings.Contains(out, "blue_0") || !strings.Contains(out, "network") {
		t.Errorf("a dry run moving blue_0 to red printed %q", out)
	}
	if again := cliOK(t, "fleet", "export"); again != exported {
		t.Errorf("export after the dry run:\n%s\nbefore:\n%s", again, exported)
	}
}

// TestReportTableNetworks: the report's VM table has a NETWORK column
// once a VM has a network, and keeps its columns otherwise.
func TestReportTableNetworks(t *testing.T) {
	rep := &report.Report{VMs: []report.VM{{Name: "flat", Provider: forewarn.Azure}}}
	var b strings.Builder
	if err := printReport(&b, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "VM    API    REQUESTS") {
		t.Errorf("report of a fleet of no network:\n%s", b.String())
	}
	rep.VMs = append(rep.VMs, report.VM{Name: "blue", Network: "blue", Provider: forewarn.Azure})
	b.Reset()
	if err := printReport(&b, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "VM    NETWORK  API    REQUESTS") || !strings.Contains(b.String(), "\nflat  -        azure  0 ") ||
		!strings.Contains(b.String(), "\nblue  blue     azure  0 ") {
		t.Errorf("report with a network:\n%s", b.String())
	}
}

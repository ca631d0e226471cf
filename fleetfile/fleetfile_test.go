package fleetfile_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/fleetfile"
)

func TestParseIssueShape(t *testing.T) {
	f, err := fleetfile.Parse([]byte(`
vms:
  - name: web_0          # the name shown in Resources and in compute/name
    ip: 127.0.0.2        # the source address this VM's requests come from
    provider: azure      # azure (default) | gce (later issue)
    availabilitySet: web # optional
    updateDomain: 0      # optional
  - name: web_1
    ip: 127.0.0.3
    availabilitySet: web
    updateDomain: 1
  - name: mig
    ip: "::ffff:127.0.0.4"
    provider: GCE
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []forewarn.VM{
		{Name: "web_0", IP: netip.MustParseAddr("127.0.0.2"), Provider: forewarn.Azure, AvailabilitySet: "web"},
		{Name: "web_1", IP: netip.MustParseAddr("127.0.0.3"), Provider: forewarn.Azure, AvailabilitySet: "web", UpdateDomain: 1},
		{Name: "mig", IP: netip.MustParseAddr("127.0.0.4"), Provider: forewarn.GCE, OnHostMaintenance: "MIGRATE",
			Zone: "us-central1-a", MachineType: "e2-standard-2", Project: "forewarn-project"},
	}
	if len(f.VMs) != len(want) {
		t.Fatalf("%d VMs, want %d", len(f.VMs), len(want))
	}
	for i := range want {
		if *f.VMs[i] != want[i] {
			t.Errorf("vm %d: %+v, want %+v", i, *f.VMs[i], want[i])
		}
	}
}

func TestParseErrors(t *testing.T) {
	cases := map[string]string{
		"":                                     "no VMs: the file is empty",
		"vms: []":                              "no VMs: the vms list is empty",
		"vms:\n  - ip: 127.0.0.2":              "vms[0]: name is required",
		"vms:\n  - name: a":                    "vms[0] (a): ip is required",
		"vms:\n  - name: a\n    ip: nope":      `vms[0] (a): ip "nope" is not an IP address`,
		"vms:\n  - name: a b\n    ip: 1.2.3.4": "vms[0] (a b): name may not contain spaces, commas, slashes, quotes or backslashes",
		"vms:\n  - name: a\n    ip: 1.2.3.4\n  - name: a\n    ip: 1.2.3.5": "vms[1] (a): name is already used by vms[0]",
		"vms:\n  - name: a\n    ip: 1.2.3.4\n  - name: b\n    ip: 1.2.3.4": "vms[1] (b): ip 1.2.3.4 is already used by a",
		"vms:\n  - name: a\n    ip: 1.2.3.4\n    provider: aws":            `vms[0] (a): provider "aws" is not azure or gce`,
		"vms:\n  - name: a\n    ip: 1.2.3.4\n    updateDomain: -1":         "vms[0] (a): updateDomain -1 is negative",
		"vms:\n  - name: a\n    ip: 1.2.3.4\n    availabiltySet: web":      "unmarshal errors:\n  line 4: field availabiltySet not found in type fleetfile.vmEntry",
		"vms:\n  - name: a\n    ip: 1.2.3.4\n    updateDomain: x":          "unmarshal errors:\n  line 4: cannot unmarshal !!str `x` into int",
	}
	for in, want := range cases {
		_, err := fleetfile.Parse([]byte(in))
		if forewarn.ErrorCode(err) != forewarn.EINVALID || forewarn.ErrorMessage(err) != want {
			t.Errorf("Parse(%q):\n got %v\nwant %s", in, err, want)
		}
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(p, []byte("vms: []"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := fleetfile.Load(p)
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "vms list is empty") {
		t.Fatalf("Load: %v", err)
	}
	if _, err := fleetfile.Load(p + ".missing"); err == nil || !strings.Contains(err.Error(), "fleet.yaml.missing") {
		t.Fatalf("Load missing: %v", err)
	}
}

func TestDefault(t *testing.T) {
	f := fleetfile.Default()
	if len(f.VMs) != 2 || f.VMs[0].Provider != forewarn.Azure || f.VMs[0].IP.IsValid() || f.VMs[0].Name == "" {
		t.Fatalf("default fleet: %+v", f.VMs[0])
	}
	if g := f.VMs[1]; g.Provider != forewarn.GCE || g.IP.IsValid() || g.Name != f.VMs[0].Name+"-gce" || g.OnHostMaintenance != "MIGRATE" {
		t.Fatalf("default GCE VM: %+v", g)
	}
}

func TestProviderKeys(t *testing.T) {
	f, err := fleetfile.Parse([]byte(`
vms:
  - {name: gpu, ip: 10.0.0.1, provider: gce, gpu: true, zone: europe-west1-b, machineType: a2-highgpu-1g, project: p1}
  - {name: spot, ip: 10.0.0.2, provider: gce, provisioningModel: SPOT}
  - {name: old, ip: 10.0.0.3, provider: gce, preemptible: true}
  - {name: st, ip: 10.0.0.4, provider: gce, soleTenant: true, onHostMaintenance: terminate}
  - {name: az, ip: 10.0.0.5, priority: Spot, zone: "1"}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []forewarn.VM{
		{Name: "gpu", Provider: forewarn.GCE, GPU: true, OnHostMaintenance: "TERMINATE", Zone: "europe-west1-b", MachineType: "a2-highgpu-1g", Project: "p1"},
		{Name: "spot", Provider: forewarn.GCE, Spot: true, OnHostMaintenance: "TERMINATE", Zone: "us-central1-a", MachineType: "e2-standard-2", Project: "forewarn-project"},
		{Name: "old", Provider: forewarn.GCE, Preemptible: true, OnHostMaintenance: "TERMINATE", Zone: "us-central1-a", MachineType: "e2-standard-2", Project: "forewarn-project"},
		{Name: "st", Provider: forewarn.GCE, SoleTenant: true, OnHostMaintenance: "TERMINATE", Zone: "us-central1-a", MachineType: "e2-standard-2", Project: "forewarn-project"},
		{Name: "az", Provider: forewarn.Azure, Spot: true, Zone: "1"},
	}
	for i := range want {
		got := *f.VMs[i]
		got.IP = netip.Addr{}
		if got != want[i] {
			t.Errorf("vm %d:\n got %+v\nwant %+v", i, got, want[i])
		}
	}
	for in, msg := range map[string]string{
		"{name: a, ip: 1.1.1.1, provider: gce, gpu: true, onHostMaintenance: MIGRATE}":         "vms[0] (a): onHostMaintenance MIGRATE is not possible with gpu: true (GPU VMs are stopped, not migrated)",
		"{name: a, ip: 1.1.1.1, provider: gce, preemptible: true, onHostMaintenance: MIGRATE}": "vms[0] (a): onHostMaintenance MIGRATE is not possible for a preemptible or Spot VM",
		"{name: a, ip: 1.1.1.1, provider: gce, onHostMaintenance: STOP}":                       `vms[0] (a): onHostMaintenance "STOP" is not MIGRATE or TERMINATE`,
		"{name: a, ip: 1.1.1.1, provider: gce, provisioningModel: CHEAP}":                      `vms[0] (a): provisioningModel "CHEAP" is not STANDARD or SPOT`,
		"{name: a, ip: 1.1.1.1, provider: gce, priority: Spot}":                                "vms[0] (a): priority is an azure key; use preemptible or provisioningModel on gce",
		"{name: a, ip: 1.1.1.1, gpu: true}":                                                    "vms[0] (a): gpu is a gce key; this VM's provider is azure",
		"{name: a, ip: 1.1.1.1, priority: Low}":                                                `vms[0] (a): priority "Low" is not Spot or Regular`,
	} {
		_, err := fleetfile.Parse([]byte("vms:\n  - " + in))
		if forewarn.ErrorMessage(err) != msg {
			t.Errorf("%s:\n got %v\nwant %s", in, err, msg)
		}
	}
}

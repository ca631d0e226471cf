package fleetfile_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/fleetfile"
)

// Fleet files of the tests below, each with VMs of many shapes; the
// round-trip tests (encode_test.go) encode them all.
const (
	issueShapeDoc = `
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
`
	providerKeysDoc = `
vms:
  - {name: gpu, ip: 10.0.0.1, provider: gce, gpu: true, zone: europe-west1-b, machineType: a2-highgpu-1g, project: p1}
  - {name: spot, ip: 10.0.0.2, provider: gce, provisioningModel: SPOT}
  - {name: old, ip: 10.0.0.3, provider: gce, preemptible: true}
  - {name: st, ip: 10.0.0.4, provider: gce, soleTenant: true, onHostMaintenance: terminate}
  - {name: az, ip: 10.0.0.5, priority: Spot, zone: "1"}
`
	azureTopologyDoc = `
vms:
  - {name: web_a0, ip: 10.0.1.1, availabilitySet: web, updateDomain: 0}
  - {name: web_a1, ip: 10.0.1.2, availabilitySet: web, updateDomain: 1}
  - {name: vmss_0, ip: 10.0.1.3, scaleSet: vmss, instanceId: 0, placementGroup: pg0}
  - {name: vmss_17, ip: 10.0.1.4, scaleSet: vmss, instanceId: "17", placementGroup: pg1, updateDomain: 2, priority: Spot, zone: "2"}
  - {name: flex_1a2b3c4d, ip: 10.0.1.5, scaleSet: flex, instanceId: 1a2b3c4d}
  - {name: flex_12345678, ip: 10.0.1.6, scaleSet: flex, instanceId: "12345678"}
  - {name: FrontEnd_IN_0, ip: 10.0.1.7, cloudService: frontend, updateDomain: 0}
  - {name: FrontEnd_IN_1, ip: 10.0.1.8, cloudService: frontend, updateDomain: 1}
  - {name: zonal, ip: 10.0.1.9, zone: "3"}
  - {name: ud, ip: 10.0.1.10, updateDomain: 4}
`
	scaleSetsDoc = `
vms:
  - {name: web_0, ip: 1.1.1.1, scaleSet: web, instanceId: 0}
  - {name: api_0, ip: 1.1.1.2, scaleSet: api, instanceId: 0}
scaleSets:
  - name: web
    terminateNotBeforeTimeout: PT10M
  - name: api                  # the default notice
    terminateNotifications: false
  - name: min
    terminateNotBeforeTimeout: PT300S
  - name: max
    terminateNotBeforeTimeout: PT0.25H
  - name: secs
    terminateNotBeforeTimeout: PT7M30.5S
  - name: blank
    terminateNotBeforeTimeout:
`
	awsKeysDoc = `vms:
  - {name: web, ip: 10.0.0.1, provider: aws}
  - {name: spot, ip: 10.0.0.2, provider: aws, instanceId: i-0123456789abcdef0, instanceType: c5.xlarge, availabilityZone: eu-west-1b,
     market: spot, spotInterruptionBehavior: Hibernate, httpTokens: required, httpPutResponseHopLimit: 2}
  - {name: asg, ip: 10.0.0.3, provider: aws, autoScalingGroup: web-asg, warmPool: stopped, market: spot}
  - {name: ids, ip: 10.0.0.4, provider: aws, amiId: ami-0abcdef1234567890, accountId: "210987654321",
     securityGroups: "web, ssh access", subnetId: subnet-be9b61d7, vpcId: vpc-0123456789abcdef0}
`
)

func TestParseIssueShape(t *testing.T) {
	f, err := fleetfile.Parse([]byte(issueShapeDoc))
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
		"vms:\n  - name: a\n    ip: nope":      `vms[0] (a): ip "nope" is not an IP address (or any)`,
		"vms:\n  - name: a b\n    ip: 1.2.3.4": "vms[0] (a b): name may not contain spaces, commas, slashes, quotes or backslashes",
		"vms:\n  - name: a\n    ip: 1.2.3.4\n  - name: a\n    ip: 1.2.3.5": "vms[1] (a): name is already used by vms[0]",
		"vms:\n  - name: a\n    ip: 1.2.3.4\n  - name: b\n    ip: 1.2.3.4": "vms[1] (b): ip 1.2.3.4 is already used by a",
		"vms:\n  - name: a\n    ip: 1.2.3.4\n    provider: ibm":            `vms[0] (a): provider "ibm" is not azure, gce or aws`,
		"vms:\n  - name: a\n    ip: 1.2.3.4\n    updateDomain: -1":         "vms[0] (a): updateDomain -1 is negative",
		"vms:\n  - name: a\n    ip: 1.2.3.4\n    availabiltySet: web":      "line 4: unknown key availabiltySet of a VM",
		"vms:\n  - name: a\n    ip: 1.2.3.4\n    updateDomain: x":          "line 4: cannot unmarshal !!str `x` into int",
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
	if len(f.VMs) != 3 || f.VMs[0].Provider != forewarn.Azure || f.VMs[0].IP.IsValid() || f.VMs[0].Name == "" {
		t.Fatalf("default fleet: %+v", f.VMs[0])
	}
	if g := f.VMs[1]; g.Provider != forewarn.GCE || g.IP.IsValid() || g.Name != f.VMs[0].Name+"-gce" || g.OnHostMaintenance != "MIGRATE" {
		t.Fatalf("default GCE VM: %+v", g)
	}
	a := f.VMs[2]
	want := forewarn.VM{Name: f.VMs[0].Name + "-aws", Provider: forewarn.AWS, InstanceID: fleetfile.DefaultInstanceID(f.VMs[0].Name + "-aws"),
		Zone: "us-east-1a", MachineType: "m5.large", HTTPTokens: "optional", HopLimit: 1}
	if a.IP.IsValid() || !reflect.DeepEqual(*a, want) {
		t.Fatalf("default EC2 VM: %+v, want %+v", *a, want)
	}
}

func TestProviderKeys(t *testing.T) {
	f, err := fleetfile.Parse([]byte(providerKeysDoc))
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

func TestAzureTopology(t *testing.T) {
	f, err := fleetfile.Parse([]byte(azureTopologyDoc))
	if err != nil {
		t.Fatal(err)
	}
	want := []forewarn.VM{
		{Name: "web_a0", Provider: forewarn.Azure, AvailabilitySet: "web"},
		{Name: "web_a1", Provider: forewarn.Azure, AvailabilitySet: "web", UpdateDomain: 1},
		{Name: "vmss_0", Provider: forewarn.Azure, ScaleSet: "vmss", InstanceID: "0", PlacementGroup: "pg0"},
		{Name: "vmss_17", Provider: forewarn.Azure, ScaleSet: "vmss", InstanceID: "17", PlacementGroup: "pg1", UpdateDomain: 2, Spot: true, Zone: "2"},
		{Name: "flex_1a2b3c4d", Provider: forewarn.Azure, ScaleSet: "flex", InstanceID: "1a2b3c4d"},
		{Name: "flex_12345678", Provider: forewarn.Azure, ScaleSet: "flex", InstanceID: "12345678"},
		{Name: "FrontEnd_IN_0", Provider: forewarn.Azure, CloudService: "frontend"},
		{Name: "FrontEnd_IN_1", Provider: forewarn.Azure, CloudService: "frontend", UpdateDomain: 1},
		{Name: "zonal", Provider: forewarn.Azure, Zone: "3"},
		{Name: "ud", Provider: forewarn.Azure, UpdateDomain: 4},
	}
	if len(f.VMs) != len(want) {
		t.Fatalf("%d VMs, want %d", len(f.VMs), len(want))
	}
	for i := range want {
		got := *f.VMs[i]
		got.IP = netip.Addr{}
		if got != want[i] {
			t.Errorf("vm %d:\n got %+v\nwant %+v", i, got, want[i])
		}
	}
	if f.ScaleSets != nil {
		t.Errorf("ScaleSets = %v, want none", f.ScaleSets)
	}
	// A scale set that is not listed under scaleSets gets the default notice.
	if r := f.ScaleSetSettings("vmss"); r.TerminateTimeout != forewarn.DefaultTerminateTimeout || !r.TerminateNotifications {
		t.Errorf("ScaleSetSettings(vmss) = %+v", r)
	}
}

func TestAzureTopologyErrors(t *testing.T) {
	cases := []struct{ in, want string }{
		// Azure keys on a Compute Engine VM.
		{"{name: a, ip: 1.1.1.1, provider: gce, availabilitySet: web}", "vms[0] (a): availabilitySet is an azure key; this VM's provider is gce"},
		{"{name: a, ip: 1.1.1.1, provider: gce, updateDomain: 0}", "vms[0] (a): updateDomain is an azure key; this VM's provider is gce"},
		{"{name: a, ip: 1.1.1.1, provider: gce, updateDomain: -1}", "vms[0] (a): updateDomain is an azure key; this VM's provider is gce"},
		{"{name: a, ip: 1.1.1.1, provider: gce, cloudService: cs}", "vms[0] (a): cloudService is an azure key; this VM's provider is gce"},
		{"{name: a_0, ip: 1.1.1.1, provider: gce, scaleSet: a, instanceId: 0}", "vms[0] (a_0): scaleSet is an azure key; this VM's provider is gce"},
		{"{name: a, ip: 1.1.1.1, provider: gce, instanceId: 0}", "vms[0] (a): instanceId is an azure key; this VM's provider is gce"},
		{"{name: a, ip: 1.1.1.1, provider: gce, placementGroup: pg0}", "vms[0] (a): placementGroup is an azure key; this VM's provider is gce"},
		// The first gce key set is the one named, every time.
		{"{name: a, ip: 1.1.1.1, project: p, machineType: m, soleTenant: true, provisioningModel: SPOT, preemptible: true, gpu: true, onHostMaintenance: MIGRATE}",
			"vms[0] (a): onHostMaintenance is a gce key; this VM's provider is azure"},
		{"{name: a, ip: 1.1.1.1, project: p, machineType: m}", "vms[0] (a): machineType is a gce key; this VM's provider is azure"},
		// scaleSet and instanceId.
		{"{name: web_0, ip: 1.1.1.1, scaleSet: web}", "vms[0] (web_0): scaleSet needs instanceId"},
		{`{name: web_0, ip: 1.1.1.1, scaleSet: web, instanceId: ""}`, "vms[0] (web_0): scaleSet needs instanceId"},
		{"{name: web_0, ip: 1.1.1.1, instanceId: 0}", "vms[0] (web_0): instanceId needs scaleSet"},
		{"{name: web_0, ip: 1.1.1.1, placementGroup: pg0}", "vms[0] (web_0): placementGroup needs scaleSet"},
		{"{name: web_9, ip: 1.1.1.1, scaleSet: web, instanceId: 0}", `vms[0] (web_9): name must be web_0 (scaleSet web + "_" + instanceId 0)`},
		{"{name: web0, ip: 1.1.1.1, scaleSet: web, instanceId: 0}", `vms[0] (web0): name must be web_0 (scaleSet web + "_" + instanceId 0)`},
		{"{name: web-0, ip: 1.1.1.1, scaleSet: web, instanceId: 0}", `vms[0] (web-0): name must be web_0 (scaleSet web + "_" + instanceId 0)`},
		{"{name: Web_0, ip: 1.1.1.1, scaleSet: web, instanceId: 0}", `vms[0] (Web_0): name must be web_0 (scaleSet web + "_" + instanceId 0)`},
		{"{name: web_x, ip: 1.1.1.1, scaleSet: web, instanceId: x}", `vms[0] (web_x): instanceId "x" is not a decimal number or 8 lowercase hex digits`},
		{"{name: web_-1, ip: 1.1.1.1, scaleSet: web, instanceId: -1}", `vms[0] (web_-1): instanceId "-1" is not a decimal number or 8 lowercase hex digits`},
		{"{name: web_1a2b3c4, ip: 1.1.1.1, scaleSet: web, instanceId: 1a2b3c4}", `vms[0] (web_1a2b3c4): instanceId "1a2b3c4" is not a decimal number or 8 lowercase hex digits`},
		{"{name: web_1a2b3c4d5, ip: 1.1.1.1, scaleSet: web, instanceId: 1a2b3c4d5}", `vms[0] (web_1a2b3c4d5): instanceId "1a2b3c4d5" is not a decimal number or 8 lowercase hex digits`},
		{"{name: web_1A2B3C4D, ip: 1.1.1.1, scaleSet: web, instanceId: 1A2B3C4D}", `vms[0] (web_1A2B3C4D): instanceId "1A2B3C4D" is not a decimal number or 8 lowercase hex digits`},
		{"{name: web_0x1f, ip: 1.1.1.1, scaleSet: web, instanceId: 0x1f}", `vms[0] (web_0x1f): instanceId "0x1f" is not a decimal number or 8 lowercase hex digits`},
		{"{name: web_1.5, ip: 1.1.1.1, scaleSet: web, instanceId: 1.5}", `vms[0] (web_1.5): instanceId "1.5" is not a decimal number or 8 lowercase hex digits`},
		// Combinations Azure does not allow.
		{"{name: web_0, ip: 1.1.1.1, availabilitySet: web, scaleSet: web, instanceId: 0}",
			"vms[0] (web_0): availabilitySet cannot be combined with scaleSet; a VM is in at most one availability set, cloud service or scale set"},
		{"{name: a, ip: 1.1.1.1, availabilitySet: web, cloudService: cs}",
			"vms[0] (a): availabilitySet cannot be combined with cloudService; a VM is in at most one availability set, cloud service or scale set"},
		{"{name: web_0, ip: 1.1.1.1, cloudService: cs, scaleSet: web, instanceId: 0}",
			"vms[0] (web_0): cloudService cannot be combined with scaleSet; a VM is in at most one availability set, cloud service or scale set"},
		{`{name: a, ip: 1.1.1.1, availabilitySet: web, zone: "1"}`,
			"vms[0] (a): availabilitySet cannot be combined with zone; an availability set is not zonal"},
		{"{name: a, ip: 1.1.1.1, availabilitySet: web, updateDomain: -1}", "vms[0] (a): updateDomain -1 is negative"},
	}
	for _, c := range cases {
		_, err := fleetfile.Parse([]byte("vms:\n  - " + c.in))
		if forewarn.ErrorCode(err) != forewarn.EINVALID || forewarn.ErrorMessage(err) != c.want {
			t.Errorf("%s:\n got %v\nwant %s", c.in, err, c.want)
		}
	}
	// The VM named in a message is the one at fault, not the first.
	_, err := fleetfile.Parse([]byte(`
vms:
  - {name: web_0, ip: 1.1.1.1, scaleSet: web, instanceId: 0}
  - {name: web_1, ip: 1.1.1.2, scaleSet: web, instanceId: 1}
  - {name: web_2, ip: 1.1.1.3, scaleSet: web, instanceId: 2}
  - {name: web_9, ip: 1.1.1.4, scaleSet: web, instanceId: 3}
`))
	if want := `vms[3] (web_9): name must be web_3 (scaleSet web + "_" + instanceId 3)`; forewarn.ErrorMessage(err) != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
	// Two VMs with one instance ID have one name.
	_, err = fleetfile.Parse([]byte(`
vms:
  - {name: web_0, ip: 1.1.1.1, scaleSet: web, instanceId: 0}
  - {name: web_0, ip: 1.1.1.2, scaleSet: web, instanceId: "0"}
`))
	if want := "vms[1] (web_0): name is already used by vms[0]"; forewarn.ErrorMessage(err) != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

func TestScaleSets(t *testing.T) {
	f, err := fleetfile.Parse([]byte(scaleSetsDoc))
	if err != nil {
		t.Fatal(err)
	}
	want := []forewarn.ScaleSet{
		{Name: "web", TerminateTimeout: 10 * time.Minute},
		{Name: "api", TerminateTimeout: 5 * time.Minute, DisableTerminateNotifications: true},
		{Name: "min", TerminateTimeout: 5 * time.Minute},
		{Name: "max", TerminateTimeout: 15 * time.Minute},
		{Name: "secs", TerminateTimeout: 7*time.Minute + 30500*time.Millisecond},
		{Name: "blank", TerminateTimeout: 5 * time.Minute},
	}
	if len(f.ScaleSets) != len(want) {
		t.Fatalf("%d scale sets, want %d", len(f.ScaleSets), len(want))
	}
	for i := range want {
		if *f.ScaleSets[i] != want[i] {
			t.Errorf("scale set %d: %+v, want %+v", i, *f.ScaleSets[i], want[i])
		}
	}
	for name, want := range map[string]forewarn.ScaleSetRecord{
		"web":      {TerminateTimeout: 10 * time.Minute, TerminateNotifications: true},
		"api":      {TerminateTimeout: 5 * time.Minute},
		"unlisted": {TerminateTimeout: 5 * time.Minute, TerminateNotifications: true},
	} {
		if got := f.ScaleSetSettings(name); got != want {
			t.Errorf("ScaleSetSettings(%s) = %+v, want %+v", name, got, want)
		}
	}
}

func TestScaleSetErrors(t *testing.T) {
	const vms = "vms:\n  - {name: a, ip: 1.1.1.1}\nscaleSets:\n"
	cases := []struct{ in, want string }{
		{"  - terminateNotBeforeTimeout: PT5M", "scaleSets[0]: name is required"},
		{"  - name: web\n  - name: web", "scaleSets[1] (web): name is already used by scaleSets[0]"},
		{"  - {name: web, terminateNotBeforeTimeout: PT20M}", `scaleSets[0] (web): terminateNotBeforeTimeout "PT20M" is outside PT5M..PT15M`},
		{"  - {name: web, terminateNotBeforeTimeout: PT4M59S}", `scaleSets[0] (web): terminateNotBeforeTimeout "PT4M59S" is outside PT5M..PT15M`},
		{"  - {name: web, terminateNotBeforeTimeout: PT15M0.5S}", `scaleSets[0] (web): terminateNotBeforeTimeout "PT15M0.5S" is outside PT5M..PT15M`},
		{"  - {name: web, terminateNotBeforeTimeout: PT0S}", `scaleSets[0] (web): terminateNotBeforeTimeout "PT0S" is outside PT5M..PT15M`},
		{"  - {name: web, terminateNotBeforeTimeout: P1D}", `scaleSets[0] (web): terminateNotBeforeTimeout "P1D" is outside PT5M..PT15M`},
		{"  - {name: web, terminateNotBeforeTimeout: 10m}", `scaleSets[0] (web): terminateNotBeforeTimeout "10m" is not an ISO 8601 duration: it does not start with P`},
		{"  - {name: web, terminateNotBeforeTimeout: 10}", `scaleSets[0] (web): terminateNotBeforeTimeout "10" is not an ISO 8601 duration: it does not start with P`},
		{`  - {name: web, terminateNotBeforeTimeout: ""}`, `scaleSets[0] (web): terminateNotBeforeTimeout "" is not an ISO 8601 duration: it is empty`},
		{"  - {name: web, terminateNotBeforeTimeout: PT}", `scaleSets[0] (web): terminateNotBeforeTimeout "PT" is not an ISO 8601 duration: it has no component after T`},
		{"  - {name: web, terminateNotBeforeTimeout: PT5M5M}", `scaleSets[0] (web): terminateNotBeforeTimeout "PT5M5M" is not an ISO 8601 duration: designator M is repeated`},
		{"  - {name: web, terminateNotBeforeTimeout: -PT5M}", `scaleSets[0] (web): terminateNotBeforeTimeout "-PT5M" is not an ISO 8601 duration: it has a sign; only positive durations are allowed`},
		{"  - name: ok\n  - {name: web, terminateNotBeforeTimeout: PT16M}", `scaleSets[1] (web): terminateNotBeforeTimeout "PT16M" is outside PT5M..PT15M`},
		{"  - {name: web, timeout: PT5M}", "line 4: unknown key timeout of a scale set"},
	}
	for _, c := range cases {
		_, err := fleetfile.Parse([]byte(vms + c.in))
		if forewarn.ErrorCode(err) != forewarn.EINVALID || forewarn.ErrorMessage(err) != c.want {
			t.Errorf("%s:\n got %v\nwant %s", c.in, err, c.want)
		}
	}
}

// TestExampleFleet keeps examples/fleet.yaml loadable.
func TestExampleFleet(t *testing.T) {
	f, err := fleetfile.Load(filepath.Join("..", "examples", "fleet.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.VMs) != 17 {
		t.Fatalf("%d VMs, want 17", len(f.VMs))
	}
	addrs := map[netip.Addr]bool{}
	for _, vm := range f.VMs {
		if !vm.IP.IsValid() || vm.IP.Compare(netip.MustParseAddr("127.0.0.10")) < 0 || !vm.IP.IsLoopback() || addrs[vm.IP] {
			t.Errorf("%s: ip %v is not a free loopback address from 127.0.0.10", vm.Name, vm.IP)
		}
		addrs[vm.IP] = true
	}
	for name, want := range map[string]forewarn.VM{
		"web_a1":        {Name: "web_a1", IP: netip.MustParseAddr("127.0.0.11"), Provider: forewarn.Azure, AvailabilitySet: "web", UpdateDomain: 1},
		"vmss_2":        {Name: "vmss_2", IP: netip.MustParseAddr("127.0.0.16"), Provider: forewarn.Azure, ScaleSet: "vmss", InstanceID: "2", PlacementGroup: "pg1"},
		"spot_0":        {Name: "spot_0", IP: netip.MustParseAddr("127.0.0.17"), Provider: forewarn.Azure, Spot: true},
		"zonal_0":       {Name: "zonal_0", IP: netip.MustParseAddr("127.0.0.18"), Provider: forewarn.Azure, Zone: "1"},
		"FrontEnd_IN_1": {Name: "FrontEnd_IN_1", IP: netip.MustParseAddr("127.0.0.20"), Provider: forewarn.Azure, CloudService: "frontend", UpdateDomain: 1},
		"gce-gpu-0": {Name: "gce-gpu-0", IP: netip.MustParseAddr("127.0.0.22"), Provider: forewarn.GCE, GPU: true, OnHostMaintenance: "TERMINATE",
			Zone: "us-central1-c", MachineType: "a2-highgpu-1g", Project: "forewarn-project"},
		"ec2-spot-0": {Name: "ec2-spot-0", IP: netip.MustParseAddr("127.0.0.32"), Provider: forewarn.AWS, InstanceID: fleetfile.DefaultInstanceID("ec2-spot-0"),
			Zone: "us-east-1a", MachineType: "m5.large", Spot: true, SpotInterruptionBehavior: "stop", HTTPTokens: "optional", HopLimit: 1},
		"ec2-asg-1": {Name: "ec2-asg-1", IP: netip.MustParseAddr("127.0.0.34"), Provider: forewarn.AWS, InstanceID: fleetfile.DefaultInstanceID("ec2-asg-1"),
			Zone: "us-east-1a", MachineType: "m5.large", AutoScalingGroup: "web", WarmPool: "Warmed:Stopped", HTTPTokens: "optional", HopLimit: 1},
	} {
		if vm := f.VM(name); vm == nil || *vm != want {
			t.Errorf("%s:\n got %+v\nwant %+v", name, vm, want)
		}
	}
	if len(f.ScaleSets) != 1 || *f.ScaleSets[0] != (forewarn.ScaleSet{Name: "vmss", TerminateTimeout: 5 * time.Minute}) {
		t.Errorf("scale sets: %v", f.ScaleSets)
	}
	vmss0, vmss1, vmss2 := f.VM("vmss_0"), f.VM("vmss_1"), f.VM("vmss_2")
	if !forewarn.SharesScope(vmss0, vmss1) || forewarn.SharesScope(vmss0, vmss2) {
		t.Error("vmss_0 should share a scope with vmss_1 (pg0) and not with vmss_2 (pg1)")
	}
}

func TestAWSKeys(t *testing.T) {
	f, err := fleetfile.Parse([]byte(awsKeysDoc))
	if err != nil {
		t.Fatal(err)
	}
	want := []forewarn.VM{
		{Name: "web", IP: netip.MustParseAddr("10.0.0.1"), Provider: forewarn.AWS, InstanceID: fleetfile.DefaultInstanceID("web"),
			Zone: "us-east-1a", MachineType: "m5.large", HTTPTokens: "optional", HopLimit: 1},
		{Name: "spot", IP: netip.MustParseAddr("10.0.0.2"), Provider: forewarn.AWS, InstanceID: "i-0123456789abcdef0",
			Zone: "eu-west-1b", MachineType: "c5.xlarge", Spot: true, SpotInterruptionBehavior: "hibernate", HTTPTokens: "required", HopLimit: 2},
		{Name: "asg", IP: netip.MustParseAddr("10.0.0.3"), Provider: forewarn.AWS, InstanceID: fleetfile.DefaultInstanceID("asg"),
			Zone: "us-east-1a", MachineType: "m5.large", AutoScalingGroup: "web-asg", WarmPool: "Warmed:Stopped",
			Spot: true, SpotInterruptionBehavior: "terminate", HTTPTokens: "optional", HopLimit: 1},
		{Name: "ids", IP: netip.MustParseAddr("10.0.0.4"), Provider: forewarn.AWS, InstanceID: fleetfile.DefaultInstanceID("ids"),
			Zone: "us-east-1a", MachineType: "m5.large", HTTPTokens: "optional", HopLimit: 1, AMIID: "ami-0abcdef1234567890",
			AccountID: "210987654321", SecurityGroups: "web\nssh access", SubnetID: "subnet-be9b61d7", VPCID: "vpc-0123456789abcdef0"},
	}
	if len(f.VMs) != len(want) {
		t.Fatalf("%d VMs, want %d", len(f.VMs), len(want))
	}
	for i, vm := range f.VMs {
		if !reflect.DeepEqual(*vm, want[i]) {
			t.Errorf("vms[%d] = %+v\nwant %+v", i, *vm, want[i])
		}
	}
	if id := fleetfile.DefaultInstanceID("web"); len(id) != 19 || !strings.HasPrefix(id, "i-") || id == fleetfile.DefaultInstanceID("web2") {
		t.Errorf("DefaultInstanceID(web) = %q, want i- and 17 hex digits, distinct per name", id)
	}
	if r := want[1].Region(); r != "eu-west-1" {
		t.Errorf("Region of eu-west-1b = %q", r)
	}
}

func TestAWSKeyErrors(t *testing.T) {
	for in, want := range map[string]string{
		"{name: a, ip: 1.1.1.1, provider: aws, instanceId: i-12}":                                                                              `vms[0] (a): instanceId "i-12" is not i- and 17 (or 8) lowercase hex digits`,
		"{name: a, ip: 1.1.1.1, provider: aws, availabilityZone: 1}":                                                                           `vms[0] (a): availabilityZone "1" is not an EC2 availability zone such as us-east-1a`,
		"{name: a, ip: 1.1.1.1, provider: aws, warmPool: stopped}":                                                                             "vms[0] (a): warmPool needs autoScalingGroup",
		"{name: a, ip: 1.1.1.1, provider: aws, autoScalingGroup: g, warmPool: cold}":                                                           `vms[0] (a): warmPool "cold" is not Stopped, Running or Hibernated`,
		"{name: a, ip: 1.1.1.1, provider: aws, market: reserved}":                                                                              `vms[0] (a): market "reserved" is not spot or on-demand`,
		"{name: a, ip: 1.1.1.1, provider: aws, spotInterruptionBehavior: stop}":                                                                "vms[0] (a): spotInterruptionBehavior needs market: spot",
		"{name: a, ip: 1.1.1.1, provider: aws, market: spot, spotInterruptionBehavior: x}":                                                     `vms[0] (a): spotInterruptionBehavior "x" is not terminate, stop or hibernate`,
		"{name: a, ip: 1.1.1.1, provider: aws, httpTokens: v2}":                                                                                `vms[0] (a): httpTokens "v2" is not optional or required`,
		"{name: a, ip: 1.1.1.1, provider: aws, httpPutResponseHopLimit: 65}":                                                                   "vms[0] (a): httpPutResponseHopLimit 65 is outside 1..64",
		"{name: a, ip: 1.1.1.1, provider: aws, amiId: ami-12}":                                                                                 `vms[0] (a): amiId "ami-12" is not ami- and 8 or 17 lowercase hex digits`,
		"{name: a, ip: 1.1.1.1, provider: aws, accountId: \"12345\"}":                                                                          `vms[0] (a): accountId "12345" is not 12 digits`,
		"{name: a, ip: 1.1.1.1, provider: aws, subnetId: sub-12345678}":                                                                        `vms[0] (a): subnetId "sub-12345678" is not subnet- and 8 or 17 lowercase hex digits`,
		"{name: a, ip: 1.1.1.1, provider: aws, vpcId: vpc-XYZ}":                                                                                `vms[0] (a): vpcId "vpc-XYZ" is not vpc- and 8 or 17 lowercase hex digits`,
		"{name: a, ip: 1.1.1.1, provider: aws, securityGroups: \"web,,ssh\"}":                                                                  `vms[0] (a): securityGroups "web,,ssh" holds an empty name or one over 255 characters`,
		"{name: a, ip: 1.1.1.1, provider: aws, securityGroups: \"web\\u202essh\"}":                                                             `vms[0] ("a"): securityGroups holds the invisible or control character U+202E`,
		"{name: a, ip: 1.1.1.1, provider: gce, vpcId: vpc-12345678}":                                                                           "vms[0] (a): vpcId is an aws key; this VM's provider is gce",
		"{name: a, ip: 1.1.1.1, securityGroups: web}":                                                                                          "vms[0] (a): securityGroups is an aws key; this VM's provider is azure",
		"{name: a, ip: 1.1.1.1, provider: aws, scaleSet: s}":                                                                                   "vms[0] (a): scaleSet is an azure key; this VM's provider is aws",
		"{name: a, ip: 1.1.1.1, provider: aws, zone: us-east-1a}":                                                                              "vms[0] (a): zone is a gce key; this VM's provider is aws",
		"{name: a, ip: 1.1.1.1, provider: aws, priority: Spot}":                                                                                "vms[0] (a): priority is an azure key; this VM's provider is aws",
		"{name: a, ip: 1.1.1.1, market: spot}":                                                                                                 "vms[0] (a): market is an aws key; this VM's provider is azure",
		"{name: a, ip: 1.1.1.1, provider: gce, httpTokens: required}":                                                                          "vms[0] (a): httpTokens is an aws key; this VM's provider is gce",
		"{name: a, ip: 1.1.1.1, provider: gce, instanceId: i-0123456789abcdef0}":                                                               "vms[0] (a): instanceId is an azure key; this VM's provider is gce",
		"[{name: a, ip: 1.1.1.1, provider: aws}, {name: b, ip: 1.1.1.2, provider: aws, instanceId: " + fleetfile.DefaultInstanceID("a") + "}]": "vms[1] (b): instanceId " + fleetfile.DefaultInstanceID("a") + " is already used by a",
	} {
		doc := "vms: [" + in + "]"
		if strings.HasPrefix(in, "[") {
			doc = "vms: " + in
		}
		_, err := fleetfile.Parse([]byte(doc))
		if err == nil || forewarn.ErrorMessage(err) != want {
			t.Errorf("%s:\n got %v\nwant %s", in, err, want)
		}
	}
}

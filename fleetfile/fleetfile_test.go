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
		{Name: "mig", IP: netip.MustParseAddr("127.0.0.4"), Provider: forewarn.GCE},
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
	if len(f.VMs) != 1 || f.VMs[0].Provider != forewarn.Azure || f.VMs[0].IP.IsValid() || f.VMs[0].Name == "" {
		t.Fatalf("default fleet: %+v", f.VMs[0])
	}
}

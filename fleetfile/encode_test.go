package fleetfile_test

import (
	"fmt"
	"math"
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

// shapes returns fleet documents with VMs and scale sets of every shape
// the tests know: the fleet files of the other tests, examples/fleet.yaml
// and a JSON document.
func shapes(t testing.TB) map[string][]byte {
	example, err := os.ReadFile(filepath.Join("..", "examples", "fleet.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{
		"issue shape":    []byte(issueShapeDoc),
		"provider keys":  []byte(providerKeysDoc),
		"azure topology": []byte(azureTopologyDoc),
		"scale sets":     []byte(scaleSetsDoc),
		"aws keys":       []byte(awsKeysDoc),
		"example":        example,
		"json": []byte(`{"vms": [{"name": "j", "ip": "fd00::1", "provider": "gce", "preemptible": true, "onHostMaintenance": "TERMINATE", "soleTenant": true},
			{"name": "k", "ip": "10.9.0.1", "provider": "aws", "market": "spot", "spotInterruptionBehavior": "terminate", "httpTokens": "optional",
			 "httpPutResponseHopLimit": 1, "instanceId": "i-0123abcd", "autoScalingGroup": "g", "warmPool": "Hibernated"}],
			"scaleSets": [{"name": "s", "terminateNotBeforeTimeout": "PT5M", "terminateNotifications": true}]}`),
	}
}

func mustParse(t testing.TB, doc []byte) *forewarn.Fleet {
	t.Helper()
	f, err := fleetfile.Parse(doc)
	if err != nil {
		t.Fatalf("Parse(%q): %v", doc, err)
	}
	return f
}

// sameFleet fails t unless a and b list equal VMs and scale sets.
func sameFleet(t testing.TB, what string, a, b *forewarn.Fleet) {
	t.Helper()
	if !reflect.DeepEqual(a.VMs, b.VMs) || !reflect.DeepEqual(a.ScaleSets, b.ScaleSets) {
		t.Fatalf("%s:\n got %s\nwant %s", what, dump(b), dump(a))
	}
}

func dump(f *forewarn.Fleet) string {
	var b strings.Builder
	for _, vm := range f.VMs {
		fmt.Fprintf(&b, "\n  %+v", vm)
	}
	for _, s := range f.ScaleSets {
		fmt.Fprintf(&b, "\n  scale set %+v", *s)
	}
	return b.String()
}

// TestEncodeRoundTrip: for every shape of VM and scale set, Parse of
// Encode gives the fleet back, Encode of that gives the same bytes, Diff
// finds nothing, and each VM's EntryJSON reads back as the VM.
func TestEncodeRoundTrip(t *testing.T) {
	for name, doc := range shapes(t) {
		f := mustParse(t, doc)
		enc, err := fleetfile.Encode(f)
		if err != nil {
			t.Fatalf("%s: Encode: %v", name, err)
		}
		g := mustParse(t, enc)
		sameFleet(t, name+": Parse(Encode(f))", f, g)
		if again, err := fleetfile.Encode(g); err != nil || string(again) != string(enc) {
			t.Errorf("%s: Encode again:\n%s\nfirst:\n%s", name, again, enc)
		}
		if d := fleetfile.Diff(f, g, true); !d.Empty() {
			t.Errorf("%s: Diff of the round trip: %+v", name, d)
		}
		for _, vm := range f.VMs {
			def, err := fleetfile.EntryJSON(vm)
			if err != nil {
				t.Fatalf("%s: EntryJSON(%s): %v", name, vm.Name, err)
			}
			back, err := fleetfile.ParseVM(vm.Name, def)
			if err != nil || *back != *vm {
				t.Errorf("%s: ParseVM(EntryJSON(%s)) = %+v, %v; want %+v\n%s", name, vm.Name, back, err, *vm, def)
			}
		}
	}
}

// TestEncode pins what Encode writes: one flow mapping a line, the
// provider always, other keys only where Parse would not fill in the
// same value, strings quoted where YAML would read them otherwise.
func TestEncode(t *testing.T) {
	f := mustParse(t, []byte(`
vms:
  - {name: web_0, ip: 10.0.0.1, availabilitySet: web, updateDomain: 0}
  - {name: ss_1a2b3c4d, ip: "::ffff:10.0.0.2", scaleSet: ss, instanceId: 1a2b3c4d, priority: spot, zone: "2"}
  - {name: g, ip: "fd00::3", provider: gce, gpu: true, onHostMaintenance: TERMINATE, zone: us-central1-a, project: p}
  - {name: m, ip: 10.0.0.4, provider: gce, onHostMaintenance: terminate, provisioningModel: standard}
  - {name: e, ip: 10.0.0.5, provider: aws, market: spot, httpTokens: Required, httpPutResponseHopLimit: 1, warmPool: running, autoScalingGroup: asg}
  - {name: f, ip: 10.0.0.6, provider: AWS, instanceId: i-0123abcd, instanceType: c5.large, availabilityZone: eu-west-1b, market: spot, spotInterruptionBehavior: stop}
  - {name: "null", ip: 10.0.0.7, cloudService: "a b"}
  - {name: i, ip: 10.0.0.8, provider: aws, amiId: ami-0abcdef1234567890, accountId: "210987654321", securityGroups: " web ,ssh", subnetId: subnet-be9b61d7, vpcId: vpc-be9b61d7}
scaleSets:
  - {name: ss, terminateNotBeforeTimeout: PT450S, terminateNotifications: false}
  - {name: dflt, terminateNotBeforeTimeout: PT5M, terminateNotifications: true}
`))
	got, err := fleetfile.Encode(f)
	if err != nil {
		t.Fatal(err)
	}
	const want = `vms:
  - {name: web_0, ip: 10.0.0.1, provider: azure, availabilitySet: web}
  - {name: ss_1a2b3c4d, ip: 10.0.0.2, provider: azure, scaleSet: ss, instanceId: "1a2b3c4d", priority: Spot, zone: "2"}
  - {name: g, ip: "fd00::3", provider: gce, gpu: true, project: p}
  - {name: m, ip: 10.0.0.4, provider: gce, onHostMaintenance: TERMINATE}
  - {name: e, ip: 10.0.0.5, provider: aws, autoScalingGroup: asg, warmPool: Running, market: spot, httpTokens: required}
  - {name: f, ip: 10.0.0.6, provider: aws, instanceId: i-0123abcd, instanceType: c5.large, availabilityZone: eu-west-1b, market: spot, spotInterruptionBehavior: stop}
  - {name: "null", ip: 10.0.0.7, provider: azure, cloudService: "a b"}
  - {name: i, ip: 10.0.0.8, provider: aws, amiId: ami-0abcdef1234567890, accountId: "210987654321", securityGroups: "web, ssh", subnetId: subnet-be9b61d7, vpcId: vpc-be9b61d7}
scaleSets:
  - {name: ss, terminateNotBeforeTimeout: PT7M30S, terminateNotifications: false}
  - {name: dflt}
`
	if string(got) != want {
		t.Errorf("Encode:\n%s\nwant:\n%s", got, want)
	}
	if got, err := fleetfile.Encode(&forewarn.Fleet{}); err != nil || string(got) != "vms: []\n" {
		t.Errorf("Encode(empty) = %q, %v", got, err)
	}
}

// TestEncodeQuotes: strings YAML would read as something else, or could
// not read plain, are written so that they read back as themselves.
func TestEncodeQuotes(t *testing.T) {
	values := []string{"0", "012", "1.5", "1e3", "0x1f", "0o17", "1_000", ".inf", ".NaN", "-1", "+1", "2001-12-14", "12:30",
		"null", "Null", "NULL", "~", "true", "False", "yes", "No", "on", "OFF", "y", "n", "<<", "=",
		"a b", " lead", "trail ", "a: b", "a:b", "a #b", "#x", "-x", "- x", "?x", "? x", ".x", "'q'", `"q"`, `a\b`, "a,b", "[x]", "{x}",
		"*x", "&x", "!x", "!!str", "%x", "@x", "`x`", "|", ">", "é", "日本", "😀", "\ufffe", "1.2.3.4", "1.2.3", "1.2.3.4.5", "1..2.3"}
	f := &forewarn.Fleet{}
	for i, v := range values {
		f.VMs = append(f.VMs, &forewarn.VM{Name: "v" + string(rune('a'+i%26)) + strings.Repeat("x", i/26), IP: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}),
			Provider: forewarn.Azure, CloudService: v})
	}
	f.ScaleSets = []*forewarn.ScaleSet{{Name: "'s: t'", TerminateTimeout: 6 * time.Minute}}
	enc, err := fleetfile.Encode(f)
	if err != nil {
		t.Fatal(err)
	}
	sameFleet(t, "Parse(Encode(f))", f, mustParse(t, enc))
}

// TestCheck: Check holds a fleet to what a fleet file can define, with
// the fleet file's messages, naming a VM by its place in the fleet.
func TestCheck(t *testing.T) {
	vm := func(name, ip string) *forewarn.VM {
		return &forewarn.VM{Name: name, IP: netip.MustParseAddr(ip), Provider: forewarn.Azure}
	}
	aws := func(name, ip, id string) *forewarn.VM {
		return &forewarn.VM{Name: name, IP: netip.MustParseAddr(ip), Provider: forewarn.AWS, InstanceID: id,
			Zone: "us-east-1a", MachineType: "m5.large", HTTPTokens: "optional", HopLimit: 1}
	}
	with := func(v *forewarn.VM, change func(*forewarn.VM)) *forewarn.VM { change(v); return v }
	for _, c := range []struct {
		fleet *forewarn.Fleet
		want  string
	}{
		{&forewarn.Fleet{VMs: []*forewarn.VM{vm("a", "10.0.0.1"), vm("b", "10.0.0.2")}}, ""},
		{&forewarn.Fleet{}, ""},
		{&forewarn.Fleet{VMs: []*forewarn.VM{vm("a", "10.0.0.1"), vm("b", "10.0.0.2"), vm("c", "10.0.0.1")}},
			"vms[2] (c): ip 10.0.0.1 is already used by a"},
		{&forewarn.Fleet{VMs: []*forewarn.VM{vm("a", "10.0.0.1"), vm("a", "10.0.0.2")}}, "vms[1] (a): name is already used by vms[0]"},
		{&forewarn.Fleet{VMs: []*forewarn.VM{aws("a", "10.0.0.1", "i-0123abcd"), aws("b", "10.0.0.2", "i-0123abcd")}},
			"vms[1] (b): instanceId i-0123abcd is already used by a"},
		{&forewarn.Fleet{VMs: []*forewarn.VM{vm("a", "10.0.0.1"), with(vm("b", "10.0.0.2"), func(v *forewarn.VM) { v.MachineType = "x" })}},
			"vms[1] (b): machineType is a gce key; this VM's provider is azure"},
		{&forewarn.Fleet{VMs: []*forewarn.VM{with(aws("a", "10.0.0.1", "i-0123abcd"), func(v *forewarn.VM) { v.GPU = true })}},
			"vms[0] (a): gpu is a gce key; this VM's provider is aws"},
		{&forewarn.Fleet{VMs: []*forewarn.VM{with(aws("a", "10.0.0.1", "i-0123abcd"), func(v *forewarn.VM) { v.HopLimit = 0 })}},
			"vms[0] (a): no fleet file entry gives this VM: its HopLimit 0 would read back as 1"},
		{&forewarn.Fleet{VMs: []*forewarn.VM{with(vm("a", "10.0.0.1"), func(v *forewarn.VM) { v.ProvisioningModel = "SPOT" })}},
			`vms[0] (a): no fleet file entry gives this VM: its ProvisioningModel "SPOT" would read back as ""`},
		{&forewarn.Fleet{VMs: []*forewarn.VM{with(vm("a", "10.0.0.1"), func(v *forewarn.VM) { v.Provider = "" })}},
			`vms[0] (a): no fleet file entry gives this VM: its Provider "" would read back as "azure"`},
		{&forewarn.Fleet{VMs: []*forewarn.VM{{Name: "any", Provider: forewarn.Azure}, {Name: "any_gce", Provider: forewarn.GCE,
			OnHostMaintenance: "MIGRATE", Zone: fleetfile.DefaultZone, MachineType: fleetfile.DefaultMachineType, Project: fleetfile.DefaultProject}}}, ""},
		{&forewarn.Fleet{VMs: []*forewarn.VM{{Name: "any", Provider: forewarn.Azure}, {Name: "any2", Provider: forewarn.Azure}}},
			"vms[1] (any2): ip any is already used by any"},
		{&forewarn.Fleet{VMs: []*forewarn.VM{vm("a", "10.0.0.1"), nil}}, "vms[1]: the VM is missing (nil)"},
		{&forewarn.Fleet{VMs: []*forewarn.VM{vm("a\u202e", "10.0.0.1")}}, `vms[0] ("a\u202e"): name holds the invisible or control character U+202E`},
		{&forewarn.Fleet{VMs: []*forewarn.VM{vm("a", "10.0.0.1")}, ScaleSets: []*forewarn.ScaleSet{{Name: "s"}}},
			`scaleSets[0] (s): terminateNotBeforeTimeout "PT0S" is outside PT5M..PT15M`},
		{&forewarn.Fleet{VMs: []*forewarn.VM{vm("a", "10.0.0.1")}, ScaleSets: []*forewarn.ScaleSet{{Name: "s", TerminateTimeout: 5 * time.Minute}, {Name: "s", TerminateTimeout: 5 * time.Minute}}},
			"scaleSets[1] (s): name is already used by scaleSets[0]"},
	} {
		err := fleetfile.Check(c.fleet)
		if c.want == "" {
			if err != nil {
				t.Errorf("Check(%s): %v", dump(c.fleet), err)
			}
			continue
		}
		if forewarn.ErrorCode(err) != forewarn.EINVALID || forewarn.ErrorMessage(err) != c.want {
			t.Errorf("Check(%s):\n got %v\nwant %s", dump(c.fleet), err, c.want)
		}
		if _, err := fleetfile.Encode(c.fleet); forewarn.ErrorMessage(err) != c.want {
			t.Errorf("Encode(%s):\n got %v\nwant %s", dump(c.fleet), err, c.want)
		}
	}
}

func TestFormatISODuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                                      "PT0S",
		5 * time.Minute:                        "PT5M",
		7*time.Minute + 30500*time.Millisecond: "PT7M30.5S",
		90 * time.Second:                       "PT1M30S",
		time.Hour + time.Nanosecond:            "PT1H0.000000001S",
		36 * time.Hour:                         "PT36H",
		-5 * time.Minute:                       "-PT5M",
		math.MaxInt64:                          "PT2562047H47M16.854775807S",
		math.MinInt64:                          "-PT2562047H47M16.854775808S",
	} {
		if got := fleetfile.FormatISODuration(d); got != want {
			t.Errorf("FormatISODuration(%v) = %s, want %s", d, got, want)
		}
		if d >= 0 {
			if back, err := fleetfile.ParseISODuration(want); err != nil || back != d {
				t.Errorf("ParseISODuration(%s) = %v, %v; want %v", want, back, err, d)
			}
		}
	}
}

// TestDefaultFleetRoundTrips: the default fleet's VMs answer every
// caller of their API (ip: any), and its export applies back as is.
func TestDefaultFleetRoundTrips(t *testing.T) {
	f := fleetfile.Default()
	b, err := fleetfile.Encode(f)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "ip: any"); n != 3 {
		t.Fatalf("the default fleet's export has %d ip: any, want 3:\n%s", n, b)
	}
	back, err := fleetfile.Parse(b)
	if err != nil {
		t.Fatalf("Parse(Encode(Default())): %v\n%s", err, b)
	}
	if !reflect.DeepEqual(back.VMs, f.VMs) {
		t.Fatalf("Parse(Encode(Default())) = %s, want %s", dump(back), dump(f))
	}
}

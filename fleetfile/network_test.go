package fleetfile_test

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/fleetfile"
)

// networksDoc has two VMs of one address on different networks, and an
// ip: any VM per provider on each network.
const networksDoc = `vms:
  - {name: web_0, ip: 10.0.0.5}
  - {name: blue_0, ip: 10.0.0.5, network: blue}
  - {name: red_0, ip: 10.0.0.5, network: red.tenant-1, provider: gce}
  - {name: any_0, ip: any}
  - {name: any_blue, ip: any, network: blue}
  - {name: any_blue_aws, ip: any, network: blue, provider: aws}
`

// TestNetworks: VMs of different networks may share an address, and
// each network may have an ip: any VM per provider; the network is read
// on every path (YAML, the line reader, JSON) and written back.
func TestNetworks(t *testing.T) {
	f := mustParse(t, []byte(networksDoc))
	for name, want := range map[string]string{"web_0": "", "blue_0": "blue", "red_0": "red.tenant-1", "any_0": "", "any_blue": "blue"} {
		if got := f.VM(name).Network; got != want {
			t.Errorf("%s: network %q, want %q", name, got, want)
		}
	}
	if err := fleetfile.Check(f); err != nil {
		t.Errorf("Check: %v", err)
	}
	b, err := fleetfile.Encode(f)
	if err != nil {
		t.Fatal(err)
	}
	if line := "  - {name: blue_0, ip: 10.0.0.5, network: blue, provider: azure}\n"; !strings.Contains(string(b), line) {
		t.Errorf("Encode:\n%s\nwant the line %q", b, line)
	}
	if strings.Contains(string(b), "{name: web_0, ip: 10.0.0.5, network") {
		t.Errorf("Encode writes a network for a VM of none:\n%s", b)
	}
	sameFleet(t, "Parse(Encode)", f, mustParse(t, b))
	block := strings.NewReplacer("  - {", "  - ", ", ", "\n    ", "}", "").Replace(networksDoc)
	sameFleet(t, "block YAML", f, mustParse(t, []byte(block)))
	json := `{"vms": [{"name": "web_0", "ip": "10.0.0.5"}, {"name": "blue_0", "ip": "10.0.0.5", "network": "blue"},
		{"name": "red_0", "ip": "10.0.0.5", "network": "red.tenant-1", "provider": "gce"}, {"name": "any_0", "ip": "any"},
		{"name": "any_blue", "ip": "any", "network": "blue"}, {"name": "any_blue_aws", "ip": "any", "network": "blue", "provider": "aws"}]}`
	if _, _, path, _ := fleetfile.DecodePaths([]byte(json)); path != "json" {
		t.Errorf("a JSON document with networks is read on path %q, want the fast one", path)
	}
	sameFleet(t, "JSON", f, mustParse(t, []byte(json)))
	def, err := fleetfile.EntryJSON(f.VM("blue_0"))
	if want := `{"name":"blue_0","ip":"10.0.0.5","network":"blue","provider":"azure"}`; err != nil || string(def) != want {
		t.Errorf("EntryJSON = %s, %v; want %s", def, err, want)
	}
	vm, err := fleetfile.ParseVM("blue_0", def)
	if err != nil || *vm != *f.VM("blue_0") {
		t.Errorf("ParseVM(EntryJSON) = %+v, %v", vm, err)
	}
}

// TestNetworkErrors: on one network an address (and ip: any, per
// provider) is one VM's; the message names the network when there is
// one; a network's name is short and plain.
func TestNetworkErrors(t *testing.T) {
	notName := func(quoted string) string {
		return "vms[0] (a): network " + quoted + " is not a network name: 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit"
	}
	for in, want := range map[string]string{
		"{name: a, ip: 10.0.0.5, network: blue}, {name: b, ip: 10.0.0.5, network: blue}":           "vms[1] (b): ip 10.0.0.5 on network blue is already used by a",
		"{name: a, ip: 10.0.0.5}, {name: b, ip: 10.0.0.5, network: blue}, {name: c, ip: 10.0.0.5}": "vms[2] (c): ip 10.0.0.5 is already used by a",
		"{name: a, ip: any, network: blue}, {name: b, ip: any, network: blue}":                     "vms[1] (b): ip any on network blue is already used by a",
		"{name: a, ip: 10.0.0.5, network: a b}":                                                    notName(`"a b"`),
		"{name: a, ip: 10.0.0.5, network: 'blue,red'}":                                             notName(`"blue,red"`),
		"{name: a, ip: 10.0.0.5, network: a/b}":                                                    notName(`"a/b"`),
		"{name: a, ip: 10.0.0.5, network: -}":                                                      notName(`"-"`),
		"{name: a, ip: 10.0.0.5, network: \"blue\\u202e\"}":                                        notName(`"blue\u202e"`),
		"{name: a, ip: 10.0.0.5, network: " + strings.Repeat("n", 64) + "}":                        notName(`"` + strings.Repeat("n", 64) + `"`),
	} {
		_, err := fleetfile.Parse([]byte("vms: [" + in + "]"))
		if forewarn.ErrorCode(err) != forewarn.EINVALID || forewarn.ErrorMessage(err) != want {
			t.Errorf("%s:\n got %v\nwant %s", in, err, want)
		}
	}
	if _, err := fleetfile.Parse([]byte("vms: [{name: a, ip: 10.0.0.5, network: " + strings.Repeat("n", 63) + "}]")); err != nil {
		t.Errorf("a network name of 63 characters: %v", err)
	}

	// Check, CheckVM and Merge hold an inventory to the same rules.
	f := mustParse(t, []byte(networksDoc))
	clash := *f.VM("blue_0")
	clash.Name = "blue_1"
	f.VMs = append(f.VMs, &clash)
	if err := fleetfile.Check(f); forewarn.ErrorMessage(err) != "vms[6] (blue_1): ip 10.0.0.5 on network blue is already used by blue_0" {
		t.Errorf("Check: %v", err)
	}
	f.VMs = f.VMs[:len(f.VMs)-1]
	for _, c := range []struct{ name, def, want string }{
		{"x", `{"ip": "10.0.0.5", "network": "green"}`, ""},
		{"x", `{"ip": "10.0.0.5", "network": "blue"}`, `VM "x": ip 10.0.0.5 on network blue is already used by blue_0`},
		{"x", `{"ip": "10.0.0.5"}`, `VM "x": ip 10.0.0.5 is already used by web_0`},
		{"x", `{"ip": "any", "network": "blue", "provider": "gce"}`, ""},
		{"x", `{"ip": "any", "network": "blue"}`, `VM "x": ip any on network blue is already used by any_blue`},
		{"blue_0", `{"ip": "10.0.0.5", "network": "green"}`, ""},
		{"blue_0", `{"ip": "10.0.0.5", "network": "red.tenant-1"}`, `VM "blue_0": ip 10.0.0.5 on network red.tenant-1 is already used by red_0`},
	} {
		vm, err := fleetfile.ParseVM(c.name, []byte(c.def))
		if err != nil {
			t.Fatal(err)
		}
		err = fleetfile.CheckVM(f, vm)
		if c.want == "" && err != nil || c.want != "" && forewarn.ErrorMessage(err) != c.want {
			t.Errorf("CheckVM(%s %s) = %v, want %q", c.name, c.def, err, c.want)
		}
	}
	for doc, want := range map[string]string{
		"vms: [{name: x, ip: 10.0.0.5, network: green}]":                                             "",
		"vms: [{name: x, ip: 10.0.0.5, network: blue}]":                                              "vms[0] (x): ip 10.0.0.5 on network blue is already used by blue_0",
		"vms: [{name: blue_0, ip: 10.0.0.6, network: blue}, {name: x, ip: 10.0.0.5, network: blue}]": "",
	} {
		_, err := fleetfile.Merge(f, mustParse(t, []byte(doc)), false)
		if want == "" && err != nil || want != "" && forewarn.ErrorMessage(err) != want {
			t.Errorf("Merge(%s) = %v, want %q", doc, err, want)
		}
	}
}

// TestDiffNetwork: a VM moved to another network changes its network key.
func TestDiffNetwork(t *testing.T) {
	old := mustParse(t, []byte("vms: [{name: a, ip: 10.0.0.5}, {name: b, ip: 10.0.0.6, network: blue}]"))
	doc := mustParse(t, []byte("vms: [{name: a, ip: 10.0.0.5, network: blue}, {name: b, ip: 10.0.0.6}]"))
	want := []fleetfile.Change{{Name: "a", Keys: []string{"network"}}, {Name: "b", Keys: []string{"network"}}}
	if got := fleetfile.Diff(old, doc, false).VMs.Changed; !reflect.DeepEqual(got, want) {
		t.Errorf("Diff: %+v, want %+v", got, want)
	}
	if vm := doc.VM("a"); vm.IP != netip.MustParseAddr("10.0.0.5") || vm.Network != "blue" {
		t.Errorf("a: %+v", vm)
	}
}

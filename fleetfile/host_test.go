package fleetfile_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/fleetfile"
)

// hostsDoc has VMs on two hosts and one on none; two VMs of one host,
// and two of one address on different networks, which a host does not
// tell apart.
const hostsDoc = `vms:
  - {name: web_0, ip: 10.0.0.5, host: hv-01.rack_2}
  - {name: web_1, ip: 10.0.0.6, host: hv-01.rack_2}
  - {name: blue_0, ip: 10.0.0.5, network: blue, host: hv-02}
  - {name: gce_0, ip: 10.0.0.7, provider: gce, host: hv-02}
  - {name: lone, ip: 10.0.0.8}
`

// TestHosts: the host key is read on every path (the line reader, block
// YAML, the YAML decoder, JSON) and written back after network; it is
// not part of a VM's identity.
func TestHosts(t *testing.T) {
	f := mustParse(t, []byte(hostsDoc))
	for name, want := range map[string]string{"web_0": "hv-01.rack_2", "web_1": "hv-01.rack_2", "blue_0": "hv-02", "gce_0": "hv-02", "lone": ""} {
		if got := f.VM(name).Host; got != want {
			t.Errorf("%s: host %q, want %q", name, got, want)
		}
	}
	if err := fleetfile.Check(f); err != nil {
		t.Errorf("Check: %v", err)
	}
	b, err := fleetfile.Encode(f)
	if err != nil {
		t.Fatal(err)
	}
	want := "vms:\n" +
		"  - {name: web_0, ip: 10.0.0.5, host: hv-01.rack_2, provider: azure}\n" +
		"  - {name: web_1, ip: 10.0.0.6, host: hv-01.rack_2, provider: azure}\n" +
		"  - {name: blue_0, ip: 10.0.0.5, network: blue, host: hv-02, provider: azure}\n" +
		"  - {name: gce_0, ip: 10.0.0.7, host: hv-02, provider: gce}\n" +
		"  - {name: lone, ip: 10.0.0.8, provider: azure}\n"
	if string(b) != want {
		t.Errorf("Encode:\n%s\nwant:\n%s", b, want)
	}
	sameFleet(t, "Parse(Encode)", f, mustParse(t, b))
	block := strings.NewReplacer("  - {", "  - ", ", ", "\n    ", "}", "").Replace(hostsDoc)
	sameFleet(t, "block YAML", f, mustParse(t, []byte(block)))
	flow := "vms: [" + strings.Join(strings.Split(strings.TrimSpace(strings.ReplaceAll(strings.TrimPrefix(hostsDoc, "vms:\n"), "  - ", "")), "\n"), ", ") + "]"
	for doc, want := range map[string]string{hostsDoc: "lines", block: "lines", flow: ""} {
		if _, _, path, _ := fleetfile.DecodePaths([]byte(doc)); path != want {
			t.Fatalf("%s is read on path %q, want %q", doc, path, want)
		}
	}
	sameFleet(t, "YAML decoder", f, mustParse(t, []byte(flow)))
	json := `{"vms": [{"name": "web_0", "ip": "10.0.0.5", "host": "hv-01.rack_2"}, {"name": "web_1", "ip": "10.0.0.6", "host": "hv-01.rack_2"},
		{"name": "blue_0", "ip": "10.0.0.5", "network": "blue", "host": "hv-02"}, {"name": "gce_0", "ip": "10.0.0.7", "provider": "gce", "host": "hv-02"},
		{"name": "lone", "ip": "10.0.0.8"}]}`
	if _, _, path, _ := fleetfile.DecodePaths([]byte(json)); path != "json" {
		t.Errorf("a JSON document with hosts is read on path %q, want the fast one", path)
	}
	sameFleet(t, "JSON", f, mustParse(t, []byte(json)))

	def, err := fleetfile.EntryJSON(f.VM("blue_0"))
	if want := `{"name":"blue_0","ip":"10.0.0.5","network":"blue","host":"hv-02","provider":"azure"}`; err != nil || string(def) != want {
		t.Errorf("EntryJSON = %s, %v; want %s", def, err, want)
	}
	vm, err := fleetfile.ParseVM("blue_0", def)
	if err != nil || *vm != *f.VM("blue_0") {
		t.Errorf("ParseVM(EntryJSON) = %+v, %v", vm, err)
	}
	moved, err := fleetfile.PatchVM(vm, []byte(`{"host":"hv-03"}`))
	if err != nil || moved.Host != "hv-03" || moved.Network != "blue" {
		t.Errorf("PatchVM host hv-03 = %+v, %v", moved, err)
	}
	if none, err := fleetfile.PatchVM(vm, []byte(`{"host":null}`)); err != nil || none.Host != "" {
		t.Errorf("PatchVM host null = %+v, %v", none, err)
	}

	// A VM may take the host of another, but not its address.
	same := *f.VM("web_0")
	same.Name, same.IP = "web_2", f.VM("lone").IP
	if err := fleetfile.CheckVM(f, &same); forewarn.ErrorMessage(err) != `VM "web_2": ip 10.0.0.8 is already used by lone` {
		t.Errorf("CheckVM of lone's address on web_0's host: %v", err)
	}
	same.IP = f.VM("web_1").IP.Next().Next().Next()
	if err := fleetfile.CheckVM(f, &same); err != nil {
		t.Errorf("CheckVM of a third VM of hv-01.rack_2: %v", err)
	}
}

// TestHostErrors: a host's name is short and plain, as a network's; the
// message names the key host.
func TestHostErrors(t *testing.T) {
	const form = "1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit"
	for in, want := range map[string]string{
		"{name: a, ip: 10.0.0.5, host: hv 1}":                                    `vms[0] (a): host "hv 1" is not a host name: ` + form,
		"{name: a, ip: 10.0.0.5, host: 'hv,1'}":                                  `vms[0] (a): host "hv,1" is not a host name: ` + form,
		"{name: a, ip: 10.0.0.5, host: rack/hv1}":                                `vms[0] (a): host "rack/hv1" is not a host name: ` + form,
		"{name: a, ip: 10.0.0.5, host: -hv1}":                                    `vms[0] (a): host "-hv1" is not a host name: ` + form,
		"{name: a, ip: 10.0.0.5, host: .hv1}":                                    `vms[0] (a): host ".hv1" is not a host name: ` + form,
		"{name: a, ip: 10.0.0.5, host: \"hv1\\u202e\"}":                          `vms[0] (a): host "hv1\u202e" is not a host name: ` + form,
		"{name: a, ip: 10.0.0.5, host: \"hv1\\n\"}":                              `vms[0] (a): host "hv1\n" is not a host name: ` + form,
		"{name: a, ip: 10.0.0.5, host: " + strings.Repeat("h", 64) + "}":         `vms[0] (a): host "` + strings.Repeat("h", 64) + `" is not a host name: ` + form,
		"{name: a, ip: 10.0.0.5}, {name: b, ip: 10.0.0.6, host: 'hv:1'}":         `vms[1] (b): host "hv:1" is not a host name: ` + form,
		"{name: a, ip: 10.0.0.5, network: a b, host: 'also bad'}":                `vms[0] (a): network "a b" is not a network name: ` + form,
		"{name: a, ip: 10.0.0.5, host: [hv1]}":                                   "line 1: cannot unmarshal !!seq into string",
		"{name: a, ip: 10.0.0.5, host: hv1, host: hv2}":                          `line 1: mapping key "host" already defined at line 1`,
		"{name: a, ip: 10.0.0.5, hosts: hv1}":                                    "line 1: unknown key hosts of a VM",
		"{name: a, ip: 10.0.0.5, host: hv1}, {name: b, ip: 10.0.0.5, host: hv2}": "vms[1] (b): ip 10.0.0.5 is already used by a",
	} {
		_, err := fleetfile.Parse([]byte("vms: [" + in + "]"))
		if forewarn.ErrorCode(err) != forewarn.EINVALID || forewarn.ErrorMessage(err) != want {
			t.Errorf("%s:\n got %v\nwant %s", in, err, want)
		}
	}
	if _, err := fleetfile.Parse([]byte("vms: [{name: a, ip: 10.0.0.5, host: " + strings.Repeat("h", 63) + "}]")); err != nil {
		t.Errorf("a host name of 63 characters: %v", err)
	}
	if _, err := fleetfile.ParseVM("a", []byte(`{"ip": "10.0.0.5", "host": "hv 1"}`)); forewarn.ErrorMessage(err) != `VM "a": host "hv 1" is not a host name: `+form {
		t.Errorf("ParseVM of a bad host: %v", err)
	}
	bad := &forewarn.Fleet{VMs: []*forewarn.VM{{Name: "a", Provider: forewarn.Azure, Host: "hv/1"}}}
	if err := fleetfile.Check(bad); forewarn.ErrorMessage(err) != `vms[0] (a): host "hv/1" is not a host name: `+form {
		t.Errorf("Check of a bad host: %v", err)
	}
	if _, err := fleetfile.Encode(bad); forewarn.ErrorMessage(err) != `vms[0] (a): host "hv/1" is not a host name: `+form {
		t.Errorf("Encode of a bad host: %v", err)
	}
}

// TestDiffHost: a VM moved to another host changes its host key, and
// nothing else.
func TestDiffHost(t *testing.T) {
	old := mustParse(t, []byte("vms: [{name: a, ip: 10.0.0.5, host: hv1}, {name: b, ip: 10.0.0.6}, {name: c, ip: 10.0.0.7, host: hv1}]"))
	doc := mustParse(t, []byte("vms: [{name: a, ip: 10.0.0.5, host: hv2}, {name: b, ip: 10.0.0.6, host: hv1}, {name: c, ip: 10.0.0.7, host: hv1}]"))
	want := []fleetfile.Change{{Name: "a", Keys: []string{"host"}}, {Name: "b", Keys: []string{"host"}}}
	if got := fleetfile.Diff(old, doc, false).VMs.Changed; !reflect.DeepEqual(got, want) {
		t.Errorf("Diff: %+v, want %+v", got, want)
	}
	merged, err := fleetfile.Merge(old, doc, false)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := merged.VM("a"), merged.VM("b"); a.Host != "hv2" || b.Host != "hv1" {
		t.Errorf("Merge: a on %q, b on %q; want hv2 and hv1", a.Host, b.Host)
	}
}

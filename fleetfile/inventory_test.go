package fleetfile_test

import (
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/fleetfile"
)

// TestParseVM: one VM's definition is read as a fleet file entry, with
// the defaults filled in, and named by the name it is put under.
func TestParseVM(t *testing.T) {
	for _, c := range []struct {
		name, def string
		want      forewarn.VM
	}{
		{"gce_0", `{"ip": "127.0.0.9", "provider": "gce", "zone": "europe-west1-b"}`,
			forewarn.VM{Name: "gce_0", IP: netip.MustParseAddr("127.0.0.9"), Provider: forewarn.GCE, OnHostMaintenance: "MIGRATE",
				Zone: "europe-west1-b", MachineType: "e2-standard-2", Project: "forewarn-project"}},
		{"web_0", `{"name": "web_0", "ip": "::ffff:10.0.0.1", "availabilitySet": "web", "updateDomain": 2}`,
			forewarn.VM{Name: "web_0", IP: netip.MustParseAddr("10.0.0.1"), Provider: forewarn.Azure, AvailabilitySet: "web", UpdateDomain: 2}},
		{"e", `{"ip": "10.0.0.2", "provider": "aws", "market": "spot"}`,
			forewarn.VM{Name: "e", IP: netip.MustParseAddr("10.0.0.2"), Provider: forewarn.AWS, InstanceID: fleetfile.DefaultInstanceID("e"),
				Zone: "us-east-1a", MachineType: "m5.large", Spot: true, SpotInterruptionBehavior: "terminate", HTTPTokens: "optional", HopLimit: 1}},
		// Not on the fast path (a number for a string, as YAML reads it), still read alike.
		{"ss_0", `{"ip": "10.0.0.3", "scaleSet": "ss", "instanceId": 0}`,
			forewarn.VM{Name: "ss_0", IP: netip.MustParseAddr("10.0.0.3"), Provider: forewarn.Azure, ScaleSet: "ss", InstanceID: "0"}},
	} {
		vm, err := fleetfile.ParseVM(c.name, []byte(c.def))
		if err != nil || !reflect.DeepEqual(*vm, c.want) {
			t.Errorf("ParseVM(%s, %s) = %+v, %v\nwant %+v", c.name, c.def, vm, err, c.want)
		}
	}
}

// TestParseVMErrors: a bad definition is refused with the fleet file's
// message, the VM named as VM "name".
func TestParseVMErrors(t *testing.T) {
	for _, c := range []struct{ name, def, want string }{
		{"a", `{"ip": "1.2.3.4", "availabiltySet": "web"}`, "VM \"a\": line 1: unknown key availabiltySet of a VM"},
		{"a", `{"ip": "1.2.3.4", "Zone": "1"}`, "VM \"a\": line 1: unknown key Zone of a VM"},
		{"a", `{"ip": "1.2.3.4", "ip": "1.2.3.5"}`, "VM \"a\": line 1: mapping key \"ip\" already defined at line 1"},
		{"a", `{"ip": "1.2.3.4", "gpu": "maybe"}`, "VM \"a\": line 1: cannot unmarshal !!str `maybe` into bool"},
		{"a", `{"ip": "1.2.3.4", "gpu": true}`, `VM "a": gpu is a gce key; this VM's provider is azure`},
		{"a", `{"ip": "1.2.3.4", "provider": "aws", "availabilitySet": "x"}`, `VM "a": availabilitySet is an azure key; this VM's provider is aws`},
		{"a", `{"ip": "1.2.3.4", "provider": "gce", "priority": "Spot"}`, `VM "a": priority is an azure key; use preemptible or provisioningModel on gce`},
		{"a", `{"ip": "1.2.3.4", "provider": "ibm"}`, `VM "a": provider "ibm" is not azure, gce or aws`},
		{"a", `{"ip": "nope"}`, `VM "a": ip "nope" is not an IP address (or any)`},
		{"a", `{"ip": "224.0.0.1"}`, `VM "a": ip 224.0.0.1 is a multicast address; no request comes from it`},
		{"a", `{"provider": "gce"}`, `VM "a": ip is required`},
		{"a", `{"ip": "1.2.3.4", "updateDomain": -1}`, `VM "a": updateDomain -1 is negative`},
		{"web_9", `{"ip": "1.2.3.4", "scaleSet": "web", "instanceId": "0"}`, `VM "web_9": name must be web_0 (scaleSet web + "_" + instanceId 0)`},
		{"a", `{"ip": "1.2.3.4", "provider": "aws", "httpPutResponseHopLimit": 65}`, `VM "a": httpPutResponseHopLimit 65 is outside 1..64`},
		{"a", `{"name": "b", "ip": "1.2.3.4"}`, `VM "a": name "b" does not match the VM's name "a"`},
		{"a b", `{"ip": "1.2.3.4"}`, `VM "a b": name may not contain spaces, commas, slashes, quotes or backslashes`},
		{"web\n0", `{"ip": "1.2.3.4"}`, `VM "web\n0": name holds the invisible or control character U+000A`},
		{"a", `{"ip": "1.2.3.4", "cloudService": "x\u202ey"}`, `VM "a": cloudService holds the invisible or control character U+202E`},
		{"", `{"ip": "1.2.3.4"}`, `VM: name is required`},
		{"a", ``, `VM "a": the definition is empty`},
		{"a", `ip: 1.2.3.4`, `VM "a": the definition is not JSON: invalid character 'i' looking for beginning of value`},
		{"a", `{"ip": "1.2.3.4"`, `VM "a": the definition is not JSON: unexpected end of JSON input`},
		{"a", `["1.2.3.4"]`, "VM \"a\": line 1: cannot unmarshal !!seq into fleetfile.vmEntry"},
	} {
		vm, err := fleetfile.ParseVM(c.name, []byte(c.def))
		if forewarn.ErrorCode(err) != forewarn.EINVALID || forewarn.ErrorMessage(err) != c.want {
			t.Errorf("ParseVM(%q, %s) = %+v, %v\nwant %s", c.name, c.def, vm, err, c.want)
		}
	}
}

// TestPatchVM: a merge patch changes one VM's definition; a key it
// removes, or one whose default follows from a key it changes, takes
// the default.
func TestPatchVM(t *testing.T) {
	gce, err := fleetfile.ParseVM("g", []byte(`{"ip": "10.0.0.1", "provider": "gce", "zone": "europe-west1-b"}`))
	if err != nil {
		t.Fatal(err)
	}
	aws, err := fleetfile.ParseVM("e", []byte(`{"ip": "10.0.0.2", "provider": "aws", "market": "spot", "spotInterruptionBehavior": "stop"}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		vm    *forewarn.VM
		patch string
		want  func(*forewarn.VM)
	}{
		{gce, `{"gpu": true}`, func(v *forewarn.VM) { v.GPU, v.OnHostMaintenance = true, "TERMINATE" }},
		{gce, `{"zone": null, "ip": "10.0.1.1"}`, func(v *forewarn.VM) { v.Zone, v.IP = "us-central1-a", netip.MustParseAddr("10.0.1.1") }},
		{gce, `{"name": "g"}`, func(*forewarn.VM) {}},
		{gce, `{"provider": "azure", "zone": null}`, func(v *forewarn.VM) {
			*v = forewarn.VM{Name: "g", IP: v.IP, Provider: forewarn.Azure}
		}},
		{gce, `{"provider": "azure", "zone": "2"}`, func(v *forewarn.VM) {
			*v = forewarn.VM{Name: "g", IP: v.IP, Provider: forewarn.Azure, Zone: "2"}
		}},
		{aws, `{"market": null, "spotInterruptionBehavior": null}`, func(v *forewarn.VM) { v.Spot, v.SpotInterruptionBehavior = false, "" }},
		{aws, `{"spotInterruptionBehavior": null}`, func(v *forewarn.VM) { v.SpotInterruptionBehavior = "terminate" }},
	} {
		want := *c.vm
		c.want(&want)
		got, err := fleetfile.PatchVM(c.vm, []byte(c.patch))
		if err != nil || *got != want {
			t.Errorf("PatchVM(%s, %s) = %+v, %v\nwant %+v", c.vm.Name, c.patch, got, err, want)
		}
	}
	for _, c := range []struct {
		vm          *forewarn.VM
		patch, want string
	}{
		{gce, `{"name": "h"}`, `VM "g": name "h" does not match the VM's name "g"`},
		{gce, `{"onHostMaintenance": "MIGRATE", "gpu": true}`, `VM "g": onHostMaintenance MIGRATE is not possible with gpu: true (GPU VMs are stopped, not migrated)`},
		{gce, `{"provider": "aws"}`, `VM "g": zone is a gce key; this VM's provider is aws`},
		{aws, `{"market": null}`, `VM "e": spotInterruptionBehavior needs market: spot`},
		{gce, `{"ip": null}`, `VM "g": ip is required`},
		{gce, `{"bogus": 1}`, "VM \"g\": line 1: unknown key bogus of a VM"},
		{gce, `{"zone": "a", "zone": "b"}`, `VM "g": the merge patch names the member "zone" twice`},
		{gce, `{zone: a}`, `VM "g": the merge patch is not JSON: invalid character 'z'`},
		{gce, `[]`, "VM \"g\": line 1: cannot unmarshal !!seq into fleetfile.vmEntry"},
	} {
		got, err := fleetfile.PatchVM(c.vm, []byte(c.patch))
		if forewarn.ErrorCode(err) != forewarn.EINVALID || forewarn.ErrorMessage(err) != c.want {
			t.Errorf("PatchVM(%s, %s) = %+v, %v\nwant %s", c.vm.Name, c.patch, got, err, c.want)
		}
	}
}

// TestCheckVM: a VM may join a fleet unless another VM holds its address
// or instance ID; the VM it replaces does not count.
func TestCheckVM(t *testing.T) {
	f := mustParse(t, []byte(`vms:
  - {name: a, ip: 10.0.0.1}
  - {name: b, ip: 10.0.0.2, provider: aws, instanceId: i-0123abcd}
  - {name: c, ip: 10.0.0.3, provider: aws, instanceId: i-4567abcd}
  - {name: d, ip: 10.0.0.4, provider: aws}
`))
	for _, c := range []struct{ name, def, want string }{
		{"a", `{"ip": "10.0.0.1", "availabilitySet": "web"}`, ""},
		{"x", `{"ip": "10.0.0.9"}`, ""},
		{"x", `{"ip": "10.0.0.2"}`, `VM "x": ip 10.0.0.2 is already used by b`},
		{"a", `{"ip": "10.0.0.3"}`, `VM "a": ip 10.0.0.3 is already used by c`},
		{"x", `{"ip": "10.0.0.9", "provider": "aws", "instanceId": "i-4567abcd"}`, `VM "x": instanceId i-4567abcd is already used by c`},
		{"b", `{"ip": "10.0.0.2", "provider": "aws", "instanceId": "i-4567abcd"}`, `VM "b": instanceId i-4567abcd is already used by c`},
		// The address is reported before the instance ID, as in a file.
		{"x", `{"ip": "10.0.0.4", "provider": "aws", "instanceId": "i-0123abcd"}`, `VM "x": ip 10.0.0.4 is already used by d`},
		{"x", `{"ip": "10.0.0.9", "provider": "aws", "instanceId": "` + fleetfile.DefaultInstanceID("d") + `"}`,
			`VM "x": instanceId ` + fleetfile.DefaultInstanceID("d") + ` is already used by d`},
	} {
		vm, err := fleetfile.ParseVM(c.name, []byte(c.def))
		if err != nil {
			t.Fatal(err)
		}
		err = fleetfile.CheckVM(f, vm)
		if c.want == "" && err != nil || c.want != "" && (forewarn.ErrorCode(err) != forewarn.EINVALID || forewarn.ErrorMessage(err) != c.want) {
			t.Errorf("CheckVM(%s %s) = %v, want %q", c.name, c.def, err, c.want)
		}
	}
	bad := *f.VMs[0]
	bad.OnHostMaintenance = "MIGRATE"
	if err := fleetfile.CheckVM(f, &bad); forewarn.ErrorMessage(err) != `VM "a": onHostMaintenance is a gce key; this VM's provider is azure` {
		t.Errorf("CheckVM of a VM no entry gives: %v", err)
	}
}

// TestMerge: an apply keeps the fleet's order for the VMs it names,
// adds the others after, keeps or (with prune) drops those it does not
// name, and refuses a VM that takes an address or instance ID a VM that
// stays holds, naming the document's VM by its place in the document.
func TestMerge(t *testing.T) {
	old := mustParse(t, []byte(`vms:
  - {name: a, ip: 10.0.0.1}
  - {name: b, ip: 10.0.0.2}
  - {name: c, ip: 10.0.0.3, provider: aws}
  - {name: d, ip: 10.0.0.4}
scaleSets:
  - {name: s1}
  - {name: s2}
`))
	doc := mustParse(t, []byte(`vms:
  - {name: e, ip: 10.0.0.5}
  - {name: b, ip: 10.0.0.1, availabilitySet: web}
  - {name: a, ip: 10.0.0.2}
scaleSets:
  - {name: s3}
  - {name: s2, terminateNotifications: false}
`))
	names := func(f *forewarn.Fleet) (vms, sets []string) {
		for _, vm := range f.VMs {
			vms = append(vms, vm.Name)
		}
		for _, s := range f.ScaleSets {
			sets = append(sets, s.Name)
		}
		return vms, sets
	}
	for _, prune := range []bool{false, true} {
		m, err := fleetfile.Merge(old, doc, prune)
		if err != nil {
			t.Fatalf("prune %v: %v", prune, err)
		}
		vms, sets := names(m)
		wantVMs, wantSets := []string{"a", "b", "c", "d", "e"}, []string{"s1", "s2", "s3"}
		if prune {
			wantVMs, wantSets = []string{"a", "b", "e"}, []string{"s2", "s3"}
		}
		if !reflect.DeepEqual(vms, wantVMs) || !reflect.DeepEqual(sets, wantSets) {
			t.Errorf("prune %v: Merge lists %v %v, want %v %v", prune, vms, sets, wantVMs, wantSets)
		}
		if m.VM("b") != doc.VM("b") || m.VM("a") != doc.VM("a") || m.ScaleSets[len(m.ScaleSets)-2] != doc.ScaleSets[1] {
			t.Errorf("prune %v: the document's definitions are not the ones kept", prune)
		}
		if err := fleetfile.Check(m); err != nil {
			t.Errorf("prune %v: Check(Merge): %v", prune, err)
		}
	}
	for _, c := range []struct {
		doc   string
		prune bool
		want  string
	}{
		{"vms:\n  - {name: x, ip: 10.0.0.9}\n  - {name: y, ip: 10.0.0.4}", false, "vms[1] (y): ip 10.0.0.4 is already used by d"},
		{"vms:\n  - {name: x, ip: 10.0.0.9}\n  - {name: y, ip: 10.0.0.4}", true, ""},
		{"vms:\n  - {name: y, ip: 10.0.0.4}\n  - {name: d, ip: 10.0.0.8}", false, ""},
		{"vms:\n  - {name: y, ip: 10.0.0.9, provider: aws, instanceId: " + fleetfile.DefaultInstanceID("c") + "}", false,
			"vms[0] (y): instanceId " + fleetfile.DefaultInstanceID("c") + " is already used by c"},
	} {
		_, err := fleetfile.Merge(old, mustParse(t, []byte(c.doc)), c.prune)
		if c.want == "" && err != nil || c.want != "" && (forewarn.ErrorCode(err) != forewarn.EINVALID || forewarn.ErrorMessage(err) != c.want) {
			t.Errorf("Merge(%s, prune %v) = %v, want %q", c.doc, c.prune, err, c.want)
		}
	}
}

// TestParseKeeping checks that ParseKeeping puts in the fleet the VM keep
// returns for each, in order, and that keep sees only VMs that passed.
func TestParseKeeping(t *testing.T) {
	held := &forewarn.VM{Name: "b", IP: netip.MustParseAddr("198.18.0.2"), Provider: forewarn.Azure}
	var seen []string
	f, err := fleetfile.ParseKeeping([]byte("vms:\n  - {name: a, ip: 198.18.0.1}\n  - {name: b, ip: 198.18.0.2}\n"),
		func(vm *forewarn.VM) *forewarn.VM {
			seen = append(seen, vm.Name)
			if *vm == *held {
				return held
			}
			return vm
		})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.VMs) != 2 || f.VMs[1] != held || f.VMs[0].Name != "a" || !slices.Equal(seen, []string{"a", "b"}) {
		t.Fatalf("fleet %v, keep saw %v; want a then the held b", f.VMs, seen)
	}
	seen = nil
	_, err = fleetfile.ParseKeeping([]byte("vms:\n  - {name: a, ip: 198.18.0.1}\n  - {name: a, ip: 198.18.0.2}\n"),
		func(vm *forewarn.VM) *forewarn.VM { seen = append(seen, vm.Name); return vm })
	if err == nil || !slices.Equal(seen, []string{"a"}) {
		t.Fatalf("a duplicate name: err %v, keep saw %v; want an error and only the first a", err, seen)
	}
}

package fleetfile_test

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/fleetfile"
)

// TestParseJSON: a JSON document gives the fleet its YAML twin gives, on
// the fast path.
func TestParseJSON(t *testing.T) {
	for _, c := range []struct{ json, yaml string }{
		{`{"vms": [{"name": "web_0", "ip": "127.0.0.2", "availabilitySet": "web", "updateDomain": 1}]}`,
			"vms:\n  - {name: web_0, ip: 127.0.0.2, availabilitySet: web, updateDomain: 1}"},
		{"{\n\t\"vms\": [\n\t\t{\"name\": \"g\", \"ip\": \"::1\", \"provider\": \"gce\", \"gpu\": true, \"zone\": null},\n" +
			"\t\t{\"name\": \"s\", \"ip\": \"10.0.0.2\", \"provider\": \"GCE\", \"provisioningModel\": \"SPOT\", \"project\": \"p\"}\n\t]\n}\n",
			"vms:\n  - {name: g, ip: '::1', provider: gce, gpu: true}\n  - {name: s, ip: 10.0.0.2, provider: GCE, provisioningModel: SPOT, project: p}"},
		{`{"vms":[{"name":"ss_0","ip":"10.0.0.1","scaleSet":"ss","instanceId":"0","placementGroup":"pg","priority":"Spot","zone":"2"}],` +
			`"scaleSets":[{"name":"ss","terminateNotBeforeTimeout":"PT7M30.5S","terminateNotifications":false},{"name":"t","terminateNotBeforeTimeout":null}]}`,
			"vms:\n  - {name: ss_0, ip: 10.0.0.1, scaleSet: ss, instanceId: '0', placementGroup: pg, priority: Spot, zone: '2'}\n" +
				"scaleSets:\n  - {name: ss, terminateNotBeforeTimeout: PT7M30.5S, terminateNotifications: false}\n  - {name: t}"},
		{`{"scaleSets": null, "vms": [{"name": "e", "ip": "10.0.0.3", "provider": "aws", "market": "spot", "httpPutResponseHopLimit": 2, "warmPool": "running", "autoScalingGroup": "g"}]}`,
			"vms:\n  - {name: e, ip: 10.0.0.3, provider: aws, market: spot, httpPutResponseHopLimit: 2, warmPool: running, autoScalingGroup: g}"},
		// Escapes in values; wéb is not ASCII.
		{`{"vms": [{"name": "w\u00e9b", "ip": "10.0.0.4", "cloudService": "a\"b\\c"}]}`,
			"vms:\n  - {name: wéb, ip: 10.0.0.4, cloudService: \"a\\\"b\\\\c\"}"},
	} {
		if _, _, path, _ := fleetfile.DecodePaths([]byte(c.json)); path != "json" {
			t.Errorf("%s: not read on the fast path", c.json)
		}
		got, err := fleetfile.Parse([]byte(c.json))
		if err != nil {
			t.Errorf("%s: %v", c.json, err)
			continue
		}
		want, err := fleetfile.Parse([]byte(c.yaml))
		if err != nil {
			t.Fatalf("%s: %v", c.yaml, err)
		}
		if !reflect.DeepEqual(got.VMs, want.VMs) || !reflect.DeepEqual(got.ScaleSets, want.ScaleSets) {
			t.Errorf("%s:\n got %+v %+v\nwant %+v %+v", c.json, got.VMs[0], got.ScaleSets, want.VMs[0], want.ScaleSets)
		}
	}
}

// TestParseJSONErrors: JSON input is refused with the fleet file's
// messages: unknown keys (spelled with another case too), repeated keys,
// bad values, duplicates and keys of another provider.
func TestParseJSONErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"vms": [{"name": "a", "ip": "1.2.3.4", "availabiltySet": "web"}]}`,
			"line 1: unknown key availabiltySet of a VM"},
		{`{"vms": [{"name": "a", "IP": "1.2.3.4"}]}`,
			"line 1: unknown key IP of a VM"},
		{`{"VMs": [{"name": "a", "ip": "1.2.3.4"}]}`,
			"line 1: unknown key VMs (a fleet file has vms and scaleSets)"},
		{"{\"vms\": [\n  {\"name\": \"a\", \"ip\": \"1.2.3.4\"},\n  {\"name\": \"b\", \"ip\": \"1.2.3.5\", \"ip\": \"1.2.3.6\"}\n]}",
			"line 3: mapping key \"ip\" already defined at line 3"},
		{`{"vms": [{"name": "a", "ip": "1.2.3.4", "\u0069p": "1.2.3.5"}]}`,
			"line 1: mapping key \"ip\" already defined at line 1"},
		{`{"vms": [{"name": "a", "ip": "1.2.3.4"}], "vms": []}`,
			"line 1: mapping key \"vms\" already defined at line 1"},
		{`{"scaleSets": [{"name": "s", "timeout": "PT5M"}], "vms": [{"name": "a", "ip": "1.2.3.4"}]}`,
			"line 1: unknown key timeout of a scale set"},
		{`{"vms": [{"name": "a", "ip": "1.2.3.4", "gpu": "true"}]}`,
			"line 1: cannot unmarshal !!str `true` into bool"},
		{`{"vms": [{"name": "a", "ip": "1.2.3.4", "updateDomain": "x"}]}`,
			"line 1: cannot unmarshal !!str `x` into int"},
		{`{"vms": []}`, "no VMs: the vms list is empty"},
		{`{}`, "no VMs: the vms list is empty"},
		{`{"vms": [{"ip": "1.2.3.4"}]}`, "vms[0]: name is required"},
		{`{"vms": [{"name": "a", "ip": "1.2.3.4"}, {"name": "a", "ip": "1.2.3.5"}]}`, "vms[1] (a): name is already used by vms[0]"},
		{`{"vms": [{"name": "a", "ip": "1.2.3.4"}, {"name": "b", "ip": "::ffff:1.2.3.4"}]}`, "vms[1] (b): ip 1.2.3.4 is already used by a"},
		{`{"vms": [{"name": "a", "ip": "1.2.3.4", "provider": "gce", "priority": "Spot"}]}`,
			"vms[0] (a): priority is an azure key; use preemptible or provisioningModel on gce"},
		{`{"vms": [{"name": "a", "ip": "1.2.3.4", "gpu": true}]}`, "vms[0] (a): gpu is a gce key; this VM's provider is azure"},
		{`{"vms": [{"name": "a", "ip": "1.2.3.4", "provider": "aws", "zone": "us-east-1a"}]}`, "vms[0] (a): zone is a gce key; this VM's provider is aws"},
		{`{"vms": [{"name": "web_\u202e0", "ip": "1.2.3.4"}]}`, `vms[0] ("web_\u202e0"): name holds the invisible or control character U+202E`},
		{`{"vms": [{"name": "a", "ip": "1.2.3.4"}], "scaleSets": [{"name": "s", "terminateNotBeforeTimeout": "PT20M"}]}`,
			`scaleSets[0] (s): terminateNotBeforeTimeout "PT20M" is outside PT5M..PT15M`},
	} {
		_, err := fleetfile.Parse([]byte(c.in))
		if forewarn.ErrorCode(err) != forewarn.EINVALID || forewarn.ErrorMessage(err) != c.want {
			t.Errorf("%s:\n got %v\nwant %s", c.in, err, c.want)
		}
	}
}

// TestParseJSONEscapes: valid JSON escapes the YAML decoder refuses, \/
// and surrogate pairs, are read; a lone surrogate becomes U+FFFD, which
// a name may not hold.
func TestParseJSONEscapes(t *testing.T) {
	f, err := fleetfile.Parse([]byte(`{"vms": [{"name": "a", "ip": "1.2.3.4", "availabilitySet": "x\/y\ud83d\ude00"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := forewarn.VM{Name: "a", IP: netip.MustParseAddr("1.2.3.4"), Provider: forewarn.Azure, AvailabilitySet: "x/y😀"}
	if *f.VMs[0] != want {
		t.Errorf("got %+v, want %+v", *f.VMs[0], want)
	}
	_, err = fleetfile.Parse([]byte(`{"vms": [{"name": "a\ud800", "ip": "1.2.3.4"}]}`))
	if want := `vms[0] ("a\ufffd"): name holds the invisible or control character U+FFFD`; forewarn.ErrorMessage(err) != want {
		t.Errorf("lone surrogate: %v\nwant %s", err, want)
	}
}

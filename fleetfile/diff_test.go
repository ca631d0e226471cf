package fleetfile_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/forewarn/forewarn/fleetfile"
)

// TestDiff: an apply's changes, in the document's order for added and
// changed VMs and the fleet's for removed ones, each change with the
// fleet file keys whose values change, sorted.
func TestDiff(t *testing.T) {
	old := mustParse(t, []byte(`vms:
  - {name: a, ip: 10.0.0.1, availabilitySet: web, updateDomain: 1}
  - {name: b, ip: 10.0.0.2, provider: gce}
  - {name: c, ip: 10.0.0.3, provider: aws}
  - {name: d, ip: 10.0.0.4}
  - {name: e, ip: 10.0.0.5, provider: aws, market: spot}
  - {name: f, ip: 10.0.0.6, provider: gce, zone: us-central1-a}
scaleSets:
  - {name: s1}
  - {name: s2}
  - {name: s3}
`))
	doc := mustParse(t, []byte(`vms:
  - {name: z, ip: 10.0.0.26}
  - {name: e, ip: 10.0.0.5, provider: aws}
  - {name: b, ip: 10.0.0.2, provider: gce, gpu: true}
  - {name: a, ip: 10.0.1.1, availabilitySet: db}
  - {name: y, ip: 10.0.0.25}
  - {name: c, ip: 10.0.0.3, provider: gce}
  - {name: f, ip: 10.0.0.6, provider: gce}
scaleSets:
  - {name: s3, terminateNotBeforeTimeout: PT10M, terminateNotifications: false}
  - {name: s4}
  - {name: s1, terminateNotBeforeTimeout: PT5M}
`))
	changed := []fleetfile.Change{
		{Name: "e", Keys: []string{"market", "spotInterruptionBehavior"}},
		{Name: "b", Keys: []string{"gpu", "onHostMaintenance"}},
		{Name: "a", Keys: []string{"availabilitySet", "ip", "updateDomain"}},
		{Name: "c", Keys: []string{"availabilityZone", "httpPutResponseHopLimit", "httpTokens", "instanceId", "instanceType",
			"machineType", "onHostMaintenance", "project", "provider", "zone"}},
	}
	want := fleetfile.Changes{
		VMs: fleetfile.Delta{Added: []string{"z", "y"}, Changed: changed},
		ScaleSets: fleetfile.Delta{Added: []string{"s4"},
			Changed: []fleetfile.Change{{Name: "s3", Keys: []string{"terminateNotBeforeTimeout", "terminateNotifications"}}}},
	}
	if got := fleetfile.Diff(old, doc, false); !reflect.DeepEqual(got, want) {
		t.Errorf("Diff:\n got %+v\nwant %+v", got, want)
	}
	want.VMs.Removed, want.ScaleSets.Removed = []string{"d"}, []string{"s2"}
	got := fleetfile.Diff(old, doc, true)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Diff with prune:\n got %+v\nwant %+v", got, want)
	}
	if got.Empty() || !fleetfile.Diff(old, old, true).Empty() {
		t.Errorf("Empty: %v for a diff, %v for none", got.Empty(), fleetfile.Diff(old, old, true).Empty())
	}
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	const wantJSON = `{"vms":{"added":["z","y"],"changed":[{"name":"e","keys":["market","spotInterruptionBehavior"]},` +
		`{"name":"b","keys":["gpu","onHostMaintenance"]},{"name":"a","keys":["availabilitySet","ip","updateDomain"]},` +
		`{"name":"c","keys":["availabilityZone","httpPutResponseHopLimit","httpTokens","instanceId","instanceType","machineType","onHostMaintenance","project","provider","zone"]}],` +
		`"removed":["d"]},"scaleSets":{"added":["s4"],"changed":[{"name":"s3","keys":["terminateNotBeforeTimeout","terminateNotifications"]}],"removed":["s2"]}}`
	if string(b) != wantJSON {
		t.Errorf("JSON:\n got %s\nwant %s", b, wantJSON)
	}
}

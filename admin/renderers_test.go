package admin_test

import (
	"encoding/json"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/aws"
	"github.com/forewarn/forewarn/azure"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/gce"
	"github.com/forewarn/forewarn/mem"
)

// TestShowFollowsTheInventory: GET /v1/vms/{name} (vm show) gives the
// documents the azure, gce and aws servers render for a VM added while
// they run, and not_found once the VM is removed.
func TestShowFollowsTheInventory(t *testing.T) {
	eng, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: testFleet()})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	az, gc, ec2 := azure.NewServer(eng, nil), gce.NewServer(eng, nil), aws.NewServer(eng, nil)
	s := admin.NewServer(eng, nil)
	s.Renderers = map[string]admin.Renderer{"azure": az, "gce": gc, "aws": ec2}
	srv := httptest.NewServer(s)
	defer srv.Close()
	defer s.Shutdown()

	ip := netip.MustParseAddr
	added := []*forewarn.VM{
		{Name: "az_new", IP: ip("10.0.0.1"), Provider: forewarn.Azure},
		{Name: "gce_new", IP: ip("10.0.0.2"), Provider: forewarn.GCE, Zone: "us-central1-a", Project: "p", MachineType: "e2-small", OnHostMaintenance: "MIGRATE"},
		{Name: "ec2_new", IP: ip("10.0.0.3"), Provider: forewarn.AWS, InstanceID: "i-0000000000000000a", Zone: "us-east-1a", MachineType: "m5.large"},
	}
	if _, err := eng.ChangeInventory(t.Context(), engine.InventoryChange{Set: added}); err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]map[string]string{
		"az_new":  {"azure": az.Documents("az_new")},
		"gce_new": {"gce": gc.Documents("gce_new")},
		"ec2_new": {"aws": ec2.Documents("ec2_new")},
	}
	for name, docs := range want {
		for api, d := range docs {
			if len(d) == 0 {
				t.Fatalf("%s renders nothing for %s", api, name)
			}
		}
		code, _, body := call(t, srv, "GET", "/v1/vms/"+name, "")
		var got admin.VMDetail
		if code != 200 || json.Unmarshal([]byte(body), &got) != nil {
			t.Fatalf("GET /v1/vms/%s: %d %s", name, code, body)
		}
		if !reflect.DeepEqual(got.Documents, docs) {
			t.Errorf("GET /v1/vms/%s documents %v, want %v", name, got.Documents, docs)
		}
	}
	if _, err := eng.ChangeInventory(t.Context(), engine.InventoryChange{Remove: []string{"az_new", "gce_new", "ec2_new"}}); err != nil {
		t.Fatal(err)
	}
	for name := range want {
		code, _, body := call(t, srv, "GET", "/v1/vms/"+name, "")
		if wantBody := `{"error":{"code":"not_found","message":"no VM named \"` + name + `\""}}` + "\n"; code != 404 || body != wantBody {
			t.Errorf("GET /v1/vms/%s after its removal: %d %s, want 404 %s", name, code, body, wantBody)
		}
		if az.Documents(name) != nil || gc.Documents(name) != nil || ec2.Documents(name) != nil {
			t.Errorf("a renderer still has documents of %s", name)
		}
	}
}

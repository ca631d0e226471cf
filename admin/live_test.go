package admin_test

import (
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
)

// TestOperatorAPIFollowsTheInventory: which callers are VMs (refused
// without a token) and which VMs a create may name follow the engine's
// inventory as it changes after the server was built.
func TestOperatorAPIFollowsTheInventory(t *testing.T) {
	eng, s := guardServer(t) // 9 VMs of no address
	call := func(method, path, from, body string) (int, string) {
		r := httptest.NewRequest(method, "http://localhost"+path, strings.NewReader(body))
		r.RemoteAddr = from
		if body != "" {
			r.Header.Set("Content-Type", "application/json")
		}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	create := func(vms ...string) (int, string) {
		return call("POST", "/v1/events", "192.0.2.1:1234", `{"type":"Freeze","notice":"1m","vms":["`+strings.Join(vms, `","`)+`"]}`)
	}
	change := func(c engine.InventoryChange) {
		t.Helper()
		if _, err := eng.ChangeInventory(t.Context(), c); err != nil {
			t.Fatal(err)
		}
	}
	const vmAddr = "127.0.0.9:40000"
	if code, body := call("GET", "/v1/vms", vmAddr, ""); code != 200 {
		t.Fatalf("an address of no VM: %d %.200s", code, body)
	}
	change(engine.InventoryChange{Set: []*forewarn.VM{{Name: "late", Provider: forewarn.Azure, IP: netip.MustParseAddr("127.0.0.9")}}})
	if code, body := call("GET", "/v1/vms", vmAddr, ""); code != 403 || !strings.Contains(body, `it is the address of VM \"late\"`) {
		t.Errorf("the address of VM late, added after the server was built: %d %.300s; want 403 naming late", code, body)
	}
	if code, body := create("late"); code != 201 {
		t.Errorf("a create naming VM late, added after the server was built: %d %.300s", code, body)
	}
	all := []string{"web_0", "web_1", "db_0", "gce_0", "ss_0", "ss_1", "spot_0", "dup_0", "dup_1", "late"}
	if code, body := create(append(all, "web_0")...); code != 400 || body != errorJSON("invalid", `field "vms" names more VMs than the fleet's 10`) {
		t.Errorf("11 names of a fleet of 10: %d %s", code, body)
	}
	change(engine.InventoryChange{Remove: []string{"late", "db_0"}})
	if code, body := call("GET", "/v1/vms", vmAddr, ""); code != 200 {
		t.Errorf("the address of VM late, removed: %d %.200s", code, body)
	}
	for _, vm := range []string{"db_0", "late"} {
		if code, body := create(vm); code != 404 || body != errorJSON("not_found", `unknown VM "`+vm+`"`) {
			t.Errorf("a create naming VM %s, removed: %d %s", vm, code, body)
		}
	}
	// The names a create gives the engine are those of the fleet in
	// force, found by the index of that fleet.
	before := map[string]bool{}
	for _, ev := range eng.Events() {
		before[ev.ID] = true
	}
	if code, body := create("dup_1", "spot_0"); code != 201 {
		t.Fatalf("a create naming dup_1 and spot_0 after db_0 left: %d %.300s", code, body)
	}
	var named []string
	for _, ev := range eng.Events() {
		if !before[ev.ID] {
			named = append(named, ev.Resources...)
		}
	}
	if slices.Sort(named); !slices.Equal(named, []string{"dup_1", "spot_0"}) {
		t.Errorf("a create naming dup_1 and spot_0 after db_0 left made events naming %v", named)
	}
}

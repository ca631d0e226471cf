package azure_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/azure"
	"github.com/forewarn/forewarn/engine"
)

// These tests change the inventory under a running server, with
// engine.ChangeInventory, and check each answer the moment the change
// returns.

// change makes c, failing the test on an error.
func change(t *testing.T, e *engine.Engine, c engine.InventoryChange) {
	t.Helper()
	if _, err := e.ChangeInventory(t.Context(), c); err != nil {
		t.Fatal(err)
	}
}

// azureVM returns an Azure VM named name at addr (host:port).
func azureVM(name, addr string) *forewarn.VM {
	return &forewarn.VM{Name: name, IP: netip.MustParseAddrPort(addr).Addr(), Provider: forewarn.Azure}
}

// unknown is the exact 403 body of a source address that is no VM's.
func unknown(addr string) string {
	return `{"error": "Forbidden. No VM of the fleet has the source address ` + netip.MustParseAddrPort(addr).Addr().String() + `"}`
}

// checkRefused checks the 403 of an unknown address: exact body, and the
// connection closed after it.
func checkRefused(t *testing.T, w *httptest.ResponseRecorder, addr string) {
	t.Helper()
	check(t, w, http.StatusForbidden, unknown(addr))
	if c := w.Header().Get("Connection"); c != "close" {
		t.Fatalf("403 with Connection %q, want close", c)
	}
}

// name reads compute/name of the VM at remote.
func name(t *testing.T, h http.Handler, remote string) string {
	t.Helper()
	w := do(h, req{target: "/metadata/instance/compute/name?api-version=2021-02-01&format=text", remote: remote})
	if w.Code != http.StatusOK {
		t.Fatalf("compute/name from %s: %d %s", remote, w.Code, w.Body)
	}
	return w.Body.String()
}

// TestInventoryAdd: a VM added while the server runs is answered, its
// own document to the byte, as soon as ChangeInventory returns, and an
// event naming it shows; the operator's Documents has it, and has
// nothing for a name no VM has.
func TestInventoryAdd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		s := h.(*azure.Server)
		const addr = "127.0.0.20:40000"
		checkRefused(t, do(h, req{target: path + "2020-07-01", remote: addr}), addr)
		change(t, e, engine.InventoryChange{Set: []*forewarn.VM{azureVM("new_0", addr)}})
		e.NoteRequest("new_0") // enabled: no FirstCallDelay, Platform events keep their notice
		check(t, do(h, req{target: path + "2020-07-01", remote: addr}), 200, `{"DocumentIncarnation":1,"Events":[]}`)
		if got := name(t, h, addr); got != "new_0" {
			t.Fatalf("compute/name %q, want new_0", got)
		}
		ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"new_0"}, Source: forewarn.User})
		if err != nil {
			t.Fatal(err)
		}
		doc := `{"DocumentIncarnation":2,"Events":[{"EventId":"` + ev.ID + `","EventStatus":"Scheduled","EventType":"Reboot",` +
			`"ResourceType":"VirtualMachine","Resources":["new_0"],"NotBefore":"Sat, 01 Jan 2000 00:15:00 GMT","Description":"","EventSource":"User","DurationInSeconds":-1}]}`
		check(t, do(h, req{target: path + "2020-07-01", remote: addr}), 200, doc)
		if got := s.Documents("new_0"); len(got) != 1 || got["/metadata/scheduledevents?api-version="+azure.Versions()[len(azure.Versions())-1]] != doc {
			t.Fatalf("Documents(new_0) = %q, want the document", got)
		}
		if got := s.Documents("nobody"); got != nil {
			t.Fatalf("Documents(nobody) = %q, want nil", got)
		}
		if got := s.Documents("gce_0"); got != nil {
			t.Fatalf("Documents of a GCE VM = %q, want nil", got)
		}
	})
}

// TestInventoryRemove: a removed VM's address gets the unknown address's
// 403, to the byte, as soon as ChangeInventory returns; Documents has
// nothing for it; the other VMs are answered as before.
func TestInventoryRemove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		s := h.(*azure.Server)
		check(t, do(h, req{target: path + "2020-07-01", remote: web1}), 200, `{"DocumentIncarnation":1,"Events":[]}`)
		change(t, e, engine.InventoryChange{Remove: []string{"web_1"}})
		checkRefused(t, do(h, req{target: path + "2020-07-01", remote: web1}), web1)
		checkRefused(t, do(h, req{target: "/metadata/instance?api-version=2021-02-01", remote: web1}), web1)
		if got := s.Documents("web_1"); got != nil {
			t.Fatalf("Documents(web_1) = %q after its removal, want nil", got)
		}
		check(t, do(h, req{target: path + "2020-07-01", remote: web0}), 200, `{"DocumentIncarnation":1,"Events":[]}`)
	})
}

// TestInventoryMove: a VM's new address is served as that VM as soon as
// the change returns, and its old one gets 403, unless another VM took it
// in the same change; a VM that becomes a GCE VM is Azure's no more.
func TestInventoryMove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		const newAddr = "127.0.0.30:40000"
		db := azureVM("db_0", newAddr)
		db.AvailabilitySet, db.UpdateDomain = "db", 1
		change(t, e, engine.InventoryChange{Set: []*forewarn.VM{db}})
		if got := name(t, h, newAddr); got != "db_0" {
			t.Fatalf("new address: compute/name %q, want db_0", got)
		}
		checkRefused(t, do(h, req{target: path + "2020-07-01", remote: db0}), db0)

		// web_0 moves away from 127.0.0.2, and db_0 takes it, in one change.
		const webAddr = "127.0.0.31:40000"
		web := azureVM("web_0", webAddr)
		web.ScaleSet, web.InstanceID, web.Spot = "web", "0", true
		db = azureVM("db_0", web0)
		db.AvailabilitySet, db.UpdateDomain = "db", 1
		change(t, e, engine.InventoryChange{Set: []*forewarn.VM{web, db}})
		for addr, want := range map[string]string{web0: "db_0", webAddr: "web_0"} {
			if got := name(t, h, addr); got != want {
				t.Errorf("%s: compute/name %q, want %s", addr, got, want)
			}
		}
		checkRefused(t, do(h, req{target: path + "2020-07-01", remote: newAddr}), newAddr)

		// web_1 becomes a GCE VM at the same address.
		change(t, e, engine.InventoryChange{Set: []*forewarn.VM{{Name: "web_1", IP: netip.MustParseAddrPort(web1).Addr(), Provider: forewarn.GCE}}})
		check(t, do(h, req{target: path + "2020-07-01", remote: web1}), 404, `{"error": "Not found"}`)
	})
}

// TestInventoryRegisteredAgain: a VM removed and registered again under
// its name gets a DocumentIncarnation above every one it was served
// before, so that a client keeping the last one it saw takes the new
// document for a change.
func TestInventoryRegisteredAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		incarnation := func() int64 {
			t.Helper()
			w := do(h, req{target: path + "2020-07-01", remote: db0})
			var d struct{ DocumentIncarnation int64 }
			if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &d) != nil {
				t.Fatalf("GET: %d %s", w.Code, w.Body)
			}
			return d.DocumentIncarnation
		}
		var served int64
		for range 3 {
			ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"db_0"}, Source: forewarn.User})
			if err != nil {
				t.Fatal(err)
			}
			served = max(served, incarnation())
			if err := e.Cancel(t.Context(), ev.ID); err != nil {
				t.Fatal(err)
			}
			served = max(served, incarnation())
		}
		if served < 7 {
			t.Fatalf("served incarnations up to %d, want 7", served)
		}
		db := *e.Fleet().VM("db_0")
		change(t, e, engine.InventoryChange{Remove: []string{"db_0"}})
		checkRefused(t, do(h, req{target: path + "2020-07-01", remote: db0}), db0)
		change(t, e, engine.InventoryChange{Set: []*forewarn.VM{&db}})
		check(t, do(h, req{target: path + "2020-07-01", remote: db0}), 200, fmt.Sprintf(`{"DocumentIncarnation":%d,"Events":[]}`, served+1))
	})
}

// TestInventoryRemoveReleasesFirstCall: the call FirstCallDelay holds of
// a VM added at run time and removed meanwhile is answered at once, with
// the 403 its address gets now.
func TestInventoryRemoveReleasesFirstCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		h.(*azure.Server).FirstCallDelay = 2 * time.Minute
		const addr = "127.0.0.20:40000"
		change(t, e, engine.InventoryChange{Set: []*forewarn.VM{azureVM("new_0", addr)}})
		done := make(chan *httptest.ResponseRecorder)
		go func() { done <- do(h, req{target: path + "2020-07-01", remote: addr}) }()
		time.Sleep(time.Second)
		synctest.Wait()
		select {
		case w := <-done:
			t.Fatalf("answered %d before the removal, want held", w.Code)
		default:
		}
		start := time.Now()
		change(t, e, engine.InventoryChange{Remove: []string{"new_0"}})
		w := <-done
		if d := time.Since(start); d != 0 {
			t.Fatalf("answered %v after the removal, want at once", d)
		}
		checkRefused(t, w, addr)
	})
}

// TestInventoryThrottlesEachVM: throttling state is per VM and goes with
// the VM: a VM added has its own whole burst, a VM's budget is not
// shared with the others whatever is added and removed, and a VM removed
// and registered again starts with a whole burst.
func TestInventoryThrottlesEachVM(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		h.(*azure.Server).SetRateLimit(5)
		get := func(remote string) int { return do(h, req{target: path + "2020-07-01", remote: remote}).Code }
		burst := func(what, remote string) {
			t.Helper()
			for i := range 5 {
				if c := get(remote); c != 200 {
					t.Fatalf("%s: request %d: %d, want 200", what, i+1, c)
				}
			}
			if c := get(remote); c != 429 {
				t.Fatalf("%s: request 6: %d, want 429", what, c)
			}
		}
		burst("web_0", web0)
		const addr = "127.0.0.20:40000"
		change(t, e, engine.InventoryChange{Set: []*forewarn.VM{azureVM("new_0", addr)}})
		e.NoteRequest("new_0")
		burst("new_0, added", addr)
		if c := get(web0); c != 429 {
			t.Fatalf("web_0 after new_0 was added: %d, want still 429", c)
		}
		change(t, e, engine.InventoryChange{Remove: []string{"db_0"}})
		if c := get(web0); c != 429 {
			t.Fatalf("web_0 after db_0 was removed: %d, want still 429", c)
		}
		burst("web_1, untouched", web1)
		web := *e.Fleet().VM("web_0")
		change(t, e, engine.InventoryChange{Remove: []string{"web_0"}})
		change(t, e, engine.InventoryChange{Set: []*forewarn.VM{&web}})
		e.NoteRequest("web_0")
		burst("web_0, registered again", web0)
		// One request's worth comes back after 200 ms, to each VM alike.
		time.Sleep(200 * time.Millisecond)
		for _, remote := range []string{web0, web1, addr} {
			if c1, c2 := get(remote), get(remote); c1 != 200 || c2 != 429 {
				t.Fatalf("%s 200 ms on: %d then %d, want 200 then 429", remote, c1, c2)
			}
		}
	})
}

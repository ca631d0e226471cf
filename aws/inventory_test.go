package aws_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/aws"
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

// ec2VM returns an EC2 VM named name at addr (host:port), as testFleet's.
func ec2VM(name, addr, id string) *forewarn.VM {
	return &forewarn.VM{Name: name, IP: netip.MustParseAddrPort(addr).Addr(), Provider: forewarn.AWS, InstanceID: id,
		Zone: "us-east-1a", MachineType: "m5.large", HTTPTokens: "optional", HopLimit: 1}
}

// key reads path as the VM at remote.
func key(h http.Handler, remote, path string) *httptest.ResponseRecorder {
	return do(h, req{path: path, remote: remote})
}

// TestInventoryAdd: a VM added while the server runs is answered, with
// its own keys, as soon as ChangeInventory returns, and an event naming
// it shows; the operator's Documents has it.
func TestInventoryAdd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		const addr = "127.0.0.20:40000"
		want(t, "before", key(h, addr, "/latest/meta-data/instance-id"), 403, errorPage(403), "Connection", "close")
		change(t, e, engine.InventoryChange{Set: []*forewarn.VM{ec2VM("new_7", addr, "i-00000000000000010")}})
		want(t, "instance-id", key(h, addr, "/latest/meta-data/instance-id"), 200, "i-00000000000000010")
		want(t, "local-ipv4", key(h, addr, "/latest/meta-data/local-ipv4"), 200, "127.0.0.20")
		want(t, "hostname", key(h, addr, "/latest/meta-data/hostname"), 200, "ip-127-0-0-20.ec2.internal")
		want(t, "scheduled", key(h, addr, "/latest/meta-data/events/maintenance/scheduled"), 200, "[]")
		ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.SystemReboot, VMs: []string{"new_7"}, Notice: 48 * time.Hour, Lasts: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		scheduled := `[ {
  "NotBefore" : "3 Jan 2000 00:00:00 GMT",
  "Code" : "system-reboot",
  "Description" : "scheduled reboot",
  "EventId" : "` + aws.EventID(ev.ID) + `",
  "NotAfter" : "3 Jan 2000 00:10:00 GMT",
  "NotBeforeDeadline" : "10 Jan 2000 00:00:00 GMT",
  "State" : "active"
} ]`
		want(t, "scheduled with an event", key(h, addr, "/latest/meta-data/events/maintenance/scheduled"), 200, scheduled)
		if got := h.Documents("new_7")["/latest/meta-data/events/maintenance/scheduled"]; got != scheduled {
			t.Fatalf("Documents(new_7) shows %q", got)
		}
		if got := h.Documents("nobody"); got != nil {
			t.Fatalf("Documents(nobody) = %q, want nil", got)
		}
	})
}

// TestInventoryRemove: a removed VM's address gets the 403 of an unknown
// address, with its connection closed, as soon as ChangeInventory
// returns, for a GET and a token PUT alike; Documents has nothing for it.
func TestInventoryRemove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		want(t, "before", key(h, optAddr, "/latest/meta-data/instance-id"), 200, "i-0000000000000000b")
		change(t, e, engine.InventoryChange{Remove: []string{"opt_1"}})
		want(t, "GET", key(h, optAddr, "/latest/meta-data/instance-id"), 403, errorPage(403), "Connection", "close")
		w := do(h, req{method: http.MethodPut, path: aws.TokenPath, remote: optAddr, header: map[string]string{aws.TokenTTLHeader: "60"}})
		want(t, "token PUT", w, 403, errorPage(403), "Connection", "close")
		if got := h.Documents("opt_1"); got != nil {
			t.Fatalf("Documents(opt_1) = %q after its removal, want nil", got)
		}
		want(t, "another VM", key(h, spotAddr, "/latest/meta-data/instance-id"), 200, "i-0000000000000000c")
	})
}

// TestInventoryMove: a VM's new address is served as that VM, with the
// keys that name the address rendered again, as soon as the change
// returns; its old one gets 403, unless another VM took it in the same
// change. A token stays good across a move: it is the VM's, not the
// address's.
func TestInventoryMove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		tok := token(t, h, optAddr, "3600")
		const newAddr = "127.0.0.30:40000"
		opt := *e.Fleet().VM("opt_1")
		opt.IP = netip.MustParseAddrPort(newAddr).Addr()
		change(t, e, engine.InventoryChange{Set: []*forewarn.VM{&opt}})
		want(t, "local-ipv4", key(h, newAddr, "/latest/meta-data/local-ipv4"), 200, "127.0.0.30")
		want(t, "hostname", key(h, newAddr, "/latest/meta-data/hostname"), 200, "ip-127-0-0-30.eu-west-1.compute.internal")
		w := do(h, req{path: "/latest/meta-data/instance-id", remote: newAddr, header: map[string]string{aws.TokenHeader: tok}})
		want(t, "the old token from the new address", w, 200, "i-0000000000000000b", aws.TokenTTLHeader, "3600")
		want(t, "old address", key(h, optAddr, "/latest/meta-data/instance-id"), 403, errorPage(403), "Connection", "close")

		// spot_2 moves on, and opt_1 takes its address, in one change.
		const spotNew = "127.0.0.31:40000"
		spot := *e.Fleet().VM("spot_2")
		spot.IP = netip.MustParseAddrPort(spotNew).Addr()
		opt.IP = netip.MustParseAddrPort(spotAddr).Addr()
		change(t, e, engine.InventoryChange{Set: []*forewarn.VM{&spot, &opt}})
		want(t, "taken over", key(h, spotAddr, "/latest/meta-data/instance-id"), 200, "i-0000000000000000b")
		want(t, "moved on", key(h, spotNew, "/latest/meta-data/instance-id"), 200, "i-0000000000000000c")
		want(t, "left", key(h, newAddr, "/latest/meta-data/instance-id"), 403, errorPage(403), "Connection", "close")
	})
}

// TestInventoryRegisteredAgain: a VM removed and registered again under
// its name is a new instance to its tokens: one issued before the
// removal is refused (401), and a new one is good.
func TestInventoryRegisteredAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		get := func(tok string) *httptest.ResponseRecorder {
			return do(h, req{path: "/latest/meta-data/instance-id", remote: ec2Addr, header: map[string]string{aws.TokenHeader: tok}})
		}
		old := token(t, h, ec2Addr, "3600")
		want(t, "before", get(old), 200, "i-0000000000000000a")
		vm := *e.Fleet().VM("ec2_0")
		change(t, e, engine.InventoryChange{Remove: []string{"ec2_0"}})
		change(t, e, engine.InventoryChange{Set: []*forewarn.VM{&vm}})
		want(t, "the old token", get(old), 401, errorPage(401), "Connection", "close")
		want(t, "a new token", get(token(t, h, ec2Addr, "3600")), 200, "i-0000000000000000a")
	})
}

// TestInventoryThrottlesEachVM: throttling state is per VM and goes with
// the VM: a VM added has its own whole burst, a VM's budget is not
// shared with the others whatever is added and removed, and a VM removed
// and registered again starts with a whole burst.
func TestInventoryThrottlesEachVM(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		h.SetRateLimit(2)
		burst := func(what, remote string) {
			t.Helper()
			for i := range 2 {
				if c := key(h, remote, "/latest/meta-data/instance-id").Code; c != 200 {
					t.Fatalf("%s: request %d: %d, want 200", what, i+1, c)
				}
			}
			want(t, what+": request 3", key(h, remote, "/latest/meta-data/instance-id"), 429, errorPage(429), "Connection", "close")
		}
		burst("opt_1", optAddr)
		const addr = "127.0.0.20:40000"
		change(t, e, engine.InventoryChange{Set: []*forewarn.VM{ec2VM("new_7", addr, "i-00000000000000010")}})
		burst("new_7, added", addr)
		change(t, e, engine.InventoryChange{Remove: []string{"spot_2"}})
		if c := key(h, optAddr, "/latest/meta-data/instance-id").Code; c != 429 {
			t.Fatalf("opt_1 after adds and removes: %d, want still 429", c)
		}
		opt := *e.Fleet().VM("opt_1")
		change(t, e, engine.InventoryChange{Remove: []string{"opt_1"}})
		change(t, e, engine.InventoryChange{Set: []*forewarn.VM{&opt}})
		burst("opt_1, registered again", optAddr)
	})
}

package gce_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/compute/metadata"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/gce"
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

// gceVM returns a GCE VM named name at addr (host:port), as testFleet's.
func gceVM(name, addr string) *forewarn.VM {
	return &forewarn.VM{Name: name, IP: netip.MustParseAddrPort(addr).Addr(), Provider: forewarn.GCE, OnHostMaintenance: "MIGRATE",
		Zone: "us-central1-a", MachineType: "e2-standard-2", Project: "forewarn-project"}
}

// errorPage is the exact HTML page of an error.
func errorPage(code int, detail, path string) string {
	return fmt.Sprintf("<!DOCTYPE html>\n<html lang=en>\n<meta charset=utf-8>\n<title>Error %d (%s)</title>\n<p><b>%d.</b> %s\n<p>URL: <code>%s</code>\n",
		code, http.StatusText(code), code, detail, path)
}

// unknownPage is the exact 403 page of a source address that is no VM's.
func unknownPage(addr, path string) string {
	return errorPage(403, "No VM of the fleet has the source address "+netip.MustParseAddrPort(addr).Addr().String()+".", path)
}

// removedPage is the exact 404 page that ends a removed VM's long-poll.
func removedPage(path string) string {
	return errorPage(404, "This VM left the fleet: the requested key is no longer defined.", path)
}

// checkClosing checks an exact error page and that the connection closes
// after it.
func checkClosing(t *testing.T, w *httptest.ResponseRecorder, status int, page string) {
	t.Helper()
	check(t, w, status, "text/html; charset=UTF-8", page)
	if c := w.Header().Get("Connection"); c != "close" {
		t.Fatalf("%d with Connection %q, want close", status, c)
	}
}

// TestInventoryAdd: a VM added while the server runs is answered, with
// its own keys, as soon as ChangeInventory returns, and an event naming
// it shows; the operator's Documents has it.
func TestInventoryAdd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, s := setup(t)
		const addr = "127.0.0.20:40000"
		checkClosing(t, get(s, addr, "instance/name"), 403, unknownPage(addr, v1+"instance/name"))
		vm := gceVM("new", addr)
		vm.Zone = "europe-west1-b"
		change(t, e, engine.InventoryChange{Set: []*forewarn.VM{vm}})
		text(t, get(s, addr, "instance/maintenance-event"), "NONE")
		text(t, get(s, addr, "instance/name"), "new")
		text(t, get(s, addr, "instance/hostname"), "new.europe-west1-b.c.forewarn-project.internal")
		create(t, e, engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"new"}, Started: true, Lasts: time.Minute})
		text(t, get(s, addr, "instance/maintenance-event"), "MIGRATE_ON_HOST_MAINTENANCE")
		if got := s.Documents("new")[maintenanceEvent]; got != "MIGRATE_ON_HOST_MAINTENANCE" {
			t.Fatalf("Documents(new) shows maintenance-event %q", got)
		}
		if got := s.Documents("nobody"); got != nil {
			t.Fatalf("Documents(nobody) = %q, want nil", got)
		}
	})
}

// TestInventoryRemove: a removed VM's address gets the unknown address's
// 403, to the byte, as soon as ChangeInventory returns, on every path;
// Documents has nothing for it.
func TestInventoryRemove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, s := setup(t)
		text(t, get(s, quietAddr, "instance/name"), "quiet")
		change(t, e, engine.InventoryChange{Remove: []string{"quiet"}})
		checkClosing(t, get(s, quietAddr, "instance/name"), 403, unknownPage(quietAddr, v1+"instance/name"))
		checkClosing(t, do(s, req{target: "/", remote: quietAddr}), 403, unknownPage(quietAddr, "/"))
		if got := s.Documents("quiet"); got != nil {
			t.Fatalf("Documents(quiet) = %q after its removal, want nil", got)
		}
		text(t, get(s, vmAddr, "instance/name"), "vm")
	})
}

// TestInventoryMove: a VM's new address is served as that VM as soon as
// the change returns, and its old one gets 403, unless another VM took it
// in the same change. A change of the VM's keys wakes a long-poll held
// on one of them.
func TestInventoryMove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, s := setup(t)
		const newAddr = "127.0.0.30:40000"
		change(t, e, engine.InventoryChange{Set: []*forewarn.VM{gceVM("quiet", newAddr)}})
		text(t, get(s, newAddr, "instance/name"), "quiet")
		checkClosing(t, get(s, quietAddr, "instance/name"), 403, unknownPage(quietAddr, v1+"instance/name"))

		// quiet moves on, and vm takes its address, in one change.
		const vmNew = "127.0.0.31:40000"
		change(t, e, engine.InventoryChange{Set: []*forewarn.VM{gceVM("quiet", vmNew), gceVM("vm", newAddr)}})
		text(t, get(s, newAddr, "instance/name"), "vm")
		text(t, get(s, vmNew, "instance/name"), "quiet")
		checkClosing(t, get(s, vmAddr, "instance/name"), 403, unknownPage(vmAddr, v1+"instance/name"))

		// A long-poll on the zone wakes when it changes, with the new value.
		zone := get(s, newAddr, "instance/zone")
		num := value(t, s, newAddr, "project/numeric-project-id")
		p := startPoll(s, req{target: v1 + "instance/zone" + waitFor(etagOf(t, zone)), remote: newAddr})
		synctest.Wait()
		p.hanging(t, "before the change")
		vm := gceVM("vm", newAddr)
		vm.Zone = "us-east1-b"
		change(t, e, engine.InventoryChange{Set: []*forewarn.VM{vm}})
		synctest.Wait()
		text(t, p.answered(t, "after the zone changed"), "projects/"+num+"/zones/us-east1-b")
		text(t, get(s, newAddr, "instance/hostname"), "vm.us-east1-b.c.forewarn-project.internal")
		text(t, get(s, newAddr, "instance/maintenance-event"), "NONE")
	})
}

// TestInventoryRemoveEndsLongPolls: every long-poll a VM holds, on any
// key, ends the moment the VM leaves the inventory, with the 404 that
// tells the Go client the key is gone (docs/wire-decisions.md) and the
// connection closed; another VM's long-poll is still held.
func TestInventoryRemoveEndsLongPolls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, s := setup(t)
		keys := []string{"instance/maintenance-event", "instance/preempted", "instance/upcoming-maintenance",
			"instance/", "instance/name", "instance/scheduling/on-host-maintenance"}
		var polls []*poll
		for _, k := range keys {
			q := "?wait_for_change=true"
			if k == "instance/" {
				q += "&recursive=true"
			}
			polls = append(polls, startPoll(s, req{target: v1 + k + q, remote: vmAddr}))
		}
		ctx, cancel := context.WithCancel(t.Context())
		other := startPoll(s, req{target: maintenanceEvent + "?wait_for_change=true", remote: gpuAddr, ctx: ctx})
		defer func() { cancel(); <-other.done }()
		step(time.Hour)
		for i, p := range polls {
			p.hanging(t, keys[i]+" after an hour")
		}
		if n := waiters(); n != len(keys)+1 {
			t.Fatalf("%d long-polls held, want %d", n, len(keys)+1)
		}
		start := time.Now()
		change(t, e, engine.InventoryChange{Remove: []string{"vm"}})
		synctest.Wait()
		if d := time.Since(start); d != 0 {
			t.Fatalf("answered %v after the removal, want at once", d)
		}
		for i, p := range polls {
			checkClosing(t, p.answered(t, keys[i]), http.StatusNotFound, removedPage(v1+keys[i]))
		}
		other.hanging(t, "gpu's long-poll")
		if n := waiters(); n != 1 {
			t.Fatalf("%d long-polls held after the removal, want gpu's 1", n)
		}
	})
}

// TestInventoryRemoveEndsLongPollSocket: over a real socket, a held
// long-poll of a VM removed meanwhile is answered within 500 ms with the
// 404, and the server closes the connection after it.
func TestInventoryRemoveEndsLongPollSocket(t *testing.T) {
	e, srv, _ := socketSetup(t)
	tr := &http.Transport{DialContext: vmDialer.DialContext}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	type result struct {
		resp *http.Response
		body string
		err  error
		at   time.Time
	}
	res := make(chan result, 1)
	go func() {
		r, _ := http.NewRequest(http.MethodGet, srv.URL+maintenanceEvent+"?wait_for_change=true", nil)
		r.Header.Set("Metadata-Flavor", "Google")
		resp, err := client.Do(r)
		if err != nil {
			res <- result{err: err, at: time.Now()}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- result{resp, string(b), err, time.Now()}
	}()
	eventually(t, "the long-poll is not waiting", func() bool { return waiters() == 1 })
	removed := time.Now()
	change(t, e, engine.InventoryChange{Remove: []string{"vm"}})
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	if d := r.at.Sub(removed); d >= 500*time.Millisecond {
		t.Fatalf("answered %s after the removal, want < 500ms", d)
	}
	if r.resp.StatusCode != 404 || r.body != removedPage(maintenanceEvent) || !r.resp.Close || r.resp.Header.Get("Metadata-Flavor") != "Google" {
		t.Fatalf("long-poll answered %d %q, closing %v, %v", r.resp.StatusCode, r.body, r.resp.Close, r.resp.Header)
	}
}

// TestRealClientStopsOnRemoval: the real Go client
// (cloud.google.com/go/compute/metadata) watching a key with
// SubscribeWithContext stops cleanly when its VM is removed: its
// function is called once with ok false, and SubscribeWithContext
// returns nil, without the 5 s sleep and retry it gives other errors. A
// Get afterwards gets the 403 of an unknown address.
func TestRealClientStopsOnRemoval(t *testing.T) {
	e, srv, _ := socketSetup(t)
	t.Setenv("GCE_METADATA_HOST", srv.Listener.Addr().String())
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext}
	defer tr.CloseIdleConnections()
	c := metadata.NewWithOptions(&metadata.Options{Client: &http.Client{Transport: tr}})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type call struct {
		v  string
		ok bool
	}
	calls := make(chan call, 4)
	done := make(chan error, 1)
	go func() {
		done <- c.SubscribeWithContext(ctx, "instance/maintenance-event", func(_ context.Context, v string, ok bool) error {
			calls <- call{v, ok}
			return nil
		})
	}()
	if got := <-calls; got != (call{"NONE", true}) {
		t.Fatalf("first call %+v, want NONE", got)
	}
	eventually(t, "the client is not waiting", func() bool { return waiters() == 1 })
	removed := time.Now()
	change(t, e, engine.InventoryChange{Remove: []string{"vm"}})
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("SubscribeWithContext: %v, want nil", err)
		}
	case <-ctx.Done():
		t.Fatal("SubscribeWithContext still running 10 s on")
	}
	if d := time.Since(removed); d >= 2*time.Second {
		t.Fatalf("SubscribeWithContext returned %s after the removal, want < 2s", d)
	}
	if got := <-calls; got != (call{"", false}) {
		t.Fatalf("last call %+v, want the key gone (ok false)", got)
	}
	var me *metadata.Error
	if _, err := c.GetWithContext(ctx, "instance/name"); !errors.As(err, &me) || me.Code != 403 {
		t.Fatalf("Get after the removal: %v, want a 403", err)
	}
}

// TestClientWatchEndsOnRemoval: this package's client, watching a VM's
// keys with three long-polls, returns the 404 as a *StatusError as soon
// as the VM is removed, and leaves nothing held.
func TestClientWatchEndsOnRemoval(t *testing.T) {
	e, s := setup(t)
	srv := serveCounted(t, s)
	c := clientFor(t, srv, "127.0.0.2")
	done := make(chan error, 1)
	go func() { done <- c.Watch(t.Context(), func([]forewarn.Notice) error { return nil }) }()
	eventually(t, "three long-polls", func() bool { return srv.inFlight.Load() == 3 })
	change(t, e, engine.InventoryChange{Remove: []string{"vm"}})
	select {
	case err := <-done:
		var se *gce.StatusError
		if !errors.As(err, &se) || se.Code != http.StatusNotFound {
			t.Fatalf("Watch returned %v, want a 404 StatusError", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Watch still running 2 s after the removal")
	}
	eventually(t, "long-polls still held", func() bool { return srv.inFlight.Load() == 0 })
}

// TestInventoryThrottlesEachVM: throttling and the long-poll cap are per
// VM and go with it: a VM added has its own whole budget, and a VM
// removed and registered again starts with a whole one.
func TestInventoryThrottlesEachVM(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, s := setup(t)
		s.SetRateLimit(3)
		burst := func(what, remote string) {
			t.Helper()
			for i := range 3 {
				if c := get(s, remote, "instance/name").Code; c != 200 {
					t.Fatalf("%s: request %d: %d, want 200", what, i+1, c)
				}
			}
			if c := get(s, remote, "instance/name").Code; c != 429 {
				t.Fatalf("%s: request 4: %d, want 429", what, c)
			}
		}
		burst("vm", vmAddr)
		const addr = "127.0.0.20:40000"
		change(t, e, engine.InventoryChange{Set: []*forewarn.VM{gceVM("new", addr)}})
		burst("new, added", addr)
		change(t, e, engine.InventoryChange{Remove: []string{"quiet"}})
		if c := get(s, vmAddr, "instance/name").Code; c != 429 {
			t.Fatalf("vm after adds and removes: %d, want still 429", c)
		}
		vm := *e.Fleet().VM("vm")
		change(t, e, engine.InventoryChange{Remove: []string{"vm"}})
		change(t, e, engine.InventoryChange{Set: []*forewarn.VM{&vm}})
		burst("vm, registered again", vmAddr)
	})
}

// TestFirstReadsWhileRendering has VMs' first requests render their
// static nodes and directories, several at once for one VM, while the
// engine renders new documents and new definitions: go test -race
// checks that the two share the render cache safely, and every answer
// must be whole.
func TestFirstReadsWhileRendering(t *testing.T) {
	e, h := setup(t)
	keys := []string{"instance/name", "instance/", "", "instance/scheduling/", "project/project-id", "instance/hostname"}
	remotes := []string{vmAddr, gpuAddr, quietAddr}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, remote := range remotes {
		for range 2 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					for _, key := range keys {
						for _, q := range []string{"", "?recursive=true"} {
							w := get(h, remote, key+q)
							if w.Code != http.StatusOK || w.Body.Len() == 0 || len(w.Header()["ETag"]) != 1 {
								t.Errorf("%s%s from %s: status %d, %d bytes, ETag %q", key, q, remote, w.Code, w.Body.Len(), w.Header()["ETag"])
								return
							}
						}
					}
				}
			})
		}
	}
	for i := range 200 {
		evs, err := e.CreateAll(t.Context(), engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"vm", "quiet"}, Notice: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		vm := gceVM("quiet", quietAddr)
		vm.MachineType = fmt.Sprintf("e2-standard-%d", i)
		change(t, e, engine.InventoryChange{Set: []*forewarn.VM{vm}})
		for _, ev := range evs {
			if err := e.Cancel(t.Context(), ev.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	if got := value(t, h, quietAddr, "instance/machine-type"); !strings.HasSuffix(got, "/e2-standard-199") {
		t.Errorf("machine-type after the last definition = %q", got)
	}
}

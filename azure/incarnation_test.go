package azure_test

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/azure"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

// TestIncarnationHasACause checks, at the newest api-version, that
// DocumentIncarnation goes up exactly when the events a VM reads change:
// approvals that start nothing, a wave's hidden Pending domains, another
// scope's events and Compute Engine events leave it alone. Incarnations are per VM, not per api-version
// (docs/wire-decisions.md), so this is the guarantee a client of the
// newest version gets.
func TestIncarnationHasACause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ip := netip.MustParseAddr
		fleet := &forewarn.Fleet{VMs: []*forewarn.VM{
			{Name: "web_0", IP: ip("127.0.0.2"), Provider: forewarn.Azure, AvailabilitySet: "web"},
			{Name: "web_1", IP: ip("127.0.0.3"), Provider: forewarn.Azure, AvailabilitySet: "web", UpdateDomain: 1},
			{Name: "ss_0", IP: ip("127.0.0.4"), Provider: forewarn.Azure, ScaleSet: "ss", InstanceID: "0"},
			{Name: "ss_1", IP: ip("127.0.0.5"), Provider: forewarn.Azure, ScaleSet: "ss", InstanceID: "1"},
			{Name: "other", IP: ip("127.0.0.6"), Provider: forewarn.Azure},
			{Name: "gce", IP: ip("127.0.0.7"), Provider: forewarn.GCE},
		}}
		e, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: fleet, DisableAfter: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		for _, vm := range fleet.VMs {
			e.NoteRequest(vm.Name)
		}
		synctest.Wait() // the LastSeen writes, which change no document
		h := azure.NewServer(e, nil)
		type doc struct {
			DocumentIncarnation int64
			Events              json.RawMessage
		}
		read := func(remote string) doc {
			t.Helper()
			w := do(h, req{target: events + "2020-07-01", remote: remote + ":5000"})
			var d doc
			if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &d) != nil {
				t.Fatalf("GET from %s: %d %s", remote, w.Code, w.Body)
			}
			return d
		}
		vms := map[string]string{"web_0": "127.0.0.2", "web_1": "127.0.0.3", "ss_0": "127.0.0.4", "ss_1": "127.0.0.5", "other": "127.0.0.6"}
		last := map[string]doc{}
		for name, addr := range vms {
			last[name] = read(addr)
		}
		// after checks every VM's document after a step: the incarnation
		// moved by one where the events changed, and stayed where not.
		after := func(step string) {
			t.Helper()
			for name, addr := range vms {
				d, prev := read(addr), last[name]
				changed := string(d.Events) != string(prev.Events)
				switch {
				case changed && d.DocumentIncarnation != prev.DocumentIncarnation+1:
					t.Errorf("%s: %s: events changed, incarnation %d -> %d", step, name, prev.DocumentIncarnation, d.DocumentIncarnation)
				case !changed && d.DocumentIncarnation != prev.DocumentIncarnation:
					t.Errorf("%s: %s: nothing changed, incarnation %d -> %d", step, name, prev.DocumentIncarnation, d.DocumentIncarnation)
				}
				last[name] = d
			}
		}
		mk := func(s engine.Spec) *forewarn.Event {
			t.Helper()
			ev, err := e.Create(t.Context(), s)
			if err != nil {
				t.Fatal(err)
			}
			return ev
		}
		reboot := mk(engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_0"}})
		after("create a Reboot")
		if err := e.Approve(t.Context(), forewarn.Operator, []string{reboot.ID}); err != nil {
			t.Fatal(err)
		}
		after("approve it: it starts")
		if err := e.Approve(t.Context(), "web_1", []string{reboot.ID}); err != nil {
			t.Fatal(err)
		}
		after("approve a Started event again")
		del0, _ := e.Delete(t.Context(), "ss_0")
		after("delete ss_0")
		time.Sleep(time.Minute)
		del1, _ := e.Delete(t.Context(), "ss_1")
		after("delete ss_1")
		if err := e.Approve(t.Context(), "ss_1", []string{del1.ID}); err != nil {
			t.Fatal(err)
		}
		after("approve a Terminate that waits for an earlier one")
		if _, err := e.StartWave(t.Context(), engine.WaveSpec{Scope: "web", Type: forewarn.Freeze}); err != nil {
			t.Fatal(err)
		}
		after("a wave over web: domain 0 scheduled, domain 1 pending and hidden")
		mk(engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"gce"}, Started: true})
		after("a Compute Engine migration")
		if err := e.Complete(t.Context(), reboot.ID); err != nil {
			t.Fatal(err)
		}
		after("complete the Reboot")
		if err := e.Cancel(t.Context(), del0.ID); err != nil {
			t.Fatal(err)
		}
		after("cancel the first Terminate: the approved second starts")
		if got, _ := e.Event(del1.ID); got.Status != forewarn.Started {
			t.Fatalf("the second Terminate is %s", got.Status)
		}
	})
}

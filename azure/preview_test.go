package azure_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/azure"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

const events = "/metadata/scheduledevents?api-version="

// TestPreviewPostWithoutHeader checks that a POST at the 2017-03-01
// preview needs no Metadata header (seed 001's C# sample approves
// without it), while every later version, and a preview GET, still do.
func TestPreviewPostWithoutHeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_0"}})
		if err != nil {
			t.Fatal(err)
		}
		body := fmt.Sprintf(`{"DocumentIncarnation":2,"StartRequests":[{"EventId":%q}]}`, ev.ID)
		noHeader := map[string]string{}
		const missing = `{"error": "Bad request. Required metadata header not specified"}`
		check(t, do(h, req{target: events + "2017-03-01", header: noHeader}), 400, missing)
		check(t, do(h, req{method: "POST", target: events + "2017-08-01", body: body, header: noHeader}), 400, missing)
		check(t, do(h, req{method: "POST", target: events + "2017-03-01", body: body, header: map[string]string{"Metadata": "false"}}), 400, missing)
		check(t, do(h, req{method: "POST", target: events + "2017-03-01", body: body, header: noHeader}), 200, "")
		if got, _ := e.Event(ev.ID); got.Status != forewarn.Started || len(got.Approvals) != 1 || got.Approvals[0].By != "web_0" {
			t.Fatalf("after the preview POST: %s %+v", got.Status, got.Approvals)
		}
	})
}

// TestPreviewUnderscore checks that the preview prefixes IaaS VM names
// with "_" and shows cloud service role instances as they are (seed
// 001: "FrontEnd_IN_0").
func TestPreviewUnderscore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ip := netip.MustParseAddr
		fleet := &forewarn.Fleet{VMs: []*forewarn.VM{
			{Name: "FrontEnd_IN_0", IP: ip("127.0.0.2"), Provider: forewarn.Azure, CloudService: "FrontEnd"},
			{Name: "FrontEnd_IN_1", IP: ip("127.0.0.3"), Provider: forewarn.Azure, CloudService: "FrontEnd"},
			{Name: "iaas", IP: ip("127.0.0.4"), Provider: forewarn.Azure},
		}}
		e, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: fleet})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		for _, vm := range fleet.VMs {
			e.NoteRequest(vm.Name)
		}
		h := azure.NewServer(e, nil)
		role, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"FrontEnd_IN_0", "FrontEnd_IN_1"}})
		if err != nil {
			t.Fatal(err)
		}
		vm, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Freeze, VMs: []string{"iaas"}})
		if err != nil {
			t.Fatal(err)
		}
		nb := azure.FormatNotBefore(time.Now().Add(15 * time.Minute))
		check(t, do(h, req{target: events + "2017-03-01", remote: "127.0.0.2:5000"}), 200,
			`{"DocumentIncarnation":2,"Events":[{"EventId":"`+role.ID+`","EventStatus":"Scheduled","EventType":"Reboot","ResourceType":"VirtualMachine","Resources":["FrontEnd_IN_0","FrontEnd_IN_1"],"NotBefore":"`+nb+`"}]}`)
		check(t, do(h, req{target: events + "2017-03-01", remote: "127.0.0.4:5000"}), 200,
			`{"DocumentIncarnation":2,"Events":[{"EventId":"`+vm.ID+`","EventStatus":"Scheduled","EventType":"Freeze","ResourceType":"VirtualMachine","Resources":["_iaas"],"NotBefore":"`+nb+`"}]}`)
		check(t, do(h, req{target: events + "2017-08-01", remote: "127.0.0.4:5000"}), 200,
			`{"DocumentIncarnation":2,"Events":[{"EventId":"`+vm.ID+`","EventStatus":"Scheduled","EventType":"Freeze","ResourceType":"VirtualMachine","Resources":["iaas"],"NotBefore":"`+nb+`"}]}`)
	})
}

// TestApproveHiddenAtVersion checks that an approval may name only events
// the caller can see at the api-version it uses: a Preempt at 2017-08-01
// or a Terminate at 2017-11-01 gets the same 400 as an unknown id, and
// nothing is approved.
func TestApproveHiddenAtVersion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		pre, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Preempt, VMs: []string{"web_0"}})
		if err != nil {
			t.Fatal(err)
		}
		term, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Terminate, VMs: []string{"web_1"}})
		if err != nil {
			t.Fatal(err)
		}
		post := func(_, id string) string {
			return fmt.Sprintf(`{"StartRequests":[{"EventId":%q}]}`, id)
		}
		for _, c := range []struct{ version, id string }{
			{"2017-03-01", pre.ID}, {"2017-08-01", pre.ID}, {"2017-08-01", term.ID}, {"2017-11-01", term.ID},
			{"2017-11-01", strings.ToLower(term.ID)},
		} {
			check(t, do(h, req{method: "POST", target: events + c.version, body: post(c.version, c.id), remote: web1}), 400,
				`{"error": "Bad request. EventId `+c.id+` is not a scheduled event of this VM"}`)
		}
		unknown := "00000000-0000-4000-8000-000000000000"
		check(t, do(h, req{method: "POST", target: events + "2017-08-01", body: post("", unknown), remote: web1}), 400,
			`{"error": "Bad request. EventId `+unknown+` is not a scheduled event of this VM"}`)
		for _, id := range []string{pre.ID, term.ID} {
			if got, _ := e.Event(id); got.Approved() || got.Status != forewarn.Scheduled {
				t.Fatalf("%s after refused approvals: %s %+v", got.Type, got.Status, got.Approvals)
			}
		}
		// At a version that shows them, the same approvals go through.
		check(t, do(h, req{method: "POST", target: events + "2017-11-01", body: post("", pre.ID), remote: web1}), 200, "")
		check(t, do(h, req{method: "POST", target: events + "2019-01-01", body: post("", term.ID), remote: web1}), 200, "")
		if got, _ := e.Event(term.ID); !got.Approved() {
			t.Fatal("Terminate not approved at 2019-01-01")
		}
	})
}

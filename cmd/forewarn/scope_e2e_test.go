package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
)

const scopeFleet = `vms:
  - {name: alone_a, ip: 127.0.0.60}
  - {name: alone_b, ip: 127.0.0.61}
  - {name: set_x0, ip: 127.0.0.62, availabilitySet: set_x}
  - {name: set_x1, ip: 127.0.0.63, availabilitySet: set_x}
  - {name: set_y0, ip: 127.0.0.64, availabilitySet: set_y}
  - {name: gce_0, ip: 127.0.0.65, provider: gce}
  - {name: gce_1, ip: 127.0.0.66, provider: gce}
  - {name: ec2_0, ip: 127.0.0.67, provider: aws, instanceId: i-00000000000000060}
  - {name: ec2_1, ip: 127.0.0.68, provider: aws, instanceId: i-00000000000000061}
`

var scopeIPs = map[string]string{
	"alone_a": "127.0.0.60", "alone_b": "127.0.0.61", "set_x0": "127.0.0.62", "set_x1": "127.0.0.63",
	"set_y0": "127.0.0.64", "gce_0": "127.0.0.65", "gce_1": "127.0.0.66", "ec2_0": "127.0.0.67", "ec2_1": "127.0.0.68",
}

// TestEventsSplitByScopeGroup is issue 21's first attack, on the real
// binary: one operator request naming two standalone VMs and VMs of two
// availability sets made one event that every one of them saw, listing
// all four names, and any of them could start the others' maintenance
// by approving it. Now the request makes one event per scope group, the
// CLI prints each ID, each VM's document names only its own group's VMs,
// and an approval of another group's event is refused. The same holds
// for Compute Engine and EC2 VMs, each a group of its own, read with
// their clouds' own clients.
func TestEventsSplitByScopeGroup(t *testing.T) {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleet, []byte(scopeFleet), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, filepath.Join(dir, "data"), fleet)
	azureVMs := []string{"alone_a", "alone_b", "set_x0", "set_x1", "set_y0"}
	for _, name := range azureVMs { // every VM polls once: enabled
		s.events(t, scopeIPs[name], "2020-07-01")
	}

	out := s.mustCLI(t, "event", "create", "--type", "Freeze", "--vm", "alone_a", "--vm", "alone_b", "--vm", "set_x0", "--vm", "set_y0")
	ids := strings.Fields(out)
	if len(ids) != 4 {
		t.Fatalf("event create printed %q, want 4 IDs, one per scope group", out)
	}
	// Each ID's event, in the order of its group's first VM.
	wantResources := [][]string{{"alone_a"}, {"alone_b"}, {"set_x0"}, {"set_y0"}}
	for i, id := range ids {
		ev := listedEvent(t, s, id)
		if ev.Status != "Scheduled" || !slices.Equal(ev.Resources, wantResources[i]) {
			t.Fatalf("event %d (%s): %s %v, want Scheduled %v", i, id, ev.Status, ev.Resources, wantResources[i])
		}
	}

	// Each VM's document: exactly its group's event, naming its group's
	// VMs only, and no other VM's name anywhere in the bytes.
	sees := map[string]struct {
		id        string
		resources []string
	}{
		"alone_a": {ids[0], []string{"alone_a"}},
		"alone_b": {ids[1], []string{"alone_b"}},
		"set_x0":  {ids[2], []string{"set_x0"}},
		"set_x1":  {ids[2], []string{"set_x0"}},
		"set_y0":  {ids[3], []string{"set_y0"}},
	}
	for _, name := range azureVMs {
		body := s.events(t, scopeIPs[name], "2020-07-01")
		var doc struct {
			Events []struct {
				EventId   string
				Resources []string
			}
		}
		if err := json.Unmarshal([]byte(body), &doc); err != nil {
			t.Fatalf("%s: %v: %s", name, err, body)
		}
		want := sees[name]
		if len(doc.Events) != 1 || doc.Events[0].EventId != want.id || !slices.Equal(doc.Events[0].Resources, want.resources) {
			t.Fatalf("%s sees %s, want only event %s with Resources %v", name, body, want.id, want.resources)
		}
		for other := range scopeIPs {
			if !slices.Contains(want.resources, other) && other != name && strings.Contains(body, `"`+other+`"`) {
				t.Errorf("%s's document names %s: %s", name, other, body)
			}
		}
	}

	// alone_a cannot start set_x0's maintenance; its own approval starts
	// only its own event.
	if code, body := s.approve(t, scopeIPs["alone_a"], ids[2]); code != 400 {
		t.Fatalf("alone_a approving set_x0's event: %d %s, want 400", code, body)
	}
	if code, body := s.approve(t, scopeIPs["alone_a"], ids[0]); code != 200 {
		t.Fatalf("alone_a approving its own event: %d %s", code, body)
	}
	for i, id := range ids {
		ev := listedEvent(t, s, id)
		if want := map[bool]string{true: "Started", false: "Scheduled"}[i == 0]; ev.Status != want {
			t.Errorf("event %d after alone_a's approval: %s, want %s", i, ev.Status, want)
		}
	}

	// Compute Engine: one event each, read with the real client.
	gids := strings.Fields(s.mustCLI(t, "event", "create", "--type", "MIGRATE_ON_HOST_MAINTENANCE", "--vm", "gce_0", "--vm", "gce_1", "--started", "--lasts", "1h"))
	if len(gids) != 2 {
		t.Fatalf("GCE event create printed %v, want 2 IDs", gids)
	}
	for i, name := range []string{"gce_0", "gce_1"} {
		if ev := listedEvent(t, s, gids[i]); !slices.Equal(ev.Resources, []string{name}) {
			t.Fatalf("GCE event %s: %v, want [%s]", gids[i], ev.Resources, name)
		}
		v, err := gceClient(t, s, scopeIPs[name]).GetWithContext(t.Context(), "instance/maintenance-event")
		if err != nil || v != "MIGRATE_ON_HOST_MAINTENANCE" {
			t.Fatalf("%s reads maintenance-event %q, %v", name, v, err)
		}
	}

	// EC2: each VM sees its own scheduled event's ID, not the other's.
	eids := strings.Fields(s.mustCLI(t, "event", "create", "--type", "system-reboot", "--vm", "ec2_0", "--vm", "ec2_1", "--notice", "48h"))
	if len(eids) != 2 {
		t.Fatalf("EC2 event create printed %v, want 2 IDs", eids)
	}
	for i, name := range []string{"ec2_0", "ec2_1"} {
		c := imds.New(imds.Options{Endpoint: "http://" + s.metadata, HTTPClient: vmClient(scopeIPs[name]), EnableFallback: awssdk.FalseTernary})
		evs := sdkEvents(t, c, "events/maintenance/scheduled")
		// IMDS shows an event's ID as instance-event- and 17 hex digits
		// of the operator's ID (docs/aws-wire.md).
		want := "instance-event-" + strings.ToLower(strings.ReplaceAll(eids[i], "-", ""))[:17]
		if len(evs) != 1 || evs[0].EventId != want || evs[0].Code != "system-reboot" {
			t.Fatalf("%s sees %+v, want only %s", name, evs, want)
		}
	}
}

// listedEvent returns the event id as forewarn event list --json shows it.
func listedEvent(t *testing.T, s *server, id string) (ev struct {
	ID        string
	Status    string
	Resources []string
}) {
	t.Helper()
	var list struct{ Events []json.RawMessage }
	if err := jsonUnmarshal(s.mustCLI(t, "event", "list", "--json"), &list); err != nil {
		t.Fatal(err)
	}
	for _, raw := range list.Events {
		if err := json.Unmarshal(raw, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.ID == id {
			return ev
		}
	}
	t.Fatalf("event %s is not listed", id)
	return ev
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/compute/metadata"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
)

const gceFleet = `vms:
  - name: gce_0
    ip: 127.0.0.6
    provider: gce
  - name: spot_0
    ip: 127.0.0.7
    provider: gce
    provisioningModel: SPOT
  - name: web_0
    ip: 127.0.0.2
`

// gceClient returns the real Compute Engine metadata client, speaking to
// the server from ip. Its HTTP client has no timeout: long-polls hang.
func gceClient(t *testing.T, s *server, ip string) *metadata.Client {
	t.Setenv("GCE_METADATA_HOST", s.metadata)
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	hc := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	return metadata.NewWithOptions(&metadata.Options{Client: hc})
}

type seen struct {
	value string
	at    time.Time
}

// TestRealGCEClient drives the server with cloud.google.com/go/compute/metadata,
// unchanged: Subscribe sees NONE, MIGRATE_ON_HOST_MAINTENANCE, NONE, each
// exactly once and within a second of the change, and preempted turns
// TRUE after vm evict.
func TestRealGCEClient(t *testing.T) {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleet, []byte(gceFleet), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, filepath.Join(dir, "data"), fleet)
	c := gceClient(t, s, "127.0.0.6")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan seen, 16)
	done := make(chan error, 1)
	go func() {
		done <- c.SubscribeWithContext(ctx, "instance/maintenance-event", func(ctx context.Context, v string, ok bool) error {
			got <- seen{v, time.Now()}
			return nil
		})
	}()
	next := func() seen {
		t.Helper()
		select {
		case v := <-got:
			return v
		case <-time.After(10 * time.Second):
			t.Fatal("no maintenance-event value within 10 s")
		}
		return seen{}
	}
	if v := next(); v.value != "NONE" {
		t.Fatalf("first value %q, want NONE", v.value)
	}

	// A live migration 2 s out, lasting 2 s. The VM has read the key, so
	// it is warned: the key flips at once (the 60 s lead is already past).
	created := time.Now()
	resp, err := http.Post("http://"+s.adm+"/v1/events", "application/json",
		strings.NewReader(`{"type":"MIGRATE_ON_HOST_MAINTENANCE","vms":["gce_0"],"notice":"2s","lasts":"2s"}`))
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("create: %v %v", resp, err)
	}
	var ev forewarn.Event
	json.NewDecoder(resp.Body).Decode(&ev)
	resp.Body.Close()

	flip := next()
	if flip.value != "MIGRATE_ON_HOST_MAINTENANCE" || flip.at.Sub(created) > time.Second {
		t.Fatalf("second value %q after %v, want MIGRATE_ON_HOST_MAINTENANCE within 1 s", flip.value, flip.at.Sub(created))
	}
	back := next()
	final := s.event(t, ev.ID)
	if final.Status != forewarn.Completed || final.WarnedAt.IsZero() {
		t.Fatalf("event after the migration: %s warned %v", final.Status, final.WarnedAt)
	}
	if d := back.at.Sub(final.EndedAt); back.value != "NONE" || d < 0 || d > time.Second {
		t.Fatalf("third value %q %v after the end, want NONE within 1 s", back.value, d)
	}
	// Exactly once each: nothing more arrives.
	select {
	case v := <-got:
		t.Fatalf("extra value %q", v.value)
	case <-time.After(1500 * time.Millisecond):
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Subscribe returned %v", err)
	}

	// upcoming-maintenance through a whole maintenance: after the first
	// one it reads empty; then PENDING, ONGOING and empty again, each once.
	if v, err := c.GetWithContext(context.Background(), "instance/maintenance-event"); err != nil || v != "NONE" {
		t.Fatalf("maintenance-event: %q %v", v, err) // read, so the next migration is warned
	}
	upcoming := subscribe(t, c, "instance/upcoming-maintenance")
	if v := upcoming.next(t); v.value != "" {
		t.Fatalf("upcoming-maintenance after a maintenance: %q, want empty", v.value)
	}
	id := strings.TrimSpace(s.mustCLI(t, "event", "create", "--type", "MIGRATE_ON_HOST_MAINTENANCE", "--vm", "gce_0", "--notice", "3s", "--lasts", "2s"))
	if v := upcoming.next(t); !strings.Contains(v.value, "maintenance_status PENDING\n") {
		t.Fatalf("upcoming-maintenance after create: %q", v.value)
	}
	if v := upcoming.next(t); !strings.Contains(v.value, "maintenance_status ONGOING\n") {
		t.Fatalf("upcoming-maintenance at NotBefore: %q", v.value)
	}
	end := upcoming.next(t)
	final = s.event(t, id)
	if d := end.at.Sub(final.EndedAt); end.value != "" || final.Status != forewarn.Completed || d < 0 || d > time.Second {
		t.Fatalf("upcoming-maintenance %q %v after the end (event %s), want empty within 1 s", end.value, d, final.Status)
	}
	upcoming.quiet(t)
	upcoming.cancel()

	// Preemption of a Spot VM, and starting it again: Subscribe on
	// preempted sees FALSE, TRUE, FALSE, each once.
	spot := gceClient(t, s, "127.0.0.7")
	preempted := subscribe(t, spot, "instance/preempted")
	if v := preempted.next(t); v.value != "FALSE" {
		t.Fatalf("preempted before evict: %q", v.value)
	}
	pid := strings.TrimSpace(s.mustCLI(t, "vm", "evict", "spot_0"))
	if len(pid) != 36 {
		t.Fatalf("vm evict printed %q", pid)
	}
	if v := preempted.next(t); v.value != "TRUE" {
		t.Fatalf("preempted after evict: %q", v.value)
	}
	if _, errOut, code := s.cli(t, "vm", "start", "spot_0"); code != 1 || !strings.Contains(errOut, `VM "spot_0" is being preempted; start it once it is stopped`) {
		t.Fatalf("vm start while being preempted: exit %d %q", code, errOut)
	}
	s.mustCLI(t, "event", "complete", pid) // stopped now rather than in 30 s
	if st := vmState(t, s, "spot_0"); st != "stopped" {
		t.Fatalf("spot_0 is %q after its preemption, want stopped", st)
	}
	if out := s.mustCLI(t, "vm", "start", "spot_0"); out != "spot_0 running\n" {
		t.Fatalf("vm start printed %q", out)
	}
	if v := preempted.next(t); v.value != "FALSE" {
		t.Fatalf("preempted after vm start: %q", v.value)
	}
	preempted.quiet(t)
	preempted.cancel()
	if st := vmState(t, s, "spot_0"); st != "running" {
		t.Fatalf("spot_0 is %q after vm start", st)
	}
	if v, err := spot.GetWithContext(context.Background(), "instance/scheduling/provisioning-model"); err != nil || v != "SPOT" {
		t.Fatalf("provisioning-model: %q %v", v, err)
	}
	// A regular VM cannot be evicted, and an Azure VM gets 404 on GCE paths.
	if _, errOut, code := s.cli(t, "vm", "evict", "gce_0"); code != 1 || !strings.Contains(errOut, `VM "gce_0" is not a Spot or preemptible VM`) {
		t.Fatalf("evict of a regular VM: exit %d %q", code, errOut)
	}
	az := gceClient(t, s, "127.0.0.2")
	if _, err := az.GetWithContext(context.Background(), "instance/name"); err == nil {
		t.Fatal("an Azure VM read a GCE key")
	} else if _, notDefined := err.(metadata.NotDefinedError); !notDefined {
		t.Fatalf("Azure VM on a GCE path: %v, want 404 (NotDefinedError)", err)
	}
	s.stop(t)
}

// subscription is a running Subscribe of the real client.
type subscription struct {
	got    chan seen
	done   chan error
	cancel context.CancelFunc
}

// subscribe runs c.SubscribeWithContext on key until the test ends.
func subscribe(t *testing.T, c *metadata.Client, key string) *subscription {
	ctx, cancel := context.WithCancel(context.Background())
	s := &subscription{got: make(chan seen, 16), done: make(chan error, 1), cancel: cancel}
	go func() {
		s.done <- c.SubscribeWithContext(ctx, key, func(ctx context.Context, v string, ok bool) error {
			s.got <- seen{v, time.Now()}
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-s.done; !errors.Is(err, context.Canceled) {
			t.Errorf("Subscribe %s returned %v", key, err)
		}
	})
	return s
}

// next returns the next value the subscription saw, within 10 s.
func (s *subscription) next(t *testing.T) seen {
	t.Helper()
	select {
	case v := <-s.got:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("no value within 10 s")
	}
	return seen{}
}

// quiet checks that no further value arrives within 1.5 s.
func (s *subscription) quiet(t *testing.T) {
	t.Helper()
	select {
	case v := <-s.got:
		t.Fatalf("extra value %q", v.value)
	case <-time.After(1500 * time.Millisecond):
	}
}

// vmState returns the state vm list shows for the VM named name.
func vmState(t *testing.T, s *server, name string) string {
	t.Helper()
	var list struct{ VMs []engine.VMInfo }
	if err := json.Unmarshal([]byte(s.mustCLI(t, "vm", "list", "--json")), &list); err != nil {
		t.Fatal(err)
	}
	for _, vm := range list.VMs {
		if vm.Name == name {
			return vm.State
		}
	}
	t.Fatalf("vm list lacks %s", name)
	return ""
}

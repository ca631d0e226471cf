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

	// Preemption of a Spot VM.
	spot := gceClient(t, s, "127.0.0.7")
	if v, err := spot.GetWithContext(context.Background(), "instance/preempted"); err != nil || v != "FALSE" {
		t.Fatalf("preempted before evict: %q %v", v, err)
	}
	if out := s.mustCLI(t, "vm", "evict", "spot_0"); len(strings.TrimSpace(out)) != 36 {
		t.Fatalf("vm evict printed %q", out)
	}
	if v, err := spot.GetWithContext(context.Background(), "instance/preempted"); err != nil || v != "TRUE" {
		t.Fatalf("preempted after evict: %q %v", v, err)
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

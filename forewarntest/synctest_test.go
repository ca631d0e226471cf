package forewarntest_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/forewarntest"
)

const bubbleFleet = `vms:
  - {name: web_0, ip: 127.0.0.2}
  - {name: gce_0, ip: 127.0.0.3, provider: gce}
  - {name: ec2_0, ip: 127.0.0.4, provider: aws, instanceId: i-0123456789abcdef0}
`

// TestSynctestRealNotice: inside a bubble, a Reboot with its real
// 15-minute notice starts by itself at NotBefore to the second, the
// Azure client sees it Scheduled with that NotBefore and then Started,
// a Compute Engine long-poll is woken by a live migration's warning,
// and none of it waits in real time.
func TestSynctestRealNotice(t *testing.T) {
	began := time.Now()
	synctest.Test(t, func(t *testing.T) {
		srv := forewarntest.NewServer(t, forewarntest.Fleet(t, bubbleFleet))
		if !srv.Pipes() {
			t.Fatal("a server made in a bubble serves over sockets")
		}
		ctx := t.Context()
		az := srv.AzureClient("web_0")
		doc, err := az.Document(ctx)
		if err != nil || doc.Incarnation != 1 || len(doc.Notices) != 0 {
			t.Fatalf("first document: %+v, %v", doc, err)
		}

		created := time.Now()
		ev := srv.Reboot("web_0", forewarntest.EventOptions{})
		if got := ev.NotBefore.Sub(created); got < 15*time.Minute || got > 15*time.Minute+time.Second {
			t.Fatalf("NotBefore %v after the creation, want the 15-minute notice", got)
		}
		doc, err = az.Document(ctx)
		if err != nil || len(doc.Notices) != 1 || doc.Notices[0].Status != "Scheduled" || !doc.Notices[0].NotBefore.Equal(ev.NotBefore) {
			t.Fatalf("document after the Reboot: %+v, %v; want it Scheduled at %v", doc, err, ev.NotBefore)
		}

		time.Sleep(time.Until(ev.NotBefore))
		synctest.Wait()
		got := srv.Event(ev.ID)
		if got.Status != forewarn.Started || !got.StartedAt.Equal(ev.NotBefore) || srv.Approved(ev.ID) {
			t.Fatalf("at NotBefore: %s, started at %v, approved %v; want Started at %v by itself", got.Status, got.StartedAt, srv.Approved(ev.ID), ev.NotBefore)
		}
		doc, err = az.Document(ctx)
		if err != nil || len(doc.Notices) != 1 || doc.Notices[0].Status != "Started" || !doc.Notices[0].NotBefore.IsZero() {
			t.Fatalf("document at NotBefore: %+v, %v; want it Started with no NotBefore", doc, err)
		}
		// It lasts the 5 minutes of a Reboot; Wait sleeps through them.
		done := srv.Wait(ev.ID, forewarn.Completed)
		if d := done.EndedAt.Sub(done.StartedAt); d != forewarn.Reboot.DefaultLasts() {
			t.Errorf("the Reboot lasted %v, want %v", d, forewarn.Reboot.DefaultLasts())
		}

		// A Compute Engine long-poll over the in-memory transport: a live
		// migration flips maintenance-event its Lead (60 s) before NotBefore.
		g := srv.GCEClient("gce_0")
		const key = "instance/maintenance-event"
		v, etag, err := g.Get(ctx, key)
		if err != nil || v != "NONE" {
			t.Fatalf("%s: %q, %v", key, v, err)
		}
		mig := srv.Create(specOf(forewarn.MigrateOnHostMaintenance, "gce_0", 10*time.Minute))
		v, etag, err = g.WaitForChange(ctx, key, etag)
		if err != nil || v != "MIGRATE_ON_HOST_MAINTENANCE" {
			t.Fatalf("long-poll: %q, %v", v, err)
		}
		if lead := time.Until(mig.NotBefore); lead != time.Minute {
			t.Errorf("the long-poll returned %v before NotBefore, want 1m", lead)
		}

		// The EC2 client, with its token, over the same transport.
		ids, err := srv.AWSClient("ec2_0").InstanceID(ctx)
		if err != nil || ids != "i-0123456789abcdef0" {
			t.Fatalf("EC2 instance ID: %q, %v", ids, err)
		}

		// A long-poll still held when the test ends, as a watcher's would
		// be: its context ends, then the server shuts down.
		go g.WaitForChange(ctx, key, etag)
		synctest.Wait()
	})
	if real := time.Since(began); real > 10*time.Second {
		t.Errorf("the bubble took %v of real time for 26 minutes of its own", real)
	}
}

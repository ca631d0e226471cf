package gce_test

import (
	"regexp"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
)

// TestInstanceIDsArePositive: ids once overflowed int64 for some names
// (the VM "vm" among them).
func TestInstanceIDsArePositive(t *testing.T) {
	_, h := setup(t)
	id19 := regexp.MustCompile(`^[1-9][0-9]{18}$`)
	for _, remote := range []string{vmAddr, gpuAddr, soleAddr, spotAddr, preAddr, quietAddr} {
		for _, key := range []string{"instance/id", "project/numeric-project-id"} {
			if v := value(t, h, remote, key); !id19.MatchString(v) {
				t.Errorf("%s of %s = %q, want a positive 19-digit number", key, remote, v)
			}
		}
	}
}

// TestStartedEarlyStaysScheduled: an announced maintenance started ahead
// of its warning is still SCHEDULED maintenance, now ONGOING.
func TestStartedEarlyStaysScheduled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		ev := create(t, e, engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"vm"}, Notice: 2 * time.Hour, Lasts: 10 * time.Minute})
		step(30 * time.Minute)
		if err := e.Start(t.Context(), ev.ID); err != nil {
			t.Fatal(err)
		}
		got := value(t, h, vmAddr, "instance/upcoming-maintenance")
		want := "can_reschedule false\nlatest_window_start_time 2000-01-01T00:30:00+00:00\nmaintenance_status ONGOING\ntype SCHEDULED\n" +
			"window_end_time 2000-01-01T00:40:00+00:00\nwindow_start_time 2000-01-01T00:30:00+00:00"
		if got != want {
			t.Fatalf("upcoming-maintenance:\n%s\nwant:\n%s", got, want)
		}
		// The recursive text form lists it too.
		all := value(t, h, vmAddr, "instance/?recursive=true&alt=text")
		if !strings.Contains(all, "upcoming-maintenance/maintenance_status ONGOING\n") {
			t.Fatalf("recursive text misses upcoming-maintenance:\n%s", all)
		}
	})
}

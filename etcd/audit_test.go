package etcd_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/etcd"
	"github.com/forewarn/forewarn/internal/etcdtest"
)

// TestSharedAudit: two replicas' audit logs, each shared through its own
// store on one prefix, read back as one log in time order from either;
// the lines stay out of the state that Load reads.
func TestSharedAudit(t *testing.T) {
	t.Parallel()
	eps := etcdtest.Start(t).Endpoints()
	a := open(t, eps, "/fleet/")
	b := open(t, eps, "/fleet/")
	logs := make([]*admin.AuditLog, 2)
	for i, s := range []*etcd.Store{a, b} {
		l, err := admin.OpenAuditLog(filepath.Join(t.TempDir(), "audit.log"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		l.Shared = s
		logs[i] = l
	}
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	id, err := logs[0].Intend(admin.AuditEntry{At: t0, Who: "127.0.0.1", Action: "POST /v1/events"})
	if err != nil {
		t.Fatal(err)
	}
	if err := logs[1].Append(admin.AuditEntry{At: t0.Add(time.Second), Who: "token@10.0.0.9", Action: "POST /v1/events/X/start", Status: 200}); err != nil {
		t.Fatal(err)
	}
	if err := logs[0].Outcome(id, admin.AuditEntry{At: t0.Add(2 * time.Second), Who: "127.0.0.1", Action: "POST /v1/events", Status: 201}); err != nil {
		t.Fatal(err)
	}
	want := []admin.AuditEntry{
		{At: t0, Who: "127.0.0.1", Action: "POST /v1/events", Status: 201},
		{At: t0.Add(time.Second), Who: "token@10.0.0.9", Action: "POST /v1/events/X/start", Status: 200},
	}
	for i, l := range logs {
		got, err := l.Entries()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("replica %d: %d entries %+v, want %+v", i, len(got), got, want)
		}
		for j := range want {
			if !got[j].At.Equal(want[j].At) || got[j].Who != want[j].Who || got[j].Action != want[j].Action || got[j].Status != want[j].Status {
				t.Errorf("replica %d entry %d: %+v, want %+v", i, j, got[j], want[j])
			}
		}
	}
	st, err := a.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Revision != 0 || len(st.Events) != 0 || len(st.VMs) != 0 {
		t.Fatalf("the audit lines reached the state: revision %d, %d events, %d VM records", st.Revision, len(st.Events), len(st.VMs))
	}
}

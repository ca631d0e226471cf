package azure_test

import (
	"bytes"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/azure"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
	"github.com/forewarn/forewarn/storetest"
)

// lockedBuffer is a bytes.Buffer a logger and the test share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestApproveOnAFullStore: an approval the store cannot record for want
// of disk space (ENOSPC or EDQUOT, wrapped or as bbolt's text, or a
// store's own ENOSPACE) gets 503 with Retry-After and a JSON error that
// says to retry, as IMDS answers when it cannot serve a request; nothing
// is approved, the server log says why, reads go on, and the approval
// succeeds once there is space. Any other store failure is still 500.
func TestApproveOnAFullStore(t *testing.T) {
	store := storetest.NewFailing(mem.New())
	e, err := engine.New(t.Context(), engine.Config{Store: store, Fleet: testFleet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	var logs lockedBuffer
	h := azure.NewServer(e, slog.New(slog.NewTextHandler(&logs, nil)))
	ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_0"}, Source: forewarn.User})
	if err != nil {
		t.Fatal(err)
	}
	before := do(h, req{target: path + "2020-07-01"}).Body.String()
	approve := func() req {
		return req{method: "POST", target: path + "2020-07-01", body: `{"StartRequests":[{"EventId":"` + ev.ID + `"}]}`}
	}
	const full = `{"error": "Service unavailable. The approval could not be recorded, so it was not made; retry after some time"}`

	for _, c := range []struct {
		name string
		err  error
	}{
		{"ENOSPC", &fs.PathError{Op: "write", Path: "/data/forewarn.db", Err: syscall.ENOSPC}},
		{"EDQUOT", &fs.PathError{Op: "write", Path: "/data/forewarn.db", Err: syscall.EDQUOT}},
		{"bbolt's resize error", fmt.Errorf("file resize error: %s", syscall.ENOSPC)},
		{"ENOSPACE", forewarn.Errorf(forewarn.ENOSPACE, "etcd: database space exceeded")},
	} {
		store.Fail(c.err)
		w := do(h, approve())
		check(t, w, 503, full)
		if ra := w.Header().Get("Retry-After"); ra != "1" {
			t.Errorf("%s: Retry-After %q, want 1", c.name, ra)
		}
		if got, _ := e.Event(ev.ID); got.Status != forewarn.Scheduled || len(got.Approvals) != 0 {
			t.Fatalf("%s: the event is %s with approvals %v after a refused approval", c.name, got.Status, got.Approvals)
		}
		if got := do(h, req{target: path + "2020-07-01"}).Body.String(); got != before {
			t.Fatalf("%s: the document changed:\n%s\nwant\n%s", c.name, got, before)
		}
	}
	if !strings.Contains(logs.String(), "no space left on device") || !strings.Contains(logs.String(), "disk quota exceeded") {
		t.Errorf("the server log does not say what failed:\n%s", logs.String())
	}

	// A failure that is not the disk's is the server's own: 500.
	store.Fail(fmt.Errorf("disk I/O error"))
	check(t, do(h, approve()), 500, `{"error": "Internal server error"}`)

	store.Fail(nil)
	check(t, do(h, approve()), 200, "")
	if got, _ := e.Event(ev.ID); got.Status != forewarn.Started {
		t.Fatalf("after space is freed: %s, want Started", got.Status)
	}
}

package gce_test

import (
	"bytes"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"

	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/gce"
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

// TestReadsOnAFullStore: the only write a GCE VM causes is the record
// that it read maintenance-event (for the next maintenance's 60 s
// warning), made in the background. With the store's disk full, reads
// and long-polls are still answered 200 as before, the failed record is
// in the server log, and nothing waits on it.
func TestReadsOnAFullStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := storetest.NewFailing(mem.New())
		var logs lockedBuffer
		e, err := engine.New(t.Context(), engine.Config{Store: store, Fleet: testFleet(), AllowShortNotice: true,
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		s := gce.NewServer(e, nil)
		s.SetRateLimit(gce.DefaultRateLimit)
		store.Fail(&fs.PathError{Op: "write", Path: "/data/forewarn.db", Err: syscall.ENOSPC})

		etag := text(t, get(s, vmAddr, "instance/maintenance-event"), "NONE")
		synctest.Wait()
		text(t, get(s, vmAddr, "instance/maintenance-event?wait_for_change=true&last_etag=0"), "NONE")
		if w := get(s, vmAddr, "?recursive=true"); w.Code != 200 {
			t.Fatalf("recursive read on a full store: %d %s", w.Code, w.Body)
		}
		p := startPoll(s, req{target: v1 + "instance/maintenance-event?wait_for_change=true&timeout_sec=5&last_etag=" + etag})
		synctest.Wait()
		p.hanging(t, "long-poll on a full store")
		<-p.done
		text(t, p.w, "NONE")
		if l := logs.String(); !strings.Contains(l, "save last request time") || !strings.Contains(l, "no space left on device") {
			t.Errorf("the failed record is not in the log:\n%s", l)
		}

		store.Fail(nil)
		text(t, get(s, vmAddr, "instance/maintenance-event"), "NONE")
	})
}

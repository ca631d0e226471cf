package aws_test

import (
	"bytes"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"

	"github.com/forewarn/forewarn/aws"
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

// TestRequestsOnAFullStore: an EC2 VM writes nothing it waits for. A
// token is signed, not stored, and the record of the VM's last request is
// written in the background. With the store's disk full, the token PUT
// and the GETs that use its token are answered 200 as before, and the
// failed record is in the server log.
func TestRequestsOnAFullStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := storetest.NewFailing(mem.New())
		var logs lockedBuffer
		e, err := engine.New(t.Context(), engine.Config{Store: store, Fleet: testFleet(), AllowShortNotice: true,
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		h := aws.NewServer(e, nil)
		h.SetRateLimit(aws.DefaultRateLimit)
		store.Fail(&fs.PathError{Op: "write", Path: "/data/forewarn.db", Err: syscall.ENOSPC})

		tok := token(t, h, ec2Addr, "21600")
		w := do(h, req{path: "/latest/meta-data/instance-id", remote: ec2Addr, header: map[string]string{aws.TokenHeader: tok}})
		want(t, "GET with a token on a full store", w, http.StatusOK, "i-0000000000000000a")
		w = do(h, req{path: "/latest/meta-data/instance-id", remote: optAddr})
		want(t, "IMDSv1 GET on a full store", w, http.StatusOK, "i-0000000000000000b")
		synctest.Wait()
		if l := logs.String(); !strings.Contains(l, "save last request time") || !strings.Contains(l, "no space left on device") {
			t.Errorf("the failed record is not in the log:\n%s", l)
		}
		store.Fail(nil)
		w = do(h, req{path: "/latest/meta-data/instance-id", remote: ec2Addr, header: map[string]string{aws.TokenHeader: tok}})
		want(t, "GET once there is space", w, http.StatusOK, "i-0000000000000000a")
	})
}

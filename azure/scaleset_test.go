package azure_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/azure"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

// scaleSetServer serves the Azure API on a real loopback socket for a
// scale set of two VMs, ss_0 at 127.0.0.2 and ss_1 at 127.0.0.3, in the
// placement groups given, with a Terminate timeout of PT5M. The engine
// starts as a real server does: no VM has called yet.
func scaleSetServer(t *testing.T, pg0, pg1 string) (*engine.Engine, string) {
	t.Helper()
	ip := netip.MustParseAddr
	fleet := &forewarn.Fleet{
		VMs: []*forewarn.VM{
			{Name: "ss_0", IP: ip("127.0.0.2"), Provider: forewarn.Azure, ScaleSet: "ss", InstanceID: "0", PlacementGroup: pg0},
			{Name: "ss_1", IP: ip("127.0.0.3"), Provider: forewarn.Azure, ScaleSet: "ss", InstanceID: "1", PlacementGroup: pg1},
		},
		ScaleSets: []*forewarn.ScaleSet{{Name: "ss", TerminateTimeout: 5 * time.Minute}},
	}
	e, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: fleet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	srv := httptest.NewServer(azure.NewServer(e, nil))
	t.Cleanup(srv.Close)
	return e, srv.URL
}

// call sends a GET (body "") or a POST of body to the Scheduled Events
// endpoint at 2020-07-01 from the VM at ip, and returns the status and
// the body of the answer.
func call(t *testing.T, url, ip, body string) (int, string) {
	t.Helper()
	method, r := http.MethodGet, io.Reader(nil)
	if body != "" {
		method, r = http.MethodPost, strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url+path+"2020-07-01", r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Metadata", "true")
	resp, err := vmHTTP(t, ip).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// wantAnswer fails unless an answer is exactly status and body.
func wantAnswer(t *testing.T, what string, status int, body string, wantStatus int, wantBody string) {
	t.Helper()
	if status != wantStatus || body != wantBody {
		t.Fatalf("%s:\n got %d %s\nwant %d %s", what, status, body, wantStatus, wantBody)
	}
}

// rendered is one event as the 2020-07-01 document shows it; nb is its
// NotBefore, or the zero time once it started.
func rendered(id, status, typ, resource string, nb time.Time, source string, duration int) string {
	notBefore := ""
	if !nb.IsZero() {
		notBefore = nb.UTC().Format(http.TimeFormat)
	}
	return fmt.Sprintf(`{"EventId":"%s","EventStatus":"%s","EventType":"%s","ResourceType":"VirtualMachine","Resources":["%s"],"NotBefore":"%s","Description":"","EventSource":"%s","DurationInSeconds":%d}`,
		id, status, typ, resource, notBefore, source, duration)
}

// TestScaleSetEnabledAcrossPlacementGroups is issue 22's point 9 on the
// wire: ss_0 of placement group pg0 polls, ss_1 of pg1 never has. A
// Platform Freeze on ss_1 keeps its full notice, because Scheduled Events
// are "enabled for your scale set" (seed 004), and ss_0 still does not
// see it.
func TestScaleSetEnabledAcrossPlacementGroups(t *testing.T) {
	e, url := scaleSetServer(t, "pg0", "pg1")
	code, body := call(t, url, "127.0.0.2", "")
	wantAnswer(t, "ss_0's first call", code, body, 200, `{"DocumentIncarnation":1,"Events":[]}`)

	five := 5
	ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Freeze, VMs: []string{"ss_1"}, Duration: &five})
	if err != nil {
		t.Fatal(err)
	}
	code, body = call(t, url, "127.0.0.3", "")
	wantAnswer(t, "ss_1 (pg1, silent until now) reads its Freeze", code, body, 200,
		`{"DocumentIncarnation":2,"Events":[`+rendered(ev.ID, "Scheduled", "Freeze", "ss_1", ev.NotBefore, "Platform", 5)+`]}`)
	if notice := ev.NotBefore.Sub(ev.Created); notice < 15*time.Minute || notice > 15*time.Minute+time.Second {
		t.Fatalf("Freeze on ss_1: %v of notice, want 15m (rounded up to the second)", notice)
	}
	code, body = call(t, url, "127.0.0.2", "")
	wantAnswer(t, "ss_0 (pg0) does not see pg1's event", code, body, 200, `{"DocumentIncarnation":1,"Events":[]}`)
}

// TestApprovedTerminateWaitsForLaterPending is issue 22's point 10 on the
// wire. Seed 004: with a pending delete on VM_1 and an approved one on
// VM_2, "VM_2 isn't deleted until the terminate event for VM_1 is
// approved, or its timeout has elapsed", with no order between them. Here
// VM_2 is ss_1, whose delete comes first (NotBefore +5m); VM_1 is ss_0,
// deleted after the timeout was raised to PT10M. ss_1's approval answers
// 200 and its document does not change; ss_0's approval starts both.
func TestApprovedTerminateWaitsForLaterPending(t *testing.T) {
	e, url := scaleSetServer(t, "", "")
	for _, ip := range []string{"127.0.0.2", "127.0.0.3"} {
		code, body := call(t, url, ip, "")
		wantAnswer(t, "first call", code, body, 200, `{"DocumentIncarnation":1,"Events":[]}`)
	}
	t1, err := e.Delete(t.Context(), "ss_1")
	if err != nil {
		t.Fatal(err)
	}
	ten := 10 * time.Minute
	if _, err := e.SetScaleSet(t.Context(), "ss", engine.ScaleSetChange{TerminateTimeout: &ten}); err != nil {
		t.Fatal(err)
	}
	t0, err := e.Delete(t.Context(), "ss_0")
	if err != nil {
		t.Fatal(err)
	}
	if !t0.NotBefore.After(t1.NotBefore) {
		t.Fatalf("ss_0's NotBefore %v is not after ss_1's %v", t0.NotBefore, t1.NotBefore)
	}
	scheduled := `{"DocumentIncarnation":3,"Events":[` +
		rendered(t1.ID, "Scheduled", "Terminate", "ss_1", t1.NotBefore, "User", -1) + `,` +
		rendered(t0.ID, "Scheduled", "Terminate", "ss_0", t0.NotBefore, "User", -1) + `]}`
	code, body := call(t, url, "127.0.0.3", "")
	wantAnswer(t, "ss_1 reads both deletes", code, body, 200, scheduled)

	code, body = call(t, url, "127.0.0.3", `{"StartRequests":[{"EventId":"`+t1.ID+`"}]}`)
	wantAnswer(t, "ss_1 approves its own delete", code, body, 200, "")
	code, body = call(t, url, "127.0.0.3", "")
	wantAnswer(t, "ss_1's document after its approval, ss_0's delete pending", code, body, 200, scheduled)

	code, body = call(t, url, "127.0.0.2", `{"StartRequests":[{"EventId":"`+t0.ID+`"}]}`)
	wantAnswer(t, "ss_0 approves its own delete", code, body, 200, "")
	started := `{"DocumentIncarnation":4,"Events":[` +
		rendered(t1.ID, "Started", "Terminate", "ss_1", time.Time{}, "User", -1) + `,` +
		rendered(t0.ID, "Started", "Terminate", "ss_0", time.Time{}, "User", -1) + `]}`
	for _, ip := range []string{"127.0.0.2", "127.0.0.3"} {
		code, body = call(t, url, ip, "")
		wantAnswer(t, "after both approvals, from "+ip, code, body, 200, started)
	}
}

package admin_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
	"github.com/forewarn/forewarn/storetest"
)

// auditedServer returns an operator API on a mem-store engine of
// testFleet (or fleet), auditing to the file at path.
func auditedServer(t *testing.T, path string, fleet *forewarn.Fleet) (*engine.Engine, *admin.Server, *admin.AuditLog) {
	t.Helper()
	if fleet == nil {
		fleet = testFleet()
	}
	eng, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: fleet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	for _, vm := range fleet.VMs {
		eng.NoteRequest(vm.Name)
	}
	audit, err := admin.OpenAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { audit.Close() })
	s := admin.NewServer(eng, nil)
	s.Audit = audit
	return eng, s, audit
}

// serve sends one request to h in process and returns the answer.
func serve(h http.Handler, method, target, remote, token string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	r.Host = "localhost" // not httptest's example.com, which the server refuses
	r.RemoteAddr = remote
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// fileLines returns the lines of the file at path.
func fileLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// refusalInterval is how often refused requests are summarized
// (docs/operator-api.md).
const refusalInterval = time.Minute

// auditEntry is an entry of GET /v1/audit.
type auditEntry struct {
	At            time.Time
	Who, Action   string
	Status, Count int
}

// auditEntries returns the entries of GET /v1/audit, as the operator
// with the token sees them.
func auditEntries(t *testing.T, s *admin.Server) []auditEntry {
	t.Helper()
	w := serve(s, "GET", "/v1/audit", "10.0.0.1:1", s.Token)
	var resp struct{ Entries []auditEntry }
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || w.Code != 200 {
		t.Fatalf("GET /v1/audit: %d %s", w.Code, w.Body)
	}
	return resp.Entries
}

// TestRefusalFloodIsBounded: thousands of refused writes grow the audit
// log by a line per address at once and a summary line per address at
// the end of the interval, whose count says how many there were; more
// addresses than are counted one by one share one summary. An operator's
// write in the middle of the flood is recorded in full.
func TestRefusalFloodIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "audit.log")
		eng, s, _ := auditedServer(t, path, nil)
		s.Token = "0123456789abcdef"

		const flood = 3000
		for i := range flood {
			if w := serve(s, "POST", fmt.Sprintf("/v1/vms/web_0/restart?n=%d", i), "10.9.9.9:4000", "wrong"); w.Code != 401 {
				t.Fatalf("refused write %d: %d", i, w.Code)
			}
			if i == flood/2 {
				if w := serve(s, "POST", "/v1/vms/db_0/restart", "10.0.0.1:5000", s.Token); w.Code != 201 {
					t.Fatalf("operator write during the flood: %d %s", w.Code, w.Body)
				}
			}
		}
		serve(s, "POST", "/v1/events", "10.9.9.8:4000", "")
		serve(s, "PATCH", "/v1/scalesets/ss", "10.9.9.8:4000", "")
		// The file has the first refusal of each address and the operator's
		// write (its intent and its outcome), nothing more.
		if got := fileLines(t, path); len(got) != 4 {
			t.Fatalf("%d refused writes made %d lines, want 4; the first:\n%s", flood+2, len(got), strings.Join(got[:min(len(got), 5)], "\n"))
		}

		time.Sleep(refusalInterval)
		synctest.Wait()
		entries := auditEntries(t, s)
		want := []auditEntry{
			{Who: "10.9.9.9", Action: "POST /v1/vms/web_0/restart", Status: 401},
			{Who: "token@10.0.0.1", Action: "POST /v1/vms/db_0/restart", Status: 201},
			{Who: "10.9.9.8", Action: "POST /v1/events", Status: 401},
			{Who: "10.9.9.8", Action: "PATCH /v1/scalesets/ss", Status: 401, Count: 1},
			{Who: "10.9.9.9", Action: "POST /v1/vms/web_0/restart", Status: 401, Count: flood - 1},
		}
		if len(entries) != len(want) {
			t.Fatalf("entries:\n%+v\nwant\n%+v", entries, want)
		}
		for i, w := range want {
			e := entries[i]
			if e.Who != w.Who || e.Action != w.Action || e.Status != w.Status || e.Count != w.Count {
				t.Errorf("entry %d: %+v, want %+v", i, e, w)
			}
		}
		if at := entries[4].At; !at.Equal(entries[0].At.Add(refusalInterval)) {
			t.Errorf("summary at %v, want the interval's end %v", at, entries[0].At.Add(refusalInterval))
		}
		if n := len(eng.Events()); n != 1 {
			t.Fatalf("%d events, want the operator's one", n)
		}

		// A flood from many addresses: the first 32 of an interval are
		// counted one by one, the rest together as "*".
		before := len(fileLines(t, path))
		for i := range 5000 {
			serve(s, "POST", "/v1/events", fmt.Sprintf("10.8.%d.%d:1", i/250, i%250), "")
		}
		time.Sleep(refusalInterval)
		synctest.Wait()
		lines := fileLines(t, path)
		if grown := len(lines) - before; grown != 33 {
			t.Fatalf("5000 refusals from 5000 addresses grew the log by %d lines, want 32 + one summary", grown)
		}
		var last auditEntry
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Who != "*" || last.Count != 5000-32 {
			t.Fatalf("last line %s (%v), want a summary of %d refusals by *", lines[len(lines)-1], err, 5000-32)
		}
		if fi, _ := os.Stat(path); fi.Size() > 16<<10 {
			t.Fatalf("the log is %d bytes after 8000 refusals", fi.Size())
		}
	})
}

// answerWatcher is an http.ResponseWriter that notes, when the first
// byte of the answer (its status) is handed to it, what the audit log
// holds then.
type answerWatcher struct {
	*httptest.ResponseRecorder
	audit *admin.AuditLog
	seen  []admin.AuditEntry
}

func (w *answerWatcher) WriteHeader(code int) {
	if w.seen == nil {
		w.seen, _ = w.audit.Entries()
	}
	w.ResponseRecorder.WriteHeader(code)
}

func (w *answerWatcher) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.ResponseRecorder.Write(b)
}

// TestAuditEntryBeforeAnswer: by the time a write's answer starts, its
// entry, with the status being answered, is in the audit log.
func TestAuditEntryBeforeAnswer(t *testing.T) {
	_, s, audit := auditedServer(t, filepath.Join(t.TempDir(), "audit.log"), nil)
	// The longest description an event takes: the largest answer of a
	// create for one VM.
	many := `{"type":"Freeze","vms":["db_0"],"description":"` + strings.Repeat("x", engine.MaxDescription) + `"}`
	for i, c := range []struct {
		method, path, body string
		status             int
	}{
		{"POST", "/v1/vms/db_0/restart", "", 201},
		{"POST", "/v1/events", many, 201}, // a 1.4 KB answer
		{"POST", "/v1/events/NOPE/approve", "", 404},
		{"POST", "/v1/events", "{", 400},
		{"DELETE", "/v1/events", "", 405},
	} {
		r := httptest.NewRequest(c.method, "http://localhost"+c.path, strings.NewReader(c.body))
		if c.body != "" {
			r.Header.Set("Content-Type", "application/json")
		}
		w := &answerWatcher{ResponseRecorder: httptest.NewRecorder(), audit: audit}
		s.ServeHTTP(w, r)
		if w.Code != c.status {
			t.Fatalf("%s %s: %d %s", c.method, c.path, w.Code, w.Body)
		}
		if len(w.seen) != i+1 {
			t.Fatalf("%s %s: when the answer started the log had %d entries, want %d", c.method, c.path, len(w.seen), i+1)
		}
		if e := w.seen[i]; e.Action != c.method+" "+c.path || e.Status != c.status {
			t.Fatalf("%s %s: when the answer started the last entry was %+v, want status %d", c.method, c.path, e, c.status)
		}
	}
}

// TestAuditFullDiskRefusesWrite: when the audit log cannot record a
// write (here /dev/full answers every write with ENOSPC), the write is
// refused with 507 and a message saying so, and nothing changes. Reads go on.
func TestAuditFullDiskRefusesWrite(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full:", err)
	}
	eng, s, _ := auditedServer(t, "/dev/full", nil)
	srv := httptest.NewServer(s)
	defer srv.Close()
	c := admin.NewClient(srv.URL, srv.Client())
	_, err := c.Restart(t.Context(), "db_0", 0)
	var fe *forewarn.Error
	if !errorsAs(err, &fe) || fe.Code != "insufficient_storage" || !strings.Contains(fe.Message, "no space left on device") || !strings.Contains(fe.Message, "audit log") {
		t.Fatalf("restart with the audit log's disk full: %v", err)
	}
	resp, err := http.Post(srv.URL+"/v1/events", "application/json", strings.NewReader(`{"type":"Reboot","vms":["db_0"]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInsufficientStorage || !bytes.Contains(body, []byte(`"code":"insufficient_storage"`)) {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	if n := len(eng.Events()); n != 0 {
		t.Fatalf("%d events were made though their audit entries could not be written", n)
	}
	if evs, err := c.Events(t.Context()); err != nil || len(evs) != 0 {
		t.Fatalf("reads: %v %v", evs, err)
	}
}

// errorsAs is errors.As for *forewarn.Error.
func errorsAs(err error, fe **forewarn.Error) bool {
	e, ok := err.(*forewarn.Error)
	if ok {
		*fe = e
	}
	return ok
}

// TestAuditTornLine: a crash that tears the last line hides nothing
// after it: a reopened log mends the tear, and entries appended later
// are all read.
func TestAuditTornLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	_, s, audit := auditedServer(t, path, nil)
	serve(s, "POST", "/v1/vms/db_0/restart", "10.0.0.1:1", "")
	serve(s, "POST", "/v1/vms/web_0/restart", "10.0.0.1:1", "")
	audit.Close()
	// Tear the last line (web_0's outcome) in the middle.
	b, _ := os.ReadFile(path)
	cut := bytes.LastIndexByte(b[:len(b)-1], '\n') + 20
	if err := os.Truncate(path, int64(cut)); err != nil {
		t.Fatal(err)
	}

	again, err := admin.OpenAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	s.Audit = again
	serve(s, "POST", "/v1/vms/web_1/restart", "10.0.0.1:1", "")
	serve(s, "POST", "/v1/events/NOPE/cancel", "10.0.0.1:1", "")
	entries, err := again.Entries()
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		action string
		status int
	}{
		{"POST /v1/vms/db_0/restart", 201},
		{"POST /v1/vms/web_0/restart", 0}, // its outcome was torn away
		{"POST /v1/vms/web_1/restart", 201},
		{"POST /v1/events/NOPE/cancel", 404},
	}
	if len(entries) != len(want) {
		t.Fatalf("entries after a torn line: %+v", entries)
	}
	for i, w := range want {
		if entries[i].Action != w.action || entries[i].Status != w.status {
			t.Errorf("entry %d: %+v, want %s %d", i, entries[i], w.action, w.status)
		}
	}
}

// TestStoreFullDisk: a write the store cannot make for want of disk
// space is answered 507 with "no space left on device" in the JSON
// error, over a real socket; reads keep working, and writes work again
// once there is space.
func TestStoreFullDisk(t *testing.T) {
	// The ENOSPC of a real write, where there is a device that gives one.
	enospc := error(&fs.PathError{Op: "write", Path: "/data/forewarn.db", Err: syscall.ENOSPC})
	if f, err := os.OpenFile("/dev/full", os.O_WRONLY, 0); err == nil {
		_, enospc = f.Write([]byte("page"))
		f.Close()
	}
	store := storetest.NewFailing(mem.New())
	h := newHarness(t, store)
	store.Fail(enospc)

	code, ctype, body := h.raw(t, "POST", "/v1/vms/db_0/restart", "")
	var resp struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil || code != http.StatusInsufficientStorage || ctype != "application/json" ||
		resp.Error.Code != "insufficient_storage" || !strings.Contains(resp.Error.Message, "no space left on device") {
		t.Fatalf("write on a full disk: %d %s %s", code, ctype, body)
	}
	_, err := h.client.CreateEvent(t.Context(), admin.CreateRequest{Type: "Reboot", VMs: []string{"web_0"}})
	if forewarn.ErrorCode(err) != "insufficient_storage" {
		t.Fatalf("client: %v", err)
	}
	if evs, err := h.client.Events(t.Context()); err != nil || len(evs) != 0 {
		t.Fatalf("reads on a full disk: %v %v", evs, err)
	}
	if !strings.Contains(h.logs.String(), "no space left on device") {
		t.Errorf("the server log does not say what failed:\n%s", h.logs)
	}
	// bbolt reports a failure to grow its file with the errno's text
	// only; that is a full disk too.
	store.Fail(fmt.Errorf("commit: file resize error: %s", syscall.ENOSPC))
	if code, _, body := h.raw(t, "POST", "/v1/vms/db_0/restart", ""); code != http.StatusInsufficientStorage {
		t.Fatalf("bbolt's resize error: %d %s", code, body)
	}
	store.Fail(nil)
	if _, err := h.client.Restart(t.Context(), "db_0", 0); err != nil {
		t.Fatalf("after space is freed: %v", err)
	}
}

// TestVMAddressIsNotAnOperator: over real sockets, requests from the
// address of a fleet VM are refused (403, saying why) unless they carry
// the token; VMs without an address, which answer every caller, make no
// caller a VM.
func TestVMAddressIsNotAnOperator(t *testing.T) {
	fleet := &forewarn.Fleet{VMs: []*forewarn.VM{
		{Name: "web_7", IP: netip.MustParseAddr("127.0.0.7"), Provider: forewarn.Azure},
		{Name: "gce_8", IP: netip.MustParseAddr("127.0.0.8"), Provider: forewarn.GCE},
		{Name: "anyone", Provider: forewarn.Azure},
		{Name: "anyone-gce", Provider: forewarn.GCE},
	}}
	path := filepath.Join(t.TempDir(), "audit.log")
	eng, s, audit := auditedServer(t, path, fleet)
	srv := httptest.NewServer(s)
	defer srv.Close()
	from := func(ip, method, p, token string) (int, string) {
		t.Helper()
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		c := &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
		req, _ := http.NewRequest(method, srv.URL+p, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	if code, body := from("127.0.0.1", "GET", "/v1/events", ""); code != 200 {
		t.Fatalf("from an address of no VM: %d %s", code, body)
	}
	const refused = `{"error":{"code":"forbidden","message":"requests from 127.0.0.7 are refused: it is the address of VM \"web_7\", and VMs may not use the operator API; call it from another address, or give the server --admin-token-file and send the token"}}` + "\n"
	if code, body := from("127.0.0.7", "GET", "/v1/events", ""); code != 403 || body != refused {
		t.Fatalf("read from VM web_7's address: %d %s", code, body)
	}
	if code, body := from("127.0.0.8", "POST", "/v1/vms/web_7/restart", ""); code != 403 || !strings.Contains(body, `VM \"gce_8\"`) {
		t.Fatalf("write from VM gce_8's address: %d %s", code, body)
	}
	if code, _ := from("127.0.0.7", "GET", "/healthz", ""); code != 200 {
		t.Fatalf("healthz from a VM: %d", code)
	}
	if n := len(eng.Events()); n != 0 {
		t.Fatalf("a VM's refused write made %d events", n)
	}

	// With a token, the token decides, for VMs' addresses too.
	s.Token = "0123456789abcdef"
	if code, _ := from("127.0.0.7", "GET", "/v1/events", ""); code != 401 {
		t.Fatalf("VM without the token: %d", code)
	}
	if code, body := from("127.0.0.7", "POST", "/v1/vms/web_7/restart", s.Token); code != 201 {
		t.Fatalf("VM address with the token: %d %s", code, body)
	}
	audit.Close()
	again, _ := admin.OpenAuditLog(path)
	defer again.Close()
	entries, _ := again.Entries()
	if len(entries) != 2 || entries[0].Who != "127.0.0.8" || entries[0].Status != 403 || entries[1].Who != "token@127.0.0.7" || entries[1].Status != 201 {
		t.Fatalf("audit: %+v", entries)
	}
}

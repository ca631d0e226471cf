package azure_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/azure"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/history"
	"github.com/forewarn/forewarn/mem"
)

const (
	web0 = "127.0.0.2:40000"
	web1 = "127.0.0.3:40000"
	db0  = "127.0.0.4:40000"
	gce0 = "127.0.0.9:40000"
	path = "/metadata/scheduledevents?api-version="
)

func testFleet() *forewarn.Fleet {
	ip := func(s string) netip.Addr { return netip.MustParseAddrPort(s).Addr() }
	return &forewarn.Fleet{VMs: []*forewarn.VM{
		{Name: "web_0", IP: ip(web0), Provider: forewarn.Azure, ScaleSet: "web", InstanceID: "0", Spot: true},
		{Name: "web_1", IP: ip(web1), Provider: forewarn.Azure, ScaleSet: "web", InstanceID: "1"},
		{Name: "db_0", IP: ip(db0), Provider: forewarn.Azure, AvailabilitySet: "db", UpdateDomain: 1},
		{Name: "gce_0", IP: ip(gce0), Provider: forewarn.GCE},
	}}
}

func setup(t testing.TB) (*engine.Engine, http.Handler) {
	t.Helper()
	e, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: testFleet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	for _, vm := range e.Fleet().VMs {
		e.NoteRequest(vm.Name) // enabled: Platform events keep their notice
	}
	return e, azure.NewServer(e, nil)
}

type req struct {
	method, target, remote, body string
	header                       map[string]string
}

func do(h http.Handler, r req) *httptest.ResponseRecorder {
	if r.method == "" {
		r.method = http.MethodGet
	}
	if r.remote == "" {
		r.remote = web0
	}
	hr := httptest.NewRequest(r.method, r.target, strings.NewReader(r.body))
	hr.RemoteAddr = r.remote
	if r.header == nil {
		r.header = map[string]string{"Metadata": "true"}
	}
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, hr)
	return w
}

func check(t *testing.T, w *httptest.ResponseRecorder, status int, body string) {
	t.Helper()
	if w.Code != status || w.Body.String() != body {
		t.Fatalf("got %d %s\nwant %d %s", w.Code, w.Body.String(), status, body)
	}
	if ct := w.Header().Get("Content-Type"); body != "" && ct != "application/json; charset=utf-8" {
		t.Fatalf("Content-Type %q", ct)
	}
}

// TestVersionFieldSets renders one event of each type and checks the
// exact document every api-version returns.
func TestVersionFieldSets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		five := 5
		mk := func(s engine.Spec) string {
			ev, err := e.Create(t.Context(), s)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second) // distinct creation times keep the order fixed
			return ev.ID
		}
		freeze := mk(engine.Spec{Type: forewarn.Freeze, VMs: []string{"web_0"}, Duration: &five, Description: `Host "A" update`})
		preempt := mk(engine.Spec{Type: forewarn.Preempt, VMs: []string{"web_0"}, Source: forewarn.Platform})
		terminate := mk(engine.Spec{Type: forewarn.Terminate, VMs: []string{"web_1"}, Source: forewarn.User})
		reboot := mk(engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_0", "web_1"}, Source: forewarn.User, Started: true})

		ev := func(id, typ, status, res, nb, rest string) string {
			return fmt.Sprintf(`{"EventId":"%s","EventStatus":"%s","EventType":"%s","ResourceType":"VirtualMachine","Resources":[%s],"NotBefore":"%s"%s}`, id, status, typ, res, nb, rest)
		}
		fz := func(v int, res string) string {
			rest := []string{"", "", "", "", `,"Description":"Host \"A\" update"`, `,"Description":"Host \"A\" update","EventSource":"Platform"`, `,"Description":"Host \"A\" update","EventSource":"Platform","DurationInSeconds":5`}[v]
			return ev(freeze, "Freeze", "Scheduled", res, "Sat, 01 Jan 2000 00:15:00 GMT", rest)
		}
		pe := func(v int) string {
			rest := []string{"", "", "", "", `,"Description":""`, `,"Description":"","EventSource":"Platform"`, `,"Description":"","EventSource":"Platform","DurationInSeconds":-1`}[v]
			return ev(preempt, "Preempt", "Scheduled", `"web_0"`, "Sat, 01 Jan 2000 00:00:31 GMT", rest)
		}
		te := func(v int) string {
			rest := []string{"", "", "", "", `,"Description":""`, `,"Description":"","EventSource":"User"`, `,"Description":"","EventSource":"User","DurationInSeconds":-1`}[v]
			return ev(terminate, "Terminate", "Scheduled", `"web_1"`, "Sat, 01 Jan 2000 00:05:02 GMT", rest)
		}
		rb := func(v int, res string) string {
			rest := []string{"", "", "", "", `,"Description":""`, `,"Description":"","EventSource":"User"`, `,"Description":"","EventSource":"User","DurationInSeconds":-1`}[v]
			return ev(reboot, "Reboot", "Started", res, "", rest)
		}
		want := []string{
			`{"DocumentIncarnation":3,"Events":[` + fz(0, `"_web_0"`) + `,` + rb(0, `"_web_0","_web_1"`) + `]}`,
			`{"DocumentIncarnation":3,"Events":[` + fz(1, `"web_0"`) + `,` + rb(1, `"web_0","web_1"`) + `]}`,
			`{"DocumentIncarnation":3,"Events":[` + fz(2, `"web_0"`) + `,` + pe(2) + `,` + rb(2, `"web_0","web_1"`) + `]}`,
			`{"DocumentIncarnation":3,"Events":[` + fz(3, `"web_0"`) + `,` + pe(3) + `,` + te(3) + `,` + rb(3, `"web_0","web_1"`) + `]}`,
			`{"DocumentIncarnation":3,"Events":[` + fz(4, `"web_0"`) + `,` + pe(4) + `,` + te(4) + `,` + rb(4, `"web_0","web_1"`) + `]}`,
			`{"DocumentIncarnation":3,"Events":[` + fz(5, `"web_0"`) + `,` + pe(5) + `,` + te(5) + `,` + rb(5, `"web_0","web_1"`) + `]}`,
			`{"DocumentIncarnation":3,"Events":[` + fz(6, `"web_0"`) + `,` + pe(6) + `,` + te(6) + `,` + rb(6, `"web_0","web_1"`) + `]}`,
		}
		// web_0 saw four changes: incarnation 1 + 4 = 5; web_1 saw all four too.
		for i, v := range azure.Versions() {
			w := do(h, req{target: path + v})
			exp := strings.Replace(want[i], `"DocumentIncarnation":3`, `"DocumentIncarnation":5`, 1)
			check(t, w, 200, exp)
		}
		// db_0 is in another availability set: it sees nothing.
		check(t, do(h, req{target: path + "2020-07-01", remote: db0}), 200, `{"DocumentIncarnation":1,"Events":[]}`)
	})
}

func TestIncarnationWalk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		get := func() string { return do(h, req{target: path + "2019-08-01"}).Body.String() }
		if got := get(); got != `{"DocumentIncarnation":1,"Events":[]}` {
			t.Fatalf("empty: %s", got)
		}
		ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_0"}, Source: forewarn.User})
		if err != nil {
			t.Fatal(err)
		}
		sched := `{"DocumentIncarnation":2,"Events":[{"EventId":"` + ev.ID + `","EventStatus":"Scheduled","EventType":"Reboot","ResourceType":"VirtualMachine","Resources":["web_0"],"NotBefore":"Sat, 01 Jan 2000 00:15:00 GMT","Description":"","EventSource":"User"}]}`
		if got := get(); got != sched {
			t.Fatalf("scheduled:\n got %s\nwant %s", got, sched)
		}
		w := do(h, req{method: "POST", target: path + "2019-08-01", body: `{"StartRequests":[{"EventId":"` + ev.ID + `"}]}`})
		check(t, w, 200, "")
		started := `{"DocumentIncarnation":3,"Events":[{"EventId":"` + ev.ID + `","EventStatus":"Started","EventType":"Reboot","ResourceType":"VirtualMachine","Resources":["web_0"],"NotBefore":"","Description":"","EventSource":"User"}]}`
		if got := get(); got != started {
			t.Fatalf("started:\n got %s\nwant %s", got, started)
		}
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		if got := get(); got != `{"DocumentIncarnation":4,"Events":[]}` {
			t.Fatalf("completed: %s", got)
		}
	})
}

func TestErrors(t *testing.T) {
	_, h := setup(t)
	const badVersion = `{"error": "Bad request. api-version is invalid or was not specified in the request. For more information refer to aka.ms/azureimds", "newest-versions": ["2020-07-01", "2019-08-01", "2019-04-01"]}`
	cases := []struct {
		name   string
		r      req
		status int
		body   string
	}{
		{"no Metadata header", req{target: path + "2020-07-01", header: map[string]string{}}, 400,
			`{"error": "Bad request. Required metadata header not specified"}`},
		{"Metadata false", req{target: path + "2020-07-01", header: map[string]string{"Metadata": "false"}}, 400,
			`{"error": "Bad request. Required metadata header not specified"}`},
		{"X-Forwarded-For", req{target: path + "2020-07-01", header: map[string]string{"Metadata": "true", "X-Forwarded-For": "10.0.0.1"}}, 400,
			`{"error": "Bad request. Requests with an X-Forwarded-For header are not allowed"}`},
		{"unknown version", req{target: path + "2018-01-01"}, 400, badVersion},
		{"{latest}", req{target: path + "{latest}"}, 400, badVersion},
		{"no version", req{target: "/metadata/scheduledevents"}, 400, badVersion},
		{"duplicate parameter", req{target: path + "2020-07-01&api-version=2020-07-01"}, 400,
			`{"error": "Bad request. Query parameter api-version is specified more than once"}`},
		{"unknown path", req{target: "/metadata/nothing?api-version=2020-07-01"}, 404, `{"error": "Not found"}`},
		{"root", req{target: "/"}, 404, `{"error": "Not found"}`},
		{"non-canonical path", req{target: "/metadata//scheduledevents?api-version=2020-07-01"}, 404, `{"error": "Not found"}`},
		{"dot segment", req{target: "/metadata/instance/../scheduledevents?api-version=2020-07-01"}, 404, `{"error": "Not found"}`},
		{"PUT", req{method: "PUT", target: path + "2020-07-01"}, 405, `{"error": "Method not allowed"}`},
		{"DELETE", req{method: "DELETE", target: path + "2020-07-01"}, 405, `{"error": "Method not allowed"}`},
		{"unknown source", req{target: path + "2020-07-01", remote: "127.0.0.77:1234"}, 403,
			`{"error": "Forbidden. No VM of the fleet has the source address 127.0.0.77"}`},
		{"GCE VM on the Azure path", req{target: path + "2020-07-01", remote: gce0}, 404, `{"error": "Not found"}`},
		{"malformed body", req{method: "POST", target: path + "2020-07-01", body: `{"StartRequests":[`}, 400,
			`{"error": "Bad request. The request body is not a valid StartRequests document"}`},
		{"wrong body type", req{method: "POST", target: path + "2020-07-01", body: `{"StartRequests":"x"}`}, 400,
			`{"error": "Bad request. The request body is not a valid StartRequests document"}`},
		{"missing EventId", req{method: "POST", target: path + "2020-07-01", body: `{"StartRequests":[{}]}`}, 400,
			`{"error": "Bad request. The request body is not a valid StartRequests document"}`},
		{"unknown EventId", req{method: "POST", target: path + "2020-07-01", body: `{"StartRequests":[{"EventId":"00000000-0000-0000-0000-000000000000"}]}`}, 400,
			`{"error": "Bad request. EventId 00000000-0000-0000-0000-000000000000 is not a scheduled event of this VM"}`},
		{"body too large", req{method: "POST", target: path + "2020-07-01", body: `{"x":"` + strings.Repeat("a", 70000) + `"}`}, 413,
			`{"error": "Request body too large"}`},
		{"leaf without format=text", req{target: "/metadata/instance/compute/name?api-version=2021-02-01"}, 400,
			`{"error": "Bad request. A leaf node requires format=text"}`},
		{"bad format", req{target: "/metadata/instance?api-version=2021-02-01&format=xml"}, 400,
			`{"error": "Bad request. The format query parameter must be json or text"}`},
		{"instance unknown version", req{target: "/metadata/instance?api-version=2016-01-01"}, 400,
			`{"error": "Bad request. api-version is invalid or was not specified in the request. For more information refer to aka.ms/azureimds", "newest-versions": ["2023-07-01", "2022-09-01", "2022-08-01"]}`},
		{"instance unknown key", req{target: "/metadata/instance/compute/nothing?api-version=2021-02-01&format=text"}, 404, `{"error": "Not found"}`},
		{"versions without header", req{target: "/metadata/versions", header: map[string]string{}}, 400,
			`{"error": "Bad request. Required metadata header not specified"}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := do(h, c.r)
			check(t, w, c.status, c.body)
			// A refused caller's connection closes after the answer.
			if closes := w.Header().Get("Connection") == "close"; closes != (c.status == 403) {
				t.Errorf("status %d with Connection %q", c.status, w.Header().Get("Connection"))
			}
			if c.status == 405 && w.Header().Get("Allow") != "GET, POST" {
				t.Fatalf("Allow %q", w.Header().Get("Allow"))
			}
		})
	}
}

func TestConditionalGet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		w := do(h, req{target: path + "2020-07-01"})
		etag := w.Header().Get("ETag")
		if w.Code != 200 || !strings.HasPrefix(etag, `"1-`) || len(etag) != 12 {
			t.Fatalf("first GET: %d ETag %q", w.Code, etag)
		}
		hdr := map[string]string{"Metadata": "true", "If-None-Match": etag}
		w = do(h, req{target: path + "2020-07-01", header: hdr})
		if w.Code != http.StatusNotModified || w.Body.Len() != 0 || w.Header().Get("ETag") != etag {
			t.Fatalf("conditional GET: %d %q ETag %q", w.Code, w.Body.String(), w.Header().Get("ETag"))
		}
		// Weak and list forms match too.
		hdr["If-None-Match"] = `"x", W/` + etag
		if w = do(h, req{target: path + "2020-07-01", header: hdr}); w.Code != http.StatusNotModified {
			t.Fatalf("list form: %d", w.Code)
		}
		if _, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Freeze, VMs: []string{"web_1"}}); err != nil {
			t.Fatal(err)
		}
		hdr["If-None-Match"] = etag
		w = do(h, req{target: path + "2020-07-01", header: hdr})
		if w.Code != 200 || !strings.HasPrefix(w.Header().Get("ETag"), `"2-`) || !strings.HasPrefix(w.Body.String(), `{"DocumentIncarnation":2,`) {
			t.Fatalf("after a change: %d ETag %q %s", w.Code, w.Header().Get("ETag"), w.Body.String())
		}
		// Another version renders other bytes, so it has its own ETag.
		if other := do(h, req{target: path + "2017-08-01"}).Header().Get("ETag"); other == w.Header().Get("ETag") {
			t.Fatalf("2017-08-01 shares ETag %s with 2020-07-01", other)
		}
	})
}

func TestApprovalForms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		var ids []string
		for range 4 {
			ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_0"}})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, ev.ID)
		}
		post := func(body, ct, remote string) *httptest.ResponseRecorder {
			hdr := map[string]string{"Metadata": "True"} // a capital T, as some clients send
			if ct != "" {
				hdr["Content-Type"] = ct
			}
			return do(h, req{method: "POST", target: path + "2017-03-01", body: body, remote: remote, header: hdr})
		}
		// text/plain, the 2017-era DocumentIncarnation as a string, and an extra field.
		check(t, post(`{"DocumentIncarnation":"5","StartRequests":[{"EventId":"`+ids[0]+`"}],"Extra":true}`, "text/plain", web0), 200, "")
		// Several ids, pretty-printed, lower-case field names, from the other VM of the set.
		check(t, post("{\n  \"startrequests\": [\n    {\"eventid\": \""+ids[1]+"\"},\n    {\"EventId\": \""+strings.ToLower(ids[2])+"\"}\n  ]\n}", "application/x-www-form-urlencoded", web1), 200, "")
		// A repeated approval and an empty body are fine.
		check(t, post(`{"StartRequests":[{"EventId":"`+ids[0]+`"}]}`, "", web0), 200, "")
		check(t, post("", "", web0), 200, "")
		// A VM that cannot see the event may not approve it.
		check(t, post(`{"StartRequests":[{"EventId":"`+ids[3]+`"}]}`, "", db0), 400,
			`{"error": "Bad request. EventId `+ids[3]+` is not a scheduled event of this VM"}`)
		want := map[string]string{ids[0]: "web_0", ids[1]: "web_1", ids[2]: "web_1"}
		for _, id := range ids {
			ev, _ := e.Event(id)
			switch by, ok := want[id]; {
			case ok && (ev.Status != forewarn.Started || len(ev.Approvals) != 1 || ev.Approvals[0].By != by):
				t.Errorf("%s: %s approvals %v, want Started approved by %s", id, ev.Status, ev.Approvals, by)
			case !ok && (ev.Status != forewarn.Scheduled || len(ev.Approvals) != 0):
				t.Errorf("%s: %s approvals %v, want untouched", id, ev.Status, ev.Approvals)
			}
		}
	})
}

func TestCompanionCalls(t *testing.T) {
	_, h := setup(t)
	w := do(h, req{target: "/metadata/instance/compute/name?api-version=2021-02-01&format=text", remote: web1})
	if w.Code != 200 || w.Body.String() != "web_1" || w.Header().Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Fatalf("compute/name: %d %q %q", w.Code, w.Body.String(), w.Header().Get("Content-Type"))
	}
	w = do(h, req{target: "/metadata/instance/compute/platformUpdateDomain?api-version=2021-02-01&format=text", remote: db0})
	if w.Body.String() != "1" {
		t.Fatalf("platformUpdateDomain: %q", w.Body.String())
	}
	w = do(h, req{target: "/metadata/instance/network/interface/0/ipv4/ipAddress/0/privateIpAddress?api-version=2021-02-01&format=text", remote: web1})
	if w.Body.String() != "127.0.0.3" {
		t.Fatalf("privateIpAddress: %d %q", w.Code, w.Body.String())
	}
	w = do(h, req{target: "/metadata/instance?api-version=2021-02-01"})
	body := w.Body.String()
	if w.Code != 200 || !strings.Contains(body, `"name":"web_0"`) || !strings.Contains(body, `"platformUpdateDomain":"0"`) {
		t.Fatalf("instance: %d %s", w.Code, body)
	}
	w = do(h, req{target: "/metadata/instance/compute?api-version=2021-02-01&format=text"})
	if !strings.HasPrefix(w.Body.String(), "azEnvironment\nlocation\nname\n") {
		t.Fatalf("compute listing: %q", w.Body.String())
	}
	w = do(h, req{target: "/metadata/versions"})
	if w.Code != 200 || !strings.HasPrefix(w.Body.String(), `{"apiVersions":["2017-03-01",`) || !strings.HasSuffix(w.Body.String(), `"2023-07-01"]}`) {
		t.Fatalf("versions: %d %s", w.Code, w.Body.String())
	}
}

// TestAbsoluteFormOverSocket sends a proxy-style absolute-form request
// over a real connection from the VM's own source address.
func TestAbsoluteFormOverSocket(t *testing.T) {
	_, h := setup(t)
	srv := httptest.NewServer(h)
	defer srv.Close()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 5 * time.Second}
	conn, err := d.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET http://169.254.169.254/metadata/scheduledevents?api-version=2020-07-01 HTTP/1.1\r\nHost: 169.254.169.254\r\nMetadata: true\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != `{"DocumentIncarnation":1,"Events":[]}` {
		t.Fatalf("absolute-form: %d %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Fatalf("Content-Type %q", ct)
	}
}

// TestFirstCallDelay: the call that enables a VM's scheduled events is
// held for FirstCallDelay; later calls are not.
func TestFirstCallDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: testFleet()})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		s := azure.NewServer(e, nil)
		s.FirstCallDelay = 2 * time.Minute
		start := time.Now()
		check(t, do(s, req{target: path + "2020-07-01"}), 200, `{"DocumentIncarnation":1,"Events":[]}`)
		if d := time.Since(start); d != 2*time.Minute {
			t.Fatalf("first call took %v, want 2m", d)
		}
		start = time.Now()
		do(s, req{target: path + "2020-07-01"})
		if d := time.Since(start); d != 0 {
			t.Fatalf("second call took %v, want 0", d)
		}
		// 24 hours of silence disable the VM: the next call is held again.
		time.Sleep(24 * time.Hour)
		start = time.Now()
		do(s, req{target: path + "2020-07-01"})
		if d := time.Since(start); d != 2*time.Minute {
			t.Fatalf("re-enabling call took %v, want 2m", d)
		}
	})
}

// TestShutdownReleasesFirstCall: a call held by FirstCallDelay is answered
// at once when the server shuts down.
func TestShutdownReleasesFirstCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: testFleet()})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		s := azure.NewServer(e, nil)
		s.FirstCallDelay = 2 * time.Minute
		done := make(chan *httptest.ResponseRecorder)
		go func() { done <- do(s, req{target: path + "2020-07-01"}) }()
		time.Sleep(time.Second)
		start := time.Now()
		s.Shutdown()
		w := <-done
		if w.Code != 200 || time.Since(start) != 0 {
			t.Fatalf("after Shutdown: %d in %v", w.Code, time.Since(start))
		}
	})
}

// TestApprovalNamingOneEventManyTimes: a body naming one event a
// thousand times approves it once and is counted once (an approval of
// another VM's Terminate, for the report), not a thousand times.
func TestApprovalNamingOneEventManyTimes(t *testing.T) {
	e, h := setup(t)
	s := h.(*azure.Server)
	hist := history.New([]string{"web_0", "web_1", "db_0", "gce_0"}, history.DefaultSize)
	s.SetHistory(hist)
	ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Terminate, VMs: []string{"web_1"}, Source: forewarn.User})
	if err != nil {
		t.Fatal(err)
	}
	reqs := strings.Repeat(`{"EventId":"`+ev.ID+`"},`, 1000)
	body := `{"StartRequests":[` + reqs[:len(reqs)-1] + `]}`
	if w := do(h, req{method: "POST", target: path + "2020-07-01", body: body}); w.Code != 200 {
		t.Fatalf("approval: %d %s", w.Code, w.Body)
	}
	st, _ := hist.Stats("web_0")
	if st.ForeignApprovals != 1 {
		t.Errorf("ForeignApprovals %d, want 1", st.ForeignApprovals)
	}
	got, _ := e.Event(ev.ID)
	if got.Status != forewarn.Started || len(got.Approvals) != 1 || got.Approvals[0].By != "web_0" {
		t.Errorf("event %s, approvals %+v; want Started, approved once by web_0", got.Status, got.Approvals)
	}
}

// TestCountedVersionDue: a request at an api-version that counts in a
// finding of its VM makes the VM's record due for saving soon; one at a
// version that counts for other VMs only does not: a plain VM polling at
// 2017-08-01, which hides only Terminate and Preempt, writes nothing more.
func TestCountedVersionDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		hist := history.New([]string{"web_0", "web_1", "db_0", "gce_0"}, history.DefaultSize)
		hist.Follow(e)
		h.(*azure.Server).SetHistory(hist)
		synctest.Wait()
		for range 3 {
			if w := do(h, req{target: path + "2017-08-01", remote: db0}); w.Code != 200 {
				t.Fatalf("db_0 at 2017-08-01: %d", w.Code)
			}
		}
		if e.Unsaved() {
			t.Error("db_0, a plain VM, at 2017-08-01: its record due, want not")
		}
		if w := do(h, req{target: path + "2017-08-01", remote: web1}); w.Code != 200 {
			t.Fatalf("web_1 at 2017-08-01: %d", w.Code)
		}
		if !e.Unsaved() {
			t.Error("web_1, a scale set VM, at 2017-08-01 (which hides Terminate): its record not due")
		}
	})
}

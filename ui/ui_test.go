package ui_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/history"
	"github.com/forewarn/forewarn/mem"
	"github.com/forewarn/forewarn/ui"
)

// hostile are VM names, as a tenant might choose them, that break out
// of HTML text and attributes unless escaped.
const (
	hostileText = `<script>alert(1)</script>`
	hostileAttr = `x" onmouseover="alert(2)`
)

func testFleet() *forewarn.Fleet {
	return &forewarn.Fleet{VMs: []*forewarn.VM{
		{Name: "web_0", Provider: forewarn.Azure, AvailabilitySet: "web", UpdateDomain: 0},
		{Name: "web_1", Provider: forewarn.Azure, AvailabilitySet: "web", UpdateDomain: 1},
		{Name: "web_2", Provider: forewarn.Azure, AvailabilitySet: "web", UpdateDomain: 1},
		{Name: hostileText, Provider: forewarn.Azure, AvailabilitySet: "<b>set</b>"},
		{Name: hostileAttr, Provider: forewarn.Azure},
		{Name: "gce_0", Provider: forewarn.GCE, Zone: "europe-west1-b"},
		{Name: "ss_0", Provider: forewarn.Azure, ScaleSet: "ss", InstanceID: "0", Spot: true},
	}}
}

type harness struct {
	eng *engine.Engine
	h   *ui.Handler
	srv *httptest.Server
}

// newHarness serves a ui.Handler over loopback for a real engine on a
// memory store; every VM has called its API, so events keep their
// notice.
func newHarness(t *testing.T, cfg ui.Config) *harness {
	t.Helper()
	eng, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: testFleet(), AllowShortNotice: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	for _, vm := range eng.Fleet().VMs {
		eng.NoteRequest(vm.Name)
	}
	return serve(t, eng, cfg)
}

// serve serves a ui.Handler for eng over loopback.
func serve(t *testing.T, eng *engine.Engine, cfg ui.Config) *harness {
	t.Helper()
	cfg.Engine = eng
	h := ui.New(cfg)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(h.Shutdown) // before srv.Close, which waits for the streams
	return &harness{eng: eng, h: h, srv: srv}
}

func (hs *harness) get(t *testing.T, path string) (int, http.Header, string) {
	t.Helper()
	resp, err := hs.srv.Client().Get(hs.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

func (hs *harness) create(t *testing.T, s engine.Spec) *forewarn.Event {
	t.Helper()
	ev, err := hs.eng.Create(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func TestPageAndStatic(t *testing.T) {
	hs := newHarness(t, ui.Config{TokenRequired: func() bool { return true }})
	code, hdr, body := hs.get(t, "/ui/")
	if code != 200 || hdr.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET /ui/: %d %s", code, hdr.Get("Content-Type"))
	}
	if csp := hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "default-src 'none'") {
		t.Fatalf("CSP %q", csp)
	}
	for _, want := range []string{`<body data-token-required="true">`, `<option value="MIGRATE_ON_HOST_MAINTENANCE">`, `maxlength="128"`} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	m := regexp.MustCompile(`<script src="/ui/static/app.js\?v=([0-9a-f]{16})" defer></script>`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("page has no versioned script:\n%s", body)
	}
	code, hdr, js := hs.get(t, "/ui/static/app.js")
	if code != 200 || hdr.Get("Content-Type") != "text/javascript; charset=utf-8" || !strings.Contains(js, `fetch("/ui/stream?"`) || hdr.Get("ETag") == "" {
		t.Fatalf("app.js: %d %s %q", code, hdr.Get("Content-Type"), hdr.Get("ETag"))
	}
	code, hdr, _ = hs.get(t, "/ui/static/style.css")
	if code != 200 || hdr.Get("Content-Type") != "text/css; charset=utf-8" {
		t.Fatalf("style.css: %d %s", code, hdr.Get("Content-Type"))
	}
	code, _, body = hs.get(t, "/ui/static/secret.txt")
	if code != 404 || body != `{"error":{"code":"not_found","message":"no file \"secret.txt\""}}`+"\n" {
		t.Fatalf("unknown static file: %d %s", code, body)
	}
	resp, err := hs.srv.Client().Get(hs.srv.URL + "/ui")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Request.URL.Path != "/ui/" {
		t.Fatalf("/ui led to %s, want /ui/", resp.Request.URL.Path)
	}
}

func TestPublic(t *testing.T) {
	for p, want := range map[string]bool{
		"/ui": true, "/ui/": true, "/ui/static/app.js": true, "/ui/static/style.css": true,
		"/ui/static/": false, "/ui/static/x.js": false, "/ui/stream": false, "/ui/fragment/fleet": false,
		"/ui/vm/web_0": false, "/ui/static/../stream": false, "/uix": false, "/v1/events": false,
	} {
		if got := ui.Public(p); got != want {
			t.Errorf("Public(%q) = %v, want %v", p, got, want)
		}
	}
}

// TestFragmentsEscape renders every fragment with tenant-chosen names
// and texts in it: none appears unescaped, each appears escaped.
func TestFragmentsEscape(t *testing.T) {
	hs := newHarness(t, ui.Config{
		Documents: func(vm string) map[string]map[string]string {
			return map[string]map[string]string{"azure": {"/metadata/scheduledevents": `{"Description":"</pre><script>alert(3)</script>"}`}}
		},
		History: func(vm string) []history.Entry {
			return []history.Entry{{Time: time.Unix(0, 0), API: "azure", Method: "GET", Path: "/metadata/<i>x</i>", Status: 200}}
		},
	})
	// The two VMs are in two scope groups: an event each.
	evs, err := hs.eng.CreateAll(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{hostileText, hostileAttr}, Description: `</p><img src=x onerror=alert(4)>`})
	if err != nil || len(evs) != 2 {
		t.Fatalf("%d events, %v", len(evs), err)
	}
	ev := evs[0]
	if _, err := hs.eng.StartWave(t.Context(), engine.WaveSpec{Scope: "<b>set</b>", Type: forewarn.Freeze}); err != nil {
		t.Fatal(err)
	}

	escapedText := `&lt;script&gt;alert(1)&lt;/script&gt;`
	escapedAttr := `x&#34; onmouseover=&#34;alert(2)`
	for _, c := range []struct {
		path string
		want []string
	}{
		{"/ui/fragment/fleet", []string{
			`<button type="button" class="link" data-show="` + escapedText + `">` + escapedText + `</button>`,
			`<tr class="vm state-running" data-vm="` + escapedAttr + `">`,
			`<span class="name">&lt;b&gt;set&lt;/b&gt;</span>`,
		}},
		{"/ui/fragment/events", []string{
			`<article class="event status-Scheduled" data-event-id="` + ev.ID + `" data-status="Scheduled">`,
			`<article class="event status-Scheduled" data-event-id="` + evs[1].ID + `" data-status="Scheduled">`,
			`data-show="` + escapedText + `">` + escapedText + `</button>`,
			`data-show="` + escapedAttr + `">` + escapedAttr + `</button>`,
			`<p class="description">&lt;/p&gt;&lt;img src=x onerror=alert(4)&gt;</p>`,
		}},
		{"/ui/fragment/waves", []string{
			`Freeze of <span class="name">&lt;b&gt;set&lt;/b&gt;</span>, running`,
			`<span class="waiting">Not approved yet: ` + escapedText + `</span>`,
		}},
		{"/ui/vm/" + url.PathEscape(hostileText), []string{
			`<h3>` + escapedText + `</h3>`,
			`<pre class="document">{&#34;Description&#34;:&#34;&lt;/pre&gt;&lt;script&gt;alert(3)&lt;/script&gt;&#34;}</pre>`,
			`<td><code>/metadata/&lt;i&gt;x&lt;/i&gt;</code></td>`,
		}},
	} {
		code, hdr, body := hs.get(t, c.path)
		if code != 200 || hdr.Get("Content-Type") != "text/html; charset=utf-8" || hdr.Get("Cache-Control") != "no-store" {
			t.Fatalf("GET %s: %d %s %s: %s", c.path, code, hdr.Get("Content-Type"), hdr.Get("Cache-Control"), body)
		}
		for _, w := range c.want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s lacks\n%s\nin\n%s", c.path, w, body)
			}
		}
		for _, bad := range []string{"<script>", `" onmouseover="`, "<img src", "<b>set", "<i>x"} {
			if strings.Contains(body, bad) {
				t.Errorf("GET %s has %q unescaped", c.path, bad)
			}
		}
	}
}

func TestFragmentErrors(t *testing.T) {
	hs := newHarness(t, ui.Config{})
	for _, c := range []struct {
		path string
		code int
		body string
	}{
		{"/ui/fragment/fleet?q=" + strings.Repeat("a", ui.MaxQuery+1), 400, `{"error":{"code":"invalid","message":"filter is 129 bytes long; at most 128"}}`},
		{"/ui/fragment/secrets", 404, `{"error":{"code":"not_found","message":"no fragment \"secrets\" (want fleet, events, waves or sessions)"}}`},
		{"/ui/vm/nope", 404, `{"error":{"code":"not_found","message":"no VM named \"nope\""}}`},
		{"/ui/stream?vm=nope", 404, `{"error":{"code":"not_found","message":"no VM named \"nope\""}}`},
		{"/ui/stream?q=" + strings.Repeat("b", 200), 400, `{"error":{"code":"invalid","message":"filter is 200 bytes long; at most 128"}}`},
	} {
		code, _, body := hs.get(t, c.path)
		if code != c.code || body != c.body+"\n" {
			t.Errorf("GET %s: %d %s; want %d %s", c.path[:min(len(c.path), 40)], code, body, c.code, c.body)
		}
	}
	// A filter of exactly MaxQuery bytes is served.
	if code, _, body := hs.get(t, "/ui/fragment/fleet?q="+strings.Repeat("a", ui.MaxQuery)); code != 200 || !strings.Contains(body, "No VM matches.") {
		t.Fatalf("a filter of %d bytes: %d %s", ui.MaxQuery, code, body)
	}
}

// event is one server-sent event.
type event struct{ name, data string }

// stream opens /ui/stream?query and returns the response and its events.
func (hs *harness) stream(t *testing.T, query string) (*http.Response, <-chan event) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, "GET", hs.srv.URL+"/ui/stream?"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hs.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	ch := make(chan event, 64)
	if resp.StatusCode != 200 {
		close(ch)
		return resp, ch
	}
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var ev event
		var data []string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if len(data) > 0 {
					ev.data = strings.Join(data, "\n")
					ch <- ev
				}
				ev, data = event{}, nil
			case strings.HasPrefix(line, ":"):
				ch <- event{name: "comment", data: line}
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				data = append(data, strings.TrimPrefix(line, "data: "))
			default:
				ch <- event{name: "malformed", data: line}
			}
		}
	}()
	return resp, ch
}

// next returns the next event named name (any event but a comment when
// name is "") for which cond, if any, holds, failing after timeout.
func next(t *testing.T, ch <-chan event, name string, timeout time.Duration, cond func(string) bool) event {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("stream ended waiting for %s", name)
			}
			if ev.name == "malformed" {
				t.Fatalf("malformed line %q", ev.data)
			}
			if (ev.name == name || name == "" && ev.name != "comment") && (cond == nil || cond(ev.data)) {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %s event in %s", name, timeout)
		}
	}
}

// await reads events until, for each name in conds, one such event
// satisfied its condition, failing after timeout.
func await(t *testing.T, ch <-chan event, timeout time.Duration, conds map[string]func(string) bool) {
	t.Helper()
	deadline := time.After(timeout)
	for len(conds) > 0 {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("stream ended waiting for %d events", len(conds))
			}
			if cond := conds[ev.name]; cond != nil && cond(ev.data) {
				delete(conds, ev.name)
			}
		case <-deadline:
			for name := range conds {
				t.Errorf("no matching %s event in %s", name, timeout)
			}
			t.FailNow()
		}
	}
}

// TestStream checks the snapshot sent on connect, then a push after a
// change, and that an approval that changes no document is pushed too.
func TestStream(t *testing.T) {
	hs := newHarness(t, ui.Config{})
	resp, ch := hs.stream(t, "q=web&vm=web_1")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("stream: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Cache-Control"))
	}
	// The snapshot: every fragment, in order, the fleet filtered.
	var names []string
	for range 5 {
		ev := next(t, ch, "", 5*time.Second, nil)
		names = append(names, ev.name)
		if ev.name == "fleet" && (!strings.Contains(ev.data, `data-matched="3"`) || strings.Contains(ev.data, "gce_0")) {
			t.Fatalf("fleet filtered by web:\n%s", ev.data)
		}
		if ev.name == "vm" && !strings.HasPrefix(ev.data, `<div class="vm" data-vm="web_1">`) {
			t.Fatalf("vm fragment:\n%s", ev.data)
		}
	}
	if strings.Join(names, ",") != "fleet,events,waves,sessions,vm" {
		t.Fatalf("snapshot sent %v, want fleet, events, waves, sessions, vm", names)
	}

	start := time.Now()
	ev := hs.create(t, engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_1"}, Source: forewarn.User})
	await(t, ch, 2*time.Second, map[string]func(string) bool{
		"events": func(d string) bool { return strings.Contains(d, `data-event-id="`+ev.ID+`" data-status="Scheduled"`) },
		"fleet": func(d string) bool {
			return strings.Contains(d, `<span class="count with-events">3 with events</span>`)
		},
		"vm": func(d string) bool { return strings.Contains(d, "<code>"+ev.ID+"</code>") },
	})
	t.Logf("pushed %s after the create", time.Since(start))

	// Started, then approved by a VM: the approval changes no document,
	// and reaches the page through the engine's revision channel.
	if err := hs.eng.Start(t.Context(), ev.ID); err != nil {
		t.Fatal(err)
	}
	next(t, ch, "events", 2*time.Second, func(d string) bool { return strings.Contains(d, `data-event-id="`+ev.ID+`" data-status="Started"`) })
	if err := hs.eng.Approve(t.Context(), "web_0", []string{ev.ID}); err != nil {
		t.Fatal(err)
	}
	next(t, ch, "events", 2*time.Second, func(d string) bool {
		return strings.Contains(d, `<span class="approval" data-by="web_0">✓ approved by web_0 at <time>`)
	})
}

// TestStreamCoalesces checks that a burst of changes is pushed in a few
// pushes, not one per change.
func TestStreamCoalesces(t *testing.T) {
	hs := newHarness(t, ui.Config{})
	_, ch := hs.stream(t, "")
	next(t, ch, "waves", 5*time.Second, nil)
	var last *forewarn.Event
	start := time.Now()
	for range 40 {
		last = hs.create(t, engine.Spec{Type: forewarn.Freeze, VMs: []string{"web_0"}, Source: forewarn.User})
	}
	took := time.Since(start)
	pushes := 0
	next(t, ch, "events", 3*time.Second, func(d string) bool {
		pushes++
		return strings.Contains(d, `data-event-id="`+last.ID+`"`)
	})
	// At most one push per 150 ms, one at each end of the burst, and
	// one for the subscription's first wake-up.
	if limit := int(took/(150*time.Millisecond)) + 3; pushes > limit {
		t.Fatalf("40 creates in %s were pushed %d times, want at most %d", took, pushes, limit)
	}
	t.Logf("40 creates in %s: %d pushes", took, pushes)
}

// TestStreamCap checks that streams beyond MaxStreams are refused with
// 503 until one closes, and that Shutdown ends the open ones.
func TestStreamCap(t *testing.T) {
	hs := newHarness(t, ui.Config{MaxStreams: 2})
	r1, ch1 := hs.stream(t, "")
	r2, ch2 := hs.stream(t, "")
	if r1.StatusCode != 200 || r2.StatusCode != 200 {
		t.Fatalf("streams 1 and 2: %d %d", r1.StatusCode, r2.StatusCode)
	}
	next(t, ch1, "waves", 5*time.Second, nil)
	next(t, ch2, "waves", 5*time.Second, nil)
	r3, _ := hs.stream(t, "")
	b, _ := io.ReadAll(r3.Body)
	if r3.StatusCode != 503 || r3.Header.Get("Retry-After") != "5" ||
		string(b) != `{"error":{"code":"unavailable","message":"too many dashboard streams are open (at most 2); close one"}}`+"\n" {
		t.Fatalf("stream 3: %d %q %s", r3.StatusCode, r3.Header.Get("Retry-After"), b)
	}
	r1.Body.Close()
	var r4 *http.Response
	// The server sees the close when its next write fails or its
	// request context ends, which takes a moment.
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, ch := hs.stream(t, "")
		if resp.StatusCode == 200 {
			r4 = resp
			next(t, ch, "waves", 5*time.Second, nil)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a stream was still refused after one closed: %d", resp.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
	hs.h.Shutdown()
	for _, ch := range []<-chan event{ch2} {
		for range ch {
		}
	}
	if _, err := io.ReadAll(r4.Body); err != nil {
		t.Fatalf("stream 4 after Shutdown: %v", err)
	}
	code, _, body := hs.get(t, "/ui/stream")
	if code != 503 || body != `{"error":{"code":"unavailable","message":"the server is shutting down"}}`+"\n" {
		t.Fatalf("stream after Shutdown: %d %s", code, body)
	}
}

// TestStreamHead checks that a HEAD of the stream answers its headers
// and holds no stream slot.
func TestStreamHead(t *testing.T) {
	hs := newHarness(t, ui.Config{MaxStreams: 1})
	for range 3 {
		resp, err := hs.srv.Client().Head(hs.srv.URL + "/ui/stream")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
			t.Fatalf("HEAD /ui/stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
	resp, ch := hs.stream(t, "")
	if resp.StatusCode != 200 {
		t.Fatalf("the one stream after three HEADs: %d", resp.StatusCode)
	}
	next(t, ch, "waves", 5*time.Second, nil)
}

// TestFleetFragmentBounded renders a fleet of 3,000 VMs: the rows are
// capped and the summary counts all.
func TestFleetFragmentBounded(t *testing.T) {
	f := &forewarn.Fleet{}
	for i := range 3000 {
		f.VMs = append(f.VMs, &forewarn.VM{Name: fmt.Sprintf("vm_%d", i), Provider: forewarn.Azure, AvailabilitySet: fmt.Sprintf("set_%d", i%4), UpdateDomain: i % 3})
	}
	eng, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: f})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	srv := httptest.NewServer(ui.New(ui.Config{Engine: eng}))
	defer srv.Close()
	get := func(q string) string {
		resp, err := http.Get(srv.URL + "/ui/fragment/fleet?q=" + q)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	body := get("")
	if n := strings.Count(body, `<tr class="vm `); n != 4*ui.MaxGroupRows {
		t.Fatalf("%d rows, want %d", n, 4*ui.MaxGroupRows)
	}
	for _, want := range []string{
		`<p class="summary">Fleet: <span class="count">3000 VMs</span>`,
		`<p class="more">… and 700 more VMs in this group</p>`,
		`<span class="ud">UD 0: 250</span> <span class="ud">UD 1: 250</span> <span class="ud">UD 2: 250</span>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("fleet lacks %s", want)
		}
	}
	body = get("vm_2999")
	if n := strings.Count(body, `<tr class="vm `); n != 1 || !strings.Contains(body, `data-vm="vm_2999"`) {
		t.Fatalf("filter vm_2999: %d rows", n)
	}
	if len(body) > 4096 {
		t.Fatalf("one matching VM rendered as %d bytes", len(body))
	}
}

// TestErrorShape checks that an error answer decodes as the operator
// API's.
func TestErrorShape(t *testing.T) {
	hs := newHarness(t, ui.Config{})
	_, _, body := hs.get(t, "/ui/vm/missing")
	var e struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code != "not_found" || e.Error.Message != `no VM named "missing"` {
		t.Fatalf("%s: %v %+v", body, err, e)
	}
}

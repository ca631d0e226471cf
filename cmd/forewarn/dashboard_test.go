package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/forewarn/forewarn"
)

// chromium returns the path of a Chromium or Chrome binary. Without one
// the test is skipped, or fails when REQUIRE_CHROMIUM=1 (as
// scripts/test sets it, having installed Debian's chromium).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const msg = "no chromium, chromium-browser or google-chrome on PATH (apt-get install chromium)"
	if os.Getenv("REQUIRE_CHROMIUM") == "1" {
		t.Fatal(msg + ", and REQUIRE_CHROMIUM=1")
	}
	t.Skip(msg)
	return ""
}

// lockedLog collects the browser driver's error lines, shown if the test
// fails.
type lockedLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *lockedLog) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) < 100 {
		l.lines = append(l.lines, strings.TrimSpace(fmt.Sprintf(format, args...)))
	}
}

// newBrowser starts a headless Chromium (its profile in dir) for the
// test and returns its context, which ends within 90 seconds, and do,
// which runs steps in it and fails the test, as what, if one fails. The
// driver's log is shown if the test fails.
func newBrowser(t *testing.T, dir string) (context.Context, func(what string, steps ...chromedp.Action[chromedp.Void])) {
	t.Helper()
	chrome := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome),
		chromedp.Flag("headless", "new"),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("no-proxy-server", true),
		chromedp.UserDataDir(filepath.Join(dir, "chromium")),
		chromedp.WindowSize(1400, 1000),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	logs := new(lockedLog)
	actx, cancelAlloc := chromedp.NewExecAllocator(t.Context(), opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithErrorf(logs.printf), chromedp.WithLogf(logs.printf))
	t.Cleanup(cancelBrowser)
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	t.Cleanup(cancel)
	t.Cleanup(func() {
		if t.Failed() {
			logs.mu.Lock()
			t.Logf("browser driver log:\n%s", strings.Join(logs.lines, "\n"))
			logs.mu.Unlock()
		}
	})
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	return ctx, do
}

// TestDashboard drives the dashboard in a real headless Chromium against
// the real binary with an operator token: the page asks for the token,
// shows an event created with the CLI within a second without a reload,
// approves it with a click, and shows the server's error next to the
// create form.
func TestDashboard(t *testing.T) {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleet, []byte(e2eFleet), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServerToken(t, filepath.Join(dir, "data"), fleet)
	base := "http://" + s.adm

	ctx, do := newBrowser(t, dir)

	// 1. The page asks for the token before it shows anything; typed in,
	// it is kept in the tab's session storage and the stream goes live.
	do("load /ui/", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(chromedp.ID("token")))
	if hidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("main").hidden`)); err != nil || !hidden {
		t.Fatalf("the fleet is shown before the token is given (hidden %v, %v)", hidden, err)
	}
	do("type the token",
		chromedp.SendKeys(chromedp.ID("token"), s.token),
		chromedp.Click(chromedp.ID("token-submit")),
		chromedp.WaitVisible(chromedp.CSS(`#fleet tr[data-vm="web_0"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#live[data-state="live"]`)))
	if kept, err := chromedp.Run(ctx, chromedp.Evaluate[string](`sessionStorage.getItem("forewarn.token")`)); err != nil || kept != s.token {
		t.Fatalf("session storage holds %q (%v), want the token", kept, err)
	}

	// 2. An event created with the CLI appears without a reload within a
	// second. The page notes when each event's element first appears.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`
		window.seen = {};
		new MutationObserver(() => {
			for (const el of document.querySelectorAll("#events [data-event-id]")) {
				if (!(el.dataset.eventId in window.seen)) window.seen[el.dataset.eventId] = Date.now();
			}
		}).observe(document.getElementById("events"), {childList: true, subtree: true});
		true`)); err != nil {
		t.Fatal(err)
	}
	// The race detector's runtime sleeps a second before a process
	// exits; without that sleep, the CLI's exit is when its answer came.
	t.Setenv("GORACE", quickExitRace())
	out := s.mustCLI(t, "event", "create", "--type", "Reboot", "--vm", "web_0", "--source", "User")
	created := time.Now()
	id := strings.TrimSpace(out)
	idJS, _ := json.Marshal(id)
	seenMs, err := chromedp.Run(ctx, chromedp.Poll[float64](`window.seen[`+string(idJS)+`]`,
		chromedp.WithPollingInterval(5*time.Millisecond), chromedp.WithPollingTimeout(time.Until(created.Add(time.Second)))))
	if err != nil {
		t.Fatalf("event %s did not appear in the page within 1 s of the CLI's exit: %v", id, err)
	}
	latency := time.UnixMilli(int64(seenMs)).Sub(created)
	if latency >= time.Second {
		t.Fatalf("event %s appeared %s after the CLI's exit, want under 1 s", id, latency)
	}

	// 3. Approved with a click: the event starts, and the page shows it
	// Started with the operator's approval.
	row := `#events article[data-event-id="` + id + `"]`
	do("approve with a click",
		chromedp.Click(chromedp.CSS(row+` button[data-action="approve"]`)),
		chromedp.WaitVisible(chromedp.CSS(row+`[data-status="Started"] .approval[data-by="operator"]`)))
	req, _ := http.NewRequestWithContext(t.Context(), "GET", base+"/v1/events/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var ev forewarn.Event
	err = json.NewDecoder(resp.Body).Decode(&ev)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /v1/events/%s: %d %v", id, resp.StatusCode, err)
	}
	if ev.Status != forewarn.Started || len(ev.Approvals) != 1 || ev.Approvals[0].By != forewarn.Operator ||
		ev.StartedAt.IsZero() || ev.Approvals[0].At.After(ev.StartedAt) {
		t.Fatalf("after the click: %s, started %v, approvals %+v; want Started with one approval by %s", ev.Status, ev.StartedAt, ev.Approvals, forewarn.Operator)
	}
	t.Logf("event appeared in the page %s after the CLI exited (negative: before), %s after the server created it",
		latency.Round(time.Millisecond), time.UnixMilli(int64(seenMs)).Sub(ev.Created).Round(time.Millisecond))

	// 4. A refused create shows the server's own message next to the form.
	body := `{"type":"Reboot","vms":["web_0","nope"]}`
	req, _ = http.NewRequestWithContext(t.Context(), "POST", base+"/v1/events", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var refusal struct {
		Error struct{ Code, Message string }
	}
	err = json.NewDecoder(resp.Body).Decode(&refusal)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 404 || refusal.Error.Message == "" {
		t.Fatalf("POST %s: %d %+v %v", body, resp.StatusCode, refusal, err)
	}
	do("submit a refused create",
		chromedp.SetValue(chromedp.ID("create-type"), "Reboot"),
		chromedp.SendKeys(chromedp.ID("create-vms"), "web_0, nope"),
		chromedp.Click(chromedp.ID("create-submit")),
		chromedp.WaitVisible(chromedp.ID("create-error")))
	shown, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("create-error")))
	if err != nil || shown != refusal.Error.Message {
		t.Fatalf("create error shows %q (%v), want the server's %q", shown, err, refusal.Error.Message)
	}

	// 5. A screenshot of the page, a PNG.
	shot, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "dashboard.png")
	if err := os.WriteFile(file, shot, 0o600); err != nil {
		t.Fatal(err)
	}
	saved, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(saved, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("screenshot starts %q, not the PNG signature", saved[:min(len(saved), 8)])
	}
	img, err := png.Decode(bytes.NewReader(saved))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 100 || b.Dy() < 100 {
		t.Fatalf("screenshot is %v", b)
	}
	if out := os.Getenv("FOREWARN_DASHBOARD_SCREENSHOT"); out != "" {
		if err := os.WriteFile(out, saved, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// sessionFleet: availability set web has web_0 on hv1 and web_1 on
// hv2; hv0 and hv1 also have a VM of no group.
const sessionFleet = `vms:
  - {name: solo, ip: 127.0.0.2, provider: azure, host: hv0}
  - {name: web_0, ip: 127.0.0.3, provider: azure, host: hv1, availabilitySet: web, updateDomain: 0}
  - {name: a1, ip: 127.0.0.4, provider: azure, host: hv1}
  - {name: web_1, ip: 127.0.0.5, provider: azure, host: hv2, availabilitySet: web, updateDomain: 1}
`

// TestDashboardSessions drives the sessions panel in a real headless
// Chromium against the real binary: a session created with the CLI
// appears with its hosts, its wait and its budgets' use, and each host
// done with the CLI moves it on, live, without a reload, to the end.
// No VM calls, so a host's events start, and the host is Ready and
// InMaintenance, as soon as it starts.
func TestDashboardSessions(t *testing.T) {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleet, []byte(sessionFleet), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, filepath.Join(dir, "data"), fleet)
	ctx, do := newBrowser(t, dir)
	t.Setenv("GORACE", quickExitRace())

	// want waits until each selector's element has exactly its text,
	// within 5 seconds, and fails with the texts it has otherwise. It is
	// called as soon as the CLI exits.
	want := func(step string, texts map[string]string) {
		t.Helper()
		b, _ := json.Marshal(texts)
		check := `Object.entries(` + string(b) + `).every(([sel, text]) => document.querySelector(sel)?.textContent === text)`
		start := time.Now()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](check, chromedp.WithPollingInterval(10*time.Millisecond), chromedp.WithPollingTimeout(5*time.Second))); err != nil {
			got, _ := chromedp.Run(ctx, chromedp.Evaluate[map[string]any](`Object.fromEntries(Object.keys(`+string(b)+`).map((sel) => [sel, document.querySelector(sel)?.textContent ?? null]))`))
			for sel, text := range texts {
				if got[sel] != text {
					t.Errorf("%s: %s shows %q, want %q", step, sel, got[sel], text)
				}
			}
			t.Fatalf("%s: the page did not show it within 5 s: %v", step, err)
		}
		t.Logf("%s: shown after %s", step, time.Since(start).Round(time.Millisecond))
	}

	do("load /ui/", chromedp.Navigate("http://"+s.adm+"/ui/"), chromedp.WaitVisible(chromedp.CSS(`#live[data-state="live"]`)))
	want("no session", map[string]string{
		"#sessions .empty":                              "No maintenance sessions.",
		"#sessions .summary":                            "3 hosts with 4 VMs: 3 in no session.",
		`#sessions .hosts tr[data-host="hv1"] td.state`: "–",
	})
	// A page that reloads loses this.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.notReloaded = true`)); err != nil {
		t.Fatal(err)
	}

	out := s.mustCLI(t, "session", "create", "--hosts", "hv0,hv1,hv2", "--max-hosts", "2", "--max-unavailable", "availabilitySet=1", "--json")
	var v struct{ ID string }
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.ID == "" {
		t.Fatalf("session create: %v\n%s", err, out)
	}
	ses := `#sessions article[data-session-id="` + v.ID + `"]`
	host := func(name string) string { return ses + ` tr[data-host="` + name + `"] td.state` }
	const (
		maxHosts = ` tr[data-budget="maxHosts"] td.use`
		set      = ` tr[data-budget="availabilitySet"] td.use`
	)
	want("created", map[string]string{
		ses + " .state":      "Running",
		ses + " .progress":   "2 in maintenance, 1 pending of 3 hosts",
		ses + " .wait":       "Waiting for a host to end: 2 under way, at most 2 at once.",
		ses + maxHosts:       "2/2 under way",
		ses + set:            "availabilitySet web: 1/1",
		host("hv0"):          "InMaintenance",
		host("hv1"):          "InMaintenance",
		host("hv2"):          "Pending",
		"#sessions .summary": "3 hosts with 4 VMs: 2 in maintenance, 1 pending.",
	})

	s.mustCLI(t, "host", "done", "hv0")
	want("hv0 done", map[string]string{
		ses + " .progress": "1 done, 1 in maintenance, 1 pending of 3 hosts",
		ses + " .wait":     "Next host hv2 waits: it would take availabilitySet web to 2 VMs down, over its budget of 1.",
		ses + maxHosts:     "1/2 under way",
		ses + set:          "availabilitySet web: 1/1",
		host("hv0"):        "Done",
	})

	s.mustCLI(t, "host", "done", "hv1")
	want("hv1 done", map[string]string{
		ses + " .progress": "2 done, 1 in maintenance of 3 hosts",
		ses + " .wait":     "Every host has started: waiting for those under way to end.",
		ses + set:          "availabilitySet web: 1/1",
		host("hv1"):        "Done",
		host("hv2"):        "InMaintenance",
	})

	s.mustCLI(t, "host", "done", "hv2")
	want("hv2 done", map[string]string{
		ses + " .state":      "Done",
		ses + " .progress":   "3 done of 3 hosts",
		"#sessions .summary": "3 hosts with 4 VMs: 3 done.",
		`#sessions .hosts tr[data-host="hv2"] td.state`: "Done",
	})
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("`+strings.ReplaceAll(ses, `"`, `\"`)+` table").length`)); err != nil || n != 0 {
		t.Errorf("the ended session still shows %d tables (%v), want none", n, err)
	}
	if kept, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.notReloaded === true`)); err != nil || !kept {
		t.Fatalf("the page was reloaded (%v)", err)
	}
}

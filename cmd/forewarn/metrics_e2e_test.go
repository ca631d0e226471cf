package main

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
)

const metricsFleet = `vms:
  - name: web_0
    ip: 127.0.0.2
    availabilitySet: web
    updateDomain: 0
  - name: web_1
    ip: 127.0.0.3
    availabilitySet: web
    updateDomain: 1
  - name: db_0
    ip: 127.0.0.4
    availabilitySet: db
  - name: gce_0
    ip: 127.0.0.6
    provider: gce
  - name: ec2_0
    ip: 127.0.0.7
    provider: aws
  - name: ec2_1
    ip: 127.0.0.8
    provider: aws
`

// scrape GETs /metrics from the operator API with token and returns
// every series, as "name{labels}" in the text format (labels sorted), and
// its value.
func scrape(t *testing.T, s *server, token string) map[string]float64 {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+s.adm+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		line := lines.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	if err := lines.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// metadataGet makes one metadata API request from VM ip and returns its
// status.
func metadataGet(t *testing.T, s *server, ip, method, path string, header ...string) int {
	t.Helper()
	code, _ := vmGet(t, s, ip, method, path, header...)
	return code
}

// TestMetricsEndToEnd scrapes the real server's /metrics over HTTP during
// a scripted lifecycle and checks exact counts: requests of the three
// metadata APIs by route and code, a 429, a held long-poll, transitions,
// approvals by who, the notice histograms, a deadline's lag, the events
// and enabled VMs gauges. /metrics needs the token like every route.
func TestMetricsEndToEnd(t *testing.T) {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleet, []byte(metricsFleet), 0o644); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	// EC2 VMs may make one request per 100 s: the second gets 429.
	s := startServerArgs(t, filepath.Join(dir, "data"), fleet, "--admin-token-file", tokenFile, "--aws-rate-limit", "0.01")
	b, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(b))

	// Without the token, or with a wrong one, /metrics is refused.
	for _, auth := range []string{"", "Bearer wrong-token-wrong-token"} {
		req, _ := http.NewRequest("GET", "http://"+s.adm+"/metrics", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("GET /metrics with Authorization %q: %s, want 401", auth, resp.Status)
		}
	}

	ctx := t.Context()
	c := admin.NewClient("http://"+s.adm, nil)
	c.Token = token
	const azPath = "/metadata/scheduledevents?api-version=2020-07-01"
	az := func(ip, method string) int { return metadataGet(t, s, ip, method, azPath, "Metadata", "true") }
	mustStatus := func(what string, got, want int) {
		t.Helper()
		if got != want {
			t.Fatalf("%s: %d, want %d", what, got, want)
		}
	}

	// web_0 and db_0 enable their services (web_1 shares web_0's).
	mustStatus("web_0 first GET", az("127.0.0.2", "GET"), 200)
	mustStatus("db_0 first GET", az("127.0.0.4", "GET"), 200)
	mustStatus("azure unknown path", metadataGet(t, s, "127.0.0.2", "GET", "/metadata/nothing", "Metadata", "true"), 404)

	// A Reboot web_0 approves, which the operator completes.
	e1, err := c.CreateEvent(ctx, admin.CreateRequest{Type: "Reboot", VMs: []string{"web_0"}, Notice: "10m"})
	if err != nil {
		t.Fatal(err)
	}
	mustStatus("web_0 GET", az("127.0.0.2", "GET"), 200)
	req, _ := http.NewRequest("POST", "http://"+s.metadata+azPath, strings.NewReader(`{"StartRequests":[{"EventId":"`+e1.ID+`"}]}`))
	req.Header.Set("Metadata", "true")
	resp, err := vmClient("127.0.0.2").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	mustStatus("web_0 approval", resp.StatusCode, 200)
	if _, err := c.Complete(ctx, e1.ID); err != nil {
		t.Fatal(err)
	}
	// A Freeze the operator approves, which its 1 s deadline completes.
	e2, err := c.CreateEvent(ctx, admin.CreateRequest{Type: "Freeze", VMs: []string{"db_0"}, Notice: "10m", Lasts: "1s"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Approve(ctx, e2.ID); err != nil {
		t.Fatal(err)
	}
	// A Reboot the operator starts.
	e3, err := c.CreateEvent(ctx, admin.CreateRequest{Type: "Reboot", VMs: []string{"web_1"}, Notice: "10m"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(ctx, e3.ID); err != nil {
		t.Fatal(err)
	}

	// GCE: two plain reads, another key, and a long-poll held until its
	// timeout.
	const v1 = "/computeMetadata/v1/instance/"
	gce := func(path string) int {
		return metadataGet(t, s, "127.0.0.6", "GET", v1+path, "Metadata-Flavor", "Google")
	}
	mustStatus("maintenance-event", gce("maintenance-event"), 200)
	mustStatus("maintenance-event", gce("maintenance-event"), 200)
	mustStatus("name", gce("name"), 200)
	polled := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("GET", "http://"+s.metadata+v1+"maintenance-event?wait_for_change=true&timeout_sec=3", nil)
		req.Header.Set("Metadata-Flavor", "Google")
		resp, err := vmClient("127.0.0.6").Do(req)
		if err != nil {
			polled <- 0
			return
		}
		resp.Body.Close()
		polled <- resp.StatusCode
	}()
	waitMetric(t, s, token, "forewarn_gce_long_polls_held", 1)
	mustStatus("long-poll", <-polled, 200)

	// EC2: one request each, then ec2_0's second is throttled.
	mustStatus("ec2_0 instance-id", metadataGet(t, s, "127.0.0.7", "GET", "/latest/meta-data/instance-id"), 200)
	mustStatus("ec2_0 scheduled", metadataGet(t, s, "127.0.0.7", "GET", "/latest/meta-data/events/maintenance/scheduled"), 429)
	mustStatus("ec2_1 scheduled", metadataGet(t, s, "127.0.0.8", "GET", "/latest/meta-data/events/maintenance/scheduled"), 200)

	// The Freeze's completion is its deadline's.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ev, err := c.Event(ctx, e2.ID)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Status == forewarn.Completed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Freeze %s still %s", e2.ID, ev.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}

	got := scrape(t, s, token)
	want := map[string]float64{
		`forewarn_metadata_requests_total{api="azure",code="200",route="scheduledevents"}`:      4,
		`forewarn_metadata_requests_total{api="azure",code="404",route="other"}`:                1,
		`forewarn_metadata_request_duration_seconds_count{api="azure",route="scheduledevents"}`: 4,
		`forewarn_metadata_requests_total{api="gce",code="200",route="maintenance-event"}`:      3,
		`forewarn_metadata_requests_total{api="gce",code="200",route="other-key"}`:              1,
		`forewarn_metadata_request_duration_seconds_count{api="gce",route="maintenance-event"}`: 3,
		`forewarn_gce_long_polls_held`:                                               0,
		`forewarn_metadata_requests_total{api="aws",code="200",route="meta-data"}`:   1,
		`forewarn_metadata_requests_total{api="aws",code="200",route="events"}`:      1,
		`forewarn_metadata_requests_total{api="aws",code="429",route="events"}`:      1,
		`forewarn_metadata_request_duration_seconds_count{api="aws",route="events"}`: 2,
		`forewarn_metadata_throttled_total{api="aws"}`:                               1,
		`forewarn_metadata_throttled_total{api="azure"}`:                             0,

		`forewarn_event_transitions_total{from="none",to="Scheduled",type="Reboot"}`:    2,
		`forewarn_event_transitions_total{from="Scheduled",to="Started",type="Reboot"}`: 2,
		`forewarn_event_transitions_total{from="Started",to="Completed",type="Reboot"}`: 1,
		`forewarn_event_transitions_total{from="none",to="Scheduled",type="Freeze"}`:    1,
		`forewarn_event_transitions_total{from="Scheduled",to="Started",type="Freeze"}`: 1,
		`forewarn_event_transitions_total{from="Started",to="Completed",type="Freeze"}`: 1,
		`forewarn_events{status="Started",type="Reboot"}`:                               1,
		`forewarn_events{status="Completed",type="Reboot"}`:                             1,
		`forewarn_events{status="Completed",type="Freeze"}`:                             1,
		`forewarn_approvals_total{by="vm"}`:                                             1,
		`forewarn_approvals_total{by="operator"}`:                                       1,
		`forewarn_event_notice_to_approval_seconds_count`:                               2,
		`forewarn_event_approval_to_not_before_seconds_count`:                           2,
		`forewarn_deadline_lag_seconds_count`:                                           1,
		// web_0, web_1 (web_0's service), db_0, ec2_0 and ec2_1, as vm
		// list shows: GCE VMs have no enablement.
		`forewarn_vms_enabled`: 5,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	vms, err := c.VMs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	enabled := 0
	for _, vm := range vms {
		if vm.Enabled {
			enabled++
		}
	}
	if g := got[`forewarn_vms_enabled`]; g != float64(enabled) {
		t.Errorf("forewarn_vms_enabled = %v, vm list shows %d enabled", g, enabled)
	}
	// Both notices were 10 minutes; both approvals came within a minute
	// of creation, so the lead given back is over 9 minutes.
	if n := got[`forewarn_event_approval_to_not_before_seconds_bucket{le="300"}`]; n != 0 {
		t.Errorf("approval_to_not_before under 300 s: %v, want 0", n)
	}
	if n := got[`forewarn_event_notice_to_approval_seconds_bucket{le="60"}`]; n != 2 {
		t.Errorf("notice_to_approval under 60 s: %v, want 2", n)
	}
	// Every event commit (3 creates, 2 approvals, a start, 2 completions)
	// and the LastSeen writes, batched as they come.
	if n := got[`forewarn_store_commit_duration_seconds_count{store="bolt"}`]; n < 8 {
		t.Errorf("store commits: %v, want at least 8", n)
	}
	if got[`go_goroutines`] == 0 || got[`process_open_fds`] == 0 {
		t.Errorf("no Go or process collector: go_goroutines %v, process_open_fds %v", got[`go_goroutines`], got[`process_open_fds`])
	}
	for k := range got {
		if strings.Contains(k, e1.ID) || strings.Contains(k, "web_0") {
			t.Errorf("series %s names an event or a VM", k)
		}
	}
}

// waitMetric waits until the series name has value v.
func waitMetric(t *testing.T, s *server, token, name string, v float64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		if g := scrape(t, s, token)[name]; g == v {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never reached %v", name, v)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

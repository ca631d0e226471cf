package main

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/internal/etcdtest"
	"github.com/forewarn/forewarn/report"
)

const reportFleet = `scaleSets:
  - name: vmss
vms:
  - {name: web_0, ip: 127.0.0.2, availabilitySet: web}
  - {name: vmss_0, ip: 127.0.0.3, scaleSet: vmss, instanceId: "0", placementGroup: pg}
  - {name: vmss_1, ip: 127.0.0.4, scaleSet: vmss, instanceId: "1", placementGroup: pg}
  - {name: spot_0, ip: 127.0.0.5, priority: Spot}
  - {name: gce_0, ip: 127.0.0.6, provider: gce}
  - {name: quiet_0, ip: 127.0.0.7}
  - {name: ec2_0, ip: 127.0.0.8, provider: aws}
  - {name: late_0, ip: 127.0.0.9}
  - {name: carry_0, ip: 127.0.0.10}
`

// reportJSON runs 'forewarn report --json' with args against s.
func reportJSON(t *testing.T, s *server, args ...string) *report.Report {
	t.Helper()
	var rep report.Report
	if err := json.Unmarshal([]byte(s.mustCLI(t, append([]string{"report", "--json"}, args...)...)), &rep); err != nil {
		t.Fatal(err)
	}
	return &rep
}

// findings returns a VM's or an event's findings as kind: count.
func findings(fs []report.Finding) map[string]uint64 {
	out := map[string]uint64{}
	for _, f := range fs {
		out[f.Kind] = f.Count
	}
	return out
}

func sameCounts(a, b map[string]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// code GETs path as the VM at ip, with the header's name and value
// pairs, and returns the status code.
func (s *server) code(t *testing.T, ip, path string, header ...string) int {
	t.Helper()
	code, _ := vmGet(t, s, ip, "GET", path, header...)
	return code
}

// create runs 'forewarn event create' with args and returns the ID it
// prints.
func (s *server) create(t *testing.T, args ...string) string {
	t.Helper()
	return strings.TrimSpace(s.mustCLI(t, append([]string{"event", "create"}, args...)...))
}

// waitStatus waits until event id has status st.
func waitStatus(t *testing.T, s *server, id string, st forewarn.Status) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for s.event(t, id).Status != st {
		if time.Now().After(deadline) {
			t.Fatalf("event %s never became %s", id, st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestReport drives each finding of 'forewarn report' with real
// requests from the fleet's VMs over loopback and checks the exact
// counts, through the CLI's JSON (GET /v1/report), its table and --vm.
func TestReport(t *testing.T) {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleet, []byte(reportFleet), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServerArgs(t, filepath.Join(dir, "data"), fleet, "--aws-rate-limit", "1")
	const se = "/metadata/scheduledevents?api-version="
	const me = "/computeMetadata/v1/instance/maintenance-event"
	get := func(ip, path string, header ...string) int {
		t.Helper()
		return s.code(t, ip, path, header...)
	}
	create := func(args ...string) string {
		t.Helper()
		return s.create(t, args...)
	}

	// spot_0 reads a pending Preempt, then calls again 6.5 s later, while
	// the rest goes on: one slow gap while it is pending (over 6 s).
	get("127.0.0.5", se+"2020-07-01", "Metadata", "true")
	preempt := create("--type", "Preempt", "--vm", "spot_0", "--notice", "30s")
	get("127.0.0.5", se+"2020-07-01", "Metadata", "true")
	// late_0 calls, then says nothing during its Reboot's 7-second notice
	// and reads it only once Started: one slow gap, a read after the
	// start, and its event seen after its start.
	get("127.0.0.9", se+"2020-07-01", "Metadata", "true")
	late := create("--type", "Reboot", "--vm", "late_0", "--notice", "7s")
	slow := make(chan error, 1)
	go func() {
		time.Sleep(6500 * time.Millisecond)
		req, _ := http.NewRequest("GET", "http://"+s.metadata+se+"2020-07-01", nil)
		req.Header.Set("Metadata", "true")
		resp, err := vmClient("127.0.0.5").Do(req)
		if err == nil {
			resp.Body.Close()
		}
		slow <- err
	}()

	// web_0: 3 requests without the Metadata header, 2 at the preview.
	for range 3 {
		if code := get("127.0.0.2", se+"2020-07-01"); code != 400 {
			t.Fatalf("GET without Metadata: %d, want 400", code)
		}
	}
	for range 2 {
		get("127.0.0.2", se+"2017-03-01", "Metadata", "true")
	}
	// gce_0: 2 requests without Metadata-Flavor, a long-poll without
	// last_etag (a timeout after 1 s) and one with it.
	for range 2 {
		if code := get("127.0.0.6", me); code != 403 {
			t.Fatalf("GET without Metadata-Flavor: %d, want 403", code)
		}
	}
	get("127.0.0.6", me+"?wait_for_change=true&timeout_sec=1", "Metadata-Flavor", "Google")
	get("127.0.0.6", me+"?wait_for_change=true&last_etag=0", "Metadata-Flavor", "Google")
	// ec2_0: 4 requests in a burst at 1 a second, 3 of them throttled.
	throttled := 0
	for range 4 {
		if get("127.0.0.8", "/latest/meta-data/instance-id") == 429 {
			throttled++
		}
	}
	if throttled != 3 {
		t.Fatalf("%d of 4 EC2 requests throttled at 1 a second, want 3", throttled)
	}

	// vmss_1 reads vmss_0's Terminate at 2017-08-01 (which hides it), then
	// at 2020-07-01, and approves it.
	term := create("--type", "Terminate", "--vm", "vmss_0", "--notice", "10m")
	get("127.0.0.4", se+"2017-08-01", "Metadata", "true")
	get("127.0.0.4", se+"2020-07-01", "Metadata", "true")
	if code, body := s.approve(t, "127.0.0.4", term); code != 200 {
		t.Fatalf("vmss_1 approving vmss_0's Terminate: %d %s", code, body)
	}

	// web_0 reads a Freeze, lets it start at its NotBefore, then
	// approves it: too late.
	freeze := create("--type", "Freeze", "--vm", "web_0", "--notice", "1s", "--lasts", "1m")
	get("127.0.0.2", se+"2020-07-01", "Metadata", "true")
	waitStatus(t, s, freeze, forewarn.Started)
	if code, body := s.approve(t, "127.0.0.2", freeze); code != 200 {
		t.Fatalf("late approval: %d %s", code, body)
	}

	// quiet_0 never calls: its Reboot starts at once and ends unseen.
	quiet := create("--type", "Reboot", "--vm", "quiet_0", "--lasts", "1s")
	waitStatus(t, s, quiet, forewarn.Completed)

	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	waitStatus(t, s, late, forewarn.Started)
	get("127.0.0.9", se+"2020-07-01", "Metadata", "true")

	rep := reportJSON(t, s)
	vms := map[string]report.VM{}
	for _, v := range rep.VMs {
		vms[v.Name] = v
	}
	want := map[string]map[string]uint64{
		"carry_0": {},
		"web_0":   {report.NoMetadataHeader: 3, report.PreviewAPIVersion: 2, report.LateApproval: 1},
		"vmss_0":  {},
		"vmss_1":  {report.VersionHidesEvents: 1, report.ApprovedOthersTerminate: 1},
		"spot_0":  {report.SlowPolling: 1},
		"gce_0":   {report.NoMetadataHeader: 2, report.LongPollWithoutETag: 1},
		"quiet_0": {},
		"ec2_0":   {report.Throttled: 3},
		"late_0":  {report.SlowPolling: 1, report.ReadAfterStart: 1},
	}
	for name, w := range want {
		if got := findings(vms[name].Findings); !sameCounts(got, w) {
			t.Errorf("%s: findings %v, want %v\n%+v", name, got, w, vms[name].Findings)
		}
	}
	// 3 without the header, 2 at the preview, a GET and a POST.
	if v := vms["web_0"]; v.Requests != 7 || len(v.APIVersions) != 2 ||
		v.APIVersions[0].Version != "2020-07-01" || v.APIVersions[0].Requests != 5 || v.APIVersions[1].Requests != 2 {
		t.Errorf("web_0: %d requests, api-versions %+v; want 7, 2020-07-01×5 and 2017-03-01×2", v.Requests, v.APIVersions)
	}
	if v := vms["gce_0"]; v.LongPolls == nil || v.LongPolls.Made != 2 || v.LongPolls.Held != 0 || v.Requests != 4 {
		t.Errorf("gce_0: %d requests, long-polls %+v; want 4, made 2, held 0", v.Requests, v.LongPolls)
	}
	if v := vms["spot_0"]; v.LongestPendingGapSeconds < 6.5 || v.LongestPendingGapSeconds > 9 || v.Requests != 3 ||
		len(v.PendingEvents) != 1 || v.PendingEvents[0] != preempt {
		t.Errorf("spot_0: %d requests, longest gap while pending %vs, pending %v; want 3, 6.5s to 9s, [%s]",
			v.Requests, v.LongestPendingGapSeconds, v.PendingEvents, preempt)
	}
	if v := vms["quiet_0"]; v.Requests != 0 || !v.FirstCall.IsZero() {
		t.Errorf("quiet_0: %d requests, first call %v; want none", v.Requests, v.FirstCall)
	}
	events := map[string]report.Event{}
	for _, e := range rep.Events {
		events[e.ID] = e
	}
	wantEv := map[string]map[string]uint64{
		preempt: {},
		term:    {report.ApprovedByNonOwner: 1},
		freeze:  {report.ApprovedAfterNotBefore: 1},
		quiet:   {report.NeverSeen: 1},
		late:    {report.SeenAfterStart: 1},
	}
	for id, w := range wantEv {
		if got := findings(events[id].Findings); !sameCounts(got, w) {
			t.Errorf("event %s (%s): findings %v, want %v\n%+v", id, events[id].Type, got, w, events[id].Findings)
		}
	}
	if e := events[freeze]; e.SeenBy != "web_0" || e.SeenAt.Before(e.Created) || e.NotBefore.IsZero() {
		t.Errorf("Freeze seen by %q at %v (created %v), NotBefore %v; want web_0 after creation, NotBefore known", e.SeenBy, e.SeenAt, e.Created, e.NotBefore)
	}
	// late_0's notice ran from the Reboot's creation to its start: its
	// gap over it is all of it.
	if v, e := vms["late_0"], events[late]; e.SeenBy != "late_0" || e.StartedAt.IsZero() ||
		v.LongestPendingGapSeconds != e.StartedAt.Sub(e.Created).Seconds() || !v.LongestPendingGapEnded.Equal(v.LastCall) {
		t.Errorf("late_0: longest gap while pending %vs ended %v (last call %v); its Reboot created %v, started %v, seen by %q; want the notice, ended at the last call, seen by late_0",
			v.LongestPendingGapSeconds, v.LongestPendingGapEnded, v.LastCall, e.Created, e.StartedAt, e.SeenBy)
	}
	if e := events[term]; e.SeenBy != "vmss_1" {
		t.Errorf("Terminate seen by %q, want vmss_1 (at 2020-07-01; 2017-08-01 hides it)", e.SeenBy)
	}

	// --vm: one VM and the events that name it, approved by it or seen by it first.
	one := reportJSON(t, s, "--vm", "vmss_1")
	if len(one.VMs) != 1 || one.VMs[0].Name != "vmss_1" || len(one.Events) != 1 || one.Events[0].ID != term {
		t.Errorf("--vm vmss_1: %d VMs, events %+v; want vmss_1 and the Terminate", len(one.VMs), one.Events)
	}
	// The table names each finding and each event. (spot_0's silence,
	// with its Preempt pending, may by now make a second slow gap.)
	table := s.mustCLI(t, "report")
	for _, want := range []string{"no-metadata-header×3", "throttled×3", "late-approval×1", "slow-polling×", "read-after-start×1",
		"seen-after-start: 1 VM(s) first read it only after it started",
		"approved-others-terminate×1", "never-seen: no VM of its scope", "VM      FINDING", "2020-07-01×5,2017-03-01×2"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}

	// Across a restart (SIGTERM, then the same store): every finding and
	// every first reader stays as it was, and a read made before the
	// restart counts after it. carry_0 calls, then reads its Reboot's
	// 8-second notice (over the 6 s a client polling as expected may
	// miss) at once; the server stops, and the notice ends while no
	// server runs; the server starts again, and carry_0 reads the Reboot
	// Started: a notice read in time, not a read after the start.
	get("127.0.0.10", se+"2020-07-01", "Metadata", "true") // its scheduled events enabled
	carry := create("--type", "Reboot", "--vm", "carry_0", "--notice", "8s", "--lasts", "1m")
	get("127.0.0.10", se+"2020-07-01", "Metadata", "true")
	notBefore := s.event(t, carry).NotBefore
	before := reportJSON(t, s)
	s.stop(t)
	time.Sleep(time.Until(notBefore) + 500*time.Millisecond)
	s = startServerArgs(t, s.data, s.fleetArg, "--aws-rate-limit", "1")
	waitStatus(t, s, carry, forewarn.Started)
	get("127.0.0.10", se+"2020-07-01", "Metadata", "true")
	after := reportJSON(t, s)
	wantSameFindings(t, before, after)
	// And exactly the findings the VMs' requests made, carry_0's none,
	// each event's first reader as before: spot_0's silence since its
	// last call, its Preempt pending, may count once more by now.
	exact := map[string]map[string]uint64{}
	maps.Copy(exact, want)
	maps.Copy(exact, wantEv)
	if n := findings(vmOf(after, "spot_0").Findings)[report.SlowPolling]; n == 2 {
		exact["spot_0"] = map[string]uint64{report.SlowPolling: 2}
	}
	seenBy := map[string]string{preempt: "spot_0", term: "vmss_1", freeze: "web_0", late: "late_0", carry: "carry_0"}
	wantFindings(t, "after the restart", after, exact, seenBy, seenAt(before))
	if e := eventOf(after, carry); e.SeenBy != "carry_0" || len(e.Findings) != 0 || !e.SeenAt.Before(e.StartedAt) {
		t.Errorf("carry_0's Reboot after the restart: seen by %q at %v (started %v), findings %+v; want seen by carry_0 before its start, none",
			e.SeenBy, e.SeenAt, e.StartedAt, e.Findings)
	}

	if _, errOut, code := s.cli(t, "report", "--vm", "nobody"); code != 1 || !strings.Contains(errOut, `no VM named "nobody"`) {
		t.Errorf("report --vm nobody: exit %d, %q; want 1 naming the VM", code, errOut)
	}
	if _, errOut, code := s.cli(t, "report", "extra"); code != 2 || !strings.Contains(errOut, `unexpected argument "extra"`) {
		t.Errorf("report extra: exit %d, %q; want 2", code, errOut)
	}
}

// vmOf returns the report of the VM named name in rep.
func vmOf(rep *report.Report, name string) report.VM {
	for _, v := range rep.VMs {
		if v.Name == name {
			return v
		}
	}
	return report.VM{}
}

// eventOf returns the report of event id in rep.
func eventOf(rep *report.Report, id string) report.Event {
	for _, e := range rep.Events {
		if e.ID == id {
			return e
		}
	}
	return report.Event{}
}

// wantSameFindings checks that after, a report made after a restart,
// has exactly the findings of before, of every VM and every event, and
// the same first reader of each event, at the same time. spot_0's slow
// gaps count, beside the gap its requests closed, the silence going on
// at the report's time while its Preempt is pending, which ends with the
// Preempt, restart or not: only the closed gap must stay.
func wantSameFindings(t *testing.T, before, after *report.Report) {
	t.Helper()
	vms := map[string]report.VM{}
	for _, v := range after.VMs {
		vms[v.Name] = v
	}
	for _, b := range before.VMs {
		got, want := findings(vms[b.Name].Findings), findings(b.Findings)
		if b.Name == "spot_0" && got[report.SlowPolling] >= 1 {
			got[report.SlowPolling] = want[report.SlowPolling]
		}
		if !sameCounts(got, want) {
			t.Errorf("after the restart, %s: findings %v, want %v as before\n%+v", b.Name, got, want, vms[b.Name].Findings)
		}
	}
	for _, b := range before.Events {
		a := eventOf(after, b.ID)
		if got, want := findings(a.Findings), findings(b.Findings); !sameCounts(got, want) {
			t.Errorf("after the restart, event %s (%s): findings %v, want %v as before\n%+v", b.ID, b.Type, got, want, a.Findings)
		}
		if a.SeenBy != b.SeenBy || !a.SeenAt.Equal(b.SeenAt) {
			t.Errorf("after the restart, event %s (%s): seen by %q at %v, want %q at %v as before", b.ID, b.Type, a.SeenBy, a.SeenAt, b.SeenBy, b.SeenAt)
		}
	}
}

// waitReportSaved waits, up to 10 s (a slow machine: the README says
// about a second), until s has saved what the report needs of the
// requests made, so that a crash loses none of it: until its metric
// forewarn_client_report_unsaved is 0.
func waitReportSaved(t *testing.T, s *server) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + s.adm + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains("\n"+string(b), "\nforewarn_client_report_unsaved 0\n") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the report's records still unsaved after 10 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// reportCrashFleet is reportFleet at addresses of the crash tests' own.
var reportCrashFleet = strings.ReplaceAll(reportFleet, "127.0.0.", "127.99.0.")

// wantFindings checks rep's findings, of every VM and every event,
// against want (kind: count, by VM or event ID; a VM or an event not in
// want has none), and each event's first reader against seenBy ("" for
// none), with when against seenAt where it names the event.
func wantFindings(t *testing.T, when string, rep *report.Report, want map[string]map[string]uint64, seenBy map[string]string, seenAt map[string]time.Time) {
	t.Helper()
	for _, v := range rep.VMs {
		if got := findings(v.Findings); !sameCounts(got, want[v.Name]) {
			t.Errorf("%s, %s: findings %v, want %v\n%+v", when, v.Name, got, want[v.Name], v.Findings)
		}
	}
	for _, e := range rep.Events {
		if got := findings(e.Findings); !sameCounts(got, want[e.ID]) {
			t.Errorf("%s, event %s (%s): findings %v, want %v\n%+v", when, e.ID, e.Type, got, want[e.ID], e.Findings)
		}
		if e.SeenBy != seenBy[e.ID] {
			t.Errorf("%s, event %s (%s): seen by %q, want %q", when, e.ID, e.Type, e.SeenBy, seenBy[e.ID])
		}
		if at, ok := seenAt[e.ID]; ok && !e.SeenAt.Equal(at) {
			t.Errorf("%s, event %s (%s): seen at %v, want %v", when, e.ID, e.Type, e.SeenAt, at)
		}
	}
}

// crashArgs are the serve flags of the crash tests: their own loopback
// addresses, and EC2 requests throttled at 1 a second.
var crashArgs = []string{"--metadata-addr", "127.99.0.1:0", "--admin-addr", "127.99.0.1:0", "--aws-rate-limit", "1"}

// crashPlay is what the VMs of reportCrashFleet did (playCrash), and the
// findings and first readers the report must show of it.
type crashPlay struct {
	want   map[string]map[string]uint64
	seenBy map[string]string
	// notice is carry_0's Reboot, whose 8-second notice carry_0 read at
	// once; it starts at notBefore.
	notice    string
	notBefore time.Time
}

// playCrash has the VMs of reportCrashFleet make, through s, a finding
// of each kind that counts requests, each counted after the VM's last
// read of an event (which saves its record at once); read within a
// second events that then end, and carry_0 its Reboot's notice. It
// returns when the events that end have ended.
func playCrash(t *testing.T, s *server) crashPlay {
	t.Helper()
	const se = "/metadata/scheduledevents?api-version="
	const me = "/computeMetadata/v1/instance/maintenance-event"

	// web_0 reads its Freeze, makes 3 requests without the Metadata
	// header and 2 at the preview, lets the Freeze start, then approves
	// it: too late.
	s.code(t, "127.99.0.2", se+"2020-07-01", "Metadata", "true") // its scheduled events enabled
	freeze := s.create(t, "--type", "Freeze", "--vm", "web_0", "--notice", "1s", "--lasts", "1m")
	s.code(t, "127.99.0.2", se+"2020-07-01", "Metadata", "true")
	for range 3 {
		if code := s.code(t, "127.99.0.2", se+"2020-07-01"); code != 400 {
			t.Fatalf("GET without Metadata: %d, want 400", code)
		}
	}
	for range 2 {
		s.code(t, "127.99.0.2", se+"2017-03-01", "Metadata", "true")
	}
	// vmss_1 reads vmss_0's Terminate at 2017-08-01 (which hides it), then
	// at 2020-07-01, and approves it.
	term := s.create(t, "--type", "Terminate", "--vm", "vmss_0", "--notice", "10m")
	s.code(t, "127.99.0.4", se+"2017-08-01", "Metadata", "true")
	s.code(t, "127.99.0.4", se+"2020-07-01", "Metadata", "true")
	if code, body := s.approve(t, "127.99.0.4", term); code != 200 {
		t.Fatalf("vmss_1 approving vmss_0's Terminate: %d %s", code, body)
	}
	// gce_0 reads its maintenance at once, which then ends, then makes 2
	// requests without Metadata-Flavor and a long-poll without last_etag.
	s.code(t, "127.99.0.6", me, "Metadata-Flavor", "Google") // a live migration is warned to a VM that reads the key
	migrate := s.create(t, "--type", "MIGRATE_ON_HOST_MAINTENANCE", "--vm", "gce_0", "--notice", "1s", "--lasts", "1s")
	if code, body := vmGet(t, s, "127.99.0.6", "GET", me, "Metadata-Flavor", "Google"); code != 200 || body != "MIGRATE_ON_HOST_MAINTENANCE" {
		t.Fatalf("gce_0's maintenance-event: %d %q, want its migration", code, body)
	}
	for range 2 {
		if code := s.code(t, "127.99.0.6", me); code != 403 {
			t.Fatalf("GET without Metadata-Flavor: %d, want 403", code)
		}
	}
	s.code(t, "127.99.0.6", me+"?wait_for_change=true&timeout_sec=1", "Metadata-Flavor", "Google")
	// ec2_0 reads its reboot at once, which then ends, and makes 3 more
	// requests within the second: throttled at 1 a second.
	reboot := s.create(t, "--type", "system-reboot", "--vm", "ec2_0", "--notice", "1s", "--lasts", "1s")
	if code, body := vmGet(t, s, "127.99.0.8", "GET", "/latest/meta-data/events/maintenance/scheduled"); code != 200 || !strings.Contains(body, "system-reboot") {
		t.Fatalf("ec2_0's scheduled events: %d %q, want its reboot", code, body)
	}
	for range 3 {
		if code := s.code(t, "127.99.0.8", "/latest/meta-data/instance-id"); code != 429 {
			t.Fatalf("EC2 request within the second: %d, want 429", code)
		}
	}
	// quiet_0 never calls: its Reboot starts at once and ends unseen.
	quiet := s.create(t, "--type", "Reboot", "--vm", "quiet_0", "--lasts", "1s")
	s.code(t, "127.99.0.10", se+"2020-07-01", "Metadata", "true") // its scheduled events enabled
	notice := s.create(t, "--type", "Reboot", "--vm", "carry_0", "--notice", "8s", "--lasts", "1m")
	s.code(t, "127.99.0.10", se+"2020-07-01", "Metadata", "true")

	waitStatus(t, s, freeze, forewarn.Started)
	if code, body := s.approve(t, "127.99.0.2", freeze); code != 200 {
		t.Fatalf("late approval: %d %s", code, body)
	}
	for _, id := range []string{migrate, reboot, quiet} {
		waitStatus(t, s, id, forewarn.Completed)
	}
	return crashPlay{
		want: map[string]map[string]uint64{
			"web_0":  {report.NoMetadataHeader: 3, report.PreviewAPIVersion: 2, report.LateApproval: 1},
			"vmss_1": {report.VersionHidesEvents: 1, report.ApprovedOthersTerminate: 1},
			"gce_0":  {report.NoMetadataHeader: 2, report.LongPollWithoutETag: 1},
			"ec2_0":  {report.Throttled: 3},
			term:     {report.ApprovedByNonOwner: 1},
			freeze:   {report.ApprovedAfterNotBefore: 1},
			quiet:    {report.NeverSeen: 1},
		},
		seenBy: map[string]string{freeze: "web_0", term: "vmss_1", migrate: "gce_0", reboot: "ec2_0", notice: "carry_0"},
		notice: notice, notBefore: s.event(t, notice).NotBefore,
	}
}

// readStarted has carry_0 read its Reboot from s once it has started.
func (p crashPlay) readStarted(t *testing.T, s *server) {
	t.Helper()
	waitStatus(t, s, p.notice, forewarn.Started)
	if code, _ := vmGet(t, s, "127.99.0.10", "GET", "/metadata/scheduledevents?api-version=2020-07-01", "Metadata", "true"); code != 200 {
		t.Fatalf("carry_0 reading its Reboot: %d", code)
	}
}

// seenAt returns when each event of rep was first read.
func seenAt(rep *report.Report) map[string]time.Time {
	out := map[string]time.Time{}
	for _, e := range rep.Events {
		out[e.ID] = e.SeenAt
	}
	return out
}

// TestReportCrash: the report's findings survive a crash (SIGKILL) once
// the server has saved them (waitReportSaved), and a
// graceful restart after it, exactly: counts of each VM's findings, the
// first reader of each event and when, events read within a second of
// their creation that then ended (never-seen if their readers were
// lost), and a notice read before the crash, its event started after
// it (read after the start if the read were lost; the time no server ran
// is no gap).
func TestReportCrash(t *testing.T) {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleet, []byte(reportCrashFleet), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServerArgs(t, filepath.Join(dir, "data"), fleet, crashArgs...)
	p := playCrash(t, s)
	before := reportJSON(t, s)
	wantFindings(t, "before the crash", before, p.want, p.seenBy, nil)

	waitReportSaved(t, s)
	s.cmd.Process.Kill()
	s.cmd.Wait()
	time.Sleep(time.Until(p.notBefore) + 500*time.Millisecond)
	s = startServerArgs(t, s.data, s.fleetArg, crashArgs...)
	p.readStarted(t, s)
	wantFindings(t, "after the crash", reportJSON(t, s), p.want, p.seenBy, seenAt(before))

	s.stop(t)
	s = startServerArgs(t, s.data, s.fleetArg, crashArgs...)
	wantFindings(t, "after a graceful restart", reportJSON(t, s), p.want, p.seenBy, seenAt(before))
}

// TestReportOnReplicas: two replicas share one store on etcd; the VMs
// call A alone, and A crashes (SIGKILL) once it has saved
// what the report needs: B's report has A's findings and first readers
// exactly, and carry_0's read of its Reboot's notice from A counts on B
// (no read after the start). B ran while carry_0 said nothing through
// the end of the notice: that gap, unlike the time no server ran, is
// slow polling.
func TestReportOnReplicas(t *testing.T) {
	etcd := etcdtest.Start(t)
	c := newHACluster(t, etcd.Endpoints(), "/forewarn/report/", reportCrashFleet, "2s", "5s")
	c.args = crashArgs
	a, b := c.add("A"), c.add("B")
	p := playCrash(t, a.s(t))
	before := reportJSON(t, a.s(t))
	wantFindings(t, "A's report", before, p.want, p.seenBy, nil)

	waitReportSaved(t, a.s(t))
	a.kill()
	time.Sleep(time.Until(p.notBefore) + 500*time.Millisecond)
	p.readStarted(t, b.s(t))
	p.want["carry_0"] = map[string]uint64{report.SlowPolling: 1}
	wantFindings(t, "B's report after A crashed", reportJSON(t, b.s(t)), p.want, p.seenBy, seenAt(before))
}

package main

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

var (
	printedID = regexp.MustCompile(`^[0-9A-F-]{36}\n$`)
	timestamp = regexp.MustCompile(`\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\b`)
)

// cliServer runs the operator API on a mem-store engine and returns the
// engine and the server's URL. The fleet has an availability set of two
// update domains, a zonal standalone VM, a scale set of two VMs in one
// placement group, a scale set of one Spot VM, a cloud service whose name
// is also that scale set's ("spot"), and a GCE VM. Every VM but spot_0
// and gce_0 has called its metadata API once, so its scheduled events
// are enabled and Platform events keep their notice.
func cliServer(t *testing.T) (*engine.Engine, string) {
	t.Helper()
	fleet := &forewarn.Fleet{VMs: []*forewarn.VM{
		{Name: "web_0", IP: netip.MustParseAddr("10.0.0.4"), Provider: forewarn.Azure, AvailabilitySet: "web"},
		{Name: "web_1", IP: netip.MustParseAddr("10.0.0.5"), Provider: forewarn.Azure, AvailabilitySet: "web", UpdateDomain: 1},
		{Name: "db_0", Provider: forewarn.Azure, Zone: "2", Spot: true},
		{Name: "ss_0", Provider: forewarn.Azure, ScaleSet: "ss", InstanceID: "0", PlacementGroup: "pg0"},
		{Name: "ss_1", Provider: forewarn.Azure, ScaleSet: "ss", InstanceID: "1", PlacementGroup: "pg0"},
		{Name: "spot_0", Provider: forewarn.Azure, ScaleSet: "spot", InstanceID: "0", Spot: true},
		{Name: "cs_0", Provider: forewarn.Azure, CloudService: "spot"},
		{Name: "gce_0", IP: netip.MustParseAddr("10.1.0.2"), Provider: forewarn.GCE, Zone: "us-central1-a"},
	}}
	eng, url := fleetServer(t, fleet)
	for _, vm := range fleet.VMs {
		if vm.Name != "spot_0" && vm.Name != "gce_0" {
			eng.NoteRequest(vm.Name)
		}
	}
	return eng, url
}

// fleetServer serves the operator API of an engine of fleet, on a
// memory store, and returns the engine and the server's URL.
func fleetServer(t *testing.T, fleet *forewarn.Fleet) (*engine.Engine, string) {
	t.Helper()
	eng, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: fleet})
	if err != nil {
		t.Fatalf("engine.New: %v", err)
	}
	t.Cleanup(func() { eng.Close() })
	srv := httptest.NewServer(admin.NewServer(eng, nil))
	t.Cleanup(srv.Close)
	return eng, srv.URL
}

type cliResult struct {
	code           int
	stdout, stderr string
}

// runCLI runs 'forewarn args...' in process.
func runCLI(t *testing.T, args ...string) cliResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), args, &stdout, &stderr)
	return cliResult{code, stdout.String(), stderr.String()}
}

// cliOK runs the command and fails the test unless it succeeds silently on
// stderr; it returns stdout.
func cliOK(t *testing.T, args ...string) string {
	t.Helper()
	r := runCLI(t, args...)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("forewarn %s: exit %d, stderr %q", strings.Join(args, " "), r.code, r.stderr)
	}
	return r.stdout
}

// createdID checks that out is exactly one EventId line and returns the
// engine's event of that ID.
func createdID(t *testing.T, eng *engine.Engine, out string) *forewarn.Event {
	t.Helper()
	if !printedID.MatchString(out) {
		t.Fatalf("stdout = %q, want an EventId and a newline", out)
	}
	ev, err := eng.Event(strings.TrimSuffix(out, "\n"))
	if err != nil {
		t.Fatalf("the printed ID is not the engine's: %v", err)
	}
	return ev
}

func TestEventCreate(t *testing.T) {
	eng, url := cliServer(t)
	// Flags in any order, the server flag last.
	out := cliOK(t, "event", "create", "--type", "reboot", "--vm", "ss_0", "--vm", "ss_1", "--notice", "20m",
		"--duration", "5", "--source", "user", "--description", "kernel update", "--lasts", "2m", "--server", url)
	ev := createdID(t, eng, out)
	if ev.Type != forewarn.Reboot || ev.Status != forewarn.Scheduled || !slices.Equal(ev.Resources, []string{"ss_0", "ss_1"}) ||
		ev.Duration != 5 || ev.Source != forewarn.User || ev.Description != "kernel update" || ev.Lasts != 2*time.Minute {
		t.Errorf("created %+v, want a Scheduled User Reboot of ss_0 and ss_1, 5s, \"kernel update\", lasting 2m", ev)
	}
	if notice := ev.NotBefore.Sub(ev.Created); notice < 20*time.Minute || notice > 20*time.Minute+time.Second {
		t.Errorf("notice = %s, want 20m", notice)
	}

	// Defaults, and the server from the environment.
	t.Setenv(serverEnv, url)
	def := createdID(t, eng, cliOK(t, "event", "create", "--type", "Preempt", "--vm", "db_0"))
	if def.Source != forewarn.Platform || def.Duration != -1 || def.Lasts != forewarn.Preempt.DefaultLasts() {
		t.Errorf("defaults: source %s, duration %d, lasts %s", def.Source, def.Duration, def.Lasts)
	}
	if notice := def.NotBefore.Sub(def.Created); notice < 30*time.Second || notice > 31*time.Second {
		t.Errorf("default notice = %s, want the 30s minimum", notice)
	}

	started := createdID(t, eng, cliOK(t, "event", "create", "--type", "Freeze", "--vm", "db_0", "--started", "--duration", "-1"))
	if started.Status != forewarn.Started || started.Duration != -1 {
		t.Errorf("--started: status %s, duration %d", started.Status, started.Duration)
	}
}

func TestEventList(t *testing.T) {
	eng, url := cliServer(t)
	if got := cliOK(t, "event", "list", "--server", url); got != "ID  TYPE  STATUS  RESOURCES  NOTBEFORE  SOURCE\n" {
		t.Errorf("empty list:\n%s", got)
	}
	one := createdID(t, eng, cliOK(t, "event", "create", "--server", url, "--type", "Reboot", "--vm", "ss_0", "--vm", "ss_1", "--source", "User"))
	two := createdID(t, eng, cliOK(t, "event", "create", "--server", url, "--type", "Redeploy", "--vm", "db_0", "--started"))

	want := "ID                                    TYPE      STATUS     RESOURCES  NOTBEFORE             SOURCE\n" +
		one.ID + "  Reboot    Scheduled  ss_0,ss_1  " + one.NotBefore.UTC().Format("2006-01-02T15:04:05Z") + "  User\n" +
		two.ID + "  Redeploy  Started    db_0       -                     Platform\n"
	if got := cliOK(t, "event", "list", "--server", url); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}

	var list struct{ Events []*forewarn.Event }
	if err := json.Unmarshal([]byte(cliOK(t, "event", "list", "--json", "--server", url)), &list); err != nil {
		t.Fatalf("--json output: %v", err)
	}
	got, _ := json.Marshal(list.Events)
	engs, _ := json.Marshal(eng.Events())
	if !bytes.Equal(got, engs) {
		t.Errorf("--json events:\n%s\nwant\n%s", got, engs)
	}
}

func TestEventActions(t *testing.T) {
	eng, url := cliServer(t)
	create := func() string {
		t.Helper()
		return createdID(t, eng, cliOK(t, "event", "create", "--server", url, "--type", "Reboot", "--vm", "web_0")).ID
	}

	a := create()
	if got, want := cliOK(t, "event", "approve", a, "--server", url), "event "+a+" is Started\n"; got != want {
		t.Errorf("approve printed %q, want %q", got, want)
	}
	if ev, _ := eng.Event(a); ev.Status != forewarn.Started || len(ev.Approvals) != 1 || ev.Approvals[0].By != forewarn.Operator {
		t.Errorf("after approve: %s, approvals %+v", ev.Status, ev.Approvals)
	}
	// IDs are matched without regard to case.
	if got, want := cliOK(t, "event", "complete", "--server", url, strings.ToLower(a)), "event "+a+" is Completed\n"; got != want {
		t.Errorf("complete printed %q, want %q", got, want)
	}
	if ev, _ := eng.Event(a); ev.Status != forewarn.Completed {
		t.Errorf("after complete: %s", ev.Status)
	}

	s := create()
	if got, want := cliOK(t, "event", "start", s, "--server", url), "event "+s+" is Started\n"; got != want {
		t.Errorf("start printed %q, want %q", got, want)
	}
	if ev, _ := eng.Event(s); ev.Status != forewarn.Started || len(ev.Approvals) != 0 {
		t.Errorf("after start: %s, approvals %+v", ev.Status, ev.Approvals)
	}

	c := create()
	if got, want := cliOK(t, "event", "cancel", c, "--server", url), "event "+c+" is Canceled\n"; got != want {
		t.Errorf("cancel printed %q, want %q", got, want)
	}
	if ev, _ := eng.Event(c); ev.Status != forewarn.Canceled {
		t.Errorf("after cancel: %s", ev.Status)
	}
}

func TestVMCommands(t *testing.T) {
	eng, url := cliServer(t)
	restart := createdID(t, eng, cliOK(t, "vm", "restart", "web_0", "--server", url))
	if restart.Type != forewarn.Reboot || restart.Source != forewarn.User || !slices.Equal(restart.Resources, []string{"web_0"}) {
		t.Errorf("restart created %v from %s", restart, restart.Source)
	}
	if notice := restart.NotBefore.Sub(restart.Created); notice < 15*time.Minute || notice > 15*time.Minute+time.Second {
		t.Errorf("restart notice = %s, want the 15m minimum", notice)
	}
	redeploy := createdID(t, eng, cliOK(t, "vm", "redeploy", "--notice", "40m", "db_0", "--server", url))
	if redeploy.Type != forewarn.Redeploy || redeploy.Source != forewarn.User || !slices.Equal(redeploy.Resources, []string{"db_0"}) {
		t.Errorf("redeploy created %v from %s", redeploy, redeploy.Source)
	}
	if notice := redeploy.NotBefore.Sub(redeploy.Created); notice < 40*time.Minute || notice > 40*time.Minute+time.Second {
		t.Errorf("redeploy notice = %s, want 40m", notice)
	}

	// Every LAST SEEN is the engine's, to the second; the table is then
	// compared with each shown as T.
	table := cliOK(t, "vm", "list", "--server", url)
	var seen []string
	for _, vm := range eng.VMs() {
		if !vm.LastSeen.IsZero() {
			seen = append(seen, vm.LastSeen.UTC().Format(time.RFC3339))
		}
	}
	if shown := timestamp.FindAllString(table, -1); !slices.Equal(shown, seen) {
		t.Errorf("LAST SEEN shows %q, want the engine's %q", shown, seen)
	}
	const T = "2006-01-02T15:04:05Z"
	want := "NAME    IP        PROVIDER  STATE    ENABLED  LAST SEEN             SCOPE   ZONE           UD  SPOT  INCARNATION  EVENTS\n" +
		"web_0   10.0.0.4  azure     running  yes      " + T + "  web     -              0   -     2            " + restart.ID + "\n" +
		"web_1   10.0.0.5  azure     running  yes      " + T + "  web     -              1   -     2            " + restart.ID + "\n" +
		"db_0    -         azure     running  yes      " + T + "  -       2              0   yes   2            " + redeploy.ID + "\n" +
		"ss_0    -         azure     running  yes      " + T + "  ss:pg0  -              0   -     1            -\n" +
		"ss_1    -         azure     running  yes      " + T + "  ss:pg0  -              0   -     1            -\n" +
		"spot_0  -         azure     running  no       -                     spot    -              0   yes   1            -\n" +
		"cs_0    -         azure     running  yes      " + T + "  spot    -              0   -     1            -\n" +
		"gce_0   10.1.0.2  gce       running  no       -                     -       us-central1-a  -   -     1            -\n"
	if got := timestamp.ReplaceAllString(table, T); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}

	var list struct{ VMs []engine.VMInfo }
	if err := json.Unmarshal([]byte(cliOK(t, "vm", "list", "--json", "--server", url)), &list); err != nil {
		t.Fatalf("--json output: %v", err)
	}
	got, _ := json.Marshal(list.VMs)
	engs, _ := json.Marshal(eng.VMs())
	if !bytes.Equal(got, engs) {
		t.Errorf("--json vms:\n%s\nwant\n%s", got, engs)
	}
}

// ceilSecond returns t rounded up to a whole second, as the engine
// rounds NotBefore.
func ceilSecond(t time.Time) time.Time {
	if s := t.Truncate(time.Second); !s.Equal(t) {
		return s.Add(time.Second)
	}
	return t
}

func TestVMDeleteDegrade(t *testing.T) {
	eng, url := cliServer(t)
	t.Setenv(serverEnv, url)

	term := createdID(t, eng, cliOK(t, "vm", "delete", "ss_0"))
	if term.Type != forewarn.Terminate || term.Source != forewarn.User || term.Status != forewarn.Scheduled ||
		!slices.Equal(term.Resources, []string{"ss_0"}) || !term.NotBefore.Equal(ceilSecond(term.Created.Add(forewarn.DefaultTerminateTimeout))) {
		t.Errorf("vm delete ss_0 created %+v, want a Scheduled User Terminate with 5m notice", term)
	}
	spot := createdID(t, eng, cliOK(t, "vm", "delete", "spot_0"))
	if spot.Type != forewarn.Terminate || spot.Status != forewarn.Completed || !slices.Equal(spot.Resources, []string{"spot_0"}) {
		t.Errorf("vm delete spot_0 created %+v, want a Completed Terminate", spot)
	}

	deg := createdID(t, eng, cliOK(t, "vm", "degrade", "db_0"))
	if deg.Type != forewarn.Redeploy || deg.Source != forewarn.Platform || deg.Status != forewarn.Scheduled || !slices.Equal(deg.Resources, []string{"db_0"}) {
		t.Errorf("vm degrade db_0 created %+v, want a Scheduled Platform Redeploy", deg)
	}
	if want := ceilSecond(deg.Created.Add(168 * time.Hour)); !deg.NotBefore.Equal(want) {
		t.Errorf("default degrade NotBefore = %v, want %v (7 days after %v, rounded up)", deg.NotBefore, want, deg.Created)
	}
	deg48 := createdID(t, eng, cliOK(t, "vm", "degrade", "--notice", "48h", "web_1"))
	if want := ceilSecond(deg48.Created.Add(48 * time.Hour)); !deg48.NotBefore.Equal(want) || !slices.Equal(deg48.Resources, []string{"web_1"}) {
		t.Errorf("vm degrade --notice 48h web_1: resources %v, NotBefore %v, want %v", deg48.Resources, deg48.NotBefore, want)
	}

	// The table shows spot_0 deleted and the Terminate on ss_0 and its
	// placement group.
	rows := strings.Split(cliOK(t, "vm", "list"), "\n")
	for _, r := range []struct {
		row   int
		state string
		event string
	}{{4, "running", term.ID}, {5, "running", term.ID}, {6, "deleted", "-"}} {
		f := strings.Fields(rows[r.row])
		if f[3] != r.state || f[len(f)-1] != r.event {
			t.Errorf("row %q: state %s, events %s; want %s, %s", rows[r.row], f[3], f[len(f)-1], r.state, r.event)
		}
	}

	tests := []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"vm", "delete", "ss_0"}, 1, "forewarn: VM \"ss_0\" is already deleted or being deleted\n"},
		{[]string{"vm", "delete", "spot_0"}, 1, "forewarn: VM \"spot_0\" is already deleted or being deleted\n"},
		{[]string{"vm", "degrade", "spot_0"}, 1, "forewarn: VM \"spot_0\" has been deleted\n"},
	}
	for _, tt := range tests {
		r := runCLI(t, tt.args...)
		if r.code != tt.code || r.stdout != "" || r.stderr != tt.stderr {
			t.Errorf("forewarn %s: exit %d, stdout %q, stderr %q; want exit %d, stderr %q",
				strings.Join(tt.args, " "), r.code, r.stdout, r.stderr, tt.code, tt.stderr)
		}
	}
	if n := len(eng.Events()); n != 4 {
		t.Errorf("%d events, want the 4 created", n)
	}
}

func TestMaintenance(t *testing.T) {
	eng, url := cliServer(t)
	t.Setenv(serverEnv, url)
	const header = "WAVE  SCOPE  TYPE  WAVE STATUS  UPDATE DOMAIN  EVENT  STATUS  VMS\n"
	if got := cliOK(t, "maintenance", "list"); got != header {
		t.Errorf("empty list:\n%s\nwant:\n%s", got, header)
	}

	out := cliOK(t, "maintenance", "start", "--scope", "web", "--type", "reboot", "--notice", "20m", "--lasts", "3m")
	if !printedID.MatchString(out) {
		t.Fatalf("maintenance start printed %q, want a wave ID and a newline", out)
	}
	ss := strings.TrimSuffix(cliOK(t, "maintenance", "start", "--type", "Freeze", "--scope", "ss"), "\n")
	waves := eng.Waves()
	if len(waves) != 2 || waves[0].ID+"\n" != out || waves[1].ID != ss {
		t.Fatalf("engine waves %+v, want the two printed, %s and %s", waves, out, ss)
	}
	web := waves[0]
	first, err := eng.Event(web.Domains[0].Event)
	if err != nil {
		t.Fatal(err)
	}
	if first.Type != forewarn.Reboot || first.Source != forewarn.Platform || first.Lasts != 3*time.Minute ||
		!first.NotBefore.Equal(ceilSecond(first.Created.Add(20*time.Minute))) {
		t.Errorf("the first domain's event is %+v, want a Platform Reboot with 20m notice, lasting 3m", first)
	}

	d0, d1, s0 := web.Domains[0].Event, web.Domains[1].Event, waves[1].Domains[0].Event
	want := "WAVE                                  SCOPE  TYPE    WAVE STATUS  UPDATE DOMAIN  EVENT                                 STATUS     VMS\n" +
		web.ID + "  web    Reboot  running      0              " + d0 + "  Scheduled  web_0\n" +
		"                                                                  1              " + d1 + "  Pending    web_1\n" +
		ss + "  ss     Freeze  running      0              " + s0 + "  Scheduled  ss_0,ss_1\n"
	if got := cliOK(t, "maintenance", "list"); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}

	// The next domain is scheduled once the previous one completes, and
	// the wave is done when the last one does.
	cliOK(t, "event", "start", d0)
	cliOK(t, "event", "complete", d0)
	cliOK(t, "event", "cancel", s0)
	want = "WAVE                                  SCOPE  TYPE    WAVE STATUS  UPDATE DOMAIN  EVENT                                 STATUS     VMS\n" +
		web.ID + "  web    Reboot  running      0              " + d0 + "  Completed  web_0\n" +
		"                                                                  1              " + d1 + "  Scheduled  web_1\n" +
		ss + "  ss     Freeze  done         0              " + s0 + "  Canceled   ss_0,ss_1\n"
	if got := cliOK(t, "maintenance", "list"); got != want {
		t.Errorf("table after the first domain:\n%s\nwant:\n%s", got, want)
	}
	cliOK(t, "event", "approve", d1)
	cliOK(t, "event", "complete", d1)
	if got := cliOK(t, "maintenance", "list"); !strings.Contains(got, web.ID+"  web    Reboot  done ") {
		t.Errorf("after the last domain the web wave is not done:\n%s", got)
	}

	var list struct{ Waves []*engine.Wave }
	if err := json.Unmarshal([]byte(cliOK(t, "maintenance", "list", "--json")), &list); err != nil {
		t.Fatalf("--json output: %v", err)
	}
	got, _ := json.Marshal(list.Waves)
	engs, _ := json.Marshal(eng.Waves())
	if !bytes.Equal(got, engs) {
		t.Errorf("--json waves:\n%s\nwant\n%s", got, engs)
	}
}

func TestErrors(t *testing.T) {
	eng, url := cliServer(t)
	scheduled := createdID(t, eng, cliOK(t, "event", "create", "--server", url, "--type", "Reboot", "--vm", "web_0")).ID
	const (
		createUsage = "usage: forewarn event create " + eventCreateSynopsis + "\n"
		startUsage  = "usage: forewarn maintenance start " + maintenanceStartSynopsis + "\n"
	)
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		// Refusals by the server.
		{"unknown VM", []string{"event", "create", "--type", "Reboot", "--vm", "nope"}, 1,
			"forewarn: unknown VM \"nope\"\n"},
		{"notice below minimum", []string{"event", "create", "--type", "Reboot", "--vm", "web_0", "--notice", "1m"}, 1,
			"forewarn: notice 1m0s is below the 15m0s minimum for Reboot (the server's --allow-short-notice lifts this)\n"},
		{"nonexistent id", []string{"event", "approve", "XYZ"}, 1, "forewarn: no event \"XYZ\"\n"},
		{"nonexistent id complete", []string{"event", "complete", "XYZ"}, 1, "forewarn: no event \"XYZ\"\n"},
		{"complete a Scheduled event", []string{"event", "complete", scheduled}, 1,
			"forewarn: event " + scheduled + " is Scheduled, not Started\n"},
		{"restart unknown VM", []string{"vm", "restart", "nope"}, 1, "forewarn: unknown VM \"nope\"\n"},
		{"redeploy notice below minimum", []string{"vm", "redeploy", "db_0", "--notice", "5m"}, 1,
			"forewarn: notice 5m0s is below the 10m0s minimum for Redeploy (the server's --allow-short-notice lifts this)\n"},
		{"two update domains", []string{"event", "create", "--type", "Reboot", "--vm", "web_0", "--vm", "web_1"}, 1,
			"forewarn: VMs \"web_0\" (update domain 0) and \"web_1\" (update domain 1) are in different update domains; one event spans one update domain\n"},
		{"wave unknown scope", []string{"maintenance", "start", "--scope", "nope", "--type", "Reboot"}, 1,
			"forewarn: no availability set, cloud service or scale set is named \"nope\"\n"},
		{"wave ambiguous scope", []string{"maintenance", "start", "--scope", "spot", "--type", "Reboot"}, 1,
			"forewarn: scope \"spot\" is ambiguous: it names more than one availability set, cloud service or scale set\n"},
		{"wave notice below minimum", []string{"maintenance", "start", "--scope", "web", "--type", "Freeze", "--notice", "1m"}, 1,
			"forewarn: notice 1m0s is below the 15m0s minimum for Freeze (the server's --allow-short-notice lifts this)\n"},
		{"delete availability set VM", []string{"vm", "delete", "web_0"}, 1,
			"forewarn: VM \"web_0\" is not in a scale set; vm delete raises a scale set Terminate\n"},
		{"delete standalone VM", []string{"vm", "delete", "db_0"}, 1,
			"forewarn: VM \"db_0\" is not in a scale set; vm delete raises a scale set Terminate\n"},
		{"delete unknown VM", []string{"vm", "delete", "nope"}, 1, "forewarn: unknown VM \"nope\"\n"},
		{"Terminate outside a scale set", []string{"event", "create", "--type", "Terminate", "--vm", "web_0"}, 1,
			"forewarn: VM \"web_0\" is not in a scale set; a Terminate is a scale set's delete notice (use a Reboot or Redeploy)\n"},
		{"Terminate notice above the timeout range", []string{"event", "create", "--type", "Terminate", "--vm", "ss_0", "--notice", "16m"}, 1,
			"forewarn: notice 16m0s is above 15m0s: a Terminate's notice is its scale set's notBeforeTimeout, PT5M to PT15M\n"},
		{"Platform Terminate", []string{"event", "create", "--type", "Terminate", "--vm", "ss_0", "--source", "Platform"}, 1,
			"forewarn: a Terminate is the scale set owner's delete; its EventSource is User, not Platform\n"},
		{"Preempt of a regular VM", []string{"event", "create", "--type", "Preempt", "--vm", "web_0"}, 1,
			"forewarn: VM \"web_0\" is not a Spot or preemptible VM; only those are preempted\n"},
		{"degrade unknown VM", []string{"vm", "degrade", "nope"}, 1, "forewarn: unknown VM \"nope\"\n"},
		{"degrade GCE VM", []string{"vm", "degrade", "gce_0"}, 1,
			"forewarn: VM \"gce_0\" is a Compute Engine VM; Redeploy events are not for Compute Engine VMs\n"},
		{"Azure Spot interruption notice", []string{"vm", "evict", "spot_0", "--notice", "10s"}, 1,
			"forewarn: VM \"spot_0\" is an Azure VM; only an EC2 Spot interruption takes a notice\n"},
		{"start an Azure VM", []string{"vm", "start", "web_0"}, 1,
			"forewarn: VM \"web_0\" is an Azure VM; only a stopped Compute Engine or EC2 VM can be started (a preempted Azure VM is deleted)\n"},
		{"Compute Engine Reboot", []string{"event", "create", "--type", "Reboot", "--vm", "gce_0"}, 1,
			"forewarn: VM \"gce_0\" is a Compute Engine VM; Reboot events are not for Compute Engine VMs\n"},
		{"degrade notice below minimum", []string{"vm", "degrade", "db_0", "--notice", "2m"}, 1,
			"forewarn: notice 2m0s is below the 10m0s minimum for Redeploy (the server's --allow-short-notice lifts this)\n"},

		// Usage errors.
		{"unknown type", []string{"event", "create", "--type", "Boom", "--vm", "web_0"}, 2,
			"forewarn: unknown event type \"Boom\" (want one of Freeze, Reboot, Redeploy, Preempt, Terminate, MIGRATE_ON_HOST_MAINTENANCE, TERMINATE_ON_HOST_MAINTENANCE, instance-reboot, system-reboot, system-maintenance, instance-retirement, instance-stop)\n" + createUsage},
		{"unknown source", []string{"event", "create", "--type", "Reboot", "--vm", "web_0", "--source", "Alien"}, 2,
			"forewarn: unknown event source \"Alien\" (want Platform or User)\n" + createUsage},
		{"missing type", []string{"event", "create", "--vm", "web_0"}, 2, "forewarn: missing --type\n" + createUsage},
		{"missing vm", []string{"event", "create", "--type", "Reboot"}, 2, "forewarn: missing --vm\n" + createUsage},
		{"bad notice", []string{"event", "create", "--type", "Reboot", "--vm", "web_0", "--notice", "abc"}, 2,
			"forewarn: invalid value \"abc\" for flag -notice: want a duration such as 15m or 90s\n" + createUsage},
		{"negative notice", []string{"event", "create", "--type", "Reboot", "--vm", "web_0", "--notice", "-5m"}, 2,
			"forewarn: invalid value \"-5m\" for flag -notice: want a duration that is not negative\n" + createUsage},
		{"bad duration", []string{"event", "create", "--type", "Reboot", "--vm", "web_0", "--duration", "x"}, 2,
			"forewarn: invalid value \"x\" for flag -duration: want a whole number of seconds\n" + createUsage},
		{"unknown flag", []string{"event", "create", "--colour", "red"}, 2,
			"forewarn: flag provided but not defined: -colour\n" + createUsage},
		{"flag without value", []string{"event", "create", "--type"}, 2,
			"forewarn: flag needs an argument: -type\n" + createUsage},
		{"create argument", []string{"event", "create", "--type", "Reboot", "--vm", "web_0", "now"}, 2,
			"forewarn: unexpected argument \"now\"\n" + createUsage},
		{"missing id", []string{"event", "approve"}, 2, "forewarn: missing event ID\nusage: forewarn event approve ID\n"},
		{"two ids", []string{"event", "cancel", "A", "B"}, 2, "forewarn: unexpected argument \"B\"\nusage: forewarn event cancel ID\n"},
		{"list argument", []string{"event", "list", "all"}, 2, "forewarn: unexpected argument \"all\"\nusage: forewarn event list [--json]\n"},
		{"missing VM name", []string{"vm", "restart"}, 2, "forewarn: missing VM name\nusage: forewarn vm restart NAME [--notice D]\n"},
		{"bad vm notice", []string{"vm", "redeploy", "db_0", "--notice", "soon"}, 2,
			"forewarn: invalid value \"soon\" for flag -notice: want a duration such as 15m or 90s\nusage: forewarn vm redeploy NAME [--notice D]\n"},
		{"wave Terminate", []string{"maintenance", "start", "--scope", "web", "--type", "Terminate"}, 2,
			"forewarn: a maintenance wave is Freeze, Reboot or Redeploy, not \"Terminate\"\n" + startUsage},
		{"wave unknown type", []string{"maintenance", "start", "--scope", "web", "--type", "Boom"}, 2,
			"forewarn: a maintenance wave is Freeze, Reboot or Redeploy, not \"Boom\"\n" + startUsage},
		{"wave missing scope", []string{"maintenance", "start", "--type", "Reboot"}, 2, "forewarn: missing --scope\n" + startUsage},
		{"wave missing type", []string{"maintenance", "start", "--scope", "web"}, 2, "forewarn: missing --type\n" + startUsage},
		{"wave bad lasts", []string{"maintenance", "start", "--scope", "web", "--type", "Reboot", "--lasts", "long"}, 2,
			"forewarn: invalid value \"long\" for flag -lasts: want a duration such as 15m or 90s\n" + startUsage},
		{"wave argument", []string{"maintenance", "start", "web", "--type", "Reboot"}, 2,
			"forewarn: unexpected argument \"web\"\n" + startUsage},
		{"wave list argument", []string{"maintenance", "list", "web"}, 2,
			"forewarn: unexpected argument \"web\"\nusage: forewarn maintenance list [--json]\n"},
		{"delete missing name", []string{"vm", "delete"}, 2, "forewarn: missing VM name\nusage: forewarn vm delete NAME [--lasts D]\n"},
		{"delete two names", []string{"vm", "delete", "ss_0", "ss_1"}, 2, "forewarn: unexpected argument \"ss_1\"\nusage: forewarn vm delete NAME [--lasts D]\n"},
		{"degrade missing name", []string{"vm", "degrade", "--notice", "48h"}, 2,
			"forewarn: missing VM name\nusage: forewarn vm degrade NAME [--notice D]\n"},
		{"degrade bad notice", []string{"vm", "degrade", "db_0", "--notice", "a week"}, 2,
			"forewarn: invalid value \"a week\" for flag -notice: want a duration such as 15m or 90s\nusage: forewarn vm degrade NAME [--notice D]\n"},
		{"no maintenance command", []string{"maintenance"}, 2, maintenanceUsage},
		{"unknown maintenance command", []string{"maintenance", "stop"}, 2, "forewarn: unknown maintenance command \"stop\"\n\n" + maintenanceUsage},
		{"no event command", []string{"event"}, 2, eventUsage},
		{"unknown event command", []string{"event", "explode"}, 2, "forewarn: unknown event command \"explode\"\n\n" + eventUsage},
		{"no vm command", []string{"vm"}, 2, vmUsage},
		{"unknown vm command", []string{"vm", "reboot"}, 2, "forewarn: unknown vm command \"reboot\"\n\n" + vmUsage},
	}
	t.Setenv(serverEnv, url)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCLI(t, tt.args...)
			if r.code != tt.code || r.stdout != "" || r.stderr != tt.stderr {
				t.Errorf("forewarn %s:\nexit %d, stdout %q, stderr:\n%s\nwant exit %d, stderr:\n%s",
					strings.Join(tt.args, " "), r.code, r.stdout, r.stderr, tt.code, tt.stderr)
			}
		})
	}
	if n := len(eng.Events()); n != 1 {
		t.Errorf("the failed commands left %d events, want the 1 created first", n)
	}
	if n := len(eng.Waves()); n != 0 {
		t.Errorf("the failed commands started %d waves", n)
	}
	if ev, _ := eng.Event(scheduled); ev.Status != forewarn.Scheduled {
		t.Errorf("the refused complete moved the event to %s", ev.Status)
	}
}

func TestUnreachableServer(t *testing.T) {
	for _, args := range [][]string{
		{"event", "list", "--server", "http://127.0.0.1:1"},
		{"event", "create", "--type", "Reboot", "--vm", "web_0", "--server", "http://127.0.0.1:1"},
		{"event", "approve", "XYZ", "--server", "http://127.0.0.1:1"},
		{"vm", "list", "--server", "http://127.0.0.1:1"},
		{"vm", "delete", "ss_0", "--server", "http://127.0.0.1:1"},
		{"vm", "degrade", "db_0", "--server", "http://127.0.0.1:1"},
		{"maintenance", "start", "--scope", "web", "--type", "Reboot", "--server", "http://127.0.0.1:1"},
		{"maintenance", "list", "--server", "http://127.0.0.1:1"},
	} {
		r := runCLI(t, args...)
		const prefix = "forewarn: cannot reach the server at http://127.0.0.1:1: "
		if r.code != 1 || r.stdout != "" || !strings.HasPrefix(r.stderr, prefix) ||
			!strings.HasSuffix(r.stderr, "connection refused\n") || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("forewarn %s: exit %d, stderr %q; want exit 1 and %q...connection refused",
				strings.Join(args, " "), r.code, r.stderr, prefix)
		}
	}

	// The environment names the server when --server does not.
	t.Setenv(serverEnv, "http://127.0.0.1:1")
	if r := runCLI(t, "vm", "list"); r.code != 1 || !strings.HasPrefix(r.stderr, "forewarn: cannot reach the server at http://127.0.0.1:1: ") {
		t.Errorf("with $%s: exit %d, stderr %q", serverEnv, r.code, r.stderr)
	}
}

func TestHelp(t *testing.T) {
	if r := runCLI(t, "event", "-h"); r.code != 0 || r.stdout != eventUsage {
		t.Errorf("event -h: exit %d, stdout %q", r.code, r.stdout)
	}
	if r := runCLI(t, "vm", "help"); r.code != 0 || r.stdout != vmUsage {
		t.Errorf("vm help: exit %d, stdout %q", r.code, r.stdout)
	}
	if r := runCLI(t, "maintenance", "--help"); r.code != 0 || r.stdout != maintenanceUsage {
		t.Errorf("maintenance --help: exit %d, stdout %q", r.code, r.stdout)
	}
	if r := runCLI(t, "help"); r.code != 0 || !strings.Contains(r.stdout, "\n  maintenance  start or list platform maintenance waves over a scope\n") {
		t.Errorf("help: exit %d, stdout %q", r.code, r.stdout)
	}
	r0 := runCLI(t, "maintenance", "start", "-h")
	if r0.code != 0 || !strings.HasPrefix(r0.stderr, "usage: forewarn maintenance start "+maintenanceStartSynopsis+"\n\nflags:\n") ||
		!strings.Contains(r0.stderr, "  -scope name\n") || !strings.Contains(r0.stderr, "  -lasts duration\n") {
		t.Errorf("maintenance start -h: exit %d, stderr:\n%s", r0.code, r0.stderr)
	}
	r := runCLI(t, "event", "create", "-h")
	if r.code != 0 || !strings.HasPrefix(r.stderr, "usage: forewarn event create "+eventCreateSynopsis+"\n\nflags:\n") ||
		!strings.Contains(r.stderr, "  -server URL\n") || !strings.Contains(r.stderr, "  -vm name\n") {
		t.Errorf("event create -h: exit %d, stderr:\n%s", r.code, r.stderr)
	}
}

func TestParseInterspersed(t *testing.T) {
	tests := []struct {
		args   []string
		pos    []string
		server string
	}{
		{[]string{"ID", "--server", "U"}, []string{"ID"}, "U"},
		{[]string{"--server", "U", "ID"}, []string{"ID"}, "U"},
		{[]string{"A", "--server=U", "B"}, []string{"A", "B"}, "U"},
		{[]string{"A", "--", "--server", "U"}, []string{"A", "--server", "U"}, ""},
		{nil, nil, ""},
	}
	for _, tt := range tests {
		c := newCommand("test", "")
		pos, err := parseInterspersed(c.fs, tt.args)
		if err != nil || !slices.Equal(pos, tt.pos) || c.server != tt.server {
			t.Errorf("parse %q = %q, server %q, %v; want %q, server %q", tt.args, pos, c.server, err, tt.pos, tt.server)
		}
	}
}

// TestVMListEvictableAndStopped checks the SPOT and STATE columns of
// Compute Engine VMs: a legacy preemptible VM can be evicted as a SPOT
// one can, and a Started stop for host maintenance shows the VM stopped,
// coming back running.
func TestVMListEvictableAndStopped(t *testing.T) {
	fleet := &forewarn.Fleet{VMs: []*forewarn.VM{
		{Name: "pre", Provider: forewarn.GCE, Zone: "z", Preemptible: true, OnHostMaintenance: "TERMINATE"},
		{Name: "spot", Provider: forewarn.GCE, Zone: "z", Spot: true, ProvisioningModel: "SPOT", OnHostMaintenance: "TERMINATE"},
		{Name: "term", Provider: forewarn.GCE, Zone: "z", OnHostMaintenance: "TERMINATE"},
		{Name: "az", Provider: forewarn.Azure},
	}}
	eng, url := fleetServer(t, fleet)
	t.Setenv(serverEnv, url)

	stop := createdID(t, eng, cliOK(t, "event", "create", "--type", "TERMINATE_ON_HOST_MAINTENANCE", "--vm", "term", "--started", "--lasts", "1h"))
	reboot := createdID(t, eng, cliOK(t, "event", "create", "--type", "Reboot", "--vm", "az", "--started", "--lasts", "1h"))
	want := "NAME  IP  PROVIDER  STATE                     ENABLED  LAST SEEN  SCOPE  ZONE  UD  SPOT         INCARNATION  EVENTS\n" +
		"pre   -   gce       running                   no       -          -      z     -   preemptible  1            -\n" +
		"spot  -   gce       running                   no       -          -      z     -   yes          1            -\n" +
		"term  -   gce       stopped (then running)    no       -          -      z     -   -            1            " + stop.ID + "\n" +
		"az    -   azure     rebooting (then running)  no       -          -      -     0   -            2            " + reboot.ID + "\n"
	if got := cliOK(t, "vm", "list"); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
	var list struct{ VMs []engine.VMInfo }
	if err := json.Unmarshal([]byte(cliOK(t, "vm", "list", "--json")), &list); err != nil {
		t.Fatal(err)
	}
	if vm := list.VMs[2]; vm.State != "stopped" || vm.ReturnsTo != "running" {
		t.Errorf("term in --json: state %q, returnsTo %q; want stopped, running", vm.State, vm.ReturnsTo)
	}
	cliOK(t, "event", "complete", stop.ID)
	if got := cliOK(t, "vm", "list"); !strings.Contains(got, "\nterm  -   gce       running ") {
		t.Errorf("after the stop completed:\n%s", got)
	}
}

func TestEventShow(t *testing.T) {
	eng, url := cliServer(t)
	t.Setenv(serverEnv, url)
	ev := createdID(t, eng, cliOK(t, "event", "create", "--type", "Reboot", "--vm", "web_0", "--notice", "20m",
		"--duration", "5", "--description", "kernel \"6.1\"", "--lasts", "2m"))
	cliOK(t, "event", "approve", ev.ID)
	ev, err := eng.Event(ev.ID)
	if err != nil {
		t.Fatal(err)
	}
	f := func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
	want := "ID:           " + ev.ID + "\n" +
		"Type:         Reboot\n" +
		"Status:       Started\n" +
		"Resources:    web_0\n" +
		"Source:       Platform\n" +
		"Description:  \"kernel \\\"6.1\\\"\"\n" +
		"Duration:     5s\n" +
		"Lasts:        2m0s\n" +
		"Created:      " + f(ev.Created) + "\n" +
		"NotBefore:    -\n" +
		"Started:      " + f(ev.StartedAt) + "\n" +
		"Ended:        -\n" +
		"Approvals:    " + f(ev.Approvals[0].At) + " by operator\n"
	if got := cliOK(t, "event", "show", strings.ToLower(ev.ID)); got != want {
		t.Errorf("event show:\n%s\nwant:\n%s", got, want)
	}
	var shown forewarn.Event
	if err := json.Unmarshal([]byte(cliOK(t, "event", "show", ev.ID, "--json")), &shown); err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(&shown)
	engs, _ := json.Marshal(ev)
	if !bytes.Equal(got, engs) {
		t.Errorf("--json:\n%s\nwant\n%s", got, engs)
	}
	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"event", "show", "XYZ"}, 1, "forewarn: no event \"XYZ\"\n"},
		{[]string{"event", "show"}, 2, "forewarn: missing event ID\nusage: forewarn event show ID [--json]\n"},
		{[]string{"event", "show", "A", "B"}, 2, "forewarn: unexpected argument \"B\"\nusage: forewarn event show ID [--json]\n"},
	} {
		if r := runCLI(t, c.args...); r.code != c.code || r.stderr != c.stderr || r.stdout != "" {
			t.Errorf("forewarn %s: exit %d, stdout %q, stderr %q; want exit %d, stderr %q", strings.Join(c.args, " "), r.code, r.stdout, r.stderr, c.code, c.stderr)
		}
	}
}

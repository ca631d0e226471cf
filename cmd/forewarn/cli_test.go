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

var printedID = regexp.MustCompile(`^[0-9A-F-]{36}\n$`)

// cliServer runs the operator API on a mem-store engine and returns the
// engine and the server's URL.
func cliServer(t *testing.T) (*engine.Engine, string) {
	t.Helper()
	fleet := &forewarn.Fleet{VMs: []*forewarn.VM{
		{Name: "web_0", IP: netip.MustParseAddr("10.0.0.4"), Provider: forewarn.Azure, AvailabilitySet: "web"},
		{Name: "web_1", IP: netip.MustParseAddr("10.0.0.5"), Provider: forewarn.Azure, AvailabilitySet: "web", UpdateDomain: 1},
		{Name: "db_0", Provider: forewarn.Azure},
	}}
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
	out := cliOK(t, "event", "create", "--type", "reboot", "--vm", "web_0", "--vm", "web_1", "--notice", "20m",
		"--duration", "5", "--source", "user", "--description", "kernel update", "--lasts", "2m", "--server", url)
	ev := createdID(t, eng, out)
	if ev.Type != forewarn.Reboot || ev.Status != forewarn.Scheduled || !slices.Equal(ev.Resources, []string{"web_0", "web_1"}) ||
		ev.Duration != 5 || ev.Source != forewarn.User || ev.Description != "kernel update" || ev.Lasts != 2*time.Minute {
		t.Errorf("created %+v, want a Scheduled User Reboot of web_0 and web_1, 5s, \"kernel update\", lasting 2m", ev)
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
	one := createdID(t, eng, cliOK(t, "event", "create", "--server", url, "--type", "Reboot", "--vm", "web_0", "--vm", "web_1", "--source", "User"))
	two := createdID(t, eng, cliOK(t, "event", "create", "--server", url, "--type", "Redeploy", "--vm", "db_0", "--started"))

	want := "ID                                    TYPE      STATUS     RESOURCES    NOTBEFORE             SOURCE\n" +
		one.ID + "  Reboot    Scheduled  web_0,web_1  " + one.NotBefore.UTC().Format("2006-01-02T15:04:05Z") + "  User\n" +
		two.ID + "  Redeploy  Started    db_0         -                     Platform\n"
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

	want := "NAME   IP        PROVIDER  STATE    AVAILABILITY SET  UPDATE DOMAIN  INCARNATION  EVENTS\n" +
		"web_0  10.0.0.4  azure     running  web               0              2            " + restart.ID + "\n" +
		"web_1  10.0.0.5  azure     running  web               1              2            " + restart.ID + "\n" +
		"db_0   -         azure     running  -                 0              2            " + redeploy.ID + "\n"
	if got := cliOK(t, "vm", "list", "--server", url); got != want {
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

func TestErrors(t *testing.T) {
	eng, url := cliServer(t)
	scheduled := createdID(t, eng, cliOK(t, "event", "create", "--server", url, "--type", "Reboot", "--vm", "web_0")).ID
	const createUsage = "usage: forewarn event create " + eventCreateSynopsis + "\n"
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

		// Usage errors.
		{"unknown type", []string{"event", "create", "--type", "Boom", "--vm", "web_0"}, 2,
			"forewarn: unknown event type \"Boom\" (want one of Freeze, Reboot, Redeploy, Preempt, Terminate, MIGRATE_ON_HOST_MAINTENANCE, TERMINATE_ON_HOST_MAINTENANCE)\n" + createUsage},
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

package main

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
)

// TestSessionCLI: a session over two hosts driven as an operator's
// automation would, with host wait, host done and host fail; the
// session and host tables; refusals. The VMs never called, so their
// events start at once and a host is Ready as soon as it starts.
func TestSessionCLI(t *testing.T) {
	fleet := &forewarn.Fleet{VMs: []*forewarn.VM{
		{Name: "az1", IP: netip.MustParseAddr("10.0.0.4"), Provider: forewarn.Azure, Host: "hv1"},
		{Name: "az2", IP: netip.MustParseAddr("10.0.0.5"), Provider: forewarn.Azure, Host: "hv2"},
		{Name: "az3", IP: netip.MustParseAddr("10.0.0.6"), Provider: forewarn.Azure, Host: "hv2", AvailabilitySet: "as"},
	}}
	_, url := fleetServer(t, fleet)
	t.Setenv(serverEnv, url)

	var v admin.SessionView
	out := cliOK(t, "session", "create", "--hosts", "hv1,hv2", "--max-unavailable", "availabilitySet=1", "--window", "* 00:00-24:00", "--json")
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("session create --json: %v\n%s", err, out)
	}
	if v.State != forewarn.SessionRunning || len(v.Hosts) != 2 || v.Spec.MaxUnavailable["availabilitySet"] != "1" || v.Spec.Action != "Reboot" {
		t.Fatalf("created: %s", out)
	}
	id := v.ID
	if got := cliOK(t, "host", "wait", "hv1", "--state", "Ready", "--timeout", "10s"); got != "host hv1 is InMaintenance in session "+id+"\n" {
		t.Fatalf("host wait hv1: %q", got)
	}
	want := "HOST  VMS  STATE          SESSION" + strings.Repeat(" ", len(id)-len("SESSION")) + "  NAMES\n" +
		"hv1   1    InMaintenance  " + id + "  az1\n" +
		"hv2   2    Pending        " + id + "  az2,az3\n"
	if got := cliOK(t, "host", "list"); got != want {
		t.Errorf("host list:\n%s\nwant:\n%s", got, want)
	}
	if got := cliOK(t, "host", "done", "hv1"); got != "host hv1: Done\n" {
		t.Fatalf("host done hv1: %q", got)
	}
	r := runCLI(t, "host", "done", "hv1")
	if r.code != 1 || r.stderr != `forewarn: host "hv1" is Done in session `+id+", not InMaintenance\n" {
		t.Errorf("host done twice: exit %d, %q", r.code, r.stderr)
	}
	cliOK(t, "host", "wait", "hv2", "--state", "InMaintenance", "--timeout", "10s")
	if got := cliOK(t, "host", "fail", "hv2", "--reason", "disk"); got != "host hv2: Failed\n" {
		t.Fatalf("host fail hv2: %q", got)
	}
	r = runCLI(t, "host", "wait", "hv2", "--state", "Done", "--timeout", "5s")
	if r.code != 1 || r.stderr != "forewarn: host hv2 failed in session "+id+": disk\n" {
		t.Errorf("host wait of a failed host: exit %d, %q", r.code, r.stderr)
	}
	show := cliOK(t, "session", "show", id)
	for _, want := range []string{"State:            Paused\n", "Reason:           host hv2 failed: disk\n", "Hosts:            1 done, 1 failed of 2\n",
		"Max unavailable:  availabilitySet=1\n", "Windows:          * 00:00-24:00\n", "hv2   Failed  2    2       "} {
		if !strings.Contains(show, want) {
			t.Errorf("session show lacks %q:\n%s", want, show)
		}
	}
	if got := cliOK(t, "session", "list"); !strings.HasPrefix(got, "ID") || !strings.Contains(got, id+"  Paused  1 done, 1 failed of 2  ") {
		t.Errorf("session list:\n%s", got)
	}
	if got := cliOK(t, "session", "resume", id); !strings.Contains(got, "State:            Done\n") && !strings.Contains(got, "State:            Running\n") {
		t.Errorf("session resume:\n%s", got)
	}
	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"session", "create"}, 2, "forewarn: give --hosts H1,H2,... or --all-hosts\nusage: forewarn session create " + sessionCreateSynopsis + "\n"},
		{[]string{"session", "create", "--hosts", "hv1", "--max-unavailable", "rack=1"}, 2, "forewarn: --max-unavailable rack=1: want N, P%, or KIND=N|P% with KIND one of availabilitySet, scaleSet, placementGroup, updateDomain, zone\nusage: forewarn session create " + sessionCreateSynopsis + "\n"},
		{[]string{"session", "create", "--hosts", "hv9"}, 1, "forewarn: no VM is on host \"hv9\"\n"},
		{[]string{"session", "create", "--hosts", "hv1", "--window", "Mon 25:00-01:00"}, 1, "forewarn: window \"Mon 25:00-01:00\": \"25:00\" is not a time of day (want DAYS HH:MM-HH:MM in UTC, such as \"Mon-Fri 22:00-06:00\" or \"* 01:00-05:00\")\n"},
		{[]string{"session", "pause", "nope"}, 1, "forewarn: no session \"nope\"\n"},
		{[]string{"host", "fail", "hv1"}, 2, "forewarn: give --reason: why the maintenance failed\nusage: forewarn host fail HOST --reason TEXT [--json]\n"},
		{[]string{"host", "wait", "hv7", "--state", "Ready"}, 1, "forewarn: no host named \"hv7\"\n"},
		{[]string{"host", "wait", "hv1", "--state", "Sleeping"}, 1, "forewarn: state \"Sleeping\": want Notifying, Ready, InMaintenance, Done or Failed\n"},
	} {
		if r := runCLI(t, c.args...); r.code != c.code || r.stderr != c.stderr {
			t.Errorf("%s: exit %d, stderr %q; want %d, %q", strings.Join(c.args, " "), r.code, r.stderr, c.code, c.stderr)
		}
	}
}

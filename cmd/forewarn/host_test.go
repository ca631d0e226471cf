package main

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/report"
)

// TestVMHosts: vm list shows a HOST column once a VM has a host, after
// NETWORK when there is one; vm show a Host line; fleet export writes
// the host.
func TestVMHosts(t *testing.T) {
	fleet := &forewarn.Fleet{VMs: []*forewarn.VM{
		{Name: "web_0", IP: netip.MustParseAddr("10.0.0.4"), Provider: forewarn.Azure},
		{Name: "web_1", IP: netip.MustParseAddr("10.0.0.5"), Provider: forewarn.Azure},
	}}
	_, url := fleetServer(t, fleet)
	t.Setenv(serverEnv, url)

	flat := "NAME   IP        PROVIDER  STATE    ENABLED  LAST SEEN  SCOPE  ZONE  UD  SPOT  INCARNATION  EVENTS\n" +
		"web_0  10.0.0.4  azure     running  no       -          -      -     0   -     1            -\n" +
		"web_1  10.0.0.5  azure     running  no       -          -      -     0   -     1            -\n"
	if got := cliOK(t, "vm", "list"); got != flat {
		t.Errorf("vm list of a fleet of no host:\n%s\nwant:\n%s", got, flat)
	}
	if out := cliOK(t, "vm", "set", "web_1", "host=hv-01"); !strings.HasPrefix(out, "web_1 changed") {
		t.Fatalf("vm set host printed %q", out)
	}
	want := "NAME   IP        HOST   PROVIDER  STATE    ENABLED  LAST SEEN  SCOPE  ZONE  UD  SPOT  INCARNATION  EVENTS\n" +
		"web_0  10.0.0.4  -      azure     running  no       -          -      -     0   -     1            -\n" +
		"web_1  10.0.0.5  hv-01  azure     running  no       -          -      -     0   -     1            -\n"
	if got := cliOK(t, "vm", "list"); got != want {
		t.Errorf("vm list:\n%s\nwant:\n%s", got, want)
	}
	if r := runCLI(t, "vm", "set", "web_0", "host=hv 02"); r.code != 1 ||
		r.stderr != `forewarn: VM "web_0": host "hv 02" is not a host name: 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit`+"\n" {
		t.Errorf("vm set of a bad host: exit %d, stderr %q", r.code, r.stderr)
	}
	cliOK(t, "vm", "add", "blue_0", "--ip", "10.0.0.4", "--set", "network=blue", "--set", "host=hv-02")
	want = "NAME    IP        NETWORK  HOST   PROVIDER  STATE    ENABLED  LAST SEEN  SCOPE  ZONE  UD  SPOT  INCARNATION  EVENTS\n" +
		"web_0   10.0.0.4  -        -      azure     running  no       -          -      -     0   -     1            -\n" +
		"web_1   10.0.0.5  -        hv-01  azure     running  no       -          -      -     0   -     1            -\n" +
		"blue_0  10.0.0.4  blue     hv-02  azure     running  no       -          -      -     0   -     1            -\n"
	if got := cliOK(t, "vm", "list"); got != want {
		t.Errorf("vm list with a network and hosts:\n%s\nwant:\n%s", got, want)
	}
	if out := cliOK(t, "vm", "list", "--json"); !strings.Contains(out, `"name": "web_1",`+"\n"+`      "ip": "10.0.0.5",`+"\n"+`      "host": "hv-01",`) {
		t.Errorf("vm list --json:\n%s", out)
	}
	if out := cliOK(t, "vm", "show", "blue_0"); !strings.Contains(out, "IP:           10.0.0.4\nNetwork:      blue\nHost:         hv-02\nProvider:") {
		t.Errorf("vm show blue_0:\n%s", out)
	}
	if out := cliOK(t, "vm", "show", "web_0"); strings.Contains(out, "Host:") {
		t.Errorf("vm show web_0, of no host:\n%s", out)
	}
	if out := cliOK(t, "fleet", "export"); !strings.Contains(out, "  - {name: blue_0, ip: 10.0.0.4, network: blue, host: hv-02, provider: azure}\n") ||
		!strings.Contains(out, "  - {name: web_0, ip: 10.0.0.4, provider: azure}\n") {
		t.Errorf("fleet export:\n%s", out)
	}
}

// TestHostCommands drives 'forewarn host list|show' against the operator
// API: the table, the JSON, one host, and refusals with exit codes and
// messages.
func TestHostCommands(t *testing.T) {
	var vms []*forewarn.VM
	for i, c := range []struct{ name, host string }{
		{"web_0", "hv-01"}, {"web_1", "hv-02"}, {"db_0", "hv-01"}, {"lone", ""},
		{"b_5", "big"}, {"b_1", "big"}, {"b_2", "big"}, {"b_3", "big"}, {"b_4", "big"}, {"b_0", "big"},
	} {
		vms = append(vms, &forewarn.VM{Name: c.name, IP: netip.AddrFrom4([4]byte{10, 0, 1, byte(i + 2)}), Provider: forewarn.Azure, Host: c.host})
	}
	_, url := fleetServer(t, &forewarn.Fleet{VMs: vms})
	t.Setenv(serverEnv, url)

	want := "HOST   VMS  STATE  SESSION  NAMES\n" +
		"big    6    -      -        b_0,b_1,b_2,b_3 and 2 more\n" +
		"hv-01  2    -      -        db_0,web_0\n" +
		"hv-02  1    -      -        web_1\n"
	if out := cliOK(t, "host", "list"); out != want {
		t.Errorf("host list:\n%s\nwant:\n%s", out, want)
	}
	wantJSON := `{
  "hosts": [
    {
      "name": "big",
      "vms": [
        "b_0",
        "b_1",
        "b_2",
        "b_3",
        "b_4",
        "b_5"
      ]
    },
    {
      "name": "hv-01",
      "vms": [
        "db_0",
        "web_0"
      ]
    },
    {
      "name": "hv-02",
      "vms": [
        "web_1"
      ]
    }
  ]
}
`
	if out := cliOK(t, "host", "list", "--json"); out != wantJSON {
		t.Errorf("host list --json:\n%s\nwant:\n%s", out, wantJSON)
	}
	if out, want := cliOK(t, "host", "show", "hv-01"), "Name:  hv-01\nVMs:   2\n\ndb_0\nweb_0\n"; out != want {
		t.Errorf("host show hv-01:\n%s\nwant:\n%s", out, want)
	}
	if out, want := cliOK(t, "host", "show", "hv-02", "--json"), "{\n  \"name\": \"hv-02\",\n  \"vms\": [\n    \"web_1\"\n  ]\n}\n"; out != want {
		t.Errorf("host show hv-02 --json:\n%s\nwant:\n%s", out, want)
	}
	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"host", "show", "nope"}, 1, "forewarn: no host named \"nope\"\n"},
		{[]string{"host", "show"}, 2, "forewarn: missing host name\nusage: forewarn host show " + hostShowSynopsis + "\n"},
		{[]string{"host", "show", "hv-01", "hv-02"}, 2, "forewarn: unexpected argument \"hv-02\"\nusage: forewarn host show " + hostShowSynopsis + "\n"},
		{[]string{"host", "list", "hv-01"}, 2, "forewarn: unexpected argument \"hv-01\"\nusage: forewarn host list " + hostListSynopsis + "\n"},
		{[]string{"host", "list", "--wide"}, 2, "forewarn: flag provided but not defined: -wide\nusage: forewarn host list " + hostListSynopsis + "\n"},
		{[]string{"host", "frob"}, 2, "forewarn: unknown host command \"frob\"\n\n" + hostUsage},
		{[]string{"host"}, 2, hostUsage},
	} {
		r := runCLI(t, c.args...)
		if r.code != c.code || r.stderr != c.stderr || r.stdout != "" {
			t.Errorf("forewarn %s: exit %d %q (stdout %q), want %d %q", strings.Join(c.args, " "), r.code, r.stderr, r.stdout, c.code, c.stderr)
		}
	}
	t.Setenv(serverEnv, "http://127.0.0.1:1")
	if r := runCLI(t, "host", "list"); r.code != 1 || !strings.HasPrefix(r.stderr, "forewarn: cannot reach the server at http://127.0.0.1:1: ") {
		t.Errorf("host list of no server: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestReportTableHosts: the report's VM table has a HOST column once a
// VM has a host, after NETWORK when there is one.
func TestReportTableHosts(t *testing.T) {
	rep := &report.Report{VMs: []report.VM{{Name: "flat", Provider: forewarn.Azure}, {Name: "onhv", Host: "hv-01", Provider: forewarn.Azure}}}
	var b strings.Builder
	if err := printReport(&b, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "VM    HOST   API    REQUESTS") || !strings.Contains(b.String(), "\nflat  -      azure  0 ") ||
		!strings.Contains(b.String(), "\nonhv  hv-01  azure  0 ") {
		t.Errorf("report with a host:\n%s", b.String())
	}
	rep.VMs = append(rep.VMs, report.VM{Name: "blue", Network: "blue", Provider: forewarn.Azure})
	b.Reset()
	if err := printReport(&b, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "VM    NETWORK  HOST   API    REQUESTS") || !strings.Contains(b.String(), "\nonhv  -        hv-01  azure  0 ") ||
		!strings.Contains(b.String(), "\nblue  blue     -      azure  0 ") {
		t.Errorf("report with a network and a host:\n%s", b.String())
	}
}

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
)

// TestScaleSetCommands drives 'forewarn scaleset list|set' against the
// operator API: the table, a change of timeout and opt-in, its effect on
// the next delete, and refusals with exit codes and messages.
func TestScaleSetCommands(t *testing.T) {
	eng, url := cliServer(t)
	t.Setenv(serverEnv, url)
	want := "NAME  VMS  TERMINATE TIMEOUT  TERMINATE NOTIFICATIONS  SET BY\n" +
		"spot  1    PT5M               on                       fleet\n" +
		"ss    2    PT5M               on                       fleet\n"
	if out := cliOK(t, "scaleset", "list"); out != want {
		t.Fatalf("scaleset list:\n%s\nwant:\n%s", out, want)
	}
	if out := cliOK(t, "scaleset", "set", "ss", "--terminate-timeout", "PT12M30S"); out != "ss terminateNotBeforeTimeout PT12M30S, terminate notifications on\n" {
		t.Fatalf("scaleset set printed %q", out)
	}
	ev := createdID(t, eng, cliOK(t, "vm", "delete", "ss_0"))
	if notice := ev.NotBefore.Sub(ev.Created); notice < 12*time.Minute+30*time.Second || notice > 12*time.Minute+31*time.Second {
		t.Errorf("delete after the change: notice %s, want 12m30s", notice)
	}
	if out := cliOK(t, "scaleset", "set", "ss", "--terminate-notifications", "off", "--terminate-timeout", "6m"); out != "ss terminateNotBeforeTimeout PT6M, terminate notifications off\n" {
		t.Fatalf("scaleset set printed %q", out)
	}
	gone := createdID(t, eng, cliOK(t, "vm", "delete", "ss_1"))
	if gone.Status != forewarn.Completed {
		t.Errorf("delete with notifications off: %s, want Completed at once", gone.Status)
	}
	if out := cliOK(t, "scaleset", "list"); !strings.Contains(out, "ss    2    PT6M               off                      operator\n") {
		t.Fatalf("scaleset list after the change:\n%s", out)
	}
	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"scaleset", "set", "nope", "--terminate-timeout", "10m"}, 1, "forewarn: no scale set is named \"nope\"\n"},
		{[]string{"scaleset", "set", "ss", "--terminate-timeout", "PT20M"}, 1,
			"forewarn: Terminate timeout 20m0s is not a whole number of seconds from PT5M to PT15M (5m to 15m)\n"},
		{[]string{"scaleset", "set", "ss", "--terminate-timeout", "soon"}, 1,
			"forewarn: invalid terminateNotBeforeTimeout \"soon\": want a duration such as 15m or 90s\n"},
		{[]string{"scaleset", "set", "ss"}, 2,
			"forewarn: nothing to change: give --terminate-timeout, --terminate-notifications, or both\nusage: forewarn scaleset set " + scaleSetSetSynopsis + "\n"},
		{[]string{"scaleset", "set", "ss", "--terminate-notifications", "maybe"}, 2,
			"forewarn: --terminate-notifications must be on or off, not \"maybe\"\nusage: forewarn scaleset set " + scaleSetSetSynopsis + "\n"},
		{[]string{"scaleset", "frob"}, 2, "forewarn: unknown scaleset command \"frob\"\n\n" + scaleSetUsage},
	} {
		r := runCLI(t, c.args...)
		if r.code != c.code || r.stderr != c.stderr {
			t.Errorf("forewarn %s: exit %d %q, want %d %q", strings.Join(c.args, " "), r.code, r.stderr, c.code, c.stderr)
		}
	}
}

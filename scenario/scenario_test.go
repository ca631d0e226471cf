package scenario_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forewarn/forewarn/scenario"
)

// TestFileErrors checks that every mistake in a scenario file is an
// *Error whose message names the file, the line and the key.
func TestFileErrors(t *testing.T) {
	const fleet = "fleet:\n  vms:\n    - {name: web_0, ip: 127.0.0.2}\n    - {name: web_1, ip: 127.0.0.3}\n"
	const create = "  - at: 0s\n    create: {type: Freeze, vm: [web_0], notice: 2s, id: f1}\n"
	for _, c := range []struct{ name, src, want string }{
		{"unknown top-level key", fleet + "stepz:\n" + create, `:5: scenario.stepz: unknown key (want duration, expect, fleet, fleetFile, steps)`},
		{"no steps", fleet, `:1: steps: missing`},
		{"bad offset", fleet + "steps:\n  - at: soon\n    approve: f1\n", `:6: steps[0].at: "soon": want a duration such as 15m or 90s`},
		{"negative notice", fleet + "steps:\n  - create: {type: Freeze, vm: web_0, notice: -2s}\n", `:6: steps[0].create.notice: "-2s": want a duration that is not negative`},
		{"unknown type", fleet + "steps:\n  - at: 1s\n    create: {type: Freez, vm: [web_0]}\n", `:7: steps[0].create.type: unknown event type "Freez"`},
		{"unknown create key", fleet + "steps:\n  - create: {type: Freeze, vms: [web_0]}\n", `:6: steps[0].create.vms: unknown key`},
		{"missing vm", fleet + "steps:\n  - create: {type: Freeze}\n", `:6: steps[0].create.vm: missing`},
		{"two actions", fleet + "steps:\n  - approve: f1\n    cancel: f1\n" + create, `:7: steps[0].cancel: a step has one action; this one already has approve`},
		{"no action", fleet + "steps:\n  - at: 1s\n", `:6: steps[0]: no action`},
		{"undefined ref", fleet + "steps:\n" + create + "  - at: 1s\n    approve: f2\n", `:8: approve: no step names an event "f2"`},
		{"ref runs later", fleet + "steps:\n  - at: 0s\n    approve: f1\n  - at: 1s\n    create: {type: Freeze, vm: [web_0], id: f1}\n", `:6: approve: event "f1" is created by the step at line 8, which runs later (at 1s)`},
		{"duplicate id", fleet + "steps:\n" + create + create, `:9: steps[1].create.id: id "f1" is already given by the step at line 6`},
		{"wave type", fleet + "steps:\n  - wave: {scope: web, type: Preempt}\n", `:6: steps[0].wave.type: a maintenance wave is Freeze, Reboot or Redeploy, not "Preempt"`},
		{"reschedule time", fleet + "steps:\n" + create + "  - reschedule: {event: f1, notBefore: tomorrow}\n", `:8: steps[1].reschedule.notBefore: "tomorrow" is neither`},
		{"unknown expectation", fleet + "steps:\n" + create + "expect:\n  - approves: {event: f1}\n", `:9: expect[0].approves: unknown expectation`},
		{"expectation event", fleet + "steps:\n" + create + "expect:\n  - approved: {event: f9, within: 3s}\n", `:9: expect[0].approved.event: no step names an event "f9"`},
		{"expectation missing key", fleet + "steps:\n" + create + "expect:\n  - polls: {vm: web_0}\n", `:9: expect[0].polls.every: missing`},
		{"unknown finding", fleet + "steps:\n" + create + "expect:\n  - noFinding: {kind: rude}\n", `:9: expect[0].noFinding.kind: unknown finding "rude"`},
		{"VM not in fleet", fleet + "steps:\n" + create + "expect:\n  - polls: {vm: db_0, every: 1s}\n", `:9: no VM named "db_0" in the scenario's fleet`},
		{"bad fleet entry", "fleet:\n  vms:\n    - {name: web_0, ip: 127.0.0.2}\n    - {name: web_1, ip: nope}\nsteps:\n" + create, `:4: fleet: vms[1] (web_1): ip "nope" is not an IP address (or any)`},
		{"unknown fleet key", "fleet:\n  vms:\n    - name: web_0\n      ip: 127.0.0.2\n      colour: blue\nsteps:\n" + create, `:5: fleet: unknown key colour of a VM`},
		{"fleet and fleetFile", fleet + "fleetFile: other.yaml\nsteps:\n" + create, `:5: fleetFile: give fleet or fleetFile, not both`},
		{"not YAML", "steps: [\n", `: did not find expected node content`},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "s.yaml")
			if err := os.WriteFile(file, []byte(c.src), 0o644); err != nil {
				t.Fatal(err)
			}
			sc, err := scenario.Load(file)
			var se *scenario.Error
			if !errors.As(err, &se) || !strings.HasPrefix(err.Error(), file) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Load: %v, %#v; want an *Error naming %s and %q", sc, err, file, c.want)
			}
		})
	}
	_, err := scenario.Load("missing.yaml")
	var se *scenario.Error
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %#v; want an *Error naming it", err)
	}
}

package scenario_test

import (
	"context"
	"encoding/xml"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/forewarn/forewarn/agent"
	"github.com/forewarn/forewarn/forewarntest"
	"github.com/forewarn/forewarn/scenario"
)

// runAgents runs the node agent, approving, as each VM of srv's fleet
// but those in skip, until the test's bubble ends.
func runAgents(t *testing.T, srv *forewarntest.Server, skip ...string) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for _, vm := range srv.Fleet().VMs {
		if slices.Contains(skip, vm.Name) {
			continue
		}
		a, err := agent.New(agent.Config{Provider: agent.ProviderAzure, Endpoint: srv.URL(), VM: vm.Name,
			HTTPClient: srv.HTTPClient(vm.Name), Approve: true})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { a.Run(ctx) })
	}
}

// TestScaleInScenario plays examples/scenarios/scale-in.yaml against a
// forewarntest server of the scenario's fleet while the node agent plays
// each VM: the library use a Go test makes of a scenario file. In a
// synctest bubble the five seconds of the timeline pass at once, and
// the output is exact to the millisecond.
func TestScaleInScenario(t *testing.T) {
	const file = "../examples/scenarios/scale-in.yaml"
	synctest.Test(t, func(t *testing.T) {
		sc, err := scenario.Load(file)
		if err != nil {
			t.Fatal(err)
		}
		srv := forewarntest.NewServer(t, sc.Fleet())
		runAgents(t, srv)
		res, err := sc.Run(t.Context(), scenario.Target{Client: srv.AdminClient(), Fresh: true})
		if err != nil {
			t.Fatal(err)
		}
		want := `scenario ../examples/scenarios/scale-in.yaml: 2 steps, 6 expectations; timeline started at 00:00:00.000
ok   approved t0 by vmss_0 within 2s
ok   approved t1 by vmss_1 within 2s
ok   approved t0 before its NotBefore
ok   approved t1 before its NotBefore
ok   vmss_0, vmss_1, vmss_2 approves only its own Terminate
ok   no finding api-version-hides-events
scenario ../examples/scenarios/scale-in.yaml: 0 of 6 checks failed, after 5s
`
		if got := res.Output(); got != want || !res.Passed() || len(res.Failed()) != 0 {
			t.Errorf("passed %v, output:\n%s\nwant:\n%s", res.Passed(), got, want)
		}
		b, err := res.JUnit()
		if err != nil {
			t.Fatal(err)
		}
		var suites struct {
			Tests    int `xml:"tests,attr"`
			Failures int `xml:"failures,attr"`
			Suite    struct {
				Name string `xml:"name,attr"`
				Time string `xml:"time,attr"`
			} `xml:"testsuite"`
		}
		if err := xml.Unmarshal(b, &suites); err != nil || suites.Tests != 6 || suites.Failures != 0 ||
			suites.Suite.Name != file || suites.Suite.Time != "5.000" {
			t.Errorf("JUnit %+v, %v:\n%s", suites, err, b)
		}
	})
}

// TestScaleInScenarioCatchesASilentVM plays the same scenario with no
// agent on vmss_1: its Terminate goes unapproved, and exactly the two
// expectations about it fail, with their reasons.
func TestScaleInScenarioCatchesASilentVM(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc, err := scenario.Load("../examples/scenarios/scale-in.yaml")
		if err != nil {
			t.Fatal(err)
		}
		srv := forewarntest.NewServer(t, sc.Fleet())
		runAgents(t, srv, "vmss_1")
		res, err := sc.Run(t.Context(), scenario.Target{Client: srv.AdminClient(), Fresh: true})
		if err != nil {
			t.Fatal(err)
		}
		var got []scenario.Check
		for _, c := range res.Failed() {
			c.Evidence = ""
			got = append(got, c)
		}
		want := []scenario.Check{
			{Name: "approved t1 by vmss_1 within 2s", Failed: true, Message: "t1: not approved by vmss_1 within 2s"},
			{Name: "approved t1 before its NotBefore", Failed: true, Message: "t1: not approved before its NotBefore +5s"},
		}
		if res.Passed() || !slices.Equal(got, want) {
			t.Errorf("passed %v, failed %+v; want %+v\n%s", res.Passed(), got, want, res.Output())
		}
	})
}

// TestStepAfterAFailedStep: a step naming an event whose create the
// server refused fails with the reason, as a Check, and the run carries
// on; it does not crash.
func TestStepAfterAFailedStep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc, err := scenario.Parse("failed-step.yaml", []byte(`fleet:
  vms:
    - {name: web_0, ip: 127.0.0.2}
steps:
  - at: 0s
    create: {type: Terminate, vm: [web_0], id: f1}   # refused: not in a scale set
  - at: 100ms
    approve: f1
expect:
  - notThrottled: true
`))
		if err != nil {
			t.Fatal(err)
		}
		srv := forewarntest.NewServer(t, sc.Fleet())
		res, err := sc.Run(t.Context(), scenario.Target{Client: srv.AdminClient(), Fresh: true})
		if err != nil {
			t.Fatal(err)
		}
		want := `scenario failed-step.yaml: 2 steps, 1 expectations; timeline started at 00:00:00.000
FAIL step at 0s (line 5): create f1: VM "web_0" is not in a scale set; a Terminate is a scale set's delete notice (use a Reboot or Redeploy)
FAIL step at 100ms (line 7): approve f1: event f1 was not created: its step failed
ok   no VM is throttled
scenario failed-step.yaml: 2 of 3 checks failed, after 100ms
`
		if got := res.Output(); got != want || res.Passed() || len(res.Failed()) != 2 {
			t.Errorf("passed %v, output:\n%s\nwant:\n%s", res.Passed(), got, want)
		}
	})
}

// TestFleetMustFitTheServer: a scenario whose fleet differs from the
// server's, or that names a VM the server lacks, is an *Error before
// anything runs, fresh server or not.
func TestFleetMustFitTheServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := forewarntest.NewServer(t, forewarntest.Fleet(t, `vms: [{name: web_0, ip: 127.0.0.2}]`))
		for _, c := range []struct{ src, want string }{
			{"fleet:\n  vms:\n    - {name: web_0, ip: 127.0.0.9}\nsteps:\n  - create: {type: Reboot, vm: web_0}\n",
				"s.yaml: fleet: VM web_0 is azure 127.0.0.9 in the scenario but azure 127.0.0.2 on the server"},
			{"fleet:\n  vms:\n    - {name: web_1, ip: 127.0.0.3}\nsteps:\n  - create: {type: Reboot, vm: web_1}\n",
				"s.yaml: fleet: VM web_1 is not in the server's fleet"},
			{"steps:\n  - create: {type: Reboot, vm: web_1}\n",
				`s.yaml:2: no VM named "web_1" in the server's fleet`},
		} {
			sc, err := scenario.Parse("s.yaml", []byte(c.src))
			if err != nil {
				t.Fatal(err)
			}
			for _, fresh := range []bool{false, true} {
				var out strings.Builder
				res, err := sc.Run(t.Context(), scenario.Target{Client: srv.AdminClient(), Fresh: fresh}, scenario.WithOutput(&out))
				var se *scenario.Error
				if !errors.As(err, &se) || err.Error() != c.want || res != nil || out.Len() != 0 {
					t.Errorf("fresh %v: %v, %q, output %q; want only %q", fresh, res, err, out.String(), c.want)
				}
			}
		}
		if evs := srv.Engine().Events(); len(evs) != 0 {
			t.Errorf("events were created: %v", evs)
		}
	})
}

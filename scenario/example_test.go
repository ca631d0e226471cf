package scenario_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/forewarn/forewarn/agent"
	"github.com/forewarn/forewarn/forewarntest"
	"github.com/forewarn/forewarn/scenario"
)

// A scenario played against a forewarntest server of its own fleet,
// while the code under test (here the node agent, approving) plays the
// VM. In a test, forewarntest.NewServer(t, sc.Fleet()) starts the
// server and closes it at the end, and inside a testing/synctest bubble
// the timeline passes in no real time.
func Example() {
	sc, err := scenario.Parse("drain.yaml", []byte(`
fleet:
  vms:
    - {name: web_0, ip: 127.0.0.2}
steps:
  - create: {type: Reboot, vm: web_0, notice: 1s, lasts: 1s, id: reboot}
expect:
  - approved: {event: reboot, by: web_0, within: 1s}
  - approvedBeforeNotBefore: {event: reboot}
  - noFinding: {kind: no-metadata-header}
`))
	if err != nil {
		fmt.Println(err) // an *scenario.Error, naming the line and the key
		return
	}
	srv, err := forewarntest.Start(sc.Fleet())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The code under test, as VM web_0: it must reach the metadata API
	// from web_0's address, with the client the server gives.
	a, err := agent.New(agent.Config{Provider: agent.ProviderAzure, Endpoint: srv.URL(), VM: "web_0",
		HTTPClient: srv.HTTPClient("web_0"), PollInterval: 200 * time.Millisecond, Approve: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	go a.Run(ctx)

	res, err := sc.Run(ctx, scenario.Target{Client: srv.AdminClient(), Fresh: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range res.Checks {
		fmt.Println(!c.Failed, c.Name)
	}
	fmt.Println("passed:", res.Passed())
	// Output:
	// true approved reboot by web_0 within 1s
	// true approved reboot before its NotBefore
	// true no finding no-metadata-header
	// passed: true
}

// A mistake in a scenario file is an *Error naming the file, the line
// and the key.
func ExampleParse() {
	_, err := scenario.Parse("drain.yaml", []byte("steps:\n  - at: soon\n    approve: f1\n"))
	var se *scenario.Error
	fmt.Println(errors.As(err, &se), err)
	// Output: true drain.yaml:2: steps[0].at: "soon": want a duration such as 15m or 90s
}

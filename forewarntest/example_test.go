package forewarntest_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/fleetfile"
	"github.com/forewarn/forewarn/forewarntest"
)

// In a test, forewarntest.NewServer(t, forewarntest.Fleet(t, yaml)) does
// what Start does here and closes the server when the test ends; its
// helpers fail the test instead of panicking.
func Example() {
	fleet, err := fleetfile.Parse([]byte(`vms: [{name: web_0, ip: 127.0.0.2}]`))
	if err != nil {
		fmt.Println(err)
		return
	}
	srv, err := forewarntest.Start(fleet)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	ctx := context.Background()

	// The operator announces a Reboot in 10 minutes.
	ev := srv.Reboot("web_0", forewarntest.EventOptions{Notice: 10 * time.Minute})

	// The VM sees it, with the Azure client, from its own address ...
	vm := srv.AzureClient("web_0")
	doc, err := vm.Document(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	n := doc.Notices[0]
	fmt.Println(n.Type, n.Status, n.Resources, n.ID == ev.ID, n.NotBefore.Equal(ev.NotBefore))

	// ... is ready early, and approves it: it starts at once.
	if err := vm.Approve(ctx, ev.ID); err != nil {
		fmt.Println(err)
		return
	}
	ev = srv.Wait(ev.ID, forewarn.Started)
	fmt.Println(ev.Status, "approved by", ev.Approvals[0].By)
	// Output:
	// Reboot Scheduled [web_0] true true
	// Started approved by web_0
}

// A VM's plain HTTP client reads the metadata APIs as curl on the VM
// would.
func ExampleServer_HTTPClient() {
	fleet, _ := fleetfile.Parse([]byte(`vms: [{name: web_0, ip: 127.0.0.2}]`))
	srv, err := forewarntest.Start(fleet)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()

	req, _ := http.NewRequest("GET", srv.URL()+"/metadata/scheduledevents?api-version=2020-07-01", nil)
	req.Header.Set("Metadata", "true")
	resp, err := srv.HTTPClient("web_0").Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.Status)
	fmt.Println(string(body))
	// Output:
	// 200 OK
	// {"DocumentIncarnation":1,"Events":[]}
}

// A Compute Engine VM's maintenance-event key flips while a live
// migration runs.
func ExampleServer_GCEClient() {
	fleet, _ := fleetfile.Parse([]byte(`vms: [{name: gce_0, ip: 127.0.0.3, provider: gce}]`))
	srv, err := forewarntest.Start(fleet)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	ctx := context.Background()
	vm := srv.GCEClient("gce_0")

	const key = "instance/maintenance-event"
	before, _, _ := vm.Get(ctx, key)
	ev := srv.Create(engine.Spec{Type: forewarn.MigrateOnHostMaintenance, VMs: []string{"gce_0"}, Started: true, Lasts: time.Minute})
	during, _, _ := vm.Get(ctx, key)
	srv.Complete(ev.ID)
	after, _, _ := vm.Get(ctx, key)
	fmt.Println(before, during, after)
	// Output:
	// NONE MIGRATE_ON_HOST_MAINTENANCE NONE
}

// An EC2 Spot VM's interruption: the rebalance recommendation comes at
// once, and with the default two minutes of notice, so does the
// interruption notice.
func ExampleServer_AWSClient() {
	fleet, _ := fleetfile.Parse([]byte(`vms:
  - {name: spot_0, ip: 127.0.0.4, provider: aws, instanceId: i-0123456789abcdef0, market: spot}
`))
	srv, err := forewarntest.Start(fleet)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	ctx := context.Background()

	ev := srv.Evict("spot_0")
	vm := srv.AWSClient("spot_0")
	rebalance, err := vm.Rebalance(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	action, err := vm.InstanceAction(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(rebalance != nil, action.Action, action.Time.Equal(ev.NotBefore))
	// Output:
	// true terminate true
}

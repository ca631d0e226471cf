package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/compute/metadata"
	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/aws"
	"github.com/forewarn/forewarn/internal/etcdtest"
	"github.com/forewarn/forewarn/internal/testpki"
)

// TestRelayNetns runs 'forewarn relay' as it is deployed, in network
// namespaces the test makes and removes: two hosts, each a namespace
// whose relay listens on 169.254.169.254:80, and on each host VMs, each
// a namespace whose route to 169.254.169.254 leads to its host. In the
// root namespace two replicas of 'forewarn serve' share etcd, their
// relay listeners on the root end of host-a's link, which host-b reaches
// through its own.
//
//	host-a (network blue):  a_gce 198.18.10.2, a_ec2 198.18.10.3
//	host-b (network green): b_gce 198.18.10.2, b_az  198.18.10.4
//
// a_gce and b_gce have one address on two networks; the fleet also has
// a_az, at b_az's address on blue, where no VM runs. Real clients run in
// the VMs with their default endpoints: the Compute Engine metadata
// library, the AWS SDK's IMDS client (IMDSv2) and 'forewarn agent' on
// Azure. Every address the test uses is in 198.18.0.0/15 or
// 169.254.0.0/16.
func TestRelayNetns(t *testing.T) {
	lab := newNetLab(t, []netnsVM{
		{name: "a_gce", host: "a", ip: "198.18.10.2"},
		{name: "a_ec2", host: "a", ip: "198.18.10.3"},
		{name: "b_gce", host: "b", ip: "198.18.10.2"},
		{name: "b_az", host: "b", ip: "198.18.10.4"},
	})
	ctx := t.Context()

	// Certificates: the servers' names the address the relays dial; the
	// stranger's is another authority's, unlisted's a name of no relay.
	ca, err := testpki.NewCA("forewarn relay netns CA")
	if err != nil {
		t.Fatal(err)
	}
	other, err := testpki.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	must := func(f testpki.Files, err error) testpki.Files {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	srvPKI := must(ca.Write(dir, "server", "forewarn", false, lab.serverIP()))
	hostA := must(ca.Write(dir, "host-a", "host-a", true))
	hostB := must(ca.Write(dir, "host-b", "host-b", true))
	stranger := must(other.Write(dir, "stranger", "host-a", true))
	unlisted := must(ca.Write(dir, "unlisted", "host-nobody", true))
	relays := filepath.Join(dir, "relays.yaml")
	if err := os.WriteFile(relays, []byte("host-a: [blue]\nhost-b: [green]\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// Two replicas on etcd, each with a relay listener.
	etcd := etcdtest.Start(t)
	c := newHACluster(t, etcd.Endpoints(), "/forewarn/relay-netns/", relayNetnsFleet, "2s", "5s")
	c.args = []string{"--relay-addr", lab.serverIP() + ":0", "--relay-cert", srvPKI.Cert, "--relay-key", srvPKI.Key,
		"--relay-ca", srvPKI.CA, "--relays", relays}
	r1, r2 := c.add("r1"), c.add("r2")
	var st *forewarn.ClusterStatus
	eventually(t, 15*time.Second, func() bool {
		st = replicaStatus(t, r1)
		_, ok := settledStatus(st, "r1", "r2")
		return ok
	}, func() string { return fmt.Sprintf("cluster status %+v", st) })
	servers := "https://" + r1.s(t).relay + ",https://" + r2.s(t).relay

	// A relay on each host, replica r1 first.
	relayA := lab.relay(t, "a", hostA, srvPKI.CA, "blue=169.254.169.254:80", servers)
	lab.relay(t, "b", hostB, srvPKI.CA, "green=169.254.169.254:80", servers)

	// A shell in each VM: each reaches its host's relay and is itself.
	sh := map[string]*vmShell{}
	for _, vm := range lab.vms {
		sh[vm.name] = lab.shell(t, vm.name)
	}
	gceName := shellRequest{Op: "http", Method: "GET", URL: "http://169.254.169.254/computeMetadata/v1/instance/name",
		Header: map[string]string{"Metadata-Flavor": "Google"}}
	azName := shellRequest{Op: "http", Method: "GET", URL: "http://169.254.169.254/metadata/instance/compute/name?api-version=2021-02-01&format=text",
		Header: map[string]string{"Metadata": "true"}}
	for vm, req := range map[string]shellRequest{"a_gce": gceName, "b_gce": gceName, "b_az": azName,
		"a_ec2": {Op: "aws", Path: "instance-id"}} {
		want := vm
		if vm == "a_ec2" {
			want = relayNetnsEC2ID
		}
		var a shellAnswer
		eventually(t, 10*time.Second, func() bool {
			a = sh[vm].do(t, req)
			return a.Status == 200 && a.Body == want
		}, func() string { return fmt.Sprintf("%s's name through its relay: %+v, want 200 %q", vm, a, want) })
	}

	// 1. The Compute Engine library in a_gce and b_gce, one address on
	// two networks: each is itself and sees only its own VM's events.
	wa, wb := lab.gceWatch(t, "a_gce"), lab.gceWatch(t, "b_gce")
	for _, w := range []*gceWatcher{wa, wb} {
		if l, _ := w.next(t); l.Kind != "name" || l.Value != w.vm || l.Err != "" {
			t.Fatalf("%s's InstanceName: %+v, want %q", w.vm, l, w.vm)
		}
		w.want(t, "NONE")
	}
	hostMaintenance := func(r *replica, vm, typ string) (*forewarn.Event, time.Time) {
		t.Helper()
		sent := time.Now()
		// Within the 60 s lead of a VM that reads its key: flipped at once.
		ev, err := r.client(t).CreateEvent(ctx, admin.CreateRequest{Type: typ, VMs: []string{vm}, Notice: "30s", Lasts: "10m"})
		if err != nil {
			t.Fatalf("create %s of %s on %s: %v", typ, vm, r.name, err)
		}
		return ev, sent
	}
	maintenance := shellRequest{Op: "http", Method: "GET", URL: "http://169.254.169.254/computeMetadata/v1/instance/maintenance-event",
		Header: map[string]string{"Metadata-Flavor": "Google"}}
	evA, _ := hostMaintenance(r1, "a_gce", "MIGRATE_ON_HOST_MAINTENANCE")
	wa.want(t, "MIGRATE_ON_HOST_MAINTENANCE")
	if a := sh["b_gce"].do(t, maintenance); a.Status != 200 || a.Body != "NONE" {
		t.Fatalf("b_gce's maintenance-event after a_gce's migration: %+v, want 200 NONE", a)
	}
	evB, sentB := hostMaintenance(r1, "b_gce", "MIGRATE_ON_HOST_MAINTENANCE")
	if at := wb.want(t, "MIGRATE_ON_HOST_MAINTENANCE"); at.Before(sentB) {
		t.Fatalf("b_gce's watcher saw MIGRATE_ON_HOST_MAINTENANCE at %v, before b_gce's event was created at %v: it was a_gce's", at, sentB)
	}
	for _, e := range []*forewarn.Event{evA, evB} {
		if _, err := r1.client(t).Cancel(ctx, e.ID); err != nil {
			t.Fatal(err)
		}
	}
	wa.want(t, "NONE")
	wb.want(t, "NONE")

	// 2. The AWS SDK in a_ec2, IMDSv2 on its default endpoint: its own
	// instance ID (read above) and its own scheduled event.
	ec2Scheduled := shellRequest{Op: "aws", Path: "events/maintenance/scheduled"}
	if a := sh["a_ec2"].do(t, ec2Scheduled); a.Status != 200 || a.Body != "[]" {
		t.Fatalf("a_ec2's scheduled events before any: %+v", a)
	}
	evE, err := r1.client(t).CreateEvent(ctx, admin.CreateRequest{Type: "system-reboot", VMs: []string{"a_ec2"}, Notice: "10m", Lasts: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	wantE := []sdkEvent{{NotBefore: evE.NotBefore.UTC().Format(aws.EventTime), Code: "system-reboot", Description: "scheduled reboot",
		EventId: aws.EventID(evE.ID), NotAfter: evE.NotBefore.Add(time.Hour).UTC().Format(aws.EventTime),
		NotBeforeDeadline: evE.Deadline.UTC().Format(aws.EventTime), State: "active"}}
	var gotE []sdkEvent
	eventually(t, 10*time.Second, func() bool {
		a := sh["a_ec2"].do(t, ec2Scheduled)
		if a.Status != 200 {
			t.Fatalf("a_ec2's scheduled events: %+v", a)
		}
		dec := json.NewDecoder(strings.NewReader(a.Body))
		dec.DisallowUnknownFields()
		gotE = nil
		if err := dec.Decode(&gotE); err != nil {
			t.Fatalf("a_ec2's scheduled events %q: %v", a.Body, err)
		}
		return len(gotE) != 0
	}, func() string { return "a_ec2's scheduled events stayed empty" })
	if !reflect.DeepEqual(gotE, wantE) {
		t.Fatalf("a_ec2's scheduled events\n got %+v\nwant %+v", gotE, wantE)
	}

	// 3. 'forewarn agent' in b_az, on its default endpoint, approves its
	// Reboot through host-b's relay: that event starts, and a_az's, at
	// b_az's address on blue, stays as it was.
	agent := lab.start(t, "b_az", "agent in b_az", childEnv(), binary, "agent", "--provider", "azure", "--approve",
		"--listen", "", "--poll-interval", "100ms")
	var watching struct{ Msg, VM, Endpoint, Provider string }
	eventually(t, 10*time.Second, func() bool {
		for line := range strings.SplitSeq(agent.stderr.String(), "\n") {
			if json.Unmarshal([]byte(line), &watching) == nil && watching.Msg == "watching" {
				return true
			}
		}
		return false
	}, func() string { return "the agent did not start watching:\n" + agent.stderr.String() })
	if watching.VM != "b_az" || watching.Endpoint != "" || watching.Provider != "azure" {
		t.Fatalf("the agent watches %+v, want VM b_az on the default Azure endpoint", watching)
	}
	otherAz, err := r1.client(t).CreateEvent(ctx, admin.CreateRequest{Type: "Reboot", VMs: []string{"a_az"}, Source: "User"})
	if err != nil {
		t.Fatal(err)
	}
	reboot, err := r1.client(t).CreateEvent(ctx, admin.CreateRequest{Type: "Reboot", VMs: []string{"b_az"}, Source: "User"})
	if err != nil {
		t.Fatal(err)
	}
	var got *forewarn.Event
	eventually(t, 10*time.Second, func() bool {
		if got, err = r1.client(t).Event(ctx, reboot.ID); err != nil {
			t.Fatal(err)
		}
		return got.Status != forewarn.Scheduled
	}, func() string { return "b_az's Reboot was not approved:\n" + agent.stderr.String() })
	if got.Status != forewarn.Started || len(got.Approvals) != 1 || got.Approvals[0].By != "b_az" {
		t.Fatalf("b_az's Reboot is %s with approvals %+v, want Started, approved by b_az", got.Status, got.Approvals)
	}
	if got, err = r1.client(t).Event(ctx, otherAz.ID); err != nil || got.Status != forewarn.Scheduled || len(got.Approvals) != 0 {
		t.Fatalf("a_az's Reboot: %+v, %v; want Scheduled and no approval", got, err)
	}
	azDoc := shellRequest{Op: "http", Method: "GET", URL: "http://169.254.169.254" + azurePath, Header: map[string]string{"Metadata": "true"}}
	wantDocB := `{"DocumentIncarnation":3,"Events":[` + eventJSON(reboot.ID, "Started", "Reboot", `"b_az"`, "", "User", -1) + `]}`
	if a := sh["b_az"].do(t, azDoc); a.Status != 200 || a.Body != wantDocB {
		t.Fatalf("b_az's document: %d %s\nwant %s", a.Status, a.Body, wantDocB)
	}

	// 4. What a VM says of itself is refused or ignored: a token request
	// with X-Forwarded-For is refused by the relay, other requests with
	// it by the server, as EC2, Compute Engine and Azure do; identity
	// headers are dropped.
	tokenPut := shellRequest{Op: "http", Method: "PUT", URL: "http://169.254.169.254/latest/api/token",
		Header: map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": "60", "X-Forwarded-For": "198.18.10.3"}}
	if a := sh["a_ec2"].do(t, tokenPut); a.Status != 403 || a.Body != ec2ErrorPage("403 - Forbidden") {
		t.Fatalf("a token request with X-Forwarded-For: %d %q, want 403 and EC2's page", a.Status, a.Body)
	}
	delete(tokenPut.Header, "X-Forwarded-For")
	if a := sh["a_ec2"].do(t, tokenPut); a.Status != 200 || len(a.Body) != 56 {
		t.Fatalf("a token request: %d %q, want 200 and a token", a.Status, a.Body)
	}
	noToken := shellRequest{Op: "http", Method: "GET", URL: "http://169.254.169.254/latest/meta-data/instance-id"}
	if a := sh["a_ec2"].do(t, noToken); a.Status != 401 || a.Body != ec2ErrorPage("401 - Unauthorized") {
		t.Fatalf("a_ec2 without a token, which it requires: %d %q, want 401", a.Status, a.Body)
	}
	with := func(req shellRequest, hdr map[string]string) shellRequest {
		req.Header = maps.Clone(req.Header)
		maps.Copy(req.Header, hdr)
		return req
	}
	xff := map[string]string{"X-Forwarded-For": "198.18.10.3"}
	gceXFF := "<!DOCTYPE html>\n<html lang=en>\n<meta charset=utf-8>\n<title>Error 403 (Forbidden)</title>\n" +
		"<p><b>403.</b> Requests with an X-Forwarded-For header are not allowed.\n<p>URL: <code>/computeMetadata/v1/instance/name</code>\n"
	if a := sh["b_gce"].do(t, with(gceName, xff)); a.Status != 403 || a.Body != gceXFF {
		t.Errorf("b_gce's name with X-Forwarded-For: %d %q, want 403 %q", a.Status, a.Body, gceXFF)
	}
	azXFF := `{"error": "Bad request. Requests with an X-Forwarded-For header are not allowed"}`
	if a := sh["b_az"].do(t, with(azName, xff)); a.Status != 400 || a.Body != azXFF {
		t.Errorf("b_az's name with X-Forwarded-For: %d %q, want 400 %q", a.Status, a.Body, azXFF)
	}
	// A VM claiming the network of the VM at its address on the other
	// host, or that VM's source too: still itself.
	for _, tc := range []struct {
		vm  string
		req shellRequest
		hdr map[string]string
	}{
		{"b_gce", gceName, map[string]string{"Forewarn-Relay-Network": "blue"}},
		{"b_gce", gceName, map[string]string{"Forewarn-Relay-Network": "blue", "Forewarn-Relay-Source": "198.18.10.2:80"}},
		{"a_gce", gceName, map[string]string{"Forewarn-Relay-Network": "green", "Forewarn-Relay-Source": "198.18.10.2:80"}},
		{"b_az", azName, map[string]string{"Forewarn-Relay-Network": "blue"}},
		{"b_az", azName, map[string]string{"Forewarn-Relay-Network": "blue", "Forewarn-Relay-Source": "198.18.10.4:80"}},
	} {
		if a := sh[tc.vm].do(t, with(tc.req, tc.hdr)); a.Status != 200 || a.Body != tc.vm {
			t.Errorf("%s's name with %v: %d %q, want 200 %s", tc.vm, tc.hdr, a.Status, a.Body, tc.vm)
		}
	}

	// 5. A relay with a wrong credential is refused by the servers: its
	// VMs get 502 from it, or the server's refusal of the network.
	for i, tc := range []struct {
		name   string
		creds  testpki.Files
		status int
		body   string
	}{
		{"a certificate of another authority", stranger, 502, "no metadata server answered\n"},
		{"a name the relays file does not list", unlisted, 502, "no metadata server answered\n"},
		{"host-b's certificate for blue", hostB, 403, `{"error":"relay \"host-b\" does not serve network \"blue\""}` + "\n"},
	} {
		port := 8081 + i
		bad := lab.relay(t, "a", tc.creds, srvPKI.CA, fmt.Sprintf("blue=169.254.169.254:%d", port), servers, "--retry-for", "500ms")
		a := sh["a_gce"].do(t, shellRequest{Op: "http", Method: "GET", Header: gceName.Header,
			URL: fmt.Sprintf("http://169.254.169.254:%d/computeMetadata/v1/instance/name", port)})
		if a.Status != tc.status || a.Body != tc.body {
			t.Errorf("through a relay with %s: %d %q, want %d %q\n%s", tc.name, a.Status, a.Body, tc.status, tc.body, bad.stderr)
		}
		bad.kill()
		// The server refused the relay, not the relay the server.
		if out := bad.stderr.String(); strings.Contains(out, "x509:") {
			t.Errorf("the relay with %s refused the server's certificate:\n%s", tc.name, out)
		}
	}

	// 6. SIGKILL the replica both relays use while the two watchers hold
	// long-polls on it: the relays hold them again on r2, and a_gce's
	// watcher sees the event created there, with no error.
	wantHeld := func(r *replica, n float64) {
		t.Helper()
		var held float64
		eventually(t, 10*time.Second, func() bool {
			held = scrape(t, r.s(t), "")["forewarn_gce_long_polls_held"]
			return held == n
		}, func() string { return fmt.Sprintf("%s holds %v long-polls, want %v", r.name, held, n) })
	}
	wantHeld(r1, 2)
	wantHeld(r2, 0)
	r1.kill()
	wantHeld(r2, 2)
	eventually(t, 10*time.Second, func() bool { return replicaStatus(t, r2).Leader == "r2" },
		func() string { return "r2 does not lead" })
	hostMaintenance(r2, "a_gce", "TERMINATE_ON_HOST_MAINTENANCE")
	wa.want(t, "TERMINATE_ON_HOST_MAINTENANCE")
	if out := relayA.stderr.String(); !strings.Contains(out, "moving to another server") {
		t.Errorf("host-a's relay logged no failover:\n%s", out)
	}
	// Nothing else reached the watchers: no error, no other value.
	for _, w := range []*gceWatcher{wa, wb} {
		w.quiet(t)
	}
}

// relayNetnsFleet is TestRelayNetns's fleet.
const relayNetnsFleet = `vms:
  - {name: a_gce, ip: 198.18.10.2, network: blue, provider: gce}
  - {name: a_ec2, ip: 198.18.10.3, network: blue, provider: aws, instanceId: ` + relayNetnsEC2ID + `, httpTokens: required}
  - {name: a_az, ip: 198.18.10.4, network: blue}
  - {name: b_gce, ip: 198.18.10.2, network: green, provider: gce}
  - {name: b_az, ip: 198.18.10.4, network: green}
`

// relayNetnsEC2ID is a_ec2's instance ID.
const relayNetnsEC2ID = "i-0a1b2c3d4e5f60719"

// ec2ErrorPage is the page EC2 answers an error with, titled title.
func ec2ErrorPage(title string) string {
	return `<?xml version="1.0" encoding="iso-8859-1"?>
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN"
		 "http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">
<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="en" lang="en">
 <head>
  <title>` + title + `</title>
 </head>
 <body>
  <h1>` + title + `</h1>
 </body>
</html>
`
}

// netnsVM is a VM of TestRelayNetns: a namespace on host "a" or "b".
type netnsVM struct{ name, host, ip string }

// netLab is the namespaces of one run of TestRelayNetns and their links.
// Every namespace and root-side link is named after the test process,
// fwr<pid>, and removed when the test ends, failed or not.
type netLab struct {
	t      *testing.T
	prefix string
	subnet int // N of 198.19.N.0/24, the hosts' links to the root namespace
	vms    []netnsVM

	namespaces []string // made, in order
	links      []string // root-side ends of veth pairs
}

// ipCmd runs ip with args and returns its combined output.
func ipCmd(args ...string) (string, error) {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// ip runs ip with args, failing t if it fails.
func (l *netLab) ip(args ...string) {
	l.t.Helper()
	if _, err := ipCmd(args...); err != nil {
		l.t.Fatal(err)
	}
}

// ns returns the name of the namespace called name in this run.
func (l *netLab) ns(name string) string { return l.prefix + "-" + name }

// addNS makes the namespace called name, with its loopback up.
func (l *netLab) addNS(name string) string {
	l.t.Helper()
	ns := l.ns(name)
	l.ip("netns", "add", ns)
	l.namespaces = append(l.namespaces, ns)
	l.ip("-n", ns, "link", "set", "lo", "up")
	return ns
}

// serverIP returns the address of the servers' relay listeners: the
// root end of host-a's link, which host-b reaches through its own.
func (l *netLab) serverIP() string { return fmt.Sprintf("198.19.%d.1", l.subnet) }

// newNetLab makes the hosts and vms of TestRelayNetns. It skips t where
// network namespaces cannot be made.
func newNetLab(t *testing.T, vms []netnsVM) *netLab {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("network namespaces cannot be made here: no ip command (Debian's iproute2)")
	}
	l := &netLab{t: t, prefix: fmt.Sprintf("fwr%d", os.Getpid()), vms: vms}
	first := l.ns("host-a")
	if _, err := ipCmd("netns", "add", first); err != nil {
		if strings.Contains(err.Error(), "not permitted") || strings.Contains(err.Error(), "Permission denied") {
			t.Skipf("network namespaces cannot be made here (the test needs root): %v", err)
		}
		t.Fatal(err)
	}
	l.namespaces = append(l.namespaces, first)
	t.Cleanup(l.teardown)

	// A /24 of 198.19.0.0/16 no address of the root namespace is in.
	out, err := ipCmd("-4", "-o", "addr", "show")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 254 {
		n := (os.Getpid()+i)%254 + 1
		if !strings.Contains(out, fmt.Sprintf("inet 198.19.%d.", n)) {
			l.subnet = n
			break
		}
	}
	if l.subnet == 0 {
		t.Fatal("every /24 of 198.19.0.0/16 has an address in the root namespace")
	}

	// Hosts: 169.254.169.254 on loopback; a /30 link to the root
	// namespace, 198.19.N.1-2 for host-a, .5-6 for host-b.
	for i, h := range []string{"a", "b"} {
		ns := l.ns("host-" + h)
		if h != "a" {
			l.addNS("host-" + h)
		} else {
			l.ip("-n", ns, "link", "set", "lo", "up")
		}
		l.ip("-n", ns, "addr", "add", "169.254.169.254/32", "dev", "lo")
		root := l.prefix + h
		l.ip("link", "add", root, "type", "veth", "peer", "name", "uplink", "netns", ns)
		l.links = append(l.links, root)
		l.ip("addr", "add", fmt.Sprintf("198.19.%d.%d/30", l.subnet, 4*i+1), "dev", root)
		l.ip("link", "set", root, "up")
		l.ip("-n", ns, "addr", "add", fmt.Sprintf("198.19.%d.%d/30", l.subnet, 4*i+2), "dev", "uplink")
		l.ip("-n", ns, "link", "set", "uplink", "up")
		if h != "a" {
			l.ip("-n", ns, "route", "add", l.serverIP()+"/32", "via", fmt.Sprintf("198.19.%d.%d", l.subnet, 4*i+1))
		}
	}
	// VMs: eth0 with the VM's address, and a route to 169.254.169.254
	// through it; on the host, a route to the VM's address through the
	// host's end, which has no address.
	for _, vm := range vms {
		host := l.ns("host-" + vm.host)
		ns := l.addNS(vm.name)
		dev := "vm-" + vm.name
		l.ip("-n", host, "link", "add", dev, "type", "veth", "peer", "name", "eth0", "netns", ns)
		l.ip("-n", host, "link", "set", dev, "up")
		l.ip("-n", host, "route", "add", vm.ip+"/32", "dev", dev)
		l.ip("-n", ns, "addr", "add", vm.ip+"/32", "dev", "eth0")
		l.ip("-n", ns, "link", "set", "eth0", "up")
		l.ip("-n", ns, "route", "add", "169.254.169.254/32", "dev", "eth0", "src", vm.ip)
	}
	return l
}

// teardown removes the links and namespaces, and checks they are gone.
func (l *netLab) teardown() {
	for _, link := range l.links {
		// Its peer goes with it. It is gone already if the namespace of
		// its peer was never made.
		_, _ = ipCmd("link", "del", link)
	}
	for _, ns := range slices.Backward(l.namespaces) {
		if _, err := ipCmd("netns", "del", ns); err != nil {
			l.t.Errorf("remove namespace: %v", err)
		}
	}
	// Namespaces are torn down in the background: their links go soon.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []string
		if out, err := ipCmd("netns", "list"); err == nil {
			for line := range strings.SplitSeq(out, "\n") {
				if strings.HasPrefix(line, l.prefix+"-") {
					left = append(left, line)
				}
			}
		}
		for _, link := range l.links {
			if _, err := ipCmd("link", "show", "dev", link); err == nil {
				left = append(left, "link "+link)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			l.t.Errorf("left after the test: %q", left)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// childEnv returns the environment of a process in a VM or host: the
// test's, without what would point a metadata client or an HTTP client
// elsewhere than its default, with extra added.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch lk := strings.ToLower(k); {
		case strings.HasPrefix(k, "GCE_METADATA"), strings.HasPrefix(k, "AWS_EC2_METADATA"), k == netnsChildEnv,
			lk == "http_proxy", lk == "https_proxy", lk == "no_proxy", lk == "all_proxy":
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// nsProc is a process TestRelayNetns runs in one of its namespaces: its
// standard output as lines, its standard error kept for failures.
type nsProc struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan nsLine
	stderr *lockedBuffer
	exited chan struct{}
}

// nsLine is a line a process wrote and when the test read it.
type nsLine struct {
	text string
	at   time.Time
}

// start runs argv in the namespace called ns as a process named name,
// killed when t ends.
func (l *netLab) start(t *testing.T, ns, name string, env []string, argv ...string) *nsProc {
	t.Helper()
	p := &nsProc{name: name, lines: make(chan nsLine, 1024), stderr: new(lockedBuffer), exited: make(chan struct{})}
	p.cmd = exec.Command("ip", append([]string{"netns", "exec", l.ns(ns)}, argv...)...)
	p.cmd.Env = env
	p.cmd.Stderr = p.stderr
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			p.lines <- nsLine{sc.Text(), time.Now()}
		}
		close(p.lines)
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() && p.stderr.String() != "" {
			t.Logf("%s's standard error (last %d lines):\n%s", name, haLogTail, logTail(p.stderr, haLogTail))
		}
	})
	return p
}

// kill stops p with SIGKILL and waits for it to exit.
func (p *nsProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// next returns p's next line, failing t if none comes within d.
func (p *nsProc) next(t *testing.T, d time.Duration) nsLine {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			<-p.exited
			t.Fatalf("%s exited (%v):\n%s", p.name, p.cmd.ProcessState, p.stderr)
		}
		return l
	case <-time.After(d):
		t.Fatalf("%s wrote no line within %v:\n%s", p.name, d, p.stderr)
	}
	return nsLine{}
}

// relay runs 'forewarn relay' on host h with creds, trusting the servers
// that ca signed, listening where listen says, and waits until it
// listens.
func (l *netLab) relay(t *testing.T, h string, creds testpki.Files, ca, listen, servers string, args ...string) *nsProc {
	t.Helper()
	network, addr, _ := strings.Cut(listen, "=")
	argv := append([]string{binary, "relay", "--listen", listen, "--server", servers, "--cert", creds.Cert, "--key", creds.Key,
		"--ca", ca, "--metrics-addr", ""}, args...)
	p := l.start(t, "host-"+h, "relay "+listen+" on host-"+h, childEnv(), argv...)
	if line, want := p.next(t, 10*time.Second).text, "relay listening on "+addr+" for network "+network; line != want {
		t.Fatalf("%s printed %q, want %q", p.name, line, want)
	}
	return p
}

// netnsChildEnv, set to a mode, makes the test binary one of
// TestRelayNetns's clients in a VM's namespace (see TestMain) instead of
// running tests. Not FOREWARN_*: the agent passes those on to hooks.
const netnsChildEnv = "RELAY_NETNS_CHILD"

// netnsChild runs the client mode names and returns the exit code.
func netnsChild(mode string) int {
	switch mode {
	case "gce-watch":
		return gceWatchChild()
	case "shell":
		return vmShellChild()
	}
	fmt.Fprintf(os.Stderr, "%s=%q: want gce-watch or shell\n", netnsChildEnv, mode)
	return 2
}

// childArgv is the command line of the test binary as a client.
func childArgv(t *testing.T) []string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return []string{exe, "-test.run=^$"}
}

// watchLine is a line of the GCE watcher: its VM's name (name), a value
// of maintenance-event (value), a request that failed (error) or was
// answered other than 200 (status), or Subscribe's return (end).
type watchLine struct {
	Kind   string `json:"kind"`
	Value  string `json:"value,omitempty"`
	OK     bool   `json:"ok,omitempty"`
	URL    string `json:"url,omitempty"`
	Status int    `json:"status,omitempty"`
	Err    string `json:"err,omitempty"`
}

// lineWriter writes JSON lines from any goroutine.
type lineWriter struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (w *lineWriter) emit(v any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = w.enc.Encode(v)
}

// watchTransport is the GCE watcher's HTTP transport: the library's
// default one, which reports each request that fails, is answered other
// than 200, or whose answer breaks off. The library retries those
// quietly; the test wants to see them.
type watchTransport struct {
	rt  http.RoundTripper
	out *lineWriter
}

func (w *watchTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := w.rt.RoundTrip(r)
	switch {
	case err != nil:
		if r.Context().Err() == nil {
			w.out.emit(watchLine{Kind: "error", URL: r.URL.String(), Err: err.Error()})
		}
	case resp.StatusCode != http.StatusOK:
		w.out.emit(watchLine{Kind: "status", URL: r.URL.String(), Status: resp.StatusCode})
	default:
		resp.Body = &watchBody{ReadCloser: resp.Body, url: r.URL.String(), out: w.out}
	}
	return resp, err
}

// watchBody reports an answer that breaks off.
type watchBody struct {
	io.ReadCloser
	url string
	out *lineWriter
}

func (b *watchBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.out.emit(watchLine{Kind: "error", URL: b.url, Err: "reading the answer: " + err.Error()})
	}
	return n, err
}

// gceWatchChild is a GCE VM's watcher: cloud.google.com/go/compute/metadata
// on its default endpoint (169.254.169.254, GCE_METADATA_HOST unset)
// reads the VM's name, then subscribes to instance/maintenance-event,
// writing a watchLine for each. It ends when its standard input closes.
func gceWatchChild() int {
	out := &lineWriter{enc: json.NewEncoder(os.Stdout)}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	// The transport of the library's own default client.
	rt := &http.Transport{DialContext: (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext}
	c := metadata.NewWithOptions(&metadata.Options{Client: &http.Client{Transport: &watchTransport{rt: rt, out: out}}})
	name, err := c.InstanceNameWithContext(ctx)
	out.emit(watchLine{Kind: "name", Value: name, Err: errText(err)})
	err = c.SubscribeWithContext(ctx, "instance/maintenance-event", func(_ context.Context, v string, ok bool) error {
		out.emit(watchLine{Kind: "value", Value: v, OK: ok})
		return nil
	})
	out.emit(watchLine{Kind: "end", Err: errText(err)})
	return 0
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// gceWatcher is a gceWatchChild running in a VM.
type gceWatcher struct {
	vm string
	p  *nsProc
}

// gceWatch runs a watcher in vm.
func (l *netLab) gceWatch(t *testing.T, vm string) *gceWatcher {
	t.Helper()
	return &gceWatcher{vm: vm, p: l.start(t, vm, "GCE watcher in "+vm, childEnv(netnsChildEnv+"=gce-watch"), childArgv(t)...)}
}

// next returns the watcher's next line and when it was read, failing t
// if the client met an error or a status other than 200.
func (w *gceWatcher) next(t *testing.T) (watchLine, time.Time) {
	t.Helper()
	l := w.p.next(t, 10*time.Second)
	var wl watchLine
	if err := json.Unmarshal([]byte(l.text), &wl); err != nil {
		t.Fatalf("%s wrote %q: %v", w.p.name, l.text, err)
	}
	if wl.Kind == "error" || wl.Kind == "status" || wl.Kind == "end" {
		t.Fatalf("%s: the client got %+v", w.p.name, wl)
	}
	return wl, l.at
}

// want checks that the watcher's next line is the value v, and returns
// when it was read.
func (w *gceWatcher) want(t *testing.T, v string) time.Time {
	t.Helper()
	l, at := w.next(t)
	if l.Kind != "value" || l.Value != v || !l.OK {
		t.Fatalf("%s: %+v, want the value %q", w.p.name, l, v)
	}
	return at
}

// quiet checks that the watcher wrote nothing it was not asked for.
func (w *gceWatcher) quiet(t *testing.T) {
	t.Helper()
	select {
	case l, ok := <-w.p.lines:
		if ok {
			t.Errorf("%s wrote %s", w.p.name, l.text)
		}
	default:
	}
}

// shellRequest is a request of a VM's shell: op http sends Method to URL
// with Header from a plain Go HTTP client; op aws reads Path below
// /latest/meta-data/ with the AWS SDK's IMDS client.
type shellRequest struct {
	Op, Method, URL, Path string
	Header                map[string]string
}

// shellAnswer is a shell's answer: the status (for op aws, 200 or the
// status of the SDK's error), the body, and an error that left no status.
type shellAnswer struct {
	Status int
	Body   string
	Err    string
}

// vmShellChild is a VM's shell: it reads a shellRequest per line of its
// standard input and writes a shellAnswer per line. Its IMDS client is
// the AWS SDK's, on its default endpoint with IMDSv1 fallback off, so
// that each read takes a session token first.
func vmShellChild() int {
	hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	ec2 := imds.New(imds.Options{EnableFallback: awssdk.FalseTernary})
	enc := json.NewEncoder(os.Stdout)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var req shellRequest
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			_ = enc.Encode(shellAnswer{Err: err.Error()})
			continue
		}
		_ = enc.Encode(req.run(hc, ec2))
	}
	return 0
}

func (req shellRequest) run(hc *http.Client, ec2 *imds.Client) shellAnswer {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	switch req.Op {
	case "http":
		r, err := http.NewRequestWithContext(ctx, req.Method, req.URL, nil)
		if err != nil {
			return shellAnswer{Err: err.Error()}
		}
		for k, v := range req.Header {
			r.Header.Set(k, v)
		}
		resp, err := hc.Do(r)
		if err != nil {
			return shellAnswer{Err: err.Error()}
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return shellAnswer{Status: resp.StatusCode, Body: string(b), Err: errText(err)}
	case "aws":
		out, err := ec2.GetMetadata(ctx, &imds.GetMetadataInput{Path: req.Path})
		if err != nil {
			return shellAnswer{Status: statusOf(err), Err: err.Error()}
		}
		defer out.Content.Close()
		b, err := io.ReadAll(out.Content)
		return shellAnswer{Status: 200, Body: string(b), Err: errText(err)}
	}
	return shellAnswer{Err: fmt.Sprintf("unknown op %q", req.Op)}
}

// vmShell is a vmShellChild running in a VM.
type vmShell struct{ p *nsProc }

// shell runs a shell in vm.
func (l *netLab) shell(t *testing.T, vm string) *vmShell {
	t.Helper()
	return &vmShell{p: l.start(t, vm, "shell in "+vm, childEnv(netnsChildEnv+"=shell"), childArgv(t)...)}
}

// do sends req to the shell and returns its answer.
func (s *vmShell) do(t *testing.T, req shellRequest) shellAnswer {
	t.Helper()
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.p.stdin.Write(append(b, '\n')); err != nil {
		t.Fatalf("%s: %v", s.p.name, err)
	}
	var a shellAnswer
	if err := json.Unmarshal([]byte(s.p.next(t, 30*time.Second).text), &a); err != nil {
		t.Fatalf("%s: %v", s.p.name, err)
	}
	return a
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/aws"
	"github.com/forewarn/forewarn/internal/etcdtest"
)

// sdkFleet is one EC2 Spot VM whose tokens are required.
const sdkFleet = `vms:
  - name: ec2_spot
    ip: 127.0.0.41
    provider: aws
    instanceId: i-0a1b2c3d4e5f60718
    market: spot
    httpTokens: required
`

// recordingDoer is the SDK's HTTP client: it sends from a VM's address
// and records each request's method, path and whether it carried a
// session token.
type recordingDoer struct {
	hc  *http.Client
	mu  sync.Mutex
	log []string
}

func (d *recordingDoer) Do(r *http.Request) (*http.Response, error) {
	line := r.Method + " " + r.URL.Path
	if v := r.Header.Get(aws.TokenTTLHeader); v != "" {
		line += " ttl=" + v
	}
	if r.Header.Get(aws.TokenHeader) != "" {
		line += " with token"
	}
	d.mu.Lock()
	d.log = append(d.log, line)
	d.mu.Unlock()
	return d.hc.Do(r)
}

func (d *recordingDoer) take() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.log
	d.log = nil
	return out
}

// sdkEvent is an entry of events/maintenance/scheduled or history, with
// every field the server may send, so that an unknown one fails the
// decode.
type sdkEvent struct {
	NotBefore, Code, Description, EventId, NotAfter, NotBeforeDeadline, State string
}

// sdkGet reads key below /latest/meta-data/ with the SDK's GetMetadata.
func sdkGet(t *testing.T, c *imds.Client, key string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := c.GetMetadata(ctx, &imds.GetMetadataInput{Path: key})
	if err != nil {
		return "", err
	}
	defer out.Content.Close()
	b, err := io.ReadAll(out.Content)
	return string(b), err
}

func sdkMustGet(t *testing.T, c *imds.Client, key string) string {
	t.Helper()
	v, err := sdkGet(t, c, key)
	if err != nil {
		t.Fatalf("SDK GetMetadata %s: %v", key, err)
	}
	return v
}

func sdkEvents(t *testing.T, c *imds.Client, key string) []sdkEvent {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(sdkMustGet(t, c, key)))
	dec.DisallowUnknownFields()
	var evs []sdkEvent
	if err := dec.Decode(&evs); err != nil || evs == nil {
		t.Fatalf("%s: %v %v", key, evs, err)
	}
	return evs
}

// statusOf returns the HTTP status of an SDK error, or 0.
func statusOf(err error) int {
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// TestAWSSDKClient drives the real binary with the AWS SDK for Go v2's
// IMDS client, unchanged but for its endpoint and a dialer bound to the
// VM's address, with IMDSv1 fallback off: a token and the instance ID; a
// 401 without a token; a system-reboot created by the CLI, active in
// scheduled, then completed in history; and after vm evict the Spot
// interruption notice, terminate two minutes ahead.
func TestAWSSDKClient(t *testing.T) {
	s, doer, c := sdkServer(t)

	if id := sdkMustGet(t, c, "instance-id"); id != "i-0a1b2c3d4e5f60718" {
		t.Fatalf("instance-id = %q", id)
	}
	if got, want := doer.take(), []string{"PUT /latest/api/token ttl=300", "GET /latest/meta-data/instance-id with token"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("SDK requests %q, want %q", got, want)
	}
	if v, err := sdkGet(t, c, "spot/instance-action"); statusOf(err) != 404 {
		t.Fatalf("spot/instance-action before evict: %q, %v; want a 404", v, err)
	}
	// The SDK's own decoders of the identity document.
	ictx, icancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer icancel()
	doc, err := c.GetInstanceIdentityDocument(ictx, nil)
	if err != nil || doc.InstanceID != "i-0a1b2c3d4e5f60718" || doc.Region != "us-east-1" || doc.AvailabilityZone != "us-east-1a" ||
		doc.PrivateIP != "127.0.0.41" || doc.InstanceType != "m5.large" || doc.PendingTime.IsZero() {
		t.Fatalf("GetInstanceIdentityDocument: %+v, %v", doc, err)
	}
	if r, err := c.GetRegion(ictx, nil); err != nil || r.Region != "us-east-1" {
		t.Fatalf("GetRegion: %+v, %v", r, err)
	}
	doer.take()

	// Without a token: 401, tokens being required.
	resp, err := vmClient("127.0.0.41").Get("http://" + s.metadata + "/latest/meta-data/instance-id")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET without a token: %d, want 401", resp.StatusCode)
	}

	if evs := sdkEvents(t, c, "events/maintenance/scheduled"); len(evs) != 0 {
		t.Fatalf("scheduled before the event: %+v", evs)
	}
	id := strings.TrimSpace(s.mustCLI(t, "event", "create", "--type", "system-reboot", "--vm", "ec2_spot", "--notice", "2s", "--lasts", "2s"))
	ev := s.event(t, id)
	want := sdkEvent{
		NotBefore: ev.NotBefore.UTC().Format(aws.EventTime), Code: "system-reboot", Description: "scheduled reboot",
		EventId: aws.EventID(id), NotAfter: ev.NotBefore.Add(2 * time.Second).UTC().Format(aws.EventTime),
		NotBeforeDeadline: ev.Deadline.UTC().Format(aws.EventTime), State: "active",
	}
	if got := sdkEvents(t, c, "events/maintenance/scheduled"); !reflect.DeepEqual(got, []sdkEvent{want}) {
		t.Fatalf("scheduled\n got %+v\nwant %+v", got, want)
	}
	if got := sdkEvents(t, c, "events/maintenance/history"); len(got) != 0 {
		t.Fatalf("history before completion: %+v", got)
	}

	// Completed after its 2 s notice and 2 s: in history, gone from
	// scheduled.
	want.State, want.Description = "completed", "[Completed] scheduled reboot"
	deadline := time.Now().Add(10 * time.Second)
	for {
		hist := sdkEvents(t, c, "events/maintenance/history")
		if reflect.DeepEqual(hist, []sdkEvent{want}) {
			break
		}
		if len(hist) != 0 || time.Now().After(deadline) {
			t.Fatalf("history\n got %+v\nwant %+v", hist, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := sdkEvents(t, c, "events/maintenance/scheduled"); len(got) != 0 {
		t.Fatalf("scheduled after completion: %+v", got)
	}
	if ev := s.event(t, id); ev.Status != forewarn.Completed {
		t.Fatalf("event %s is %s", id, ev.Status)
	}

	// A Spot interruption with the default two-minute notice: the notice
	// at once.
	evicted := time.Now()
	pid := strings.TrimSpace(s.mustCLI(t, "vm", "evict", "ec2_spot"))
	returned := time.Now()
	var action struct {
		Action string `json:"action"`
		Time   string `json:"time"`
	}
	if err := json.Unmarshal([]byte(sdkMustGet(t, c, "spot/instance-action")), &action); err != nil {
		t.Fatal(err)
	}
	at, err := time.Parse(time.RFC3339, action.Time)
	if err != nil || action.Action != "terminate" {
		t.Fatalf("instance-action %+v: %v", action, err)
	}
	if at.Before(evicted.Add(2*time.Minute-2*time.Second)) || at.After(returned.Add(2*time.Minute+2*time.Second)) {
		t.Fatalf("instance-action time %s, want two minutes after the evict at %s (±2 s)", at, evicted.UTC().Format(time.RFC3339Nano))
	}
	pre := s.event(t, pid)
	if pre.Type != forewarn.Preempt || !at.Equal(pre.NotBefore.UTC().Truncate(time.Second)) {
		t.Fatalf("instance-action time %s; the event is a %s due at %s", at, pre.Type, pre.NotBefore)
	}
	if tt := sdkMustGet(t, c, "spot/termination-time"); tt != action.Time {
		t.Fatalf("termination-time %q, want %q", tt, action.Time)
	}
	// One token for everything: the SDK never needed another.
	for _, l := range doer.take() {
		if !strings.HasPrefix(l, "GET /latest/meta-data/") || !strings.HasSuffix(l, " with token") {
			t.Fatalf("SDK request %q: want only GETs with the first token", l)
		}
	}
	s.stop(t)
}

// newSDK returns the SDK's IMDS client, unchanged but for its endpoint
// and its HTTP client doer, with IMDSv1 fallback off.
func newSDK(endpoint string, doer imds.HTTPClient) *imds.Client {
	return imds.New(imds.Options{Endpoint: "http://" + endpoint, HTTPClient: doer, EnableFallback: awssdk.FalseTernary})
}

// sdkServer starts the real binary on sdkFleet and returns it and the
// SDK's client of ec2_spot, recording its requests.
func sdkServer(t *testing.T) (*server, *recordingDoer, *imds.Client) {
	t.Helper()
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleet, []byte(sdkFleet), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, filepath.Join(dir, "data"), fleet)
	doer := &recordingDoer{hc: vmClient("127.0.0.41")}
	return s, doer, newSDK(s.metadata, doer)
}

// TestAWSSDKTokenAcrossRestart: the SDK's token, fetched before the
// server restarts, reads after it, without a 401 or a new token: as on
// EC2, a token lives its whole TTL.
func TestAWSSDKTokenAcrossRestart(t *testing.T) {
	s, doer, c := sdkServer(t)
	if id := sdkMustGet(t, c, "instance-id"); id != "i-0a1b2c3d4e5f60718" {
		t.Fatalf("instance-id = %q", id)
	}
	if got, want := doer.take(), []string{"PUT /latest/api/token ttl=300", "GET /latest/meta-data/instance-id with token"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("SDK requests %q, want %q", got, want)
	}
	s.stop(t)
	s = startServerArgs(t, s.data, s.fleetArg, "--metadata-addr", s.metadata)
	if id := sdkMustGet(t, c, "instance-type"); id != "m5.large" {
		t.Fatalf("instance-type after the restart = %q", id)
	}
	if got, want := doer.take(), []string{"GET /latest/meta-data/instance-type with token"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("SDK requests after the restart %q, want %q: the token before it, taken", got, want)
	}
	s.stop(t)
}

// replicaDoer is recordingDoer behind a balancer that sends the token
// PUT to one replica and every GET to another.
type replicaDoer struct {
	*recordingDoer
	put, get string // host:port
}

func (d *replicaDoer) Do(r *http.Request) (*http.Response, error) {
	r.URL.Host = d.get
	if r.Method == http.MethodPut {
		r.URL.Host = d.put
	}
	return d.recordingDoer.Do(r)
}

// TestAWSSDKTokenOnTwoReplicas: two replicas on etcd share the SDK's
// token: one issues it, the other serves the GETs with it, without a
// 401 or a new token.
func TestAWSSDKTokenOnTwoReplicas(t *testing.T) {
	etcd := etcdtest.Start(t)
	cl := newHACluster(t, etcd.Endpoints(), "/forewarn/sdk/", sdkFleet, "2s", "5s")
	a, b := cl.add("A"), cl.add("B")
	doer := &replicaDoer{recordingDoer: &recordingDoer{hc: vmClient("127.0.0.41")}, put: a.s(t).metadata, get: b.s(t).metadata}
	c := newSDK(a.s(t).metadata, doer)
	if id := sdkMustGet(t, c, "instance-id"); id != "i-0a1b2c3d4e5f60718" {
		t.Fatalf("instance-id = %q", id)
	}
	if id := sdkMustGet(t, c, "placement/availability-zone"); id != "us-east-1a" {
		t.Fatalf("availability-zone = %q", id)
	}
	want := []string{"PUT /latest/api/token ttl=300", "GET /latest/meta-data/instance-id with token",
		"GET /latest/meta-data/placement/availability-zone with token"}
	if got := doer.take(); !reflect.DeepEqual(got, want) {
		t.Fatalf("SDK requests %q, want %q: A's token taken by B", got, want)
	}
	// And the other way, with a new client: B issues, A serves.
	doer = &replicaDoer{recordingDoer: &recordingDoer{hc: vmClient("127.0.0.41")}, put: b.s(t).metadata, get: a.s(t).metadata}
	c = newSDK(b.s(t).metadata, doer)
	if id := sdkMustGet(t, c, "instance-id"); id != "i-0a1b2c3d4e5f60718" {
		t.Fatalf("instance-id = %q", id)
	}
	if got := doer.take(); !reflect.DeepEqual(got, want[:2]) {
		t.Fatalf("SDK requests %q, want %q: B's token taken by A", got, want[:2])
	}
}

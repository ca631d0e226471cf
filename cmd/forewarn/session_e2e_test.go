package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/internal/etcdtest"
)

// sessionVM is a VM of TestSessionEndToEnd's fleet: agent says a real
// 'forewarn agent' runs on it.
type sessionVM struct {
	name, ip, host, set string
	agent               bool
}

// sessionVMs: three hosts of two Azure VMs. On each host the first VM
// runs the agent. On h1 and h3 the second shares an availability set
// with it, and so its event: the agent, first of the event's
// Resources, approves it for both. On h2 the second is standalone, so
// it gets an event of its own, and it never answers: it called its
// metadata API once, so that its events have notice, and never again.
var sessionVMs = []sessionVM{
	{"h1_a", "127.0.25.11", "h1", "as1", true},
	{"h1_b", "127.0.25.12", "h1", "as1", false},
	{"h2_a", "127.0.25.21", "h2", "", true},
	{"h2_q", "127.0.25.22", "h2", "", false},
	{"h3_a", "127.0.25.31", "h3", "as3", true},
	{"h3_b", "127.0.25.32", "h3", "as3", false},
}

// sessionNotice is the session's notice: how long h2 waits for its VM
// that never answers, and the time the failover has.
const sessionNotice = 5 * time.Second

// TestSessionEndToEnd runs a maintenance session over three hosts on
// three replicas sharing one etcd, with the real binary throughout:
// 'forewarn agent' on a VM of each host drains (a hook) and approves,
// a VM of h2 never answers, the operator's automation is a shell loop
// of 'host wait' and 'host done' against a follower, and a receiver
// checks every webhook delivery's signature. The leader is SIGKILLed
// once h1 is Done and while h2 waits for its silent VM's NotBefore. The
// session must finish on the new leader: every host Done, each VM's
// event made once and started and completed once, each hook run once
// per event, each host started once, and every host and session
// transition delivered in order.
func TestSessionEndToEnd(t *testing.T) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	etcd := etcdtest.Start(t)
	prefix := "/forewarn/session-e2e/"
	dir := t.TempDir()
	secret := []byte("0123456789abcdef0123456789abcdef")
	secretFile := filepath.Join(dir, "webhook-secret")
	// With a newline, as 'openssl rand -hex 32 >' writes it; the server
	// signs with the content without the white space around it.
	if err := os.WriteFile(secretFile, append(slices.Clone(secret), '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	hooks := newSignedHooks(t, secret)

	var fleet strings.Builder
	fleet.WriteString("vms:\n")
	for _, vm := range sessionVMs {
		fmt.Fprintf(&fleet, "  - {name: %s, ip: %s, host: %s", vm.name, vm.ip, vm.host)
		if vm.set != "" {
			fmt.Fprintf(&fleet, ", availabilitySet: %s", vm.set)
		}
		fleet.WriteString("}\n")
	}
	c := newHACluster(t, etcd.Endpoints(), prefix, fleet.String(), "2s", "5s")
	c.args = []string{"--webhook", hooks.url, "--webhook-secret-file", secretFile}
	doomed, survivors := c.addSettled(t, "A", "B", "C")
	leader := doomed.name
	// The automation talks to one follower, the checks read the other.
	// etcd hands the lead to the oldest candidate, so the automation's,
	// the youngest, most likely follows throughout.
	ops, obs := survivors[1], survivors[0]
	t.Logf("leader %s; the automation talks to %s", leader, ops.name)

	// The VMs: an agent on the first of each host, which reaches the
	// replicas through a forwarder that gives its connections the VM's
	// address (the agent cannot choose its own). As a load balancer
	// would, it prefers one replica and falls back to the others: h3's
	// agent prefers the leader, so that it sees its event only through
	// the failover.
	drain, undrain := writeHooks(t, dir)
	var agents []*agentProc
	prefer := []*replica{ops, obs, doomed}
	for i, vm := range slices.DeleteFunc(slices.Clone(sessionVMs), func(vm sessionVM) bool { return !vm.agent }) {
		fwd := vmForwarder(t, vm.ip, func() []string {
			var addrs []string
			for j := range prefer {
				if s := prefer[(i+j)%len(prefer)].current(); s != nil {
					addrs = append(addrs, s.metadata)
				}
			}
			return addrs
		})
		agents = append(agents, startAgent(t, "--provider", "azure", "--endpoint", "http://"+fwd, "--vm", vm.name,
			"--exec", drain, "--on-clear", undrain, "--approve", "--poll-interval", "100ms"))
	}
	azureDoc(t, doomed, sessionVMs[3].ip) // h2_q's one call
	// The session is made once the leader knows that every VM that
	// calls has called: otherwise its events would start at once,
	// unheard.
	eventually(t, 10*time.Second, func() bool {
		vms, err := doomed.client(t).VMs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		enabled := 0
		for _, vm := range vms {
			if vm.Enabled && !vm.LastSeen.IsZero() {
				enabled++
			}
		}
		return enabled == len(agents)+1
	}, func() string { return "the agents' VMs and h2_q are not all enabled on the leader" })

	// Every transition from here on, as the two survivors apply them.
	from := replicaStatus(t, obs).Revision
	watches := map[*replica]*transitionLog{ops: watchTransitions(ctx, t, ops, from), obs: watchTransitions(ctx, t, obs, from)}

	// The operator's automation, started before the session exists.
	loop := exec.CommandContext(ctx, "/bin/sh", "-c", `for h in h1 h2 h3; do
	forewarn host wait "$h" --state Ready --timeout 60s || exit 1
	forewarn host done "$h" || exit 1
done`)
	loop.Env = append(os.Environ(), "PATH="+filepath.Dir(binary)+string(os.PathListSeparator)+os.Getenv("PATH"),
		serverEnv+"=http://"+ops.s(t).adm, quickExitEnv())
	var loopOut, loopErr lockedBuffer
	loop.Stdout, loop.Stderr = &loopOut, &loopErr
	if err := loop.Start(); err != nil {
		t.Fatal(err)
	}
	loopDone := make(chan error, 1)
	go func() { loopDone <- loop.Wait() }()

	var created admin.SessionView
	out := haCLI(t, doomed, "session", "create", "--hosts", "h1,h2,h3", "--notice", sessionNotice.String(), "--json")
	if err := json.Unmarshal([]byte(out), &created); err != nil {
		t.Fatalf("session create --json: %v\n%s", err, out)
	}
	id := created.ID
	sessionStart := time.Now()

	// The kill: h1 Done, h2 Notifying with its agent's event Started and
	// its silent VM's Scheduled, due in a few seconds.
	var silent *forewarn.Event
	eventually(t, 20*time.Second, func() bool {
		v, err := obs.client(t).Session(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if v.Hosts[0].State != forewarn.HostDone || v.Hosts[1].State != forewarn.HostNotifying {
			return false
		}
		started := 0
		for _, eid := range v.Hosts[1].Events {
			ev, err := obs.client(t).Event(ctx, eid)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case ev.Status == forewarn.Started && slices.Equal(ev.Resources, []string{"h2_a"}):
				started++
			case ev.Status == forewarn.Scheduled && slices.Equal(ev.Resources, []string{"h2_q"}):
				silent = ev
			}
		}
		return started == 1 && silent != nil
	}, func() string {
		v, _ := obs.client(t).Session(ctx, id)
		return fmt.Sprintf("h1 not Done, or h2 not Notifying with h2_a's event started: %+v\nautomation: %s%s", v, loopOut.String(), loopErr.String())
	})
	if left := time.Until(silent.NotBefore); left < time.Second {
		t.Fatalf("h2_q's event is due in %v, too soon for a kill before it", left)
	}
	killed := time.Now()
	doomed.kill()
	t.Logf("killed %s %.2f s into the session, %.2f s before h2_q's NotBefore", leader, killed.Sub(sessionStart).Seconds(),
		silent.NotBefore.Sub(killed).Seconds())

	// The automation goes on against its follower and ends.
	select {
	case err := <-loopDone:
		if err != nil {
			t.Fatalf("the automation failed: %v\n%s%s", err, loopOut.String(), loopErr.String())
		}
	case <-time.After(45 * time.Second):
		t.Fatalf("the automation did not end within 45 s:\n%s%s", loopOut.String(), loopErr.String())
	}
	var want strings.Builder
	for _, h := range []string{"h1", "h2", "h3"} {
		fmt.Fprintf(&want, "host %s is InMaintenance in session %s\nhost %s: Done\n", h, id, h)
	}
	if loopOut.String() != want.String() || loopErr.String() != "" {
		t.Errorf("the automation printed:\n%s\nand on stderr %q; want:\n%s", loopOut.String(), loopErr.String(), want.String())
	}
	newLeader := ""
	eventually(t, 10*time.Second, func() bool {
		st := replicaStatus(t, obs)
		newLeader = st.Leader
		v, err := obs.client(t).Session(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return v.State == forewarn.SessionDone && newLeader != "" && newLeader != leader
	}, func() string { return fmt.Sprintf("session not Done, or leader %q", newLeader) })
	t.Logf("session done %.2f s after it was made; %s leads, the automation's replica is %s", time.Since(sessionStart).Seconds(), newLeader, ops.name)

	// The session, as both survivors show it.
	for _, r := range survivors {
		v, err := r.client(t).Session(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for i, h := range v.Hosts {
			wantEvents := 1
			if h.Name == "h2" {
				wantEvents = 2
			}
			if h.Name != fmt.Sprintf("h%d", i+1) || h.State != forewarn.HostDone || h.NumVMs() != 2 || h.NumEvents() != wantEvents ||
				h.Started.IsZero() || h.ReadyAt.Before(h.Started) || h.Ended.Before(h.ReadyAt) || h.Reason != "" {
				t.Errorf("%s: host %d of the session: %+v; want h%d Done with 2 VMs and %d events", r.name, i, h, i+1, wantEvents)
			}
			if i > 0 && h.Started.Before(v.Hosts[i-1].Ended) {
				t.Errorf("%s: %s started at %v, before %s ended at %v", r.name, h.Name, h.Started, v.Hosts[i-1].Name, v.Hosts[i-1].Ended)
			}
		}
		if h := v.Hosts[1]; h.ReadyAt.Before(silent.NotBefore) {
			t.Errorf("%s: h2 Ready at %v, before h2_q's NotBefore %v", r.name, h.ReadyAt, silent.NotBefore)
		}
	}

	// The events: one per host, two for h2; each VM in exactly one, each
	// Completed; the agents' started at their approval, h2_q's at its
	// NotBefore.
	events := c.converge(t, 10*time.Second)
	if len(events) != 4 {
		t.Fatalf("%d events, want 4: %+v", len(events), events)
	}
	inEvents := map[string]int{}
	for _, ev := range events {
		for _, n := range ev.Resources {
			inEvents[n]++
		}
		var approvers []string
		for _, a := range ev.Approvals {
			approvers = append(approvers, a.By)
		}
		first := ev.Resources[0]
		switch {
		case ev.Status != forewarn.Completed || ev.Type != forewarn.Reboot:
			t.Errorf("event %s of %v: %s %s, want a Completed Reboot", ev.ID, ev.Resources, ev.Type, ev.Status)
		case first == "h2_q" && (ev.ID != silent.ID || len(approvers) != 0 || !ev.StartedAt.Equal(silent.NotBefore)):
			t.Errorf("h2_q's event %s started at %v, approved by %v; want %s started unapproved at its NotBefore %v",
				ev.ID, ev.StartedAt, approvers, silent.ID, silent.NotBefore)
		case first != "h2_q" && !slices.Equal(approvers, []string{first}):
			t.Errorf("event %s of %v approved by %v, want by %s", ev.ID, ev.Resources, approvers, first)
		}
	}
	for _, vm := range sessionVMs {
		if inEvents[vm.name] != 1 {
			t.Errorf("%s is in %d events, want 1", vm.name, inEvents[vm.name])
		}
	}
	// etcd's history: each event written Scheduled, Started, Completed,
	// once each, and no other event key.
	hist := etcdHistory(t, etcd.Endpoints(), prefix)
	if len(hist) != len(events) {
		t.Errorf("etcd holds the history of %d events, the replicas list %d", len(hist), len(events))
	}
	for _, ev := range events {
		if got := statuses(hist[ev.ID]); !slices.Equal(got, []string{"Scheduled", "Started", "Completed"}) {
			t.Errorf("event %s was written:%s\nwant Scheduled, Started, Completed", ev.ID, describePuts(hist[ev.ID]))
		}
		checkMonotonic(t, ev.ID, hist[ev.ID])
	}

	// The hooks: each agent drained once for its event, before the
	// event started, and undrained once after it completed.
	for _, ev := range events {
		if ev.Resources[0] == "h2_q" {
			continue
		}
		d := waitRuns(t, dir, "drain", ev.ID, 1, 5*time.Second)
		u := waitRuns(t, dir, "undrain", ev.ID, 1, 5*time.Second)
		if len(d) != 1 || len(u) != 1 || d[0].env["FOREWARN_VM"] != ev.Resources[0] || u[0].env["FOREWARN_VM"] != ev.Resources[0] {
			t.Errorf("event %s of %v: drained %d and undrained %d times (%v, %v), want once each by %s",
				ev.ID, ev.Resources, len(d), len(u), d, u, ev.Resources[0])
		}
		// The hook records its run as it begins, and the agent approves
		// once it has ended (a second's slack for the file system's
		// coarse clock).
		if len(d) == 1 && d[0].at.After(ev.StartedAt.Add(time.Second)) {
			t.Errorf("event %s started at %v, before its drain hook ran at %v", ev.ID, ev.StartedAt, d[0].at)
		}
	}
	for _, a := range agents {
		a.wantMetrics(t, map[string]float64{`forewarn_agent_approvals_total`: 1,
			`forewarn_agent_handler_runs_total{kind="exec",result="success"}`:     1,
			`forewarn_agent_handler_runs_total{kind="on_clear",result="success"}`: 1})
		a.stop(t)
	}

	// The transitions, as each survivor's watch stream gave them.
	wantSeq := map[string][]string{
		"session " + id: {">Running", "Running>Done"},
		"host h1":       {"Pending>Notifying", "Notifying>Ready", "Ready>InMaintenance", "InMaintenance>Done"},
		"host h2":       {"Pending>Notifying", "Notifying>Ready", "Ready>InMaintenance", "InMaintenance>Done"},
		"host h3":       {"Pending>Notifying", "Notifying>Ready", "Ready>InMaintenance", "InMaintenance>Done"},
	}
	for _, ev := range events {
		wantSeq["event "+ev.ID] = []string{">Scheduled", "Scheduled>Started", "Started>Completed"}
	}
	var watched map[string]sessionTransition // host and session ones, by CloudEvent id
	for _, r := range survivors {
		got, resets := watches[r].stop()
		if len(resets) > 0 {
			t.Errorf("%s's watch stream was reset at revisions %v: it skipped no commit", r.name, resets)
		}
		seqs := map[string][]string{}
		ids := map[string]sessionTransition{}
		for _, tr := range got {
			k := tr.t.Kind + " " + tr.t.ID
			seqs[k] = append(seqs[k], tr.t.From+">"+tr.t.To)
			if tr.t.Kind != "event" {
				ids[tr.id] = tr
			}
		}
		for k, w := range wantSeq {
			if !slices.Equal(seqs[k], w) {
				t.Errorf("%s's watch: %s went %v, want %v", r.name, k, seqs[k], w)
			}
		}
		if len(seqs) != len(wantSeq) {
			t.Errorf("%s's watch streamed transitions of %d things, want %d: %v", r.name, len(seqs), len(wantSeq), seqs)
		}
		if watched == nil {
			watched = ids
		} else if !maps.EqualFunc(watched, ids, func(a, b sessionTransition) bool { return a.String() == b.String() }) {
			t.Errorf("the survivors' watches differ:\n%v\n%v", watched, ids)
		}
	}

	// The webhooks: every delivery signed; each transition of the watch
	// delivered under its id, at least once, the first arrivals in
	// revision order.
	var got []sessionTransition
	eventually(t, 10*time.Second, func() bool {
		got = hooks.first()
		return len(got) >= len(watched)
	}, func() string { return fmt.Sprintf("%d distinct deliveries, want %d", len(got), len(watched)) })
	total, bad := hooks.counts()
	if bad != nil || total < len(watched) {
		t.Errorf("%d deliveries, of which bad: %v", total, bad)
	}
	for i, tr := range got {
		w, ok := watched[tr.id]
		if !ok || w.t.Kind != tr.t.Kind || w.t.ID != tr.t.ID || w.t.From != tr.t.From || w.t.To != tr.t.To || w.t.Session != tr.t.Session {
			t.Errorf("delivery %s: %s %s %s>%s; the watch has %+v", tr.id, tr.t.Kind, tr.t.ID, tr.t.From, tr.t.To, w.t)
		}
		if i > 0 && !got[i-1].before(tr) {
			t.Errorf("delivery %s arrived after %s", tr.id, got[i-1].id)
		}
	}
	if len(got) != len(watched) {
		t.Errorf("%d distinct deliveries, the watch has %d transitions of hosts and sessions", len(got), len(watched))
	}
	t.Logf("%d deliveries of %d transitions; the whole test took %.1f s", total, len(got), time.Since(began).Seconds())
}

// sessionTransition is a transition and the id a CloudEvent gives it:
// its commit's revision and its place among the commit's transitions.
type sessionTransition struct {
	id    string
	rev   int64
	index int
	t     engine.Transition
}

func (a sessionTransition) String() string {
	return fmt.Sprintf("%s %s %s %s>%s", a.id, a.t.Kind, a.t.ID, a.t.From, a.t.To)
}

// before reports whether a's commit, or its place in it, comes before b's.
func (a sessionTransition) before(b sessionTransition) bool {
	return a.rev < b.rev || a.rev == b.rev && a.index < b.index
}

// transitionLog collects a watch stream's transitions.
type transitionLog struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	got    []sessionTransition
	resets []int64
	err    error
}

// watchTransitions streams r's transitions after revision since until
// stop.
func watchTransitions(ctx context.Context, t *testing.T, r *replica, since int64) *transitionLog {
	ctx, cancel := context.WithCancel(ctx)
	w := &transitionLog{cancel: cancel, done: make(chan struct{})}
	cl := admin.NewClient("http://"+r.s(t).adm, &http.Client{})
	go func() {
		defer close(w.done)
		var rev int64
		index := 0
		for tr, err := range cl.Watch(ctx, since) {
			w.mu.Lock()
			switch {
			case err != nil:
				if ctx.Err() == nil {
					w.err = err
				}
			case tr.Kind == "reset":
				w.resets = append(w.resets, tr.Revision)
			case tr.Kind != "heartbeat":
				if tr.Revision != rev {
					rev, index = tr.Revision, 0
				}
				w.got = append(w.got, sessionTransition{id: fmt.Sprintf("%d-%d", rev, index), rev: rev, index: index, t: tr})
				index++
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(w.halt)
	return w
}

func (w *transitionLog) halt() {
	w.cancel()
	<-w.done
}

// stop ends the stream and returns what it gave, failing on an error
// other than its end.
func (w *transitionLog) stop() ([]sessionTransition, []int64) {
	w.halt()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		w.got = append(w.got, sessionTransition{id: "error: " + w.err.Error()})
	}
	return w.got, w.resets
}

// signedHooks is a webhook receiver that checks each delivery as the
// README says a receiver should: its media type, its timestamp within a
// minute of now, and its signature, HMAC-SHA256 keyed with the secret
// over the timestamp, a '.' and the body; it records the CloudEvents in
// the order they arrive.
type signedHooks struct {
	url    string
	secret []byte

	mu    sync.Mutex
	all   []sessionTransition
	bad   []string
	total int
}

func newSignedHooks(t *testing.T, secret []byte) *signedHooks {
	h := &signedHooks{secret: secret}
	srv := httptest.NewServer(http.HandlerFunc(h.receive))
	t.Cleanup(srv.Close)
	h.url = srv.URL + "/forewarn?team=ops"
	return h
}

func (h *signedHooks) receive(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.total++
	ts, sig := r.Header.Get("Forewarn-Timestamp"), r.Header.Get("Forewarn-Signature")
	mac := hmac.New(sha256.New, h.secret)
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	sent, tsErr := strconv.ParseInt(ts, 10, 64)
	var ce struct {
		SpecVersion     string            `json:"specversion"`
		ID              string            `json:"id"`
		Source          string            `json:"source"`
		Type            string            `json:"type"`
		Subject         string            `json:"subject"`
		DataContentType string            `json:"datacontenttype"`
		Data            engine.Transition `json:"data"`
	}
	switch {
	case err != nil || r.Method != http.MethodPost || r.URL.RequestURI() != "/forewarn?team=ops":
		h.bad = append(h.bad, fmt.Sprintf("%s %s: %v", r.Method, r.URL, err))
	case r.Header.Get("Content-Type") != "application/cloudevents+json":
		h.bad = append(h.bad, "Content-Type "+r.Header.Get("Content-Type"))
	case tsErr != nil || time.Since(time.Unix(sent, 0)).Abs() > time.Minute:
		h.bad = append(h.bad, "timestamp "+ts)
	case !hmac.Equal([]byte(sig), []byte("sha256="+hex.EncodeToString(mac.Sum(nil)))):
		h.bad = append(h.bad, fmt.Sprintf("signature %q of %q at %s", sig, body, ts))
	case json.Unmarshal(body, &ce) != nil:
		h.bad = append(h.bad, "body "+string(body))
	default:
		d := ce.Data
		rev, index, _ := strings.Cut(ce.ID, "-")
		tr := sessionTransition{id: ce.ID, t: d}
		tr.rev, _ = strconv.ParseInt(rev, 10, 64)
		tr.index, _ = strconv.Atoi(index)
		session := d.ID
		if d.Kind == "host" {
			session = d.Session
		}
		if ce.SpecVersion != "1.0" || ce.DataContentType != "application/json" || tr.rev != d.Revision ||
			ce.Type != "io.forewarn."+d.Kind+"."+strings.ToLower(d.To) || ce.Subject != d.ID || ce.Source != "/forewarn/sessions/"+session ||
			(d.Kind == "host") != (d.Host != nil && d.Host.Name == d.ID && string(d.Host.State) == d.To) {
			h.bad = append(h.bad, "CloudEvent "+string(body))
		}
		h.all = append(h.all, tr)
	}
	w.WriteHeader(http.StatusNoContent)
}

// first returns the first delivery of each id, in the order they came.
func (h *signedHooks) first() []sessionTransition {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[string]bool{}
	var out []sessionTransition
	for _, tr := range h.all {
		if !seen[tr.id] {
			seen[tr.id] = true
			out = append(out, tr)
		}
	}
	return out
}

// counts returns how many deliveries came, and what was wrong with the
// bad ones.
func (h *signedHooks) counts() (int, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total, slices.Clone(h.bad)
}

// vmForwarder stands for the network path of the VM at ip: it listens
// on loopback and forwards each connection from the address ip to the
// first of targets' addresses that accepts it, so that the metadata API
// sees a client that cannot choose its source address (the agent) as
// that VM. It stops when t ends.
func vmForwarder(t *testing.T, ip string, targets func() []string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: time.Second}
	wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { forward(&wg, d, in, targets()) })
		}
	})
	return ln.Addr().String()
}

// forward copies in both ways between in and a connection d makes to the
// first of addrs that accepts one, until either side closes.
func forward(wg *sync.WaitGroup, d *net.Dialer, in net.Conn, addrs []string) {
	defer in.Close()
	for _, a := range addrs {
		out, err := d.Dial("tcp", a)
		if err != nil {
			continue
		}
		defer out.Close()
		wg.Go(func() {
			_, _ = io.Copy(out, in)
			out.Close()
		})
		_, _ = io.Copy(in, out)
		return
	}
}

package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

var secret = []byte("0123456789abcdef0123456789abcdef")

// received is one request a receiver got.
type received struct {
	url, ts, sig, ct string
	at               time.Time
	body             []byte
}

// receiver answers deliveries in the bubble, without sockets: answer
// picks each one's status (nil: 200; -1: a network error).
type receiver struct {
	mu     sync.Mutex
	got    []received
	answer func(n int, r received) int
}

func (rc *receiver) RoundTrip(req *http.Request) (*http.Response, error) {
	body, _ := io.ReadAll(req.Body)
	r := received{url: req.URL.String(), ts: req.Header.Get(TimestampHeader), sig: req.Header.Get(SignatureHeader),
		ct: req.Header.Get("Content-Type"), at: time.Now(), body: body}
	rc.mu.Lock()
	rc.got = append(rc.got, r)
	n := len(rc.got)
	rc.mu.Unlock()
	code := 200
	if rc.answer != nil {
		code = rc.answer(n, r)
	}
	if code < 0 {
		return nil, errors.New("connection reset by peer")
	}
	w := httptest.NewRecorder()
	w.WriteHeader(code)
	resp := w.Result()
	resp.Request = req
	return resp, nil
}

func (rc *receiver) all() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.got)
}

// counts is an Observer that counts by "what target".
type counts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counts) add(what, target string, d int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[what+" "+target] += d
}
func (c *counts) get(what, target string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[what+" "+target]
}
func (c *counts) Delivered(t string)     { c.add("delivered", t, 1) }
func (c *counts) AttemptFailed(t string) { c.add("failed", t, 1) }
func (c *counts) GaveUp(t string)        { c.add("gaveup", t, 1) }
func (c *counts) Dropped(t string)       { c.add("dropped", t, 1) }
func (c *counts) Queued(t string, d int) { c.add("queued", t, d) }

// hostFleet: host hv2 with two Azure VMs.
func hostFleet() *forewarn.Fleet {
	vm := func(name string, last byte) *forewarn.VM {
		return &forewarn.VM{Name: name, Provider: forewarn.Azure, Host: "hv2", IP: netip.AddrFrom4([4]byte{198, 18, 7, last})}
	}
	return &forewarn.Fleet{VMs: []*forewarn.VM{vm("a2", 1), vm("web_1", 2)}}
}

func newEngine(t *testing.T, store forewarn.Store) *engine.Engine {
	t.Helper()
	e, err := engine.New(t.Context(), engine.Config{Store: store, Fleet: hostFleet(), AllowShortNotice: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func newSender(t *testing.T, e *engine.Engine, rc *receiver, obs Observer, urls ...string) *Sender {
	t.Helper()
	s, err := New(Config{Engine: e, Secret: secret, URLs: urls, Observer: obs, Client: &http.Client{Transport: rc}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// runSession runs a session of host hv2 to Done on e, with the session
// webhook hook, and returns its ID.
func runSession(t *testing.T, e *engine.Engine, hook string) string {
	t.Helper()
	ses, err := e.CreateSession(t.Context(), forewarn.SessionSpec{Hosts: []string{"hv2"}, Notice: time.Minute, Webhooks: []string{hook}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Minute)
	synctest.Wait()
	if err := e.HostDone(t.Context(), "hv2"); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	return ses.ID
}

// TestDeliverSession: every host and session transition of a run
// reaches the server's webhook and the session's, in order, each signed
// over its timestamp and body, as a CloudEvent whose id is its revision
// and index; a replica that does not lead sends nothing.
func TestDeliverSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := mem.New()
		e := newEngine(t, store)
		follower := newEngine(t, store.Candidate())
		rc, frc := &receiver{}, &receiver{}
		var obs counts
		newSender(t, e, rc, &obs, "http://hooks.example/all")
		newSender(t, follower, frc, nil, "http://hooks.example/all")
		hook := "https://hooks.example/s/T0K3N?x=1"
		id := runSession(t, e, hook)
		got := rc.all()
		var seen []string
		for _, r := range got {
			if r.ct != "application/cloudevents+json" || !Verify(secret, r.ts, r.sig, r.body) || r.ts != fmt.Sprint(r.at.Unix()) {
				t.Errorf("%s: Content-Type %q, signature %q of %q", r.url, r.ct, r.sig, r.ts)
			}
			var ce struct {
				ID, Type, Source, Subject string
			}
			if err := json.Unmarshal(r.body, &ce); err != nil {
				t.Fatal(err)
			}
			seen = append(seen, r.url+" "+ce.ID+" "+ce.Type+" "+ce.Subject+" "+ce.Source)
		}
		var want []string
		for _, d := range []string{"2-0 io.forewarn.session.running " + id, "3-2 io.forewarn.host.notifying hv2", "4-0 io.forewarn.host.ready hv2",
			"4-1 io.forewarn.host.inmaintenance hv2", "5-2 io.forewarn.host.done hv2", "6-0 io.forewarn.session.done " + id} {
			for _, u := range []string{"http://hooks.example/all", hook} {
				want = append(want, u+" "+d+" /forewarn/sessions/"+id)
			}
		}
		// Each target in order; the two targets' deliveries interleave.
		for _, u := range []string{"http://hooks.example/all", hook} {
			pick := func(s []string) []string {
				return slices.DeleteFunc(slices.Clone(s), func(x string) bool { return !strings.HasPrefix(x, u+" ") })
			}
			if g, w := pick(seen), pick(want); !slices.Equal(g, w) {
				t.Errorf("%s got:\n%s\nwant:\n%s", u, strings.Join(g, "\n"), strings.Join(w, "\n"))
			}
		}
		wantBody := fmt.Sprintf(`{"specversion":"1.0","id":"2-0","source":"/forewarn/sessions/%s","type":"io.forewarn.session.running","subject":"%[1]s","time":"2000-01-01T00:00:00Z","datacontenttype":"application/json","data":{"revision":2,"time":"2000-01-01T00:00:00Z","kind":"session","id":"%[1]s","to":"Running"}}`, id)
		if len(got) == 0 {
			t.Fatal("nothing was delivered")
		}
		if string(got[0].body) != wantBody {
			t.Errorf("first body:\n%s\nwant\n%s", got[0].body, wantBody)
		}
		if n := obs.get("delivered", "https://hooks.example"); n != 6 {
			t.Errorf("delivered to https://hooks.example: %d", n)
		}
		if n := len(frc.all()); n != 0 {
			t.Errorf("the follower sent %d deliveries", n)
		}
	})
}

// TestRetry: a receiver that fails twice (503, then a network error)
// gets the same delivery a third time, after a backoff each time.
func TestRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, mem.New())
		rc := &receiver{answer: func(n int, _ received) int { return map[int]int{1: 503, 2: -200}[n] + 200*min(n/3, 1) }}
		var obs counts
		s := newSender(t, e, rc, &obs, "http://hooks.example/")
		s.take(50, []engine.Transition{{Revision: 50, Kind: "session", ID: "S", To: "Paused"}})
		synctest.Wait()
		time.Sleep(time.Hour)
		got := rc.all()
		if len(got) != 3 || string(got[0].body) != string(got[2].body) || !strings.Contains(string(got[2].body), `"id":"50-0"`) {
			t.Fatalf("%d attempts: %+v", len(got), got)
		}
		for i, bound := range []time.Duration{initialBackoff, 2 * initialBackoff} {
			if d := got[i+1].at.Sub(got[i].at); d > bound {
				t.Errorf("attempt %d came %s after the one before, want at most %s", i+2, d, bound)
			}
		}
		if f, d := obs.get("failed", "http://hooks.example"), obs.get("delivered", "http://hooks.example"); f != 2 || d != 1 {
			t.Errorf("failed attempts %d, delivered %d", f, d)
		}
	})
}

// TestGiveUp: a delivery that fails MaxAttempts times is given up, one
// that gets a 4xx at once; the next ones go on.
func TestGiveUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, mem.New())
		rc := &receiver{answer: func(_ int, r received) int {
			switch {
			case strings.Contains(string(r.body), `"id":"60-0"`):
				return 500
			case strings.Contains(string(r.body), `"id":"61-0"`):
				return 404
			}
			return 200
		}}
		var obs counts
		s := newSender(t, e, rc, &obs, "http://hooks.example/")
		for rev := int64(60); rev < 63; rev++ {
			s.take(rev, []engine.Transition{{Revision: rev, Kind: "session", ID: "S", To: "Paused"}})
		}
		synctest.Wait()
		time.Sleep(time.Hour)
		if n := len(rc.all()); n != MaxAttempts+2 {
			t.Errorf("%d attempts, want %d", n, MaxAttempts+2)
		}
		if g, d := obs.get("gaveup", "http://hooks.example"), obs.get("delivered", "http://hooks.example"); g != 2 || d != 1 {
			t.Errorf("given up %d, delivered %d", g, d)
		}
	})
}

// TestFullQueue: while a receiver holds a delivery, QueueSize more
// wait; each beyond drops the oldest waiting, counted.
func TestFullQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, mem.New())
		hold := make(chan struct{})
		rc := &receiver{answer: func(n int, _ received) int {
			if n == 1 {
				<-hold
			}
			return 200
		}}
		var obs counts
		s := newSender(t, e, rc, &obs, "http://hooks.example/")
		const extra = 5
		for rev := int64(1000); rev <= 1000+QueueSize+extra; rev++ {
			s.take(rev, []engine.Transition{{Revision: rev, Kind: "host", ID: "hv2", Session: "S", To: "Ready"}})
			synctest.Wait()
		}
		if d, q := obs.get("dropped", "http://hooks.example"), obs.get("queued", "http://hooks.example"); d != extra || q != QueueSize {
			t.Errorf("dropped %d, queued %d", d, q)
		}
		close(hold)
		synctest.Wait()
		got := rc.all()
		var ids []string
		for _, r := range got {
			var ce struct{ ID string }
			_ = json.Unmarshal(r.body, &ce)
			ids = append(ids, ce.ID)
		}
		want := []string{"1000-0"}
		for rev := 1001 + extra; rev <= 1000+QueueSize+extra; rev++ {
			want = append(want, fmt.Sprintf("%d-0", rev))
		}
		if !slices.Equal(ids, want) {
			t.Errorf("delivered %d: %v…, want %d: %v…", len(ids), ids[:min(8, len(ids))], len(want), want[:8])
		}
		if q := obs.get("queued", "http://hooks.example"); q != 0 {
			t.Errorf("queued after: %d", q)
		}
	})
}

// TestTakeOver: a follower that takes the lead sends again what it
// applied in the minute before, with the leader's ids.
func TestTakeOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := mem.New()
		e := newEngine(t, store)
		c := store.Candidate()
		f := newEngine(t, c)
		rc, frc := &receiver{}, &receiver{}
		newSender(t, e, rc, nil, "http://hooks.example/")
		newSender(t, f, frc, nil, "http://hooks.example/")
		if _, err := e.CreateSession(t.Context(), forewarn.SessionSpec{Hosts: []string{"hv2"}, Notice: time.Hour}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		time.Sleep(30 * time.Second)
		c.Win()
		time.Sleep(2 * leaderCheck)
		synctest.Wait()
		ids := func(rs []received) (out []string) {
			for _, r := range rs {
				var ce struct{ ID string }
				_ = json.Unmarshal(r.body, &ce)
				out = append(out, ce.ID)
			}
			return out
		}
		if l, f := ids(rc.all()), ids(frc.all()); len(l) != 4 || !slices.Equal(l, f) {
			t.Errorf("the leader sent %v, the new leader %v", l, f)
		}
	})
}

// TestValidURL: webhook URLs, as forewarn.ValidWebhookURL checks them,
// are absolute http and https URLs only; no URL without a secret.
func TestValidURL(t *testing.T) {
	for u, ok := range map[string]bool{"https://h.example/x?y=1": true, "http://10.0.0.1:8080/": true, "ftp://h/": false,
		"/relative": false, "h.example/x": false, "https://": false, "mailto:a@b": false, "http://bad host/": false} {
		if err := forewarn.ValidWebhookURL(u); (err == nil) != ok {
			t.Errorf("ValidWebhookURL(%q) = %v", u, err)
		}
	}
	_, err := New(Config{URLs: []string{"https://h.example/"}})
	if forewarn.ErrorCode(err) != forewarn.EINVALID {
		t.Errorf("URLs without a secret: %v", err)
	}
	if (&Sender{}).Configured() || (*Sender)(nil).Configured() {
		t.Error("a sender without a secret is configured")
	}
}

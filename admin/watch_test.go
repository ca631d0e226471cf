package admin_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

// watchFleet: hosts hv1 (web_0) and hv2 (web_1, a2), all Azure.
func watchFleet() *forewarn.Fleet {
	vm := func(name, host string, last byte) *forewarn.VM {
		return &forewarn.VM{Name: name, Provider: forewarn.Azure, Host: host, IP: netip.AddrFrom4([4]byte{198, 18, 7, last})}
	}
	return &forewarn.Fleet{VMs: []*forewarn.VM{vm("web_0", "hv1", 1), vm("web_1", "hv2", 2), vm("a2", "hv2", 3)}}
}

// watchServer returns an engine of watchFleet, its VMs enabled, and an
// operator API on it.
func watchServer(t *testing.T) (*engine.Engine, *admin.Server) {
	t.Helper()
	eng, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: watchFleet(), AllowShortNotice: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	for _, vm := range eng.Fleet().VMs {
		eng.NoteRequest(vm.Name)
	}
	return eng, admin.NewServer(eng, nil)
}

// streamRec is a ResponseWriter that a test reads while the handler
// writes. When gate is set, each Write waits for a receive from it.
type streamRec struct {
	h    http.Header
	gate chan struct{}
	mu   sync.Mutex
	code int
	buf  bytes.Buffer
}

func (r *streamRec) Header() http.Header { return r.h }
func (r *streamRec) WriteHeader(code int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.code == 0 {
		r.code = code
	}
}
func (r *streamRec) Write(b []byte) (int, error) {
	if r.gate != nil {
		<-r.gate
	}
	r.WriteHeader(http.StatusOK)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.Write(b)
}
func (r *streamRec) Flush() {}

// take returns what was written since the last take.
func (r *streamRec) take() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.buf.String()
	r.buf.Reset()
	return s
}

// watching is a watch request being served.
type watching struct {
	*streamRec
	cancel context.CancelFunc
	done   chan struct{}
}

// stop ends the request and waits for its handler.
func (w *watching) stop() {
	w.cancel()
	<-w.done
}

// watch serves GET target from the address from, with the header lines
// hdr ("Name: value"), until stop; it returns once the handler waits.
func watch(t *testing.T, s *admin.Server, from, target string, gate chan struct{}, hdr ...string) *watching {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	r := httptest.NewRequestWithContext(ctx, "GET", "http://localhost"+target, nil)
	r.RemoteAddr = from + ":40000"
	for _, h := range hdr {
		k, v, _ := strings.Cut(h, ": ")
		r.Header.Add(k, v)
	}
	w := &watching{streamRec: &streamRec{h: http.Header{}, gate: gate}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		s.ServeHTTP(w.streamRec, r)
	}()
	synctest.Wait()
	return w
}

// fill replaces each key of subs, in order, by its value.
func fill(s string, subs ...string) string {
	return strings.NewReplacer(subs...).Replace(s)
}

// TestWatchSession: a session's run as the watch stream shows it, live
// and replayed from a revision, exactly; a revision the log never held
// gets a reset first.
func TestWatchSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng, s := watchServer(t)
		// The VMs' first requests are saved in one commit or a few, as
		// the saving goroutine happens to wake: the revisions below
		// count from the one after them.
		synctest.Wait()
		base := eng.Revision()
		rev := func(k int) string { return strconv.FormatInt(base+int64(k), 10) }
		hosts := watch(t, s, "198.18.2.1", "/v1/watch?kind=host,session", nil)
		all := watch(t, s, "198.18.2.1", "/v1/watch", nil)
		if c, ct := hosts.code, hosts.h.Get("Content-Type"); c != 200 || ct != "application/x-ndjson" {
			t.Fatalf("answer %d %q", c, ct)
		}
		ses, err := eng.CreateSession(t.Context(), forewarn.SessionSpec{Hosts: []string{"hv2"}, Notice: 70 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		ses, _ = eng.Session(ses.ID)
		h := ses.Hosts[0]
		time.Sleep(time.Second)
		if err := eng.Approve(t.Context(), "a2", []string{h.Events[0]}); err != nil {
			t.Fatal(err)
		}
		// Ready at NotBefore, 70 s; heartbeats every 15 s before.
		time.Sleep(69 * time.Second)
		synctest.Wait()
		if err := eng.HostDone(t.Context(), "hv2"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		subs := []string{"SID", ses.ID, "E1", h.Events[0], "E2", h.Events[1]}
		for k := 1; k <= 8; k++ {
			subs = append(subs, "R"+strconv.Itoa(k), rev(k))
		}
		host := `"host":{"name":"hv2","state":"%s","vms":["a2","web_1"],"events":["E1","E2"],"started":"2000-01-01T00:00:00Z"%s}}`
		ready := `,"readyAt":"2000-01-01T00:01:10Z"`
		hb := fill(`{"kind":"heartbeat","revision":R3}`+"\n", subs...)
		live := fill(`{"revision":R1,"time":"2000-01-01T00:00:00Z","kind":"session","id":"SID","to":"Running"}
{"revision":R2,"time":"2000-01-01T00:00:00Z","kind":"host","id":"hv2","session":"SID","from":"Pending","to":"Notifying",`+fmt.Sprintf(host, "Notifying", "")+`
`+strings.Repeat(hb, 4), subs...)
		tail := fill(`{"revision":R5,"time":"2000-01-01T00:01:10Z","kind":"host","id":"hv2","session":"SID","from":"Notifying","to":"Ready",`+fmt.Sprintf(host, "Ready", ready)+`
{"revision":R5,"time":"2000-01-01T00:01:10Z","kind":"host","id":"hv2","session":"SID","from":"Ready","to":"InMaintenance",`+fmt.Sprintf(host, "InMaintenance", ready)+`
{"revision":R6,"time":"2000-01-01T00:01:10Z","kind":"host","id":"hv2","session":"SID","from":"InMaintenance","to":"Done","host":{"name":"hv2","state":"Done","started":"2000-01-01T00:00:00Z"`+ready+`,"ended":"2000-01-01T00:01:10Z","vmCount":2,"eventCount":2}}
{"revision":R7,"time":"2000-01-01T00:01:10Z","kind":"session","id":"SID","from":"Running","to":"Done"}
`, subs...)
		if got := hosts.take(); got != live+tail {
			t.Errorf("the live stream:\n%s\nwant:\n%s", got, live+tail)
		}
		// Every kind: the events' transitions too, in commit order.
		if got := all.take(); strings.Count(got, "\n") != 16 || strings.Count(got, `"kind":"event"`) != 6 || strings.Count(got, hb) != 4 ||
			!strings.HasSuffix(got, tail[strings.LastIndex(tail[:len(tail)-1], "\n")+1:]) {
			t.Errorf("the stream of every kind:\n%s", got)
		}
		hosts.stop()
		all.stop()

		// Resumed after the host began notifying: the same bytes as the live stream's.
		again := watch(t, s, "198.18.2.1", "/v1/watch?kind=host,session&since="+rev(2), nil)
		if got := again.take(); got != tail {
			t.Errorf("resumed after 4:\n%s\nwant:\n%s", got, tail)
		}
		again.stop()
		// After a revision before the log's first (the server started
		// after the fleet's commit, 1): a reset to the newest revision,
		// then what comes next.
		old := watch(t, s, "198.18.2.1", "/v1/watch?kind=session&since=0", nil)
		if err := eng.PauseSession(t.Context(), ses.ID); forewarn.ErrorCode(err) != forewarn.ECONFLICT {
			t.Fatalf("pause a Done session: %v", err)
		}
		ses2, err := eng.CreateSession(t.Context(), forewarn.SessionSpec{Hosts: []string{"hv1"}, Notice: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		want := fill(`{"kind":"reset","revision":R7}
{"revision":R8,"time":"2000-01-01T00:01:10Z","kind":"session","id":"SID","to":"Running"}
`, "SID", ses2.ID, "R7", rev(7), "R8", rev(8))
		if got := old.take(); got != want {
			t.Errorf("resumed after 0:\n%s\nwant:\n%s", got, want)
		}
		old.stop()
	})
}

// tr returns a transition of the given kind and id at rev, to hand the
// watch log directly.
func tr(rev int64, kind, id, to string) engine.Transition {
	return engine.Transition{Revision: rev, Time: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), Kind: kind, ID: id, To: to}
}

// trLine is tr's transition as a watch line.
func trLine(rev int64, kind, id, to string) string {
	return fmt.Sprintf(`{"revision":%d,"time":"2000-01-01T00:00:00Z","kind":"%s","id":"%s","to":"%s"}`, rev, kind, id, to)
}

// TestWatchEventStream: with Accept: text/event-stream, each
// transition is an event whose data is its line; the last of each
// commit's (as the filter leaves them) carries the commit's revision as
// its id, so that Last-Event-ID resumes after whole commits; a
// heartbeat is a comment, 15 s after the last write; a reset carries its
// revision as its id.
func TestWatchEventStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, s := watchServer(t)
		sse := "Accept: text/event-stream"
		w := watch(t, s, "198.18.2.1", "/v1/watch?kind=host,session", nil, sse)
		if ct := w.h.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" {
			t.Fatalf("Content-Type %q", ct)
		}
		admin.AddTransitions(s, 100, []engine.Transition{tr(100, "event", "E1", "Started"), tr(100, "host", "hv1", "Ready"), tr(100, "event", "E2", "Started")})
		admin.AddTransitions(s, 101, []engine.Transition{tr(101, "session", "S1", "Paused"), tr(101, "host", "hv1", "Failed")})
		synctest.Wait()
		c101 := "data: " + trLine(101, "session", "S1", "Paused") + "\n\nid: 101\ndata: " + trLine(101, "host", "hv1", "Failed") + "\n\n"
		want := "id: 100\ndata: " + trLine(100, "host", "hv1", "Ready") + "\n\n" + c101
		if got := w.take(); got != want {
			t.Errorf("events:\n%q\nwant\n%q", got, want)
		}
		time.Sleep(15*time.Second - 1)
		synctest.Wait()
		if got := w.take(); got != "" {
			t.Errorf("before 15 s: %q", got)
		}
		time.Sleep(1)
		synctest.Wait()
		if got := w.take(); got != ": heartbeat 101\n\n" {
			t.Errorf("at 15 s: %q", got)
		}
		// A reload skipped commits: a reset, and the stream goes on.
		admin.AddTransitions(s, 150, nil)
		synctest.Wait()
		if got, want := w.take(), "id: 150\ndata: {\"kind\":\"reset\",\"revision\":150}\n\n"; got != want {
			t.Errorf("after a reload: %q, want %q", got, want)
		}
		admin.AddTransitions(s, 151, []engine.Transition{tr(151, "host", "hv1", "Done")})
		synctest.Wait()
		if got, want := w.take(), "id: 151\ndata: "+trLine(151, "host", "hv1", "Done")+"\n\n"; got != want {
			t.Errorf("after the reload: %q, want %q", got, want)
		}
		w.stop()

		// The log holds the commits after 150 only now.
		again := watch(t, s, "198.18.2.1", "/v1/watch?kind=host,session", nil, sse, "Last-Event-ID: 150")
		if got, want := again.take(), "id: 151\ndata: "+trLine(151, "host", "hv1", "Done")+"\n\n"; got != want {
			t.Errorf("after Last-Event-ID 150:\n%q\nwant\n%q", got, want)
		}
		again.stop()
		// ?since= wins over Last-Event-ID; a revision before the log's
		// first gets a reset, with its revision as the id.
		reset := watch(t, s, "198.18.2.1", "/v1/watch?since=100", nil, sse, "Last-Event-ID: 150")
		if got, want := reset.take(), "id: 151\ndata: {\"kind\":\"reset\",\"revision\":151}\n\n"; got != want {
			t.Errorf("since 100: %q, want %q", got, want)
		}
		reset.stop()
	})
}

// TestWatchSlowReader: a stream may fall behind by watchBehind (4,096)
// transitions that came after it started, and is sent them all; one
// more and it is ended, with a reset line, holding nothing.
func TestWatchSlowReader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, s := watchServer(t)
		for _, behind := range []int{4096, 4097} {
			gate := make(chan struct{})
			w := watch(t, s, "198.18.2.1", "/v1/watch", gate)
			base := int64(1000 * behind)
			admin.AddTransitions(s, base, []engine.Transition{tr(base, "session", "S", "Running")})
			synctest.Wait() // the stream's writer is stuck on its first line
			var want strings.Builder
			want.WriteString(trLine(base, "session", "S", "Running") + "\n")
			for i := range int64(behind) {
				admin.AddTransitions(s, base+1+i, []engine.Transition{tr(base+1+i, "host", "hv1", "Ready")})
				want.WriteString(trLine(base+1+i, "host", "hv1", "Ready") + "\n")
			}
			close(gate)
			synctest.Wait()
			got := w.take()
			if behind > 4096 {
				select {
				case <-w.done:
				default:
					t.Fatalf("%d behind: the stream goes on", behind)
				}
				want.Reset()
				fmt.Fprintf(&want, "%s\n{\"kind\":\"reset\",\"revision\":%d}\n", trLine(base, "session", "S", "Running"), base+int64(behind))
			}
			if got != want.String() {
				t.Errorf("%d behind: got %d bytes, want %d\n%.300s\n…\n%.300s", behind, len(got), want.Len(), got, got[max(len(got)-300, 0):])
			}
			w.stop()
		}
	})
}

// TestWatchCaps: at most 4 streams per source address and
// MaxWatches in all; over a cap, 503 with Retry-After. Shutdown ends
// them and refuses new ones.
func TestWatchCaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, s := watchServer(t)
		s.MaxWatches = 6
		var open []*watching
		for range 4 {
			open = append(open, watch(t, s, "198.18.2.1", "/v1/watch", nil))
		}
		refused := func(from, msg string) {
			t.Helper()
			w := watch(t, s, from, "/v1/watch", nil)
			<-w.done
			if got := w.take(); w.code != 503 || got != errorJSON("unavailable", msg) || w.h.Get("Retry-After") != "5" {
				t.Errorf("from %s: %d %s (Retry-After %q)", from, w.code, got, w.h.Get("Retry-After"))
			}
		}
		refused("198.18.2.1", "too many watch streams are open from 198.18.2.1 (at most 4); close one")
		open = append(open, watch(t, s, "198.18.2.2", "/v1/watch", nil), watch(t, s, "198.18.2.2", "/v1/watch", nil))
		refused("198.18.2.3", "too many watch streams are open (at most 6); close one")
		open[0].stop()
		open[0] = watch(t, s, "198.18.2.3", "/v1/watch", nil)
		for _, w := range open {
			if w.code != 200 {
				t.Fatalf("an open stream got %d", w.code)
			}
		}
		s.Shutdown()
		for _, w := range open {
			<-w.done
		}
		refused("198.18.2.4", "the server is shutting down")
	})
}

// TestWatchRequests: a bad kind or revision is refused with 400.
func TestWatchRequests(t *testing.T) {
	_, s := watchServer(t)
	for target, msg := range map[string]string{
		"/v1/watch?kind=host,vm":    `unknown kind "vm": want event, session or host, comma-separated`,
		"/v1/watch?since=-1":        `since "-1" is not a revision: want a whole number, 0 or more`,
		"/v1/watch?since=yesterday": `since "yesterday" is not a revision: want a whole number, 0 or more`,
	} {
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest("GET", "http://localhost"+target, nil))
		if w.Code != 400 || w.Body.String() != errorJSON("invalid", msg) {
			t.Errorf("%s: %d %s", target, w.Code, w.Body)
		}
	}
	// A HEAD gets the headers and holds no stream.
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest("HEAD", "http://localhost/v1/watch", nil))
	if w.Code != 200 || w.Header().Get("Content-Type") != "application/x-ndjson" || w.Body.Len() != 0 {
		t.Errorf("HEAD: %d %q %q", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
}

// TestClientWatch: Client.Watch over a real connection yields the
// transitions after a revision, of the kinds asked for, and the
// server's refusal as a *forewarn.Error.
func TestClientWatch(t *testing.T) {
	h := newHarness(t, nil)
	rev := h.eng.Revision()
	ev, err := h.client.CreateEvent(t.Context(), admin.CreateRequest{Type: "Freeze", VMs: []string{"db_0"}, Notice: "15m"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for tr, err := range h.client.Watch(ctx, rev, "event") {
		if err != nil {
			t.Fatal(err)
		}
		if tr.Kind != "event" || tr.ID != ev.ID || tr.To != "Scheduled" || tr.Event == nil || tr.Event.Resources[0] != "db_0" {
			t.Fatalf("got %+v", tr)
		}
		break
	}
	for _, err := range h.client.Watch(ctx, 0, "vm") {
		wantError(t, err, forewarn.EINVALID, `unknown kind "vm": want event, session or host, comma-separated`)
		break
	}
}

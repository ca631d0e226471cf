package aws

import (
	"bytes"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/history"
	"github.com/forewarn/forewarn/mem"
	"github.com/forewarn/forewarn/metrics"
	"github.com/forewarn/forewarn/metrics/metricstest"
)

// discard is a ResponseWriter that keeps its header map between
// requests, so a benchmark counts only the handler's own allocations.
type discard struct {
	h    http.Header
	code int
	body []byte
}

func (w *discard) Header() http.Header         { return w.h }
func (w *discard) Write(b []byte) (int, error) { w.body = b; return len(b), nil }
func (w *discard) WriteHeader(code int)        { w.code = code }

// The benchmark fleet's addresses: v1 takes IMDSv1 and v2 requires
// tokens.
const (
	benchV1 = "127.0.0.2:40000"
	benchV2 = "127.0.0.3:40000"
)

// benchVM returns EC2 VM i of a benchmark fleet, with the keys a fleet
// file's defaults give it.
func benchVM(i int, ip netip.Addr, tokens string) *forewarn.VM {
	return &forewarn.VM{Name: fmt.Sprintf("vm%06d", i), IP: ip, Provider: forewarn.AWS, InstanceID: fmt.Sprintf("i-%017x", i),
		Zone: "us-east-1a", MachineType: "m5.large", HTTPTokens: tokens, HopLimit: 1}
}

// benchEngine serves f from an in-memory store, with one EC2
// system-maintenance naming every VM of f, and returns the engine and
// the aws Server subscribed to it.
func benchEngine(tb testing.TB, f *forewarn.Fleet) (*engine.Engine, *Server) {
	tb.Helper()
	e, s := idleEngine(tb, f)
	spec := engine.Spec{Type: forewarn.SystemMaintenance, Notice: 24 * time.Hour, VMs: make([]string, len(f.VMs))}
	for i, vm := range f.VMs {
		spec.VMs[i] = vm.Name
	}
	if _, err := e.CreateAll(tb.Context(), spec); err != nil { // one event per VM
		tb.Fatal(err)
	}
	return e, s
}

// idleEngine serves f from an in-memory store, without events, and
// returns the engine and the aws Server subscribed to it.
func idleEngine(tb testing.TB, f *forewarn.Fleet) (*engine.Engine, *Server) {
	tb.Helper()
	e, err := engine.New(tb.Context(), engine.Config{Store: mem.New(), Fleet: f, AllowShortNotice: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close() })
	return e, NewServer(e, nil)
}

// getSetup returns a Server for two VMs with the event present, and a GET
// of the scheduled events key from remote.
func getSetup(tb testing.TB, remote string) (*Server, *http.Request) {
	tb.Helper()
	f := &forewarn.Fleet{VMs: []*forewarn.VM{
		benchVM(0, netip.MustParseAddrPort(benchV1).Addr(), "optional"),
		benchVM(1, netip.MustParseAddrPort(benchV2).Addr(), "required"),
	}}
	_, s := benchEngine(tb, f)
	r := httptest.NewRequest(http.MethodGet, "http://169.254.169.254/latest/meta-data/events/maintenance/scheduled", nil)
	r.RemoteAddr = remote
	return s, r
}

// getToken PUTs for a six-hour session token from remote.
func getToken(tb testing.TB, s *Server, remote string) string {
	tb.Helper()
	r := httptest.NewRequest(http.MethodPut, "http://169.254.169.254"+TokenPath, nil)
	r.RemoteAddr = remote
	r.Header.Set(TokenTTLHeader, "21600")
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	if w.Code != http.StatusOK || w.Body.Len() == 0 {
		tb.Fatalf("token PUT: %d %q", w.Code, w.Body)
	}
	return w.Body.String()
}

// serveLoop benchmarks s answering r, and checks the last answer lists
// the event.
func serveLoop(b *testing.B, s *Server, r *http.Request) {
	w := &discard{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		s.ServeHTTP(w, r)
	}
	if w.code != http.StatusOK || !bytes.Contains(w.body, []byte(`"system-maintenance"`)) {
		b.Fatalf("status %d, %q", w.code, w.body)
	}
}

// BenchmarkGET is the hot path: an IMDSv1 GET of events/maintenance/
// scheduled with an event present.
func BenchmarkGET(b *testing.B) {
	s, r := getSetup(b, benchV1)
	serveLoop(b, s, r)
}

// BenchmarkGETWithToken is the IMDSv2 GET of the same key by a VM that
// requires tokens: the token is verified on every request.
func BenchmarkGETWithToken(b *testing.B) {
	s, r := getSetup(b, benchV2)
	r.Header.Set(TokenHeader, getToken(b, s, benchV2))
	serveLoop(b, s, r)
}

// BenchmarkTokenPUT issues a session token (without a connection, so the
// hop limit's setsockopt is not part of it).
func BenchmarkTokenPUT(b *testing.B) {
	s, _ := getSetup(b, benchV2)
	r := httptest.NewRequest(http.MethodPut, "http://169.254.169.254"+TokenPath, nil)
	r.RemoteAddr = benchV2
	r.Header.Set(TokenTTLHeader, "21600")
	w := &discard{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		s.ServeHTTP(w, r)
	}
	if w.code != http.StatusOK || len(w.body) == 0 {
		b.Fatalf("status %d, %q", w.code, w.body)
	}
}

// BenchmarkRender renders every VM of an N-VM fleet from its view after
// one event naming them all: what the engine's publication of that event
// costs the aws renderer. One op is the whole fleet; ns/VM is per VM.
func BenchmarkRender(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("vms=%d", n), func(b *testing.B) {
			f := &forewarn.Fleet{VMs: make([]*forewarn.VM, n)}
			for i := range f.VMs {
				f.VMs[i] = benchVM(i, netip.Addr{}, "optional")
			}
			e, _ := benchEngine(b, f)
			views := make([]*engine.View, n)
			defs := make([]*def, n)
			for i, vm := range f.VMs {
				views[i], defs[i] = e.View(vm.Name), &def{vm: vm}
			}
			docs := make([]*doc, n)
			b.ReportAllocs()
			for b.Loop() {
				cache := &renderCache{} // as for a new version of the event
				for i, v := range views {
					docs[i] = render(v, defs[i], cache)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/VM")
			if d := docs[n-1]; !bytes.Contains(d.scheduled.bytes(), []byte(`"system-maintenance"`)) {
				b.Fatalf("the last VM's scheduled events: %s", d.scheduled.bytes())
			}
		})
	}
}

// BenchmarkRenderNew renders every VM of an idle N-VM fleet as a server
// meeting them does: at its start, or as they join the inventory. One op
// is the whole fleet; ns/VM is per VM.
func BenchmarkRenderNew(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("vms=%d", n), func(b *testing.B) {
			f := &forewarn.Fleet{VMs: make([]*forewarn.VM, n)}
			for i := range f.VMs {
				f.VMs[i] = benchVM(i, netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), "optional")
			}
			e, _ := idleEngine(b, f)
			views := make([]*engine.View, n)
			for i, vm := range f.VMs {
				views[i] = e.View(vm.Name)
			}
			docs := make([]*doc, n)
			b.ReportAllocs()
			for b.Loop() {
				cache := &renderCache{}
				for i, v := range views {
					docs[i] = render(v, &def{vm: v.VM}, cache)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/VM")
			if d := docs[n-1]; string(d.scheduled.bytes()) != "[]" {
				b.Fatalf("the last VM's scheduled events: %s", d.scheduled.bytes())
			}
		})
	}
}

// BenchmarkGETStatic is an IMDSv1 GET of meta-data/instance-id, a key
// of the VM's definition, once the VM has asked for one.
func BenchmarkGETStatic(b *testing.B) {
	s, r := getSetup(b, benchV1)
	r.URL.Path = "/latest/meta-data/instance-id"
	w := &discard{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		s.ServeHTTP(w, r)
	}
	if w.code != http.StatusOK || string(w.body) != "i-00000000000000000" {
		b.Fatalf("status %d, %q", w.code, w.body)
	}
}

// BenchmarkFirstGET is a VM's first GET of a key of its definition,
// meta-data/instance-id, which builds the definition's static answers.
func BenchmarkFirstGET(b *testing.B) {
	s, r := getSetup(b, benchV1)
	r.URL.Path = "/latest/meta-data/instance-id"
	df := s.slots.Load("vm000000").doc.Load().def
	w := &discard{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		df.st.Store(nil) // as before the VM's first request
		clear(w.h)
		s.ServeHTTP(w, r)
	}
	if w.code != http.StatusOK || string(w.body) != "i-00000000000000000" {
		b.Fatalf("status %d, %q", w.code, w.body)
	}
}

// TestGETDoesNotAllocate pins BenchmarkGET's result: an IMDSv1 GET of a
// prepared key makes no allocation in the handler's own code, with
// request metrics or without.
func TestGETDoesNotAllocate(t *testing.T) {
	for _, withMetrics := range []bool{false, true} {
		t.Run(fmt.Sprintf("IMDSv1/metrics+history=%v", withMetrics), func(t *testing.T) {
			s, r := getSetup(t, benchV1)
			m := setMetrics(s, withMetrics)
			noAllocs(t, s, r)
			if withMetrics {
				// The first GET, then 3 runs of AllocsPerRun's 201.
				if got := metricstest.Value(t, m, "forewarn_metadata_requests_total", "api=aws", "route=events", "code=200"); got != 1+3*201 {
					t.Errorf("requests counted: %v, want %d", got, 1+3*201)
				}
			}
		})
		t.Run(fmt.Sprintf("IMDSv2/metrics+history=%v", withMetrics), func(t *testing.T) {
			s, r := getSetup(t, benchV2)
			setMetrics(s, withMetrics)
			r.Header.Set(TokenHeader, getToken(t, s, benchV2))
			noAllocs(t, s, r)
		})
	}
}

// TestTokenCheckDoesNotAllocate: a GET whose token is checked by its
// signature makes no allocation either: two clients of one VM, each with
// its own token, a token header whose first value is bad, and a token of
// the key a rotation replaced beside one of the new key.
func TestTokenCheckDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop MACs put back")
	}
	synctest.Test(t, func(t *testing.T) {
		s, r := getSetup(t, benchV2)
		with := func(toks ...string) *http.Request {
			c := r.Clone(r.Context())
			c.Header = http.Header{}
			for _, tok := range toks {
				c.Header.Add(TokenHeader, tok)
			}
			return c
		}
		a := getToken(t, s, benchV2)
		time.Sleep(time.Second) // another expiry: another token
		b := getToken(t, s, benchV2)
		if n := allocsPerGET(t, s, with(a), with(b)); n != 0 {
			t.Errorf("two clients' tokens in turn: %v allocations per GET", n)
		}
		if n := allocsPerGET(t, s, with(strings.Repeat("A", 56), a), with("", b)); n != 0 {
			t.Errorf("a bad value before a good one: %v allocations per GET", n)
		}
		time.Sleep(engine.KeyRotation - time.Hour)
		old := getToken(t, s, benchV2) // signed with the key about to be replaced
		time.Sleep(time.Hour)
		synctest.Wait()
		// The new key signs once published: a token of each key.
		time.Sleep(engine.KeyPublish)
		if n := allocsPerGET(t, s, with(old), with(getToken(t, s, benchV2))); n != 0 {
			t.Errorf("the previous key's token and the current one's in turn: %v allocations per GET", n)
		}
	})
}

// allocsPerGET returns the allocations of one GET by s of rs in turn,
// each answered 200: the least of three runs, as noAllocs.
func allocsPerGET(t *testing.T, s *Server, rs ...*http.Request) float64 {
	t.Helper()
	w := &discard{h: http.Header{}}
	i := 0
	get := func() {
		clear(w.h)
		s.ServeHTTP(w, rs[i%len(rs)])
		i++
		if w.code != http.StatusOK {
			t.Fatalf("GET %d: status %d, %q", i, w.code, w.body)
		}
	}
	for range rs { // each request once first: a new token may be noted
		get()
	}
	n := math.Inf(1)
	for range 3 {
		n = min(n, testing.AllocsPerRun(200, get))
	}
	return n
}

// setMetrics gives s request metrics when on, and returns them.
func setMetrics(s *Server, on bool) *metrics.Metrics {
	if !on {
		return nil
	}
	m := metrics.New("mem")
	s.SetMetrics(m)
	// As the server does: the history follows the engine, so that the
	// hooks it runs per request (the client's note, the ring's restore,
	// the sighting) are part of the count.
	h := history.New(vmNames(s.eng.Fleet()), history.DefaultSize)
	h.Follow(s.eng)
	s.SetHistory(h)
	return m
}

func noAllocs(t *testing.T, s *Server, r *http.Request) {
	t.Helper()
	w := &discard{h: http.Header{}}
	s.ServeHTTP(w, r)
	if w.code != http.StatusOK || !bytes.Contains(w.body, []byte(`"system-maintenance"`)) {
		t.Fatalf("status %d, %q", w.code, w.body)
	}
	// The first GET enabled the VM, which the engine writes to its store
	// in the background, and AllocsPerRun counts every goroutine's
	// allocations: take the least of three runs. An allocation in the
	// handler shows in every run.
	n := math.Inf(1)
	for range 3 {
		n = min(n, testing.AllocsPerRun(200, func() { clear(w.h); s.ServeHTTP(w, r) }))
	}
	if n != 0 {
		t.Fatalf("%v allocations per GET", n)
	}
}

// vmNames returns the names of f's VMs.
func vmNames(f *forewarn.Fleet) []string {
	var out []string
	for _, vm := range f.VMs {
		out = append(out, vm.Name)
	}
	return out
}

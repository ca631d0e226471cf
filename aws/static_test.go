package aws

import (
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
)

// staticSetup returns an idle engine and Server for getSetup's two VMs:
// vm000000 at benchV1 takes IMDSv1, vm000001 at benchV2 requires tokens.
func staticSetup(t *testing.T) (*engine.Engine, *Server) {
	t.Helper()
	return idleEngine(t, &forewarn.Fleet{VMs: []*forewarn.VM{
		benchVM(0, netip.MustParseAddrPort(benchV1).Addr(), "optional"),
		benchVM(1, netip.MustParseAddrPort(benchV2).Addr(), "required"),
	}})
}

// defOf returns the def of the named VM's doc in force.
func defOf(s *Server, name string) *def { return s.slots.Load(name).doc.Load().def }

// get GETs path as the VM at remote, with tok unless it is empty.
func get(s *Server, remote, path, tok string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "http://169.254.169.254"+path, nil)
	r.RemoteAddr = remote
	if tok != "" {
		r.Header.Set(TokenHeader, tok)
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	return w
}

// TestStaticOnFirstUse: a VM's static answers are built on its first
// request for one of them, not before: not by rendering, a token PUT,
// a token check or an event key. They are kept while the definition
// stays the same, through the docs of its events, and built again for a
// new definition.
func TestStaticOnFirstUse(t *testing.T) {
	e, s := staticSetup(t)
	built := func(name string) bool { return defOf(s, name).st.Load() != nil }
	if built("vm000000") || built("vm000001") {
		t.Fatal("static answers built before any request")
	}
	tok := getToken(t, s, benchV2)
	if w := get(s, benchV2, "/latest/meta-data/events/maintenance/scheduled", tok); w.Code != 200 || w.Body.String() != "[]" {
		t.Fatalf("scheduled with a token: %d %q", w.Code, w.Body)
	}
	if w := get(s, benchV2, "/latest/meta-data/instance-id", ""); w.Code != 401 {
		t.Fatalf("instance-id without a token, which vm000001 requires: %d", w.Code)
	}
	if w := get(s, benchV1, "/latest/meta-data/events/maintenance/history", ""); w.Code != 200 {
		t.Fatalf("history: %d", w.Code)
	}
	if built("vm000000") || built("vm000001") {
		t.Fatal("static answers built by a token or an event key")
	}

	if w := get(s, benchV1, "/latest/meta-data/instance-id", ""); w.Code != 200 || w.Body.String() != "i-00000000000000000" {
		t.Fatalf("instance-id: %d %q", w.Code, w.Body)
	}
	if !built("vm000000") || built("vm000001") {
		t.Fatalf("after vm000000's instance-id: built %v and %v, want true and false", built("vm000000"), built("vm000001"))
	}
	df, st := defOf(s, "vm000000"), defOf(s, "vm000000").st.Load()

	// An event renders a new doc with the same definition.
	d := s.slots.Load("vm000000").doc.Load()
	if _, err := e.Create(t.Context(), engine.Spec{Type: forewarn.SystemReboot, VMs: []string{"vm000000"}, Notice: 48 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if s.slots.Load("vm000000").doc.Load() == d {
		t.Fatal("no new doc for the event")
	}
	if defOf(s, "vm000000") != df || df.st.Load() != st {
		t.Fatal("the event's doc does not keep the definition's static answers")
	}

	// A new definition starts again, with its own answers.
	vm := *e.Fleet().VM("vm000000")
	vm.MachineType = "m5.xlarge"
	if _, err := e.ChangeInventory(t.Context(), engine.InventoryChange{Set: []*forewarn.VM{&vm}}); err != nil {
		t.Fatal(err)
	}
	if defOf(s, "vm000000") == df || built("vm000000") {
		t.Fatal("a new definition kept the old one's answers")
	}
	if w := get(s, benchV1, "/latest/meta-data/instance-type", ""); w.Code != 200 || w.Body.String() != "m5.xlarge" {
		t.Fatalf("instance-type of the new definition: %d %q", w.Code, w.Body)
	}
}

// TestStaticConcurrent, for the race detector: VMs' first requests for
// their static answers, from many goroutines, race with the engine
// rendering their docs again for events and for new definitions, and
// every answer is the definition's.
func TestStaticConcurrent(t *testing.T) {
	e, s := staticSetup(t)
	types := map[string]bool{"m5.large": true, "m5.xlarge": true}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if w := get(s, benchV1, "/latest/meta-data/instance-id", ""); w.Code != 200 || w.Body.String() != "i-00000000000000000" {
					t.Errorf("instance-id: %d %q", w.Code, w.Body)
					return
				}
				if w := get(s, benchV1, "/latest/meta-data/instance-type", ""); w.Code != 200 || !types[w.Body.String()] {
					t.Errorf("instance-type: %d %q", w.Code, w.Body)
					return
				}
				if w := get(s, benchV1, "/latest/dynamic/instance-identity/signature", ""); w.Code != 200 || w.Body.Len() == 0 {
					t.Errorf("signature: %d %q", w.Code, w.Body)
					return
				}
			}
		})
	}
	for i := range 50 {
		vm := *e.Fleet().VM("vm000000")
		vm.MachineType = []string{"m5.large", "m5.xlarge"}[i%2]
		if _, err := e.ChangeInventory(t.Context(), engine.InventoryChange{Set: []*forewarn.VM{&vm}}); err != nil {
			t.Fatal(err)
		}
		ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.InstanceStop, VMs: []string{"vm000000"}, Notice: 48 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Cancel(t.Context(), ev.ID); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}

// TestStaticGETDoesNotAllocate: once a VM's first request for a key of
// its definition built its static answers, a GET of one makes no
// allocation in the handler, as TestGETDoesNotAllocate's of an event key.
func TestStaticGETDoesNotAllocate(t *testing.T) {
	for _, path := range []string{"/latest/meta-data/instance-id", "/latest/dynamic/instance-identity/pkcs7"} {
		t.Run(path, func(t *testing.T) {
			_, s := staticSetup(t)
			r := httptest.NewRequest(http.MethodGet, "http://169.254.169.254"+path, nil)
			r.RemoteAddr = benchV1
			w := &discard{h: http.Header{}}
			s.ServeHTTP(w, r) // the first: builds them
			if w.code != http.StatusOK || len(w.body) == 0 || defOf(s, "vm000000").st.Load() == nil {
				t.Fatalf("first GET: status %d, %q", w.code, w.body)
			}
			n := math.Inf(1)
			for range 3 { // the least of three runs, as noAllocs
				n = min(n, testing.AllocsPerRun(200, func() { clear(w.h); s.ServeHTTP(w, r) }))
			}
			if n != 0 {
				t.Fatalf("%v allocations per GET", n)
			}
		})
	}
}

// TestCachedTokenOfOldRegistration: a token cached by a check that raced
// the VM's new registration (checked against the old one, stored after
// the new one cleared the cache) is not taken for the new registration.
func TestCachedTokenOfOldRegistration(t *testing.T) {
	_, s := staticSetup(t)
	tok := getToken(t, s, benchV2)
	if w := get(s, benchV2, "/latest/meta-data/instance-id", tok); w.Code != 200 {
		t.Fatalf("GET with the token: %d %q", w.Code, w.Body)
	}
	sl := s.slots.Load("vm000001")
	c := sl.lastToken.Load()
	if c == nil || c.tok != tok {
		t.Fatalf("the token was not cached: %+v", c)
	}
	// The race's outcome: a new registration, and the old one's token
	// in the cache.
	sl.reg.Add(1)
	sl.lastToken.Store(c)
	if w := get(s, benchV2, "/latest/meta-data/instance-id", tok); w.Code != http.StatusUnauthorized {
		t.Fatalf("the old registration's token, cached: %d %q, want 401", w.Code, w.Body)
	}
}

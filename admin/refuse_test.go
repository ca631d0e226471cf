package admin_test

import (
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

// TestRefusedCallerIsDisconnected: a request without the token gets 401
// and its connection closes after the answer; an operator's does not.
func TestRefusedCallerIsDisconnected(t *testing.T) {
	eng, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: testFleet()})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	s := admin.NewServer(eng, nil)
	s.Token = "s3cret"
	for _, c := range []struct {
		token  string
		status int
		conn   string
	}{{"", 401, "close"}, {"wrong", 401, "close"}, {"s3cret", 200, ""}} {
		r := httptest.NewRequest("GET", "http://localhost/v1/events", nil)
		if c.token != "" {
			r.Header.Set("Authorization", "Bearer "+c.token)
		}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		if w.Code != c.status || w.Header().Get("Connection") != c.conn {
			t.Errorf("token %q: %d with Connection %q, want %d with %q", c.token, w.Code, w.Header().Get("Connection"), c.status, c.conn)
		}
	}
}

// TestRefusedVMIsDisconnected: a request from a fleet VM's address
// without the token gets 403, and its connection closes after the answer.
func TestRefusedVMIsDisconnected(t *testing.T) {
	fleet := &forewarn.Fleet{VMs: []*forewarn.VM{{Name: "web_7", IP: netip.MustParseAddr("127.0.0.7"), Provider: forewarn.Azure}}}
	eng, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: fleet})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	r := httptest.NewRequest("POST", "http://localhost/v1/vms/web_7/restart", nil)
	r.RemoteAddr = "127.0.0.7:40000"
	w := httptest.NewRecorder()
	admin.NewServer(eng, nil).ServeHTTP(w, r)
	if w.Code != 403 || w.Header().Get("Connection") != "close" {
		t.Errorf("%d with Connection %q, want 403 with close", w.Code, w.Header().Get("Connection"))
	}
}

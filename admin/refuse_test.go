package admin_test

import (
	"net/http/httptest"
	"testing"

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
		r := httptest.NewRequest("GET", "/v1/events", nil)
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

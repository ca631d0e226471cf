package admin_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

// FuzzOperatorJSON sends arbitrary bodies to the operator API's JSON
// routes: every answer is a documented status with a JSON body, and a
// refused request creates nothing. Seeds: testdata/fuzz/FuzzOperatorJSON.
func FuzzOperatorJSON(f *testing.F) {
	f.Add("/v1/events", []byte(`{"type":"Reboot","vms":["db_0"],"notice":"20m"}`))
	eng, err := engine.New(f.Context(), engine.Config{Store: mem.New(), Fleet: testFleet(), AllowShortNotice: true})
	if err != nil {
		f.Fatal(err)
	}
	defer eng.Close()
	h := admin.NewServer(eng, nil)
	routes := []string{"/v1/events", "/v1/maintenance", "/v1/vms/db_0/restart", "/v1/vms/ss_0/degrade"}
	f.Fuzz(func(t *testing.T, route string, body []byte) {
		if !strings.HasPrefix(route, "/v1/") {
			route = routes[len(route)%len(routes)]
		}
		before := len(eng.Events())
		r := httptest.NewRequest(http.MethodPost, "http://localhost"+sanitize(route), strings.NewReader(string(body)))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		switch w.Code {
		case 200, 201:
		case 400, 404, 405, 409, 413:
			if n := len(eng.Events()); n != before {
				t.Fatalf("a refused request (%d) changed the event count %d → %d", w.Code, before, n)
			}
		default:
			t.Fatalf("status %d for %s %q: %s", w.Code, route, body, w.Body)
		}
		if !json.Valid(w.Body.Bytes()) {
			t.Fatalf("answer is not JSON: %q", w.Body)
		}
	})
}

// sanitize keeps a fuzzed route a valid request target.
func sanitize(p string) string {
	var b strings.Builder
	for _, c := range p {
		if c > ' ' && c < 0x7f && c != '?' && c != '#' && c != '%' {
			b.WriteRune(c)
		}
	}
	return b.String()
}

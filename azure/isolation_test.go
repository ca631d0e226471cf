package azure_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
)

// TestHeadersCannotChangeTheVM: only the source address says which VM a
// request is. Forwarding headers and Host tricks change nothing, and an
// event of another scope can neither be seen nor approved through them.
func TestHeadersCannotChangeTheVM(t *testing.T) {
	e, h := setup(t)
	dbEvent, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"db_0"}, Source: forewarn.User})
	if err != nil {
		t.Fatal(err)
	}
	const mine = `{"DocumentIncarnation":1,"Events":[]}` // web_0 sees nothing
	tricks := []map[string]string{
		{"Forwarded": "for=127.0.0.4"},
		{"Forwarded": `for="127.0.0.4:40000";proto=http;by=127.0.0.1`},
		{"X-Real-IP": "127.0.0.4"},
		{"X-Client-IP": "127.0.0.4"},
		{"True-Client-IP": "127.0.0.4"},
		{"X-Original-Forwarded-For": "127.0.0.4"},
		{"Host": "127.0.0.4"},
		{"Host": "169.254.169.254"},
	}
	for _, extra := range tricks {
		hdr := map[string]string{"Metadata": "true"}
		for k, v := range extra {
			hdr[k] = v
		}
		w := do(h, req{target: path + "2020-07-01", header: hdr})
		if w.Code != 200 || w.Body.String() != mine {
			t.Errorf("%v: %d %s, want web_0's own document", extra, w.Code, w.Body)
		}
		w = do(h, req{method: "POST", target: path + "2020-07-01", header: hdr, body: `{"StartRequests":[{"EventId":"` + dbEvent.ID + `"}]}`})
		if w.Code != 400 {
			t.Errorf("%v: approval of db_0's event from web_0: %d %s", extra, w.Code, w.Body)
		}
	}
	// An absolute URI naming another host is still web_0.
	r := httptest.NewRequest("GET", "http://127.0.0.4/metadata/scheduledevents?api-version=2020-07-01", nil)
	r.RemoteAddr, r.Header["Metadata"] = web0, []string{"true"}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Body.String() != mine {
		t.Errorf("absolute URI: %s", w.Body)
	}
	// X-Forwarded-For is refused outright, in any spelling of its value.
	for _, v := range []string{"127.0.0.4", "", "127.0.0.2"} {
		w := do(h, req{target: path + "2020-07-01", header: map[string]string{"Metadata": "true", "X-Forwarded-For": v}})
		if w.Code != 400 || !strings.Contains(w.Body.String(), "X-Forwarded-For") {
			t.Errorf("X-Forwarded-For %q: %d %s", v, w.Code, w.Body)
		}
	}
	if ev, _ := e.Event(dbEvent.ID); ev.Status != forewarn.Scheduled || len(ev.Approvals) != 0 {
		t.Fatalf("db_0's event was touched: %+v", ev)
	}
}

package azure_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/azure"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

func fuzzServer(f *testing.F) (*engine.Engine, http.Handler, string) {
	e, err := engine.New(f.Context(), engine.Config{Store: mem.New(), Fleet: testFleet()})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { e.Close() })
	e.NoteRequest("web_0")
	ev, err := e.Create(f.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_0"}, Source: forewarn.User})
	if err != nil {
		f.Fatal(err)
	}
	return e, azure.NewServer(e, nil), ev.ID
}

// FuzzStartRequests posts arbitrary bodies: the answer is 200 with no
// body, or 400/413 with a JSON error, never a crash or a 500.
// Seeds: testdata/fuzz/FuzzStartRequests.
func FuzzStartRequests(f *testing.F) {
	_, h, id := fuzzServer(f)
	f.Add([]byte(`{"StartRequests":[{"EventId":"` + id + `"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest("POST", path+"2020-07-01", strings.NewReader(string(body)))
		r.RemoteAddr = web1
		r.Header.Set("Metadata", "true")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		switch w.Code {
		case 200:
			if w.Body.Len() != 0 {
				t.Fatalf("200 with a body %q", w.Body)
			}
		case 400, 413:
			if !json.Valid(w.Body.Bytes()) || !strings.HasPrefix(w.Body.String(), `{"error": `) {
				t.Fatalf("%d with body %q", w.Code, w.Body)
			}
		default:
			t.Fatalf("status %d for %q", w.Code, body)
		}
	})
}

// FuzzQuery sends arbitrary query strings: the answer is a document only
// for exactly one known api-version, else a JSON 400.
// Seeds: testdata/fuzz/FuzzQuery.
func FuzzQuery(f *testing.F) {
	_, h, _ := fuzzServer(f)
	f.Add("api-version=2020-07-01")
	f.Fuzz(func(t *testing.T, raw string) {
		if strings.ContainsAny(raw, " #\r\n\t\x00") {
			return // not a valid request target on the wire
		}
		r, err := http.NewRequest("GET", "http://169.254.169.254/metadata/scheduledevents?"+raw, nil)
		if err != nil {
			return
		}
		r.RemoteAddr = web0
		r.Header.Set("Metadata", "true")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		q := r.URL.Query()
		switch w.Code {
		case 200:
			v := q["api-version"]
			if len(v) != 1 || !contains(azure.Versions(), v[0]) {
				t.Fatalf("200 for query %q", raw)
			}
			for k, vals := range q {
				if len(vals) > 1 {
					t.Fatalf("200 with %s repeated in %q", k, raw)
				}
			}
		case 400:
			if !json.Valid(w.Body.Bytes()) {
				t.Fatalf("400 body %q", w.Body)
			}
		default:
			t.Fatalf("status %d for %q", w.Code, raw)
		}
	})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

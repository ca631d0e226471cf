package gce_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/gce"
	"github.com/forewarn/forewarn/mem"
)

// FuzzPathAndParams requests arbitrary keys and parameters: every answer
// has a documented status and the Metadata-Flavor header, and a
// wait_for_change never hangs past its timeout_sec bound (here always
// set to 0 so the fuzzer cannot block). Seeds: testdata/fuzz/FuzzPathAndParams.
func FuzzPathAndParams(f *testing.F) {
	e, err := engine.New(f.Context(), engine.Config{Store: mem.New(), Fleet: testFleet()})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { e.Close() })
	h := gce.NewServer(e, nil)
	f.Add("instance/maintenance-event", "alt=json")
	f.Fuzz(func(t *testing.T, key, query string) {
		if strings.ContainsAny(key+query, " #?\r\n\t\x00%") {
			return // not a valid request target on the wire
		}
		if strings.Contains(query, "wait_for_change") || strings.Contains(strings.ToLower(query), "wait") {
			// A parameter's first value counts: put the bound first, or an
			// empty timeout_sec of the input (no bound) would hold the
			// long-poll for good.
			query = "timeout_sec=0&" + query
		}
		r, err := http.NewRequest("GET", "http://metadata.google.internal"+v1+key+"?"+query, nil)
		if err != nil {
			return
		}
		r.RemoteAddr = vmAddr
		r.Header.Set("Metadata-Flavor", "Google")
		w := httptest.NewRecorder()
		done := make(chan struct{})
		go func() { h.ServeHTTP(w, r); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s?%s hangs", key, query)
		}
		switch w.Code {
		case 200, 301, 400, 404, 503:
		default:
			t.Fatalf("status %d for %s?%s", w.Code, key, query)
		}
		if w.Header().Get("Metadata-Flavor") != "Google" {
			t.Fatalf("no Metadata-Flavor on %d for %s?%s", w.Code, key, query)
		}
		if w.Code == 200 && len(w.Header()["ETag"]) == 0 && key != "" {
			t.Fatalf("200 without an ETag for %s?%s", key, query)
		}
	})
}

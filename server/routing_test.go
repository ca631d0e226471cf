package server_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/forewarn/forewarn/fleetfile"
	"github.com/forewarn/forewarn/server"
)

// getFrom sends GET path from remote to h and returns the answer.
func getFrom(h http.Handler, remote, path string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "http://169.254.169.254"+path, nil)
	r.RemoteAddr = remote
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestMetadataRoutesEC2Paths: the metadata listener hands every EC2 path
// to the EC2 API whoever asks, not only those under /latest/: a path
// under a dated version, or with empty segments, gets what the EC2 API
// answers, as a stranger or as a VM of another provider. Paths that are
// no EC2 path (/) still go to the caller's provider.
func TestMetadataRoutesEC2Paths(t *testing.T) {
	const stranger, gceVM = "127.0.0.77:40000", "127.0.0.3:40000"
	small := memConfig(t)
	dflt := memConfig(t)
	dflt.Fleet = fleetfile.Default() // a catch-all VM of each provider
	for _, c := range []struct {
		name   string
		cfg    server.Config
		remote string
		// path is asked of the metadata listener and want of the EC2 API.
		path, want string
		code       int
	}{
		{"stranger empty segment", small, stranger, "//latest/meta-data/instance-id", "/latest/meta-data/instance-id", 403},
		{"stranger 2021-03-23", small, stranger, "/2021-03-23/meta-data/", "/latest/meta-data/", 403},
		{"stranger 2009-04-04", small, stranger, "/2009-04-04/meta-data/", "/latest/meta-data/", 403},
		{"GCE VM empty segment", small, gceVM, "//latest/meta-data/instance-id", "/latest/meta-data/instance-id", 404},
		{"GCE VM 2009-04-04", small, gceVM, "/2009-04-04/meta-data/", "/latest/meta-data/", 404},
		{"stranger, catch-alls, empty segment", dflt, stranger, "//latest/meta-data/instance-id", "/latest/meta-data/instance-id", 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newNeutron(t, c.cfg) // a Server never run
			got, want := getFrom(s.Metadata(), c.remote, c.path), getFrom(s.AWS(), c.remote, c.want)
			if want.Code != c.code {
				t.Fatalf("the EC2 API answers %s with %d, want %d", c.want, want.Code, c.code)
			}
			if got.Code != want.Code || got.Body.String() != want.Body.String() {
				t.Errorf("%s: %d %q, want the EC2 API's %d %q", c.path, got.Code, got.Body, want.Code, want.Body)
			}
		})
	}
	t.Run("GCE VM /", func(t *testing.T) {
		s := newNeutron(t, small)
		got, want := getFrom(s.Metadata(), gceVM, "/"), getFrom(s.GCE(), gceVM, "/")
		if got.Code != http.StatusOK || got.Body.String() != want.Body.String() {
			t.Errorf("/: %d %q, want the GCE API's %d %q", got.Code, got.Body, want.Code, want.Body)
		}
	})
}

package aws_test

import (
	"net/http/httptest"
	"testing"

	"github.com/forewarn/forewarn/aws"
)

// FuzzRequest sends arbitrary tokens, TTLs and paths: the answer is one
// of the documented statuses, never a crash, and a GET with a token that
// was not issued is refused.
func FuzzRequest(f *testing.F) {
	_, h := setup(f)
	f.Add("/latest/meta-data/instance-id", "", "60")
	f.Add("/latest/api/token", "AQAAAABrBF2Q9fKfiiNHAGgvoCTwNB7vJp-JI-kLEqEyAAAAAAAAAAAAAAAA", "21600")
	f.Add("/latest/meta-data/", "====================================================", "0")
	f.Fuzz(func(t *testing.T, path, tok, ttl string) {
		if len(path) == 0 || path[0] != '/' {
			return
		}
		for _, method := range []string{"GET", "PUT"} {
			r := httptest.NewRequest(method, "http://169.254.169.254/", nil)
			r.URL.Path = path
			r.RemoteAddr = optAddr
			if tok != "" {
				r.Header.Set(aws.TokenHeader, tok)
			}
			r.Header.Set(aws.TokenTTLHeader, ttl)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			switch w.Code {
			case 200, 400, 403, 404, 405:
			case 401:
				if tok == "" {
					t.Fatalf("401 without a token on an optional VM: %s %q", method, path)
				}
			default:
				t.Fatalf("status %d for %s %q token %q ttl %q", w.Code, method, path, tok, ttl)
			}
			if method == "GET" && tok != "" && w.Code == 200 {
				t.Fatalf("a made-up token %q was accepted for %q", tok, path)
			}
		}
	})
}

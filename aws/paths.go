package aws

import (
	"net/http"
	"net/url"
	"strings"
)

// CleanPath returns p with each run of slashes made one, as EC2 reads a
// path: //latest/meta-data/x and /latest//meta-data/x are
// /latest/meta-data/x, and /// is / (docs/aws-wire.md, section 3). It
// returns p itself when p has no run.
func CleanPath(p string) string {
	if !strings.Contains(p, "//") {
		return p
	}
	b := make([]byte, 0, len(p))
	for i := 0; i < len(p); i++ {
		if p[i] == '/' && i > 0 && p[i-1] == '/' {
			continue
		}
		b = append(b, p[i])
	}
	return string(b)
}

// withPath returns a shallow copy of r with path as its URL's path, as
// http.StripPrefix makes one: a handler must not modify its request.
func withPath(r *http.Request, path string) *http.Request {
	r2 := new(http.Request)
	*r2 = *r
	r2.URL = new(url.URL)
	*r2.URL = *r.URL
	r2.URL.Path, r2.URL.RawPath = path, ""
	return r2
}

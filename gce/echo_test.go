package gce_test

import (
	"fmt"
	"strings"
	"testing"
)

// TestErrorsDoNotEchoHugeValues: an error page repeats at most 64 bytes
// of a request's own value (its path, method or a parameter), marked "…"
// when cut at a character boundary, HTML-escaped after the cut: a 16 MiB
// value gets a page of a few hundred bytes.
func TestErrorsDoNotEchoHugeValues(t *testing.T) {
	_, s := setup(t)
	huge := strings.Repeat("x", 16<<20)
	x64 := strings.Repeat("x", 64)
	page := func(status int, text, detail, url string) string {
		return fmt.Sprintf("<!DOCTYPE html>\n<html lang=en>\n<meta charset=utf-8>\n<title>Error %d (%s)</title>\n<p><b>%d.</b> %s\n<p>URL: <code>%s</code>\n",
			status, text, status, detail, url)
	}
	key := v1 + "instance/maintenance-event"
	for _, c := range []struct {
		name string
		r    req
		code int
		body string
	}{
		{"path", req{target: v1 + huge}, 404,
			page(404, "Not Found", "The requested URL was not found on this server.", "/computeMetadata/v1/"+strings.Repeat("x", 44)+"…")},
		{"path with characters to escape at the cut", req{target: v1 + strings.Repeat("x", 40) + "%3Cb%3E" + huge}, 404,
			page(404, "Not Found", "The requested URL was not found on this server.", "/computeMetadata/v1/"+strings.Repeat("x", 40)+"&lt;b&gt;"+strings.Repeat("x", 1)+"…")},
		{"alt", req{target: key + "?alt=" + huge}, 400,
			page(400, "Bad Request", "Bad request: alt must be json or text, not &#34;"+x64+"…&#34;.", key)},
		{"wait_for_change", req{target: key + "?wait_for_change=" + huge}, 400,
			page(400, "Bad Request", "Bad request: wait_for_change must be true or false, not &#34;"+x64+"…&#34;.", key)},
		{"recursive", req{target: key + "?recursive=" + huge}, 400,
			page(400, "Bad Request", "Bad request: recursive must be true or false, not &#34;"+x64+"…&#34;.", key)},
		{"timeout_sec", req{target: key + "?timeout_sec=" + huge}, 400,
			page(400, "Bad Request", "Bad request: timeout_sec must be a whole number of seconds, not &#34;"+x64+"…&#34;.", key)},
		{"method", req{method: strings.ToUpper(huge[:1<<20]), target: key}, 405,
			page(405, "Method Not Allowed", "The method "+strings.Repeat("X", 64)+"… is not allowed.", key)},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := do(s, c.r)
			check(t, w, c.code, "text/html; charset=UTF-8", c.body)
		})
	}
}

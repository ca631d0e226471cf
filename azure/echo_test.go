package azure_test

import (
	"strings"
	"testing"
)

// huge is 16 MiB of a value a request may carry.
var huge = strings.Repeat("x", 16<<20)

// TestErrorsDoNotEchoHugeValues: an error repeats at most 64 bytes of a
// request's own value, marked "…" when cut (at a character boundary):
// a 16 MiB api-version, path, repeated parameter name or EventId gets an
// answer of a few hundred bytes.
func TestErrorsDoNotEchoHugeValues(t *testing.T) {
	_, h := setup(t)
	x64 := strings.Repeat("x", 64)
	for _, c := range []struct {
		name string
		r    req
		code int
		body string
	}{
		{"api-version", req{target: path + huge}, 400,
			`{"error": "Bad request. api-version is invalid or was not specified in the request. For more information refer to aka.ms/azureimds", "newest-versions": ["2020-07-01", "2019-08-01", "2019-04-01"]}`},
		{"path", req{target: "/metadata/" + huge}, 404, `{"error": "Not found"}`},
		{"repeated parameter", req{target: path + "2020-07-01&" + huge + "=1&" + huge + "=2"}, 400,
			`{"error": "Bad request. Query parameter ` + x64 + `… is specified more than once"}`},
		{"EventId", req{method: "POST", target: path + "2020-07-01", body: `{"StartRequests":[{"EventId":"` + huge[:60<<10] + `"}]}`}, 400,
			`{"error": "Bad request. EventId ` + x64 + `… is not a scheduled event of this VM"}`},
		// Cut before a character that would straddle byte 64.
		{"EventId with a multi-byte character at the cut", req{method: "POST", target: path + "2020-07-01",
			body: `{"StartRequests":[{"EventId":"` + strings.Repeat("x", 63) + "é" + huge[:100] + `"}]}`}, 400,
			`{"error": "Bad request. EventId ` + strings.Repeat("x", 63) + `… is not a scheduled event of this VM"}`},
		{"short EventId, not cut", req{method: "POST", target: path + "2020-07-01", body: `{"StartRequests":[{"EventId":"` + x64 + `"}]}`}, 400,
			`{"error": "Bad request. EventId ` + x64 + ` is not a scheduled event of this VM"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			check(t, do(h, c.r), c.code, c.body)
		})
	}
}

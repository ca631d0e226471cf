package admin_test

import (
	"fmt"
	"strings"
	"testing"
)

// TestBodyAdmitsAWholeFleet checks that the operator API reads an event
// naming every VM of a 100,000-VM fleet, each name 64 characters long:
// the answer is about the names (the harness's fleet has none of them),
// not 413.
func TestBodyAdmitsAWholeFleet(t *testing.T) {
	h := newHarness(t, nil)
	var b strings.Builder
	b.WriteString(`{"type":"Freeze","vms":[`)
	for i := range 100_000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"%s%06d"`, strings.Repeat("v", 58), i)
	}
	b.WriteString(`]}`)
	if b.Len() < 6_700_000 {
		t.Fatalf("body of %d bytes is smaller than meant", b.Len())
	}
	status, _, body := h.raw(t, "POST", "/v1/events", b.String())
	want := fmt.Sprintf(`{"error":{"code":"not_found","message":"unknown VM \"%s000000\""}}`+"\n", strings.Repeat("v", 58))
	if status != 404 || body != want {
		t.Fatalf("got %d %s, want 404 %s", status, body, want)
	}
}

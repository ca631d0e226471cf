package admin_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestErrorsEchoLittle: an error answer shows at most 64 bytes of each
// value the request sent, marked with its length, wherever the value
// came from (a body field, a path, a query), and never more than about
// a kilobyte in all. It used to quote them whole: a 16 MiB notice came
// back as a 16 MiB message.
func TestErrorsEchoLittle(t *testing.T) {
	h := newHarness(t, nil)
	long := func(c string, n int) string { return strings.Repeat(c, n) }
	// shown is how a long value of n bytes of c appears in a message.
	shown := func(c string, n int) string { return fmt.Sprintf(`"%s"… (%d bytes)`, long(c, 64), n) }
	types := "Freeze, Reboot, Redeploy, Preempt, Terminate, MIGRATE_ON_HOST_MAINTENANCE, TERMINATE_ON_HOST_MAINTENANCE, instance-reboot, system-reboot, system-maintenance, instance-retirement, instance-stop"
	tests := []struct {
		name, method, path, body string
		status                   int
		code, message            string
	}{
		{"notice", "POST", "/v1/events", `{"type":"Freeze","vms":["db_0"],"notice":"` + long("1", 1000) + `"}`, 400,
			"invalid", "invalid notice " + shown("1", 1000) + ": want a duration such as 15m or 90s"},
		{"lasts", "POST", "/v1/events", `{"type":"Freeze","vms":["db_0"],"lasts":"` + long("1", 1000) + `"}`, 400,
			"invalid", "invalid lasts " + shown("1", 1000) + ": want a duration such as 15m or 90s"},
		{"duration number", "POST", "/v1/events", `{"type":"Freeze","vms":["db_0"],"durationInSeconds":` + long("9", 1000) + `}`, 400,
			"invalid", `field "durationInSeconds" must be a whole number, not number ` + long("9", 57) + "… (1007 bytes)"},
		{"unknown field", "POST", "/v1/events", `{"type":"Freeze","vms":["db_0"],"` + long("k", 1000) + `":1}`, 400,
			"invalid", "unknown field " + shown("k", 1000)},
		{"type", "POST", "/v1/events", `{"type":"` + long("T", 1000) + `","vms":["db_0"]}`, 400,
			"invalid", "unknown event type " + shown("T", 1000) + " (want one of " + types + ")"},
		{"source", "POST", "/v1/events", `{"type":"Freeze","vms":["db_0"],"source":"` + long("S", 1000) + `"}`, 400,
			"invalid", "unknown event source " + shown("S", 1000) + " (want Platform or User)"},
		{"vm option", "POST", "/v1/vms/db_0/restart", `{"notice":"` + long("2", 1000) + `"}`, 400,
			"invalid", "invalid notice " + shown("2", 1000) + ": want a duration such as 15m or 90s"},
		{"VM in path", "POST", "/v1/vms/" + long("n", 1000) + "/restart", "", 404,
			"not_found", "unknown VM " + shown("n", 1000)},
		{"VM shown", "GET", "/v1/vms/" + long("n", 1000), "", 404,
			"not_found", "no VM named " + shown("n", 1000)},
		{"event in path", "GET", "/v1/events/" + long("E", 1000), "", 404,
			"not_found", "no event " + shown("E", 1000)},
		{"reschedule", "POST", "/v1/events/X/reschedule", `{"notBefore":"` + long("2", 1000) + `"}`, 400,
			"invalid", "notBefore " + shown("2", 1000) + " is not an RFC 3339 time such as 2026-01-02T15:04:05Z"},
		{"scale set timeout", "PATCH", "/v1/scalesets/ss", `{"terminateNotBeforeTimeout":"P` + long("T", 999) + `"}`, 400,
			"invalid", "invalid terminateNotBeforeTimeout " + fmt.Sprintf(`"P%s"… (1000 bytes)`, long("T", 63)) + ": " +
				fmt.Sprintf(`"P%s"… (1000 bytes)`, long("T", 63)) + " is not an ISO 8601 duration: T is repeated"},
		{"scale set name", "PATCH", "/v1/scalesets/" + long("s", 1000), `{"terminateNotifications":true}`, 404,
			"not_found", "no scale set is named " + shown("s", 1000)},
		{"wave scope", "POST", "/v1/maintenance", `{"scope":"` + long("w", 1000) + `","type":"Freeze"}`, 404,
			"not_found", "no availability set, cloud service or scale set is named " + shown("w", 1000)},
		{"report VM", "GET", "/v1/report?vm=" + long("r", 1000), "", 404,
			"not_found", "no VM named " + shown("r", 1000)},
		{"report parameter", "GET", "/v1/report?" + long("p", 1000) + "=1", "", 400,
			"invalid", "unknown parameter " + shown("p", 1000) + " (want vm=NAME)"},
		{"route", "GET", "/v1/" + long("x", 1000), "", 404,
			"not_found", "no route for GET /v1/" + long("x", 60) + "… (1004 bytes)"},
		{"method", "PUT", "/v1/events/" + long("M", 1000) + "/approve", "", 405,
			"invalid", "method PUT is not allowed for /v1/events/" + long("M", 53) + "… (1019 bytes) (allowed: POST)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, body := h.raw(t, tt.method, tt.path, tt.body)
			want, _ := json.Marshal(map[string]map[string]string{"error": {"code": tt.code, "message": tt.message}})
			if status != tt.status || body != string(want)+"\n" {
				t.Errorf("got %d %.600s\nwant %d %s", status, body, tt.status, want)
			}
		})
	}
}

// TestHugeValuesAreNotEchoed: the requests of issue 21 (a 16 MiB string
// of digits as a create's notice, or as its durationInSeconds) are
// refused with an answer of a few hundred bytes, not 16 MiB.
func TestHugeValuesAreNotEchoed(t *testing.T) {
	h := newHarness(t, nil)
	digits := strings.Repeat("1", 16<<20-100)
	for _, body := range []string{
		`{"type":"Freeze","vms":["db_0"],"notice":"` + digits + `"}`,
		`{"type":"Freeze","vms":["db_0"],"durationInSeconds":` + digits + `}`,
		`{"type":"Freeze","vms":["db_0"],"` + digits + `":1}`,
	} {
		status, ctype, got := h.raw(t, "POST", "/v1/events", body)
		var e struct {
			Error struct{ Code, Message string }
		}
		if err := json.Unmarshal([]byte(got), &e); err != nil || status != 400 || ctype != "application/json" ||
			e.Error.Code != "invalid" || len(got) > 512 {
			t.Errorf("%.60s…: got %d %s, %d bytes: %.300s; want 400 invalid under 512 bytes", body, status, ctype, len(got), got)
		}
	}
	if n := len(h.eng.Events()); n != 0 {
		t.Errorf("refused requests made %d events", n)
	}
}

package admin_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestScaleSetsAPI checks GET /v1/scalesets and PATCH
// /v1/scalesets/{name} byte for byte, with their refusals.
func TestScaleSetsAPI(t *testing.T) {
	h := newHarness(t, nil)
	const list = `{"scaleSets":[` +
		`{"name":"spot","terminateNotifications":true,"source":"fleet","vms":1,"terminateNotBeforeTimeout":"PT5M"},` +
		`{"name":"ss","terminateNotifications":true,"source":"fleet","vms":2,"terminateNotBeforeTimeout":"PT5M"}]}` + "\n"
	if code, ct, body := h.raw(t, http.MethodGet, "/v1/scalesets", ""); code != 200 || ct != "application/json" || body != list {
		t.Fatalf("GET /v1/scalesets: %d %q %s", code, ct, body)
	}
	for _, c := range []struct {
		path, body string
		code       int
		want       string
	}{
		{"/v1/scalesets/ss", `{"terminateNotBeforeTimeout":"PT10M","terminateNotifications":false}`, 200,
			`{"name":"ss","terminateNotifications":false,"source":"operator","vms":2,"terminateNotBeforeTimeout":"PT10M"}`},
		{"/v1/scalesets/ss", `{"terminateNotBeforeTimeout":"7m"}`, 200,
			`{"name":"ss","terminateNotifications":false,"source":"operator","vms":2,"terminateNotBeforeTimeout":"PT7M"}`},
		{"/v1/scalesets/nope", `{"terminateNotBeforeTimeout":"PT10M"}`, 404, `"code":"not_found"`},
		{"/v1/scalesets/ss", `{"terminateNotBeforeTimeout":"PT1H"}`, 400, `"code":"invalid"`},
		{"/v1/scalesets/ss", `{"terminateNotBeforeTimeout":"PTX"}`, 400, `invalid terminateNotBeforeTimeout \"PTX\"`},
		{"/v1/scalesets/ss", `{}`, 400, `nothing to change`},
		{"/v1/scalesets/ss", `{"timeout":"PT10M"}`, 400, `"code":"invalid"`},
		{"/v1/scalesets/ss", ``, 400, `missing request body`},
	} {
		code, _, body := h.raw(t, http.MethodPatch, c.path, c.body)
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("PATCH %s %s: %d %s, want %d with %s", c.path, c.body, code, body, c.code, c.want)
		}
	}
}

// TestStartVMAPI checks POST /v1/vms/{name}/start: 200 with the VM once
// a preemption stopped it, and the refusals before that.
func TestStartVMAPI(t *testing.T) {
	h := newHarness(t, nil)
	for _, c := range []struct {
		name string
		code int
		want string
	}{
		{"nope", 404, `"code":"not_found"`},
		{"web_0", 400, `only a stopped Compute Engine or EC2 VM can be started`},
		{"gce_0", 409, `VM \"gce_0\" is running, not stopped`},
	} {
		if code, _, body := h.raw(t, http.MethodPost, "/v1/vms/"+c.name+"/start", ""); code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("start %s: %d %s, want %d with %s", c.name, code, body, c.code, c.want)
		}
	}
}

package admin_test

import (
	"fmt"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

// allocated returns the bytes allocated while fn ran.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestCreateBodyCostIsBounded: a 16 MiB create body costs what the
// fleet allows, not what it holds. Each body is refused, with the exact
// reason, as soon as the reason is read, having allocated under 2 MiB;
// read whole, they cost 4 to 37 times their size (629 MB for a list of
// one-letter names).
func TestCreateBodyCostIsBounded(t *testing.T) {
	eng, s := guardServer(t) // 9 VMs
	const size = 16<<20 - 256
	fill := func(prefix, unit, suffix string) string {
		var b strings.Builder
		b.Grow(size + 64)
		b.WriteString(prefix)
		for b.Len() < size-len(suffix) {
			b.WriteString(unit)
		}
		b.WriteString(suffix)
		return b.String()
	}
	long := func(field string) string {
		return fmt.Sprintf("field %q holds a value longer than 65536 bytes", field)
	}
	for _, c := range []struct {
		name, body string
		status     int
		code, msg  string
	}{
		{"many short names", fill(`{"type":"Freeze","vms":[`, `"a",`, `"a"]}`), 404, "not_found", `unknown VM "a"`},
		{"one fleet name again and again", fill(`{"type":"Freeze","vms":[`, `"db_0",`, `"db_0"]}`), 400, "invalid", `VM "db_0" is named twice`},
		{"every VM, then more", fill(`{"type":"Freeze","vms":["web_0","web_1","db_0","gce_0","ss_0","ss_1","spot_0","dup_0","dup_1",`, `"a",`, `"a"]}`),
			400, "invalid", `field "vms" names more VMs than the fleet's 9`},
		{"one long name", fill(`{"type":"Freeze","vms":["`, "x", `"]}`), 400, "invalid", long("vms")},
		{"a name longer than any", `{"type":"Freeze","vms":["db_0","spot_00"]}`, 404, "not_found", `unknown VM "spot_00"`},
		{"nested arrays", fill(`{"type":"Freeze","vms":[`, "[", ""), 400, "invalid", "malformed JSON at byte 10025: invalid character '[' exceeded max depth"},
		{"notice digits", fill(`{"type":"Freeze","vms":["db_0"],"notice":"`, "1", `"}`), 400, "invalid", long("notice")},
		{"duration digits", fill(`{"type":"Freeze","vms":["db_0"],"durationInSeconds":`, "1", `}`), 400, "invalid", long("durationInSeconds")},
		{"description", fill(`{"type":"Freeze","vms":["db_0"],"description":"`, "d", `"}`), 400, "invalid", long("description")},
		{"nested objects", fill(`{"type":`, `{"a":`, ""), 400, "invalid", "malformed JSON at byte 50009: invalid character '{' exceeded max depth"},
		{"a long key", fill(`{"`, "k", `":1}`), 400, "invalid", "the request body holds a value longer than 65536 bytes"},
		{"space", fill(`{`, " ", `}`), 400, "invalid", "the request body holds a value longer than 65536 bytes"},
		{"one field again and again", fill(`{"vms":["db_0"]`, `,"type":"Freeze"`, `}`), 400, "invalid", `field "type" is given twice`},
		{"unknown fields", fill(`{"type":"Freeze"`, `,"a":1`, `}`), 400, "invalid", `unknown field "a"`},
		{"trailing values", fill(`{"type":"Freeze","vms":["db_0"]}`, ` {}`, ""), 400, "invalid", "malformed JSON: unexpected data after the request object"},
	} {
		r := httptest.NewRequest("POST", "http://localhost/v1/events", strings.NewReader(c.body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		n := allocated(func() { s.ServeHTTP(w, r) })
		if want := errorJSON(c.code, c.msg); w.Code != c.status || w.Body.String() != want {
			t.Errorf("%s: %d %.300s\nwant %d %s", c.name, w.Code, w.Body, c.status, want)
		}
		if n > 2<<20 {
			t.Errorf("%s: a %d-byte body allocated %d bytes, want under 2 MiB", c.name, len(c.body), n)
		}
	}
	if n := len(eng.Events()); n != 0 {
		t.Errorf("refused creates made %d events", n)
	}
}

// TestCreateNamesUpToTheFleet: a create may name every VM of the fleet,
// with names as long as its longest; one more name, or a longer one, is
// refused as it is read.
func TestCreateNamesUpToTheFleet(t *testing.T) {
	const n = 2000
	fleet := &forewarn.Fleet{}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s%06d", strings.Repeat("v", 58), i) // 64 bytes
		fleet.VMs = append(fleet.VMs, &forewarn.VM{Name: names[i], Provider: forewarn.Azure})
	}
	eng, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: fleet, AllowShortNotice: true})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	s := admin.NewServer(eng, nil)
	create := func(vms []string) (int, string) {
		body := `{"type":"Freeze","notice":"1m","vms":["` + strings.Join(vms, `","`) + `"]}`
		r := httptest.NewRequest("POST", "http://localhost/v1/events", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	if code, body := create(append(names[:n:n], names[0])); code != 400 || body != errorJSON("invalid", `field "vms" names more VMs than the fleet's 2000`) {
		t.Errorf("%d names: %d %s", n+1, code, body)
	}
	longer := names[5] + "x"
	if code, body := create([]string{names[0], longer}); code != 404 || body != errorJSON("not_found", `unknown VM "`+longer[:64]+`"… (65 bytes)`) {
		t.Errorf("a 65-byte name: %d %s", code, body)
	}
	if code, body := create(names); code != 201 {
		t.Fatalf("the whole fleet: %d %.300s", code, body)
	}
	// Standalone VMs: one event each (a scope group each).
	if evs := eng.Events(); len(evs) != n || len(evs[0].Resources) != 1 {
		t.Fatalf("events after the creates: %d", len(evs))
	}
}

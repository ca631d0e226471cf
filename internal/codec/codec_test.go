package codec

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
)

func TestBatch(t *testing.T) {
	defs := map[string]*forewarn.Definition{
		"vm-a": {VM: &forewarn.VM{Name: "vm-a", IP: netip.MustParseAddr("10.0.0.1"), Provider: forewarn.Azure}, Seq: 1},
		"vm-b": nil,
		"vm-c": {VM: &forewarn.VM{Name: "vm-c", Provider: forewarn.GCE, UpdateDomain: 3}, Seq: 2},
	}
	names := []string{"vm-a", "vm-b", "vm-c"}
	b, err := Encode(names, defs)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"vm":{"name":"vm-a","ip":"10.0.0.1","provider":"azure","updateDomain":0},"seq":1}`,
		``,
		`{"vm":{"name":"vm-c","provider":"gce","updateDomain":3},"seq":2}`,
	}
	strs := b.Strings()
	for i, w := range want {
		if got := string(b.Bytes(i)); got != w {
			t.Errorf("Bytes(%d) = %s, want %s", i, got, w)
		}
		if strs[i] != w {
			t.Errorf("Strings()[%d] = %s, want %s", i, strs[i], w)
		}
	}
	// A value's slice cannot grow into the next one's.
	if v := b.Bytes(0); cap(v) != len(v) {
		t.Errorf("Bytes(0) has capacity %d beyond its length %d", cap(v), len(v))
	}
	for i, name := range names {
		if defs[name] == nil {
			continue
		}
		d, err := Definition(name, b.Bytes(i))
		if err != nil || *d.VM != *defs[name].VM || d.Seq != defs[name].Seq {
			t.Errorf("Definition(%s) = %+v, %v; want %+v", name, d, err, defs[name])
		}
	}
}

func TestDecodeRefuses(t *testing.T) {
	for _, c := range []struct{ name, json, err string }{
		{"vm-a", `{"vm":{"name":"vm-b"},"seq":1}`, `definition of VM "vm-b" is stored under "vm-a"`},
		{"vm-a", `{"seq":1}`, `definition of "vm-a" holds no VM`},
		{"vm-a", `{"vm":{"name":"vm-a","ip":"10.0.0"}}`, `ParseAddr("10.0.0")`},
		{"vm-a", `{"vm":`, `unexpected end of JSON input`},
	} {
		if _, err := Definition(c.name, []byte(c.json)); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("Definition(%s, %s) = %v, want an error containing %q", c.name, c.json, err, c.err)
		}
	}
	if _, err := ScaleSet("ss-a", []byte(`{"name":"ss-b"}`)); err == nil || err.Error() != `scale set definition "ss-b" is stored under "ss-a"` {
		t.Errorf("ScaleSet under another name: %v", err)
	}
	ss, err := ScaleSet("ss-a", []byte(`{"name":"ss-a","terminateNotBeforeTimeout":600000000000,"disableTerminateNotifications":true}`))
	if err != nil || *ss != (forewarn.ScaleSet{Name: "ss-a", TerminateTimeout: 10 * time.Minute, DisableTerminateNotifications: true}) {
		t.Errorf("ScaleSet = %+v, %v", ss, err)
	}
}

func TestSession(t *testing.T) {
	if _, err := Session("ses-a", []byte(`{"id":"ses-b"}`)); err == nil || err.Error() != `session "ses-b" is stored under "ses-a"` {
		t.Errorf("Session under another ID: %v", err)
	}
	if _, err := Session("ses-a", []byte(`{"id":"ses-a","created":"yesterday"}`)); err == nil {
		t.Error("Session with a bad time: no error")
	}
	ses, err := Session("ses-a", []byte(`{"id":"ses-a","state":"Running","created":"2026-03-01T10:00:00.5+01:00",`+
		`"hosts":[{"name":"host-1","state":"Ready","readyAt":"2026-03-01T11:00:00+01:00"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	// Times come back in UTC; hosts is a non-nil slice, as Normalized makes it.
	want := &forewarn.Session{ID: "ses-a", State: forewarn.SessionRunning, Created: time.Date(2026, 3, 1, 9, 0, 0, 5e8, time.UTC),
		Hosts: []forewarn.SessionHost{{Name: "host-1", State: forewarn.HostReady, ReadyAt: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)}}}
	if !reflect.DeepEqual(ses, want) {
		t.Errorf("Session = %+v, want %+v", ses, want)
	}
}

// TestNormalizedSessions: each session is a normalized copy of its own,
// and a removal stays a removal.
func TestNormalizedSessions(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.FixedZone("X", 3600))
	ses := &forewarn.Session{ID: "S1", Created: at, Hosts: []forewarn.SessionHost{{Name: "hv1", Started: at, VMs: []string{"a"}}}}
	m := map[string]*forewarn.Session{"S1": ses, "S2": nil}
	out := NormalizedSessions(m)
	if len(out) != 2 || out["S2"] != nil {
		t.Fatalf("NormalizedSessions = %v", out)
	}
	got := out["S1"]
	if got == ses || !reflect.DeepEqual(got, ses.Normalized()) || got.Created.Location() != time.UTC || got.Hosts[0].Started.Location() != time.UTC {
		t.Fatalf("S1 = %+v", got)
	}
	got.Hosts[0].VMs[0] = "b"
	if ses.Hosts[0].VMs[0] != "a" {
		t.Error("the copy shares the session's lists")
	}
}

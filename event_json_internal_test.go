package forewarn

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"
)

// TestEventJSONAsReflection: MarshalJSON's own writer gives the bytes
// encoding/json gives the same event, over events with every field
// set or zero, strings that need escapes, and times of every precision
// and zone.
func TestEventJSONAsReflection(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	strs := []string{"", "vm-1", "a\"b", `back\slash`, "<html>&", "tab\there", "é ünïcode", "\u2028", "bad \xff utf8", "Forewarn benchmark"}
	str := func() string { return strs[r.IntN(len(strs))] }
	zones := []*time.Location{time.UTC, time.FixedZone("x", 5*3600+1800), time.FixedZone("y", -7*3600)}
	tm := func() time.Time {
		if r.IntN(3) == 0 {
			return time.Time{}
		}
		ns := []int{0, 500_000_000, 123_456_789, 1000}[r.IntN(4)]
		return time.Date(1990+r.IntN(60), time.Month(1+r.IntN(12)), 1+r.IntN(28), r.IntN(24), r.IntN(60), r.IntN(60), ns, zones[r.IntN(len(zones))])
	}
	for i := range 2000 {
		e := Event{ID: str(), Type: EventType(str()), Status: Status(str()), NotBefore: tm(), Duration: r.IntN(3) * 300,
			Source: Source(str()), Description: str(), Wave: str(), Notice: time.Duration(r.IntN(3)) * time.Minute,
			Lasts: time.Duration(r.IntN(3)) * 90 * time.Second, Created: tm(), WarnedAt: tm(), StartedAt: tm(), EndedAt: tm(),
			ResumedAt: tm(), Deadline: tm(), Action: str()}
		switch r.IntN(3) {
		case 1:
			e.Resources = []string{}
		case 2:
			e.Resources = []string{str(), str()}
		}
		switch r.IntN(3) {
		case 1:
			e.Approvals = []Approval{}
		case 2:
			e.Approvals = []Approval{{By: str(), At: tm()}, {By: str(), At: tm()}}
		}
		got, err := e.MarshalJSON()
		want, werr := e.marshalReflect()
		if err != nil || werr != nil || !bytes.Equal(got, want) {
			t.Fatalf("event %d:\n got %s (%v)\nwant %s (%v)", i, got, err, want, werr)
		}
	}
	// A year encoding/json refuses is refused the same way.
	e := Event{ID: "X", Created: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}
	if _, err := e.MarshalJSON(); err == nil {
		t.Error("an event created in the year 10000 was encoded; want encoding/json's error")
	}
}

// BenchmarkEventJSON encodes one event as a store does.
func BenchmarkEventJSON(b *testing.B) {
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	e := Event{ID: "0A1B2C3D-0000-4000-8000-000000000000", Type: SystemMaintenance, Status: Scheduled, Resources: []string{"vm12345"},
		NotBefore: at.Add(time.Hour), Created: at, Lasts: time.Hour, Description: "Forewarn benchmark"}
	b.Run("own", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			e.MarshalJSON()
		}
	})
	b.Run("reflect", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			e.marshalReflect()
		}
	})
}

package forewarn_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
)

func TestEventJSON(t *testing.T) {
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	ev := forewarn.Event{ID: "A", Type: forewarn.Reboot, Status: forewarn.Started, Resources: []string{"web_0"},
		Duration: -1, Source: forewarn.User, Lasts: 90 * time.Second, Created: at, StartedAt: at}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"id":"A","type":"Reboot","status":"Started","resources":["web_0"],"durationInSeconds":-1,"source":"User","description":"","created":"2026-11-21T10:00:00Z","startedAt":"2026-11-21T10:00:00Z","lasts":"1m30s"}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	var back forewarn.Event
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Lasts != ev.Lasts || !back.StartedAt.Equal(at) || back.ID != "A" || back.Resources[0] != "web_0" {
		t.Fatalf("round trip: %+v", back)
	}
	if err := json.Unmarshal([]byte(`{"id":"B","lasts":"soon"}`), &back); err == nil {
		t.Fatal("a bad lasts decoded")
	}
}

func TestParse(t *testing.T) {
	if ty, err := forewarn.ParseEventType("freeze"); err != nil || ty != forewarn.Freeze {
		t.Fatalf("ParseEventType(freeze) = %v, %v", ty, err)
	}
	if s, err := forewarn.ParseSource("user"); err != nil || s != forewarn.User {
		t.Fatalf("ParseSource(user) = %v, %v", s, err)
	}
	for ty, want := range map[forewarn.EventType]time.Duration{forewarn.Freeze: 15 * time.Minute, forewarn.Reboot: 15 * time.Minute,
		forewarn.Redeploy: 10 * time.Minute, forewarn.Preempt: 30 * time.Second, forewarn.Terminate: 5 * time.Minute} {
		if got := ty.MinNotice(); got != want {
			t.Errorf("%s minimum notice %s, want %s", ty, got, want)
		}
	}
}

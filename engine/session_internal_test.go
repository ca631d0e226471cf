package engine

import (
	"testing"
	"time"

	"github.com/forewarn/forewarn"
)

// TestInstallSessionsNewest: the index of each host's newest session
// follows installs, ties broken by ID, and falls back to the next newest
// when the newest is removed or moves back in time.
func TestInstallSessionsNewest(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	ses := func(id string, created time.Time, hosts ...string) *forewarn.Session {
		s := &forewarn.Session{ID: id, Created: created, State: forewarn.SessionRunning}
		for _, h := range hosts {
			s.Hosts = append(s.Hosts, forewarn.SessionHost{Name: h, State: forewarn.HostPending})
		}
		return s
	}
	e := &Engine{sessions: make(map[string]*forewarn.Session), newest: make(map[string]hostIn)}
	want := func(step string, newest map[string]string) {
		t.Helper()
		got := make(map[string]string)
		for h, st := range e.HostStatuses() {
			got[h] = st.Session
		}
		if len(got) != len(newest) {
			t.Fatalf("%s: %v, want %v", step, got, newest)
		}
		for h, id := range newest {
			if got[h] != id {
				t.Fatalf("%s: %v, want %v", step, got, newest)
			}
		}
	}
	e.installSessions(map[string]*forewarn.Session{"B": ses("B", t0, "hv1", "hv2"), "A": ses("A", t0, "hv2", "hv3")})
	want("a tie", map[string]string{"hv1": "B", "hv2": "B", "hv3": "A"})
	e.installSessions(map[string]*forewarn.Session{"C": ses("C", t0.Add(-time.Second), "hv1", "hv3")})
	want("an older one", map[string]string{"hv1": "B", "hv2": "B", "hv3": "A"})
	e.installSessions(map[string]*forewarn.Session{"B": nil})
	want("B removed", map[string]string{"hv1": "C", "hv2": "A", "hv3": "A"})
	e.installSessions(map[string]*forewarn.Session{"A": ses("A", t0.Add(-2*time.Second), "hv2", "hv3")})
	want("A moved back", map[string]string{"hv1": "C", "hv2": "A", "hv3": "C"})
	if st := e.HostStatus("hv2"); st.Session != "A" || st.State != forewarn.HostPending || st.SessionState != forewarn.SessionRunning {
		t.Fatalf("HostStatus(hv2) = %+v", st)
	}
	e.installSessions(map[string]*forewarn.Session{"A": nil, "C": nil})
	want("all removed", map[string]string{})
}

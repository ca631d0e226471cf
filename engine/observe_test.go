package engine_test

import (
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

// recorder is an engine.Observer that keeps what it is told.
type recorder struct {
	mu          sync.Mutex
	transitions []string
	approvals   []string // by, time since creation, time to NotBefore
	lags        []time.Duration
	commits     int
}

func (r *recorder) Transition(t forewarn.EventType, from, to forewarn.Status) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.transitions = append(r.transitions, string(t)+" "+string(from)+">"+string(to))
}

func (r *recorder) Approval(by string, ev *forewarn.Event, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	toNotBefore := "started" // NotBefore is gone once an event starts
	if !ev.NotBefore.IsZero() {
		toNotBefore = ev.NotBefore.Sub(at).String()
	}
	r.approvals = append(r.approvals, by+" "+at.Sub(ev.Created).String()+" "+toNotBefore)
}

func (r *recorder) DeadlineLag(late time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lags = append(r.lags, late)
}

func (r *recorder) Commit(time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.commits++
}

// TestMetricsObserver checks what the engine reports to its Observer through a
// lifecycle: transitions with their from and to, approvals with the time
// since notice and to NotBefore, a deadline timer's lag (none, in a
// bubble), one commit per write; and its event counts and enabled VMs.
func TestMetricsObserver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		e, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: testFleet(), Observer: rec})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		e.NoteRequest("web_0") // enables web_0 and web_1
		synctest.Wait()
		if n := e.EnabledVMs(); n != 2 {
			t.Errorf("EnabledVMs = %d, want 2", n)
		}
		commits := rec.commits // the LastSeen write

		ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_0"}, Notice: 20 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Minute)
		if err := e.Approve(t.Context(), "web_1", []string{ev.ID}); err != nil {
			t.Fatal(err)
		}
		// A second approval is counted, and is not the first.
		if err := e.Approve(t.Context(), forewarn.Operator, []string{ev.ID}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5*time.Minute + time.Second) // a Reboot lasts 5 minutes
		synctest.Wait()

		wantT := []string{"Reboot >Scheduled", "Reboot Scheduled>Started", "Reboot Started>Completed"}
		if !slices.Equal(rec.transitions, wantT) {
			t.Errorf("transitions %q, want %q", rec.transitions, wantT)
		}
		wantA := []string{"web_1 5m0s 15m0s", "operator 5m0s started"}
		if !slices.Equal(rec.approvals, wantA) {
			t.Errorf("approvals %q, want %q", rec.approvals, wantA)
		}
		if !slices.Equal(rec.lags, []time.Duration{0}) {
			t.Errorf("deadline lags %v, want one of 0", rec.lags)
		}
		// Create, two approvals, the completion.
		if n := rec.commits - commits; n != 4 {
			t.Errorf("%d commits, want 4", n)
		}
		counts := e.EventCounts()
		if want := []engine.EventCount{{Type: forewarn.Reboot, Status: forewarn.Completed, N: 1}}; !slices.Equal(counts, want) {
			t.Errorf("EventCounts %v, want %v", counts, want)
		}
	})
}

// TestMetricsObserverNil: an engine without an Observer runs a lifecycle.
func TestMetricsObserverNil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, mem.New(), false)
		ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Freeze, VMs: []string{"db_0"}})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(17 * time.Minute)
		synctest.Wait()
		wantState(t, e, ev.ID, "db_0", forewarn.Completed, 4) // created, started, completed
		if n := e.EnabledVMs(); n != 5 {
			t.Errorf("EnabledVMs = %d, want 5", n)
		}
	})
}

package engine_test

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

// testFleet has two availability sets and one standalone VM.
func testFleet() *forewarn.Fleet {
	return &forewarn.Fleet{VMs: []*forewarn.VM{
		{Name: "web_0", Provider: forewarn.Azure, AvailabilitySet: "web", UpdateDomain: 0},
		{Name: "web_1", Provider: forewarn.Azure, AvailabilitySet: "web"},
		{Name: "db_0", Provider: forewarn.Azure, AvailabilitySet: "db"},
		{Name: "db_1", Provider: forewarn.Azure, AvailabilitySet: "db"},
		{Name: "solo", Provider: forewarn.Azure, Spot: true},
	}}
}

func newEngine(t *testing.T, store forewarn.Store, allowShort bool) *engine.Engine {
	t.Helper()
	e, err := engine.New(t.Context(), engine.Config{Store: store, Fleet: testFleet(), AllowShortNotice: allowShort})
	if err != nil {
		t.Fatalf("engine.New: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	enableAll(e)
	return e
}

// enableAll makes every VM call once, enabling its scheduled events, so
// Platform events keep their notice.
func enableAll(e *engine.Engine) {
	for _, vm := range e.Fleet().VMs {
		e.NoteRequest(vm.Name)
	}
}

// status returns the event's status and the incarnation of vm.
func status(t *testing.T, e *engine.Engine, id, vm string) (forewarn.Status, int64) {
	t.Helper()
	ev, err := e.Event(id)
	if err != nil {
		t.Fatalf("Event(%s): %v", id, err)
	}
	return ev.Status, e.View(vm).Incarnation
}

func wantState(t *testing.T, e *engine.Engine, id, vm string, wantStatus forewarn.Status, wantInc int64) {
	t.Helper()
	if st, inc := status(t, e, id, vm); st != wantStatus || inc != wantInc {
		t.Fatalf("at %s: event %s is %s with %s at incarnation %d; want %s at %d",
			time.Now().UTC().Format(time.TimeOnly), id, st, vm, inc, wantStatus, wantInc)
	}
}

func TestRebootStartsAtNotBeforeToTheSecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, mem.New(), false)
		t0 := time.Now()
		ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_0"}, Lasts: 5 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if want := t0.Add(15 * time.Minute); !ev.NotBefore.Equal(want) {
			t.Fatalf("NotBefore = %v, want %v", ev.NotBefore, want)
		}
		if ev.Source != forewarn.Platform || ev.Duration != -1 || len(ev.ID) != 36 {
			t.Fatalf("defaults: source %s, duration %d, id %q", ev.Source, ev.Duration, ev.ID)
		}
		wantState(t, e, ev.ID, "web_0", forewarn.Scheduled, 2)

		time.Sleep(15*time.Minute - time.Second)
		synctest.Wait()
		wantState(t, e, ev.ID, "web_0", forewarn.Scheduled, 2)

		time.Sleep(time.Second)
		synctest.Wait()
		wantState(t, e, ev.ID, "web_0", forewarn.Started, 3)
		got, _ := e.Event(ev.ID)
		if !got.StartedAt.Equal(t0.Add(15*time.Minute)) || !got.NotBefore.IsZero() {
			t.Fatalf("StartedAt %v NotBefore %v; want start at +15m and no NotBefore", got.StartedAt, got.NotBefore)
		}

		// --lasts 5m: gone at exactly +5m after the start.
		time.Sleep(5*time.Minute - time.Second)
		synctest.Wait()
		wantState(t, e, ev.ID, "web_0", forewarn.Started, 3)
		time.Sleep(time.Second)
		synctest.Wait()
		wantState(t, e, ev.ID, "web_0", forewarn.Completed, 4)
		if v := e.View("web_0"); len(v.Events) != 0 {
			t.Fatalf("completed event still visible: %v", v.Events)
		}
		got, _ = e.Event(ev.ID)
		if want := t0.Add(20 * time.Minute); !got.EndedAt.Equal(want) {
			t.Fatalf("EndedAt %v, want %v", got.EndedAt, want)
		}
	})
}

func TestApprovalStartsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, mem.New(), false)
		ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_0", "web_1"}})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Minute)
		at := time.Now()
		// web_1 approves; the event proceeds for all its Resources.
		if err := e.Approve(t.Context(), "web_1", []string{ev.ID}); err != nil {
			t.Fatal(err)
		}
		got, _ := e.Event(ev.ID)
		if got.Status != forewarn.Started || !got.StartedAt.Equal(at) {
			t.Fatalf("after approval: %s started %v, want Started at %v", got.Status, got.StartedAt, at)
		}
		want := []forewarn.Approval{{By: "web_1", At: at}}
		if !slices.EqualFunc(got.Approvals, want, func(a, b forewarn.Approval) bool { return a.By == b.By && a.At.Equal(b.At) }) {
			t.Fatalf("approvals %v, want %v", got.Approvals, want)
		}
		// Repeated and later approvals succeed and change nothing shown.
		inc := e.View("web_0").Incarnation
		if err := e.Approve(t.Context(), "web_1", []string{ev.ID, ev.ID}); err != nil {
			t.Fatal(err)
		}
		if err := e.Approve(t.Context(), forewarn.Operator, []string{ev.ID}); err != nil {
			t.Fatal(err)
		}
		got, _ = e.Event(ev.ID)
		if len(got.Approvals) != 2 || got.Approvals[1].By != forewarn.Operator {
			t.Fatalf("approvals %v, want web_1 then operator", got.Approvals)
		}
		if e.View("web_0").Incarnation != inc {
			t.Fatalf("incarnation moved on an approval that changed no document")
		}
		// The default Reboot impact lasts 5 minutes.
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		wantState(t, e, ev.ID, "web_0", forewarn.Completed, inc+1)
	})
}

func TestScopeAndApprovalRights(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, mem.New(), false)
		ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Freeze, VMs: []string{"web_0"}})
		if err != nil {
			t.Fatal(err)
		}
		for vm, want := range map[string]int{"web_0": 1, "web_1": 1, "db_0": 0, "db_1": 0, "solo": 0} {
			if got := len(e.View(vm).Events); got != want {
				t.Errorf("%s sees %d events, want %d", vm, got, want)
			}
		}
		if e.View("db_0").Incarnation != 1 {
			t.Errorf("db_0 incarnation moved for an event it cannot see")
		}
		err = e.Approve(t.Context(), "db_0", []string{ev.ID})
		if forewarn.ErrorCode(err) != forewarn.ENOTFOUND {
			t.Fatalf("approval from another availability set: %v, want not_found", err)
		}
		// One bad id in a batch approves nothing.
		err = e.Approve(t.Context(), "web_1", []string{ev.ID, "00000000-0000-0000-0000-000000000000"})
		if forewarn.ErrorCode(err) != forewarn.ENOTFOUND {
			t.Fatalf("batch with an unknown id: %v, want not_found", err)
		}
		wantState(t, e, ev.ID, "web_0", forewarn.Scheduled, 2)
		// Ids match whatever their case.
		if err := e.Approve(t.Context(), "web_1", []string{toLower(ev.ID)}); err != nil {
			t.Fatal(err)
		}
		wantState(t, e, ev.ID, "web_1", forewarn.Started, 3)
	})
}

func toLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func TestCreateValidation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, mem.New(), false)
		neg := -2
		cases := []struct {
			name string
			spec engine.Spec
			code string
			msg  string
		}{
			{"unknown VM", engine.Spec{Type: forewarn.Reboot, VMs: []string{"nope"}}, forewarn.ENOTFOUND, `unknown VM "nope"`},
			{"no VM", engine.Spec{Type: forewarn.Reboot}, forewarn.EINVALID, "an event needs at least one VM"},
			{"unknown type", engine.Spec{Type: "Boom", VMs: []string{"web_0"}}, forewarn.EINVALID, `unknown event type "Boom" (want one of Freeze, Reboot, Redeploy, Preempt, Terminate, MIGRATE_ON_HOST_MAINTENANCE, TERMINATE_ON_HOST_MAINTENANCE, instance-reboot, system-reboot, system-maintenance, instance-retirement, instance-stop)`},
			{"short notice", engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_0"}, Notice: time.Minute}, forewarn.EINVALID,
				"notice 1m0s is below the 15m0s minimum for Reboot (the server's --allow-short-notice lifts this)"},
			{"short redeploy", engine.Spec{Type: forewarn.Redeploy, VMs: []string{"web_0"}, Notice: 9 * time.Minute}, forewarn.EINVALID,
				"notice 9m0s is below the 10m0s minimum for Redeploy (the server's --allow-short-notice lifts this)"},
			{"twice", engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_0", "web_0"}}, forewarn.EINVALID, `VM "web_0" is named twice`},
			{"duration", engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_0"}, Duration: &neg}, forewarn.EINVALID, "duration -2 is below -1"},
			{"source", engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_0"}, Source: "Me"}, forewarn.EINVALID, `unknown event source "Me" (want Platform or User)`},
		}
		for _, c := range cases {
			_, err := e.Create(t.Context(), c.spec)
			if forewarn.ErrorCode(err) != c.code || forewarn.ErrorMessage(err) != c.msg {
				t.Errorf("%s: got %v, want %s: %s", c.name, err, c.code, c.msg)
			}
		}
		if n := len(e.Events()); n != 0 {
			t.Fatalf("refused creates left %d events", n)
		}
		if inc := e.View("web_0").Incarnation; inc != 1 {
			t.Fatalf("refused creates moved the incarnation to %d", inc)
		}
		// Preempt's minimum is 30 s.
		ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Preempt, VMs: []string{"solo"}, Notice: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if want := time.Now().Add(30 * time.Second); !ev.NotBefore.Equal(want) {
			t.Fatalf("Preempt NotBefore %v, want %v", ev.NotBefore, want)
		}
	})
}

func TestShortNoticeAllowed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, mem.New(), true)
		time.Sleep(500 * time.Millisecond)
		ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"solo"}, Notice: 10 * time.Second, Lasts: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		// NotBefore is rounded up to a whole second, never down.
		if want := time.Now().Add(10*time.Second + 500*time.Millisecond); !ev.NotBefore.Equal(want) {
			t.Fatalf("NotBefore %v, want %v", ev.NotBefore, want)
		}
		time.Sleep(10*time.Second + 500*time.Millisecond)
		synctest.Wait()
		wantState(t, e, ev.ID, "solo", forewarn.Started, 3)
		time.Sleep(time.Second)
		synctest.Wait()
		wantState(t, e, ev.ID, "solo", forewarn.Completed, 4)
	})
}

func TestStartedDirectlyCancelAndOperatorTransitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, mem.New(), false)
		hw, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"solo"}, Started: true, Lasts: 2 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if hw.Status != forewarn.Started || !hw.NotBefore.IsZero() || !hw.StartedAt.Equal(time.Now()) {
			t.Fatalf("unplanned event: %+v", hw)
		}
		wantState(t, e, hw.ID, "solo", forewarn.Started, 2)
		if err := e.Cancel(t.Context(), hw.ID); forewarn.ErrorCode(err) != forewarn.ECONFLICT {
			t.Fatalf("cancel of a Started event: %v, want conflict", err)
		}

		ev, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Redeploy, VMs: []string{"db_1"}})
		if err != nil {
			t.Fatal(err)
		}
		wantState(t, e, ev.ID, "db_0", forewarn.Scheduled, 2)
		if err := e.Complete(t.Context(), ev.ID); forewarn.ErrorCode(err) != forewarn.ECONFLICT {
			t.Fatalf("complete of a Scheduled event: %v, want conflict", err)
		}
		if err := e.Cancel(t.Context(), ev.ID); err != nil {
			t.Fatal(err)
		}
		wantState(t, e, ev.ID, "db_0", forewarn.Canceled, 3)
		// No timer fires for a canceled event.
		time.Sleep(time.Hour)
		synctest.Wait()
		wantState(t, e, ev.ID, "db_0", forewarn.Canceled, 3)
		wantState(t, e, hw.ID, "solo", forewarn.Completed, 3)

		ev2, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Freeze, VMs: []string{"web_1"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start(t.Context(), ev2.ID); err != nil {
			t.Fatal(err)
		}
		wantState(t, e, ev2.ID, "web_0", forewarn.Started, 3)
		if err := e.Complete(t.Context(), ev2.ID); err != nil {
			t.Fatal(err)
		}
		wantState(t, e, ev2.ID, "web_0", forewarn.Completed, 4)
		if _, err := e.Event("nope"); forewarn.ErrorCode(err) != forewarn.ENOTFOUND {
			t.Fatalf("Event(nope): %v", err)
		}
	})
}

func TestViewChangedIsClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, mem.New(), false)
		v := e.View("web_1")
		woke := make(chan *engine.View, 1)
		go func() {
			<-v.Changed()
			woke <- e.View("web_1")
		}()
		synctest.Wait()
		select {
		case <-woke:
			t.Fatal("woke before any change")
		default:
		}
		if _, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_0"}}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		nv := <-woke
		if nv.Incarnation != 2 || len(nv.Events) != 1 {
			t.Fatalf("new view: incarnation %d, %d events", nv.Incarnation, len(nv.Events))
		}
	})
}

func TestRestartAppliesMissedDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := mem.New()
		e := newEngine(t, store, false)
		t0 := time.Now()
		a, _ := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_0"}, Lasts: 10 * time.Minute})
		b, _ := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_1"}, Lasts: time.Minute})
		c, _ := e.Create(t.Context(), engine.Spec{Type: forewarn.Redeploy, VMs: []string{"db_0"}, Notice: time.Hour})
		if err := e.Approve(t.Context(), "db_1", []string{c.ID}); err != nil {
			t.Fatal(err)
		}
		e.Close()
		incBefore := e.View("web_0").Incarnation // 4: a, b created; c approved-started is not web's

		// Down for 20 minutes: a started at +15m and is still in its 10
		// minutes; b started at +15m and finished at +16m; c was approved
		// and started before the stop, and its 10 minutes ended at +10m.
		time.Sleep(20 * time.Minute)
		e2 := newEngine(t, store, false)
		ga, _ := e2.Event(a.ID)
		gb, _ := e2.Event(b.ID)
		gc, _ := e2.Event(c.ID)
		if ga.Status != forewarn.Started || !ga.StartedAt.Equal(t0.Add(15*time.Minute)) {
			t.Errorf("a: %s started %v", ga.Status, ga.StartedAt)
		}
		if gb.Status != forewarn.Completed || !gb.EndedAt.Equal(t0.Add(16*time.Minute)) {
			t.Errorf("b: %s ended %v", gb.Status, gb.EndedAt)
		}
		if gc.Status != forewarn.Completed || len(gc.Approvals) != 1 || gc.Approvals[0].By != "db_1" {
			t.Errorf("c: %s approvals %v", gc.Status, gc.Approvals)
		}
		if inc := e2.View("web_0").Incarnation; inc <= incBefore {
			t.Errorf("web_0 incarnation %d after restart, was %d: it must only grow", inc, incBefore)
		}
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		if ga, _ = e2.Event(a.ID); ga.Status != forewarn.Completed {
			t.Errorf("a after its impact: %s", ga.Status)
		}
	})
}

// TestFleetEditRaisesIncarnation: a VM whose peers change between runs
// (here "solo" joins availability set "web") may see other events, so its
// incarnation goes up; VMs whose peers did not change keep theirs.
func TestFleetEditRaisesIncarnation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := mem.New()
		e := newEngine(t, store, false)
		if _, err := e.Create(t.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{"web_0"}}); err != nil {
			t.Fatal(err)
		}
		before := map[string]int64{}
		for _, vm := range e.Fleet().VMs {
			before[vm.Name] = e.View(vm.Name).Incarnation
		}
		e.Close()
		// The same fleet again: nothing moves.
		e2, err := engine.New(t.Context(), engine.Config{Store: store, Fleet: testFleet()})
		if err != nil {
			t.Fatal(err)
		}
		for name, inc := range before {
			if got := e2.View(name).Incarnation; got != inc {
				t.Errorf("same fleet: %s incarnation %d → %d", name, inc, got)
			}
		}
		e2.Close()
		edited := testFleet()
		edited.VM("solo").AvailabilitySet = "web"
		e3, err := engine.New(t.Context(), engine.Config{Store: store, Fleet: edited})
		if err != nil {
			t.Fatal(err)
		}
		defer e3.Close()
		for name, inc := range before {
			moved := name == "solo" || name == "web_0" || name == "web_1"
			got := e3.View(name).Incarnation
			if moved && got != inc+1 || !moved && got != inc {
				t.Errorf("edited fleet: %s incarnation %d → %d (moved %v)", name, inc, got, moved)
			}
		}
		if n := len(e3.View("solo").Events); n != 1 {
			t.Fatalf("solo sees %d events after joining web", n)
		}
	})
}

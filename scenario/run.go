package scenario

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/internal/retry"
	"github.com/forewarn/forewarn/report"
)

// Target is the server a scenario plays against.
type Target struct {
	// Client calls the server's operator API, with its Token set when
	// the server asks for one. Run creates and acts on events with it
	// and reads GET /v1/vms and GET /v1/report.
	Client *admin.Client
	// Fresh reports that the server is new, as 'forewarn scenario run
	// --serve' starts one: everything its clients did counts, from their
	// first call. Otherwise the counts (requests, findings, long-polls)
	// are those since the timeline began, differences from the report
	// at its start.
	Fresh bool
}

// Option adjusts a run.
type Option func(*runOptions)

type runOptions struct {
	out  io.Writer
	wait time.Duration
}

// WithOutput makes Run write its lines to w as they come: the timeline's
// start, each step the server refused, each expectation's outcome with
// the evidence of a failure, and a summary, as 'forewarn scenario run'
// prints them. Result.Output returns the same text at the end.
func WithOutput(w io.Writer) Option {
	return func(o *runOptions) { o.out = w }
}

// WithWaitForClients makes Run wait, before the timeline, up to d for
// every VM the scenario names (every VM of the fleet when it names
// none) to have called its metadata API; a VM still silent then ends
// the run with an error naming it. By default the timeline starts at
// once.
func WithWaitForClients(d time.Duration) Option {
	return func(o *runOptions) { o.wait = d }
}

// Result is what a run found: one Check per step the server refused, in
// timeline order, then one per expectation, in file order.
type Result struct {
	// Name is the scenario's name (Scenario.Name).
	Name   string
	Checks []Check
	// Started is when the timeline began, Ended when the last window
	// closed and the report the expectations were checked against was
	// read.
	Started, Ended time.Time
	output         string
}

// Check is one expectation's outcome, or a refused step's.
type Check struct {
	// Name is the expectation's name, as docs/scenarios.md gives it
	// ("approved f1 within 3s"), or the step's ("step at 1s (line 12):
	// create f1").
	Name   string
	Failed bool
	// Message is why it failed, one line; Evidence what the server's
	// report showed, one or more lines.
	Message, Evidence string
}

// Passed reports whether every step succeeded and every expectation
// held: 'forewarn scenario run' exits 0.
func (r *Result) Passed() bool {
	return !slices.ContainsFunc(r.Checks, func(c Check) bool { return c.Failed })
}

// Failed returns the checks that failed.
func (r *Result) Failed() []Check {
	var out []Check
	for _, c := range r.Checks {
		if c.Failed {
			out = append(out, c)
		}
	}
	return out
}

// Output returns the lines the run wrote (see WithOutput).
func (r *Result) Output() string { return r.output }

// Run plays the scenario against target: it checks the scenario's VMs
// against the server's fleet, waits for the clients (WithWaitForClients),
// runs the steps at their offsets, waits for the end of the timeline and
// of every expectation's window, and evaluates the expectations from the
// server's report. A step the server refuses is a failed Check, and the
// timeline goes on.
//
// The error is for a run that could not go on: ctx ended, the server
// could not be reached, or a client stayed silent; an *Error when the
// scenario does not fit the server's fleet. The Result is then nil.
func (sc *Scenario) Run(ctx context.Context, target Target, opts ...Option) (*Result, error) {
	if target.Client == nil {
		return nil, errors.New("scenario: Run needs a Target with an operator API Client")
	}
	var o runOptions
	for _, opt := range opts {
		opt(&o)
	}
	var text bytes.Buffer
	out := io.Writer(&text)
	if o.out != nil {
		out = io.MultiWriter(&text, o.out)
	}
	r := &runner{sc: sc, cl: target.Client, fresh: target.Fresh, out: out, wait: o.wait, ids: map[string]*played{}}
	if err := r.run(ctx); err != nil {
		return nil, err
	}
	return &Result{Name: sc.file, Checks: r.results, Started: r.t0, Ended: r.end, output: text.String()}, nil
}

// played is what a step that named an id created.
type played struct {
	step      *step
	events    []string // the event, or none for a wave
	wave      string   // the wave's ID
	domains   int
	notBefore time.Time // the event's when created
}

// result is one expectation's outcome, or a failed step's.
type result struct {
	name     string
	failed   bool
	message  string // a line: why it failed
	evidence string // what the report showed
}

// runner plays one scenario against one server.
type runner struct {
	sc   *Scenario
	cl   *admin.Client
	out  io.Writer
	wait time.Duration
	// fresh reports a new server: nothing happened before the scenario.
	fresh   bool
	fleet   *forewarn.Fleet
	ids     map[string]*played
	t0, end time.Time
	base    *report.Report // the report as the timeline began
	results []Check
}

// run plays the timeline, waits for the expectations' windows and
// evaluates them into r.results; err is for a run that could not go on.
func (r *runner) run(ctx context.Context) error {
	vms, err := r.cl.VMs(ctx)
	if err != nil {
		return err
	}
	r.fleet = &forewarn.Fleet{}
	for i := range vms {
		r.fleet.VMs = append(r.fleet.VMs, &vms[i].VM)
	}
	if err := r.checkFleet(); err != nil {
		return err
	}
	if err := r.waitForClients(ctx); err != nil {
		return err
	}
	// Counts are those of the scenario: with a fresh server, all of
	// them; with another, those since the timeline began.
	r.base = &report.Report{}
	if !r.fresh {
		if r.base, err = r.cl.Report(ctx, ""); err != nil {
			return err
		}
	}
	r.t0 = time.Now()
	fmt.Fprintf(r.out, "scenario %s: %d steps, %d expectations; timeline started at %s\n",
		r.sc.file, len(r.sc.steps), len(r.sc.expect), r.t0.UTC().Format(timeMillis))
	for _, s := range r.sc.steps {
		if err := sleepUntil(ctx, r.t0.Add(s.at)); err != nil {
			return err
		}
		if err := r.play(ctx, s); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r.results = append(r.results, Check{Name: s.describe(), Failed: true, Message: message(err), Evidence: message(err)})
			fmt.Fprintf(r.out, "FAIL %s: %s\n", s.describe(), message(err))
		}
	}
	rep, err := r.awaitWindows(ctx)
	if err != nil {
		return err
	}
	for _, e := range r.sc.expect {
		res := r.evaluate(e, rep)
		r.results = append(r.results, res)
		if res.Failed {
			fmt.Fprintf(r.out, "FAIL %s: %s\n%s\n", res.Name, res.Message, indent(res.Evidence))
		} else {
			fmt.Fprintf(r.out, "ok   %s\n", res.Name)
		}
	}
	failed := 0
	for _, res := range r.results {
		if res.Failed {
			failed++
		}
	}
	fmt.Fprintf(r.out, "scenario %s: %d of %d checks failed, after %s\n", r.sc.file, failed, len(r.results), time.Since(r.t0).Round(time.Millisecond))
	return nil
}

// timeMillis shows times to the millisecond, in UTC.
const timeMillis = "15:04:05.000"

func indent(s string) string { return "     " + strings.ReplaceAll(s, "\n", "\n     ") }

// sleepUntil waits until t or ctx ends.
func sleepUntil(ctx context.Context, t time.Time) error { return retry.Sleep(ctx, time.Until(t)) }

// checkFleet checks the scenario's VMs against the server's fleet. A
// scenario's fleet must agree with the server's on every VM it lists
// (name, address, provider): the server's fleet is the one played, and a
// scenario written for another would check the wrong clients.
func (r *runner) checkFleet() error {
	if r.sc.fleet != nil {
		for _, vm := range r.sc.fleet.VMs {
			s := r.fleet.VM(vm.Name)
			switch {
			case s == nil:
				return errorf("%s: fleet: VM %s is not in the server's fleet", r.sc.file, vm.Name)
			case s.IP != vm.IP || s.Provider != vm.Provider:
				return errorf("%s: fleet: VM %s is %s %s in the scenario but %s %s on the server",
					r.sc.file, vm.Name, vm.Provider, vm.IP, s.Provider, s.IP)
			}
		}
	}
	names, lines := vmsNamed(r.sc)
	for _, vm := range names {
		if r.fleet.VM(vm) == nil {
			return errorf("%s:%d: no VM named %q in the server's fleet", r.sc.file, lines[vm], vm)
		}
	}
	return nil
}

// waitForClients waits up to r.wait for every VM the scenario names (or
// every VM of the fleet, when it names none) to have called its API.
func (r *runner) waitForClients(ctx context.Context) error {
	if r.wait <= 0 {
		return nil
	}
	names, _ := vmsNamed(r.sc)
	if len(names) == 0 {
		for _, vm := range r.fleet.VMs {
			names = append(names, vm.Name)
		}
	}
	deadline := time.Now().Add(r.wait)
	for {
		rep, err := r.cl.Report(ctx, "")
		if err != nil {
			return err
		}
		var silent []string
		for _, v := range rep.VMs {
			if slices.Contains(names, v.Name) && v.Requests == 0 {
				silent = append(silent, v.Name)
			}
		}
		if len(silent) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no call from %s within --wait-for-clients %s", strings.Join(silent, ", "), r.wait)
		}
		if err := sleepUntil(ctx, time.Now().Add(200*time.Millisecond)); err != nil {
			return err
		}
	}
}

// play performs one step.
func (r *runner) play(ctx context.Context, s *step) error {
	var ev *forewarn.Event
	var err error
	var refs []string
	if s.ref != "" {
		// A step naming an event whose own step failed fails too,
		// with the reason, rather than acting on nothing.
		p := r.ids[s.ref]
		if p == nil || len(p.events) == 0 {
			return fmt.Errorf("event %s was not created: its step failed", s.ref)
		}
		// A create naming VMs of several scope groups made an event
		// per group: a step on it acts on each.
		refs = p.events
	}
	each := func(f func(id string) error) error {
		for _, id := range refs {
			if err := f(id); err != nil {
				return err
			}
		}
		return nil
	}
	var ids []string
	switch s.kind {
	case "create":
		var cr *admin.Created
		if cr, err = r.cl.CreateEvents(ctx, s.create); err == nil {
			ev, ids = &cr.Event, cr.EventIDs
		}
	case "evict":
		ev, err = r.cl.EvictWith(ctx, s.vm, s.notice, s.lasts)
	case "delete":
		ev, err = r.cl.DeleteWith(ctx, s.vm, s.lasts)
	case "wave":
		w, err := r.cl.StartWave(ctx, s.wave)
		if err != nil {
			return err
		}
		if s.id != "" {
			r.ids[s.id] = &played{step: s, wave: w.ID, domains: len(w.Domains)}
		}
		return nil
	case "approve":
		err = each(func(id string) error { _, err := r.cl.Approve(ctx, id); return err })
	case "start":
		err = each(func(id string) error { _, err := r.cl.Start(ctx, id); return err })
	case "complete":
		err = each(func(id string) error { _, err := r.cl.Complete(ctx, id); return err })
	case "cancel":
		err = each(func(id string) error { _, err := r.cl.Cancel(ctx, id); return err })
	case "reschedule":
		at, perr := time.Parse(time.RFC3339, s.notBefore)
		if perr != nil {
			d, _ := time.ParseDuration(s.notBefore) // checked when parsed
			at = time.Now().Add(d)
		}
		err = each(func(id string) error { _, err := r.cl.Reschedule(ctx, id, at); return err })
	}
	if err != nil {
		return err
	}
	if ev != nil && s.id != "" {
		if ids == nil {
			ids = []string{ev.ID}
		}
		r.ids[s.id] = &played{step: s, events: ids, notBefore: ev.NotBefore}
	}
	return nil
}

// awaitWindows waits for the end of the timeline and of every
// expectation's window, and returns the report then. A window is known
// once its event is visible; a wave's later domains become visible as
// the wave goes on, so while one is not, the runner watches the report
// (up to the wave's longest course).
func (r *runner) awaitWindows(ctx context.Context) (*report.Report, error) {
	last := r.sc.duration
	if n := len(r.sc.steps); n > 0 {
		last = max(last, r.sc.steps[n-1].at)
	}
	hardCap := r.t0.Add(last + 5*time.Second)
	for _, p := range r.ids {
		if p.wave != "" {
			notice, _ := time.ParseDuration(p.step.wave.Notice)
			lasts, _ := time.ParseDuration(p.step.wave.Lasts)
			if notice == 0 {
				t, _ := forewarn.ParseEventType(p.step.wave.Type)
				notice = t.MinNotice()
			}
			if lasts == 0 {
				t, _ := forewarn.ParseEventType(p.step.wave.Type)
				lasts = t.DefaultLasts()
			}
			hardCap = maxTime(hardCap, r.t0.Add(p.step.at+time.Duration(p.domains)*(notice+lasts+time.Second)+5*time.Second))
		}
	}
	for {
		rep, err := r.cl.Report(ctx, "")
		if err != nil {
			return nil, err
		}
		end, open := r.t0.Add(last), false
		for _, e := range r.sc.expect {
			t, known := r.window(e, rep)
			open = open || !known
			end = maxTime(end, t)
		}
		for _, e := range r.sc.expect {
			if e.kind == expApprovedInTime || e.within > 0 {
				hardCap = maxTime(hardCap, end)
			}
		}
		now := time.Now()
		if (!open && !now.Before(end)) || !now.Before(hardCap) {
			r.end = now
			return rep, nil
		}
		next := end
		if open || next.Sub(now) > time.Second {
			next = now.Add(250 * time.Millisecond)
		}
		if err := sleepUntil(ctx, minTime(next, hardCap)); err != nil {
			return nil, err
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// targets returns the report's events an expectation's id stands for:
// the event it created, or every event of its wave.
func (r *runner) targets(id string, rep *report.Report) []report.Event {
	p := r.ids[id]
	if p == nil {
		return nil
	}
	var out []report.Event
	for _, ev := range rep.Events {
		if slices.Contains(p.events, ev.ID) || p.wave != "" && ev.Wave == p.wave {
			out = append(out, ev)
		}
	}
	return out
}

// window returns when expectation e's window ends, and whether that is
// known yet (an event of a wave may not be visible yet).
func (r *runner) window(e *expectation, rep *report.Report) (time.Time, bool) {
	var end time.Time
	switch {
	case e.kind == expApprovedInTime:
		for _, ev := range r.targets(e.event, rep) {
			nb := ev.NotBefore
			if p := r.ids[e.event]; !p.notBefore.IsZero() {
				nb = p.notBefore
			}
			if nb.IsZero() && ev.Status == forewarn.Pending {
				return end, false
			}
			end = maxTime(end, nb)
		}
	case e.within > 0:
		for _, ev := range r.targets(e.event, rep) {
			if ev.VisibleSince.IsZero() {
				if ev.Status == forewarn.Pending {
					return end, false
				}
				continue // ended without being visible
			}
			end = maxTime(end, ev.VisibleSince.Add(e.within))
		}
	}
	return end, true
}

// evaluate checks one expectation against the final report.
func (r *runner) evaluate(e *expectation, rep *report.Report) Check {
	res := Check{Name: e.name}
	fail := func(msg, evidence string) Check {
		res.Failed, res.Message, res.Evidence = true, msg, evidence
		return res
	}
	switch e.kind {
	case expApproved, expApprovedInTime, expSeen:
		evs := r.targets(e.event, rep)
		if len(evs) == 0 {
			return fail(e.event+": no such event on the server", "the step that creates "+e.event+" failed")
		}
		for _, ev := range evs {
			if msg := r.checkEvent(e, ev); msg != "" {
				return fail(msg, r.eventEvidence(ev, rep))
			}
		}
	case expPolls:
		var msgs, evs []string
		for _, name := range e.vms {
			v, b := vmOf(rep, name), vmOf(r.base, name)
			if msg, ev := r.checkPolls(v, b, e.every); msg != "" {
				msgs, evs = append(msgs, msg), append(evs, ev)
			}
		}
		if len(msgs) > 0 {
			return fail(strings.Join(msgs, "; "), strings.Join(evs, "\n"))
		}
	case expLongPoll:
		var msgs, evs []string
		for _, name := range e.vms {
			v, b := vmOf(rep, name), vmOf(r.base, name)
			made := made(v) - made(b)
			if v.LongPolls == nil || (v.LongPolls.Held == 0 && made == 0) {
				msgs = append(msgs, fmt.Sprintf("%s made no wait_for_change request on maintenance-event", name))
				evs = append(evs, fmt.Sprintf("%s: %d requests in the scenario, none a long-poll on instance/maintenance-event; %s",
					name, v.Requests-b.Requests, r.calls(v)))
			}
		}
		if len(msgs) > 0 {
			return fail(strings.Join(msgs, "; "), strings.Join(evs, "\n"))
		}
	case expNotThrottled:
		return r.noFinding(res, e, report.Throttled, rep)
	case expOnlyOwnTerminate:
		return r.noFinding(res, e, report.ApprovedOthersTerminate, rep)
	case expNoFinding:
		return r.noFinding(res, e, e.finding, rep)
	}
	return res
}

// vmOf returns the VM named name in rep, or an empty one.
func vmOf(rep *report.Report, name string) report.VM {
	for _, v := range rep.VMs {
		if v.Name == name {
			return v
		}
	}
	return report.VM{Name: name}
}

func made(v report.VM) uint64 {
	if v.LongPolls == nil {
		return 0
	}
	return v.LongPolls.Made
}

// count returns v's count of finding kind.
func count(v report.VM, kind string) (uint64, string) {
	for _, f := range v.Findings {
		if f.Kind == kind {
			return f.Count, f.Detail
		}
	}
	return 0, ""
}

// rel shows t relative to the timeline's start.
func (r *runner) rel(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := t.Sub(r.t0).Round(time.Millisecond)
	if d >= 0 {
		return "+" + d.String()
	}
	return d.String()
}

// calls describes v's last call.
func (r *runner) calls(v report.VM) string {
	if v.LastCall.IsZero() {
		return "it never called"
	}
	return fmt.Sprintf("last called at %s (%s)", v.LastCall.Format(timeMillis), r.rel(v.LastCall))
}

// label names event ev by its scenario id when it has one.
func (r *runner) label(ev report.Event) string {
	for id, p := range r.ids {
		if slices.Contains(p.events, ev.ID) {
			return id
		}
		if p.wave != "" && ev.Wave == p.wave {
			return fmt.Sprintf("%s (%s of %s)", id, ev.ID, strings.Join(ev.Resources, ","))
		}
	}
	return ev.ID
}

// checkEvent checks an event expectation against one event; "" when it
// holds.
func (r *runner) checkEvent(e *expectation, ev report.Event) string {
	name := r.label(ev)
	switch e.kind {
	case expSeen:
		if ev.SeenBy == "" {
			return fmt.Sprintf("%s: never seen (no VM read a document showing it)", name)
		}
		if d := ev.SeenAt.Sub(ev.VisibleSince); d > e.within {
			return fmt.Sprintf("%s: not seen within %s; first seen by %s after %s", name, e.within, ev.SeenBy, d.Round(time.Millisecond))
		}
	case expApproved:
		var late []string
		for _, a := range ev.Approvals {
			if a.By == forewarn.Operator || e.by != "" && a.By != e.by {
				continue
			}
			d := a.At.Sub(ev.VisibleSince)
			if e.within == 0 || d <= e.within {
				return ""
			}
			late = append(late, fmt.Sprintf("%s after %s", a.By, d.Round(time.Millisecond)))
		}
		who := "a VM"
		if e.by != "" {
			who = e.by
		}
		if e.within == 0 {
			return fmt.Sprintf("%s: not approved by %s", name, who)
		}
		if len(late) > 0 {
			return fmt.Sprintf("%s: not approved by %s within %s (approved by %s)", name, who, e.within, strings.Join(late, ", "))
		}
		return fmt.Sprintf("%s: not approved by %s within %s", name, who, e.within)
	case expApprovedInTime:
		nb := ev.NotBefore
		if p := r.ids[e.event]; p != nil && !p.notBefore.IsZero() {
			nb = p.notBefore
		}
		var after []string
		for _, a := range ev.Approvals {
			if a.By == forewarn.Operator {
				continue
			}
			if !nb.IsZero() && a.At.Before(nb) {
				return ""
			}
			after = append(after, fmt.Sprintf("%s %s after", a.By, a.At.Sub(nb).Round(time.Millisecond)))
		}
		switch {
		case nb.IsZero():
			return fmt.Sprintf("%s: started with no NotBefore any VM read (nobody was listening, or it was raised started)", name)
		case len(after) > 0:
			return fmt.Sprintf("%s: approved only after its NotBefore %s (%s)", name, r.rel(nb), strings.Join(after, ", "))
		}
		return fmt.Sprintf("%s: not approved before its NotBefore %s", name, r.rel(nb))
	}
	return ""
}

// eventEvidence describes ev and the VMs it names, from rep.
func (r *runner) eventEvidence(ev report.Event, rep *report.Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s %s, visible from %s", r.label(ev), ev.Type, ev.Status, r.rel(ev.VisibleSince))
	if !ev.NotBefore.IsZero() {
		fmt.Fprintf(&b, ", NotBefore %s", r.rel(ev.NotBefore))
	}
	if !ev.StartedAt.IsZero() {
		fmt.Fprintf(&b, ", started %s", r.rel(ev.StartedAt))
	}
	if len(ev.Approvals) == 0 {
		b.WriteString("; no approval")
	}
	for _, a := range ev.Approvals {
		fmt.Fprintf(&b, "; approved by %s at %s", a.By, r.rel(a.At))
	}
	if ev.SeenBy == "" {
		b.WriteString("; no VM ever read it")
	} else {
		fmt.Fprintf(&b, "; first read by %s at %s", ev.SeenBy, r.rel(ev.SeenAt))
	}
	for _, name := range ev.Resources {
		v := vmOf(rep, name)
		saw := "never saw it"
		if ev.SeenBy == name {
			saw = "saw it first"
		} else if ev.SeenBy != "" {
			saw = "did not see it first"
		}
		fmt.Fprintf(&b, "\nVM %s: %s, %s; %d requests in the scenario", name, r.calls(v), saw, v.Requests-vmOf(r.base, name).Requests)
		for _, f := range v.Findings {
			fmt.Fprintf(&b, "; %s×%d", f.Kind, f.Count)
		}
	}
	return b.String()
}

// checkPolls checks that v called at least every every over the
// scenario; b is v before it. It returns the failure and its evidence,
// or "".
func (r *runner) checkPolls(v, b report.VM, every time.Duration) (string, string) {
	n := v.Requests - b.Requests
	if n == 0 {
		return fmt.Sprintf("%s never called during the scenario", v.Name), fmt.Sprintf("%s: %s", v.Name, r.calls(v))
	}
	var gaps []string
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)).Round(time.Millisecond) }
	if lg := sec(v.LongestGapSeconds); lg > every && !v.LongestGapEnded.Before(r.t0) {
		gaps = append(gaps, fmt.Sprintf("a gap of %s ending at %s", lg, r.rel(v.LongestGapEnded)))
	}
	if r.fresh || b.Requests == 0 {
		if d := v.FirstCall.Sub(r.t0); d > every {
			gaps = append(gaps, fmt.Sprintf("its first call only at %s", r.rel(v.FirstCall)))
		}
	}
	if v.InFlight == 0 {
		if d := r.end.Sub(v.LastEnded); d > every {
			gaps = append(gaps, fmt.Sprintf("no call from %s to the end at %s", r.rel(v.LastEnded), r.rel(r.end)))
		}
	}
	if len(gaps) == 0 {
		return "", ""
	}
	return fmt.Sprintf("%s went more than %s without calling: %s", v.Name, every, strings.Join(gaps, "; ")),
		fmt.Sprintf("%s: %d requests in the scenario, first at %s, %s; longest gap %s, longest while an event was pending %s",
			v.Name, n, r.rel(v.FirstCall), r.calls(v), sec(v.LongestGapSeconds), sec(v.LongestPendingGapSeconds))
}

// noFinding checks that the VMs of e (every VM when none), or the
// scenario's events for an event finding, have no new finding of kind.
func (r *runner) noFinding(res Check, e *expectation, kind string, rep *report.Report) Check {
	var bad, evidence []string
	if eventFinding(kind) {
		for _, ev := range rep.Events {
			if r.label(ev) == ev.ID {
				continue // not the scenario's
			}
			if n, detail := eventCount(ev, kind); n > 0 {
				bad = append(bad, r.label(ev))
				evidence = append(evidence, fmt.Sprintf("%s: %s×%d: %s", r.label(ev), kind, n, detail))
			}
		}
	} else {
		names := e.vms
		if len(names) == 0 {
			for _, v := range rep.VMs {
				names = append(names, v.Name)
			}
		}
		for _, name := range names {
			v := vmOf(rep, name)
			n, detail := count(v, kind)
			n0, _ := count(vmOf(r.base, name), kind)
			if n > n0 {
				bad = append(bad, fmt.Sprintf("%s %d", name, n-n0))
				evidence = append(evidence, fmt.Sprintf("%s: %s×%d: %s", name, kind, n-n0, r.ids2labels(detail)))
			}
		}
	}
	if len(bad) > 0 {
		res.Failed, res.Message, res.Evidence = true, kind+": "+strings.Join(bad, ", "), strings.Join(evidence, "\n")
	}
	return res
}

// eventCount returns ev's count of finding kind.
func eventCount(ev report.Event, kind string) (uint64, string) {
	for _, f := range ev.Findings {
		if f.Kind == kind {
			return f.Count, f.Detail
		}
	}
	return 0, ""
}

// ids2labels adds the scenario ids to the event IDs in s.
func (r *runner) ids2labels(s string) string {
	for id, p := range r.ids {
		for _, ev := range p.events {
			s = strings.ReplaceAll(s, ev, id+" ("+ev+")")
		}
	}
	return s
}

// message returns the text to show for err: the message of a forewarn
// error, which the server wrote for the operator, or err's own text.
func message(err error) string {
	var fe *forewarn.Error
	if errors.As(err, &fe) {
		return fe.Message
	}
	return err.Error()
}

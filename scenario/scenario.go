// Package scenario plays a scenario file against a Forewarn server and
// checks what the clients under test did: the library behind 'forewarn
// scenario run', for a Go test as much as for CI.
//
// A scenario file is a YAML timeline of operator steps and expectations
// about the clients under test:
//
//	fleet:                 # inline fleet (the fleet file's schema), or fleetFile: PATH
//	  vms:
//	    - {name: web_0, ip: 127.0.0.2}
//	duration: 10s          # optional: run at least this long
//	steps:
//	  - at: 0s
//	    create: {type: Freeze, vm: [web_0], notice: 2s, lasts: 2s, id: f1}
//	expect:
//	  - approved: {event: f1, within: 3s}
//
// docs/scenarios.md lists every key. Parse (or Load) checks the file;
// its mistakes are *Error, naming the file, the line and the key. Run
// plays the timeline against a server through its operator API (an
// admin.Client), waits for every expectation's window, reads the
// server's client-behaviour report (GET /v1/report) and evaluates the
// expectations. The Result holds one Check per expectation and per step
// the server refused, the lines the CLI prints, and their JUnit XML.
//
// In a Go test, package forewarntest runs the server for the scenario's
// own fleet while the code under test plays its VMs:
//
//	sc, err := scenario.Load("testdata/drain.yaml")
//	...
//	srv := forewarntest.NewServer(t, sc.Fleet())
//	go runDrainer(ctx, srv.URL(), srv.HTTPClient("web_0")) // the code under test
//	res, err := sc.Run(ctx, scenario.Target{Client: srv.AdminClient(), Fresh: true})
//	if !res.Passed() { t.Error(res.Output()) }
//
// Inside a testing/synctest bubble the whole timeline, notices and
// windows included, passes in no real time.
package scenario

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/fleetfile"
	"github.com/forewarn/forewarn/report"
)

// Scenario is a parsed scenario file. It is not changed by Run, and
// may be run any number of times, one run at a time or several at once.
type Scenario struct {
	file string
	// fleet is the scenario's fleet, nil when it gives none.
	fleet *forewarn.Fleet
	// duration is the shortest run the file asks for.
	duration time.Duration
	steps    []*step
	expect   []*expectation
}

// Name returns the scenario's name: the file name given to Parse or
// Load.
func (sc *Scenario) Name() string { return sc.file }

// Fleet returns the fleet the scenario gives (inline, or from its
// fleetFile), or nil when it gives none and plays whatever fleet the
// server has. A test starts its server with it:
// forewarntest.NewServer(t, sc.Fleet()). It must not be modified.
func (sc *Scenario) Fleet() *forewarn.Fleet { return sc.fleet }

// step is one operator action at an offset from the timeline's start.
type step struct {
	line int
	at   time.Duration
	kind string // create, approve, start, complete, cancel, reschedule, evict, delete, wave
	// id is the name a create, evict, delete or wave step gives its event
	// (or wave); ref the event an action or reschedule names.
	id, ref string
	create  admin.CreateRequest
	wave    admin.WaveRequest
	// vm, notice and lasts are an evict's or a delete's.
	vm            string
	notice, lasts time.Duration
	// notBefore is a reschedule's time: RFC 3339, or a duration from when
	// the step runs.
	notBefore string
}

// describe names s for messages: its line and what it does.
func (s *step) describe() string {
	what := s.kind
	switch {
	case s.id != "":
		what += " " + s.id
	case s.ref != "":
		what += " " + s.ref
	}
	return fmt.Sprintf("step at %s (line %d): %s", s.at, s.line, what)
}

// Expectation kinds.
const (
	expApproved         = "approved"
	expApprovedInTime   = "approvedBeforeNotBefore"
	expSeen             = "seen"
	expPolls            = "polls"
	expLongPoll         = "longPoll"
	expNotThrottled     = "notThrottled"
	expOnlyOwnTerminate = "approvesOnlyOwnTerminate"
	expNoFinding        = "noFinding"
)

// expectation is one thing the clients under test must have done.
type expectation struct {
	line   int
	kind   string
	event  string   // the scenario id of an event or a wave
	vms    []string // none: every VM of the fleet
	within time.Duration
	every  time.Duration
	by     string
	// finding is a report finding kind (noFinding).
	finding string
	// name is the JUnit testcase name.
	name string
}

// Error is a mistake in a scenario file, or a scenario that does not
// fit the server it runs against (a VM it names that the server lacks):
// nothing ran, and 'forewarn scenario run' exits 2. Its text names the
// file and, where there is one, the line and the key at fault.
type Error struct{ msg string }

// Error returns the message, such as
// "s.yaml:6: steps[0].at: \"soon\": want a duration such as 15m or 90s".
func (e *Error) Error() string { return e.msg }

// errorf returns an *Error with the formatted message.
func errorf(format string, args ...any) *Error {
	return &Error{msg: fmt.Sprintf(format, args...)}
}

// parser reads one scenario file's nodes.
type parser struct {
	file string
	src  []byte
	ids  map[string]*step // ids defined so far
}

// errf returns an *Error at node n's line, naming key.
func (p *parser) errf(n *yaml.Node, key, format string, args ...any) error {
	return errorf("%s:%d: %s: %s", p.file, n.Line, key, fmt.Sprintf(format, args...))
}

// Load reads and parses the scenario file at path, which names it in
// messages and results. A file it cannot read is an *Error too.
func Load(path string) (*Scenario, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, errorf("scenario %v", err)
	}
	return Parse(path, src)
}

// Parse parses and checks the scenario file src, named file: file names
// it in messages and results, and a fleetFile the scenario gives is
// read relative to file's directory. Every mistake is an *Error naming
// file, the line and the key.
func Parse(file string, src []byte) (*Scenario, error) {
	p := &parser{file: file, src: src, ids: map[string]*step{}}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(src))
	if err := dec.Decode(&doc); err != nil {
		return nil, errorf("%s: %s", file, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		return nil, errorf("%s:%d: the file holds more than one YAML document (a \"---\" line starts another)", file, next.Line)
	}
	if len(doc.Content) == 0 {
		return nil, errorf("%s: the file is empty", file)
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, p.errf(root, "scenario", "want a mapping with steps and expect")
	}
	sc := &Scenario{file: file}
	if p.has(root, "fleet") && p.has(root, "fleetFile") {
		return nil, p.errf(p.child(root, "fleetFile"), "fleetFile", "give fleet or fleetFile, not both")
	}
	var stepsNode, expectNode *yaml.Node
	err := p.mapping(root, "scenario", map[string]func(k, v *yaml.Node) error{
		"fleet": func(k, v *yaml.Node) error {
			f, err := p.inlineFleet(root, v)
			sc.fleet = f
			return err
		},
		"fleetFile": func(k, v *yaml.Node) error {
			s, err := p.str(v, "fleetFile")
			if err != nil {
				return err
			}
			if !filepath.IsAbs(s) {
				s = filepath.Join(filepath.Dir(file), s)
			}
			f, err := fleetfile.Load(s)
			if err != nil {
				return p.errf(v, "fleetFile", "%s", message(err))
			}
			sc.fleet = f
			return nil
		},
		"duration": func(k, v *yaml.Node) error {
			d, err := p.duration(v, "duration")
			sc.duration = d
			return err
		},
		"steps":  func(k, v *yaml.Node) error { stepsNode = v; return nil },
		"expect": func(k, v *yaml.Node) error { expectNode = v; return nil },
	})
	if err != nil {
		return nil, err
	}
	if stepsNode == nil {
		return nil, p.errf(root, "steps", "missing: a scenario needs at least one step")
	}
	if stepsNode.Kind != yaml.SequenceNode || len(stepsNode.Content) == 0 {
		return nil, p.errf(stepsNode, "steps", "want a list of steps, each with at: and one action")
	}
	for i, n := range stepsNode.Content {
		s, err := p.step(n, fmt.Sprintf("steps[%d]", i))
		if err != nil {
			return nil, err
		}
		sc.steps = append(sc.steps, s)
	}
	// Refs name ids defined by a step that runs no later.
	slices.SortStableFunc(sc.steps, func(a, b *step) int { return cmp.Compare(a.at, b.at) })
	defined := map[string]*step{}
	for _, s := range sc.steps {
		if s.ref != "" {
			d := defined[s.ref]
			switch {
			case d == nil && p.ids[s.ref] != nil:
				return nil, errorf("%s:%d: %s: event %q is created by the step at line %d, which runs later (at %s)",
					file, s.line, s.kind, s.ref, p.ids[s.ref].line, p.ids[s.ref].at)
			case d == nil:
				return nil, errorf("%s:%d: %s: no step names an event %q (give a create, evict or delete step id: %s)",
					file, s.line, s.kind, s.ref, s.ref)
			case d.kind == "wave":
				return nil, errorf("%s:%d: %s: %q names a wave (line %d); %s takes an event",
					file, s.line, s.kind, s.ref, d.line, s.kind)
			}
		}
		if s.id != "" {
			defined[s.id] = s
		}
	}
	if expectNode != nil {
		if expectNode.Kind != yaml.SequenceNode {
			return nil, p.errf(expectNode, "expect", "want a list of expectations")
		}
		names := map[string]int{}
		for i, n := range expectNode.Content {
			e, err := p.expectation(n, fmt.Sprintf("expect[%d]", i))
			if err != nil {
				return nil, err
			}
			if l, dup := names[e.name]; dup {
				return nil, p.errf(n, fmt.Sprintf("expect[%d]", i), "the same expectation as line %d (%s)", l, e.name)
			}
			names[e.name] = e.line
			sc.expect = append(sc.expect, e)
		}
	}
	if err := p.checkVMs(sc, root); err != nil {
		return nil, err
	}
	return sc, nil
}

// has reports whether mapping n has key.
func (p *parser) has(n *yaml.Node, key string) bool {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return true
		}
	}
	return false
}

// mapping walks mapping node n (named where), calling the handler of
// each key; unknown and repeated keys are errors.
func (p *parser) mapping(n *yaml.Node, where string, keys map[string]func(k, v *yaml.Node) error) error {
	if n.Kind != yaml.MappingNode {
		return p.errf(n, where, "want a mapping")
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		f, ok := keys[k.Value]
		if !ok {
			return p.errf(k, where+"."+k.Value, "unknown key (want %s)", strings.Join(sortedKeys(keys), ", "))
		}
		if seen[k.Value] {
			return p.errf(k, where+"."+k.Value, "given twice")
		}
		seen[k.Value] = true
		if err := f(k, v); err != nil {
			return err
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// str returns scalar n's value.
func (p *parser) str(n *yaml.Node, key string) (string, error) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return "", p.errf(n, key, "want a value")
	}
	return n.Value, nil
}

// strs returns a scalar or a list of scalars.
func (p *parser) strs(n *yaml.Node, key string) ([]string, error) {
	if n.Kind == yaml.ScalarNode {
		s, err := p.str(n, key)
		return []string{s}, err
	}
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		return nil, p.errf(n, key, "want a name or a list of names")
	}
	var out []string
	for i, c := range n.Content {
		s, err := p.str(c, fmt.Sprintf("%s[%d]", key, i))
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// duration parses a non-negative duration, with the messages of the
// CLI's flags.
func (p *parser) duration(n *yaml.Node, key string) (time.Duration, error) {
	s, err := p.str(n, key)
	if err != nil {
		return 0, err
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, p.errf(n, key, "%q: want a duration such as 15m or 90s", s)
	case d < 0:
		return 0, p.errf(n, key, "%q: want a duration that is not negative", s)
	}
	return d, nil
}

// boolean parses true or false.
func (p *parser) boolean(n *yaml.Node, key string) (bool, error) {
	s, err := p.str(n, key)
	if err != nil {
		return false, err
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, p.errf(n, key, "%q: want true or false", s)
	}
	return b, nil
}

// id checks the id a step gives its event.
func (p *parser) id(n *yaml.Node, key string, s *step) error {
	v, err := p.str(n, key)
	if err != nil {
		return err
	}
	if prev := p.ids[v]; prev != nil {
		return p.errf(n, key, "id %q is already given by the step at line %d", v, prev.line)
	}
	if strings.ContainsAny(v, " \t\n") {
		return p.errf(n, key, "id %q: want a name without spaces", v)
	}
	s.id = v
	p.ids[v] = s
	return nil
}

// step parses one step: at and one action.
func (p *parser) step(n *yaml.Node, where string) (*step, error) {
	s := &step{line: n.Line}
	var action *yaml.Node
	ref := func(kind string) func(k, v *yaml.Node) error {
		return func(k, v *yaml.Node) error {
			if action != nil {
				return p.errf(k, where+"."+kind, "a step has one action; this one already has %s", s.kind)
			}
			action, s.kind = v, kind
			if v.Kind == yaml.MappingNode {
				return p.mapping(v, where+"."+kind, map[string]func(k, v *yaml.Node) error{
					"event": func(k, v *yaml.Node) (err error) { s.ref, err = p.str(v, where+"."+kind+".event"); return },
				})
			}
			var err error
			s.ref, err = p.str(v, where+"."+kind)
			return err
		}
	}
	keys := map[string]func(k, v *yaml.Node) error{
		"at":      func(k, v *yaml.Node) (err error) { s.at, err = p.duration(v, where+".at"); return },
		"approve": ref("approve"), "start": ref("start"), "complete": ref("complete"), "cancel": ref("cancel"),
	}
	for _, kind := range []string{"create", "evict", "delete", "wave", "reschedule"} {
		keys[kind] = func(k, v *yaml.Node) error {
			if action != nil {
				return p.errf(k, where+"."+kind, "a step has one action; this one already has %s", s.kind)
			}
			action, s.kind = v, kind
			return nil
		}
	}
	if err := p.mapping(n, where, keys); err != nil {
		return nil, err
	}
	if action == nil {
		return nil, p.errf(n, where, "no action: give one of approve, cancel, complete, create, delete, evict, reschedule, start, wave")
	}
	w := where + "." + s.kind
	switch s.kind {
	case "create":
		return s, p.createStep(action, w, s)
	case "evict", "delete":
		return s, p.vmStep(action, w, s)
	case "wave":
		return s, p.waveStep(action, w, s)
	case "reschedule":
		err := p.mapping(action, w, map[string]func(k, v *yaml.Node) error{
			"event":     func(k, v *yaml.Node) (err error) { s.ref, err = p.str(v, w+".event"); return },
			"notBefore": func(k, v *yaml.Node) (err error) { s.notBefore, err = p.str(v, w+".notBefore"); return },
		})
		if err != nil {
			return nil, err
		}
		if s.ref == "" {
			return nil, p.errf(action, w+".event", "missing: the id of the event to move")
		}
		if _, err := time.Parse(time.RFC3339, s.notBefore); err != nil {
			if d, derr := time.ParseDuration(s.notBefore); derr != nil || d <= 0 {
				return nil, p.errf(action, w+".notBefore", "%q is neither an RFC 3339 time (2026-01-02T15:04:05Z) nor a positive duration (36h)", s.notBefore)
			}
		}
	}
	return s, nil
}

// createStep parses create's keys, those of 'forewarn event create'.
func (p *parser) createStep(n *yaml.Node, w string, s *step) error {
	req := &s.create
	var notice, lasts time.Duration
	var noticeSet, lastsSet bool
	err := p.mapping(n, w, map[string]func(k, v *yaml.Node) error{
		"type": func(k, v *yaml.Node) error {
			typ, err := p.str(v, w+".type")
			if err != nil {
				return err
			}
			t, err := forewarn.ParseEventType(typ)
			if err != nil {
				return p.errf(v, w+".type", "%s", message(err))
			}
			req.Type = string(t)
			return nil
		},
		"vm":          func(k, v *yaml.Node) (err error) { req.VMs, err = p.strs(v, w+".vm"); return },
		"notice":      func(k, v *yaml.Node) (err error) { notice, err = p.duration(v, w+".notice"); noticeSet = true; return },
		"lasts":       func(k, v *yaml.Node) (err error) { lasts, err = p.duration(v, w+".lasts"); lastsSet = true; return },
		"description": func(k, v *yaml.Node) (err error) { req.Description, err = p.str(v, w+".description"); return },
		"started":     func(k, v *yaml.Node) (err error) { req.Started, err = p.boolean(v, w+".started"); return },
		"id":          func(k, v *yaml.Node) error { return p.id(v, w+".id", s) },
		"source": func(k, v *yaml.Node) error {
			src, err := p.str(v, w+".source")
			if err != nil {
				return err
			}
			so, err := forewarn.ParseSource(src)
			if err != nil {
				return p.errf(v, w+".source", "%s", message(err))
			}
			req.Source = string(so)
			return nil
		},
		"duration": func(k, v *yaml.Node) error {
			str, err := p.str(v, w+".duration")
			if err != nil {
				return err
			}
			n, err := strconv.Atoi(str)
			if err != nil {
				return p.errf(v, w+".duration", "%q: want a whole number of seconds", str)
			}
			req.Duration = &n
			return nil
		},
	})
	switch {
	case err != nil:
		return err
	case req.Type == "":
		return p.errf(n, w+".type", "missing: the event type, as event create --type takes it")
	case len(req.VMs) == 0:
		return p.errf(n, w+".vm", "missing: the VM or VMs the event affects")
	}
	if noticeSet {
		req.Notice = notice.String()
	}
	if lastsSet {
		req.Lasts = lasts.String()
	}
	return nil
}

// vmStep parses evict's and delete's keys, those of 'forewarn vm evict'
// and 'forewarn vm delete'.
func (p *parser) vmStep(n *yaml.Node, w string, s *step) error {
	keys := map[string]func(k, v *yaml.Node) error{
		"vm":    func(k, v *yaml.Node) (err error) { s.vm, err = p.str(v, w+".vm"); return },
		"lasts": func(k, v *yaml.Node) (err error) { s.lasts, err = p.duration(v, w+".lasts"); return },
		"id":    func(k, v *yaml.Node) error { return p.id(v, w+".id", s) },
	}
	if s.kind == "evict" {
		keys["notice"] = func(k, v *yaml.Node) (err error) { s.notice, err = p.duration(v, w+".notice"); return }
	}
	if n.Kind == yaml.ScalarNode {
		var err error
		s.vm, err = p.str(n, w)
		return err
	}
	if err := p.mapping(n, w, keys); err != nil {
		return err
	}
	if s.vm == "" {
		return p.errf(n, w+".vm", "missing: the VM to %s", s.kind)
	}
	return nil
}

// waveStep parses wave's keys, those of 'forewarn maintenance start'.
func (p *parser) waveStep(n *yaml.Node, w string, s *step) error {
	req := &s.wave
	err := p.mapping(n, w, map[string]func(k, v *yaml.Node) error{
		"scope": func(k, v *yaml.Node) (err error) { req.Scope, err = p.str(v, w+".scope"); return },
		"type": func(k, v *yaml.Node) error {
			typ, err := p.str(v, w+".type")
			if err != nil {
				return err
			}
			t, err := forewarn.ParseEventType(typ)
			if err != nil || (t != forewarn.Freeze && t != forewarn.Reboot && t != forewarn.Redeploy) {
				return p.errf(v, w+".type", "a maintenance wave is Freeze, Reboot or Redeploy, not %q", typ)
			}
			req.Type = string(t)
			return nil
		},
		"notice": func(k, v *yaml.Node) error {
			d, err := p.duration(v, w+".notice")
			req.Notice = d.String()
			return err
		},
		"lasts": func(k, v *yaml.Node) error {
			d, err := p.duration(v, w+".lasts")
			req.Lasts = d.String()
			return err
		},
		"id": func(k, v *yaml.Node) error { return p.id(v, w+".id", s) },
	})
	switch {
	case err != nil:
		return err
	case req.Scope == "":
		return p.errf(n, w+".scope", "missing: the availability set, cloud service or scale set")
	case req.Type == "":
		return p.errf(n, w+".type", "missing: Freeze, Reboot or Redeploy")
	}
	return nil
}

// expectation parses one expectation: a mapping with one key.
func (p *parser) expectation(n *yaml.Node, where string) (*expectation, error) {
	if n.Kind != yaml.MappingNode || len(n.Content) != 2 {
		return nil, p.errf(n, where, "want one expectation, such as approved: {event: f1, within: 3s}")
	}
	k, v := n.Content[0], n.Content[1]
	e := &expectation{line: k.Line, kind: k.Value}
	w := where + "." + k.Value
	event := func(k, v *yaml.Node) error {
		s, err := p.str(v, w+".event")
		if err != nil {
			return err
		}
		if p.ids[s] == nil {
			return p.errf(v, w+".event", "no step names an event %q", s)
		}
		e.event = s
		return nil
	}
	vms := func(k, v *yaml.Node) (err error) { e.vms, err = p.strs(v, w+".vm"); return }
	within := func(k, v *yaml.Node) (err error) { e.within, err = p.duration(v, w+".within"); return }
	var keys map[string]func(k, v *yaml.Node) error
	var required []string
	switch e.kind {
	case expApproved:
		keys = map[string]func(k, v *yaml.Node) error{"event": event, "within": within,
			"by": func(k, v *yaml.Node) (err error) { e.by, err = p.str(v, w+".by"); return }}
		required = []string{"event"}
	case expApprovedInTime:
		keys, required = map[string]func(k, v *yaml.Node) error{"event": event}, []string{"event"}
	case expSeen:
		keys, required = map[string]func(k, v *yaml.Node) error{"event": event, "within": within}, []string{"event", "within"}
	case expPolls:
		keys = map[string]func(k, v *yaml.Node) error{"vm": vms,
			"every": func(k, v *yaml.Node) (err error) { e.every, err = p.duration(v, w+".every"); return }}
		required = []string{"vm", "every"}
	case expLongPoll, expOnlyOwnTerminate:
		keys, required = map[string]func(k, v *yaml.Node) error{"vm": vms}, []string{"vm"}
	case expNotThrottled:
		if v.Kind == yaml.ScalarNode {
			if b, err := p.boolean(v, w); err != nil || !b {
				return nil, p.errf(v, w, "want true, or {vm: NAME}")
			}
			break
		}
		keys = map[string]func(k, v *yaml.Node) error{"vm": vms}
	case expNoFinding:
		keys = map[string]func(k, v *yaml.Node) error{"vm": vms, "kind": func(k, v *yaml.Node) error {
			s, err := p.str(v, w+".kind")
			if err != nil {
				return err
			}
			if !slices.Contains(findingKinds, s) {
				return p.errf(v, w+".kind", "unknown finding %q (want one of %s)", s, strings.Join(findingKinds, ", "))
			}
			e.finding = s
			return nil
		}}
		required = []string{"kind"}
	default:
		return nil, p.errf(k, w, "unknown expectation (want one of %s)", strings.Join([]string{expApproved, expApprovedInTime,
			expLongPoll, expNoFinding, expNotThrottled, expOnlyOwnTerminate, expPolls, expSeen}, ", "))
	}
	if keys != nil {
		if err := p.mapping(v, w, keys); err != nil {
			return nil, err
		}
		for _, r := range required {
			if !p.has(v, r) {
				return nil, p.errf(v, w+"."+r, "missing")
			}
		}
	}
	if e.event != "" && p.ids[e.event].kind == "wave" && e.kind != expApproved && e.kind != expSeen && e.kind != expApprovedInTime {
		return nil, p.errf(v, w+".event", "%q names a wave", e.event)
	}
	e.name = e.testName()
	return e, nil
}

// findingKinds are the report's finding kinds, for noFinding.
var findingKinds = slices.Concat(report.VMFindings, report.EventFindings)

// eventFinding reports whether kind is a finding about events.
func eventFinding(kind string) bool { return slices.Contains(report.EventFindings, kind) }

// testName is the expectation's JUnit testcase name.
func (e *expectation) testName() string {
	vms := strings.Join(e.vms, ", ")
	switch e.kind {
	case expApproved:
		s := "approved " + e.event
		if e.by != "" {
			s += " by " + e.by
		}
		if e.within > 0 {
			s += " within " + e.within.String()
		}
		return s
	case expApprovedInTime:
		return "approved " + e.event + " before its NotBefore"
	case expSeen:
		return "seen " + e.event + " within " + e.within.String()
	case expPolls:
		return vms + " calls at least every " + e.every.String()
	case expLongPoll:
		return vms + " holds a long-poll on maintenance-event"
	case expOnlyOwnTerminate:
		return vms + " approves only its own Terminate"
	case expNotThrottled:
		if vms == "" {
			return "no VM is throttled"
		}
		return vms + " not throttled"
	case expNoFinding:
		if vms == "" {
			return "no finding " + e.finding
		}
		return vms + ": no finding " + e.finding
	}
	return e.kind
}

// vmsNamed lists the VM names a scenario's steps and expectations use,
// each with the line of its first use.
func vmsNamed(sc *Scenario) (names []string, lines map[string]int) {
	lines = map[string]int{}
	add := func(line int, vms ...string) {
		for _, vm := range vms {
			if _, ok := lines[vm]; !ok {
				lines[vm] = line
				names = append(names, vm)
			}
		}
	}
	for _, s := range sc.steps {
		add(s.line, s.create.VMs...)
		if s.vm != "" {
			add(s.line, s.vm)
		}
	}
	for _, e := range sc.expect {
		add(e.line, e.vms...)
		if e.by != "" {
			add(e.line, e.by)
		}
	}
	return names, lines
}

// checkVMs checks that the VMs the scenario names are in its fleet.
func (p *parser) checkVMs(sc *Scenario, root *yaml.Node) error {
	if sc.fleet == nil {
		return nil
	}
	names, lines := vmsNamed(sc)
	for _, vm := range names {
		if sc.fleet.VM(vm) == nil {
			return errorf("%s:%d: no VM named %q in the scenario's fleet", p.file, lines[vm], vm)
		}
	}
	return nil
}

// entryRE finds the fleet entry a fleetfile error names, lineRE the line
// a YAML error names.
var (
	entryRE = regexp.MustCompile(`^(vms|scaleSets)\[(\d+)\]`)
	lineRE  = regexp.MustCompile(`line (\d+): ([^\n]*)`)
)

// inlineFleet parses the fleet under key fleet (value v) with package
// fleetfile, from the file's own lines so that its errors' line numbers
// are the file's.
func (p *parser) inlineFleet(root, v *yaml.Node) (*forewarn.Fleet, error) {
	if v.Kind != yaml.MappingNode {
		return nil, p.errf(v, "fleet", "want a mapping with vms (the fleet file's schema)")
	}
	// The value's lines: from its first up to the next top-level key.
	lines := strings.SplitAfter(string(p.src), "\n")
	end := len(lines)
	for i := 0; i+1 < len(root.Content); i += 2 {
		if k := root.Content[i]; k.Line > v.Line && k.Line-1 < end {
			end = k.Line - 1
		}
	}
	var b strings.Builder
	for i := range end {
		switch {
		case i < v.Line-1:
			b.WriteString("\n")
		case i == v.Line-1:
			// Blank what precedes the value on its first line ("fleet: ").
			l := []rune(lines[i])
			for j := 0; j < v.Column-1 && j < len(l); j++ {
				l[j] = ' '
			}
			b.WriteString(string(l))
		default:
			b.WriteString(lines[i])
		}
	}
	f, err := fleetfile.Parse([]byte(b.String()))
	if err != nil {
		msg := forewarn.ErrorMessage(err)
		line := v.Line
		if m := entryRE.FindStringSubmatch(msg); m != nil {
			if list := p.child(v, m[1]); list != nil && list.Kind == yaml.SequenceNode {
				if i, _ := strconv.Atoi(m[2]); i < len(list.Content) {
					line = list.Content[i].Line
				}
			}
		} else if m := lineRE.FindStringSubmatch(msg); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = m[2]
		}
		return nil, errorf("%s:%d: fleet: %s", p.file, line, msg)
	}
	return f, nil
}

// child returns the value of key in mapping n, or nil.
func (p *parser) child(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

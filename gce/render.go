// Package gce speaks the Google Compute Engine metadata server wire for
// maintenance: the maintenance-event, preempted, scheduling and
// upcoming-maintenance keys with their ETags and wait_for_change
// long-polls, the identity keys clients read beside them, and the
// directory listings.
//
// Every key of a VM is rendered once per change of the VM's engine view
// into an immutable document. Documents are chained: each one points to
// its successor once it exists, so a long-poll walks every value a key
// took and never misses a change, even one that is changed back.
package gce

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/history"
	"github.com/forewarn/forewarn/internal/memo"
	"github.com/forewarn/forewarn/internal/weakmap"
)

// node is one key or directory of a VM's metadata tree, rendered.
type node struct {
	// text is the body a plain GET returns: the value without a trailing
	// newline, or a directory listing with one entry a line.
	text []byte
	// json is the alt=json body: a JSON string for a value, the listing as
	// a JSON array for a directory.
	json []byte
	// recursive is the recursive=true body of a directory (JSON).
	recursive []byte
	// recursiveText is the recursive=true&alt=text body of a directory.
	recursiveText []byte
	// textLen is len(text) as a Content-Length header value.
	textLen []string
	// etag is 16 lower-case hex digits derived from the value, ready to
	// assign as a header value.
	etag []string
	// dir reports whether the node is a directory.
	dir bool
	// absent marks a key with no value now (upcoming-maintenance before
	// any maintenance was ever announced); GETs answer 503.
	absent bool
	// fill, when set, computes a directory's recursive forms and ETag on
	// first use: a change re-renders only the keys that changed.
	fill func(*node)
	once sync.Once
}

// ready returns n with its lazily computed fields filled.
func (n *node) ready() *node {
	if n.fill != nil {
		n.once.Do(func() { n.fill(n) })
	}
	return n
}

// doc is one VM's rendered tree as of one engine view.
type doc struct {
	vm *forewarn.VM
	// static holds the keys and directories that never change, shared by
	// all of a VM's documents; over holds the five that do (the dynamic
	// keys and the two directories above them), in overKeys order.
	// static is indexed by keys, which maps each path below
	// /computeMetadata/v1/ (directories with a trailing "/") to its place
	// in a walk of the tree; every VM's tree has the same paths, so they
	// share keys. (The dynamic keys' first nodes are there too; over
	// holds their current ones.)
	static []*node
	keys   map[string]int
	over   [5]*node
	// dynamic holds the values of the keys that change, to tell whether a
	// new view changes anything a GCE client sees.
	dynamic [3]string
	// refs are the events the dynamic keys show, in overKeys order; nil
	// where a key shows none.
	refs [3]*history.Ref
	// changed is closed once next is set.
	changed chan struct{}
	next    *doc
}

// upcomingFields are the keys of upcoming-maintenance, in output order.
var upcomingFields = []string{"can_reschedule", "latest_window_start_time", "maintenance_status", "type", "window_end_time", "window_start_time"}

// noNotification is the body real servers send for upcoming-maintenance
// when no notification was ever received.
const noNotification = `{ "error": "no notifications have been received yet, try again later" }`

// noUpcoming is the upcoming-maintenance value once a maintenance has
// ended (or was withdrawn) and no other is announced: an empty object,
// as the documentation shows it, so a long-poll wakes with a 200 and
// the Go client's Subscribe sees the end (docs/wire-decisions.md).
var noUpcoming = map[string]string{}

// tree is a directory being built: leaf values and subdirectories.
type tree struct {
	leaves map[string]any // string, int64 or map[string]string (upcoming-maintenance)
	dirs   map[string]*tree
}

func newTree() *tree { return &tree{leaves: map[string]any{}, dirs: map[string]*tree{}} }

// overKeys are the paths whose nodes change with the engine's view: the
// three dynamic keys, then the two directories above them.
var overKeys = [5]string{"instance/maintenance-event", "instance/preempted", "instance/upcoming-maintenance", "instance/", ""}

// node returns the node at path key, or nil.
func (d *doc) node(key string) *node {
	for i, k := range overKeys {
		if k == key {
			return d.over[i]
		}
	}
	if i, ok := d.keys[key]; ok {
		return d.static[i]
	}
	return nil
}

// buildTree assembles the whole metadata tree of vm with the given
// dynamic values.
func buildTree(vm *forewarn.VM, maint, preempted string, up map[string]string) *tree {
	num := numericID("project:" + vm.Project)
	root := newTree()
	inst, proj, sched := newTree(), newTree(), newTree()
	root.dirs["instance"], root.dirs["project"] = inst, proj
	inst.dirs["scheduling"] = sched

	inst.leaves["name"] = vm.Name
	inst.leaves["hostname"] = fmt.Sprintf("%s.%s.c.%s.internal", vm.Name, vm.Zone, vm.Project)
	inst.leaves["id"] = numericID("instance:" + vm.Name)
	inst.leaves["zone"] = fmt.Sprintf("projects/%d/zones/%s", num, vm.Zone)
	inst.leaves["machine-type"] = fmt.Sprintf("projects/%d/machineTypes/%s", num, vm.MachineType)
	inst.leaves["maintenance-event"] = maint
	inst.leaves["preempted"] = preempted
	inst.leaves["upcoming-maintenance"] = mapLeaf(up)
	sched.leaves["automatic-restart"] = upper(!vm.Evictable())
	sched.leaves["on-host-maintenance"] = vm.OnHostMaintenance
	sched.leaves["preemptible"] = upper(vm.Preemptible)
	sched.leaves["provisioning-model"] = map[bool]string{true: "SPOT", false: "STANDARD"}[vm.Spot]
	proj.leaves["project-id"] = vm.Project
	proj.leaves["numeric-project-id"] = num
	return root
}

// render builds the document of view v. Given the VM's previous
// document prev, it returns nil when nothing a GCE client sees changed,
// and otherwise re-renders only the dynamic keys, leaving the directories
// that contain them to be filled on first use.
func render(v *engine.View, prev *doc, c *renderCache) *doc {
	maint, preempted := maintenanceEvent(v), upper(v.Preempted)
	up, upNode, upText := c.upcoming(upcomingEvent(v), v.Maintained)
	dynamic := [3]string{maint, preempted, upText}
	if prev != nil && prev.dynamic == dynamic {
		return nil
	}
	d := &doc{vm: v.VM, dynamic: dynamic, changed: make(chan struct{}), refs: refs(v)}
	lazyTree := func() *tree { return buildTree(v.VM, maint, preempted, up) }
	if prev == nil {
		t := lazyTree()
		d.add(&d.static, nil, "", t, lazyTree, c)
		if len(d.static) != len(c.keys) {
			// The first tree, or one of another shape: index its paths.
			var paths []string
			d.static = d.static[:0]
			d.add(&d.static, &paths, "", t, lazyTree, c)
			c.keys = make(map[string]int, len(paths))
			for i, p := range paths {
				c.keys[p] = i
			}
		}
		d.keys = c.keys
		for i, k := range overKeys {
			d.over[i] = d.static[d.keys[k]]
		}
		return d
	}
	d.static, d.keys = prev.static, prev.keys
	d.over[0], d.over[1], d.over[2] = c.leaf(maint), c.leaf(preempted), upNode
	for i := 3; i < 5; i++ {
		old := prev.over[i]
		d.over[i] = &node{dir: true, text: old.text, textLen: old.textLen, json: old.json, fill: dirFill(overKeys[i], lazyTree)}
	}
	return d
}

// mapLeaf returns m as a tree leaf: untyped nil for a nil map, so the key
// renders as absent; an empty map renders as the empty value.
func mapLeaf(m map[string]string) any {
	if m == nil {
		return nil
	}
	return m
}

// dirFill returns the fill function of the directory at path p of the
// tree that build makes.
func dirFill(p string, build func() *tree) func(*node) {
	return func(n *node) {
		t := build()
		for _, part := range strings.Split(strings.TrimSuffix(p, "/"), "/") {
			if part != "" {
				t = t.dirs[part]
			}
		}
		n.recursive, _ = json.Marshal(t.recursive())
		var b strings.Builder
		t.flatten("", &b)
		n.recursiveText = []byte(b.String())
		n.etag = etag(n.recursive)
	}
}

// ownKey reports whether key k of directory p differs from VM to VM;
// the values of the others (zone, project, scheduling) are shared
// through the cache.
func ownKey(p, k string) bool {
	return p == "instance/" && (k == "name" || k == "hostname" || k == "id")
}

// add appends to out the nodes of directory t at path p (empty or ending
// in "/") and of everything below it, in a fixed walk order, and their
// paths to paths unless it is nil; the directories' recursive forms are
// filled on first use from the tree that build makes.
func (d *doc) add(out *[]*node, paths *[]string, p string, t *tree, build func() *tree, c *renderCache) {
	keys := slices.Sorted(maps.Keys(t.leaves))
	dirs := slices.Sorted(maps.Keys(t.dirs))
	list := make([]string, 0, len(keys)+len(dirs))
	for _, k := range keys {
		list = append(list, k)
		var n *node
		switch v := t.leaves[k].(type) {
		case string:
			if !ownKey(p, k) {
				n = c.leaf(v)
			}
		case int64:
			if !ownKey(p, k) {
				n = c.number(v)
			}
		}
		if n == nil {
			n = leafNode(t.leaves[k])
		}
		*out = append(*out, n)
		if paths != nil {
			*paths = append(*paths, p+k)
		}
	}
	for _, k := range dirs {
		list = append(list, k+"/")
		d.add(out, paths, p+k+"/", t.dirs[k], build, c)
	}
	slices.Sort(list)
	l := c.listing(list)
	*out = append(*out, &node{dir: true, fill: dirFill(p, build), text: l.text, textLen: l.textLen, json: l.json})
	if paths != nil {
		*paths = append(*paths, p)
	}
}

// recursive returns t as recursive=true shows it: camelCase keys,
// numbers for numeric ids, absent keys left out.
func (t *tree) recursive() map[string]any {
	out := map[string]any{}
	for k, v := range t.leaves {
		if v == nil {
			continue
		}
		out[camel(k)] = v
	}
	for k, sub := range t.dirs {
		out[camel(k)] = sub.recursive()
	}
	return out
}

// flatten writes t as recursive=true&alt=text shows it: "path value" lines.
func (t *tree) flatten(prefix string, b *strings.Builder) {
	for _, k := range slices.Sorted(maps.Keys(t.leaves)) {
		switch v := t.leaves[k].(type) {
		case string:
			fmt.Fprintf(b, "%s%s %s\n", prefix, k, v)
		case int64:
			fmt.Fprintf(b, "%s%s %d\n", prefix, k, v)
		case map[string]string:
			if len(v) == 0 {
				continue
			}
			for _, f := range upcomingFields {
				fmt.Fprintf(b, "%s%s/%s %s\n", prefix, k, f, v[f])
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(t.dirs)) {
		t.dirs[k].flatten(prefix+k+"/", b)
	}
}

// leafNode renders one value.
func leafNode(v any) *node {
	n := &node{}
	switch v := v.(type) {
	case nil:
		n.absent = true
		n.text = []byte(noNotification)
		n.json = n.text
	case string:
		n.text = []byte(v)
		n.json = quote(v)
	case int64:
		n.text = strconv.AppendInt(nil, v, 10)
		n.json = n.text
	case map[string]string:
		if len(v) == 0 { // nothing announced now; a maintenance ended
			n.text, n.json = []byte{}, []byte("{}")
			break
		}
		var b strings.Builder
		for i, k := range upcomingFields {
			if i > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(k + " " + v[k])
		}
		n.text = []byte(b.String())
		j := []byte{'{'}
		for i, k := range upcomingFields {
			if i > 0 {
				j = append(j, ',')
			}
			j = append(append(append(j, quote(k)...), ':'), quote(v[k])...)
		}
		n.json = append(j, '}')
	}
	n.etag = etag(n.text)
	n.textLen = []string{strconv.Itoa(len(n.text))}
	return n
}

// quote renders s as a JSON string: directly for the plain tokens the
// metadata values are, through encoding/json otherwise.
func quote(s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s)
			return b
		}
	}
	return append(append(append(make([]byte, 0, len(s)+2), '"'), s...), '"')
}

// etag derives a 16-hex-digit ETag from a value, as a header value.
func etag(b []byte) []string {
	h := fnv.New64a()
	h.Write(b)
	var sum [8]byte
	return []string{hex.EncodeToString(binary.BigEndian.AppendUint64(sum[:0], h.Sum64()))}
}

// refs returns references to the events view v's dynamic keys show:
// the host maintenance event maintenance-event names, the Preempt that
// made preempted TRUE, the event upcoming-maintenance describes.
func refs(v *engine.View) [3]*history.Ref {
	var out [3]*history.Ref
	if ev := maintenanceEventOf(v); ev != nil {
		out[0] = history.NewRef(ev)
	}
	if v.Preempted {
		for _, ev := range v.Events {
			if ev.Type == forewarn.Preempt && v.Own(ev) {
				out[1] = history.NewStartedRef(ev) // FALSE until it started
				break
			}
		}
	}
	if ev := upcomingEvent(v); ev != nil {
		out[2] = history.NewRef(ev)
	}
	return out
}

// ref returns the reference to the event key shows, or nil.
func (d *doc) ref(key string) *history.Ref {
	for i, k := range overKeys[:3] {
		if k == key {
			return d.refs[i]
		}
	}
	return nil
}

// maintenanceEvent returns the maintenance-event value of view v: the
// type of a host maintenance event that has been warned of or started,
// NONE otherwise and always on sole-tenant VMs.
func maintenanceEvent(v *engine.View) string {
	if ev := maintenanceEventOf(v); ev != nil {
		return string(ev.Type)
	}
	return "NONE"
}

// maintenanceEventOf returns the event maintenance-event names in view
// v, or nil when it reads NONE.
func maintenanceEventOf(v *engine.View) *forewarn.Event {
	if v.VM.SoleTenant {
		return nil
	}
	for _, ev := range v.Events {
		if ev.Type.HostMaintenance() && v.Own(ev) && (ev.Status == forewarn.Started || !ev.WarnedAt.IsZero()) {
			return ev
		}
	}
	return nil
}

// renderCache shares rendered nodes between VMs whose values are equal,
// so one event's change over thousands of VMs renders its nodes once. It
// is used under the engine's lock only. The value tables are bounded
// (memo.Size); up holds an event version's entry for as long as the
// version lives.
type renderCache struct {
	leaves  memo.Table[string, *node]
	numbers memo.Table[int64, *node]
	// lists holds directory listings (text, textLen and json only).
	lists memo.Table[string, *node]
	// keys indexes the paths of a VM's static nodes, in walk order.
	keys map[string]int
	up   weakmap.Map[forewarn.Event, upcomingEntry] // while the event version lives
	// absent and ended are the upcoming-maintenance values with nothing
	// announced, before any maintenance and after one.
	absent, ended upcomingEntry
}

type upcomingEntry struct {
	fields map[string]string
	node   *node
	text   string
}

// listing returns a node holding the listing of a directory's entries.
func (c *renderCache) listing(entries []string) *node {
	text := strings.Join(entries, "\n") + "\n"
	return c.lists.Get(text, func() *node {
		n := &node{text: []byte(text), textLen: []string{strconv.Itoa(len(text))}}
		n.json, _ = json.Marshal(entries)
		return n
	})
}

// number returns the node of a numeric value.
func (c *renderCache) number(v int64) *node {
	return c.numbers.Get(v, func() *node { return leafNode(v) })
}

// leaf returns the node of a string value.
func (c *renderCache) leaf(v string) *node {
	return c.leaves.Get(v, func() *node { return leafNode(v) })
}

// upcoming returns the upcoming-maintenance fields, node and text of ev.
// With ev nil it returns the empty value when a maintenance was ever
// announced (maintained), and the absent node otherwise.
func (c *renderCache) upcoming(ev *forewarn.Event, maintained bool) (map[string]string, *node, string) {
	if ev == nil {
		e := &c.absent
		f := map[string]string(nil)
		if maintained {
			e, f = &c.ended, noUpcoming
		}
		if e.node == nil {
			n := leafNode(mapLeaf(f))
			*e = upcomingEntry{fields: f, node: n, text: string(n.text)}
		}
		return e.fields, e.node, e.text
	}
	if e, ok := c.up.Get(ev); ok {
		return e.fields, e.node, e.text
	}
	f := upcomingFieldsOf(ev)
	n := leafNode(f)
	e := upcomingEntry{fields: f, node: n, text: string(n.text)}
	c.up.Put(ev, e)
	return e.fields, e.node, e.text
}

// upcomingEvent returns view v's first host maintenance event of its own
// VM, or nil.
func upcomingEvent(v *engine.View) *forewarn.Event {
	for _, ev := range v.Events {
		if ev.Type.HostMaintenance() && v.Own(ev) {
			return ev
		}
	}
	return nil
}

// upcomingFieldsOf returns the upcoming-maintenance fields of a host
// maintenance event, or nil for none.
func upcomingFieldsOf(ev *forewarn.Event) map[string]string {
	if ev != nil {
		start, status, canReschedule := ev.NotBefore, "PENDING", "true"
		if ev.Status == forewarn.Started {
			start, status, canReschedule = ev.StartedAt, "ONGOING", "false"
		}
		kind := "SCHEDULED"
		if ev.Status == forewarn.Started && ev.StartedAt.Equal(ev.Created) {
			kind = "UNSCHEDULED" // raised already started: never announced
		}
		return map[string]string{
			"can_reschedule":           canReschedule,
			"latest_window_start_time": timestamp(start),
			"maintenance_status":       status,
			"type":                     kind,
			"window_end_time":          timestamp(start.Add(ev.Lasts)),
			"window_start_time":        timestamp(start),
		}
	}
	return nil
}

// timestamp renders t as the metadata server does, RFC 3339 with an
// explicit +00:00 offset.
func timestamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05+00:00") }

func upper(b bool) string {
	if b {
		return "TRUE"
	}
	return "FALSE"
}

// camel turns a key such as "maintenance-event" into "maintenanceEvent".
func camel(k string) string {
	parts := strings.Split(k, "-")
	for i := 1; i < len(parts); i++ {
		if parts[i] != "" {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
	}
	return strings.Join(parts, "")
}

// numericID derives a stable 19-digit id from s.
func numericID(s string) int64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return int64(h.Sum64()%8_000_000_000_000_000_000) + 1_000_000_000_000_000_000
}

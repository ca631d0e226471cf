// Package gce speaks the Google Compute Engine metadata server wire for
// maintenance: the maintenance-event, preempted, scheduling and
// upcoming-maintenance keys with their ETags and wait_for_change
// long-polls, the identity keys clients read beside them, and the
// directory listings.
//
// Each change of a VM's engine view makes an immutable document, and
// what it renders then is small: the three keys that change with the
// view (maintenance-event, preempted, upcoming-maintenance), whose
// nodes VMs showing equal values share. The rest is rendered when a
// request first needs it. The keys and directories that do not change
// with the view (the VM's name, hostname and id, zone, scheduling,
// project) are rendered once per VM definition, at the first request
// for any of them, and shared by all of that definition's documents.
// The two directories above the changing keys, instance/ and the root,
// whose recursive forms show them, are made per document at its first
// request for either, and their recursive forms at the first request
// for those. A VM that only reads the maintenance keys never renders
// anything else. Documents are chained: each one points to its
// successor once it exists, so a long-poll walks every value a key
// took and never misses a change, even one that is changed back.
package gce

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/history"
	"github.com/forewarn/forewarn/internal/jsonstr"
	"github.com/forewarn/forewarn/internal/lazy"
	"github.com/forewarn/forewarn/internal/memo"
	"github.com/forewarn/forewarn/internal/signal"
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
	// first use.
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

// doc is one VM's rendered tree as of one engine view. Render makes only
// what changes with the view; node makes the rest on first use.
type doc struct {
	// statics holds the VM definition and the keys and directories that
	// do not change with the view, shared by all the documents of the
	// definition and rendered at the first request for any of them.
	statics *statics
	// maint, preempted and up are the values of the dynamic keys,
	// shared through the render cache. Their text, and up's fields, are
	// what the directories' recursive forms show besides the VM.
	maint, preempted *node
	up               *upcomingEntry
	// dirs holds the nodes of the directories above the dynamic keys,
	// in dirKeys order, made at the first request for either.
	dirs lazy.Value[[2]node]
	// refs are the events the dynamic keys show, in dynamicKeys order;
	// nil where a key shows none.
	refs [3]*history.Ref
	// changed fires once next is set.
	changed signal.Signal
	next    *doc
}

// statics is the part of a VM's tree that does not change with the
// engine's view: every key and directory but the dynamic keys and the
// directories above them. One VM definition's documents share it.
type statics struct {
	vm    *forewarn.VM
	cache *renderCache
	// nodes is in layout order; the places of the dynamic keys and of
	// the directories above them are nil.
	nodes lazy.Value[[]*node]
}

// get returns the static nodes, rendering them on first use. Requests
// racing to be first may each render them; one rendering is kept.
func (s *statics) get() []*node {
	return *s.nodes.Get(func() *[]*node {
		nodes := s.cache.staticNodes(s.vm)
		return &nodes
	})
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

// dynamicKeys are the keys whose values change with the engine's view,
// in doc.refs order.
var dynamicKeys = [3]string{"instance/maintenance-event", "instance/preempted", "instance/upcoming-maintenance"}

// dirKeys are the directories above the dynamic keys, whose recursive
// forms show them, in doc.dirs order.
var dirKeys = [2]string{"instance/", ""}

// node returns the node at path key, or nil.
func (d *doc) node(key string) *node {
	switch key {
	case dynamicKeys[0]:
		return d.maint
	case dynamicKeys[1]:
		return d.preempted
	case dynamicKeys[2]:
		return d.up.node
	case dirKeys[0]:
		return d.dir(0)
	case dirKeys[1]:
		return d.dir(1)
	}
	if i, ok := layout.index[key]; ok {
		return d.statics.get()[i]
	}
	return nil
}

// has reports whether path key is in the tree, rendering nothing.
func (d *doc) has(key string) bool {
	_, ok := layout.index[key]
	return ok
}

// dir returns the node of directory dirKeys[i], making both on first
// use; their recursive forms are filled on first use from the tree of
// the document's values.
func (d *doc) dir(i int) *node {
	dirs := d.dirs.Get(func() *[2]node {
		dirs := new([2]node)
		for j, p := range dirKeys {
			n, l := &dirs[j], layout.lists[layout.index[p]]
			n.dir, n.text, n.textLen, n.json = true, l.text, l.textLen, l.json
			n.fill = func(n *node) { n.fillFrom(d.tree().at(p)) }
		}
		return dirs
	})
	return &dirs[i]
}

// tree returns the whole metadata tree d shows.
func (d *doc) tree() *tree {
	return buildTree(d.statics.vm, string(d.maint.text), string(d.preempted.text), d.up.fields)
}

// buildTree assembles the whole metadata tree of vm with the given
// dynamic values. Every tree it makes has the same paths, whatever the
// VM and the values (layout).
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

// treeLayout is the shape every VM's tree has: its paths below Prefix
// (directories with a trailing "/") in walk order, and its directories'
// listings, which are the same for every VM.
type treeLayout struct {
	// index maps each path to its place in walk order.
	index map[string]int
	// lists holds each directory's listing (text, textLen and json
	// only), by place; nil for a key.
	lists []*node
}

// layout is the shape of every tree buildTree makes.
var layout = newLayout(buildTree(&forewarn.VM{}, "", "", nil))

func newLayout(t *tree) treeLayout {
	l := treeLayout{index: map[string]int{}}
	t.walk("", func(p string, _ any, dir *tree) {
		l.index[p] = len(l.lists)
		var n *node
		if dir != nil {
			n = listing(dir)
		}
		l.lists = append(l.lists, n)
	})
	return l
}

// walk calls fn for each key and directory of t, whose path is p (empty
// or ending in "/"), in walk order: a directory's keys in sorted order,
// then its subdirectories, then the directory itself. fn gets a key's
// path and value, and a directory's path and tree.
func (t *tree) walk(p string, fn func(p string, v any, dir *tree)) {
	for _, k := range slices.Sorted(maps.Keys(t.leaves)) {
		fn(p+k, t.leaves[k], nil)
	}
	for _, k := range slices.Sorted(maps.Keys(t.dirs)) {
		t.dirs[k].walk(p+k+"/", fn)
	}
	fn(p, nil, t)
}

// at returns the directory at path p (empty or ending in "/") below t.
func (t *tree) at(p string) *tree {
	for _, part := range strings.Split(strings.TrimSuffix(p, "/"), "/") {
		if part != "" {
			t = t.dirs[part]
		}
	}
	return t
}

// listing returns a node holding the listing of directory t's entries.
func listing(t *tree) *node {
	entries := slices.Collect(maps.Keys(t.leaves))
	for k := range t.dirs {
		entries = append(entries, k+"/")
	}
	slices.Sort(entries)
	text := strings.Join(entries, "\n") + "\n"
	n := &node{text: []byte(text), textLen: []string{strconv.Itoa(len(text))}}
	n.json, _ = json.Marshal(entries)
	return n
}

// fillFrom sets directory node n's recursive forms and ETag from t.
func (n *node) fillFrom(t *tree) {
	n.recursive, _ = json.Marshal(t.recursive())
	var b strings.Builder
	t.flatten("", &b)
	n.recursiveText = []byte(b.String())
	n.etag = etag(n.recursive)
}

// render builds the document of view v. Given the VM's previous
// document prev, of the same VM definition, it returns nil when nothing
// a GCE client sees changed. It renders the dynamic keys only, sharing
// their nodes through c; the rest is made on first use (doc.node).
func render(v *engine.View, prev *doc, c *renderCache) *doc {
	maint, preempted := maintenanceEvent(v), upper(v.Preempted)
	up := c.upcoming(upcomingEvent(v), v.Maintained)
	if prev != nil && string(prev.maint.text) == maint && string(prev.preempted.text) == preempted &&
		string(prev.up.node.text) == string(up.node.text) {
		return nil
	}
	d := &doc{maint: c.leaf(maint), preempted: c.leaf(preempted), up: up, refs: refs(v)}
	if prev != nil {
		d.statics = prev.statics
	} else {
		d.statics = &statics{vm: v.VM, cache: c}
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

// ownKey reports whether the key at path p differs from VM to VM; the
// values of the others (zone, project, scheduling) are shared through
// the cache.
func ownKey(p string) bool {
	return p == "instance/name" || p == "instance/hostname" || p == "instance/id"
}

// staticNodes renders the nodes of vm's tree that do not change with
// the engine's view, in layout order, leaving nil the places of the
// dynamic keys and of the directories above them.
func (c *renderCache) staticNodes(vm *forewarn.VM) []*node {
	out := make([]*node, len(layout.lists))
	buildTree(vm, "", "", nil).walk("", func(p string, v any, dir *tree) {
		i := layout.index[p]
		switch {
		case slices.Contains(dynamicKeys[:], p) || slices.Contains(dirKeys[:], p):
			// Each document's own (doc.node).
		case dir != nil:
			out[i] = c.directory(i, dir)
		case ownKey(p):
			out[i] = leafNode(v)
		default:
			switch v := v.(type) {
			case string:
				out[i] = c.leaf(v)
			case int64:
				out[i] = c.number(v)
			default:
				out[i] = leafNode(v)
			}
		}
	})
	return out
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
		n.json = quote(v)
		if t := n.json[1 : len(n.json)-1]; string(t) == v {
			n.text = t[:len(t):len(t)] // plainly quoted: one array for both
		} else {
			n.text = []byte(v)
		}
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
	// The ETag and Content-Length values share one string and one
	// slice.
	var buf [16 + 20]byte
	b := strconv.AppendInt(hexHash(buf[:0], n.text), int64(len(n.text)), 10)
	h := string(b)
	hdr := []string{h[:16], h[16:]}
	n.etag, n.textLen = hdr[:1:1], hdr[1:]
	return n
}

// quote renders s as a JSON string, in a slice of its own.
func quote(s string) []byte { return jsonstr.Append(make([]byte, 0, len(s)+2), s) }

// etag derives a 16-hex-digit ETag from a value, as a header value.
func etag(b []byte) []string { return []string{string(hexHash(nil, b))} }

// hexHash appends to dst the 16 hex digits of b's hash, b's ETag.
func hexHash(dst, b []byte) []byte {
	h := fnv.New64a()
	h.Write(b)
	var sum [8]byte
	return hex.AppendEncode(dst, binary.BigEndian.AppendUint64(sum[:0], h.Sum64()))
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
	for i, k := range dynamicKeys {
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
// so one event's change over thousands of VMs renders its nodes once.
// Render uses it under the engine's lock and requests rendering a VM's
// static nodes use it at the same time: mu guards it. The value tables
// are bounded (memo.Size); up holds an upcoming-maintenance value for
// as long as a document shows it.
type renderCache struct {
	mu      sync.Mutex
	leaves  memo.Table[string, *node]
	numbers memo.Table[int64, *node]
	// dirs holds static directories by place and recursive form.
	dirs memo.Table[string, *node]
	// up holds upcoming-maintenance values by what they are made of, so
	// that the events of a fleet-wide maintenance, one per VM, share
	// one; an entry goes with the last document that holds its value.
	up map[upcomingKey]weak.Pointer[upcomingEntry]
	// absent and ended are the upcoming-maintenance values with nothing
	// announced, before any maintenance and after one.
	absent, ended *upcomingEntry
}

// upcomingEntry is one upcoming-maintenance value: its fields (nil while
// absent) and node.
type upcomingEntry struct {
	fields map[string]string
	node   *node
}

// directory returns the node of directory t, at place i of the layout,
// with its recursive forms: the static directories hold a few shared
// values (scheduling, project), so VMs share their nodes too.
func (c *renderCache) directory(i int, t *tree) *node {
	recursive, _ := json.Marshal(t.recursive())
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dirs.Get(strconv.Itoa(i)+string(recursive), func() *node {
		l := layout.lists[i]
		n := &node{dir: true, text: l.text, textLen: l.textLen, json: l.json}
		n.fillFrom(t)
		return n
	})
}

// number returns the node of a numeric value.
func (c *renderCache) number(v int64) *node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.numbers.Get(v, func() *node { return leafNode(v) })
}

// leaf returns the node of a string value.
func (c *renderCache) leaf(v string) *node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leaves.Get(v, func() *node { return leafNode(v) })
}

// upcoming returns the upcoming-maintenance value of ev. With ev nil it
// returns the empty value when a maintenance was ever announced
// (maintained), and the absent value otherwise.
func (c *renderCache) upcoming(ev *forewarn.Event, maintained bool) *upcomingEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ev == nil {
		e, f := &c.absent, map[string]string(nil)
		if maintained {
			e, f = &c.ended, noUpcoming
		}
		if *e == nil {
			*e = &upcomingEntry{fields: f, node: leafNode(mapLeaf(f))}
		}
		return *e
	}
	k := upcomingKeyOf(ev)
	if e := c.up[k].Value(); e != nil {
		return e
	}
	f := k.fields()
	e := &upcomingEntry{fields: f, node: leafNode(f)}
	w := weak.Make(e)
	if c.up == nil {
		c.up = map[upcomingKey]weak.Pointer[upcomingEntry]{}
	}
	c.up[k] = w
	runtime.AddCleanup(e, c.dropUpcoming, upcomingRef{k, w})
	return e
}

// upcomingRef names an entry of renderCache.up.
type upcomingRef struct {
	key upcomingKey
	w   weak.Pointer[upcomingEntry]
}

// dropUpcoming forgets the entry r names, once its value is garbage,
// unless a new value of the key replaced it.
func (c *renderCache) dropUpcoming(r upcomingRef) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.up[r.key] == r.w {
		delete(c.up, r.key)
	}
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

// upcomingKey is what a host maintenance event's upcoming-maintenance
// value is made of.
type upcomingKey struct {
	// start and end are the window's, in Unix seconds (timestamp shows
	// whole seconds).
	start, end int64
	// started is the event's; unscheduled marks one raised already
	// started, never announced.
	started, unscheduled bool
}

// upcomingKeyOf returns what host maintenance event ev's
// upcoming-maintenance value is made of.
func upcomingKeyOf(ev *forewarn.Event) upcomingKey {
	start := ev.NotBefore
	if ev.Status == forewarn.Started {
		start = ev.StartedAt
	}
	return upcomingKey{
		start:       start.Unix(),
		end:         start.Add(ev.Lasts).Unix(),
		started:     ev.Status == forewarn.Started,
		unscheduled: ev.Status == forewarn.Started && ev.StartedAt.Equal(ev.Created),
	}
}

// fields returns the upcoming-maintenance fields of k.
func (k upcomingKey) fields() map[string]string {
	status, canReschedule, kind := "PENDING", "true", "SCHEDULED"
	if k.started {
		status, canReschedule = "ONGOING", "false"
	}
	if k.unscheduled {
		kind = "UNSCHEDULED"
	}
	start := timestamp(time.Unix(k.start, 0))
	return map[string]string{
		"can_reschedule":           canReschedule,
		"latest_window_start_time": start,
		"maintenance_status":       status,
		"type":                     kind,
		"window_end_time":          timestamp(time.Unix(k.end, 0)),
		"window_start_time":        start,
	}
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

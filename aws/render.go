package aws

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/history"
	"github.com/forewarn/forewarn/internal/weakmap"
)

// EventTime is the layout of the times in events/maintenance, such as
// "21 Jan 2019 09:00:43 GMT".
const EventTime = "2 Jan 2006 15:04:05 GMT"

// doc is one EC2 VM's metadata as of one engine View: every answer
// prepared, so that a GET only picks bytes. A doc is immutable.
type doc struct {
	static *static
	// The keys that change with the VM's events; nil means 404.
	scheduled, history          []byte
	instanceAction, termination []byte
	rebalance                   []byte
	lifecycle                   []byte
	// gone reports whether the VM is terminated: it answers nothing.
	gone bool
	// refs are the events the keys above show, for the report's marks:
	// scheduled lists the events of sched, the Spot keys the Preempt of
	// spot, target-lifecycle-state the Terminate of scaleIn.
	sched          []*history.Ref
	spot1, scaleIn *history.Ref
	// metaData is the meta-data/ listing, which names spot/ only while
	// an interruption is due and events/recommendations/ only while a
	// rebalance is recommended.
	metaData, events, spot, recommendations []byte
}

// static holds the answers that never change for one VM definition.
type static struct {
	vm *forewarn.VM // the definition they are of

	instanceID, instanceType, zone, region, localIPv4, hostname []byte
	lifeCycle, amiID, macAddr, identity                         []byte
	// tokensRequired reports httpTokens: required; hopLimit is the IP
	// TTL of a token PUT's answer.
	tokensRequired bool
	hopLimit       int
}

// AMI is the image ID every Forewarn VM reports.
const AMI = "ami-0f0f0f0f0f0f0f0f0"

func newStatic(vm *forewarn.VM) *static {
	ip := "127.0.0.1"
	if vm.IP.IsValid() {
		ip = vm.IP.String()
	}
	region := vm.Region()
	host := "ip-" + strings.NewReplacer(".", "-", ":", "-").Replace(ip)
	if region == "us-east-1" {
		host += ".ec2.internal"
	} else {
		host += "." + region + ".compute.internal"
	}
	life := "on-demand"
	if vm.Spot {
		life = "spot"
	}
	identity := identityDocument(vm, ip, region)
	return &static{
		vm:         vm,
		instanceID: []byte(vm.InstanceID), instanceType: []byte(vm.MachineType), zone: []byte(vm.Zone),
		region: []byte(region), localIPv4: []byte(ip), hostname: []byte(host), lifeCycle: []byte(life),
		amiID: []byte(AMI), macAddr: []byte(mac(vm.InstanceID)), identity: identity,
		tokensRequired: vm.HTTPTokens == "required", hopLimit: max(vm.HopLimit, 1),
	}
}

// identityDocument renders the instance identity document in EC2's own
// layout: " : " separators, and null for the fields a plain instance
// lacks.
func identityDocument(vm *forewarn.VM, ip, region string) []byte {
	var b bytes.Buffer
	b.WriteString("{\n")
	for i, f := range [][2]string{
		{"accountId", "123456789012"}, {"architecture", "x86_64"}, {"availabilityZone", vm.Zone},
		{"billingProducts", ""}, {"devpayProductCodes", ""}, {"marketplaceProductCodes", ""},
		{"imageId", AMI}, {"instanceId", vm.InstanceID}, {"instanceType", vm.MachineType}, {"kernelId", ""},
		{"pendingTime", "2024-01-01T00:00:00Z"}, {"privateIp", ip}, {"ramdiskId", ""}, {"region", region},
		{"version", "2017-09-30"},
	} {
		if i > 0 {
			b.WriteString(",\n")
		}
		v := []byte("null")
		if f[1] != "" {
			v = jsonString(f[1])
		}
		fmt.Fprintf(&b, "  %q : %s", f[0], v)
	}
	b.WriteString("\n}")
	return b.Bytes()
}

// mac returns a stable locally administered MAC address for an instance.
func mac(id string) string {
	h := uint64(14695981039346656037)
	for i := 0; i < len(id); i++ {
		h = (h ^ uint64(id[i])) * 1099511628211
	}
	b := []byte{0x0e, byte(h >> 32), byte(h >> 24), byte(h >> 16), byte(h >> 8), byte(h)}
	var s strings.Builder
	for i, x := range b {
		if i > 0 {
			s.WriteByte(':')
		}
		s.WriteString(strconv.FormatUint(uint64(x)|0x100, 16)[1:])
	}
	return s.String()
}

// scheduledEvent is one entry of events/maintenance/scheduled and
// history as text: entryJSON writes its fields in this order, the one
// EC2's own documentation shows, and leaves out the empty ones.
type scheduledEvent struct {
	NotBefore, Code, Description, EventID, NotAfter, NotBeforeDeadline, State string
}

// EventID returns the EC2 event ID of the Forewarn event id:
// instance-event- and 17 hex digits of the GUID, stable in every state.
func EventID(id string) string {
	hex := strings.ToLower(strings.ReplaceAll(id, "-", ""))
	if len(hex) > 17 {
		hex = hex[:17]
	}
	return "instance-event-" + hex
}

// defaultDescription is what EC2 says of each scheduled event code when
// the operator gave no description.
func defaultDescription(t forewarn.EventType) string {
	switch t {
	case forewarn.InstanceReboot:
		return "scheduled reboot"
	case forewarn.SystemReboot:
		return "scheduled reboot"
	case forewarn.SystemMaintenance:
		return "scheduled system maintenance"
	case forewarn.InstanceRetirement:
		return "The instance is running on degraded hardware"
	case forewarn.InstanceStop:
		return "The instance is scheduled to stop"
	}
	return string(t)
}

// windowStart returns when ev's maintenance window opens: its NotBefore,
// which the engine clears once the event starts, or its start.
func windowStart(ev *forewarn.Event) time.Time {
	if ev.NotBefore.IsZero() {
		return ev.StartedAt
	}
	return ev.NotBefore
}

// entry renders ev as EC2 lists it.
func entry(ev *forewarn.Event) scheduledEvent {
	start := windowStart(ev)
	desc := ev.Description
	if desc == "" {
		desc = defaultDescription(ev.Type)
	}
	state := "active"
	switch ev.Status {
	case forewarn.Completed:
		state, desc = "completed", "[Completed] "+desc
	case forewarn.Canceled:
		state, desc = "canceled", "[Canceled] "+desc
	}
	e := scheduledEvent{
		NotBefore: start.UTC().Format(EventTime), Code: string(ev.Type), Description: desc,
		EventID: EventID(ev.ID), State: state,
	}
	if ev.Type != forewarn.InstanceStop && ev.Type != forewarn.InstanceRetirement {
		// A stop has a start and no window end.
		e.NotAfter = start.Add(ev.Lasts).UTC().Format(EventTime)
	}
	if !ev.Deadline.IsZero() {
		e.NotBeforeDeadline = ev.Deadline.UTC().Format(EventTime)
	}
	return e
}

// emptyList is the answer of an event list with no events.
var emptyList = []byte("[]")

// renderCache shares the rendering of one event version between every
// VM that lists it: an event naming 100,000 VMs is rendered once, not
// once per VM. Entries go when their event version is garbage.
type renderCache struct {
	mu sync.Mutex
	// entries holds an event's entry, "{...}"; alone its one-event list,
	// "[ {...} ]", the whole answer of most VMs.
	entries, alone weakmap.Map[forewarn.Event, []byte]
	// lists holds, by its last event, a list of several events: VMs that
	// list the same event versions (the VMs of fleet-wide events) share
	// one rendering.
	lists weakmap.Map[forewarn.Event, *sharedList]
}

// sharedList is a rendered list of several events, which it refers to
// weakly so that the cache keeps none alive.
type sharedList struct {
	evs []weak.Pointer[forewarn.Event]
	b   []byte
}

// same reports whether l lists exactly the event versions sel.
func (l *sharedList) same(sel []*forewarn.Event) bool {
	if len(l.evs) != len(sel) {
		return false
	}
	for i, ev := range sel {
		if l.evs[i] != weak.Make(ev) {
			return false
		}
	}
	return true
}

// list returns the rendering of sel, two or more events in order,
// shared with every VM that lists the same versions.
func (c *renderCache) list(sel []*forewarn.Event) []byte {
	last := sel[len(sel)-1]
	c.mu.Lock()
	sl, ok := c.lists.Get(last)
	c.mu.Unlock()
	if ok && sl.same(sel) {
		return sl.b
	}
	var b bytes.Buffer
	b.WriteString("[ ")
	for i, ev := range sel {
		if i > 0 {
			b.WriteString(", ")
		}
		b.Write(c.entry(ev))
	}
	b.WriteString(" ]")
	if !ok {
		sl = &sharedList{evs: make([]weak.Pointer[forewarn.Event], len(sel)), b: b.Bytes()}
		for i, ev := range sel {
			sl.evs[i] = weak.Make(ev)
		}
		c.mu.Lock()
		if _, taken := c.lists.Get(last); !taken {
			c.lists.Put(last, sl)
		}
		c.mu.Unlock()
	}
	return b.Bytes()
}

// entry returns ev's entry, rendered once.
func (c *renderCache) entry(ev *forewarn.Event) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b, ok := c.entries.Get(ev); ok {
		return b
	}
	b := entryJSON(ev)
	c.entries.Put(ev, b)
	return b
}

// single returns the list of ev alone, rendered once.
func (c *renderCache) single(ev *forewarn.Event) []byte {
	e := c.entry(ev)
	c.mu.Lock()
	defer c.mu.Unlock()
	if b, ok := c.alone.Get(ev); ok {
		return b
	}
	b := make([]byte, 0, len(e)+4)
	b = append(append(append(b, "[ "...), e...), " ]"...)
	c.alone.Put(ev, b)
	return b
}

// entryJSON renders ev in EC2's own layout: two-space fields with " : ".
func entryJSON(ev *forewarn.Event) []byte {
	e := entry(ev)
	var b bytes.Buffer
	b.WriteString("{\n")
	for j, f := range [][2]string{{"NotBefore", e.NotBefore}, {"Code", e.Code}, {"Description", e.Description},
		{"EventId", e.EventID}, {"NotAfter", e.NotAfter}, {"NotBeforeDeadline", e.NotBeforeDeadline}, {"State", e.State}} {
		if f[1] == "" {
			continue
		}
		if j > 0 {
			b.WriteString(",\n")
		}
		fmt.Fprintf(&b, "  %q : %s", f[0], jsonString(f[1]))
	}
	b.WriteString("\n}")
	return b.Bytes()
}

// eventList renders the EC2 scheduled events of evs that keep keeps as a
// JSON array, earliest NotBefore first, in EC2's layout ("[ {...}, {...} ]");
// [] when there are none.
func eventList(evs []*forewarn.Event, keep func(*forewarn.Event) bool, cache *renderCache) []byte {
	var one *forewarn.Event
	var sel []*forewarn.Event
	for _, ev := range evs {
		if ev.Type.EC2() && keep(ev) {
			if one == nil {
				one = ev
			} else {
				sel = append(sel, ev)
			}
		}
	}
	switch {
	case one == nil:
		return emptyList
	case sel == nil:
		return cache.single(one)
	}
	sel = append(sel, one)
	slices.SortStableFunc(sel, func(a, b *forewarn.Event) int {
		if c := windowStart(a).Compare(windowStart(b)); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return cache.list(sel)
}

// render builds the doc of v's VM, reusing st and the renderings in
// cache.
func render(v *engine.View, st *static, cache *renderCache) *doc {
	d := &doc{static: st, gone: v.Deleted}
	d.scheduled = eventList(v.Events, v.Own, cache)
	for _, ev := range v.Events {
		if ev.Type.EC2() && v.Own(ev) {
			d.sched = append(d.sched, history.NewRef(ev))
		}
	}
	d.history = eventList(v.History, func(*forewarn.Event) bool { return true }, cache)
	vm := v.VM
	for _, ev := range v.Events {
		if !v.Own(ev) {
			continue
		}
		switch {
		case ev.Type == forewarn.Preempt && ev.Action != "":
			// The rebalance recommendation comes as the interruption is
			// decided; the interruption notice its lead before the action.
			d.rebalance = fmt.Appendf(nil, `{"noticeTime":"%s"}`, ev.Created.UTC().Format(time.RFC3339))
			if ev.Status == forewarn.Started || !ev.WarnedAt.IsZero() {
				at := ev.NotBefore
				if at.IsZero() {
					at = ev.StartedAt
				}
				ts := at.UTC().Format(time.RFC3339)
				d.instanceAction = fmt.Appendf(nil, `{"action":"%s","time":"%s"}`, ev.Action, ts)
				if ev.Action == "terminate" {
					d.termination = []byte(ts) // only a termination has one
				}
			}
			d.spot1 = history.NewRef(ev)
		case ev.Type == forewarn.Terminate && ev.Status == forewarn.Started && vm.AutoScalingGroup != "":
			// The group moves the instance as the scale-in begins.
			d.lifecycle = lsTerminated
			d.scaleIn = history.NewStartedRef(ev) // InService until it started
		}
	}
	if vm.AutoScalingGroup != "" && d.lifecycle == nil {
		d.lifecycle = []byte(cmp.Or(vm.WarmPool, "InService"))
	}
	d.metaData = metaDataListings[b2i(vm.AutoScalingGroup != "")][b2i(d.instanceAction != nil)]
	d.events = eventListings[b2i(d.rebalance != nil)]
	if d.instanceAction != nil {
		d.spot = spotListings[b2i(d.termination != nil)]
	}
	if d.rebalance != nil {
		d.recommendations = lsRecommendations
	}
	return d
}

// see marks the events that answer b, read from d, shows.
func (d *doc) see(h *history.History, w http.ResponseWriter, b []byte) {
	switch {
	case same(b, d.scheduled):
		for _, r := range d.sched {
			h.See(w, r)
		}
	case d.spot1 != nil && (same(b, d.instanceAction) || same(b, d.termination) || same(b, d.rebalance)):
		h.See(w, d.spot1)
	case d.scaleIn != nil && same(b, d.lifecycle):
		h.See(w, d.scaleIn)
	}
}

// same reports whether a and b are the same bytes in memory.
func same(a, b []byte) bool { return len(a) > 0 && len(b) == len(a) && &a[0] == &b[0] }

// The listings that vary, each rendered once: meta-data/ by [in an Auto
// Scaling group][interruption notice], events/ by [rebalance
// recommended], spot/ by [termination time].
var (
	metaDataListings = [2][2][]byte{
		{listing(metaDataKeys(false, false)), listing(metaDataKeys(false, true))},
		{listing(metaDataKeys(true, false)), listing(metaDataKeys(true, true))},
	}
	eventListings     = [2][]byte{listing([]string{"maintenance/"}), listing([]string{"maintenance/", "recommendations/"})}
	spotListings      = [2][]byte{listing([]string{"instance-action"}), listing([]string{"instance-action", "termination-time"})}
	lsRecommendations = []byte("rebalance")
	lsTerminated      = []byte("Terminated")
)

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// jsonString returns s as a JSON string, with <, > and & as they are.
func jsonString(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// listing renders a directory's names, one per line, without a final
// newline, as EC2 does.
func listing(names []string) []byte { return []byte(strings.Join(names, "\n")) }

// metaDataKeys lists meta-data/ in EC2's alphabetical order, with
// autoscaling/ for a group member and spot/ while an interruption notice
// stands; directories end in a slash.
func metaDataKeys(asg, spot bool) []string {
	keys := []string{"ami-id"}
	if asg {
		keys = append(keys, "autoscaling/")
	}
	keys = append(keys, "events/", "hostname", "instance-id", "instance-life-cycle", "instance-type",
		"local-hostname", "local-ipv4", "mac", "placement/")
	if spot {
		keys = append(keys, "spot/")
	}
	return keys
}

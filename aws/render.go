package aws

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
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
	"github.com/forewarn/forewarn/internal/jsonstr"
	"github.com/forewarn/forewarn/internal/lazy"
	"github.com/forewarn/forewarn/internal/weakmap"
)

// EventTime is the layout of the times in events/maintenance, such as
// "21 Jan 2019 09:00:43 GMT".
const EventTime = "2 Jan 2006 15:04:05 GMT"

// doc is one EC2 VM's metadata as of one engine View, rendered when the
// engine publishes the view: the answers that change with the VM's
// events prepared, so that a GET of them only picks bytes, and the
// definition's answers reached through def, built on the VM's first
// request for one. A doc is immutable.
type doc struct {
	def *def
	// The keys that change with the VM's events; nil means 404.
	scheduled, history          *list
	instanceAction, termination []byte
	rebalance                   []byte
	lifecycle                   []byte
	// gone reports whether the VM is terminated: it answers nothing.
	gone bool
	// flags are what of the VM's state its listings depend on.
	flags flags
	// refs are the events the keys above show, for the report's marks:
	// scheduled lists the events of sched, the Spot keys the Preempt of
	// spot, target-lifecycle-state the Terminate of scaleIn.
	sched          []*history.Ref
	spot1, scaleIn *history.Ref
}

// def is one VM definition, shared by every doc of the VM while its
// definition stays the same. It builds the definition's static answers
// on the first request that needs one, and keeps them: until then a VM
// costs its server a def, not the kilobyte or so of its answers, and
// most VMs of a large fleet ask for few keys, or none.
type def struct {
	vm *forewarn.VM // the definition; never modified
	st lazy.Value[static]
}

// static returns the definition's static answers, building them on its
// first call. Concurrent first calls may each build them; all return
// the one that was stored first.
func (df *def) static() *static {
	return df.st.Get(func() *static { return newStatic(df.vm) })
}

// tokensRequired reports whether the VM requires IMDSv2 session tokens
// (httpTokens: required). Read from the definition, it builds nothing:
// the token PUT and the token check of a GET come before any key.
func (df *def) tokensRequired() bool { return df.vm.HTTPTokens == "required" }

// hopLimit returns the IP TTL of a token PUT's answer: the VM's hop
// limit, at least 1.
func (df *def) hopLimit() int { return max(df.vm.HopLimit, 1) }

// static holds the answers that never change for one VM definition:
// its def builds them on the VM's first request for one of them, and
// they live as long as the definition. The answers lie one after
// another in one buffer, which costs a VM less than a slice each.
type static struct {
	buf []byte            // the answers, in the order of the fields
	end [numFields]uint32 // where each field's answer ends in buf
	// sig holds the identity document's pkcs7 and signature, made on
	// their first request: few clients read them.
	sig lazy.Value[signedIdentity]
}

// field names one of a static's answers.
type field uint8

// The static answers, in their order in a static's buffer.
const (
	fInstanceID field = iota
	fInstanceType
	fZone
	fRegion
	fLocalIPv4
	fHostname
	fLifeCycle
	fAMIID
	fMAC
	fMACDir // network/interfaces/macs/ lists the one interface: the MAC and a slash
	fIdentity
	fReservationID
	fSecurityGroups
	fAccountID
	fInterfaceID
	fVPCID
	fSubnetID
	fDomain
	fPartition
	numFields
)

// get returns the answer of f. Its capacity ends with it: an append
// to it copies.
func (st *static) get(f field) []byte {
	var from uint32
	if f > 0 {
		from = st.end[f-1]
	}
	return st.buf[from:st.end[f]:st.end[f]]
}

// The defaults of an EC2 VM's keys a fleet file leaves out
// (docs/aws-wire.md, section 4).
const (
	// AMI is the image ID of a VM without amiId.
	AMI = "ami-0f0f0f0f0f0f0f0f0"
	// Account is the owner account ID of a VM without accountId.
	Account = "123456789012"
	// SecurityGroup is the security group of a VM without
	// securityGroups: a VPC's default group.
	SecurityGroup = "default"
)

// The values every VM shares.
var (
	valLaunchIndex  = []byte("0")
	valDeviceNumber = []byte("0")
	valRootDevice   = []byte("/dev/xvda")
)

// newStatic renders the static answers of vm, but for the signed
// identity, which waits for its own first request.
func newStatic(vm *forewarn.VM) *static {
	ip := "127.0.0.1"
	if vm.IP.IsValid() {
		ip = vm.IP.String()
	}
	region := vm.Region()
	host := "ip-" + strings.Map(func(r rune) rune {
		if r == '.' || r == ':' {
			return '-'
		}
		return r
	}, ip)
	if region == "us-east-1" {
		host += ".ec2.internal"
	} else {
		host += "." + region + ".compute.internal"
	}
	life := "on-demand"
	if vm.Spot {
		life = "spot"
	}
	ami, account := cmp.Or(vm.AMIID, AMI), cmp.Or(vm.AccountID, Account)
	// As in a default VPC: one per account and region, a subnet per zone.
	vpc := cmp.Or(vm.VPCID, hexID("vpc-", account, region))
	subnet := cmp.Or(vm.SubnetID, hexID("subnet-", vpc, vm.Zone))
	partition, domain := partitionOf(region)
	m := mac(vm.InstanceID)
	vals := [numFields]string{
		fInstanceID: vm.InstanceID, fInstanceType: vm.MachineType, fZone: vm.Zone, fRegion: region,
		fLocalIPv4: ip, fHostname: host, fLifeCycle: life, fAMIID: ami, fMAC: m, fMACDir: m + "/",
		fReservationID: hexID("r-", vm.InstanceID), fSecurityGroups: cmp.Or(vm.SecurityGroups, SecurityGroup),
		fAccountID: account, fInterfaceID: hexID("eni-", vm.InstanceID), fVPCID: vpc, fSubnetID: subnet,
		fDomain: domain, fPartition: partition,
	}
	st := &static{}
	b := make([]byte, 0, 1024) // the usual VM's, with room
	for f, v := range vals {
		if field(f) == fIdentity {
			b = appendIdentity(b, vm, ip, region, ami, account)
		} else {
			b = append(b, v...)
		}
		st.end[f] = uint32(len(b))
	}
	st.buf = bytes.Clone(b)
	return st
}

// hexID returns prefix and 17 hex digits that parts determine: an EC2
// resource ID, the same for the same parts.
func hexID(prefix string, parts ...string) string {
	h := sha256.Sum256([]byte(prefix + strings.Join(parts, "\x00")))
	return prefix + "0" + hex.EncodeToString(h[:8]) // as EC2's long IDs: 0 and 16 digits
}

// partitionOf returns the partition and the domain of region's
// services: aws and amazonaws.com but for China and GovCloud.
func partitionOf(region string) (partition, domain string) {
	switch {
	case strings.HasPrefix(region, "cn-"):
		return "aws-cn", "amazonaws.com.cn"
	case strings.HasPrefix(region, "us-gov-"):
		return "aws-us-gov", "amazonaws.com"
	}
	return "aws", "amazonaws.com"
}

// appendIdentity appends the instance identity document in EC2's own
// layout: " : " separators, and null for the fields a plain instance
// lacks.
func appendIdentity(b []byte, vm *forewarn.VM, ip, region, ami, account string) []byte {
	b = append(b, "{\n"...)
	for i, f := range [...][2]string{
		{"accountId", account}, {"architecture", "x86_64"}, {"availabilityZone", vm.Zone},
		{"billingProducts", ""}, {"devpayProductCodes", ""}, {"marketplaceProductCodes", ""},
		{"imageId", ami}, {"instanceId", vm.InstanceID}, {"instanceType", vm.MachineType}, {"kernelId", ""},
		{"pendingTime", "2024-01-01T00:00:00Z"}, {"privateIp", ip}, {"ramdiskId", ""}, {"region", region},
		{"version", "2017-09-30"},
	} {
		if i > 0 {
			b = append(b, ",\n"...)
		}
		if f[1] == "" {
			b = append(append(append(b, `  "`...), f[0]...), `" : null`...)
		} else {
			b = appendField(b, f[0], f[1])
		}
	}
	return append(b, "\n}"...)
}

// signedIdentity is the identity document's pkcs7 and signature keys.
type signedIdentity struct{ pkcs7, signature []byte }

// signed returns the pkcs7 and signature of st's identity document.
// AWS signs them with its own keys; Forewarn cannot, so they have
// EC2's shape (base64 of a 128-byte RSA-1024 signature in 76-character
// lines; base64 of the signed document in 64-character lines) and fail
// every verification (docs/aws-wire.md, section 4).
func (st *static) signed() *signedIdentity {
	return st.sig.Get(func() *signedIdentity {
		var sig []byte
		for i := byte(0); len(sig) < 128; i++ {
			h := sha512.Sum512(append([]byte{i}, st.get(fIdentity)...))
			sig = append(sig, h[:]...)
		}
		return &signedIdentity{
			pkcs7:     lines(base64.StdEncoding.EncodeToString(append(st.get(fIdentity), sig...)), 64),
			signature: lines(base64.StdEncoding.EncodeToString(sig), 76),
		}
	})
}

// lines breaks s into lines of n characters.
func lines(s string, n int) []byte {
	var b []byte
	for len(s) > n {
		b = append(append(b, s[:n]...), '\n')
		s = s[n:]
	}
	return append(b, s...)
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

// list is an EC2 event list, rendered at its first read: until a VM
// asks, a fleet-wide event costs it a pointer, not the 300 bytes of its
// rendering, and no time in the commit that makes or changes it. So the
// first GET of a list after a change renders it, once; every later GET
// serves the bytes it kept, without allocating.
type list struct {
	// one is the list's event when it has one; evs its events, in the
	// list's order, when it has several.
	one   *forewarn.Event
	evs   []*forewarn.Event
	cache *renderCache
	b     lazy.Value[[]byte]
}

// none is the list of no events, rendered.
var none = func() *list {
	l := &list{}
	l.b.Store(&emptyList)
	return l
}()

// bytes returns l rendered, rendering it on its first call; concurrent
// first calls return the same bytes.
func (l *list) bytes() []byte {
	return *l.b.Get(func() *[]byte {
		var b []byte
		if l.one != nil {
			b = l.cache.single(l.one)
		} else {
			b = l.cache.list(l.evs)
		}
		return &b
	})
}

// rendered returns l's rendering, or nil before its first read.
func (l *list) rendered() []byte {
	if p := l.b.Load(); p != nil {
		return *p
	}
	return nil
}

// renderCache shares the rendering of one event version between every
// VM that lists it, and between the docs of one VM that list it: an
// event naming 100,000 VMs is rendered once, not once per VM, and a VM
// whose other keys change lists its events again without rendering
// them. Entries go when their event version is garbage.
type renderCache struct {
	mu sync.Mutex
	// alone holds an event's one-event list, "[ {...} ]", the whole
	// answer of most VMs; the entry, "{...}", that a list of several
	// shows is a slice of it.
	alone weakmap.Map[forewarn.Event, []byte]
	// lists holds, by its last event, a list of several events: VMs that
	// list the same event versions (the VMs of fleet-wide events) share
	// one rendering.
	lists weakmap.Map[forewarn.Event, *sharedList]
	// buf is where single renders an event, under mu, before it keeps a
	// copy of the rendering's own size.
	buf []byte
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
	entries := make([][]byte, len(sel))
	n := len("[  ]") + len(", ")*(len(sel)-1)
	for i, ev := range sel {
		entries[i] = c.entry(ev)
		n += len(entries[i])
	}
	b := append(make([]byte, 0, n), "[ "...)
	for i, e := range entries {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, e...)
	}
	b = append(b, " ]"...)
	if !ok {
		sl = &sharedList{evs: make([]weak.Pointer[forewarn.Event], len(sel)), b: b}
		for i, ev := range sel {
			sl.evs[i] = weak.Make(ev)
		}
		c.mu.Lock()
		if _, taken := c.lists.Get(last); !taken {
			c.lists.Put(last, sl)
		}
		c.mu.Unlock()
	}
	return b
}

// entry returns ev's entry, rendered once: its one-event list without
// the brackets.
func (c *renderCache) entry(ev *forewarn.Event) []byte {
	b := c.single(ev)
	return b[2 : len(b)-2 : len(b)-2]
}

// single returns the list of ev alone, rendered once. An event of one
// VM is shown by that VM alone, so it is rendered without the cache:
// looking it up and keeping it (a weak pointer each) cost more than the
// rendering, and a fleet-wide event is 100,000 of them.
func (c *renderCache) single(ev *forewarn.Event) []byte {
	if len(ev.Resources) == 1 {
		// 320 bytes hold a typical entry; a long description grows it.
		return append(appendEntry(append(make([]byte, 0, 320), "[ "...), ev), " ]"...)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if b, ok := c.alone.Get(ev); ok {
		return b
	}
	c.buf = append(appendEntry(append(c.buf[:0], "[ "...), ev), " ]"...)
	b := bytes.Clone(c.buf)
	c.alone.Put(ev, b)
	return b
}

// appendEntry appends ev in EC2's own layout: two-space fields with
// " : ".
func appendEntry(b []byte, ev *forewarn.Event) []byte {
	e := entry(ev)
	b = append(b, "{\n"...)
	for j, f := range [...][2]string{{"NotBefore", e.NotBefore}, {"Code", e.Code}, {"Description", e.Description},
		{"EventId", e.EventID}, {"NotAfter", e.NotAfter}, {"NotBeforeDeadline", e.NotBeforeDeadline}, {"State", e.State}} {
		if f[1] == "" {
			continue
		}
		if j > 0 {
			b = append(b, ",\n"...)
		}
		b = appendField(b, f[0], f[1])
	}
	return append(b, "\n}"...)
}

// appendField appends a field of EC2's layout, `  "name" : value`, with
// value as a JSON string; name needs no escaping.
func appendField(b []byte, name, value string) []byte {
	b = append(append(append(b, `  "`...), name...), `" : `...)
	return jsonstr.AppendHTML(b, value)
}

// eventList returns the EC2 scheduled events of evs that keep keeps as
// a list that renders as a JSON array, earliest NotBefore first, in
// EC2's layout ("[ {...}, {...} ]"); [] when there are none.
func eventList(evs []*forewarn.Event, keep func(*forewarn.Event) bool, cache *renderCache) *list {
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
		return none
	case sel == nil:
		return &list{one: one, cache: cache}
	}
	sel = append(sel, one)
	slices.SortStableFunc(sel, func(a, b *forewarn.Event) int {
		if c := windowStart(a).Compare(windowStart(b)); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return &list{evs: sel, cache: cache}
}

// render builds the doc of v's VM, whose definition is df: its event
// keys, from the renderings in cache where another VM shows the same
// event versions. It builds none of df's static answers.
func render(v *engine.View, df *def, cache *renderCache) *doc {
	d := &doc{def: df, gone: v.Deleted}
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
	if vm.AutoScalingGroup != "" {
		d.flags |= inGroup
	}
	if d.instanceAction != nil {
		d.flags |= hasAction
	}
	if d.termination != nil {
		d.flags |= hasTermination
	}
	if d.rebalance != nil {
		d.flags |= hasRebalance
	}
	return d
}

// see marks the events that answer b, read from d, shows.
func (d *doc) see(h *history.History, w http.ResponseWriter, b []byte) {
	switch {
	case same(b, d.scheduled.rendered()):
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

// lsTerminated is target-lifecycle-state once a scale-in began.
var lsTerminated = []byte("Terminated")

// listing renders a directory's names, one per line, without a final
// newline, as EC2 does.
func listing(names []string) []byte { return []byte(strings.Join(names, "\n")) }

// Package azure speaks the Azure Instance Metadata Service wire for
// Scheduled Events: the api-version table, the JSON documents each
// version renders, the HTTP handler VMs call, and its companion calls
// (compute/name, instance, versions).
//
// Documents are rendered once per change of a VM's view, for every
// api-version, and served from an atomic pointer: a GET picks bytes and
// writes them.
package azure

import (
	"encoding/binary"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/history"
	"github.com/forewarn/forewarn/internal/jsonstr"
	"github.com/forewarn/forewarn/internal/memo"
	"github.com/forewarn/forewarn/internal/weakmap"
)

// version is one Scheduled Events api-version and what it renders.
type version struct {
	name string
	// underscore prefixes IaaS resource names with "_" (the preview);
	// cloud service role instances keep their names.
	underscore  bool
	preempt     bool
	terminate   bool
	description bool
	source      bool
	duration    bool
}

// versions lists every Scheduled Events api-version, oldest first.
var versions = [nVersions]version{
	{name: "2017-03-01", underscore: true},
	{name: "2017-08-01"},
	{name: "2017-11-01", preempt: true},
	{name: "2019-01-01", preempt: true, terminate: true},
	{name: "2019-04-01", preempt: true, terminate: true, description: true},
	{name: "2019-08-01", preempt: true, terminate: true, description: true, source: true},
	{name: "2020-07-01", preempt: true, terminate: true, description: true, source: true, duration: true},
}

// nVersions is the number of Scheduled Events api-versions.
const nVersions = 7

// Versions returns the Scheduled Events api-versions, oldest first.
func Versions() []string {
	out := make([]string, len(versions))
	for i, v := range versions {
		out[i] = v.name
	}
	return out
}

// PreviewVersion is the Scheduled Events preview api-version (seed 001),
// which the GA versions replaced.
const PreviewVersion = "2017-03-01"

// VersionShows reports whether api-version v renders events of type t:
// false for Terminate before 2019-01-01, for Preempt before 2017-11-01,
// and for any type at an unknown version.
func VersionShows(v string, t forewarn.EventType) bool {
	i := versionIndex(v)
	return i >= 0 && versions[i].shows(t)
}

// CountedVersion reports whether vm's Scheduled Events requests at
// api-version v count in a finding of the client report (package
// report): at the preview, and at a version that hides an event type vm
// can get (Terminate for a scale set VM, Preempt for a Spot VM).
func CountedVersion(vm *forewarn.VM, v string) bool {
	i := versionIndex(v)
	return v == PreviewVersion || i >= 0 &&
		(vm.ScaleSet != "" && !versions[i].terminate || vm.Spot && !versions[i].preempt)
}

// versionIndex returns the index of api-version s in versions, or -1.
func versionIndex(s string) int {
	for i := range versions {
		if versions[i].name == s {
			return i
		}
	}
	return -1
}

// shows reports whether version v renders events of type t.
func (v *version) shows(t forewarn.EventType) bool {
	switch t {
	case forewarn.Preempt:
		return v.preempt
	case forewarn.Terminate:
		return v.terminate
	}
	return true
}

// notBeforeLayout is RFC 1123 with the literal GMT zone that real
// responses carry.
const notBeforeLayout = "Mon, 02 Jan 2006 15:04:05 GMT"

// FormatNotBefore renders t as a NotBefore value, "" for the zero time.
func FormatNotBefore(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(notBeforeLayout)
}

// doc is one VM's prepared document, for every version: its own head,
// the events it sees, rendered once and shared by every VM that sees
// them, and the ETag and Content-Length of each version.
type doc struct {
	vm *forewarn.VM
	// deleted marks a VM that is gone; its requests are refused.
	deleted bool
	// head is `{"DocumentIncarnation":N,"Events":[`; the body is head,
	// the parts a version shows separated by commas, and tail.
	head  []byte
	parts []*part
	*headers
}

// headers are a document's header values per version, ready to assign.
// Documents with equal values share one.
type headers struct {
	etags, clens [nVersions][]string
}

// tail closes every document.
var tail, comma = []byte("]}"), []byte(",")

// part is one event as every version renders it, shared between the
// documents of the VMs that see the event.
type part struct {
	// json is the event's object per version, nil where the version does
	// not show the event's type; versions that render alike share bytes.
	json [nVersions][]byte
	// sum is a hash of each version's json, for the documents' ETags.
	sum [nVersions]uint32
	// ref marks the event seen when a VM reads a document showing it.
	ref *history.Ref
}

// writeTo writes the body of version vi.
func (d *doc) writeTo(w io.Writer, vi int) {
	_, _ = w.Write(d.head)
	n := 0
	for _, p := range d.parts {
		if b := p.json[vi]; b != nil {
			if n > 0 {
				_, _ = w.Write(comma)
			}
			n++
			_, _ = w.Write(b)
		}
	}
	_, _ = w.Write(tail)
}

// renderer renders documents. It keeps the part of every event version
// that is still alive, and the heads and header values it made recently,
// so that one change seen by many VMs is rendered once and their
// documents share memory. It is used under the engine's lock only
// (SubscribeBatch).
type renderer struct {
	// vmNamed finds a VM in the inventory the views being rendered are
	// of (the engine's in force, which it installs before it publishes
	// them).
	vmNamed func(string) *forewarn.VM
	// parts is made on first use, and dropped by forgetParts.
	parts   *weakmap.Map[forewarn.Event, *part]
	heads   memo.Table[int64, []byte]
	headers memo.Table[string, *headers] // by ETags and lengths
}

// forgetParts drops every part rendered so far, for when a part may
// change without its event changing: a VM's CloudService decides whether
// the preview shows its name with "_". (A map in use is replaced, not
// cleared: its cleanups may be running.)
func (r *renderer) forgetParts() { r.parts = nil }

// part returns ev rendered for every version.
func (r *renderer) part(ev *forewarn.Event) *part {
	if r.parts == nil {
		r.parts = new(weakmap.Map[forewarn.Event, *part])
	}
	if p, ok := r.parts.Get(ev); ok {
		return p
	}
	p := &part{ref: history.NewRef(ev)}
	for i := range versions {
		ver := &versions[i]
		if !ver.shows(ev.Type) {
			continue
		}
		if i > 0 && p.json[i-1] != nil && versions[i-1].shape() == ver.shape() {
			p.json[i], p.sum[i] = p.json[i-1], p.sum[i-1]
			continue
		}
		p.json[i] = appendEvent(nil, ver, ev, r.vmNamed)
		p.sum[i] = fnv32a(fnvOffset, p.json[i])
	}
	r.parts.Put(ev, p)
	return p
}

// head returns the opening of a document of incarnation inc.
func (r *renderer) head(inc int64) []byte {
	return r.heads.Get(inc, func() []byte {
		h := strconv.AppendInt([]byte(`{"DocumentIncarnation":`), inc, 10)
		return append(h, `,"Events":[`...)
	})
}

// render prepares the document of view v for every version. Its cost is
// the number of events v shows, whatever their sizes, but for the events
// no VM showed before.
func (r *renderer) render(v *engine.View) *doc {
	d := &doc{vm: v.VM, deleted: v.Deleted, head: r.head(v.Incarnation), parts: make([]*part, len(v.Events))}
	for i, ev := range v.Events {
		d.parts[i] = r.part(ev)
	}
	// The ETags and lengths of every version, as one string to look the
	// shared headers up by.
	key := make([]byte, 0, nVersions*32)
	var sum [4]byte
	for vi := range versions {
		h := fnv32a(fnvOffset, d.head)
		n, size := 0, len(d.head)+len(tail)
		for _, p := range d.parts {
			if b := p.json[vi]; b != nil {
				size += len(b)
				if n > 0 {
					size += len(comma)
				}
				n++
				h = fnv32a(h, binary.BigEndian.AppendUint32(sum[:0], p.sum[vi]))
			}
		}
		key = append(strconv.AppendInt(append(key, '"'), v.Incarnation, 10), '-')
		key = appendHex8(key, h)
		key = append(strconv.AppendInt(append(key, '"', ' '), int64(size), 10), ' ')
	}
	d.headers = r.headers.Get(string(key), func() *headers {
		hs := new(headers)
		fields := strings.Fields(string(key))
		for vi := range versions {
			hs.etags[vi] = []string{fields[2*vi]}
			hs.clens[vi] = []string{fields[2*vi+1]}
		}
		return hs
	})
	return d
}

// appendHex8 appends h as 8 lower-case hex digits.
func appendHex8(b []byte, h uint32) []byte {
	const digits = "0123456789abcdef"
	for shift := 28; shift >= 0; shift -= 4 {
		b = append(b, digits[h>>uint(shift)&0xf])
	}
	return b
}

// fnvOffset starts an FNV-1a hash; fnv32a continues hash h over b.
const fnvOffset uint32 = 2166136261

func fnv32a(h uint32, b []byte) uint32 {
	for _, c := range b {
		h = (h ^ uint32(c)) * 16777619
	}
	return h
}

// shape is what of an event's object a version renders; versions with
// one shape render an event alike (they may differ in the types shown).
func (v *version) shape() [4]bool {
	return [4]bool{v.underscore, v.description, v.source, v.duration}
}

// appendDocument appends the compact JSON document of view v as version
// ver renders it, with the keys in the order real responses have. The
// server assembles the same bytes from shared parts (doc.writeTo); tests
// compare the two.
func appendDocument(b []byte, ver *version, v *engine.View, vmNamed func(string) *forewarn.VM) []byte {
	b = append(b, `{"DocumentIncarnation":`...)
	b = strconv.AppendInt(b, v.Incarnation, 10)
	b = append(b, `,"Events":[`...)
	n := 0
	for _, ev := range v.Events {
		if !ver.shows(ev.Type) {
			continue
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = appendEvent(b, ver, ev, vmNamed)
	}
	return append(b, "]}"...)
}

// appendEvent appends the JSON object of ev as version ver renders it.
func appendEvent(b []byte, ver *version, ev *forewarn.Event, vmNamed func(string) *forewarn.VM) []byte {
	b = append(b, `{"EventId":`...)
	b = jsonstr.Append(b, ev.ID)
	b = append(b, `,"EventStatus":`...)
	b = jsonstr.Append(b, string(ev.Status))
	b = append(b, `,"EventType":`...)
	b = jsonstr.Append(b, string(ev.Type))
	b = append(b, `,"ResourceType":"VirtualMachine","Resources":[`...)
	for i, r := range ev.Resources {
		if i > 0 {
			b = append(b, ',')
		}
		if ver.underscore && iaas(vmNamed, r) {
			r = "_" + r
		}
		b = jsonstr.Append(b, r)
	}
	b = append(b, `],"NotBefore":`...)
	b = jsonstr.Append(b, FormatNotBefore(ev.NotBefore))
	if ver.description {
		b = append(b, `,"Description":`...)
		b = jsonstr.Append(b, ev.Description)
	}
	if ver.source {
		b = append(b, `,"EventSource":`...)
		b = jsonstr.Append(b, string(ev.Source))
	}
	if ver.duration {
		b = append(b, `,"DurationInSeconds":`...)
		b = strconv.AppendInt(b, int64(ev.Duration), 10)
	}
	return append(b, '}')
}

// iaas reports whether the VM named name is an IaaS VM, whose name the
// 2017-03-01 preview prefixes with "_", rather than a cloud service role
// instance, which it shows as it is (seed 001: "FrontEnd_IN_0").
func iaas(vmNamed func(string) *forewarn.VM, name string) bool {
	vm := vmNamed(name)
	return vm == nil || vm.CloudService == ""
}

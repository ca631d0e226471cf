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
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
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
var versions = []version{
	{name: "2017-03-01", underscore: true},
	{name: "2017-08-01"},
	{name: "2017-11-01", preempt: true},
	{name: "2019-01-01", preempt: true, terminate: true},
	{name: "2019-04-01", preempt: true, terminate: true, description: true},
	{name: "2019-08-01", preempt: true, terminate: true, description: true, source: true},
	{name: "2020-07-01", preempt: true, terminate: true, description: true, source: true, duration: true},
}

// Versions returns the Scheduled Events api-versions, oldest first.
func Versions() []string {
	out := make([]string, len(versions))
	for i, v := range versions {
		out[i] = v.name
	}
	return out
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

// doc is one VM's prepared document: the body and ETag of every version.
type doc struct {
	vm *forewarn.VM
	// deleted marks a VM that is gone; its requests are refused.
	deleted bool
	bodies  [][]byte
	etags   [][]string // header values, ready to assign
	clens   [][]string
}

// render prepares the documents of view v for every version. fleet
// tells IaaS VMs from cloud service role instances.
func render(v *engine.View, fleet *forewarn.Fleet) *doc {
	d := &doc{vm: v.VM, deleted: v.Deleted}
	for i := range versions {
		body := appendDocument(nil, &versions[i], v, fleet)
		h := fnv.New32a()
		h.Write(body)
		etag := fmt.Sprintf(`"%d-%08x"`, v.Incarnation, h.Sum32())
		d.bodies = append(d.bodies, body)
		d.etags = append(d.etags, []string{etag})
		d.clens = append(d.clens, []string{strconv.Itoa(len(body))})
	}
	return d
}

// appendDocument appends the compact JSON document of view v as version
// ver renders it, with the keys in the order real responses have.
func appendDocument(b []byte, ver *version, v *engine.View, fleet *forewarn.Fleet) []byte {
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
		b = append(b, `{"EventId":`...)
		b = appendString(b, ev.ID)
		b = append(b, `,"EventStatus":`...)
		b = appendString(b, string(ev.Status))
		b = append(b, `,"EventType":`...)
		b = appendString(b, string(ev.Type))
		b = append(b, `,"ResourceType":"VirtualMachine","Resources":[`...)
		for i, r := range ev.Resources {
			if i > 0 {
				b = append(b, ',')
			}
			if ver.underscore && iaas(fleet, r) {
				r = "_" + r
			}
			b = appendString(b, r)
		}
		b = append(b, `],"NotBefore":`...)
		b = appendString(b, FormatNotBefore(ev.NotBefore))
		if ver.description {
			b = append(b, `,"Description":`...)
			b = appendString(b, ev.Description)
		}
		if ver.source {
			b = append(b, `,"EventSource":`...)
			b = appendString(b, string(ev.Source))
		}
		if ver.duration {
			b = append(b, `,"DurationInSeconds":`...)
			b = strconv.AppendInt(b, int64(ev.Duration), 10)
		}
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// iaas reports whether the VM named name is an IaaS VM, whose name the
// 2017-03-01 preview prefixes with "_", rather than a cloud service role
// instance, which it shows as it is (seed 001: "FrontEnd_IN_0").
func iaas(fleet *forewarn.Fleet, name string) bool {
	vm := fleet.VM(name)
	return vm == nil || vm.CloudService == ""
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}

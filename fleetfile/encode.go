package fleetfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/forewarn/forewarn"
)

// entryOf returns the fleet file entry that gives vm: the reverse of
// vmOf. Unless full, a key is left out when its value is the one Parse
// fills in without it, given the entry's other keys (zone
// us-central1-a, onHostMaintenance TERMINATE on a GPU VM, an EC2
// instance ID derived from the name); full writes every value the VM
// has, for Diff. A field that no key of vm's provider gives is written
// under the key that gives it on another provider, so that vmOf refuses
// it with the fleet file's message.
func entryOf(vm *forewarn.VM, full bool) vmEntry {
	e := vmEntry{
		Name: vm.Name, Network: vm.Network, Host: vm.Host, Provider: string(vm.Provider),
		AvailabilitySet: vm.AvailabilitySet, CloudService: vm.CloudService, ScaleSet: vm.ScaleSet,
		InstanceID: vm.InstanceID, PlacementGroup: vm.PlacementGroup,
		OnHostMaintenance: vm.OnHostMaintenance, GPU: vm.GPU, Preemptible: vm.Preemptible, SoleTenant: vm.SoleTenant,
		Zone: vm.Zone, MachineType: vm.MachineType, Project: vm.Project,
		AutoScalingGroup: vm.AutoScalingGroup, WarmPool: vm.WarmPool,
		SpotInterruptionBehavior: vm.SpotInterruptionBehavior, HTTPTokens: vm.HTTPTokens,
		AMIID: vm.AMIID, AccountID: vm.AccountID, SecurityGroups: strings.ReplaceAll(vm.SecurityGroups, "\n", ", "),
		SubnetID: vm.SubnetID, VPCID: vm.VPCID,
	}
	e.IP = ipText(vm.IP)
	if vm.UpdateDomain != 0 || full && vm.Provider == forewarn.Azure {
		e.UpdateDomain = new(vm.UpdateDomain)
	}
	if vm.HopLimit != 0 {
		e.HopLimit = new(vm.HopLimit)
	}
	// unless returns v, or "" when v is def and the entry leaves defaults out.
	unless := func(v, def string) string {
		if v == def && !full {
			return ""
		}
		return v
	}
	switch vm.Provider {
	case forewarn.AWS:
		e.InstanceID = unless(vm.InstanceID, DefaultInstanceID(vm.Name))
		e.Zone, e.AvailabilityZone = "", unless(vm.Zone, DefaultAvailabilityZone)
		e.MachineType, e.InstanceType = "", unless(vm.MachineType, DefaultInstanceType)
		behavior := ""
		if vm.Spot {
			e.Market, behavior = "spot", "terminate"
		}
		e.SpotInterruptionBehavior = unless(vm.SpotInterruptionBehavior, behavior)
		if w, ok := strings.CutPrefix(vm.WarmPool, "Warmed:"); ok && w != "" {
			e.WarmPool = w
		}
		e.HTTPTokens = unless(vm.HTTPTokens, DefaultHTTPTokens)
		if vm.HopLimit == DefaultHopLimit && !full {
			e.HopLimit = nil
		}
	case forewarn.GCE:
		if vm.Spot {
			e.ProvisioningModel = "SPOT"
		}
		migrate := "MIGRATE"
		if vm.GPU || vm.Evictable() {
			migrate = "TERMINATE"
		}
		e.OnHostMaintenance = unless(vm.OnHostMaintenance, migrate)
		e.Zone = unless(vm.Zone, DefaultZone)
		e.MachineType = unless(vm.MachineType, DefaultMachineType)
		e.Project = unless(vm.Project, DefaultProject)
	default:
		if vm.Spot {
			e.Priority = "Spot"
		}
	}
	return e
}

// scaleSetEntryOf returns the fleet file entry that gives s; unless
// full, without the keys whose value is the default.
func scaleSetEntryOf(s *forewarn.ScaleSet, full bool) scaleSetEntry {
	e := scaleSetEntry{Name: s.Name}
	if s.TerminateTimeout != forewarn.DefaultTerminateTimeout || full {
		e.TerminateNotBeforeTimeout = new(FormatISODuration(s.TerminateTimeout))
	}
	if s.DisableTerminateNotifications || full {
		e.TerminateNotifications = new(!s.DisableTerminateNotifications)
	}
	return e
}

// checkVM checks that the entry of vm, at p, gives vm: that a fleet file
// can define it. r is as for vmOf.
func checkVM(p place, vm *forewarn.VM, r *registry) error {
	var got forewarn.VM
	return checkVMInto(&got, p, vm, r)
}

// checkVMInto is checkVM with got, which it overwrites, for the VM the
// entry gives: a check of a whole fleet reuses one.
func checkVMInto(got *forewarn.VM, p place, vm *forewarn.VM, r *registry) error {
	_, err := checkedEntry(got, p, vm, r)
	return err
}

// checkedEntry returns vm's fleet file entry once it gives vm back (see
// checkVM), with got as checkVMInto uses it.
func checkedEntry(got *forewarn.VM, p place, vm *forewarn.VM, r *registry) (vmEntry, error) {
	if vm == nil {
		return vmEntry{}, forewarn.Errorf(forewarn.EINVALID, "%s: the VM is missing (nil)", p)
	}
	e := entryOf(vm, false)
	if err := vmInto(got, p, &e, r); err != nil {
		return vmEntry{}, err
	}
	if *got != *vm {
		return vmEntry{}, forewarn.Errorf(forewarn.EINVALID, "%s: no fleet file entry gives this VM: %s", p.named(vm.Name), difference(*vm, *got))
	}
	return e, nil
}

// checkScaleSet checks that the entry of s, the i-th scale set, gives s.
func checkScaleSet(i int, s *forewarn.ScaleSet, sets map[string]int) error {
	if s == nil {
		return forewarn.Errorf(forewarn.EINVALID, "scaleSets[%d]: the scale set is missing (nil)", i)
	}
	e := scaleSetEntryOf(s, false)
	got, err := scaleSetOf(i, &e, sets)
	if err != nil {
		return err
	}
	if *got != *s {
		return forewarn.Errorf(forewarn.EINVALID, "scaleSets[%d] (%s): no fleet file entry gives this scale set: %s", i, s.Name, difference(*s, *got))
	}
	return nil
}

// difference says which field of struct a its entry reads back other
// than it is, as b.
func difference(a, b any) string {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := range va.NumField() {
		x, y := va.Field(i).Interface(), vb.Field(i).Interface()
		if x != y {
			return fmt.Sprintf("its %s %s would read back as %s", va.Type().Field(i).Name, show(x), show(y))
		}
	}
	return "it would read back otherwise"
}

// show formats a field's value for difference: strings quoted.
func show(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	if s, ok := v.(forewarn.Provider); ok {
		return strconv.Quote(string(s))
	}
	return fmt.Sprint(v)
}

// Check reports whether f is a fleet a fleet file can define, as a whole:
// each VM and scale set is one an entry gives (with the fleet file's
// messages when not), no two VMs share a name, an address on one
// network (ip: any counts once per provider and network) or an EC2
// instance ID, and no two scale sets a name. A VM or scale set is named
// by its place in f, as Parse names an entry by its place in the file
// (vms[3] (web_3): ip 10.0.0.1 is already used by web_1); of two VMs
// that collide, the later is named. For every fleet Check accepts,
// Parse(Encode(f)) gives f back. It takes O(len(f.VMs)).
//
// Unlike Parse, Check accepts a fleet with no VMs: an inventory may be
// empty, a fleet file may not.
func Check(f *forewarn.Fleet) error {
	r := newRegistry(len(f.VMs))
	var got forewarn.VM
	for i, vm := range f.VMs {
		if err := checkVMInto(&got, place{index: i}, vm, r); err != nil {
			return err
		}
	}
	sets := map[string]int{}
	for i, s := range f.ScaleSets {
		if err := checkScaleSet(i, s, sets); err != nil {
			return err
		}
	}
	return nil
}

// CheckVM reports whether vm may join f, taking the place of f's VM of
// the same name if there is one: vm is a VM a fleet file entry gives,
// and no other VM of f has its address on its network or (on EC2) its
// instance ID.
// Messages name vm as ParseVM does (VM "web_3": ip 10.0.0.1 is already
// used by web_1). It reads f without an index, in O(len(f.VMs)).
func CheckVM(f *forewarn.Fleet, vm *forewarn.VM) error {
	if vm == nil {
		return checkVM(alone(""), nil, nil)
	}
	p := alone(vm.Name)
	if err := checkVM(p, vm, nil); err != nil {
		return err
	}
	var sameInstance *forewarn.VM
	for _, o := range f.VMs {
		switch {
		case o == nil || o.Name == vm.Name:
		case addrKeyOf(o) == addrKeyOf(vm):
			return addrUsed(p, vm, o.Name)
		case sameInstance == nil && vm.Provider == forewarn.AWS && o.Provider == forewarn.AWS && o.InstanceID == vm.InstanceID:
			sameInstance = o
		}
	}
	if sameInstance != nil {
		return forewarn.Errorf(forewarn.EINVALID, "%s: instanceId %s is already used by %s", p, vm.InstanceID, sameInstance.Name)
	}
	return nil
}

// Encode writes f as a fleet file, the reverse of Parse: Parse of what
// it writes gives f back, and the same f always gives the same bytes. A
// key is written only where its value is not the one Parse fills in
// without it (provider excepted: it is always written), so a VM's entry
// says what was chosen for it, and a merge patch that changes one key
// (gpu: true) gets the defaults that follow from it (onHostMaintenance
// TERMINATE). Each VM and scale set takes one line, a YAML flow mapping,
// in f's order. A fleet Check refuses is refused with Check's message;
// a fleet with no VMs is written, though Parse refuses it.
func Encode(f *forewarn.Fleet) ([]byte, error) {
	// Each VM is checked as it is written, as Check would in its
	// order: one pass, and one entry a VM.
	b := make([]byte, 0, 64+96*len(f.VMs))
	if len(f.VMs) == 0 {
		b = append(b, "vms: []\n"...)
	} else {
		b = append(b, "vms:\n"...)
	}
	r := newRegistry(len(f.VMs))
	var got forewarn.VM
	for i, vm := range f.VMs {
		e, err := checkedEntry(&got, place{index: i}, vm, r)
		if err != nil {
			return nil, err
		}
		b = appendEntry(append(b, "  - "...), reflect.ValueOf(&e).Elem(), vmKeys)
	}
	sets := map[string]int{}
	for i, s := range f.ScaleSets {
		if err := checkScaleSet(i, s, sets); err != nil {
			return nil, err
		}
	}
	if len(f.ScaleSets) > 0 {
		b = append(b, "scaleSets:\n"...)
	}
	for _, s := range f.ScaleSets {
		e := scaleSetEntryOf(s, false)
		b = appendEntry(append(b, "  - "...), reflect.ValueOf(&e).Elem(), scaleSetKeys)
	}
	return b, nil
}

// appendEntry appends the entry v, with keys keys, as a YAML flow mapping
// and a newline; keys that are not set are left out.
func appendEntry(b []byte, v reflect.Value, keys []fieldKey) []byte {
	b = append(b, '{')
	first := true
	for _, k := range keys {
		f := v.Field(k.index)
		if f.IsZero() {
			continue
		}
		if !first {
			b = append(b, ", "...)
		}
		first = false
		b = append(append(b, k.name...), ": "...)
		if f.Kind() == reflect.Pointer {
			f = f.Elem()
		}
		switch f.Kind() {
		case reflect.String:
			b = appendScalar(b, f.String())
		case reflect.Bool:
			b = strconv.AppendBool(b, f.Bool())
		case reflect.Int:
			b = strconv.AppendInt(b, f.Int(), 10)
		}
	}
	return append(b, "}\n"...)
}

// appendScalar appends s as a YAML string: plain when that reads back as
// s and cannot be taken for another type (127.0.0.10, web_0, m5.large),
// else double-quoted ("0", "::1", "a b"). s is valid UTF-8 (checkVM
// refuses anything else), so Go's quoting is YAML's.
func appendScalar(b []byte, s string) []byte {
	if plain(s) {
		return append(b, s...)
	}
	return strconv.AppendQuote(b, s)
}

// plain reports whether s may be written as a plain YAML scalar: letters,
// digits, '_', '.' and '-' only, starting with a letter or '_' and not a
// word YAML reads as a boolean or null, or a dotted quad (an IPv4
// address).
func plain(s string) bool {
	if s == "" {
		return false
	}
	switch strings.ToLower(s) {
	case "null", "true", "false", "yes", "no", "on", "off", "y", "n":
		return false
	}
	dots, digits := 0, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '.':
			dots++
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_', c == '-' && i > 0:
		default:
			return false
		}
	}
	if c := s[0]; c >= '0' && c <= '9' || c == '.' || c == '-' {
		return dots == 3 && dots+digits == len(s)
	}
	return true
}

// EntryJSON returns vm's fleet file entry as a JSON object, with the
// keys Encode writes: the definition of one VM, for ParseVM and as the
// document a merge patch (PatchVM) applies to. A VM no entry gives is
// refused as CheckVM refuses it.
func EntryJSON(vm *forewarn.VM) ([]byte, error) {
	if vm == nil {
		return nil, checkVM(alone(""), nil, nil)
	}
	if err := checkVM(alone(vm.Name), vm, nil); err != nil {
		return nil, err
	}
	return marshal(entryOf(vm, false))
}

// marshal encodes v as JSON without escaping <, > and & and without the
// final newline.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// FormatISODuration formats d as the ISO 8601 duration
// ParseISODuration reads back exactly, such as PT5M, PT7M30.5S or
// PT1H0.000000001S; PT0S for zero. A negative d is written with a
// sign, which ParseISODuration refuses.
func FormatISODuration(d time.Duration) string {
	if d == 0 {
		return "PT0S"
	}
	b := make([]byte, 0, 32)
	u := uint64(d)
	if d < 0 {
		b = append(b, '-')
		u = -u
	}
	b = append(b, "PT"...)
	if h := u / uint64(time.Hour); h > 0 {
		b = append(strconv.AppendUint(b, h, 10), 'H')
	}
	u %= uint64(time.Hour)
	if m := u / uint64(time.Minute); m > 0 {
		b = append(strconv.AppendUint(b, m, 10), 'M')
	}
	u %= uint64(time.Minute)
	if u > 0 {
		b = strconv.AppendUint(b, u/uint64(time.Second), 10)
		if ns := u % uint64(time.Second); ns > 0 {
			frac := strconv.AppendUint(nil, ns+uint64(time.Second), 10)[1:] // nine digits
			b = append(append(b, '.'), bytes.TrimRight(frac, "0")...)
		}
		b = append(b, 'S')
	}
	return string(b)
}

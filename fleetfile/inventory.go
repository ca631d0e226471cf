package fleetfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/forewarn/forewarn"
)

// ParseVM parses the definition of the VM named name: one entry of a
// fleet file as a JSON object, such as {"ip": "127.0.0.9", "provider":
// "gce"}. It is checked as Parse checks an entry, with the defaults
// filled in, and refused with the fleet file's messages, the VM named
// as VM "name" where a file names vms[3] (name). A name key may be left
// out; if present it must be name. Rules that need the other VMs
// (addresses and instance IDs used once) are the engine's for the
// inventory (and the operator API's for one ip: any VM per provider and
// network), CheckVM's for a fleet.
func ParseVM(name string, data []byte) (*forewarn.VM, error) {
	p := alone(name)
	var e vmEntry
	if !decodeEntryJSON(data, &e) {
		e = vmEntry{}
		if err := decodeEntryYAML(p, data, &e); err != nil {
			return nil, err
		}
	}
	switch {
	case e.Name == "":
		e.Name = name
	case e.Name != name:
		return nil, forewarn.Errorf(forewarn.EINVALID, "%s: name %s does not match the VM's name %s", p, strconv.QuoteToASCII(e.Name), strconv.QuoteToASCII(name))
	}
	return vmOf(p, &e, nil)
}

// decodeEntryYAML decodes data, a JSON object, into e with the YAML
// decoder, which refuses what the fleet file refuses with its messages,
// those prefixed with p.
func decodeEntryYAML(p place, data []byte, e *vmEntry) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return forewarn.Errorf(forewarn.EINVALID, "%s: the definition is empty", p)
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return forewarn.Errorf(forewarn.EINVALID, "%s: the definition is not JSON: %v", p, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(e); err != nil && !errors.Is(err, io.EOF) {
		return forewarn.Errorf(forewarn.EINVALID, "%s: %s", p, yamlMessage(err))
	}
	return nil
}

// PatchVM applies patch, a JSON merge patch (RFC 7396), to vm's
// definition (EntryJSON) and parses the result as ParseVM does: the
// PATCH of one VM. The patch cannot rename the VM; null removes a key,
// which then takes its default. Refusals name the VM as ParseVM does.
func PatchVM(vm *forewarn.VM, patch []byte) (*forewarn.VM, error) {
	doc, err := EntryJSON(vm)
	if err != nil {
		return nil, err
	}
	merged, err := MergePatch(doc, patch)
	if err != nil {
		return nil, forewarn.Errorf(forewarn.EINVALID, "%s: %s", alone(vm.Name), forewarn.ErrorMessage(err))
	}
	return ParseVM(vm.Name, merged)
}

// Merge returns the fleet an apply of the fleet document doc makes of
// old: old's VMs that doc names take doc's definition, in old's order;
// the VMs doc adds follow, in doc's order; old's other VMs stay, or with
// prune go. Scale sets likewise. old and doc each pass Check (doc is
// what Parse returns); Merge refuses a VM of doc that takes the address
// or EC2 instance ID of a VM of old that stays, naming doc's VM by its
// place in doc: vms[3] (web_3): ip 10.0.0.1 is already used by web_1
// (ip 10.0.0.1 on network blue … for an address of network blue). A VM
// may take an address that the same apply frees. It takes
// O(len(old.VMs) + len(doc.VMs)) and changes neither fleet.
func Merge(old, doc *forewarn.Fleet, prune bool) (*forewarn.Fleet, error) {
	at := make(map[string]int, len(doc.VMs))
	for i, vm := range doc.VMs {
		at[vm.Name] = i
	}
	placed := make([]bool, len(doc.VMs))
	stay := &registry{addrs: make(map[addrKey]string, len(old.VMs)), instances: map[string]string{}}
	out := &forewarn.Fleet{VMs: make([]*forewarn.VM, 0, len(old.VMs)+len(doc.VMs))}
	for _, vm := range old.VMs {
		if i, ok := at[vm.Name]; ok {
			out.VMs = append(out.VMs, doc.VMs[i])
			placed[i] = true
			continue
		}
		if prune {
			continue
		}
		out.VMs = append(out.VMs, vm)
		stay.addrs[addrKeyOf(vm)] = vm.Name
		if vm.Provider == forewarn.AWS {
			stay.instances[vm.InstanceID] = vm.Name
		}
	}
	for i, vm := range doc.VMs {
		if !placed[i] {
			out.VMs = append(out.VMs, vm)
		}
	}
	if len(stay.addrs) > 0 {
		for i, vm := range doc.VMs {
			p := place{index: i, name: vm.Name}
			if err := stay.addr(p, vm); err != nil {
				return nil, err
			}
			if vm.Provider == forewarn.AWS {
				if err := stay.instance(p, vm.InstanceID); err != nil {
					return nil, err
				}
			}
		}
	}
	out.ScaleSets = mergeScaleSets(old.ScaleSets, doc.ScaleSets, prune)
	return out, nil
}

// mergeScaleSets is Merge for scale sets.
func mergeScaleSets(old, doc []*forewarn.ScaleSet, prune bool) []*forewarn.ScaleSet {
	at := make(map[string]int, len(doc))
	for i, s := range doc {
		at[s.Name] = i
	}
	placed := make([]bool, len(doc))
	var out []*forewarn.ScaleSet
	for _, s := range old {
		if i, ok := at[s.Name]; ok {
			out = append(out, doc[i])
			placed[i] = true
		} else if !prune {
			out = append(out, s)
		}
	}
	for i, s := range doc {
		if !placed[i] {
			out = append(out, s)
		}
	}
	return out
}

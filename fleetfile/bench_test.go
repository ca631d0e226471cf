package fleetfile_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"reflect"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/fleetfile"
)

// fleetOf returns a fleet of n VMs of every provider and shape: Azure
// VMs in availability sets, scale sets and alone (some Spot), Compute
// Engine VMs (some GPU or Spot) and EC2 VMs (some Spot, some in Auto
// Scaling groups).
func fleetOf(b testing.TB, n int) *forewarn.Fleet {
	var doc bytes.Buffer
	doc.WriteString("vms:\n")
	for i := range n {
		ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		switch i % 8 {
		case 0, 1:
			fmt.Fprintf(&doc, "  - {name: web_%d, ip: %s, availabilitySet: as%d, updateDomain: %d}\n", i, ip, i/100, i%5)
		case 2:
			fmt.Fprintf(&doc, "  - {name: ss%d_%d, ip: %s, scaleSet: ss%d, instanceId: \"%d\", placementGroup: pg%d}\n", i/1000, i, ip, i/1000, i, i/500)
		case 3:
			fmt.Fprintf(&doc, "  - {name: spot_%d, ip: %s, priority: Spot, zone: \"%d\"}\n", i, ip, i%3+1)
		case 4:
			fmt.Fprintf(&doc, "  - {name: gce-%d, ip: %s, provider: gce, zone: europe-west1-b, machineType: n2-standard-4}\n", i, ip)
		case 5:
			fmt.Fprintf(&doc, "  - {name: gpu-%d, ip: %s, provider: gce, gpu: true, provisioningModel: SPOT}\n", i, ip)
		case 6:
			fmt.Fprintf(&doc, "  - {name: ec2-%d, ip: %s, provider: aws, instanceType: c5.large, httpTokens: required}\n", i, ip)
		case 7:
			fmt.Fprintf(&doc, "  - {name: asg-%d, ip: %s, provider: aws, autoScalingGroup: asg%d, market: spot}\n", i, ip, i/1000)
		}
	}
	doc.WriteString("scaleSets:\n  - {name: ss0, terminateNotBeforeTimeout: PT10M}\n")
	return mustParse(b, doc.Bytes())
}

// jsonOf returns f as a JSON fleet document.
func jsonOf(b testing.TB, f *forewarn.Fleet) []byte {
	var doc bytes.Buffer
	doc.WriteString(`{"vms": [`)
	for i, vm := range f.VMs {
		def, err := fleetfile.EntryJSON(vm)
		if err != nil {
			b.Fatal(err)
		}
		if i > 0 {
			doc.WriteString(",\n  ")
		}
		doc.Write(def)
	}
	doc.WriteString(`], "scaleSets": [{"name": "ss0", "terminateNotBeforeTimeout": "PT10M"}]}`)
	return doc.Bytes()
}

// blockOf rewrites the flow mappings Encode writes, one a line, as block
// mappings: "  - {a: 1, b: 2}" as "  - a: 1\n    b: 2".
func blockOf(flow []byte) []byte {
	var out bytes.Buffer
	for line := range bytes.Lines(flow) {
		entry, ok := bytes.CutPrefix(line, []byte("  - {"))
		if !ok {
			out.Write(line)
			continue
		}
		entry = bytes.TrimSuffix(entry, []byte("}\n"))
		out.WriteString("  - ")
		out.Write(bytes.ReplaceAll(entry, []byte(", "), []byte("\n    ")))
		out.WriteByte('\n')
	}
	return out.Bytes()
}

// BenchmarkParse reads a fleet document of 1,000 to 100,000 VMs: as
// Encode writes it (yaml), in block mappings (yaml-block), both read by
// the line reader; as the YAML decoder reads them (yaml-decoder, the
// first with a "---" line, which the line reader leaves to it); and as
// JSON.
func BenchmarkParse(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		f := fleetOf(b, n)
		yaml, err := fleetfile.Encode(f)
		if err != nil {
			b.Fatal(err)
		}
		for _, doc := range []struct {
			format, path string
			data         []byte
		}{
			{"yaml", "lines", yaml},
			{"yaml-block", "lines", blockOf(yaml)},
			{"yaml-decoder", "", append([]byte("---\n"), yaml...)},
			{"json", "json", jsonOf(b, f)},
		} {
			fast, slow, path, err := fleetfile.DecodePaths(doc.data)
			if path != doc.path || err != nil || path != "" && !reflect.DeepEqual(fast, slow) {
				b.Fatalf("%s: read on the %q path (%v), or otherwise than by the YAML decoder", doc.format, path, err)
			}
			b.Run(fmt.Sprintf("%s/vms=%d", doc.format, n), func(b *testing.B) {
				b.SetBytes(int64(len(doc.data)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := fleetfile.Parse(doc.data); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkEncode writes a fleet of 100,000 VMs (GET /v1/fleet).
func BenchmarkEncode(b *testing.B) {
	f := fleetOf(b, 100000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := fleetfile.Encode(f); err != nil {
			b.Fatal(err)
		}
	}
}

// changedFleet returns a copy of f with every step-th VM changed: its
// update domain or zone, or (on EC2) its hop limit.
func changedFleet(f *forewarn.Fleet, step int) *forewarn.Fleet {
	g := &forewarn.Fleet{VMs: make([]*forewarn.VM, len(f.VMs)), ScaleSets: f.ScaleSets}
	for i, vm := range f.VMs {
		v := *vm
		if i%step == 0 {
			switch v.Provider {
			case forewarn.Azure:
				v.UpdateDomain++
			case forewarn.GCE:
				v.Zone = "us-east1-b"
			case forewarn.AWS:
				v.HopLimit = 2
			}
		}
		g.VMs[i] = &v
	}
	return g
}

// BenchmarkDiff compares fleets of 100,000 VMs, 1,000 of them changed,
// with prune.
func BenchmarkDiff(b *testing.B) {
	old := fleetOf(b, 100000)
	doc := changedFleet(old, 100)
	if d := fleetfile.Diff(old, doc, true); len(d.VMs.Changed) != 1000 || len(d.VMs.Added)+len(d.VMs.Removed) != 0 {
		b.Fatalf("%d changed, %d added, %d removed", len(d.VMs.Changed), len(d.VMs.Added), len(d.VMs.Removed))
	}
	b.ReportAllocs()
	for b.Loop() {
		fleetfile.Diff(old, doc, true)
	}
}

// BenchmarkMerge makes the fleet an apply of 100,000 VMs, 1,000 of them
// changed, makes of 100,000, with prune (every address is checked) and
// without.
func BenchmarkMerge(b *testing.B) {
	old := fleetOf(b, 100000)
	doc := changedFleet(old, 100)
	for _, prune := range []bool{false, true} {
		b.Run(fmt.Sprintf("prune=%v", prune), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := fleetfile.Merge(old, doc, prune); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCheck holds a fleet of 100,000 VMs to the fleet file's rules.
func BenchmarkCheck(b *testing.B) {
	f := fleetOf(b, 100000)
	b.ReportAllocs()
	for b.Loop() {
		if err := fleetfile.Check(f); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckVM checks one VM against a fleet of 100,000 (a PUT).
func BenchmarkCheckVM(b *testing.B) {
	f := fleetOf(b, 100000)
	vm, err := fleetfile.ParseVM("new", []byte(`{"ip": "10.200.0.1", "provider": "aws"}`))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := fleetfile.CheckVM(f, vm); err != nil {
			b.Fatal(err)
		}
	}
}

package fleetfile_test

import (
	"bytes"
	"net/netip"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/fleetfile"
)

// FuzzParse: any input either loads into a fleet that keeps the loader's
// invariants, or is refused with an EINVALID error; it never panics. A
// document read on a fast path reads as the YAML decoder reads it, and a
// fleet loaded round-trips (roundTrips). Seeds: testdata/fuzz/FuzzParse,
// the documents of TestLinesReadAlike, the fleet files of the tests and
// examples/fleet.yaml (shapes), and what Encode writes of them.
func FuzzParse(f *testing.F) {
	f.Add([]byte("vms:\n  - {name: a, ip: 127.0.0.2}\n"))
	f.Add([]byte(`{"vms": [{"name": "a", "ip": "127.0.0.2", "provider": "aws", "market": "spot"}], "scaleSets": [{"name": "s"}]}`))
	for _, c := range linesCases {
		f.Add([]byte(c.doc))
	}
	for _, doc := range shapes(f) {
		f.Add(doc)
		if enc, err := fleetfile.Encode(mustParse(f, doc)); err == nil {
			f.Add(enc)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<16 {
			return // bounded: the YAML decoder takes about 1 µs a byte
		}
		fastPathReadsAlike(t, data)
		fleet, err := fleetfile.Parse(data)
		if err != nil {
			if forewarn.ErrorCode(err) != forewarn.EINVALID || forewarn.ErrorMessage(err) == "" {
				t.Fatalf("refusal without a message: %v", err)
			}
			return
		}
		names, addrs := map[string]bool{}, map[netip.Addr]bool{}
		for _, vm := range fleet.VMs {
			if vm.Name == "" || names[vm.Name] || !vm.IP.IsValid() || addrs[vm.IP] {
				t.Fatalf("accepted a bad VM: %+v", vm)
			}
			names[vm.Name], addrs[vm.IP] = true, true
			if vm.ScaleSet != "" && vm.Name != vm.ScaleSet+"_"+vm.InstanceID {
				t.Fatalf("scale set VM %q is not named {scaleSet}_{instanceId}", vm.Name)
			}
			if vm.Provider != forewarn.Azure && vm.Provider != forewarn.GCE && vm.Provider != forewarn.AWS {
				t.Fatalf("provider %q", vm.Provider)
			}
		}
		for _, ss := range fleet.ScaleSets {
			if ss.TerminateTimeout < forewarn.MinTerminateTimeout || ss.TerminateTimeout > forewarn.MaxTerminateTimeout {
				t.Fatalf("scale set %s timeout %v", ss.Name, ss.TerminateTimeout)
			}
		}
		roundTrips(t, fleet)
	})
}

// roundTrips fails t unless f, a fleet Parse returned, passes Check,
// Parse of Encode of f gives f, Encode of that gives the same bytes, Diff
// finds nothing between them, and each VM's EntryJSON reads back as the
// VM with ParseVM (and, patched with {}, with PatchVM).
func roundTrips(t *testing.T, f *forewarn.Fleet) {
	t.Helper()
	if err := fleetfile.Check(f); err != nil {
		t.Fatalf("Check of a parsed fleet: %v", err)
	}
	enc, err := fleetfile.Encode(f)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	g, err := fleetfile.Parse(enc)
	if err != nil {
		t.Fatalf("Parse(Encode(f)): %v\n%s", err, enc)
	}
	if !reflect.DeepEqual(f.VMs, g.VMs) || !reflect.DeepEqual(f.ScaleSets, g.ScaleSets) {
		t.Fatalf("Parse(Encode(f)) differs:%s\nwant%s\n%s", dump(g), dump(f), enc)
	}
	if again, err := fleetfile.Encode(g); err != nil || !bytes.Equal(again, enc) {
		t.Fatalf("Encode again: %v\n%s\nfirst:\n%s", err, again, enc)
	}
	if d := fleetfile.Diff(f, g, true); !d.Empty() {
		t.Fatalf("Diff of the round trip: %+v", d)
	}
	for _, vm := range f.VMs {
		def, err := fleetfile.EntryJSON(vm)
		if err != nil {
			t.Fatalf("EntryJSON(%+v): %v", vm, err)
		}
		if back, err := fleetfile.ParseVM(vm.Name, def); err != nil || *back != *vm {
			t.Fatalf("ParseVM(EntryJSON) = %+v, %v\nwant %+v\n%s", back, err, vm, def)
		}
		if back, err := fleetfile.PatchVM(vm, []byte("{}")); err != nil || *back != *vm {
			t.Fatalf("PatchVM({}) = %+v, %v\nwant %+v", back, err, vm)
		}
	}
}

// fastPathReadsAlike fails t if a fast path reads data other than the
// YAML decoder does. The YAML decoder may refuse what the JSON fast path
// reads only for the JSON escapes it does not know: \/ and \u escapes
// of UTF-16 surrogates.
func fastPathReadsAlike(t *testing.T, data []byte) {
	fast, slow, path, err := fleetfile.DecodePaths(data)
	switch {
	case path == "":
	case err != nil && (path != "json" || !bytes.Contains(data, []byte(`\/`)) && !surrogate.Match(data)):
		t.Fatalf("the %s fast path read %q, which the YAML decoder refuses: %v", path, data, err)
	case err == nil && !reflect.DeepEqual(fast, slow):
		t.Fatalf("the %s fast path read %q as\n%+v\nthe YAML decoder as\n%+v", path, data, fast, slow)
	}
}

var surrogate = regexp.MustCompile(`\\u[dD][89a-fA-F]`)

// FuzzISODuration: a parsed duration is never negative, and a refusal
// says why. Seeds: testdata/fuzz/FuzzISODuration.
func FuzzISODuration(f *testing.F) {
	f.Add("PT5M")
	f.Fuzz(func(t *testing.T, s string) {
		d, err := fleetfile.ParseISODuration(s)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if d < 0 {
			t.Fatalf("%q parsed to negative %v", s, d)
		}
		if !strings.HasPrefix(s, "P") {
			t.Fatalf("%q accepted without its P", s)
		}
	})
}

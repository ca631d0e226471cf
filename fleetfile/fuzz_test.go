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
// JSON document read on the fast path reads as the YAML decoder reads
// it. Seeds: testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Add([]byte("vms:\n  - {name: a, ip: 127.0.0.2}\n"))
	f.Add([]byte(`{"vms": [{"name": "a", "ip": "127.0.0.2", "provider": "aws", "market": "spot"}], "scaleSets": [{"name": "s"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
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
	})
}

// fastPathReadsAlike fails t if the JSON fast path reads data other than
// the YAML decoder does. The YAML decoder may refuse what the fast path
// reads only for the JSON escapes it does not know: \/ and \u escapes
// of UTF-16 surrogates.
func fastPathReadsAlike(t *testing.T, data []byte) {
	fast, slow, ok, err := fleetfile.DecodePaths(data)
	switch {
	case !ok:
	case err != nil && !bytes.Contains(data, []byte(`\/`)) && !surrogate.Match(data):
		t.Fatalf("the fast path read %q, which the YAML decoder refuses: %v", data, err)
	case err == nil && !reflect.DeepEqual(fast, slow):
		t.Fatalf("the fast path read %q as\n%+v\nthe YAML decoder as\n%+v", data, fast, slow)
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

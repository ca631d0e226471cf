package server

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
)

// testFleetOf returns a fleet of azure Azure VMs and gce GCE VMs, each
// with its own address, and one VM of no address when anyAddr is set.
func testFleetOf(azure, gce int, anyAddr bool) *forewarn.Fleet {
	f := &forewarn.Fleet{}
	for i := range azure + gce {
		vm := &forewarn.VM{Name: fmt.Sprint("vm", i), Provider: forewarn.Azure,
			IP: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})}
		if i >= azure {
			vm.Provider = forewarn.GCE
		}
		f.VMs = append(f.VMs, vm)
	}
	if anyAddr {
		f.VMs = append(f.VMs, &forewarn.VM{Name: "any", Provider: forewarn.Azure})
	}
	return f
}

// TestSizeCaps: the derived caps fit the fleet's long-polls and stay a
// tenth (at least 64) below the limit on open files with both listeners
// together; the caps set in the config are kept.
func TestSizeCaps(t *testing.T) {
	def := DefaultConfig()
	noLongPollCap := def
	noLongPollCap.MaxLongPolls = 0
	set := def
	set.MaxConnsPerSource, set.MaxConns = 10, 100
	for _, c := range []struct {
		name                    string
		cfg                     Config
		fleet                   *forewarn.Fleet
		limit                   uint64
		perSource, total        int
		knowsEveryAddress       bool
		adminPerSrc, adminTotal int
	}{
		{"small fleet", def, testFleetOf(3, 2, false), 20000, 48, 5*48 + 256, false, 16, 64},
		{"small fleet, 1024 files", def, testFleetOf(3, 2, false), 1024, 48, 5*48 + 256, false, 16, 64},
		{"default fleet, 1024 files", def, testFleetOf(0, 0, true), 1024, 48, 1024 - 102 - 64, true, 16, 64},
		{"large fleet, 20000 files", def, testFleetOf(0, 1000, false), 20000, 48, 20000 - 2000 - 64, false, 16, 64},
		{"unknown limit", def, testFleetOf(0, 1000, false), 0, 48, 8192 - 819 - 64, false, 16, 64},
		{"long-polls not capped", noLongPollCap, testFleetOf(1, 1, false), 20000, 256, 2*256 + 256, false, 16, 64},
		{"addresses and a VM of none", def, testFleetOf(2, 0, true), 20000, 48, 20000 - 2000 - 64, true, 16, 64},
		{"caps set", set, testFleetOf(1, 1, false), 20000, 10, 100, false, 16, 64},
	} {
		t.Run(c.name, func(t *testing.T) {
			md, adm := sizeCaps(c.cfg, c.fleet, c.limit)
			if md.PerSource != c.perSource || md.Total != c.total || adm.PerSource != c.adminPerSrc || adm.Total != c.adminTotal {
				t.Errorf("metadata %d per source, %d in all; operator %d, %d; want %d, %d; %d, %d",
					md.PerSource, md.Total, adm.PerSource, adm.Total, c.perSource, c.total, c.adminPerSrc, c.adminTotal)
			}
			if md.StrangerPerSource != strangerConnsPerSource || md.StrangerTotal != defaultStrangerConns {
				t.Errorf("strangers: %d each, %d together", md.StrangerPerSource, md.StrangerTotal)
			}
			if c.limit > 0 && c.cfg.MaxConns == 0 && c.limit-uint64(md.Total+adm.Total) < max(64, c.limit/10) {
				t.Errorf("caps %d + %d leave less than a tenth of %d open files", md.Total, adm.Total, c.limit)
			}
			if c.knowsEveryAddress != (md.Known == nil) {
				t.Fatalf("every address known: %v, want %v", md.Known == nil, c.knowsEveryAddress)
			}
			if md.Known != nil && (!md.Known(c.fleet.VMs[0].IP) || md.Known(netip.MustParseAddr("192.0.2.1"))) {
				t.Errorf("Known does not tell the fleet's addresses from others")
			}
			// On the operator listener the fleet's VMs are the strangers;
			// a VM of no address is no address's.
			if vm := c.fleet.VMs[0]; !vm.IP.IsValid() {
				if adm.Known != nil {
					t.Errorf("the operator listener takes some address for a VM's in a fleet of no addresses")
				}
			} else if adm.Known == nil || adm.Known(vm.IP) || !adm.Known(netip.MustParseAddr("127.0.0.1")) {
				t.Errorf("the operator listener does not take the fleet's VMs for strangers")
			}
			if adm.StrangerPerSource != 4 || adm.StrangerTotal != c.adminTotal/4 {
				t.Errorf("operator listener: VMs %d each, %d together; want 4, %d", adm.StrangerPerSource, adm.StrangerTotal, c.adminTotal/4)
			}
			if md.WriteTimeout != c.cfg.WriteTimeout || adm.WriteTimeout != c.cfg.WriteTimeout || c.cfg.WriteTimeout <= 0 {
				t.Errorf("write timeouts %v and %v, want %v", md.WriteTimeout, adm.WriteTimeout, c.cfg.WriteTimeout)
			}
		})
	}
}

// TestValidateConns: timeouts must be positive, the derived caps may be
// 0 and the others must be positive; the message names the flag.
func TestValidateConns(t *testing.T) {
	for _, c := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) {}, ""},
		{func(c *Config) { c.MaxConns, c.MaxConnsPerSource = 0, 0 }, ""},
		{func(c *Config) { c.BodyTimeout = 0 }, "--body-timeout 0s must be positive"},
		{func(c *Config) { c.HeaderTimeout = -time.Second }, "--header-timeout -1s must be positive"},
		{func(c *Config) { c.IdleTimeout = 0 }, "--idle-timeout 0s must be positive"},
		{func(c *Config) { c.WriteTimeout = 0 }, "--write-timeout 0s must be positive"},
		{func(c *Config) { c.MaxConns = -1 }, "--max-conns -1 must not be negative"},
		{func(c *Config) { c.MaxConnsPerSource = -1 }, "--max-conns-per-source -1 must not be negative"},
		{func(c *Config) { c.MaxStrangerConns = 0 }, "--max-stranger-conns 0 must be positive"},
		{func(c *Config) { c.AdminMaxConns = 0 }, "--admin-max-conns 0 must be positive"},
		{func(c *Config) { c.AdminMaxConnsPerSource = -2 }, "--admin-max-conns-per-source -2 must be positive"},
	} {
		cfg := DefaultConfig()
		c.set(&cfg)
		err := cfg.validateConns()
		if got := forewarn.ErrorMessage(err); c.want == "" && err != nil || c.want != "" && !strings.HasPrefix(got, c.want) {
			t.Errorf("validateConns() = %v, want %q", err, c.want)
		}
		if err != nil && forewarn.ErrorCode(err) != forewarn.EINVALID {
			t.Errorf("validateConns() = %v, want an EINVALID error", err)
		}
	}
}

// TestCapsWarnWhenFewVMsFillTheTotal: start warns when fewer than a
// tenth of the fleet's VMs, holding a connection each, fill the
// metadata API's total, and only then.
func TestCapsWarnWhenFewVMsFillTheTotal(t *testing.T) {
	for _, c := range []struct {
		vms  int
		warn bool
	}{{1000, true}, {500, false}} {
		cfg := DefaultConfig()
		cfg.MaxConns = 50
		var out bytes.Buffer
		listenerCaps(cfg, testFleetOf(c.vms, 0, false), slog.New(slog.NewTextHandler(&out, nil)))
		if got := strings.Contains(out.String(), "below a tenth of the fleet's"); got != c.warn {
			t.Errorf("%d VMs, --max-conns 50: warned %v, want %v:\n%s", c.vms, got, c.warn, out.String())
		}
	}
}

package server

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
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

// static is an inventory that does not change.
type static struct {
	f *forewarn.Fleet
	x *forewarn.Index
}

func staticInventory(f *forewarn.Fleet) static { return static{f, forewarn.NewIndex(f)} }

func (s static) Fleet() *forewarn.Fleet { return s.f }
func (s static) Lookup(a netip.Addr, p forewarn.Provider) *forewarn.VM {
	return s.x.Lookup(a, p)
}

// TestSizeCaps: the derived caps fit the fleet's long-polls and stay a
// tenth (at least 64) below the limit on open files with both listeners
// together, whatever the fleet; the caps set in the config are kept.
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
		{"small fleet", def, testFleetOf(3, 2, false), 20000, 48, 20000 - 2000 - 64, false, 16, 64},
		{"small fleet, 1024 files", def, testFleetOf(3, 2, false), 1024, 48, 1024 - 102 - 64, false, 16, 64},
		{"default fleet, 1024 files", def, testFleetOf(0, 0, true), 1024, 48, 1024 - 102 - 64, true, 16, 64},
		{"large fleet, 20000 files", def, testFleetOf(0, 1000, false), 20000, 48, 20000 - 2000 - 64, false, 16, 64},
		{"unknown limit", def, testFleetOf(0, 1000, false), 0, 48, 8192 - 819 - 64, false, 16, 64},
		{"long-polls not capped", noLongPollCap, testFleetOf(1, 1, false), 20000, 256, 20000 - 2000 - 64, false, 16, 64},
		{"addresses and a VM of none", def, testFleetOf(2, 0, true), 20000, 48, 20000 - 2000 - 64, true, 16, 64},
		{"no VM", def, testFleetOf(0, 0, false), 20000, 48, 20000 - 2000 - 64, false, 16, 64},
		{"caps set", set, testFleetOf(1, 1, false), 20000, 10, 100, false, 16, 64},
	} {
		t.Run(c.name, func(t *testing.T) {
			md, adm := sizeCaps(c.cfg, staticInventory(c.fleet), c.limit)
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
			stranger := netip.MustParseAddr("192.0.2.1")
			if got := md.Known(stranger); got != c.knowsEveryAddress {
				t.Errorf("an address of no VM is known: %v, want %v", got, c.knowsEveryAddress)
			}
			if len(c.fleet.VMs) > 0 && !md.Known(c.fleet.VMs[0].IP) {
				t.Errorf("the metadata listener takes a VM for a stranger")
			}
			// On the operator listener the fleet's VMs are the strangers;
			// a VM of no address is no address's.
			if !adm.Known(stranger) || !adm.Known(netip.MustParseAddr("127.0.0.1")) {
				t.Errorf("the operator listener takes an address of no VM for a VM's")
			}
			if len(c.fleet.VMs) > 0 && c.fleet.VMs[0].IP.IsValid() && adm.Known(c.fleet.VMs[0].IP) {
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

// TestCapsFollowTheInventory: which addresses each listener takes for
// the fleet's follows the engine's inventory as it changes, and the
// caps, sized at start, hold no less room for a VM added after.
func TestCapsFollowTheInventory(t *testing.T) {
	ctx := t.Context()
	eng, err := engine.New(ctx, engine.Config{Store: mem.New(), Fleet: testFleetOf(2, 0, false)})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	md, adm := sizeCaps(DefaultConfig(), eng, 20000)
	late := netip.MustParseAddr("10.0.9.9")
	check := func(when string, vm bool, anyAddr bool) {
		t.Helper()
		if got, every := md.Known(late), md.Known(netip.MustParseAddr("192.0.2.1")); got != vm || every != anyAddr {
			t.Errorf("%s: the metadata listener knows %s: %v, want %v; knows every address %v, want %v",
				when, late, got, vm, every, anyAddr)
		}
		if got := adm.Known(late); got == vm {
			t.Errorf("%s: the operator listener takes %s for a stranger: %v, want %v", when, late, !got, vm)
		}
	}
	check("at start", false, false)
	change := func(c engine.InventoryChange) {
		t.Helper()
		if _, err := eng.ChangeInventory(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	change(engine.InventoryChange{Set: []*forewarn.VM{{Name: "late", Provider: forewarn.GCE, IP: late}}})
	check("added", true, false)
	change(engine.InventoryChange{Set: []*forewarn.VM{{Name: "any", Provider: forewarn.AWS}}})
	check("with a VM of no address", true, true)
	change(engine.InventoryChange{Remove: []string{"late", "any"}})
	check("removed", false, false)
	if md2, _ := sizeCaps(DefaultConfig(), eng, 20000); md2.Total != md.Total || md.Total != 20000-2000-64 {
		t.Errorf("total %d at start, %d after the changes; want %d both", md.Total, md2.Total, 20000-2000-64)
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

// TestCapsWarnWhenFewVMsFillTheTotal: the server warns when fewer than
// a tenth of the fleet's VMs, holding a connection each, fill the
// metadata API's total, and when its GCE VMs' long-polls do not fit it:
// at start and as the inventory grows, once per time it comes about.
func TestCapsWarnWhenFewVMsFillTheTotal(t *testing.T) {
	var out bytes.Buffer
	w := &capsWarner{maxLongPolls: 32, total: 50, log: slog.New(slog.NewTextHandler(&out, nil))}
	for _, c := range []struct {
		fleet          *forewarn.Fleet
		few, longPolls bool
	}{
		{testFleetOf(500, 0, false), false, false},
		{testFleetOf(1000, 0, false), true, false},
		{testFleetOf(1100, 0, false), false, false}, // warned already
		{testFleetOf(1000, 0, true), false, false},  // a VM of no address: every caller is the fleet's
		{testFleetOf(1000, 0, false), true, false},  // again
		{testFleetOf(1, 1, false), false, false},
		{testFleetOf(1, 2, false), false, true}, // 64 long-polls over 50
	} {
		out.Reset()
		checkFleet(w, c.fleet)
		if got := strings.Contains(out.String(), "below a tenth of the fleet's"); got != c.few {
			t.Errorf("%d VMs, --max-conns 50: warned of few VMs %v, want %v:\n%s", len(c.fleet.VMs), got, c.few, out.String())
		}
		if got := strings.Contains(out.String(), "long-polls (--max-long-polls 32 each)"); got != c.longPolls {
			t.Errorf("%d VMs, --max-conns 50: warned of long-polls %v, want %v:\n%s", len(c.fleet.VMs), got, c.longPolls, out.String())
		}
	}
}

// records is a slog handler that hands each record's message over.
type records chan string

func (r records) Enabled(context.Context, slog.Level) bool { return true }
func (r records) Handle(_ context.Context, rec slog.Record) error {
	r <- rec.Message
	return nil
}
func (r records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r records) WithGroup(string) slog.Handler      { return r }

// TestCapsWarnAsTheInventoryGrows: a server whose inventory grows past
// ten times --max-conns at run time warns then.
func TestCapsWarnAsTheInventoryGrows(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	eng, err := engine.New(ctx, engine.Config{Store: mem.New(), Fleet: testFleetOf(5, 0, false)})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	logged := make(records, 16)
	w := &capsWarner{maxLongPolls: 32, total: 50, log: slog.New(logged)}
	f := eng.Fleet()
	checkFleet(w, f)
	done := make(chan struct{})
	go func() { defer close(done); w.follow(ctx, eng, eng.InventoryRevision()) }()
	if _, err := eng.ChangeInventory(ctx, engine.InventoryChange{Set: testFleetOf(600, 0, false).VMs}); err != nil {
		t.Fatal(err)
	}
	select {
	case msg := <-logged:
		if !strings.Contains(msg, "--max-conns 50 is below a tenth of the fleet's 600 VMs") {
			t.Errorf("logged %q", msg)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no warning when the inventory grew to 600 VMs")
	}
	cancel()
	<-done
}

// checkFleet has w check what f brings about, counting f as the engine
// counts its inventory.
func checkFleet(w *capsWarner, f *forewarn.Fleet) {
	anyAddr, gceVMs := false, 0
	for _, vm := range f.VMs {
		if vm.Provider == forewarn.GCE {
			gceVMs++
		}
		if !vm.IP.IsValid() {
			anyAddr = true
		}
	}
	w.checkCounts(len(f.VMs), gceVMs, anyAddr)
}

package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/internal/connlimit"
)

// What keeps a caller, of the fleet or not, from holding the server's
// file descriptors, memory and goroutines: caps on open connections per
// source address and in total on each listener, shared out fairly once
// the total is reached (see package connlimit), deadlines on every part
// of a request the server reads, and a bound on how long each 64 KiB of
// an answer may take.

// Defaults of the connection flags that are not derived at start.
const (
	defaultHeaderTimeout    = 5 * time.Second
	defaultBodyTimeout      = 5 * time.Second
	defaultIdleTimeout      = time.Minute
	defaultWriteTimeout     = 10 * time.Second
	defaultStrangerConns    = 256
	defaultAdminConnsPerSrc = 16
	defaultAdminConns       = 64
)

// connsBesideLongPolls is what a VM may hold besides its long-polls: the
// derived per-source cap is --max-long-polls plus this.
const connsBesideLongPolls = 16

// connsPerSourceUncapped is the derived per-source cap when long-polls
// are not capped (--max-long-polls 0).
const connsPerSourceUncapped = 256

// strangerConnsPerSource caps the open connections of one address of no
// VM: it is only ever answered 403.
const strangerConnsPerSource = 4

// On the operator listener a fleet VM's address is a stranger: VMs are
// never operators (without a token the operator API answers them 403).
// Each may hold adminVMConnsPerSource connections, and together they
// hold at most a quarter of --admin-max-conns; when the total is
// reached, an operator's new connection takes the place of a VM's.
const (
	adminVMConnsPerSource = 4
	adminVMConnsShare     = 4 // the VMs' share is 1/adminVMConnsShare of the total
)

// fairShareFraction: the metadata API's total should let this fraction
// of the fleet's VMs hold a connection each, so that fewer VMs cannot
// keep another from connecting at all; the server warns when it does not
// (see capsWarner).
const fairShareFraction = 10

// maxHeaderBytes caps a request's headers on both listeners; real
// requests carry a few hundred bytes.
const maxHeaderBytes = 64 << 10

// unknownFileLimit stands for the limit on open files where the system
// has none to read.
const unknownFileLimit = 8192

// refusal is what a connection over a cap is sent before it is closed.
var refusal = []byte("HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\n" +
	"Content-Type: text/plain; charset=utf-8\r\nContent-Length: 26\r\n\r\ntoo many open connections\n")

// inventory is what the connection caps read of the engine, at each
// use and without a lock: the VM of a source address.
type inventory interface {
	Lookup(netip.Addr, forewarn.Provider) *forewarn.VM
}

// listenerCaps raises the limit on open files to its hard limit, derives
// the caps cfg leaves at 0 from it, logs the caps (warning when they do
// not fit the limit or a VM's long-polls), and returns the caps of the
// metadata and operator listeners, which tell the inventory's VMs from
// strangers as inv has them at each connection.
func listenerCaps(cfg Config, inv inventory, log *slog.Logger) (md, adm connlimit.Config) {
	limit, err := raiseFileLimit()
	if err != nil && limit > 0 {
		log.Warn("could not raise the limit on open files", "limit", limit, "err", err)
	}
	md, adm = sizeCaps(cfg, inv, limit)
	md.Refusal, md.Logger = refusal, log
	adm.Refusal, adm.Logger = refusal, log

	log.Info("connection caps", "open_files_limit", limit,
		"metadata_per_source", md.PerSource, "metadata_total", md.Total, "metadata_strangers", md.StrangerTotal,
		"operator_per_source", adm.PerSource, "operator_total", adm.Total,
		"operator_per_vm", adm.StrangerPerSource, "operator_vms", adm.StrangerTotal)
	if limit > 0 && uint64(md.Total+adm.Total) > limit {
		log.Warn("the connection caps exceed the limit on open files: a flood of connections can use up the file descriptors and stall both APIs; lower --max-conns or raise the limit (ulimit -n)",
			"caps", md.Total+adm.Total, "open_files_limit", limit)
	}
	if cfg.MaxLongPolls > 0 && md.PerSource <= cfg.MaxLongPolls {
		log.Warn("--max-conns-per-source leaves a VM holding its --max-long-polls long-polls no connection for anything else",
			"max_conns_per_source", md.PerSource, "max_long_polls", cfg.MaxLongPolls)
	}
	return md, adm
}

// sizeCaps returns the caps of the metadata and operator listeners
// under a limit on open files (0: unknown): those cfg sets and, for those
// it leaves at 0, the ones derived from the limit. No cap depends on the
// fleet, which changes: a VM added at run time finds the room the others
// found. Which addresses are the fleet's is asked of inv at each
// connection.
func sizeCaps(cfg Config, inv inventory, limit uint64) (md, adm connlimit.Config) {
	perSource := cfg.MaxConnsPerSource
	if perSource == 0 {
		perSource = connsPerSourceUncapped
		if cfg.MaxLongPolls > 0 {
			perSource = cfg.MaxLongPolls + connsBesideLongPolls
		}
	}
	total := cfg.MaxConns
	if total == 0 {
		// All the file descriptors the operator API and the headroom
		// leave. The fleet's VMs are held to perSource each and the
		// strangers to their own total: a total sized to the fleet at
		// start would only hold back the VMs added after.
		total = max(fileBudget(limit)-cfg.AdminMaxConns, 1)
	}
	md = connlimit.Config{Name: "metadata", PerSource: perSource, Total: total,
		StrangerPerSource: min(strangerConnsPerSource, cfg.MaxStrangerConns), StrangerTotal: cfg.MaxStrangerConns,
		WriteTimeout: cfg.WriteTimeout, Known: fleetCaller(inv)}
	// On the operator listener the fleet's VMs are the strangers, with a
	// token or without, and whatever VMs of no address there are.
	adm = connlimit.Config{Name: "operator", PerSource: cfg.AdminMaxConnsPerSource, Total: cfg.AdminMaxConns,
		StrangerPerSource: min(adminVMConnsPerSource, cfg.AdminMaxConnsPerSource),
		StrangerTotal:     max(cfg.AdminMaxConns/adminVMConnsShare, 1),
		WriteTimeout:      cfg.WriteTimeout,
		Known:             func(a netip.Addr) bool { return !vmAddress(inv, a) }}
	return md, adm
}

// fleetCaller returns the metadata listener's Known: whether a caller
// at an address is answered as a VM of the inventory in force, by its
// address or, for any address, by a VM of no address.
func fleetCaller(inv inventory) func(netip.Addr) bool {
	return func(a netip.Addr) bool {
		for _, p := range [...]forewarn.Provider{forewarn.Azure, forewarn.GCE, forewarn.AWS} {
			if inv.Lookup(a, p) != nil {
				return true
			}
		}
		return false
	}
}

// vmAddress reports whether a is the address of a VM of the inventory
// in force. A VM of no address, which answers every caller, makes no
// address a VM's.
func vmAddress(inv inventory, a netip.Addr) bool {
	vm := inv.Lookup(a, "")
	return vm != nil && vm.IP.IsValid()
}

// capsWarner warns when the metadata API's total does not fit the
// fleet: below a tenth of its VMs (unless a VM of no address makes every
// caller the fleet's), so that that few VMs holding a connection each
// could keep every other from connecting; or below the long-polls its
// GCE VMs may hold. It checks the fleet at start and each fleet an
// inventory change makes, and warns again only once a cause it warned of
// has cleared and come back.
type capsWarner struct {
	maxLongPolls, total int
	log                 *slog.Logger
	// fewVMs and longPolls report the causes warned of, and still so.
	fewVMs, longPolls bool
}

// checkCounts warns of what a fleet of vms VMs brings about, gce of them
// Compute Engine VMs, one of no address when anyAddr.
func (w *capsWarner) checkCounts(vms, gceVMs int, anyAddr bool) {
	few := !anyAddr && w.total < vms/fairShareFraction
	if few && !w.fewVMs {
		w.log.Warn(fmt.Sprintf("--max-conns %d is below a tenth of the fleet's %d VMs: %d VMs holding one connection each would keep every other VM from connecting; raise it and the limit on open files", w.total, vms, w.total))
	}
	held := gceVMs * w.maxLongPolls
	over := held > w.total
	if over && !w.longPolls {
		w.log.Warn(fmt.Sprintf("the fleet's GCE VMs may hold %d long-polls (--max-long-polls %d each), more than the %d connections --max-conns allows; raise it and the limit on open files", held, w.maxLongPolls, w.total),
			"gce_vms", gceVMs)
	}
	w.fewVMs, w.longPolls = few, over
}

// follow checks each fleet eng's inventory changes to, until ctx ends.
func (w *capsWarner) follow(ctx context.Context, eng *engine.Engine, checked int64) {
	for {
		adv := eng.Advanced()
		if rev := eng.InventoryRevision(); rev != checked {
			w.checkCounts(eng.FleetCounts()) // counted by the engine: no walk of the fleet
			checked = rev
		}
		select {
		case <-ctx.Done():
			return
		case <-adv:
		}
	}
}

// fileBudget is how many connections both listeners together may hold
// under a limit on open files, leaving a tenth of it (at least 64) for
// the store, the audit log, the listeners and the runtime.
func fileBudget(limit uint64) int {
	if limit == 0 {
		limit = unknownFileLimit
	}
	limit = min(limit, 1<<24) // "unlimited" is not a number to size by
	headroom := max(min(64, limit/2), limit/10)
	return int(limit - headroom)
}

// httpServer returns the http.Server of one listener: h with the
// configured deadlines on reading requests and idle connections (the
// write timeout is the listener's), telling ln which connections are
// idle.
func httpServer(cfg Config, h http.Handler, ln *connlimit.Listener) *http.Server {
	return &http.Server{
		Handler:           connlimit.BodyTimeout(h, cfg.BodyTimeout),
		ReadHeaderTimeout: cfg.HeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnState:         ln.ConnState,
	}
}

// validateConns reports whether the connection settings of c are usable.
func (c *Config) validateConns() error {
	for _, d := range []struct {
		flag string
		d    time.Duration
	}{{"--header-timeout", c.HeaderTimeout}, {"--body-timeout", c.BodyTimeout}, {"--idle-timeout", c.IdleTimeout},
		{"--write-timeout", c.WriteTimeout}} {
		if d.d <= 0 {
			return forewarn.Errorf(forewarn.EINVALID, "%s %s must be positive", d.flag, d.d)
		}
	}
	for _, n := range []struct {
		flag     string
		n        int
		positive bool
	}{
		{"--max-conns-per-source", c.MaxConnsPerSource, false},
		{"--max-conns", c.MaxConns, false},
		{"--max-stranger-conns", c.MaxStrangerConns, true},
		{"--admin-max-conns-per-source", c.AdminMaxConnsPerSource, true},
		{"--admin-max-conns", c.AdminMaxConns, true},
	} {
		switch {
		case n.positive && n.n <= 0:
			return forewarn.Errorf(forewarn.EINVALID, "%s %d must be positive", n.flag, n.n)
		case n.n < 0:
			return forewarn.Errorf(forewarn.EINVALID, "%s %d must not be negative (0: derived at start)", n.flag, n.n)
		}
	}
	return nil
}

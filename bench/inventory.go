package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/fleetfile"
)

// The targets of issue 23 for a live inventory on bolt.
const (
	// ApplyTarget bounds each fleet apply: N new VMs, 1% of them
	// changed, half of them pruned.
	ApplyTarget = 3 * time.Second
	// RSSTarget bounds the server's resident growth, in bytes (200 MB),
	// for the apply of N VMs into an empty store (issue 23: "the
	// server's RSS growth under 200 MB for the 100,000"). The peak over
	// the whole run, with the second apply, the PUTs and the prune, is
	// reported beside it.
	RSSTarget = 200_000_000
	// PUTTarget bounds the p99 of a single PUT /v1/vms/{name}.
	PUTTarget = 5 * time.Millisecond
)

// inventoryPrefix is the range the VMs' addresses come from: the
// benchmarking range of RFC 2544, 198.18.0.0/15, which no host routes.
var inventoryPrefix = netip.MustParsePrefix("198.18.0.0/15")

// seedVMs is how many VMs the fleet file the server starts with has.
const seedVMs = 4

// InventoryConfig configures an inventory run: for each size N, a fresh
// 'forewarn serve' on bolt that starts with seedVMs VMs, to which the
// operator API applies N VMs, changes 1% of them, puts single VMs and
// prunes half of them.
type InventoryConfig struct {
	Sizes []int `json:"sizes"`
	// SetSize puts the VMs in availability sets of this many VMs each; 0
	// leaves them standalone, and -1 puts the whole fleet in one set.
	SetSize int `json:"setSize"`
	// PUTs is how many sequential PUT /v1/vms/{name} are measured at each
	// size, against the inventory of N VMs: every other one adds a VM (to
	// the set of a VM spread over the fleet), the others move a VM to
	// another update domain.
	PUTs int `json:"puts"`
	// Timeout bounds each operator request.
	Timeout time.Duration `json:"timeout"`
	// ProfileDir, when set, receives a CPU profile of the server during
	// each measured step, STEP-N.pprof: a profile of ProfileFor, started
	// just before the step (the harness waits for it to end). Profiling
	// slows the server a little; its run's times are not the table's.
	ProfileDir string        `json:"profileDir,omitempty"`
	ProfileFor time.Duration `json:"profileFor,omitempty"`
	// Binary is the forewarn binary that runs the servers.
	Binary string `json:"-"`
}

// InventoryReport is the result of an inventory run.
type InventoryReport struct {
	Config  InventoryConfig  `json:"config"`
	Targets InventoryTargets `json:"targets"`
	Runs    []InventoryRun   `json:"runs"`
}

// InventoryTargets are the targets each run is held to.
type InventoryTargets struct {
	Apply     time.Duration `json:"apply"`
	RSSGrowth int64         `json:"rssGrowth"`
	PUTP99    time.Duration `json:"putP99"`
}

// InventoryRun is the measurement of one fleet size on a fresh server.
type InventoryRun struct {
	VMs int `json:"vms"`
	// Apply adds the N VMs to the seedVMs the server started with;
	// Change applies the same document with 1% of the VMs in another
	// update domain; Prune applies, with prune=true, a document that
	// keeps half of the N VMs and removes the other half.
	Apply  ApplyStep `json:"apply"`
	Change ApplyStep `json:"change"`
	Prune  ApplyStep `json:"prune"`
	// PUT is the sequential single-VM PUTs, made between Change and
	// Prune, with N VMs in the inventory.
	PUT PUTStep `json:"put"`
	// RSSStart is the server's resident memory before the first apply;
	// ApplyGrowth the highest resident memory above it during the apply
	// of N (its dry run and the apply: VmHWM, reset before the step),
	// and PeakGrowth during any measured step; RSSMet whether
	// ApplyGrowth is within the target.
	RSSStart    int64 `json:"rssStart"`
	ApplyGrowth int64 `json:"applyGrowth"`
	PeakGrowth  int64 `json:"peakGrowth"`
	RSSMet      bool  `json:"rssMet"`
}

// ApplyStep is one POST /v1/fleet/apply, timed from the request until
// its answer is read (parse, diff, one commit on bolt, the inventory
// and the documents rebuilt, the diff written back).
type ApplyStep struct {
	DocBytes int `json:"docBytes"`
	// Added, Changed and Removed are what the server's answer lists.
	Added   int           `json:"added"`
	Changed int           `json:"changed"`
	Removed int           `json:"removed"`
	Time    time.Duration `json:"time"`
	Met     bool          `json:"met"`
	// ServerCPU is the server's CPU time (user and system, in the
	// kernel's 10 ms ticks) during the step: what of Time was the
	// server's work, not waiting for the disk, the other cores' load or
	// the harness.
	ServerCPU time.Duration `json:"serverCPU"`
	// DryRun is the reference: the same request with dryRun=true, made
	// just before (parse, diff and answer, no commit).
	DryRun time.Duration `json:"dryRun"`
	// Export is GET /v1/fleet just after the step, which also checks
	// that the inventory holds the VMs it should: ExportVMs.
	Export    time.Duration `json:"export"`
	ExportVMs int           `json:"exportVMs"`
	// The server's resident memory before and after the step, and its
	// high-water mark during it.
	RSSBefore int64 `json:"rssBefore"`
	RSSAfter  int64 `json:"rssAfter"`
	RSSPeak   int64 `json:"rssPeak"`
}

// PUTStep is the single-VM PUTs at one size.
type PUTStep struct {
	PUTs    int     `json:"puts"`
	Created int     `json:"created"`
	Latency Latency `json:"latency"`
	Met     bool    `json:"met"`
	// ServerCPU is the server's CPU time during the PUTs (the small
	// references included), divided by PUTs.
	ServerCPU time.Duration `json:"serverCPUPerPUT"`
	// Reference is GET /healthz on the same connection, one after each
	// PUT: a trivial operator request.
	Reference Latency `json:"reference"`
	RSSBefore int64   `json:"rssBefore"`
	RSSAfter  int64   `json:"rssAfter"`
	RSSPeak   int64   `json:"rssPeak"`
}

// Inventory measures the live inventory through the operator API of a
// 'forewarn serve' on bolt, a fresh one for each size.
func Inventory(ctx context.Context, cfg InventoryConfig) (*InventoryReport, error) {
	if len(cfg.Sizes) == 0 {
		return nil, errors.New("no fleet sizes")
	}
	if cfg.PUTs < 1 {
		return nil, fmt.Errorf("%d PUTs: want at least 1", cfg.PUTs)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Minute
	}
	if cfg.ProfileDir != "" && cfg.ProfileFor < time.Second {
		cfg.ProfileFor = 10 * time.Second
	}
	room := 1<<(32-inventoryPrefix.Bits()) - seedVMs - 2
	for _, n := range cfg.Sizes {
		if n < 2 || n+cfg.PUTs > room {
			return nil, fmt.Errorf("fleet size %d with %d PUTs: want 2 VMs or more, and at most %d VMs and PUTs together in %s", n, cfg.PUTs, room, inventoryPrefix)
		}
	}
	rep := &InventoryReport{Config: cfg, Targets: InventoryTargets{Apply: ApplyTarget, RSSGrowth: RSSTarget, PUTP99: PUTTarget}}
	for _, n := range cfg.Sizes {
		r, err := inventoryRun(ctx, cfg, n)
		if err != nil {
			return nil, fmt.Errorf("%d VMs: %w", n, err)
		}
		rep.Runs = append(rep.Runs, *r)
	}
	return rep, nil
}

// inventoryFleet is the harness's copy of what the inventory should
// hold: the N VMs, each with its update domain, and the VMs PUTs added.
type inventoryFleet struct {
	n, setSize int
	ud         []int    // each VM's update domain
	puts       []string // the set of each VM PUTs added: put000000 and up
}

func newInventoryFleet(n, setSize int) *inventoryFleet {
	f := &inventoryFleet{n: n, setSize: setSize, ud: make([]int, n)}
	for i := range f.ud {
		f.ud[i] = i % 5
	}
	return f
}

// addr returns the address of the i-th VM of the range: the N VMs come
// first, then those PUTs add, and the seed VMs last.
func addr(i int) netip.Addr {
	a := inventoryPrefix.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3]) + uint32(i) + 1
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// seedAddr returns the address of seed VM i, at the top of the range.
func seedAddr(i int) netip.Addr { return addr(1<<(32-inventoryPrefix.Bits()) - 2 - seedVMs + i) }

// set returns the availability set of the i-th of the N VMs, "" for
// none.
func (f *inventoryFleet) set(i int) string {
	switch {
	case f.setSize > 0:
		return "as" + strconv.Itoa(i/f.setSize)
	case f.setSize < 0:
		return "all"
	}
	return ""
}

// entry appends one fleet file entry as Encode writes it, one flow
// mapping a line, but for provider (azure, the default), left out.
func entry(b []byte, name string, ip netip.Addr, set string, ud int) []byte {
	b = append(b, "  - {name: "...)
	b = append(b, name...)
	b = append(b, ", ip: "...)
	b = ip.AppendTo(b)
	if set != "" {
		b = append(b, ", availabilitySet: "...)
		b = append(b, set...)
	}
	b = append(b, ", updateDomain: "...)
	b = strconv.AppendInt(b, int64(ud), 10)
	return append(b, "}\n"...)
}

func vmName(i int) string  { return fmt.Sprintf("vm%06d", i) }
func putName(i int) string { return fmt.Sprintf("put%06d", i) }

// seedFleet is the fleet file the server starts with.
func seedFleet() string {
	b := []byte("vms:\n")
	for i := range seedVMs {
		b = entry(b, "seed"+strconv.Itoa(i), seedAddr(i), "seed", i%5)
	}
	return string(b)
}

// document returns a fleet document of the first keep of the N VMs and,
// when all is set, of the seed VMs and of those PUTs added too: what
// the inventory keeps after an apply of it with prune.
func (f *inventoryFleet) document(keep int, all bool) []byte {
	b := make([]byte, 0, 80*(keep+seedVMs+len(f.puts))+8)
	b = append(b, "vms:\n"...)
	for i := range keep {
		b = entry(b, vmName(i), addr(i), f.set(i), f.ud[i])
	}
	if all {
		for i := range seedVMs {
			b = entry(b, "seed"+strconv.Itoa(i), seedAddr(i), "seed", i%5)
		}
		for i, set := range f.puts {
			b = entry(b, putName(i), addr(f.n+i), set, i%5)
		}
	}
	return b
}

// putDefinition returns the PUT body of a VM: its fleet file entry as
// JSON, without the name.
func putDefinition(ip netip.Addr, set string, ud int) []byte {
	if set == "" {
		return fmt.Appendf(nil, `{"ip":"%s","updateDomain":%d}`, ip, ud)
	}
	return fmt.Appendf(nil, `{"ip":"%s","availabilitySet":"%s","updateDomain":%d}`, ip, set, ud)
}

// invServer is the server of one size and the harness's client of it.
type invServer struct {
	*child
	n      int // the fleet size
	client *admin.Client
	hc     *http.Client
}

func inventoryRun(ctx context.Context, cfg InventoryConfig, n int) (*InventoryRun, error) {
	c, err := startForewarn(cfg.Binary, seedFleet(), "--store", "bolt")
	if err != nil {
		return nil, err
	}
	defer c.stop()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2}}
	defer hc.CloseIdleConnections()
	s := &invServer{child: c, n: n, client: admin.NewClient("http://"+c.admin, hc), hc: hc}
	f := newInventoryFleet(n, cfg.SetSize)
	r := &InventoryRun{VMs: n}
	if r.RSSStart, err = s.rss(); err != nil {
		return nil, err
	}

	// Apply: N new VMs.
	doc := f.document(n, false)
	if err := s.apply(ctx, cfg, "apply", &r.Apply, doc, false, [3]int{n, 0, 0}, n+seedVMs); err != nil {
		return nil, fmt.Errorf("apply: %w", err)
	}
	// Change: the same document, 1% of the VMs (every hundredth) in the
	// next update domain.
	changed := 0
	for i := 0; i < n; i += 100 {
		f.ud[i] = (f.ud[i] + 1) % 5
		changed++
	}
	doc = f.document(n, false)
	if err := s.apply(ctx, cfg, "change", &r.Change, doc, false, [3]int{0, changed, 0}, n+seedVMs); err != nil {
		return nil, fmt.Errorf("change: %w", err)
	}
	if err := s.puts(ctx, cfg, f, &r.PUT); err != nil {
		return nil, fmt.Errorf("PUT: %w", err)
	}
	// Prune: keep the first half, the seed VMs and those PUTs added.
	keep := n / 2
	doc = f.document(keep, true)
	if err := s.apply(ctx, cfg, "prune", &r.Prune, doc, true, [3]int{0, 0, n - keep}, keep+seedVMs+len(f.puts)); err != nil {
		return nil, fmt.Errorf("prune: %w", err)
	}
	r.ApplyGrowth = r.Apply.RSSPeak - r.RSSStart
	r.PeakGrowth = max(r.Apply.RSSPeak, r.Change.RSSPeak, r.PUT.RSSPeak, r.Prune.RSSPeak) - r.RSSStart
	r.RSSMet = r.ApplyGrowth <= RSSTarget
	return r, nil
}

// apply measures one apply of doc: a dry run of it (the reference), the
// apply itself, then an export. want is the added, changed and removed
// counts the answer must list, and vms how many VMs the export must
// hold.
func (s *invServer) apply(ctx context.Context, cfg InventoryConfig, step string, st *ApplyStep, doc []byte, prune bool, want [3]int, vms int) error {
	st.DocBytes = len(doc)
	var err error
	st.DryRun, _, err = s.applyOnce(ctx, cfg, doc, true, prune, want)
	if err != nil {
		return fmt.Errorf("dry run: %w", err)
	}
	if st.RSSBefore, err = s.resetPeak(); err != nil {
		return err
	}
	stop, err := s.profile(ctx, cfg, step)
	if err != nil {
		return err
	}
	var a *admin.Applied
	cpu0, cerr := s.cpu()
	st.Time, a, err = s.applyOnce(ctx, cfg, doc, false, prune, want)
	cpu1, cerr1 := s.cpu()
	st.ServerCPU = cpu1 - cpu0
	if perr := stop(); err == nil {
		err = perr
	}
	if err == nil {
		err = errors.Join(cerr, cerr1)
	}
	if err != nil {
		return err
	}
	st.Met = st.Time <= ApplyTarget
	st.Added, st.Changed, st.Removed = len(a.VMs.Added), len(a.VMs.Changed), len(a.VMs.Removed)
	if st.RSSAfter, st.RSSPeak, err = s.memory(); err != nil {
		return err
	}

	ectx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	t0 := time.Now()
	exported, rev, err := s.client.ExportFleet(ectx)
	st.Export = time.Since(t0)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if rev != a.Revision {
		return fmt.Errorf("export at revision %d, the apply answered %d", rev, a.Revision)
	}
	fl, err := fleetfile.Parse(exported)
	if err != nil {
		return fmt.Errorf("the export does not parse: %w", err)
	}
	if st.ExportVMs = len(fl.VMs); st.ExportVMs != vms {
		return fmt.Errorf("the export holds %d VMs, want %d", st.ExportVMs, vms)
	}
	return nil
}

// applyOnce posts doc to /v1/fleet/apply, and checks that the answer
// lists want's added, changed and removed counts.
func (s *invServer) applyOnce(ctx context.Context, cfg InventoryConfig, doc []byte, dryRun, prune bool, want [3]int) (time.Duration, *admin.Applied, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	t0 := time.Now()
	a, err := s.client.ApplyFleet(ctx, doc, dryRun, prune)
	d := time.Since(t0)
	if err != nil {
		return 0, nil, err
	}
	if got := [3]int{len(a.VMs.Added), len(a.VMs.Changed), len(a.VMs.Removed)}; got != want || a.DryRun != dryRun {
		return 0, nil, fmt.Errorf("the answer lists %d added, %d changed and %d removed (dry run %v), want %d, %d and %d",
			got[0], got[1], got[2], a.DryRun, want[0], want[1], want[2])
	}
	return d, a, nil
}

// puts measures cfg.PUTs sequential PUTs, each followed by the
// reference GET /healthz: the even ones add a VM, the odd ones move a VM
// spread over the fleet to the next update domain.
func (s *invServer) puts(ctx context.Context, cfg InventoryConfig, f *inventoryFleet, st *PUTStep) error {
	var err error
	// One unmeasured request opens the connection, and the server
	// collects the garbage of the steps before (as go test -bench does
	// before each benchmark): the PUTs are not charged for the apply and
	// export just made.
	if err := s.health(ctx, cfg); err != nil {
		return err
	}
	if err := s.collect(ctx, cfg); err != nil {
		return err
	}
	if st.RSSBefore, err = s.resetPeak(); err != nil {
		return err
	}
	stop, err := s.profile(ctx, cfg, "put")
	if err != nil {
		return err
	}
	lat := make([]time.Duration, cfg.PUTs)
	ref := make([]time.Duration, cfg.PUTs)
	cpu0, cerr := s.cpu()
	err = func() error {
		for i := range cfg.PUTs {
			add := i%2 == 0
			j := (i / 2 * f.n / max(cfg.PUTs/2, 1)) % f.n // the VM changed, or whose set is joined
			name, def := vmName(j), putDefinition(addr(j), f.set(j), (f.ud[j]+1)%5)
			k := len(f.puts)
			if add {
				name, def = putName(k), putDefinition(addr(f.n+k), f.set(j), k%5)
			}
			pctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
			t0 := time.Now()
			d, err := s.client.PutVM(pctx, name, def, 0)
			lat[i] = time.Since(t0)
			cancel()
			if err != nil {
				return fmt.Errorf("PUT %s: %w", name, err)
			}
			if d.Name != name || d.Created != add || d.Revision <= 0 {
				return fmt.Errorf("PUT %s answered %s, created %v, revision %d", name, d.Name, d.Created, d.Revision)
			}
			if add {
				f.puts = append(f.puts, f.set(j))
				st.Created++
			} else {
				f.ud[j] = (f.ud[j] + 1) % 5
			}
			t0 = time.Now()
			if err := s.health(ctx, cfg); err != nil {
				return err
			}
			ref[i] = time.Since(t0)
		}
		return nil
	}()
	cpu1, cerr1 := s.cpu()
	if perr := stop(); err == nil {
		err = errors.Join(perr, cerr, cerr1)
	}
	if err != nil {
		return err
	}
	st.ServerCPU = (cpu1 - cpu0) / time.Duration(cfg.PUTs)
	st.PUTs = cfg.PUTs
	st.Latency, st.Reference = summarize(lat), summarize(ref)
	st.Met = st.Latency.P99 <= PUTTarget
	st.RSSAfter, st.RSSPeak, err = s.memory()
	return err
}

// collect has the server run a garbage collection (a heap profile
// taken after one, on the operator listener), and waits for it.
func (s *invServer) collect(ctx context.Context, cfg InventoryConfig) error {
	return s.get(ctx, cfg, "/debug/pprof/heap?gc=1")
}

// health sends GET /healthz on the harness's client.
func (s *invServer) health(ctx context.Context, cfg InventoryConfig) error {
	return s.get(ctx, cfg, "/healthz")
}

// get sends GET path to the operator listener on the harness's client,
// reads the answer and wants 200.
func (s *invServer) get(ctx context.Context, cfg InventoryConfig, path string) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.admin+path, nil)
	if err != nil {
		return err
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return nil
}

// resetPeak resets the server's resident high-water mark and returns
// its resident size.
func (s *invServer) resetPeak() (int64, error) {
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", s.cmd.Process.Pid), []byte("5"), 0); err != nil {
		return 0, fmt.Errorf("reset the server's VmHWM: %w", err)
	}
	return s.rss()
}

// memory returns the server's resident size and its high-water mark.
func (s *invServer) memory() (rss, peak int64, err error) {
	if rss, err = s.rss(); err != nil {
		return 0, 0, err
	}
	peak, err = procMemory(s.cmd.Process.Pid, "VmHWM")
	// The kernel counts resident pages per CPU and folds them in late:
	// a high-water mark read just after the RSS can be a few pages
	// below it.
	return rss, max(peak, rss), err
}

// profile starts a CPU profile of the server for cfg.ProfileFor when
// cfg.ProfileDir is set, and returns the function that waits for it to
// end and writes it to STEP-N.pprof there.
func (s *invServer) profile(ctx context.Context, cfg InventoryConfig, step string) (wait func() error, err error) {
	if cfg.ProfileDir == "" {
		return func() error { return nil }, nil
	}
	file := filepath.Join(cfg.ProfileDir, fmt.Sprintf("%s-%d.pprof", step, s.n))
	return cpuProfile(ctx, s.hc, s.admin, cfg.ProfileFor, cfg.Timeout, file, step)
}

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/azure"
	"github.com/forewarn/forewarn/bolt"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

// StepTarget bounds the plan (CreateSession until the first host is
// Notifying) and each step's advance (HostDone until the next host is
// Notifying) of a maintenance session.
const StepTarget = time.Second

// SessionConfig configures a maintenance-session run: for each size N,
// an N-VM Azure fleet on N/VMsPerHost hosts and one session over every
// host, taken through Steps hosts as an operator's automation would.
type SessionConfig struct {
	Sizes []int `json:"sizes"`
	// VMsPerHost is how many VMs each host runs; 0 means 100.
	VMsPerHost int `json:"vmsPerHost"`
	// SetSize spreads availability sets over hosts: half of each host's
	// VMs are in sets of SetSize VMs, one VM on each of SetSize
	// consecutive hosts, and the session's budget is one VM per set
	// down at a time. 0 leaves every VM standalone and sets no budget.
	SetSize int `json:"setSize"`
	// MaxHosts is the session's MaxHosts; 0 means 1.
	MaxHosts int `json:"maxHosts"`
	// Steps is how many hosts are taken through (started, Done); 0 or
	// more than the hosts means every host.
	Steps int `json:"steps"`
	// References is how many reference rounds run, half before the
	// session and half after the steps; 0 means 10.
	References int `json:"references"`
	// Store is "bolt" (a file in a temporary directory) or "mem".
	Store string `json:"store"`
	// HeapProfile, when set, is a directory to write a heap profile to
	// after the last step of each size (heap-N.pprof).
	HeapProfile string `json:"heapProfile,omitempty"`
	// Approve starts a host's events by an approval from each of its
	// VMs (one commit each) instead of one StartAll as the operator.
	Approve bool `json:"approve"`
}

// SessionReference is what the same event work costs without a
// session, on the same engine in the same run: one round makes a
// Reboot for the VMs of one host with CreateAll (an event per scope
// group, as a session's step does), starts them with StartAll and
// completes them with CompleteAll.
type SessionReference struct {
	Rounds   int     `json:"rounds"`
	Create   Latency `json:"create"`
	Start    Latency `json:"start"`
	Complete Latency `json:"complete"`
	// Events is how many events one round made; BytesPerEvent what each
	// event kept in the live heap after its round, over the rounds
	// before the session (the engine's copy
	// and index entries, and the store's: bbolt's log of recent commits
	// for followers holds each commit's copies until it forgets them).
	Events        int     `json:"events"`
	BytesPerEvent float64 `json:"bytesPerEvent"`
	// AllocsPerRound and BytesPerRound are a round's allocations.
	AllocsPerRound float64 `json:"allocsPerRound"`
	BytesPerRound  float64 `json:"bytesPerRound"`
}

// SessionMemory is the live heap over the steps taken.
type SessionMemory struct {
	// FromStep and ToStep are the steps after which the heap was read
	// (after a collection): HeapFrom and HeapTo bytes.
	FromStep int   `json:"fromStep"`
	ToStep   int   `json:"toStep"`
	HeapFrom int64 `json:"heapFrom"`
	HeapTo   int64 `json:"heapTo"`
	// PerStep is the heap's growth per step between them; EventsPerStep
	// the events each step made, EventBytesPerStep what those cost at
	// the reference's bytes per event, and BeyondEvents the rest: the
	// growth that is not the events' own.
	PerStep           float64 `json:"perStep"`
	EventsPerStep     float64 `json:"eventsPerStep"`
	EventBytesPerStep float64 `json:"eventBytesPerStep"`
	BeyondEvents      float64 `json:"beyondEvents"`
	// RecordFrom and RecordTo are the session record's JSON size, as a
	// store writes it whole at each step; CloneFrom and CloneTo the
	// bytes of one copy of it in memory (Session.Clone: the record, its
	// hosts and its slices of names; the strings are shared), which the
	// engine makes for each step and the store for its followers.
	RecordFrom int   `json:"recordFrom"`
	RecordTo   int   `json:"recordTo"`
	CloneFrom  int64 `json:"cloneFrom"`
	CloneTo    int64 `json:"cloneTo"`
	// FileFrom and FileTo are the bbolt file's size (0 on mem).
	FileFrom int64 `json:"fileFrom"`
	FileTo   int64 `json:"fileTo"`
}

// SessionRun is the measurement of one fleet size.
type SessionRun struct {
	VMs   int `json:"vms"`
	Hosts int `json:"hosts"`
	Steps int `json:"steps"`
	// Events is how many events the session made for the hosts taken
	// through.
	Events int `json:"events"`
	// Create is CreateSession over every host until it returned; Plan
	// until the first host was Notifying (its events committed).
	Create time.Duration `json:"create"`
	Plan   time.Duration `json:"plan"`
	// Ready runs from the call that starts a host's events until the
	// host is InMaintenance. Done is the HostDone call (its commit
	// completes the host's events); Advance runs from that call until
	// the next host is Notifying (or the session Done after the last
	// host): the session loop's planning, the next host's events and
	// their commit.
	Ready   Latency `json:"ready"`
	Done    Latency `json:"done"`
	Advance Latency `json:"advance"`
	// Advances counts the steps that had an advance: every step with one
	// host at a time; with more, a step whose Done freed no host that a
	// budget allowed has none (after waiting 10 s for one).
	Advances int `json:"advances"`
	// AllocsPerStep and BytesPerStep are the process's allocations per
	// step, from starting a host's events until the next host is
	// Notifying.
	AllocsPerStep float64 `json:"allocsPerStep"`
	BytesPerStep  float64 `json:"bytesPerStep"`
	// AdvanceRatio is Advance's p50 over the reference's Complete p50
	// plus Create p50 (the same event work done by hand); ReadyRatio
	// Ready's p50 over the reference's Start p50.
	AdvanceRatio float64          `json:"advanceRatio"`
	ReadyRatio   float64          `json:"readyRatio"`
	Reference    SessionReference `json:"reference"`
	Memory       SessionMemory    `json:"memory"`
	// StepMet reports whether the plan and every advance took at most
	// StepTarget, and, one host at a time, every step had its advance;
	// MemoryMet whether the growth beyond the events' own is at most one
	// event's cost per step (1% of a step's 100).
	StepMet   bool `json:"stepMet"`
	MemoryMet bool `json:"memoryMet"`
}

// SessionReport is the result of a maintenance-session run.
type SessionReport struct {
	Config SessionConfig `json:"config"`
	Target time.Duration `json:"target"`
	Runs   []SessionRun  `json:"runs"`
}

// Session measures a maintenance session over every host of a fleet,
// for each size in turn, in this process: its plan, each step it takes
// as hosts are started and ended, and the live heap as steps go by.
func Session(ctx context.Context, cfg SessionConfig) (*SessionReport, error) {
	if len(cfg.Sizes) == 0 {
		return nil, fmt.Errorf("no fleet sizes")
	}
	if cfg.VMsPerHost == 0 {
		cfg.VMsPerHost = 100
	}
	if cfg.References == 0 {
		cfg.References = 10
	}
	cfg.MaxHosts = max(cfg.MaxHosts, 1)
	if cfg.Store == "" {
		cfg.Store = "bolt"
	}
	switch {
	case cfg.Store != "bolt" && cfg.Store != "mem":
		return nil, fmt.Errorf("store %q is not bolt or mem", cfg.Store)
	case cfg.VMsPerHost < 2 || cfg.SetSize < 0 || cfg.Steps < 0 || cfg.References < 1:
		return nil, fmt.Errorf("want at least 2 VMs per host, and no negative set size, steps or references")
	}
	rep := &SessionReport{Config: cfg, Target: StepTarget}
	for _, n := range cfg.Sizes {
		if n < 2*cfg.VMsPerHost {
			return nil, fmt.Errorf("fleet size %d is under two hosts of %d VMs", n, cfg.VMsPerHost)
		}
		r, err := sessionRun(ctx, cfg, n)
		if err != nil {
			return nil, fmt.Errorf("%d VMs: %w", n, err)
		}
		rep.Runs = append(rep.Runs, *r)
	}
	return rep, nil
}

// sessionFleet returns n Azure VMs, vph to a host, each with an
// address; with setSize, half of each host's VMs are in availability
// sets spread one VM a host over setSize consecutive hosts, in update
// domains by host.
func sessionFleet(n, vph, setSize int) *forewarn.Fleet {
	f := &forewarn.Fleet{VMs: make([]*forewarn.VM, n)}
	for i := range f.VMs {
		h, slot := i/vph, i%vph
		vm := &forewarn.VM{Name: fmt.Sprintf("vm%06d", i), Provider: forewarn.Azure, Host: hostName(h),
			IP: netip.AddrFrom4([4]byte{10, byte((i + 1) >> 16), byte((i + 1) >> 8), byte(i + 1)})}
		if setSize > 0 && slot < vph/2 {
			vm.AvailabilitySet = fmt.Sprintf("set%d-%d", h/setSize, slot)
			vm.UpdateDomain = h % setSize % 5
		}
		f.VMs[i] = vm
	}
	return f
}

func hostName(h int) string { return fmt.Sprintf("hv%05d", h) }

// hostClock records when each host of the session under measure became
// Notifying, in order, and InMaintenance, and when the session was
// Done, from the engine's transitions. Its slices are made once, so
// that it does not grow the heap with the steps it records.
type hostClock struct {
	index map[string]int
	mu    sync.Mutex
	// notified[k] is the k-th host to become Notifying, at at[k].
	notified []int
	at       []time.Time
	ready    []time.Time
	done     time.Time
	wake     chan struct{}
}

func newHostClock(hosts int) *hostClock {
	c := &hostClock{index: make(map[string]int, hosts), notified: make([]int, 0, hosts),
		at: make([]time.Time, 0, hosts), ready: make([]time.Time, hosts), wake: make(chan struct{})}
	for h := range hosts {
		c.index[hostName(h)] = h
	}
	return c
}

// note takes a commit's transitions; it runs with the engine locked.
func (c *hostClock) note(_ int64, ts []engine.Transition) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range ts {
		switch {
		case t.Kind == "session" && t.To == string(forewarn.SessionDone):
			c.done = now
		case t.Kind != "host":
		case t.To == string(forewarn.HostNotifying):
			c.notified = append(c.notified, c.index[t.ID])
			c.at = append(c.at, now)
		case t.To == string(forewarn.HostInMaintenance):
			c.ready[c.index[t.ID]] = now
		}
	}
	close(c.wake)
	c.wake = make(chan struct{})
}

// wait waits until ok, checked under c.mu, reports true, for at most
// d.
func (c *hostClock) wait(ctx context.Context, what string, d time.Duration, ok func() bool) error {
	timeout := time.NewTimer(d)
	defer timeout.Stop()
	for {
		c.mu.Lock()
		done, wake := ok(), c.wake
		c.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout.C:
			return fmt.Errorf("waited %v for %s", d, what)
		}
	}
}

// notifiedAt returns the k-th host to become Notifying, and when.
func (c *hostClock) notifiedAt(k int) (int, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.notified[k], c.at[k]
}

// count returns how many hosts have become Notifying.
func (c *hostClock) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.notified)
}

// after returns when the first host after the k first became
// Notifying, or else when the session was Done.
func (c *hostClock) after(k int) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.notified) > k {
		return c.at[k]
	}
	return c.done
}

// readyAt returns when host h became InMaintenance.
func (c *hostClock) readyAt(h int) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ready[h]
}

// liveHeap returns the live heap in bytes after two collections.
func liveHeap() int64 {
	for range 2 {
		runtime.GC()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// allocs returns the process's allocations so far: count and bytes.
func allocs() (uint64, uint64) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs, ms.TotalAlloc
}

func sessionRun(ctx context.Context, cfg SessionConfig, n int) (*SessionRun, error) {
	hosts := n / cfg.VMsPerHost
	n = hosts * cfg.VMsPerHost
	steps := hosts
	if cfg.Steps > 0 {
		steps = min(cfg.Steps, hosts)
	}
	r := &SessionRun{VMs: n, Hosts: hosts, Steps: steps}

	var store forewarn.Store = mem.New()
	path := ""
	if cfg.Store == "bolt" {
		dir, err := os.MkdirTemp("", "forewarn-bench-session")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		path = filepath.Join(dir, "forewarn.db")
		if store, err = bolt.Open(path); err != nil {
			return nil, err
		}
	}
	defer store.Close()
	f := sessionFleet(n, cfg.VMsPerHost, cfg.SetSize)
	eng, err := engine.New(ctx, engine.Config{Store: store, Fleet: f, AllowShortNotice: true})
	if err != nil {
		return nil, err
	}
	defer eng.Close()
	docs := azure.NewServer(eng, nil) // the documents a step renders anew, as a server would
	// Every VM has called its API: its events keep their notice.
	for _, vm := range f.VMs {
		eng.NoteRequest(vm.Name)
	}
	if err := settle(ctx, eng); err != nil {
		return nil, err
	}
	clock := newHostClock(hosts)
	eng.SubscribeTransitions(clock.note)

	// Half the reference rounds run before the session, whose growth
	// they measure (the store's log of recent commits has room yet, and
	// forgets nothing), and half after the steps, on the engine and heap
	// they left.
	ref := refRounds{approve: cfg.Approve}
	first := (cfg.References + 1) / 2
	if err := ref.run(ctx, eng, hosts, 0, first, true); err != nil {
		return nil, fmt.Errorf("reference: %w", err)
	}

	spec := forewarn.SessionSpec{Hosts: make([]string, hosts), MaxHosts: cfg.MaxHosts, Description: "forewarn bench session"}
	for h := range hosts {
		spec.Hosts[h] = hostName(h)
	}
	if cfg.SetSize > 0 {
		spec.MaxUnavailable = map[string]forewarn.Budget{forewarn.GroupAvailabilitySet: {Count: 1}}
	}
	t0 := time.Now()
	s, err := eng.CreateSession(ctx, spec)
	if err != nil {
		return nil, err
	}
	r.Create = time.Since(t0)
	spec = forewarn.SessionSpec{}
	if err := clock.wait(ctx, "the first host Notifying", 2*time.Minute, func() bool { return len(clock.notified) > 0 }); err != nil {
		return nil, err
	}
	_, at := clock.notifiedAt(0)
	r.Plan = at.Sub(t0)

	memFrom := min(10, steps/2)
	r.Memory.FromStep, r.Memory.ToStep = memFrom, steps
	var ready, done, advance []time.Duration
	var mallocs, bytes uint64
	eventsFrom := 0
	for k := range steps {
		if k == memFrom {
			if err := sessionMemory(eng, s.ID, path, &r.Memory.HeapFrom, &r.Memory.RecordFrom, &r.Memory.CloneFrom, &r.Memory.FileFrom); err != nil {
				return nil, err
			}
			eventsFrom = r.Events
		}
		if err := clock.wait(ctx, fmt.Sprintf("host %d Notifying", k+1), 2*time.Minute, func() bool { return len(clock.notified) > k }); err != nil {
			return nil, err
		}
		h, _ := clock.notifiedAt(k)
		ses, err := eng.Session(s.ID)
		if err != nil {
			return nil, err
		}
		ids := ses.Hosts[h].Events
		ses = nil
		r.Events += len(ids)
		m0, b0 := allocs()
		t := time.Now()
		if err := startHost(ctx, eng, ids, cfg.Approve); err != nil {
			return nil, fmt.Errorf("step %d: start %s: %w", k+1, hostName(h), err)
		}
		if err := clock.wait(ctx, hostName(h)+" InMaintenance", 2*time.Minute, func() bool { return !clock.ready[h].IsZero() }); err != nil {
			return nil, err
		}
		ready = append(ready, clock.readyAt(h).Sub(t))
		prev := clock.count()
		t = time.Now()
		if err := eng.HostDone(ctx, hostName(h)); err != nil {
			return nil, fmt.Errorf("step %d: %w", k+1, err)
		}
		done = append(done, time.Since(t))
		// The next host starts, or the session ends. With MaxHosts over
		// 1 a budget may hold every pending host until another ends:
		// that step has no advance.
		wait := 2 * time.Minute
		if cfg.MaxHosts > 1 {
			wait = 10 * time.Second
		}
		err = clock.wait(ctx, "the next host Notifying", wait, func() bool { return len(clock.notified) > prev || !clock.done.IsZero() })
		switch {
		case err == nil:
			if next := clock.after(prev); !next.IsZero() {
				advance = append(advance, next.Sub(t))
			}
		case cfg.MaxHosts == 1 || ctx.Err() != nil:
			return nil, err
		}
		m1, b1 := allocs()
		mallocs, bytes = mallocs+m1-m0, bytes+b1-b0
	}
	if err := sessionMemory(eng, s.ID, path, &r.Memory.HeapTo, &r.Memory.RecordTo, &r.Memory.CloneTo, &r.Memory.FileTo); err != nil {
		return nil, err
	}
	if cfg.HeapProfile != "" {
		if err := writeHeapProfile(cfg.HeapProfile, n); err != nil {
			return nil, err
		}
	}
	if err := ref.run(ctx, eng, hosts, first, cfg.References-first, false); err != nil {
		return nil, fmt.Errorf("reference: %w", err)
	}
	r.Reference = ref.report()
	runtime.KeepAlive(docs)

	r.Ready, r.Done, r.Advance = summarize(ready), summarize(done), summarize(advance)
	r.AllocsPerStep, r.BytesPerStep = float64(mallocs)/float64(steps), float64(bytes)/float64(steps)
	rr := r.Reference
	r.AdvanceRatio = float64(r.Advance.P50) / float64(max(rr.Complete.P50+rr.Create.P50, 1))
	r.ReadyRatio = float64(r.Ready.P50) / float64(max(rr.Start.P50, 1))
	m := &r.Memory
	if d := m.ToStep - m.FromStep; d > 0 {
		m.PerStep = float64(m.HeapTo-m.HeapFrom) / float64(d)
		m.EventsPerStep = float64(r.Events-eventsFrom) / float64(d)
		m.EventBytesPerStep = m.EventsPerStep * rr.BytesPerEvent
		m.BeyondEvents = m.PerStep - m.EventBytesPerStep
	}
	r.Advances = len(advance)
	r.StepMet = r.Plan <= StepTarget && r.Advance.Max <= StepTarget && (cfg.MaxHosts > 1 || r.Advances == r.Steps)
	r.MemoryMet = m.BeyondEvents <= rr.BytesPerEvent
	return r, nil
}

// settle waits until the store has not moved for 200 ms: the VMs'
// first calls are written in the background.
func settle(ctx context.Context, eng *engine.Engine) error {
	rev := eng.Revision()
	for still := 0; still < 4; {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if r := eng.Revision(); r != rev {
			rev, still = r, 0
			continue
		}
		still++
	}
	return nil
}

// startHost starts the events ids: with StartAll, as the operator, or
// with an approval from each VM each names.
func startHost(ctx context.Context, eng *engine.Engine, ids []string, approve bool) error {
	if !approve {
		return eng.StartAll(ctx, ids)
	}
	for _, id := range ids {
		ev, err := eng.Event(id)
		if err != nil {
			return err
		}
		for _, vm := range ev.Resources {
			if err := eng.Approve(ctx, vm, []string{id}); err != nil {
				return err
			}
		}
	}
	return nil
}

// sessionMemory reads the live heap, the session's record size in JSON
// and in memory, and the store file's size.
func sessionMemory(eng *engine.Engine, id, path string, heap *int64, record *int, clone, file *int64) error {
	s, err := eng.Session(id)
	if err != nil {
		return err
	}
	// What one copy allocates, measured: the engine makes one at each
	// step, and each store keeps copies.
	_, *clone, _ = timed(func() error { cloneSink = s.Clone(); return nil })
	js, err := json.Marshal(s)
	if err != nil {
		return err
	}
	*record = len(js)
	s, js = nil, nil
	if path != "" {
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		*file = fi.Size()
	}
	*heap = liveHeap()
	return nil
}

// writeHeapProfile writes the live heap's profile to dir/heap-N.pprof.
func writeHeapProfile(dir string, n int) error {
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("heap-%d.pprof", n)))
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// cloneSink keeps sessionMemory's copy from being optimised away.
var cloneSink *forewarn.Session

// refRounds are reference rounds, the event work of one step without a
// session, on hosts from the last one down: CreateAll of a Reboot for
// the host's VMs, StartAll, CompleteAll.
type refRounds struct {
	// approve starts the events as the session run does: each VM
	// approving its own, or StartAll.
	approve                 bool
	create, start, complete []time.Duration
	events, rounds          int
	mallocs, bytes          uint64
	// grew is the live heap's growth over the rounds measured for it,
	// which made kept events.
	grew int64
	kept int
}

// run runs rounds more rounds from round from; with heap, it measures
// the live heap's growth over them.
func (ref *refRounds) run(ctx context.Context, eng *engine.Engine, hosts, from, rounds int, heap bool) error {
	var heap0 int64
	if heap {
		heap0 = liveHeap()
	}
	m0, b0 := allocs()
	events := 0
	for i := from; i < from+rounds; i++ {
		vms, _ := eng.HostVMs(hostName(hosts - 1 - i%hosts))
		t := time.Now()
		evs, err := eng.CreateAll(ctx, engine.Spec{Type: forewarn.Reboot, VMs: vms, Description: "forewarn bench reference"})
		if err != nil {
			return err
		}
		ref.create = append(ref.create, time.Since(t))
		ids := make([]string, len(evs))
		for j, ev := range evs {
			ids[j] = ev.ID
		}
		evs = nil
		events += len(ids)
		t = time.Now()
		if err := startHost(ctx, eng, ids, ref.approve); err != nil {
			return err
		}
		ref.start = append(ref.start, time.Since(t))
		t = time.Now()
		if err := eng.CompleteAll(ctx, ids); err != nil {
			return err
		}
		ref.complete = append(ref.complete, time.Since(t))
	}
	m1, b1 := allocs()
	ref.mallocs, ref.bytes = ref.mallocs+m1-m0, ref.bytes+b1-b0
	ref.events, ref.rounds = ref.events+events, ref.rounds+rounds
	if heap {
		ref.grew, ref.kept = liveHeap()-heap0, events
	}
	return nil
}

func (ref *refRounds) report() SessionReference {
	rounds := float64(max(ref.rounds, 1))
	return SessionReference{Rounds: ref.rounds, Create: summarize(ref.create), Start: summarize(ref.start), Complete: summarize(ref.complete),
		Events: ref.events / max(ref.rounds, 1), BytesPerEvent: float64(ref.grew) / float64(max(ref.kept, 1)),
		AllocsPerRound: float64(ref.mallocs) / rounds, BytesPerRound: float64(ref.bytes) / rounds}
}

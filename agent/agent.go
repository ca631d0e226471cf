// Package agent is the Forewarn node agent as a library. It runs on a VM,
// watches the VM's maintenance notices through the Azure Scheduled Events
// API, the Compute Engine metadata server or the EC2 instance metadata
// service, runs the operator's handlers
// (commands and webhooks) for the events that concern the VM, approves
// Azure events once the handlers succeeded, and runs clean-up commands
// when an event it acted on is over.
//
// The core is provider-neutral: each metadata client is wrapped in a
// small source adapter that yields []forewarn.Notice.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/forewarn/forewarn"
)

// Providers accepted by Config.Provider.
const (
	ProviderAzure = "azure"
	ProviderGCE   = "gce"
	ProviderAWS   = "aws"
	ProviderAuto  = "auto"
)

// DefaultHandlerTimeout bounds one handler run when Config gives none.
const DefaultHandlerTimeout = 5 * time.Minute

// DefaultTypes are the types the agent acts on when Config.Types is
// empty: every type but Freeze (a pause of seconds, too short to drain
// for), UPCOMING_MAINTENANCE (a window days out, not an impact) and
// REBALANCE_RECOMMENDATION (a risk, not an interruption).
var DefaultTypes = []string{
	string(forewarn.Reboot), string(forewarn.Redeploy), string(forewarn.Preempt), string(forewarn.Terminate),
	string(forewarn.MigrateOnHostMaintenance), string(forewarn.TerminateOnHostMaintenance),
	string(forewarn.InstanceReboot), string(forewarn.SystemReboot), string(forewarn.SystemMaintenance),
	string(forewarn.InstanceRetirement), string(forewarn.InstanceStop),
}

// knownTypes are every type a Notice can carry.
var knownTypes = append(slices.Clone(DefaultTypes), string(forewarn.Freeze), forewarn.UpcomingMaintenance,
	forewarn.RebalanceRecommendation)

// Config configures an Agent.
type Config struct {
	// Provider is "azure", "gce", "aws" or "auto" (probe the endpoint).
	// Empty means auto.
	Provider string
	// Endpoint is the metadata service's base URL; empty means the
	// client's default (for gce, $GCE_METADATA_HOST is honoured; for aws,
	// $AWS_EC2_METADATA_SERVICE_ENDPOINT).
	Endpoint string
	// VM overrides this VM's name, which is otherwise read from the
	// metadata service (Azure compute/name, GCE instance/name, EC2
	// instance-id).
	VM string
	// HTTPClient talks to the metadata service; nil means the client
	// package's default. Tests pass one that dials from a VM's address.
	HTTPClient *http.Client
	// PollInterval is the Azure and EC2 polling interval; 0 means the
	// client's.
	PollInterval time.Duration

	// Exec are shell commands run with /bin/sh -c for each event, in
	// order, with the event as JSON on stdin and in FOREWARN_* variables.
	Exec []string
	// Webhooks are URLs POSTed the event as JSON, after the commands.
	Webhooks []string
	// WebhookClient posts to the webhooks; nil means a plain client.
	WebhookClient *http.Client
	// OnClear are shell commands run when an event the agent acted on
	// disappears, with the same input as Exec.
	OnClear []string

	// Types are the event types to act on, matched without regard to
	// case; empty means DefaultTypes.
	Types []string
	// Lead runs the handlers Lead before NotBefore rather than at once.
	Lead time.Duration
	// HandlerTimeout bounds each handler run; 0 means
	// DefaultHandlerTimeout.
	HandlerTimeout time.Duration
	// Approve approves an Azure event once all its handlers succeeded.
	// Compute Engine and EC2 have no approval: it does nothing there.
	Approve bool
	// StateFile, when set, remembers handled events across restarts.
	StateFile string
	// DryRun logs the handlers and approvals instead of running them.
	DryRun bool

	// Logger receives the agent's logs; nil discards them.
	Logger *slog.Logger
}

// Validate reports whether c is usable.
func (c *Config) Validate() error {
	switch c.Provider {
	case "", ProviderAuto, ProviderAzure, ProviderGCE, ProviderAWS:
	default:
		return fmt.Errorf("--provider %q: want azure, gce, aws or auto", c.Provider)
	}
	if c.Endpoint != "" {
		if !strings.HasPrefix(c.Endpoint, "http://") && !strings.HasPrefix(c.Endpoint, "https://") {
			return fmt.Errorf("--endpoint %q: want an http:// or https:// URL", c.Endpoint)
		}
	}
	for _, t := range c.Types {
		if canonicalType(t) == "" {
			return fmt.Errorf("--types: unknown event type %q (want some of %s)", t, strings.Join(knownTypes, ", "))
		}
	}
	if c.Lead < 0 {
		return fmt.Errorf("--lead %s must not be negative", c.Lead)
	}
	if c.HandlerTimeout < 0 {
		return fmt.Errorf("--handler-timeout %s must not be negative", c.HandlerTimeout)
	}
	if c.PollInterval < 0 {
		return fmt.Errorf("--poll-interval %s must not be negative", c.PollInterval)
	}
	for _, cmd := range slices.Concat(c.Exec, c.OnClear) {
		if strings.TrimSpace(cmd) == "" {
			return errors.New("--exec and --on-clear need a command")
		}
	}
	for _, u := range c.Webhooks {
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return fmt.Errorf("--webhook %q: want an http:// or https:// URL", u)
		}
	}
	return nil
}

// canonicalType returns the known type name equal to t without regard to
// case, or "".
func canonicalType(t string) string {
	for _, k := range knownTypes {
		if strings.EqualFold(k, strings.TrimSpace(t)) {
			return k
		}
	}
	return ""
}

// Agent watches one VM's notices and acts on them. Create it with New.
type Agent struct {
	cfg     Config
	log     *slog.Logger
	types   map[string]bool
	metrics *metrics
	webhook *http.Client
	state   *stateFile // nil without Config.StateFile
	ready   atomic.Bool

	// src and self are set once by Run before watching.
	src  source
	self string

	running atomic.Bool    // Run was called
	wg      sync.WaitGroup // handling and clearing goroutines

	mu      sync.Mutex
	tracked map[string]*tracked // by notice ID
}

// tracked is one event the agent knows of. Its fields are guarded by
// Agent.mu, except done, which the handling goroutine closes.
type tracked struct {
	notice forewarn.Notice
	// seen reports whether the event was in a document this run.
	seen bool
	// ignored: the type is not one the agent acts on.
	ignored bool
	// acted reports whether the handlers ran (to the end, success or
	// not), or the state file says they ran before a restart.
	acted  bool
	record *record // the state file's entry, once acted
	// wake is signalled when notice changes, to re-plan a lead wait.
	wake chan struct{}
	// cancel ends the wait for the lead time.
	cancel context.CancelFunc
	// done is closed when the handling goroutine ends; nil when none.
	done chan struct{}
}

// New returns an Agent for cfg. It reads the state file, and refuses a
// corrupt one; it does not contact the metadata service (Run does).
func New(cfg Config) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Provider == "" {
		cfg.Provider = ProviderAuto
	}
	if cfg.HandlerTimeout == 0 {
		cfg.HandlerTimeout = DefaultHandlerTimeout
	}
	types := cfg.Types
	if len(types) == 0 {
		types = DefaultTypes
	}
	a := &Agent{
		cfg:     cfg,
		log:     cfg.Logger,
		types:   map[string]bool{},
		metrics: newMetrics(),
		webhook: cfg.WebhookClient,
		tracked: map[string]*tracked{},
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.webhook == nil {
		a.webhook = &http.Client{}
	}
	for _, t := range types {
		a.types[canonicalType(t)] = true
	}
	if cfg.StateFile != "" {
		st, err := loadState(cfg.StateFile)
		if err != nil {
			return nil, err
		}
		if _, err := os.Stat(cfg.StateFile); errors.Is(err, fs.ErrNotExist) && !cfg.DryRun {
			// Write the empty state now: a directory the agent cannot
			// write to stops the start, not the first handled event.
			if err := st.save(&a.mu); err != nil {
				return nil, fmt.Errorf("state file %s: %w", cfg.StateFile, err)
			}
		}
		a.state = st
		for id, r := range st.records() {
			a.tracked[id] = &tracked{notice: r.Notice, acted: true, record: r}
		}
	}
	return a, nil
}

// Handler serves GET /healthz (200 "ok" once the agent is watching, 503
// before) and GET /metrics in the Prometheus text format.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", a.handleHealthz)
	mux.Handle("GET /metrics", a.metrics.handler())
	return mux
}

func (a *Agent) handleHealthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !a.ready.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("starting\n"))
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// Ready reports whether the agent has read its first document and is
// watching for changes.
func (a *Agent) Ready() bool { return a.ready.Load() }

// Run finds the metadata service (probing it for Provider auto) and this
// VM's name, then watches until ctx ends. On return every handler has
// ended: those in flight see their context cancelled. Run returns nil
// when ctx ends, or the error that stopped the watch.
func (a *Agent) Run(ctx context.Context) error {
	if !a.running.CompareAndSwap(false, true) {
		return errors.New("agent: Run called twice")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		a.wg.Wait()
	}()

	src, err := a.newSource(ctx)
	if err != nil {
		return err
	}
	self := a.cfg.VM
	if self == "" {
		if self, err = src.self(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("read this VM's name from the metadata service (or set --vm): %w", err)
		}
	}
	a.src, a.self = src, self
	a.log.Info("watching", "provider", src.provider(), "vm", self, "endpoint", a.cfg.Endpoint,
		"approve", a.cfg.Approve, "dry_run", a.cfg.DryRun, "lead", a.cfg.Lead.String())
	if a.cfg.Approve && src.provider() != forewarn.Azure {
		a.log.Warn("--approve has no effect: the provider has no approval API", "provider", src.provider())
	}

	err = src.watch(ctx, func(ns []forewarn.Notice) error {
		if a.reconcile(ctx, ns) {
			a.saveState()
		}
		a.ready.Store(true)
		return nil
	})
	a.ready.Store(false)
	if ctx.Err() != nil {
		a.log.Info("stopping")
		return nil
	}
	if err == nil {
		err = errors.New("the watch ended")
	}
	return fmt.Errorf("watch %s metadata: %w", src.provider(), err)
}

// concerns reports whether n is an event of this VM: on Azure, one whose
// Resources name it; on Compute Engine and EC2 every notice is the VM's
// own.
func (a *Agent) concerns(n *forewarn.Notice) bool {
	return a.src.provider() != forewarn.Azure || slices.Contains(n.Resources, a.self)
}

// reconcile compares a new document's notices with the tracked events:
// it starts handling new ones, updates changed ones, and clears the
// ones that disappeared. It reports whether the state file needs a
// write: a handled event changed.
func (a *Agent) reconcile(ctx context.Context, notices []forewarn.Notice) (dirty bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	present := map[string]bool{}
	for _, n := range notices {
		if !a.concerns(&n) {
			continue
		}
		if n.Provider == "" {
			n.Provider = a.src.provider()
		}
		present[n.ID] = true
		t := a.tracked[n.ID]
		if t == nil {
			t = &tracked{}
			a.tracked[n.ID] = t
		}
		changed := t.notice.Status != n.Status || !t.notice.NotBefore.Equal(n.NotBefore)
		t.notice = n
		if !t.seen {
			t.seen = true
			a.metrics.seen.WithLabelValues(n.Type).Inc()
			a.first(ctx, n.ID, t)
			continue
		}
		if changed {
			a.log.Info("event changed", "event", n.ID, "type", n.Type, "status", n.Status, "not_before", formatTime(n.NotBefore))
			if t.record != nil {
				// On-clear after a restart describes the event as last seen.
				t.record.Notice = n
				dirty = true
			}
			if t.wake != nil {
				select {
				case t.wake <- struct{}{}:
				default:
				}
			}
		}
	}
	for id, t := range a.tracked {
		if present[id] {
			continue
		}
		delete(a.tracked, id)
		a.log.Info("event cleared", "event", id, "type", t.notice.Type)
		a.wg.Add(1)
		go a.clear(ctx, id, t)
	}
	return dirty
}

// first decides what to do with an event seen for the first time in
// this run. a.mu is held.
func (a *Agent) first(ctx context.Context, id string, t *tracked) {
	n := t.notice
	attrs := []any{"event", id, "type", n.Type, "status", n.Status, "not_before", formatTime(n.NotBefore),
		"resources", strings.Join(n.Resources, ","), "source", n.Source}
	switch {
	case t.acted:
		a.log.Info("event already handled before a restart", attrs...)
	case !a.types[n.Type]:
		t.ignored = true
		a.log.Info("event seen; its type is not acted on", attrs...)
	default:
		a.log.Info("event seen", attrs...)
		wctx, cancel := context.WithCancel(ctx)
		t.wake, t.cancel, t.done = make(chan struct{}, 1), cancel, make(chan struct{})
		a.wg.Add(1)
		go a.handle(ctx, wctx, id, t)
	}
}

// due returns when n's handlers should run: Lead before NotBefore, or
// now (the zero time) when that has passed, n has started, or its
// NotBefore is unknown.
func (a *Agent) due(n forewarn.Notice) time.Time {
	if a.cfg.Lead == 0 || n.Status == string(forewarn.Started) || n.NotBefore.IsZero() {
		return time.Time{}
	}
	return n.NotBefore.Add(-a.cfg.Lead)
}

// handle waits until the event is due, runs its handlers and approves
// it. wctx ends the wait (the event cleared); ctx, Run's, ends handlers.
func (a *Agent) handle(ctx, wctx context.Context, id string, t *tracked) {
	defer a.wg.Done()
	defer close(t.done)
	for {
		a.mu.Lock()
		at := a.due(t.notice)
		a.mu.Unlock()
		d := time.Until(at)
		if d <= 0 {
			break
		}
		a.log.Info("handlers wait for the lead time", "event", id, "run_at", formatTime(at))
		timer := time.NewTimer(d)
		select {
		case <-wctx.Done():
			timer.Stop()
			return
		case <-t.wake:
			timer.Stop()
		case <-timer.C:
		}
	}
	if wctx.Err() != nil {
		return
	}
	a.mu.Lock()
	n := t.notice
	a.mu.Unlock()

	ok := a.runHandlers(ctx, n)
	if ctx.Err() != nil {
		// Stopped mid-way: not handled; a restart runs the handlers again.
		return
	}
	if ok {
		a.maybeApprove(ctx, t)
	}
	a.mu.Lock()
	t.acted = true
	if a.state != nil && !a.cfg.DryRun {
		t.record = a.state.put(t.notice, ok)
	}
	a.mu.Unlock()
	a.saveState()
}

// runHandlers runs the exec commands and then the webhooks for n, every
// one even after a failure, and reports whether all succeeded.
func (a *Agent) runHandlers(ctx context.Context, n forewarn.Notice) bool {
	ok := true
	for _, cmd := range a.cfg.Exec {
		if ctx.Err() != nil {
			return false
		}
		ok = a.runExec(ctx, kindExec, cmd, n) && ok
	}
	for _, u := range a.cfg.Webhooks {
		if ctx.Err() != nil {
			return false
		}
		ok = a.runWebhook(ctx, u, n) && ok
	}
	return ok
}

// maybeApprove approves t's event if the agent approves, the provider
// can, the event is still Scheduled and this VM may approve it.
func (a *Agent) maybeApprove(ctx context.Context, t *tracked) {
	if !a.cfg.Approve {
		return
	}
	a.mu.Lock()
	n := t.notice
	gone := a.tracked[n.ID] != t
	a.mu.Unlock()
	attrs := []any{"event", n.ID, "type", n.Type}
	switch {
	case a.src.provider() != forewarn.Azure:
		// Compute Engine and EC2 have nothing to approve with.
		a.log.Debug("not approving: the provider has no approval API", append(attrs, "provider", a.src.provider())...)
		return
	case gone:
		a.log.Info("not approving: the event cleared", attrs...)
		return
	case n.Status == string(forewarn.Started):
		a.log.Info("not approving: the event already started", attrs...)
		return
	case !a.mayApprove(n):
		a.log.Info("not approving: this VM is not the leader of the event (the first of its Resources)",
			append(attrs, "leader", first(n.Resources))...)
		return
	}
	if a.cfg.DryRun {
		a.log.Info("dry run: would approve", attrs...)
		return
	}
	now := time.Now()
	if err := a.src.approve(ctx, n.ID); err != nil {
		a.metrics.approvalErrors.Inc()
		a.log.Error("approve", append(attrs, "err", err)...)
		return
	}
	a.metrics.approvals.Inc()
	if !n.NotBefore.IsZero() {
		lead := n.NotBefore.Sub(now)
		a.metrics.approvalLead.Observe(lead.Seconds())
		attrs = append(attrs, "lead_seconds", lead.Seconds())
	}
	a.log.Info("approved", attrs...)
}

// mayApprove reports whether this VM may approve n. Approving starts an
// event for all its Resources, so a Terminate (where each VM approves
// only its own deletion) is approved by any VM it names, and any other
// type only by its leader, the first of its Resources.
func (a *Agent) mayApprove(n forewarn.Notice) bool {
	if n.Type == string(forewarn.Terminate) {
		return slices.Contains(n.Resources, a.self)
	}
	return len(n.Resources) > 0 && n.Resources[0] == a.self
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// clear ends the handling of an event that disappeared: it stops a lead
// wait, lets running handlers finish, then runs the on-clear commands if
// the handlers ran, and forgets the event in the state file.
func (a *Agent) clear(ctx context.Context, id string, t *tracked) {
	defer a.wg.Done()
	if t.cancel != nil {
		t.cancel()
	}
	if t.done != nil {
		<-t.done
	}
	a.mu.Lock()
	acted, n, rec := t.acted, t.notice, t.record
	a.mu.Unlock()
	if !acted || ctx.Err() != nil {
		return
	}
	for _, cmd := range a.cfg.OnClear {
		if ctx.Err() != nil {
			return
		}
		a.runExec(ctx, kindOnClear, cmd, n)
	}
	if ctx.Err() != nil || rec == nil || a.state == nil {
		return
	}
	a.mu.Lock()
	a.state.remove(id, rec)
	a.mu.Unlock()
	a.saveState()
}

// saveState writes the state file, if any and not in a dry run, and logs
// a failure: the agent keeps working, but a restart may run handlers
// again.
func (a *Agent) saveState() {
	if a.state == nil || a.cfg.DryRun {
		return
	}
	if err := a.state.save(&a.mu); err != nil {
		a.log.Error("write state file", "file", a.cfg.StateFile, "err", err)
	}
}

// formatTime formats t as RFC 3339 in UTC, or "" for the zero time.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

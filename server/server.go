// Package server is the Forewarn server as a library: the wiring of a
// store, the lifecycle engine, the Azure, Compute Engine and EC2
// metadata APIs, the operator API, metrics and request history behind
// two capped listeners. 'forewarn serve' is a thin main around it.
//
//	cfg := server.DefaultConfig()
//	cfg.Store, cfg.Fleet = server.StoreMem, fleet
//	cfg.MetadataAddr, cfg.AdminAddr = "127.0.0.1:0", "127.0.0.1:0"
//	s, err := server.New(ctx, cfg)
//	if err != nil { ... }
//	fmt.Println("metadata API on", s.MetadataAddr())
//	err = s.Run(ctx) // until ctx ends
//
// For tests, package forewarntest starts a Server in process with
// clients bound to each VM's address.
package server

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/aws"
	"github.com/forewarn/forewarn/azure"
	"github.com/forewarn/forewarn/bolt"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/etcd"
	"github.com/forewarn/forewarn/fleetfile"
	"github.com/forewarn/forewarn/gce"
	"github.com/forewarn/forewarn/history"
	"github.com/forewarn/forewarn/internal/caller"
	"github.com/forewarn/forewarn/internal/connlimit"
	"github.com/forewarn/forewarn/mem"
	"github.com/forewarn/forewarn/metrics"
	"github.com/forewarn/forewarn/webhook"
)

// Server is one Forewarn server: New makes it, listening; Run serves
// until its context ends and then releases everything. A Server that
// is never run is released with Close.
type Server struct {
	cfg Config
	log *slog.Logger
	// capsWarn warns when --max-conns does not fit the fleet in force;
	// capsChecked is the inventory revision it checked last before Run.
	capsWarn    *capsWarner
	capsChecked int64

	store   forewarn.Store
	cluster forewarn.Cluster // nil for a store of one server
	audit   *admin.AuditLog  // nil without a data directory
	eng     *engine.Engine
	mets    *metrics.Metrics
	hist    *history.History
	az      *azure.Server
	gc      *gce.Server
	ec2     *aws.Server
	adm     *admin.Server
	hooks   *webhook.Sender // server/webhook.go
	md      http.Handler    // the metadata API's router

	// addrs are the metadata and operator listeners' addresses;
	// relayAddr and neutronAddr are those of the relay and neutron
	// listeners, or nil.
	addrs                  [2]net.Addr
	relayAddr, neutronAddr net.Addr
	listeners              []net.Listener // capped
	servers                []*http.Server
	neutron                *neutronHandler // nil without a neutron listener

	mu    sync.Mutex
	state int // ready, running or done
}

// The states of a Server.
const (
	ready = iota
	running
	done
)

// New validates cfg, loads the fleet, opens the store and the audit log,
// starts the engine, builds the three metadata APIs and the operator API
// and opens both listeners. ctx bounds the start (opening the store and
// loading its state), not the Server's life. On error, everything New
// opened is closed again, and so are the listeners cfg gave.
//
// Errors are EINVALID for a configuration, fleet, token file or data
// directory that is refused, with a message that says how to fix it;
// others (a store that cannot be opened, an address in use) are
// wrapped as they come.
func New(ctx context.Context, cfg Config) (*Server, error) {
	return newServer(ctx, cfg)
}

// newServer is New, with the error named for the deferred undo.
func newServer(ctx context.Context, cfg Config) (_ *Server, err error) {
	// undo closes, newest first, what New opened when it fails.
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	// Given listeners are the Server's from the start.
	for _, ln := range []net.Listener{cfg.MetadataListener, cfg.AdminListener, cfg.RelayListener, cfg.NeutronListener} {
		if ln != nil {
			undo = append(undo, func() { ln.Close() })
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}

	// The fleet given is applied to the store's inventory at start; the
	// default fleet only to an empty one.
	fleet, seedOnly := cfg.Fleet, false
	switch {
	case fleet != nil:
	case cfg.FleetFile != "":
		if fleet, err = fleetfile.Load(cfg.FleetFile); err != nil {
			return nil, err
		}
	default:
		fleet, seedOnly = fleetfile.Default(), true
	}
	token, err := adminToken(cfg.AdminTokenFile, s.log)
	if err != nil {
		return nil, err
	}
	// The check is the embedded store's: with etcd, the data directory
	// holds only the audit log, and a replica's state is in etcd.
	if cfg.Store == StoreBolt {
		if err := checkDataDir(cfg.DataDir); err != nil {
			return nil, err
		}
	}
	if s.store, s.cluster, err = openStore(ctx, cfg, s.log); err != nil {
		return nil, err
	}
	undo = append(undo, func() { s.store.Close() })
	if cfg.Store == StoreBolt {
		// The mark beside the store: a store restored from an older copy
		// raises every VM's incarnation past the highest served.
		ms, err := openMarked(ctx, s.store, cfg.DataDir, fleet, s.log)
		if err != nil {
			return nil, err
		}
		s.store = ms
	}
	if cfg.DataDir != "" {
		if cfg.Store == StoreMem {
			if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
				return nil, fmt.Errorf("data directory: %w", err)
			}
		}
		if s.audit, err = admin.OpenAuditLog(filepath.Join(cfg.DataDir, auditFile)); err != nil {
			return nil, err
		}
		undo = append(undo, func() { s.audit.Close() })
		if shared, ok := s.store.(admin.SharedLog); ok {
			s.audit.Shared = shared // every replica shows the writes all replicas received
		}
	}

	s.mets = metrics.New(cfg.Store)
	s.eng, err = engine.New(ctx, engine.Config{Store: s.store, Fleet: fleet, SeedOnly: seedOnly, Logger: s.log,
		AllowShortNotice: cfg.AllowShortNotice, DisableAfter: cfg.DisableAfter, Replica: cfg.ReplicaName,
		WriteWait: writeWait(cfg), Observer: s.mets})
	if err != nil {
		return nil, fmt.Errorf("start engine: %w", err)
	}
	undo = append(undo, func() { s.eng.Close() })
	s.mets.Watch(s.eng)

	// The relay listener's TLS and the neutron listener's secret, checked
	// before anything listens.
	var relayCfg *tls.Config
	relays := cfg.Relays
	if cfg.relayed() {
		if relays == nil {
			if relays, err = LoadRelays(cfg.RelaysFile); err != nil {
				return nil, err
			}
		}
		if relayCfg, err = relayTLS(cfg.RelayCertFile, cfg.RelayKeyFile, cfg.RelayCAFile, relays); err != nil {
			return nil, err
		}
	}
	var neutronSecret []byte
	if cfg.neutron() {
		if neutronSecret, err = loadNeutronSecret(cfg.NeutronSecretFile, s.log); err != nil {
			return nil, err
		}
	}
	webhookSecret, err := loadWebhookSecret(cfg.WebhookSecretFile)
	if err != nil {
		return nil, err
	}
	// listen returns ln, given, or else a listener on addr, which undo
	// closes when New fails.
	listen := func(ln net.Listener, addr, what string) (net.Listener, error) {
		if ln != nil {
			return ln, nil
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		undo = append(undo, func() { ln.Close() })
		return ln, nil
	}
	mdLn, err := listen(cfg.MetadataListener, cfg.MetadataAddr, "metadata API")
	if err != nil {
		return nil, err
	}
	adLn, err := listen(cfg.AdminListener, cfg.AdminAddr, "operator API")
	if err != nil {
		return nil, err
	}
	s.addrs = [2]net.Addr{mdLn.Addr(), adLn.Addr()}
	mdCaps, admCaps := listenerCaps(cfg, s.eng, s.log)
	s.capsWarn = &capsWarner{maxLongPolls: cfg.MaxLongPolls, total: mdCaps.Total, log: s.log}
	s.capsChecked = s.eng.InventoryRevision()
	s.capsWarn.checkCounts(s.eng.FleetCounts())
	mdCapped, admCapped := connlimit.New(mdLn, mdCaps), connlimit.New(adLn, admCaps)
	s.listeners = []net.Listener{mdCapped, admCapped}

	s.adm = admin.NewServer(s.eng, s.log)
	s.adm.Token, s.adm.Audit, s.adm.Metrics = token, s.audit, s.mets
	s.adm.AllowedHosts = cfg.AdminAllowedHosts
	if s.hooks, err = s.newWebhooks(webhookSecret); err != nil {
		return nil, err
	}
	undo = append(undo, s.hooks.Close)
	s.adm.Webhooks = s.hooks
	if s.cluster != nil {
		s.adm.Cluster = s.cluster.Replicas
	}
	s.az = azure.NewServer(s.eng, s.log)
	s.az.FirstCallDelay = cfg.FirstCallDelay
	s.az.SetRateLimit(cfg.RateLimit)
	s.az.SetMetrics(s.mets)
	s.gc = gce.NewServer(s.eng, s.log)
	s.gc.MaxWaiters = cfg.MaxLongPolls
	s.gc.SetRateLimit(cfg.GCERateLimit)
	s.gc.SetMetrics(s.mets)
	s.ec2 = aws.NewServer(s.eng, s.log)
	s.ec2.SetRateLimit(cfg.AWSRateLimit)
	s.ec2.SetMetrics(s.mets)
	s.hist = history.New(nil, cfg.RequestHistory)
	s.hist.Follow(s.eng) // each VM of the inventory, as it changes; a ring at its first request
	s.az.SetHistory(s.hist)
	s.gc.SetHistory(s.hist)
	s.ec2.SetHistory(s.hist)
	s.adm.History = s.hist
	s.adm.Renderers = map[string]admin.Renderer{"azure": s.az, "gce": s.gc, "aws": s.ec2}
	s.md = metadataHandler(s.az, s.gc, s.ec2)
	s.servers = []*http.Server{httpServer(cfg, refuseIdentity(s.md), mdCapped), httpServer(cfg, s.adm, admCapped)}
	s.servers[0].ConnContext = aws.ConnContext
	if relayCfg != nil {
		rl, err := listen(cfg.RelayListener, cfg.RelayAddr, "relay listener")
		if err != nil {
			return nil, err
		}
		capped := connlimit.New(rl, connlimit.Config{Name: "relay", PerSource: relayConnsPerSource, Total: relayConnsTotal,
			WriteTimeout: cfg.WriteTimeout, Refusal: refusal, Logger: s.log})
		s.relayAddr = rl.Addr()
		s.listeners = append(s.listeners, tls.NewListener(capped, relayCfg))
		hs := &http.Server{
			Handler:           connlimit.BodyTimeout(newRelayHandler(relays, s.md, mdCaps.PerSource), cfg.BodyTimeout),
			ReadHeaderTimeout: cfg.HeaderTimeout,
			IdleTimeout:       cfg.IdleTimeout,
			MaxHeaderBytes:    maxHeaderBytes,
			HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: relayStreams},
			ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		}
		s.servers = append(s.servers, hs)
	}
	if neutronSecret != nil {
		nl, err := listen(cfg.NeutronListener, cfg.NeutronAddr, "neutron listener")
		if err != nil {
			return nil, err
		}
		ncaps := connlimit.Config{Name: "neutron", PerSource: neutronConnsPerSource, Total: neutronConnsTotal,
			WriteTimeout: cfg.WriteTimeout, Refusal: refusal, Logger: s.log}
		proxies := slices.Clone(cfg.NeutronProxies)
		if len(proxies) > 0 {
			ncaps.Known = func(a netip.Addr) bool {
				return slices.ContainsFunc(proxies, func(p netip.Prefix) bool { return p.Contains(a.Unmap()) })
			}
			ncaps.StrangerPerSource, ncaps.StrangerTotal = strangerConnsPerSource, neutronStrangerConns
		}
		capped := connlimit.New(nl, ncaps)
		s.neutronAddr = nl.Addr()
		s.listeners = append(s.listeners, capped)
		s.neutron = newNeutronHandler(neutronSecret, proxies, s.eng, s.md, mdCaps.PerSource)
		hs := httpServer(cfg, s.neutron, capped)
		hs.ErrorLog = slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)
		s.servers = append(s.servers, hs)
	}
	// Every listener but the operator's serves the metadata APIs: held
	// calls are answered at once when any of them shuts down.
	for i, hs := range s.servers {
		if i == 1 {
			hs.RegisterOnShutdown(s.adm.Shutdown)
			continue
		}
		hs.RegisterOnShutdown(s.gc.Shutdown)
		hs.RegisterOnShutdown(s.az.Shutdown)
	}
	return s, nil
}

// Run serves both APIs until ctx ends, then shuts down cleanly: it
// stops accepting connections, gives the requests in flight (held
// long-polls are answered at once) up to ShutdownTimeout to finish,
// closes the connections still open, and closes the engine, the store
// and the audit log. It returns nil after a shutdown that ctx asked
// for, or the error that stopped a listener. Run may be called once.
func (s *Server) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.state != ready {
		s.mu.Unlock()
		return forewarn.Errorf(forewarn.ECONFLICT, "server: Run called on a server that has run or was closed")
	}
	s.state = running
	s.mu.Unlock()
	defer s.release()

	var announcing sync.WaitGroup
	actx, stopAnnouncing := context.WithCancel(ctx)
	defer func() { stopAnnouncing(); announcing.Wait() }()
	if s.cluster != nil {
		announcing.Go(func() { announce(actx, s.cluster, s.eng, s.cfg.ReplicaName, s.addrs[1].String(), s.log) })
	}
	announcing.Go(releaseStartGarbage)
	// The soft memory limit is the process's: set it for one server only.
	announcing.Go(func() { governMemory(actx, s.cfg.MemoryHeadroom) })
	announcing.Go(func() { s.capsWarn.follow(actx, s.eng, s.capsChecked) })

	errc := make(chan error, len(s.servers))
	for i, ln := range s.listeners {
		go func() { errc <- s.servers[i].Serve(ln) }()
	}
	vms, _, _ := s.eng.FleetCounts()
	s.log.Info("serving", "vms", vms, "data", s.cfg.DataDir)

	var serveErr error
	pending := len(s.servers)
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
		pending--
	}
	s.log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	for _, hs := range s.servers {
		if err := hs.Shutdown(sctx); err != nil {
			s.log.Error("shutdown", "err", err)
			hs.Close() // what did not finish in time is cut off
		}
	}
	for ; pending > 0; pending-- {
		<-errc // http.ErrServerClosed
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
}

// Close releases a Server that was never run: its listeners, engine,
// store and audit log. After Run has returned it does nothing; while
// Run runs it returns ECONFLICT (end Run's context instead).
func (s *Server) Close() error {
	s.mu.Lock()
	state := s.state
	if state == ready {
		s.state = done
	}
	s.mu.Unlock()
	switch state {
	case running:
		return forewarn.Errorf(forewarn.ECONFLICT, "server: Close called while Run runs; end Run's context instead")
	case done:
		return nil
	}
	for _, ln := range s.listeners {
		ln.Close()
	}
	s.release()
	return nil
}

// release closes the engine, the store and the audit log.
func (s *Server) release() {
	s.mu.Lock()
	s.state = done
	s.mu.Unlock()
	s.hooks.Close()
	s.eng.Close()
	if err := s.store.Close(); err != nil {
		s.log.Error("close store", "err", err)
	}
	if s.audit != nil {
		if err := s.audit.Close(); err != nil {
			s.log.Error("close audit log", "err", err)
		}
	}
}

// Engine returns the server's lifecycle engine: create and drive events
// with it as the operator API does.
func (s *Server) Engine() *engine.Engine { return s.eng }

// Fleet returns the inventory the server answers for now: it changes
// with every inventory change. It must not be modified.
func (s *Server) Fleet() *forewarn.Fleet { return s.eng.Fleet() }

// MetadataAddr returns the address the metadata API listens on, with
// the port the system chose for a port 0.
func (s *Server) MetadataAddr() net.Addr { return s.addrs[0] }

// RelayAddr returns the address the relay listener listens on, or nil
// when the server has none.
func (s *Server) RelayAddr() net.Addr { return s.relayAddr }

// NeutronAddr returns the address the neutron listener listens on, or
// nil when the server has none.
func (s *Server) NeutronAddr() net.Addr { return s.neutronAddr }

// AdminAddr returns the address the operator API listens on.
func (s *Server) AdminAddr() net.Addr { return s.addrs[1] }

// Metadata returns the handler of the metadata listener: Azure paths go
// to the Azure API, Compute Engine paths to the GCE API, EC2 paths to
// the EC2 API, and anything else to the API of the calling VM. It
// identifies VMs by the request's RemoteAddr.
func (s *Server) Metadata() http.Handler { return s.md }

// Neutron returns the handler of the neutron listener, or nil when the
// server has none: it identifies VMs by the instance ID neutron's
// metadata proxy signs (see docs/neutron.md) and hands their requests
// to Metadata.
func (s *Server) Neutron() http.Handler {
	if s.neutron == nil {
		return nil
	}
	return s.neutron
}

// Admin returns the operator API, the handler of the operator listener.
func (s *Server) Admin() *admin.Server { return s.adm }

// Azure returns the Azure Scheduled Events API.
func (s *Server) Azure() *azure.Server { return s.az }

// GCE returns the Compute Engine metadata API.
func (s *Server) GCE() *gce.Server { return s.gc }

// AWS returns the EC2 instance metadata API.
func (s *Server) AWS() *aws.Server { return s.ec2 }

// Metrics returns the server's metrics, served at GET /metrics on the
// operator API.
func (s *Server) Metrics() *metrics.Metrics { return s.mets }

// History returns the recent metadata requests of each VM.
func (s *Server) History() *history.History { return s.hist }

// openStore opens the store cfg names; cluster is nil but for etcd.
func openStore(ctx context.Context, cfg Config, log *slog.Logger) (forewarn.Store, forewarn.Cluster, error) {
	switch cfg.Store {
	case StoreMem:
		return mem.New(), nil, nil
	case StoreEtcd:
		// The data directory still holds the replica's audit log.
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			return nil, nil, fmt.Errorf("data directory: %w", err)
		}
		s, err := etcd.Open(ctx, etcd.Options{Endpoints: cfg.EtcdEndpoints, Prefix: cfg.EtcdPrefix,
			DialTimeout: cfg.EtcdTimeout, RequestTimeout: cfg.EtcdTimeout, LeaseTTL: cfg.LeaderTTL, Logger: log})
		if err != nil {
			var fe *forewarn.Error
			if errors.As(err, &fe) {
				return nil, nil, fe // its message is for the operator
			}
			return nil, nil, err
		}
		return s, s, nil
	}
	s, err := bolt.Open(filepath.Join(cfg.DataDir, storeFile))
	if err != nil {
		return nil, nil, err
	}
	return s, nil, nil
}

// writeWait is how long a write waits behind the one in flight: with
// etcd, about its timeout, so that writes queued behind an etcd without
// a quorum fail together rather than one --etcd-timeout each in turn.
func writeWait(cfg Config) time.Duration {
	if cfg.Store == StoreEtcd {
		return cfg.EtcdTimeout
	}
	return 0
}

// announcePeriod is how often a replica reports its revision and
// leadership to the others.
const announcePeriod = 500 * time.Millisecond

// announce reports the replica to the cluster every announcePeriod until
// ctx ends.
func announce(ctx context.Context, c forewarn.Cluster, eng *engine.Engine, name, addr string, log *slog.Logger) {
	if name == "" {
		name, _ = os.Hostname()
	}
	started := time.Now().UTC()
	t := time.NewTicker(announcePeriod)
	defer t.Stop()
	failing := false
	for {
		r := forewarn.Replica{Name: name, Address: addr, Revision: eng.Revision(), Leader: eng.Leading(),
			Started: started, Updated: time.Now().UTC()}
		err := c.Announce(ctx, r)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			log.Warn("announce this replica", "err", err)
			failing = true
		case err == nil && failing:
			log.Info("announcing this replica again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// metadataHandler routes the metadata listener: Azure paths to the Azure
// API, Compute Engine paths to the GCE API, EC2 paths (under any version
// EC2 serves, see aws.IsPath) to the EC2 API, and anything else (such as
// GET /) to the API of the calling VM's provider.
func metadataHandler(az *azure.Server, g *gce.Server, ec2 *aws.Server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case strings.HasPrefix(p, "/metadata/"):
			az.ServeHTTP(w, r)
		case strings.HasPrefix(p, "/computeMetadata"):
			g.ServeHTTP(w, r)
		case aws.IsPath(p):
			ec2.ServeHTTP(w, r)
		case provider(g.Caller(r)) == forewarn.GCE:
			g.ServeHTTP(w, r)
		case provider(ec2.Caller(r)) == forewarn.AWS:
			ec2.ServeHTTP(w, r)
		default:
			az.ServeHTTP(w, r)
		}
	})
}

// refuseIdentity refuses, on the metadata listener, a request that
// claims an identity in its headers (see caller.HasIdentity): only the
// relay listener, which authenticates its callers, takes them.
func refuseIdentity(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if caller.HasIdentity(r.Header) {
			w.Header().Set("Connection", "close")
			relayError(w, http.StatusForbidden, "identity headers are taken from authenticated relays only")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// provider returns vm's provider, or "" for nil.
func provider(vm *forewarn.VM) forewarn.Provider {
	if vm == nil {
		return ""
	}
	return vm.Provider
}

// adminToken reads the operator token from path, generating a random one
// (mode 0600) when the file does not exist. An empty path means no token.
// A file others can read or change, or a short token, is refused.
func adminToken(path string, log *slog.Logger) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		var raw [32]byte
		_, _ = rand.Read(raw[:]) // crypto/rand.Read never fails
		tok := hex.EncodeToString(raw[:])
		if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
			return "", fmt.Errorf("write admin token file: %w", err)
		}
		log.Info("generated the operator API token", "file", path)
		return tok, nil
	}
	if err != nil {
		return "", fmt.Errorf("read admin token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", forewarn.Errorf(forewarn.EINVALID, "admin token file %s is empty", path)
	}
	info, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("read admin token file: %w", err)
	}
	if err := checkToken(path, info.Mode(), tok); err != nil {
		return "", err
	}
	return tok, nil
}

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
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
	"github.com/forewarn/forewarn/internal/connlimit"
	"github.com/forewarn/forewarn/metrics"
)

// ServeConfig configures 'forewarn serve'.
type ServeConfig struct {
	MetadataAddr string
	// Store is "bolt" (the embedded store in DataDir) or "etcd".
	Store string
	// EtcdEndpoints, EtcdPrefix, EtcdTimeout and LeaderTTL configure the
	// etcd store; ReplicaName names this replica among those sharing it.
	EtcdEndpoints    []string
	EtcdPrefix       string
	EtcdTimeout      time.Duration
	LeaderTTL        time.Duration
	ReplicaName      string
	AdminAddr        string
	DataDir          string
	FleetFile        string
	AllowShortNotice bool
	// AdminTokenFile holds the operator API's bearer token; it is
	// generated (mode 0600) when missing. Required off loopback.
	AdminTokenFile string
	// DisableAfter disables a VM's scheduled events after this long
	// without a request.
	DisableAfter time.Duration
	// FirstCallDelay holds the answer to a VM's enabling first call.
	FirstCallDelay time.Duration
	// RateLimit is each Azure VM's requests per second; 0 turns it off.
	RateLimit float64
	// AWSRateLimit is each EC2 VM's requests per second; 0 turns it off.
	AWSRateLimit float64
	// MaxLongPolls caps each GCE VM's held wait_for_change requests.
	MaxLongPolls int
	// RequestHistory is how many recent metadata requests the server
	// keeps per VM for 'forewarn vm show'; 0 keeps none.
	RequestHistory int
	// ShutdownTimeout bounds how long in-flight requests may take to finish.
	ShutdownTimeout time.Duration
	// HeaderTimeout bounds reading a request's headers, and so how long
	// a new connection may stay silent; BodyTimeout bounds reading its
	// body; IdleTimeout closes a kept-alive connection without a request.
	// They apply to both listeners.
	HeaderTimeout, BodyTimeout, IdleTimeout time.Duration
	// MaxConnsPerSource caps the metadata API's open connections from one
	// VM's address; 0 derives it from MaxLongPolls. MaxConns caps all of
	// them; 0 derives it from the limit on open files and the fleet.
	// MaxStrangerConns caps, together, those from addresses of no VM.
	MaxConnsPerSource, MaxConns, MaxStrangerConns int
	// AdminMaxConnsPerSource and AdminMaxConns are the operator API's caps.
	AdminMaxConnsPerSource, AdminMaxConns int
}

// defaultServeConfig returns the defaults the flags start from.
func defaultServeConfig() ServeConfig {
	return ServeConfig{
		MetadataAddr:    "127.0.0.1:8169",
		Store:           "bolt",
		EtcdPrefix:      etcd.DefaultPrefix,
		EtcdTimeout:     etcd.DefaultRequestTimeout,
		LeaderTTL:       etcd.DefaultLeaseTTL,
		AdminAddr:       "127.0.0.1:8170",
		DataDir:         "forewarn-data",
		DisableAfter:    24 * time.Hour,
		RateLimit:       azure.DefaultRateLimit,
		AWSRateLimit:    aws.DefaultRateLimit,
		MaxLongPolls:    gce.DefaultMaxWaiters,
		RequestHistory:  history.DefaultSize,
		ShutdownTimeout: 10 * time.Second,

		HeaderTimeout:          defaultHeaderTimeout,
		BodyTimeout:            defaultBodyTimeout,
		IdleTimeout:            defaultIdleTimeout,
		MaxStrangerConns:       defaultStrangerConns,
		AdminMaxConnsPerSource: defaultAdminConnsPerSrc,
		AdminMaxConns:          defaultAdminConns,
	}
}

// Validate reports whether c can be served.
func (c *ServeConfig) Validate() error {
	if c.DataDir == "" {
		return errors.New("--data must name a directory")
	}
	for _, a := range []struct{ flag, addr string }{{"--metadata-addr", c.MetadataAddr}, {"--admin-addr", c.AdminAddr}} {
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			return fmt.Errorf("%s %q: %v", a.flag, a.addr, err)
		}
	}
	if c.DisableAfter <= 0 {
		return fmt.Errorf("--disable-after %s must be positive", c.DisableAfter)
	}
	switch c.Store {
	case "bolt":
		if len(c.EtcdEndpoints) > 0 {
			return errors.New("--etcd-endpoints needs --store etcd")
		}
	case "etcd":
		if len(c.EtcdEndpoints) == 0 {
			return errors.New("--store etcd needs --etcd-endpoints URL[,URL...]")
		}
		for _, ep := range c.EtcdEndpoints {
			if u, err := url.Parse(ep); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("--etcd-endpoints: %q is not an http:// or https:// URL", ep)
			}
		}
		if !strings.HasPrefix(c.EtcdPrefix, "/") {
			return fmt.Errorf("--etcd-prefix %q must begin with /", c.EtcdPrefix)
		}
		if c.LeaderTTL < time.Second || c.LeaderTTL%time.Second != 0 {
			return fmt.Errorf("--leader-ttl %s must be a whole number of seconds, at least 1s", c.LeaderTTL)
		}
		if c.EtcdTimeout <= 0 {
			return fmt.Errorf("--etcd-timeout %s must be positive", c.EtcdTimeout)
		}
	default:
		return fmt.Errorf("--store %q: want bolt (embedded, one server) or etcd (several replicas)", c.Store)
	}
	if c.RequestHistory < 0 || c.RequestHistory > history.MaxSize {
		return fmt.Errorf("--request-history %d: want 0 (keep none) to %d requests per VM", c.RequestHistory, history.MaxSize)
	}
	if err := checkRateLimit("--aws-rate-limit", c.AWSRateLimit); err != nil {
		return err
	}
	if err := checkRateLimit("--rate-limit", c.RateLimit); err != nil {
		return err
	}
	if c.MaxLongPolls < 0 {
		return fmt.Errorf("--max-long-polls %d must not be negative", c.MaxLongPolls)
	}
	if c.FirstCallDelay < 0 {
		return fmt.Errorf("--first-call-delay %s must not be negative", c.FirstCallDelay)
	}
	if err := c.validateConns(); err != nil {
		return err
	}
	if !loopback(c.AdminAddr) && c.AdminTokenFile == "" {
		return fmt.Errorf("--admin-addr %s is not a loopback address: the operator API then requires a bearer token; give --admin-token-file FILE (generated if missing)", c.AdminAddr)
	}
	return nil
}

// loopback reports whether addr's host is a loopback IP or localhost.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := defaultServeConfig()
	fs := flag.NewFlagSet("forewarn serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.MetadataAddr, "metadata-addr", cfg.MetadataAddr, "listen address of the metadata API that VMs call")
	fs.StringVar(&cfg.AdminAddr, "admin-addr", cfg.AdminAddr, "listen address of the operator API (off loopback it requires --admin-token-file)")
	fs.StringVar(&cfg.AdminTokenFile, "admin-token-file", "", "file holding the operator API's bearer token, generated with mode 0600 if missing")
	fs.StringVar(&cfg.DataDir, "data", cfg.DataDir, "directory of the embedded store and the audit log, created if missing")
	fs.StringVar(&cfg.Store, "store", cfg.Store, "where state is kept: bolt (embedded, one server) or etcd (several replicas share it)")
	fs.Func("etcd-endpoints", "etcd client URLs, comma-separated (with --store etcd)", func(v string) error {
		for ep := range strings.SplitSeq(v, ",") {
			if ep = strings.TrimSpace(ep); ep != "" {
				cfg.EtcdEndpoints = append(cfg.EtcdEndpoints, ep)
			}
		}
		return nil
	})
	fs.StringVar(&cfg.EtcdPrefix, "etcd-prefix", cfg.EtcdPrefix, "key prefix of the fleet's state in etcd; replicas of one fleet share it")
	fs.DurationVar(&cfg.EtcdTimeout, "etcd-timeout", cfg.EtcdTimeout, "bound of every etcd call; a write that cannot reach a quorum in it gets 503")
	fs.DurationVar(&cfg.LeaderTTL, "leader-ttl", cfg.LeaderTTL, "lease of the leader, whole seconds: a dead leader is replaced this long after")
	fs.StringVar(&cfg.ReplicaName, "replica-name", "", "this replica's name in 'forewarn cluster status' (default: the host name)")
	fs.StringVar(&cfg.FleetFile, "fleet", "", "fleet file (YAML); without it, one Azure VM named after the host answers every caller")
	fs.BoolVar(&cfg.AllowShortNotice, "allow-short-notice", false, "accept notices below the per-type minimums (testing and development)")
	fs.DurationVar(&cfg.DisableAfter, "disable-after", cfg.DisableAfter, "disable a VM's scheduled events after this long without a request")
	fs.DurationVar(&cfg.FirstCallDelay, "first-call-delay", 0, "delay the answer to the call that enables a VM's scheduled events (the real service takes up to 2m)")
	fs.Float64Var(&cfg.RateLimit, "rate-limit", cfg.RateLimit, "Azure requests per second per VM; excess requests get 429 (0 disables)")
	fs.Float64Var(&cfg.AWSRateLimit, "aws-rate-limit", cfg.AWSRateLimit, "EC2 requests per second per VM; excess requests get 429 (0 disables)")
	fs.IntVar(&cfg.RequestHistory, "request-history", cfg.RequestHistory, "recent metadata requests kept per VM for 'forewarn vm show' (about 32 bytes each; 0 keeps none)")
	fs.IntVar(&cfg.MaxLongPolls, "max-long-polls", cfg.MaxLongPolls, "held GCE wait_for_change requests per VM; excess requests get 503 (0: no cap)")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout, "how long in-flight requests may take to finish on shutdown")
	fs.DurationVar(&cfg.HeaderTimeout, "header-timeout", cfg.HeaderTimeout, "time a request's headers may take to arrive; a new connection silent this long is closed")
	fs.DurationVar(&cfg.BodyTimeout, "body-timeout", cfg.BodyTimeout, "time a request's body may take to arrive after its headers")
	fs.DurationVar(&cfg.IdleTimeout, "idle-timeout", cfg.IdleTimeout, "close a kept-alive connection after this long without a request")
	fs.IntVar(&cfg.MaxConnsPerSource, "max-conns-per-source", cfg.MaxConnsPerSource, "open metadata API connections per VM address; excess connections get 503 and are closed (0: --max-long-polls + 16)")
	fs.IntVar(&cfg.MaxConns, "max-conns", cfg.MaxConns, "open metadata API connections in all (0: sized from the limit on open files and the fleet)")
	fs.IntVar(&cfg.MaxStrangerConns, "max-stranger-conns", cfg.MaxStrangerConns, "open metadata API connections from addresses of no VM, together (4 each)")
	fs.IntVar(&cfg.AdminMaxConnsPerSource, "admin-max-conns-per-source", cfg.AdminMaxConnsPerSource, "open operator API connections per address")
	fs.IntVar(&cfg.AdminMaxConns, "admin-max-conns", cfg.AdminMaxConns, "open operator API connections in all")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "forewarn serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if err := Serve(ctx, cfg, log, stdout); err != nil {
		fmt.Fprintf(stderr, "forewarn serve: %v\n", err)
		return 1
	}
	return 0
}

// Serve runs the metadata and operator APIs until ctx ends, then shuts
// down cleanly. It prints one line per listener to out once both listen.
func Serve(ctx context.Context, cfg ServeConfig, log *slog.Logger, out io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	fleet := fleetfile.Default()
	if cfg.FleetFile != "" {
		var err error
		if fleet, err = fleetfile.Load(cfg.FleetFile); err != nil {
			return errors.New(message(err))
		}
	}
	token, err := adminToken(cfg.AdminTokenFile, log)
	if err != nil {
		return err
	}
	// The check is the embedded store's: with etcd, the data directory
	// holds only the audit log, and a replica's state is in etcd.
	if cfg.Store == "bolt" {
		if err := checkDataDir(cfg.DataDir); err != nil {
			return err
		}
	}
	store, cluster, err := openStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer store.Close()
	audit, err := admin.OpenAuditLog(filepath.Join(cfg.DataDir, auditFile))
	if err != nil {
		return err
	}
	defer audit.Close()
	if shared, ok := store.(admin.SharedLog); ok {
		audit.Shared = shared // every replica shows the writes all replicas received
	}

	mets := metrics.New(cfg.Store)
	eng, err := engine.New(ctx, engine.Config{Store: store, Fleet: fleet, Logger: log,
		AllowShortNotice: cfg.AllowShortNotice, DisableAfter: cfg.DisableAfter, Replica: cfg.ReplicaName,
		WriteWait: writeWait(cfg), Observer: mets})
	if err != nil {
		return fmt.Errorf("start engine: %w", err)
	}
	defer eng.Close()
	mets.Watch(eng)

	mdLn, err := net.Listen("tcp", cfg.MetadataAddr)
	if err != nil {
		return fmt.Errorf("metadata API: %w", err)
	}
	adLn, err := net.Listen("tcp", cfg.AdminAddr)
	if err != nil {
		mdLn.Close()
		return fmt.Errorf("operator API: %w", err)
	}
	mdCaps, admCaps := listenerCaps(cfg, fleet, log)
	mdCapped, adCapped := connlimit.New(mdLn, mdCaps), connlimit.New(adLn, admCaps)
	adm := admin.NewServer(eng, log)
	adm.Token, adm.Audit, adm.Metrics = token, audit, mets
	if cluster != nil {
		adm.Cluster = cluster.Replicas
		go announce(ctx, cluster, eng, cfg.ReplicaName, adLn.Addr().String(), log)
	}
	az := azure.NewServer(eng, log)
	az.FirstCallDelay = cfg.FirstCallDelay
	az.SetRateLimit(cfg.RateLimit)
	az.SetMetrics(mets)
	gc := gce.NewServer(eng, log)
	gc.MaxWaiters = cfg.MaxLongPolls
	gc.SetMetrics(mets)
	ec2 := aws.NewServer(eng, log)
	ec2.SetRateLimit(cfg.AWSRateLimit)
	ec2.SetMetrics(mets)
	names := make([]string, 0, len(fleet.VMs))
	for _, vm := range fleet.VMs {
		names = append(names, vm.Name)
	}
	hist := history.New(names, cfg.RequestHistory)
	az.SetHistory(hist)
	gc.SetHistory(hist)
	ec2.SetHistory(hist)
	adm.History = hist
	adm.Renderers = map[string]admin.Renderer{"azure": az, "gce": gc, "aws": ec2}
	servers := []*http.Server{httpServer(cfg, metadataHandler(az, gc, ec2)), httpServer(cfg, adm)}
	servers[0].ConnContext = aws.ConnContext
	servers[0].RegisterOnShutdown(gc.Shutdown)
	servers[0].RegisterOnShutdown(az.Shutdown)
	servers[1].RegisterOnShutdown(adm.Shutdown)
	errc := make(chan error, 2)
	for i, ln := range []net.Listener{mdCapped, adCapped} {
		go func() { errc <- servers[i].Serve(ln) }()
	}
	fmt.Fprintf(out, "metadata API listening on %s\noperator API listening on %s\n", mdLn.Addr(), adLn.Addr())
	log.Info("serving", "vms", len(fleet.VMs), "data", cfg.DataDir)

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	for _, s := range servers {
		if err := s.Shutdown(sctx); err != nil {
			log.Error("shutdown", "err", err)
		}
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
}

// openStore opens the store cfg names; cluster is nil for bolt.
func openStore(ctx context.Context, cfg ServeConfig, log *slog.Logger) (forewarn.Store, forewarn.Cluster, error) {
	if cfg.Store == "etcd" {
		// The data directory still holds the replica's audit log.
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			return nil, nil, fmt.Errorf("data directory: %w", err)
		}
		s, err := etcd.Open(ctx, etcd.Options{Endpoints: cfg.EtcdEndpoints, Prefix: cfg.EtcdPrefix,
			DialTimeout: cfg.EtcdTimeout, RequestTimeout: cfg.EtcdTimeout, LeaseTTL: cfg.LeaderTTL, Logger: log})
		if err != nil {
			return nil, nil, errors.New(message(err))
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
func writeWait(cfg ServeConfig) time.Duration {
	if cfg.Store == "etcd" {
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
// API, Compute Engine paths to the GCE API, EC2 paths to the EC2 API, and
// anything else (such as GET /) to the API of the calling VM's provider.
func metadataHandler(az *azure.Server, g *gce.Server, ec2 *aws.Server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case strings.HasPrefix(p, "/metadata/"):
			az.ServeHTTP(w, r)
		case strings.HasPrefix(p, "/computeMetadata"):
			g.ServeHTTP(w, r)
		case p == "/latest" || strings.HasPrefix(p, "/latest/"):
			ec2.ServeHTTP(w, r)
		case g.Caller(r) != nil && g.Caller(r).Provider == forewarn.GCE:
			g.ServeHTTP(w, r)
		case ec2.Caller(r) != nil && ec2.Caller(r).Provider == forewarn.AWS:
			ec2.ServeHTTP(w, r)
		default:
			az.ServeHTTP(w, r)
		}
	})
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
		return "", fmt.Errorf("admin token file %s is empty", path)
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

package server

import (
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/aws"
	"github.com/forewarn/forewarn/azure"
	"github.com/forewarn/forewarn/etcd"
	"github.com/forewarn/forewarn/gce"
	"github.com/forewarn/forewarn/history"
)

// The stores a Config can name.
const (
	// StoreBolt is the embedded store in DataDir: one server.
	StoreBolt = "bolt"
	// StoreEtcd is etcd, shared by several replicas.
	StoreEtcd = "etcd"
	// StoreMem keeps the state in memory: nothing survives the server.
	// For tests and experiments.
	StoreMem = "mem"
)

// Config configures a Server. Start from DefaultConfig: the zero value
// of several fields is refused. Validate's messages name the flags of
// 'forewarn serve' that set each field.
type Config struct {
	// MetadataAddr is the listen address of the metadata API that VMs
	// call. It is not used when MetadataListener is set.
	MetadataAddr string
	// MetadataListener, when set, is the metadata API's listener, already
	// listening; the Server closes it. Connections are identified by
	// their RemoteAddr, which must then be an IP address and port for the
	// VMs to be known.
	MetadataListener net.Listener
	// RelayAddr, when set, is the listen address of the relay listener,
	// where 'forewarn relay' processes forward their VMs' requests over
	// mutual TLS: RelayCertFile and RelayKeyFile are the server's
	// certificate and key, RelayCAFile the authority that signs the
	// relays' certificates, and RelaysFile (or Relays) names each relay
	// and the networks it may speak for. RelayListener, when set, is the
	// relay listener's plain listener instead of RelayAddr; the Server
	// adds TLS and closes it.
	RelayAddr                                string
	RelayListener                            net.Listener
	RelayCertFile, RelayKeyFile, RelayCAFile string
	RelaysFile                               string
	Relays                                   Relays
	// NeutronAddr, when set, is the listen address of the neutron
	// listener, plain HTTP, where OpenStack's neutron metadata agents
	// forward their instances' requests as they would to Nova's
	// metadata API with service_metadata_proxy: each request names its
	// VM in X-Instance-ID, signed with NeutronSecretFile's shared secret
	// (neutron's metadata_proxy_shared_secret). NeutronListener, when
	// set, is that listener instead of NeutronAddr, already listening;
	// the Server closes it. NeutronProxies, when not empty, are the
	// addresses neutron's agents connect from: any other source is
	// refused (403). Empty lets any source that holds a signed request
	// in, which is weaker: see docs/neutron.md.
	NeutronAddr       string
	NeutronListener   net.Listener
	NeutronSecretFile string
	NeutronProxies    []netip.Prefix
	// Store is StoreBolt (the embedded store in DataDir), StoreEtcd or
	// StoreMem.
	Store string
	// EtcdEndpoints, EtcdPrefix, EtcdTimeout and LeaderTTL configure the
	// etcd store; ReplicaName names this replica among those sharing it.
	EtcdEndpoints []string
	EtcdPrefix    string
	EtcdTimeout   time.Duration
	LeaderTTL     time.Duration
	ReplicaName   string
	// AdminAddr is the listen address of the operator API. It is not used
	// when AdminListener is set.
	AdminAddr string
	// AdminListener, when set, is the operator API's listener, already
	// listening; the Server closes it. A TCP listener off loopback
	// requires AdminTokenFile, as AdminAddr does; other listeners (a
	// Unix socket, an in-memory one) are reached from this host only.
	AdminListener net.Listener
	// DataDir holds the embedded store and the audit log. It is created
	// if missing. With StoreMem it may be empty: there is then no audit
	// log.
	DataDir string
	// FleetFile is the fleet file to load. Fleet is an already built
	// fleet instead (see package fleetfile); at most one of them may be
	// set. Without either, the fleet is fleetfile.Default().
	FleetFile string
	Fleet     *forewarn.Fleet
	// AllowShortNotice accepts notices below the per-type minimums.
	AllowShortNotice bool
	// AdminTokenFile holds the operator API's bearer token; it is
	// generated (mode 0600) when missing. Required off loopback.
	AdminTokenFile string
	// AdminAllowedHosts are the names, besides the operator listener's
	// own address and the loopback names, that operator requests may give
	// in their Host header: host names or IP addresses, without ports.
	// Requests for any other host are refused (421), so that a web page
	// cannot reach the API by DNS rebinding.
	AdminAllowedHosts []string
	// DisableAfter disables a VM's scheduled events after this long
	// without a request.
	DisableAfter time.Duration
	// FirstCallDelay holds the answer to a VM's enabling first call.
	FirstCallDelay time.Duration
	// RateLimit is each Azure VM's requests per second; 0 turns it off.
	RateLimit float64
	// AWSRateLimit is each EC2 VM's requests per second; 0 turns it off.
	AWSRateLimit float64
	// GCERateLimit is each GCE VM's requests per second; 0 turns it off.
	// A wait_for_change request counts when it is made, not while held.
	GCERateLimit float64
	// MaxLongPolls caps each GCE VM's held wait_for_change requests.
	MaxLongPolls int
	// RequestHistory is how many recent metadata requests the server
	// keeps per VM of the inventory for 'forewarn vm show'; 0 keeps none
	// (the counts of 'forewarn report' are kept whatever it is).
	RequestHistory int
	// MemoryHeadroom bounds, in MiB, the garbage the server lets pile up
	// above its live heap before it collects (a soft memory limit kept at
	// the live heap plus this, besides GOGC's doubling): with a large
	// fleet, no sequence of requests raises its memory by much more. 0
	// leaves Go's pacing alone; so does a GOMEMLIMIT in the environment.
	MemoryHeadroom int
	// ShutdownTimeout bounds how long in-flight requests may take to
	// finish once Run's context ends; the connections still open then
	// are closed.
	ShutdownTimeout time.Duration
	// HeaderTimeout bounds reading a request's headers, and so how long
	// a new connection may stay silent; BodyTimeout bounds reading its
	// body; IdleTimeout closes a kept-alive connection without a request;
	// WriteTimeout bounds how long each 64 KiB of an answer may take to
	// be taken by the client, so a client that never reads (or reads
	// slower than 64 KiB per WriteTimeout) is disconnected, while a held
	// long-poll, which writes nothing until it is answered, is not. They
	// apply to both listeners.
	HeaderTimeout, BodyTimeout, IdleTimeout, WriteTimeout time.Duration
	// MaxConnsPerSource caps the metadata API's open connections from one
	// VM's address; 0 derives it from MaxLongPolls. MaxConns caps all of
	// them; 0 derives it from the limit on open files alone, not the
	// fleet, which changes (its VMs are held to MaxConnsPerSource each).
	// At MaxConns a new connection takes the place of one of the heaviest
	// source's, if it holds two more than the newcomer, rather than being
	// refused (see package connlimit). MaxStrangerConns caps, together,
	// those from addresses of no VM of the inventory in force.
	MaxConnsPerSource, MaxConns, MaxStrangerConns int
	// AdminMaxConnsPerSource and AdminMaxConns are the operator API's
	// caps. Fleet VMs' addresses are strangers there: 4 connections each,
	// a quarter of AdminMaxConns together.
	AdminMaxConnsPerSource, AdminMaxConns int
	// Webhooks receive every session's host and session transitions,
	// signed with the secret in WebhookSecretFile (required with them;
	// without it, sessions may not name webhooks of their own). See
	// package webhook.
	Webhooks          []string
	WebhookSecretFile string
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns the defaults of 'forewarn serve': the metadata
// API on 127.0.0.1:8169, the operator API on 127.0.0.1:8170, the
// embedded store in ./forewarn-data and the default fleet.
func DefaultConfig() Config {
	return Config{
		MetadataAddr:    "127.0.0.1:8169",
		Store:           StoreBolt,
		EtcdPrefix:      etcd.DefaultPrefix,
		EtcdTimeout:     etcd.DefaultRequestTimeout,
		LeaderTTL:       etcd.DefaultLeaseTTL,
		AdminAddr:       "127.0.0.1:8170",
		DataDir:         "forewarn-data",
		DisableAfter:    24 * time.Hour,
		RateLimit:       azure.DefaultRateLimit,
		AWSRateLimit:    aws.DefaultRateLimit,
		GCERateLimit:    gce.DefaultRateLimit,
		MaxLongPolls:    gce.DefaultMaxWaiters,
		RequestHistory:  history.DefaultSize,
		MemoryHeadroom:  DefaultMemoryHeadroom,
		ShutdownTimeout: 10 * time.Second,

		HeaderTimeout:          defaultHeaderTimeout,
		BodyTimeout:            defaultBodyTimeout,
		IdleTimeout:            defaultIdleTimeout,
		WriteTimeout:           defaultWriteTimeout,
		MaxStrangerConns:       defaultStrangerConns,
		AdminMaxConnsPerSource: defaultAdminConnsPerSrc,
		AdminMaxConns:          defaultAdminConns,
	}
}

// Validate reports whether c can be served. Its errors are EINVALID
// and name the flag of 'forewarn serve' at fault.
func (c *Config) Validate() error {
	if c.DataDir == "" && c.Store != StoreMem {
		return forewarn.Errorf(forewarn.EINVALID, "--data must name a directory")
	}
	for _, a := range []struct {
		flag, addr string
		ln         net.Listener
	}{{"--metadata-addr", c.MetadataAddr, c.MetadataListener}, {"--admin-addr", c.AdminAddr, c.AdminListener}} {
		if a.ln != nil {
			continue
		}
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			return forewarn.Errorf(forewarn.EINVALID, "%s %q: %v", a.flag, a.addr, err)
		}
	}
	if err := c.validateRelay(); err != nil {
		return err
	}
	if err := c.validateNeutron(); err != nil {
		return err
	}
	if err := c.validateWebhooks(); err != nil { // server/webhook.go
		return err
	}
	if c.Fleet != nil && c.FleetFile != "" {
		return forewarn.Errorf(forewarn.EINVALID, "--fleet %s: the configuration also holds a fleet; give one of them", c.FleetFile)
	}
	if c.Fleet != nil && len(c.Fleet.VMs) == 0 {
		return forewarn.Errorf(forewarn.EINVALID, "the fleet has no VMs")
	}
	if c.DisableAfter <= 0 {
		return forewarn.Errorf(forewarn.EINVALID, "--disable-after %s must be positive", c.DisableAfter)
	}
	switch c.Store {
	case StoreBolt, StoreMem:
		if len(c.EtcdEndpoints) > 0 {
			return forewarn.Errorf(forewarn.EINVALID, "--etcd-endpoints needs --store etcd")
		}
	case StoreEtcd:
		if len(c.EtcdEndpoints) == 0 {
			return forewarn.Errorf(forewarn.EINVALID, "--store etcd needs --etcd-endpoints URL[,URL...]")
		}
		for _, ep := range c.EtcdEndpoints {
			if u, err := url.Parse(ep); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return forewarn.Errorf(forewarn.EINVALID, "--etcd-endpoints: %q is not an http:// or https:// URL", ep)
			}
		}
		if !strings.HasPrefix(c.EtcdPrefix, "/") {
			return forewarn.Errorf(forewarn.EINVALID, "--etcd-prefix %q must begin with /", c.EtcdPrefix)
		}
		if c.LeaderTTL < time.Second || c.LeaderTTL%time.Second != 0 {
			return forewarn.Errorf(forewarn.EINVALID, "--leader-ttl %s must be a whole number of seconds, at least 1s", c.LeaderTTL)
		}
		if c.EtcdTimeout <= 0 {
			return forewarn.Errorf(forewarn.EINVALID, "--etcd-timeout %s must be positive", c.EtcdTimeout)
		}
	default:
		return forewarn.Errorf(forewarn.EINVALID, "--store %q: want bolt (embedded, one server) or etcd (several replicas), or mem (in memory, kept nowhere)", c.Store)
	}
	if c.MemoryHeadroom < 0 || c.MemoryHeadroom > 1<<20 {
		return forewarn.Errorf(forewarn.EINVALID, "--memory-headroom %d: want 0 (Go's own pacing) to %d MiB", c.MemoryHeadroom, 1<<20)
	}
	if c.RequestHistory < 0 || c.RequestHistory > history.MaxSize {
		return forewarn.Errorf(forewarn.EINVALID, "--request-history %d: want 0 (keep no requests, only the report's counts) to %d requests per VM", c.RequestHistory, history.MaxSize)
	}
	if err := checkRateLimit("--aws-rate-limit", c.AWSRateLimit); err != nil {
		return err
	}
	if err := checkRateLimit("--rate-limit", c.RateLimit); err != nil {
		return err
	}
	if err := checkRateLimit("--gce-rate-limit", c.GCERateLimit); err != nil {
		return err
	}
	if c.MaxLongPolls < 0 {
		return forewarn.Errorf(forewarn.EINVALID, "--max-long-polls %d must not be negative", c.MaxLongPolls)
	}
	if c.FirstCallDelay < 0 {
		return forewarn.Errorf(forewarn.EINVALID, "--first-call-delay %s must not be negative", c.FirstCallDelay)
	}
	if err := c.validateConns(); err != nil {
		return err
	}
	adminAddr, local := c.AdminAddr, loopback(c.AdminAddr)
	if c.AdminListener != nil {
		adminAddr = c.AdminListener.Addr().String()
		// Only a TCP listener is reached from other hosts: a Unix
		// socket or an in-memory listener is not.
		tcp, ok := c.AdminListener.Addr().(*net.TCPAddr)
		local = !ok || tcp.IP.IsLoopback()
	}
	for _, h := range c.AdminAllowedHosts {
		if err := admin.ValidAllowedHost(h); err != nil {
			return forewarn.Errorf(forewarn.EINVALID, "--admin-allowed-hosts: %s", forewarn.ErrorMessage(err))
		}
	}
	if !local && c.AdminTokenFile == "" {
		return forewarn.Errorf(forewarn.EINVALID, "--admin-addr %s is not a loopback address: the operator API then requires a bearer token; give --admin-token-file FILE (generated if missing)", adminAddr)
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

// relayed reports whether c has a relay listener.
func (c *Config) relayed() bool { return c.RelayAddr != "" || c.RelayListener != nil }

// validateRelay reports whether the relay listener's settings are whole.
func (c *Config) validateRelay() error {
	if !c.relayed() {
		for _, f := range []struct{ flag, v string }{{"--relay-cert", c.RelayCertFile}, {"--relay-key", c.RelayKeyFile},
			{"--relay-ca", c.RelayCAFile}, {"--relays", c.RelaysFile}} {
			if f.v != "" {
				return forewarn.Errorf(forewarn.EINVALID, "%s needs --relay-addr, the relay listener it configures", f.flag)
			}
		}
		if c.Relays != nil {
			return forewarn.Errorf(forewarn.EINVALID, "relays are given without --relay-addr, the relay listener they reach")
		}
		return nil
	}
	if c.RelayListener == nil {
		if _, _, err := net.SplitHostPort(c.RelayAddr); err != nil {
			return forewarn.Errorf(forewarn.EINVALID, "--relay-addr %q: %v", c.RelayAddr, err)
		}
	}
	for _, f := range []struct{ flag, v string }{{"--relay-cert", c.RelayCertFile}, {"--relay-key", c.RelayKeyFile},
		{"--relay-ca", c.RelayCAFile}} {
		if f.v == "" {
			return forewarn.Errorf(forewarn.EINVALID, "--relay-addr needs %s: relays and the server authenticate each other with certificates", f.flag)
		}
	}
	switch {
	case c.RelaysFile == "" && c.Relays == nil:
		return forewarn.Errorf(forewarn.EINVALID, "--relay-addr needs --relays FILE: the relays and the networks each may speak for")
	case c.RelaysFile != "" && c.Relays != nil:
		return forewarn.Errorf(forewarn.EINVALID, "--relays %s: the configuration also holds relays; give one of them", c.RelaysFile)
	case c.Relays != nil:
		return c.Relays.Validate()
	}
	return nil
}

// neutron reports whether c has a neutron listener.
func (c *Config) neutron() bool { return c.NeutronAddr != "" || c.NeutronListener != nil }

// validateNeutron reports whether the neutron listener's settings are
// whole: a listener and a shared secret, each with the other.
func (c *Config) validateNeutron() error {
	if !c.neutron() {
		switch {
		case c.NeutronSecretFile != "":
			return forewarn.Errorf(forewarn.EINVALID, "--neutron-secret-file needs --neutron-addr, the neutron listener it configures")
		case len(c.NeutronProxies) > 0:
			return forewarn.Errorf(forewarn.EINVALID, "--neutron-proxies needs --neutron-addr, the neutron listener it configures")
		}
		return nil
	}
	if c.NeutronListener == nil {
		if _, _, err := net.SplitHostPort(c.NeutronAddr); err != nil {
			return forewarn.Errorf(forewarn.EINVALID, "--neutron-addr %q: %v", c.NeutronAddr, err)
		}
	}
	if c.NeutronSecretFile == "" {
		return forewarn.Errorf(forewarn.EINVALID, "--neutron-addr needs --neutron-secret-file FILE: the shared secret (neutron's metadata_proxy_shared_secret) that signs each request's instance ID")
	}
	for _, p := range c.NeutronProxies {
		if !p.IsValid() {
			return forewarn.Errorf(forewarn.EINVALID, "--neutron-proxies holds %s: want address prefixes (CIDR), e.g. 10.0.0.0/24", p)
		}
	}
	return nil
}

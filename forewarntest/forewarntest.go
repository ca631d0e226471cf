// Package forewarntest runs a Forewarn server inside a Go test, in the
// spirit of net/http/httptest: NewServer starts the whole server (the
// lifecycle engine, the Azure, Compute Engine and EC2 metadata APIs and
// the operator API) in process, with an in-memory store, for a fleet
// the test describes, and stops it when the test ends.
//
// The metadata APIs know a VM by the source address of its requests.
// The clients a Server hands out, AzureClient, GCEClient, AWSClient and
// HTTPClient, each come from their VM's address: give the VMs of a test
// fleet addresses of 127.0.0.0/8 (on Linux every one of them is a
// loopback address; macOS needs an alias per address, or the in-memory
// transport below, which needs none).
//
//	func TestDrain(t *testing.T) {
//		srv := forewarntest.NewServer(t, forewarntest.Fleet(t, `vms: [{name: web_0, ip: 127.0.0.2}]`))
//		ev := srv.Reboot("web_0", forewarntest.EventOptions{Notice: time.Minute})
//		runDrainer(t, srv.URL(), srv.HTTPClient("web_0")) // the code under test: sees ev, drains, approves
//		srv.Wait(ev.ID, forewarn.Started)
//		if !srv.Approved(ev.ID) { t.Fatal("started without the drainer's approval") }
//	}
//
// A Server allows notices below the real minimums, has no per-VM rate
// limits, and starts as if every VM had already called its metadata API
// (and every Compute Engine VM read its maintenance-event key): events
// keep their notice from the start. WithoutEnablement starts it as a
// real server starts, where a Platform event for an Azure VM that has
// never called starts at once. WithConfig changes anything else.
//
// # Real notices in no time: synctest
//
// The real notices are long: 15 minutes for a Reboot or a Freeze. A test
// need not wait for them. Create the server inside a testing/synctest
// bubble, create the event with its normal notice, and sleep: the
// bubble's clock jumps to the next deadline as soon as every goroutine
// in it waits, so the notice elapses at once, and the engine's timer
// fires at NotBefore to the nanosecond.
//
//	func TestRebootOnTime(t *testing.T) {
//		synctest.Test(t, func(t *testing.T) {
//			srv := forewarntest.NewServer(t, fleet) // in a bubble: the in-memory transport
//			vm := srv.AzureClient("web_0")
//			ev := srv.Reboot("web_0", forewarntest.EventOptions{}) // NotBefore in 15 minutes
//			doc, _ := vm.Document(t.Context())                     // Scheduled, with that NotBefore
//			time.Sleep(time.Until(ev.NotBefore))                   // returns at once
//			synctest.Wait()                                        // the engine has started it
//			doc, _ = vm.Document(t.Context())                      // Started
//			srv.Wait(ev.ID, forewarn.Completed)                    // 5 minutes later, at once too
//		})
//	}
//
// Inside a bubble, time moves only when every goroutine of the bubble is
// durably blocked, and a goroutine waiting on a real socket is not. So a
// Server made inside a bubble serves over an in-memory transport: its
// listeners hand out net.Pipe connections whose remote address is the
// calling VM's, and the clients it gives dial them directly. Nothing
// else changes: the same http.Server and handlers answer. URL then names
// a host under the reserved .test domain that only this Server's
// clients reach. A Server made in a bubble must be used only inside it;
// the bubble's Cleanup closes it before the bubble ends. Code under test
// that needs its own http.Client must take the one HTTPClient gives.
// WithPipes chooses the transport explicitly, in a bubble or not.
//
// Outside a test, Start and Close run the same server; the examples do
// (go test -run Example -v runs them, go doc -http shows them).
package forewarntest

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/fleetfile"
	"github.com/forewarn/forewarn/server"
)

// TB is the part of testing.TB that a Server uses: *testing.T,
// *testing.B and *testing.F satisfy it. A Server reports every failure
// with Fatalf.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// Default wait timeouts: of the real clock, and of a synctest bubble's,
// where a day passes at once when nothing else is due.
const (
	DefaultWaitTimeout       = 30 * time.Second
	DefaultBubbleWaitTimeout = 24 * time.Hour
)

// The hosts of the in-memory transport's URLs.
const (
	pipeMetadataHost = "metadata.forewarn.test:80"
	pipeOperatorHost = "operator.forewarn.test:80"
)

// Option adjusts a Server made by NewServer or Start.
type Option func(*options)

type options struct {
	pipes       *bool
	configure   []func(*server.Config)
	logger      *slog.Logger
	waitTimeout time.Duration
	unenabled   bool
}

// WithPipes chooses the in-memory transport (on) or real loopback
// sockets (off). By default a Server uses the in-memory transport inside
// a synctest bubble and sockets elsewhere.
func WithPipes(on bool) Option {
	return func(o *options) { o.pipes = &on }
}

// WithConfig lets fn change the server's Config before it starts: to
// turn a rate limit on, set FirstCallDelay, or keep a data directory.
// Store, Fleet and the listeners are already set; fn may change them.
func WithConfig(fn func(*server.Config)) Option {
	return func(o *options) { o.configure = append(o.configure, fn) }
}

// WithLogger sends the server's logs to l. By default they are
// discarded.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// WithWaitTimeout sets how long Wait waits before it fails the test:
// DefaultWaitTimeout by default, DefaultBubbleWaitTimeout of the
// bubble's clock inside a synctest bubble.
func WithWaitTimeout(d time.Duration) Option {
	return func(o *options) { o.waitTimeout = d }
}

// WithoutEnablement starts the server as a real one starts: a VM's
// first call to its metadata API enables its scheduled events, a
// Platform event for an Azure VM whose service has not called starts at
// once, without its notice, and a live migration warns only a Compute
// Engine VM that has read its maintenance-event key.
func WithoutEnablement() Option {
	return func(o *options) { o.unenabled = true }
}

// Server is a Forewarn server running in process for a test. Its methods
// report failures through the TB it was made with.
type Server struct {
	t    TB
	srv  *server.Server
	ctx  context.Context // ends at Close
	stop context.CancelFunc
	ran  chan error // Run's result

	// md and op are the in-memory listeners, nil over sockets.
	md, op       *pipeListener
	mdURL, opURL string
	// operator is the source address of AdminClient and of the clients
	// of VMs without an address: one no VM of the fleet has.
	operator    netip.Addr
	waitTimeout time.Duration

	mu         sync.Mutex
	closed     bool
	transports []*http.Transport
}

// NewServer starts a Server for fleet, fails the test if it cannot, and
// closes it when the test ends (t.Cleanup).
func NewServer(t TB, fleet *forewarn.Fleet, opts ...Option) *Server {
	t.Helper()
	s, err := start(t, fleet, opts)
	if err != nil {
		t.Fatalf("forewarntest: start the server: %v", err)
		return nil
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Start starts a Server for fleet outside a test. Close it when done.
// It has no test to fail: its methods panic with the message they would
// give Fatalf.
func Start(fleet *forewarn.Fleet, opts ...Option) (*Server, error) {
	return start(panicTB{}, fleet, opts)
}

func start(t TB, fleet *forewarn.Fleet, opts []Option) (*Server, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if fleet == nil {
		return nil, forewarn.Errorf(forewarn.EINVALID, "no fleet (build one with Fleet or package fleetfile)")
	}
	bubble := inBubble()
	pipes := bubble
	if o.pipes != nil {
		pipes = *o.pipes
	}
	s := &Server{t: t, operator: freeAddr(fleet), waitTimeout: o.waitTimeout, ran: make(chan error, 1)}
	if s.waitTimeout <= 0 {
		s.waitTimeout = DefaultWaitTimeout
		if bubble {
			s.waitTimeout = DefaultBubbleWaitTimeout
		}
	}

	cfg := server.DefaultConfig()
	cfg.Store, cfg.DataDir, cfg.Fleet = server.StoreMem, "", fleet
	cfg.AllowShortNotice = true
	cfg.RateLimit, cfg.AWSRateLimit, cfg.GCERateLimit = 0, 0, 0
	cfg.MemoryHeadroom = 0 // the memory limit is the test process's, not the server's
	cfg.MetadataAddr, cfg.AdminAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Logger = o.logger
	if pipes {
		s.md, s.op = newPipeListener(pipeMetadataHost), newPipeListener(pipeOperatorHost)
		cfg.MetadataListener, cfg.AdminListener = s.md, s.op
	}
	for _, fn := range o.configure {
		fn(&cfg)
	}
	s.ctx, s.stop = context.WithCancel(context.Background())
	srv, err := server.New(s.ctx, cfg)
	if err != nil {
		s.stop()
		return nil, err
	}
	s.srv = srv
	s.mdURL, s.opURL = "http://"+srv.MetadataAddr().String(), "http://"+srv.AdminAddr().String()
	if pipes {
		s.mdURL, s.opURL = "http://"+strings.TrimSuffix(pipeMetadataHost, ":80"), "http://"+strings.TrimSuffix(pipeOperatorHost, ":80")
	}
	if !o.unenabled {
		for _, vm := range fleet.VMs {
			srv.Engine().NoteRequest(vm.Name)
			if vm.Provider == forewarn.GCE {
				srv.Engine().NoteQuery(vm.Name)
			}
		}
	}
	go func() { s.ran <- srv.Run(s.ctx) }()
	return s, nil
}

// Close shuts the server down, as Run does when its context ends, and
// closes the idle connections of the clients it gave. It reports the
// error that stopped the server, if any. Calling it again does nothing.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	trs := s.transports
	s.mu.Unlock()
	s.stop()
	err := <-s.ran
	for _, tr := range trs {
		tr.CloseIdleConnections()
	}
	return err
}

// Server returns the server itself: its handlers, metrics and history.
func (s *Server) Server() *server.Server { return s.srv }

// Fleet returns the server's inventory now: the fleet it started with,
// and every change made since (Engine().ChangeInventory, or the operator
// API). It must not be modified.
func (s *Server) Fleet() *forewarn.Fleet { return s.srv.Fleet() }

// URL returns the base URL of the metadata APIs, such as
// "http://127.0.0.1:41235", without a trailing slash. Over the
// in-memory transport only this Server's clients reach it.
func (s *Server) URL() string { return s.mdURL }

// AdminURL returns the base URL of the operator API.
func (s *Server) AdminURL() string { return s.opURL }

// Pipes reports whether the Server serves over the in-memory transport.
func (s *Server) Pipes() bool { return s.md != nil }

// Fleet parses a fleet file's YAML (see package fleetfile and the
// README's fleet file section) and fails the test if it is refused.
func Fleet(t TB, yaml string) *forewarn.Fleet {
	t.Helper()
	f, err := fleetfile.Parse([]byte(yaml))
	if err != nil {
		t.Fatalf("forewarntest: fleet: %s", forewarn.ErrorMessage(err))
		return nil
	}
	return f
}

// inBubble reports whether the calling goroutine runs in a synctest
// bubble: the runtime names the bubble in the goroutine's header line
// ("goroutine 7 [running, synctest bubble 1]:").
func inBubble() bool {
	var buf [256]byte
	n := runtime.Stack(buf[:], false)
	header, _, _ := strings.Cut(string(buf[:n]), "\n")
	return strings.Contains(header, ", synctest bubble ")
}

// freeAddr returns a loopback address no VM of f has, 127.0.0.1 when it
// is free.
func freeAddr(f *forewarn.Fleet) netip.Addr {
	taken := make(map[netip.Addr]bool, len(f.VMs))
	for _, vm := range f.VMs {
		if vm.IP.IsValid() {
			taken[vm.IP.Unmap()] = true
		}
	}
	a := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	for taken[a] {
		a = a.Next()
	}
	return a
}

// panicTB stands in for a test outside of one: Fatalf panics.
type panicTB struct{}

func (panicTB) Helper()        {}
func (panicTB) Cleanup(func()) {}
func (panicTB) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

// vmNames returns the fleet's VM names for messages, at most ten.
func vmNames(f *forewarn.Fleet) string {
	names := make([]string, 0, min(len(f.VMs), 11))
	for _, vm := range f.VMs {
		if len(names) == 10 {
			names = append(names, "...")
			break
		}
		names = append(names, vm.Name)
	}
	return strings.Join(names, ", ")
}

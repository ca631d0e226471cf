package relay_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/relay"
)

// inNetns runs fn on a thread moved into the network namespace name:
// sockets fn makes (listeners, connections) live there. The thread is
// discarded afterwards, never returned to other goroutines.
func inNetns(t *testing.T, name string, fn func()) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		f, err := os.Open("/var/run/netns/" + name)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", name, err)
			return
		}
		fn()
		errc <- nil
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// ipCmd runs ip(8) with args.
func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// TestRelayBindToDevice: one host, two tenant networks whose VMs have
// the same address, each VM on its own link to the host, and one relay
// listening on 169.254.169.254:80 on each link (SO_BINDTODEVICE). Each
// VM is told apart by the link its request came in on, and each gets
// its own answers.
func TestRelayBindToDevice(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip(8) to make network namespaces (Debian's iproute2)")
	}
	pre := fmt.Sprintf("fwd%d", os.Getpid()%100000)
	host, vm1, vm2 := pre+"h", pre+"a", pre+"b"
	if err := ipCmd("netns", "add", host); err != nil {
		t.Skip("cannot make a network namespace here:", err)
	}
	t.Cleanup(func() {
		for _, n := range []string{host, vm1, vm2} {
			_ = ipCmd("netns", "del", n) // deleting a namespace removes its veths
		}
	})
	steps := [][]string{
		{"netns", "add", vm1}, {"netns", "add", vm2},
		{"-n", host, "link", "set", "lo", "up"},
		{"-n", host, "addr", "add", "169.254.169.254/32", "dev", "lo"},
	}
	for i, vm := range []string{vm1, vm2} {
		h, v := fmt.Sprintf("%sh%d", pre, i), fmt.Sprintf("%sv%d", pre, i)
		steps = append(steps,
			[]string{"link", "add", h, "netns", host, "type", "veth", "peer", "name", v, "netns", vm},
			[]string{"-n", host, "link", "set", h, "up"},
			[]string{"-n", vm, "link", "set", "lo", "up"},
			[]string{"-n", vm, "link", "set", v, "up"},
			[]string{"-n", vm, "addr", "add", "198.18.10.2/32", "dev", v},
			[]string{"-n", vm, "route", "add", "169.254.169.254/32", "dev", v})
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			t.Fatal(err)
		}
	}

	p := newPKI(t)
	s := startServerOf(t, p, `
vms:
  - {name: blue_vm, ip: 198.18.10.2, network: blue}
  - {name: green_vm, ip: 198.18.10.2, network: green}
`)
	cfg := relay.DefaultConfig()
	cfg.Listeners = []relay.Listener{
		{Network: "blue", Addr: "169.254.169.254:80", Device: pre + "h0"},
		{Network: "green", Addr: "169.254.169.254:80", Device: pre + "h1"},
	}
	cfg.Servers = []string{"https://" + s.RelayAddr().String()}
	cfg.CertFile, cfg.KeyFile, cfg.CAFile = p.both.Cert, p.both.Key, p.both.CA
	cfg.MetricsAddr = ""
	// The relay's listeners are made in the host's namespace; its
	// connections to the server, made later by other threads, in this
	// one, where the server listens.
	var r *relay.Relay
	var err error
	inNetns(t, host, func() { r, err = relay.New(cfg) })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	get := func(vm, path string) (int, string) {
		t.Helper()
		var c net.Conn
		var derr error
		inNetns(t, vm, func() { c, derr = net.DialTimeout("tcp", "169.254.169.254:80", 5*time.Second) })
		if derr != nil {
			t.Fatalf("%s: %v", vm, derr)
		}
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			DialContext: func(context.Context, string, string) (net.Conn, error) { return c, nil }}}
		defer hc.CloseIdleConnections()
		req, _ := http.NewRequest("GET", "http://169.254.169.254"+path, nil)
		req.Header.Set("Metadata", "true")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", vm, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const name = "/metadata/instance/compute/name?api-version=2021-02-01&format=text"
	for vm, want := range map[string]string{vm1: "blue_vm", vm2: "green_vm"} {
		if st, b := get(vm, name); st != 200 || b != want {
			t.Fatalf("%s: %d %q, want %s", vm, st, b, want)
		}
	}
	// An event of blue_vm reaches the VM of the blue link only, though
	// both have its address.
	ev, err := s.Engine().Create(context.Background(), engine.Spec{Type: forewarn.Freeze, VMs: []string{"blue_vm"}})
	if err != nil {
		t.Fatal(err)
	}
	const events = "/metadata/scheduledevents?api-version=2020-07-01"
	if st, b := get(vm1, events); st != 200 || !strings.Contains(b, `"EventId":"`+ev.ID+`"`) {
		t.Fatalf("blue_vm's events: %d %q", st, b)
	}
	if st, b := get(vm2, events); st != 200 || b != `{"DocumentIncarnation":1,"Events":[]}` {
		t.Fatalf("green_vm's events: %d %q", st, b)
	}
}

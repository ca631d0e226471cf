package connlimit

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// mustBeEvicted checks that the server closed c without an answer.
func mustBeEvicted(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if len(b) > 0 || isTimeout(err) {
		t.Fatalf("connection from %s: got %q (err %v), want it closed without an answer", c.LocalAddr(), b, err)
	}
}

// mustStayOpen checks that the server has neither answered nor closed c.
func mustStayOpen(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	defer c.SetReadDeadline(time.Time{})
	var b [1]byte
	if n, err := c.Read(b[:]); n > 0 || !isTimeout(err) {
		t.Fatalf("connection from %s was answered or closed (%d bytes, %v), want it open", c.LocalAddr(), n, err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// held reports how many connections each address holds.
func held(l *Listener) map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := map[string]int{}
	for a, s := range l.sources {
		m[a.String()] = s.n
	}
	return m
}

// TestTotalMakesRoomFromTheHeaviest: once the total is reached, a new
// connection closes one of the source holding the most, as long as that
// source holds two more than the newcomer; when none does, the newcomer
// is refused.
func TestTotalMakesRoomFromTheHeaviest(t *testing.T) {
	l, accepted := listen(t, Config{PerSource: 5, Total: 6})
	var a []net.Conn
	for range 5 {
		a = append(a, dial(t, l, "127.0.0.2"))
		mustAccept(t, accepted, "127.0.0.2")
	}
	dial(t, l, "127.0.0.3")
	mustAccept(t, accepted, "127.0.0.3")

	// 127.0.0.4 holds none, 127.0.0.2 five: its oldest goes.
	dial(t, l, "127.0.0.4")
	mustAccept(t, accepted, "127.0.0.4")
	mustBeEvicted(t, a[0])
	for _, c := range a[1:] {
		mustStayOpen(t, c)
	}
	// One against four: again.
	dial(t, l, "127.0.0.4")
	mustAccept(t, accepted, "127.0.0.4")
	mustBeEvicted(t, a[1])
	// Two against three: refused, 127.0.0.2 would then hold fewer.
	mustBeRefused(t, dial(t, l, "127.0.0.4"))
	// One against three: room.
	dial(t, l, "127.0.0.3")
	mustAccept(t, accepted, "127.0.0.3")
	mustBeEvicted(t, a[2])
	// Now 2, 2, 2: nobody holds two more than anyone.
	for _, ip := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"} {
		if ip != "127.0.0.5" {
			mustBeRefused(t, dial(t, l, ip))
		}
	}
	dial(t, l, "127.0.0.5")
	mustAccept(t, accepted, "127.0.0.5")
	noneAccepted(t, accepted)
	if l.Evicted() != 4 || l.Refused() != 4 {
		t.Errorf("Evicted() = %d, Refused() = %d, want 4 and 4", l.Evicted(), l.Refused())
	}
	h := held(l)
	sum := 0
	for _, n := range h {
		sum += n
	}
	if sum != 6 || h["127.0.0.5"] != 1 {
		t.Errorf("held %v, want 6 in all, 1 of them 127.0.0.5's", h)
	}
}

// TestStrangersGiveWayFirst: when the total is reached, a known caller's
// new connection closes a stranger's, even one of a source lighter than
// the known ones; strangers make room only among themselves.
func TestStrangersGiveWayFirst(t *testing.T) {
	known := func(a netip.Addr) bool { return a.As4()[2] == 0 }
	l, accepted := listen(t, Config{PerSource: 5, Total: 4, Known: known, StrangerPerSource: 2, StrangerTotal: 2})
	for range 3 {
		dial(t, l, "127.0.0.2")
		mustAccept(t, accepted, "127.0.0.2")
	}
	s := dial(t, l, "127.0.1.1")
	mustAccept(t, accepted, "127.0.1.1")
	// 127.0.0.2 holds 3 and the stranger 1: the stranger's goes.
	dial(t, l, "127.0.0.2")
	mustAccept(t, accepted, "127.0.0.2")
	mustBeEvicted(t, s)
	// A stranger cannot take a known caller's place.
	mustBeRefused(t, dial(t, l, "127.0.1.2"))
	// A known one can, by the rule of the heaviest.
	dial(t, l, "127.0.0.3")
	mustAccept(t, accepted, "127.0.0.3")
	noneAccepted(t, accepted)
	if h := held(l); h["127.0.0.2"] != 3 || h["127.0.0.3"] != 1 || len(h) != 2 {
		t.Errorf("held %v, want 127.0.0.2 3 and 127.0.0.3 1", h)
	}
}

// TestStrangersMakeRoomAmongThemselves: at the strangers' cap, a
// stranger holding none takes the place of one holding two.
func TestStrangersMakeRoomAmongThemselves(t *testing.T) {
	l, accepted := listen(t, Config{PerSource: 5, Total: 10, Known: func(netip.Addr) bool { return false },
		StrangerPerSource: 2, StrangerTotal: 3})
	var first net.Conn
	for i := range 2 {
		c := dial(t, l, "127.0.1.1")
		if i == 0 {
			first = c
		}
		mustAccept(t, accepted, "127.0.1.1")
	}
	dial(t, l, "127.0.1.2")
	mustAccept(t, accepted, "127.0.1.2")
	dial(t, l, "127.0.1.3")
	mustAccept(t, accepted, "127.0.1.3")
	mustBeEvicted(t, first)
	mustBeRefused(t, dial(t, l, "127.0.1.4"))
	noneAccepted(t, accepted)
}

// TestIdleConnectionsGoFirst drives an http.Server whose ConnState hook
// is the Listener's: of the heaviest source's connections, the one kept
// alive between requests is closed first, and its requests in flight (a
// held long-poll) are served; when it has only active ones left, the
// oldest is closed without an answer.
func TestIdleConnectionsGoFirst(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := New(ln, Config{PerSource: 3, Total: 3, Refusal: refusal})
	release := make(chan struct{})
	var holding atomic.Int32
	srv := &http.Server{ConnState: l.ConnState, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			holding.Add(1)
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		io.WriteString(w, "ok")
	})}
	go srv.Serve(l)
	defer srv.Close()
	defer close(release)

	type reply struct {
		status string
		err    error
	}
	// ask sends a request on c and returns the answer's status line.
	ask := func(c net.Conn, r *bufio.Reader, path string) reply {
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			return reply{err: err}
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return reply{status: resp.Status}
	}
	// 127.0.0.2 holds two long-polls and one idle kept-alive connection.
	holds := make([]chan reply, 2)
	for i := range holds {
		holds[i] = make(chan reply, 1)
		c := dial(t, l, "127.0.0.2")
		go func() { holds[i] <- ask(c, bufio.NewReader(c), "/hold") }()
		for holding.Load() != int32(i+1) {
			time.Sleep(time.Millisecond)
		}
	}
	idle := dial(t, l, "127.0.0.2")
	if r := ask(idle, bufio.NewReader(idle), "/"); r.status != "200 OK" {
		t.Fatalf("the idle connection's request: %+v", r)
	}
	// net/http reports it idle just after the answer is sent.
	for deadline := time.Now().Add(5 * time.Second); idleConns(l, "127.0.0.2") != 1; {
		if time.Now().After(deadline) {
			t.Fatal("the kept-alive connection was never reported idle")
		}
		time.Sleep(time.Millisecond)
	}

	b := dial(t, l, "127.0.0.3")
	if r := ask(b, bufio.NewReader(b), "/"); r.status != "200 OK" {
		t.Fatalf("a newcomer at the total: %+v, want 200", r)
	}
	mustBeEvicted(t, idle)
	for _, h := range holds {
		select {
		case r := <-h:
			t.Fatalf("a long-poll ended (%+v) when an idle connection could go", r)
		default:
		}
	}

	// Only active connections are left to 127.0.0.2: the oldest goes.
	c := dial(t, l, "127.0.0.4")
	if r := ask(c, bufio.NewReader(c), "/"); r.status != "200 OK" {
		t.Fatalf("a newcomer at the total: %+v, want 200", r)
	}
	select {
	case r := <-holds[0]:
		if r.err == nil {
			t.Errorf("the oldest long-poll answered %q, want its connection closed", r.status)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the oldest long-poll of the heaviest source was not closed")
	}
	select {
	case r := <-holds[1]:
		t.Fatalf("the other long-poll ended: %+v", r)
	default:
	}
	if l.Evicted() != 2 {
		t.Errorf("Evicted() = %d, want 2", l.Evicted())
	}
}

// idleConns returns how many of ip's connections are idle.
func idleConns(l *Listener, ip string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	if s := l.sources[netip.MustParseAddr(ip)]; s != nil {
		for c := s.first; c != nil; c = c.next {
			if c.idle() {
				n++
			}
		}
	}
	return n
}

// fakeConn is a connection of no socket from an address.
type fakeConn struct {
	net.Conn // nil: only the methods below are called
	addr     net.Addr
	closed   atomic.Bool
}

func (c *fakeConn) RemoteAddr() net.Addr                { return c.addr }
func (c *fakeConn) Write(p []byte) (int, error)         { return len(p), nil }
func (c *fakeConn) SetWriteDeadline(time.Time) error    { return nil }
func (c *fakeConn) Close() error                        { c.closed.Store(true); return nil }
func (c *fakeConn) String() string                      { return c.addr.String() }
func (c *fakeConn) SetReadDeadline(t time.Time) error   { return nil }
func (c *fakeConn) SetDeadline(t time.Time) error       { return nil }
func (c *fakeConn) Read(p []byte) (n int, err error)    { return 0, io.EOF }
func (c *fakeConn) LocalAddr() net.Addr                 { return c.addr }
func (c *fakeConn) CloseWrite() error                   { return nil }
func (c *fakeConn) ReadFrom(r io.Reader) (int64, error) { return io.Copy(io.Discard, r) }

// TestFewSourcesCannotFillTheTotal at the scale of a fleet of 100,000
// VMs with a total of 17,936 (the cap derived from 20,000 open files):
// 9,999 of them (fewer than 10%) try 48 connections each, in turn, and
// keep every one they get; then each of the other 90,001 VMs opens a
// connection, the first 1,000 keeping theirs and the others closing
// theirs, whose place an attacker takes again at once. No connection of
// those 90,001 may be refused, and none of the 1,000 kept may be taken.
// A scan of every source per admission would take hours here.
func TestFewSourcesCannotFillTheTotal(t *testing.T) {
	const (
		vms       = 100_000
		attackers = vms/10 - 1
		perSource = 48
		total     = 17_936
		kept      = 1000
	)
	l := New(nil, Config{PerSource: perSource, Total: total})
	addr := func(i int) net.Addr {
		return &net.TCPAddr{IP: net.IPv4(10, byte(i>>16), byte(i>>8), byte(i)), Port: 1}
	}
	start := time.Now()
	var attacks []*fakeConn
	for range perSource {
		for i := range attackers {
			c := &fakeConn{addr: addr(i)}
			if l.admit(c) != nil {
				attacks = append(attacks, c)
			}
		}
	}
	h := held(l)
	t.Logf("attack: %d tries, %d admitted, %d evicted, %d refused in %v; the heaviest attacker holds %d",
		attackers*perSource, len(attacks), l.Evicted(), l.Refused(), time.Since(start), l.known.top)
	if len(h) != attackers || l.known.total != total || l.known.top != 2 {
		t.Fatalf("%d attackers hold %d connections, the heaviest %d; want all %d to hold the %d, 1 or 2 each",
			len(h), l.known.total, l.known.top, attackers, total)
	}

	start = time.Now()
	refused := 0
	var keep []net.Conn
	for i := attackers; i < vms; i++ {
		c := l.admit(&fakeConn{addr: addr(i)})
		switch {
		case c == nil:
			refused++
		case i < attackers+kept:
			keep = append(keep, c)
		default:
			c.Close()
			if a := l.admit(&fakeConn{addr: addr(i % attackers)}); a == nil {
				t.Fatalf("an attacker could not take a freed place again")
			}
		}
	}
	t.Logf("%d other VMs: %d refused in %v; %d evicted in all", vms-attackers, refused, time.Since(start), l.Evicted())
	if refused > 0 {
		t.Errorf("%d of %d other VMs were refused a connection while %d VMs held the total", refused, vms-attackers, attackers)
	}
	for _, c := range keep {
		if c.(*conn).Conn.(*fakeConn).closed.Load() {
			t.Fatalf("a kept connection of %s was closed for another", c.RemoteAddr())
		}
	}
	if h := held(l); len(h) != attackers+kept || l.known.total != total {
		t.Errorf("%d sources hold %d, want %d hold the total %d", len(h), l.known.total, attackers+kept, total)
	}
}

// TestWriteTimeoutCutsAReaderThatStops: a write to a client that never
// reads fails once the buffers are full and the write timeout passes;
// without a timeout the write would block for ever.
func TestWriteTimeoutCutsAReaderThatStops(t *testing.T) {
	const d = 300 * time.Millisecond
	l, accepted := listen(t, Config{WriteTimeout: d})
	dial(t, l, "127.0.0.2") // never read
	c := mustAccept(t, accepted, "127.0.0.2")
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := c.Write(make([]byte, 256<<20))
		done <- err
	}()
	select {
	case err := <-done:
		if !isTimeout(err) {
			t.Errorf("the write failed with %v, want a timeout", err)
		}
		t.Logf("the write failed after %v", time.Since(start))
	case <-time.After(10 * time.Second):
		c.Close()
		t.Fatal("a write to a client that never reads did not end in 10 s")
	}
}

// TestWriteTimeoutSparesASlowReader: a write that takes many times the
// write timeout to a client that reads slowly but steadily succeeds,
// and so does a write after a silence longer than the timeout (a held
// long-poll's answer).
func TestWriteTimeoutSparesASlowReader(t *testing.T) {
	const d = 250 * time.Millisecond
	l, accepted := listen(t, Config{WriteTimeout: d})
	client := dial(t, l, "127.0.0.2")
	c := mustAccept(t, accepted, "127.0.0.2")

	const size = 32 << 20
	read := make(chan int64, 1)
	go func() {
		var n int64
		buf := make([]byte, 256<<10)
		for n < size {
			k, err := client.Read(buf)
			n += int64(k)
			if err != nil {
				break
			}
			time.Sleep(10 * time.Millisecond) // at most 25 MiB/s
		}
		read <- n
	}()
	start := time.Now()
	if _, err := c.Write(make([]byte, size)); err != nil {
		t.Fatalf("a write to a slow reader: %v", err)
	}
	took := time.Since(start)
	if n := <-read; n != size {
		t.Fatalf("the reader got %d bytes, want %d", n, size)
	}
	t.Logf("writing %d MiB to a slow reader took %v (write timeout %v)", size>>20, took, d)
	if took < 3*d {
		t.Errorf("the write took %v, not long enough to show that a write longer than the timeout %v is spared", took, d)
	}

	time.Sleep(2 * d)
	if _, err := io.WriteString(c, "late answer"); err != nil {
		t.Fatalf("a write after a silence longer than the timeout: %v", err)
	}
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, len("late answer"))
	if _, err := io.ReadFull(client, b); err != nil || string(b) != "late answer" {
		t.Fatalf("read %q, %v", b, err)
	}
}

// TestWriteTimeoutKeepsASoonerDeadline: a deadline set on the
// connection that is sooner than the write timeout (net/http's, or a
// handler's through http.ResponseController) still ends the write.
func TestWriteTimeoutKeepsASoonerDeadline(t *testing.T) {
	l, accepted := listen(t, Config{WriteTimeout: time.Hour})
	dial(t, l, "127.0.0.2") // never read
	c := mustAccept(t, accepted, "127.0.0.2")
	c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	done := make(chan error, 1)
	go func() {
		_, err := c.Write(make([]byte, 256<<20))
		done <- err
	}()
	select {
	case err := <-done:
		if !isTimeout(err) {
			t.Errorf("the write failed with %v, want a timeout", err)
		}
	case <-time.After(10 * time.Second):
		c.Close()
		t.Fatal("the connection's own write deadline was not kept")
	}
	// Lifting it leaves the write timeout, an hour here.
	c.SetWriteDeadline(time.Time{})
	lc := c.(*conn)
	lc.dmu.Lock()
	d := lc.deadline
	lc.dmu.Unlock()
	if d != noDeadline {
		t.Errorf("a lifted deadline is kept as %v", d)
	}
}

// TestKnownFollowsItsFunction: an address that becomes a known caller's
// while it holds connections as a stranger (a VM added to the inventory)
// moves, with them, under the known callers' caps at its next
// connection, leaving the strangers' room to others; and back under the
// strangers' caps when it stops being one (a VM removed), its
// connections the first to go for a known caller.
func TestKnownFollowsItsFunction(t *testing.T) {
	x := netip.MustParseAddr("10.0.0.1")
	var vm atomic.Bool // x is a VM's address
	l := New(nil, Config{PerSource: 5, Total: 8, Known: func(a netip.Addr) bool { return a != x || vm.Load() },
		StrangerPerSource: 2, StrangerTotal: 4})
	from := func(ip string) net.Conn {
		return l.admit(&fakeConn{addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 1}})
	}
	for range 2 {
		if from("10.0.0.1") == nil {
			t.Fatal("a stranger's first two connections were refused")
		}
	}
	if from("10.0.0.1") != nil {
		t.Fatal("a stranger's third connection was admitted")
	}
	vm.Store(true)
	var xs []net.Conn
	for i := range 3 {
		c := from("10.0.0.1")
		if c == nil {
			t.Fatalf("the address's connection %d was refused once it was a VM's", 3+i)
		}
		xs = append(xs, c)
	}
	if from("10.0.0.1") != nil {
		t.Fatal("a VM's sixth connection was admitted over its cap of 5")
	}
	if l.known.total != 5 || l.strange.total != 0 {
		t.Fatalf("%d known and %d stranger connections, want 5 and 0", l.known.total, l.strange.total)
	}
	vm.Store(false)
	if from("10.0.0.1") != nil {
		t.Fatal("the address holding 5 was admitted once it was no VM's")
	}
	if l.known.total != 0 || l.strange.total != 5 {
		t.Fatalf("%d known and %d stranger connections, want 0 and 5", l.known.total, l.strange.total)
	}
	// The total (8) is reached with 3 known connections: strangers'
	// connections go first, the oldest of the heaviest.
	for range 3 {
		if from("10.0.0.2") == nil {
			t.Fatal("a known caller was refused")
		}
	}
	if from("10.0.0.3") == nil || l.known.total != 4 || l.strange.total != 4 || l.Evicted() != 1 {
		t.Fatalf("%d known and %d stranger connections, %d evicted; want 4, 4 and 1", l.known.total, l.strange.total, l.Evicted())
	}
	xs[2].Close()
	if l.strange.total != 3 || l.sources[x].n != 3 {
		t.Fatalf("after a close, the strangers hold %d and the address %d; want 3 and 3", l.strange.total, l.sources[x].n)
	}
}

// deadlineConn is a fakeConn that records the write deadlines set on it.
type deadlineConn struct {
	fakeConn
	sets []time.Time
}

func (c *deadlineConn) SetWriteDeadline(t time.Time) error {
	c.sets = append(c.sets, t)
	return nil
}

// TestWriteDeadlineMovesOncePerSlack: a connection answering request
// after request, net/http lifting the write deadline after each answer,
// has its socket's write deadline set about once per tenth of the write
// timeout, not per answer; and every write still gets at least the
// timeout and at most a tenth more, or a sooner deadline set on it.
func TestWriteDeadlineMovesOncePerSlack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 10 * time.Second
		l := New(nil, Config{WriteTimeout: timeout})
		dc := &deadlineConn{fakeConn: fakeConn{addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 1}}}
		c := l.admit(dc)
		// Covered reports whether the deadline on the socket gives a
		// write made now at least the timeout and at most the slack more.
		covered := func() bool {
			if len(dc.sets) == 0 {
				return false
			}
			left := time.Until(dc.sets[len(dc.sets)-1])
			return left >= timeout && left <= timeout+timeout/writeSlack
		}
		const answers = 10_000
		for range answers {
			if _, err := c.Write([]byte("HTTP/1.1 200 OK\r\n\r\n")); err != nil {
				t.Fatal(err)
			}
			if !covered() {
				t.Fatalf("after %d deadlines, the last %v leaves %v at a write; want %v to %v",
					len(dc.sets), dc.sets[len(dc.sets)-1], time.Until(dc.sets[len(dc.sets)-1]), timeout, timeout+timeout/writeSlack)
			}
			c.SetWriteDeadline(time.Time{}) // as net/http after each answer
			time.Sleep(time.Millisecond)
		}
		// 10 s of answers with a slack of 1 s.
		if n := len(dc.sets); n > 11 {
			t.Errorf("%d answers over %v set the write deadline %d times, want at most 11", answers, answers*time.Millisecond, n)
		}

		// A sooner deadline of the user's is set at once and kept.
		soon := time.Now().Add(time.Second)
		c.SetWriteDeadline(soon)
		c.Write([]byte("x"))
		if got := dc.sets[len(dc.sets)-1]; !got.Equal(soon) {
			t.Errorf("the socket's deadline is %v after the user set %v", got, soon)
		}
		// Lifting it gives the socket the timeout's again, at once.
		c.SetWriteDeadline(time.Time{})
		if !covered() {
			t.Errorf("after the user's deadline was lifted, the socket's is %v", dc.sets[len(dc.sets)-1])
		}
		// A later deadline of the user's than the timeout's leaves the
		// timeout's bound.
		c.SetWriteDeadline(time.Now().Add(time.Hour))
		c.Write([]byte("x"))
		if !covered() {
			t.Errorf("under a user's deadline an hour away, the socket's is %v", dc.sets[len(dc.sets)-1])
		}
	})
}

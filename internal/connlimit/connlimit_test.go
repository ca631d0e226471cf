package connlimit

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"
)

var refusal = []byte("HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")

// listen starts a capped listener on loopback and accepts from it until
// the test ends, handing over each accepted connection.
func listen(t *testing.T, cfg Config) (*Listener, <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Refusal = refusal
	l := New(ln, cfg)
	accepted := make(chan net.Conn, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		close(accepted)
		for c := range accepted {
			c.Close()
		}
	})
	return l, accepted
}

// dial connects to l from the loopback address ip.
func dial(t *testing.T, l net.Listener, ip string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// mustAccept returns the server's end of the next accepted connection.
func mustAccept(t *testing.T, accepted <-chan net.Conn, from string) net.Conn {
	t.Helper()
	select {
	case c := <-accepted:
		if got := sourceAddr(c.RemoteAddr()).String(); got != from {
			t.Fatalf("accepted a connection from %s, want %s", got, from)
		}
		return c
	case <-time.After(5 * time.Second):
		t.Fatalf("the connection from %s was not accepted", from)
		return nil
	}
}

// mustBeRefused checks that the server sent the refusal on c and closed it.
func mustBeRefused(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection from %s still open: not refused", c.LocalAddr())
	}
	if !bytes.Equal(b, refusal) {
		t.Errorf("refused connection got %q (err %v), want the refusal", b, err)
	}
}

// noneAccepted checks that no connection is waiting to be handed over.
func noneAccepted(t *testing.T, accepted <-chan net.Conn) {
	t.Helper()
	select {
	case c := <-accepted:
		t.Fatalf("accepted a connection from %s over the cap", c.RemoteAddr())
	default:
	}
}

func TestPerSourceCap(t *testing.T) {
	l, accepted := listen(t, Config{PerSource: 2, Total: 10})
	for range 2 {
		dial(t, l, "127.0.0.2")
		mustAccept(t, accepted, "127.0.0.2")
	}
	mustBeRefused(t, dial(t, l, "127.0.0.2"))
	// Another address is not affected.
	dial(t, l, "127.0.0.3")
	mustAccept(t, accepted, "127.0.0.3")
	noneAccepted(t, accepted)
	if n := l.Refused(); n != 1 {
		t.Errorf("Refused() = %d, want 1", n)
	}
}

func TestTotalCap(t *testing.T) {
	l, accepted := listen(t, Config{PerSource: 5, Total: 3})
	for i := 2; i <= 4; i++ {
		ip := "127.0.0." + strconv.Itoa(i)
		dial(t, l, ip)
		mustAccept(t, accepted, ip)
	}
	mustBeRefused(t, dial(t, l, "127.0.0.5"))
	mustBeRefused(t, dial(t, l, "127.0.0.2"))
	noneAccepted(t, accepted)
}

func TestReleaseOnClose(t *testing.T) {
	l, accepted := listen(t, Config{PerSource: 1, Total: 1})
	dial(t, l, "127.0.0.2")
	c := mustAccept(t, accepted, "127.0.0.2")
	mustBeRefused(t, dial(t, l, "127.0.0.3"))
	// Closing twice frees one place, not two.
	c.Close()
	c.Close()
	dial(t, l, "127.0.0.3")
	mustAccept(t, accepted, "127.0.0.3")
	mustBeRefused(t, dial(t, l, "127.0.0.2"))
	noneAccepted(t, accepted)
	l.mu.Lock()
	defer l.mu.Unlock()
	if total := l.known.total + l.strange.total; total != 1 || len(l.sources) != 1 {
		t.Errorf("counted %d open from %d sources, want 1 from 1", total, len(l.sources))
	}
}

func TestStrangersCannotCrowdOutKnownCallers(t *testing.T) {
	known := netip.MustParseAddr("127.0.0.2")
	l, accepted := listen(t, Config{PerSource: 3, Total: 10,
		Known:             func(a netip.Addr) bool { return a == known },
		StrangerPerSource: 1, StrangerTotal: 2})
	dial(t, l, "127.0.1.1")
	mustAccept(t, accepted, "127.0.1.1")
	mustBeRefused(t, dial(t, l, "127.0.1.1")) // one each
	dial(t, l, "127.0.1.2")
	mustAccept(t, accepted, "127.0.1.2")
	mustBeRefused(t, dial(t, l, "127.0.1.3")) // two together
	for range 3 {
		dial(t, l, "127.0.0.2")
		mustAccept(t, accepted, "127.0.0.2")
	}
	mustBeRefused(t, dial(t, l, "127.0.0.2"))
	noneAccepted(t, accepted)
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRefusalsAreLoggedInSummaries(t *testing.T) {
	var out syncBuffer
	l, accepted := listen(t, Config{PerSource: 1, Name: "metadata", LogEvery: time.Hour,
		Logger: slog.New(slog.NewTextHandler(&out, nil))})
	dial(t, l, "127.0.0.2")
	mustAccept(t, accepted, "127.0.0.2")
	const n = 50
	for range n {
		mustBeRefused(t, dial(t, l, "127.0.0.2"))
	}
	l.Close() // logs what is pending
	lines := regexp.MustCompile(`refused=(\d+)`).FindAllStringSubmatch(out.String(), -1)
	sum := 0
	for _, m := range lines {
		k, _ := strconv.Atoi(m[1])
		sum += k
	}
	// The first refusal is logged at once; the rest wait for LogEvery
	// or Close.
	if len(lines) < 1 || len(lines) > 2 || sum != n {
		t.Errorf("%d log lines counting %d refusals, want 1 or 2 lines counting %d:\n%s", len(lines), sum, n, out.String())
	}
	if want := `sources="127.0.0.2=`; !bytes.Contains([]byte(out.String()), []byte(want)) {
		t.Errorf("log does not name the source (%q):\n%s", want, out.String())
	}
}

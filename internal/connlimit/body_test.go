package connlimit

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// rawRequest sends raw bytes to srv on a new connection and returns it.
func rawRequest(t *testing.T, srv *httptest.Server, req string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	return c
}

const stalledPost = "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 65536\r\n\r\n{"

func TestBodyTimeoutEndsAStalledBody(t *testing.T) {
	const d = 200 * time.Millisecond
	type result struct {
		err     error
		elapsed time.Duration
	}
	got := make(chan result, 1)
	srv := httptest.NewServer(BodyTimeout(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		_, err := io.ReadAll(r.Body)
		got <- result{err, time.Since(start)}
		w.WriteHeader(http.StatusBadRequest)
	}), d))
	defer srv.Close()
	rawRequest(t, srv, stalledPost)
	select {
	case r := <-got:
		var ne net.Error
		if !errors.As(r.err, &ne) || !ne.Timeout() {
			t.Errorf("reading a stalled body: %v, want a timeout", r.err)
		}
		if r.elapsed < d/2 || r.elapsed > d+2*time.Second {
			t.Errorf("the stalled body took %v to fail, want about %v", r.elapsed, d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("reading a stalled body did not end")
	}
}

func TestBodyTimeoutClosesARefusalAtOnce(t *testing.T) {
	const d = time.Minute // far longer than the test waits
	srv := httptest.NewServer(BodyTimeout(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		http.Error(w, "no", http.StatusForbidden)
	}), d))
	defer srv.Close()
	c := rawRequest(t, srv, stalledPost)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("status %d, want 403", resp.StatusCode)
	}
	// The server closes the connection instead of waiting for the body.
	_, err = io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the refused connection is still open after 5 s")
	}
}

func TestBodyTimeoutSparesRequestsThatOutliveIt(t *testing.T) {
	const d = 100 * time.Millisecond
	srv := httptest.NewServer(BodyTimeout(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		// A held long-poll, or a slow handler after its body.
		select {
		case <-r.Context().Done():
			http.Error(w, "cancelled", http.StatusInternalServerError)
		case <-time.After(5 * d):
			io.WriteString(w, "ok")
		}
	}), d))
	defer srv.Close()
	for _, method := range []string{"GET", "POST"} {
		req, _ := http.NewRequest(method, srv.URL, nil)
		if method == "POST" {
			req.Body = io.NopCloser(strings.NewReader(`{"StartRequests":[]}`))
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s held for %v under a %v body deadline: %d %s", method, 5*d, d, resp.StatusCode, b)
		}
	}
}

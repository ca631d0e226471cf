package aws_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/forewarn/forewarn/aws"
)

// TestUnauthorizedClosesConnection, over a real socket: a GET whose token
// is missing (tokens required) or invalid gets 401 with
// Connection: close, and the connection is closed after it, as after a
// 403 or a 429, so that a refused caller holds nothing: a request
// pipelined behind it is not answered. A 404 keeps the connection.
func TestUnauthorizedClosesConnection(t *testing.T) {
	_, s := setup(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: s, ConnContext: aws.ConnContext}
	go srv.Serve(ln)
	defer srv.Close()
	// ec2_0 (127.0.0.2) requires tokens; opt_1 (127.0.0.3) does not. An
	// expired token takes the path of an invalid one.

	get := func(tok string) string {
		r := "GET /latest/meta-data/instance-id HTTP/1.1\r\nHost: 169.254.169.254\r\n"
		if tok != "" {
			r += aws.TokenHeader + ": " + tok + "\r\n"
		}
		return r + "\r\n"
	}
	for _, c := range []struct {
		name, ip, first string
		status          int
		closes          bool
	}{
		{"no token, tokens required", "127.0.0.2", get(""), 401, true},
		{"a token that is not one", "127.0.0.2", get("AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=="), 401, true},
		{"an invalid token, tokens optional", "127.0.0.3", get("bogus"), 401, true},
		{"a 404", "127.0.0.3", "GET /latest/meta-data/no-such-key HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n", 404, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(c.ip)}}
			conn, err := d.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			// The first request, and an IMDSv1 GET pipelined behind it.
			if _, err := io.WriteString(conn, c.first+"GET /latest/meta-data/instance-id HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.status || string(body) != errorPage(c.status) {
				t.Fatalf("first answer: %d %q, want %d and the error page", resp.StatusCode, body, c.status)
			}
			if resp.Close != c.closes {
				t.Errorf("Connection: close is %v, want %v", resp.Close, c.closes)
			}
			next, err := http.ReadResponse(br, nil)
			switch {
			case c.closes && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !isReset(err):
				t.Errorf("after the %d: %v, want the connection closed", c.status, err)
				if next != nil {
					t.Errorf("the pipelined request was answered %d", next.StatusCode)
				}
			case !c.closes && err != nil:
				t.Errorf("after the %d the connection closed: %v", c.status, err)
			}
		})
	}
}

// isReset reports whether err is the connection reset by the peer.
func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && strings.Contains(op.Err.Error(), "reset")
}

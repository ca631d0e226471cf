package retry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestStatus(t *testing.T) {
	for code, want := range map[int]bool{200: false, 400: false, 403: false, 404: false, 410: true, 429: true, 500: true, 503: true} {
		if Status(code) != want {
			t.Errorf("Status(%d) = %v", code, !want)
		}
	}
}

func TestError(t *testing.T) {
	if !Error(io.ErrUnexpectedEOF) || !Error(errors.New("connection refused")) {
		t.Error("transport failures must be retried")
	}
	if Error(Permanent{Err: errors.New("bad URL")}) || Error(errors.Join(errors.New("x"), Permanent{Err: io.EOF})) {
		t.Error("a Permanent error must not be retried")
	}
}

func TestAfter(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	h := func(v string) http.Header { return http.Header{"Retry-After": {v}} }
	cases := []struct {
		status int
		hdr    http.Header
		want   time.Duration
		ok     bool
	}{
		{429, h("3"), 3 * time.Second, true},
		{503, h(" 0 "), 0, true},
		{503, h("Sat, 21 Nov 2026 12:00:05 GMT"), 5 * time.Second, true},
		{503, h("Sat, 21 Nov 2026 11:00:00 GMT"), 0, true},
		{500, h("3"), 0, false},
		{429, h("soon"), 0, false},
		{429, http.Header{}, 0, false},
		{429, h("-1"), 0, false},
	}
	for _, c := range cases {
		if got, ok := After(c.status, c.hdr, now); got != c.want || ok != c.ok {
			t.Errorf("After(%d, %v) = %v %v, want %v %v", c.status, c.hdr, got, ok, c.want, c.ok)
		}
	}
}

func TestBackoff(t *testing.T) {
	for n := range 70 {
		bound := time.Second // 10ms·2ⁿ passes the ceiling from attempt 7 on
		if n < 7 {
			bound = 10 * time.Millisecond << n
		}
		for range 50 {
			if d := Backoff(10*time.Millisecond, time.Second, n); d < 0 || d > bound {
				t.Fatalf("Backoff(attempt %d) = %v, want within [0, %v]", n, d, bound)
			}
		}
	}
	if Backoff(0, 0, 3) != 0 {
		t.Fatal("a zero bound must give no wait")
	}
}

func TestSleep(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on a cancelled context: %v", err)
	}
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatal(err)
	}
}

func TestDo(t *testing.T) {
	ctx := context.Background()
	transient := errors.New("connection reset")
	var got []string
	note := func(n int, err error, a Answer, wait time.Duration) {
		got = append(got, fmt.Sprintf("%d %v %d", n, err, a.Status))
	}
	// A transport error and a 503, retried; then a final answer.
	n := 0
	err := Do(ctx, time.Microsecond, time.Microsecond, func(context.Context) (Answer, error) {
		n++
		switch n {
		case 1:
			return Answer{}, transient
		case 2:
			return Answer{Status: 503, Header: http.Header{}, Err: errors.New("503 Service Unavailable")}, nil
		}
		return Answer{}, nil
	}, note)
	if err != nil || n != 3 || !slices.Equal(got, []string{"1 connection reset 0", "2 <nil> 503"}) {
		t.Fatalf("Do: %v after %d attempts, notes %q", err, n, got)
	}
	// A permanent error ends at once, unwrapped to what try returned.
	perm := Permanent{Err: errors.New("bad URL")}
	n = 0
	err = Do(ctx, time.Microsecond, time.Microsecond, func(context.Context) (Answer, error) { n++; return Answer{}, perm }, nil)
	if n != 1 || !errors.Is(err, perm) {
		t.Fatalf("permanent: %v after %d attempts", err, n)
	}
	// When ctx ends, the error says so, with the last attempt's error.
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	err = Do(cctx, time.Millisecond, time.Millisecond, func(context.Context) (Answer, error) {
		return Answer{Status: 500, Err: errors.New("500 boom")}, nil
	}, nil)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "last attempt: 500 boom") {
		t.Fatalf("ctx end: %v", err)
	}
}

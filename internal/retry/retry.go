// Package retry holds the retry policy the metadata clients share:
// which failures are worth another attempt, how long to wait (full
// jitter exponential backoff, or what Retry-After asks), and a
// context-aware sleep.
package retry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Status reports whether an answer with status code may change when
// asked again: throttling, a gone resource (IMDS answers 410 while it
// starts) and server errors.
func Status(code int) bool {
	return code == http.StatusTooManyRequests || code == http.StatusGone || code >= 500
}

// Error reports whether a failed request may succeed when sent again:
// any failure to connect, send or read (refused, reset, EOF, timeouts,
// name resolution), but not a Permanent one nor a certificate that does
// not verify.
func Error(err error) bool {
	var (
		perm    Permanent
		verify  *tls.CertificateVerificationError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
	)
	return !errors.As(err, &perm) && !errors.As(err, &verify) && !errors.As(err, &unknown) && !errors.As(err, &host)
}

// Permanent marks a failure that sending the request again cannot fix,
// such as one to build it.
type Permanent struct{ Err error }

func (e Permanent) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e Permanent) Unwrap() error { return e.Err }

// After returns the wait a 429 or 503 answer asks for in its Retry-After
// header, in seconds or as an HTTP date.
func After(status int, h http.Header, now time.Time) (time.Duration, bool) {
	if status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable {
		return 0, false
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
		return time.Duration(min(n, math.MaxInt64/int64(time.Second))) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// Backoff returns the wait before retry attempt n (from 0): a uniform
// random duration up to min(ceiling, initial·2ⁿ), the "full jitter" scheme.
func Backoff(initial, ceiling time.Duration, n int) time.Duration {
	bound := ceiling
	if n < 62 {
		if b := initial << n; b > 0 && b < ceiling {
			bound = b
		}
	}
	if bound <= 0 {
		return 0
	}
	return rand.N(bound + 1)
}

// Sleep waits d or until ctx ends, whichever comes first.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Answer is what one attempt got that may be worth another: a status
// that retrying may change (Err, the error to report, is then not nil)
// with the headers that may say how long to wait. The zero Answer is a
// final one.
type Answer struct {
	Status int
	Header http.Header
	Err    error
}

// Do calls try until it returns a final answer or an error that sending
// again cannot fix (see Error), or ctx ends. Between attempts it waits
// Backoff(initial, ceiling, n), or what a 429 or 503 asks for, and calls
// note, if not nil, with the attempt's number (from 1), what it got
// (the transport error, or the answer) and the wait. When ctx ends, the
// error says so with what the last attempt got.
func Do(ctx context.Context, initial, ceiling time.Duration, try func(context.Context) (Answer, error),
	note func(attempt int, err error, a Answer, wait time.Duration)) error {
	var last error
	for attempt := 0; ; attempt++ {
		a, err := try(ctx)
		if ctx.Err() != nil {
			if last == nil {
				last = err
			}
			return lastError(ctx.Err(), last)
		}
		var pause time.Duration
		switch {
		case err != nil && !Error(err):
			return err
		case err != nil:
			last = err
			pause = Backoff(initial, ceiling, attempt)
		case a.Err != nil:
			last = a.Err
			pause = Backoff(initial, ceiling, attempt)
			if ra, ok := After(a.Status, a.Header, time.Now()); ok {
				pause = ra
			}
		default:
			return nil
		}
		if note != nil {
			note(attempt+1, err, a, pause)
		}
		if err := Sleep(ctx, pause); err != nil {
			return lastError(err, last)
		}
	}
}

// lastError reports that ctx ended, with what the last attempt got.
func lastError(ctxErr, last error) error {
	if last == nil {
		return ctxErr
	}
	return fmt.Errorf("%w (last attempt: %v)", ctxErr, last)
}

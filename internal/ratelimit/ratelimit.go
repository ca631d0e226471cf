// Package ratelimit limits each VM's requests to a metadata API.
package ratelimit

import (
	"math"
	"sync/atomic"
	"time"
)

// Limiter is a per-VM rate limit by the generic cell rate algorithm: a
// request is allowed when the VM's theoretical arrival time is at most
// burst-1 intervals ahead of now. A Limiter holds only the rate; each
// VM's place in it is a State the caller keeps beside the VM, created
// and dropped with it, so limiting takes no lock that other VMs share.
type Limiter struct {
	interval  time.Duration // 1/rate
	tolerance time.Duration
	base      time.Time
}

// State is one VM's state in a Limiter: one atomic word, its theoretical
// arrival time. The zero State has its whole burst to spend.
type State struct {
	tat atomic.Int64 // ns since the Limiter's base
}

// Reset gives st its whole burst again, as a new VM has it: for a State
// kept across a change of Limiter, whose times it no longer measures.
func (st *State) Reset() { st.tat.Store(0) }

// maxInterval caps the time between two requests (about 146 years), and
// the time a burst spans, so that a tiny rate does not overflow a
// Duration.
const maxInterval = time.Duration(1 << 62)

// New allows rate requests per second to each VM, in bursts of up to
// burst requests. rate must be positive.
func New(rate float64, burst int) *Limiter {
	interval := time.Duration(min(float64(time.Second)/rate, float64(maxInterval)))
	tolerance := time.Duration(min(float64(interval)*float64(max(burst, 1)-1), float64(maxInterval)))
	return &Limiter{interval: interval, tolerance: tolerance, base: time.Now()}
}

// Allow reports whether the VM whose state is st may make a request now,
// and if so counts it. A nil Limiter allows every request.
func (l *Limiter) Allow(st *State) bool {
	if l == nil {
		return true
	}
	now := int64(time.Since(l.base))
	for {
		tat := st.tat.Load()
		if tat-int64(l.tolerance) > now {
			return false
		}
		next := max(tat, now) + int64(l.interval)
		if st.tat.CompareAndSwap(tat, next) {
			return true
		}
	}
}

// ForRate is New for a server's throttling setting: rate requests per
// second to each VM, in bursts of up to rate requests. It returns nil,
// no throttling, for a rate that is not a positive finite number (0,
// negative, NaN, +Inf).
func ForRate(rate float64) *Limiter {
	if !(rate > 0) || math.IsInf(rate, 1) {
		return nil
	}
	return New(rate, max(int(rate), 1))
}

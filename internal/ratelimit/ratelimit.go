// Package ratelimit limits each VM's requests to a metadata API.
package ratelimit

import (
	"maps"
	"math"
	"slices"
	"sync/atomic"
	"time"
)

// Limiter is a per-VM rate limit by the generic cell rate algorithm: a
// request is allowed when the VM's theoretical arrival time is at most
// burst-1 intervals ahead of now. It is one atomic word per VM, so
// limiting takes no lock that other VMs share.
type Limiter struct {
	interval  time.Duration // 1/rate
	tolerance time.Duration
	base      time.Time
	tat       map[string]*atomic.Int64 // ns since base; read-only map
}

// maxInterval caps the time between two requests (about 146 years), so
// that a tiny rate's interval does not overflow a Duration.
const maxInterval = time.Duration(1 << 62)

// New allows rate requests per second to each of vms, in bursts of up
// to burst requests. rate must be positive.
func New(rate float64, burst int, vms []string) *Limiter {
	interval := time.Duration(min(float64(time.Second)/rate, float64(maxInterval)))
	l := &Limiter{interval: interval, tolerance: interval * time.Duration(max(burst, 1)-1), base: time.Now(), tat: map[string]*atomic.Int64{}}
	for _, vm := range vms {
		l.tat[vm] = new(atomic.Int64)
	}
	return l
}

// Allow reports whether the VM named vm may make a request now; a VM
// not given to New always may.
func (l *Limiter) Allow(vm string) bool {
	p := l.tat[vm]
	if p == nil {
		return true
	}
	now := int64(time.Since(l.base))
	for {
		tat := p.Load()
		if tat-int64(l.tolerance) > now {
			return false
		}
		next := max(tat, now) + int64(l.interval)
		if p.CompareAndSwap(tat, next) {
			return true
		}
	}
}

// ForRate is New for a server's throttling setting: rate requests per
// second to each VM named in vms (a map keyed by VM name), in bursts of
// up to rate requests. It returns nil, no throttling, for a rate that is
// not a positive finite number (0, negative, NaN, +Inf).
func ForRate[V any](rate float64, vms map[string]V) *Limiter {
	if !(rate > 0) || math.IsInf(rate, 1) {
		return nil
	}
	return New(rate, max(int(rate), 1), slices.Collect(maps.Keys(vms)))
}

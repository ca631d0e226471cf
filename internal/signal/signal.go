// Package signal is a one-time broadcast whose channel is made only when
// someone first waits on it: a per-VM signal that most VMs never wait on
// then costs a pointer, not a channel.
package signal

import "sync/atomic"

// Signal is fired at most once; its zero value is ready to use.
type Signal struct {
	c atomic.Pointer[chan struct{}]
}

// fired is the channel of every Signal fired before anyone waited.
var fired = func() *chan struct{} {
	c := make(chan struct{})
	close(c)
	return &c
}()

// C returns a channel that is closed once s fires.
func (s *Signal) C() <-chan struct{} {
	if p := s.c.Load(); p != nil {
		return *p
	}
	c := make(chan struct{})
	if s.c.CompareAndSwap(nil, &c) {
		return c
	}
	return *s.c.Load() // fired, or another waiter made it first
}

// Fire closes s's channel, now or, for one not yet made, as it is made.
// Firing again does nothing.
func (s *Signal) Fire() {
	if p := s.c.Swap(fired); p != nil && p != fired {
		close(*p)
	}
}

// Fired reports whether s has fired.
func (s *Signal) Fired() bool { return s.c.Load() == fired }

package relay

// SetUpstreamMax changes the connections allowed to server i, so that a
// test reaches the cap without thousands of requests.
func (r *Relay) SetUpstreamMax(i, n int) {
	u := r.ups[i]
	u.mu.Lock()
	u.max = n
	u.mu.Unlock()
}

// BreakIdleShort closes the idle short connections to server i under
// the relay, as a server closing them would, and returns how many.
func (r *Relay) BreakIdleShort(i int) int {
	u := r.ups[i]
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, sc := range u.shortIdle {
		sc.c.Close()
	}
	return len(u.shortIdle)
}

var IsShort = isShort

package admin

import (
	"time"

	"github.com/forewarn/forewarn/engine"
)

// SetLargeWait sets how long s's requests for large answers wait for
// their turn.
func SetLargeWait(s *Server, d time.Duration) { s.largeWait = d }

// AddTransitions hands s's watch log a commit's transitions, as the
// engine does.
func AddTransitions(s *Server, rev int64, ts []engine.Transition) { s.watch.add(rev, ts) }

package admin

import "time"

// SetLargeWait sets how long s's requests for large answers wait for
// their turn.
func SetLargeWait(s *Server, d time.Duration) { s.largeWait = d }

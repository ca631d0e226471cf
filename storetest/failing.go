package storetest

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/forewarn/forewarn"
)

// Failing is a Store whose commits fail with the error last given to
// Fail, wrapped as a store's I/O error is, until Fail(nil): a disk that
// fills up and frees again, for the tests of what the servers answer
// then. Everything else is the wrapped Store's.
type Failing struct {
	forewarn.Store
	err atomic.Pointer[error]
}

// NewFailing wraps s; its commits succeed until Fail.
func NewFailing(s forewarn.Store) *Failing { return &Failing{Store: s} }

// Fail makes every later commit fail with err, or succeed again when
// err is nil. It is safe to call while commits run.
func (s *Failing) Fail(err error) {
	if err == nil {
		s.err.Store(nil)
		return
	}
	s.err.Store(&err)
}

// Commit fails with the error Fail gave, or commits c to the wrapped
// Store.
func (s *Failing) Commit(ctx context.Context, c *forewarn.Change) (int64, error) {
	if err := s.err.Load(); err != nil {
		return 0, fmt.Errorf("commit store /data/forewarn.db: %w", *err)
	}
	return s.Store.Commit(ctx, c)
}

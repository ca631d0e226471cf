package mem

import (
	"context"
	"sync"

	"github.com/forewarn/forewarn"
)

var _ forewarn.Cluster = (*Candidate)(nil)

// Candidate is one replica's handle on a Store that several replicas
// share, as a forewarn.Cluster: its replica campaigns until Win is
// called, then leads for good. An engine on a Store itself leads at
// once, as a server of one does; an engine on a Candidate follows until
// then, so that a test can run a leader and followers on one Store and
// hand the lead over.
type Candidate struct {
	*Store
	won  chan struct{}
	once sync.Once
}

// Candidate returns a new replica's handle on s, not leading.
func (s *Store) Candidate() *Candidate {
	return &Candidate{Store: s, won: make(chan struct{})}
}

// Win makes c's replica the leader: its Campaign returns.
func (c *Candidate) Win() { c.once.Do(func() { close(c.won) }) }

// Campaign blocks until Win is called, or ctx ends.
func (c *Candidate) Campaign(ctx context.Context, _ string) (forewarn.Term, error) {
	select {
	case <-c.won:
		return term{}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Announce does nothing.
func (*Candidate) Announce(context.Context, forewarn.Replica) error { return nil }

// Replicas returns an empty status.
func (*Candidate) Replicas(context.Context) (*forewarn.ClusterStatus, error) {
	return &forewarn.ClusterStatus{}, nil
}

// term is a Candidate's leadership: never lost, and fenced by nothing.
type term struct{}

func (term) Done() <-chan struct{}        { return nil }
func (term) Fence() string                { return "" }
func (term) Resign(context.Context) error { return nil }

package engine

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/forewarn/forewarn"
)

// KeyRotation is how long a signing key is current before the leader
// replaces it. A replaced key still signs for KeyPublish and is accepted
// for another KeyRotation, well over KeyPublish and the longest token
// (six hours), so no token outlives the keys that accept it.
const KeyRotation = 24 * time.Hour

// KeyPublish is how long a new signing key only verifies tokens after
// the rotation that made it: the key it replaced still signs, so that
// every replica has applied the rotation, and takes the new key, before
// a token signed with it reaches one.
const KeyPublish = time.Minute

// keyRetry is how long a replica waits to look again at a key due for
// rotation that it did not rotate: the leader's job.
const keyRetry = time.Minute

// SigningKeys returns the keys that sign the servers' session tokens, as
// the store holds them: the same on every replica, and after a restart.
// Callers must not modify them. It is nil only before New returns.
func (e *Engine) SigningKeys() *forewarn.SigningKeys { return e.keys.Load() }

// newSigningKey returns a new random key made at now.
func newSigningKey(now time.Time) forewarn.SigningKey {
	k := forewarn.SigningKey{Secret: make([]byte, forewarn.MinSigningKey), Created: now.UTC()}
	_, _ = rand.Read(k.Secret) // crypto/rand.Read never fails
	return k
}

// makeKeys writes the first signing keys of a store that has none, New
// made and no commit (the fleet's) wrote yet. Two replicas starting at
// once both try; the store's compare-and-swap lets one write, and the
// other, loading again, finds its keys. e.mu must be held, and no other
// write run (New).
func (e *Engine) makeKeys(ctx context.Context) error {
	if e.newKeys == nil {
		return nil
	}
	covered, err := e.write(ctx, &forewarn.Change{SigningKeys: e.newKeys})
	if err != nil {
		return fmt.Errorf("write the token signing keys: %w", err)
	}
	e.wroteKeys(covered)
	return nil
}

// wroteKeys notes that a commit wrote newKeys; covered reports that the
// follow loop applied it. e.mu must be held.
func (e *Engine) wroteKeys(covered bool) {
	if !covered {
		e.keys.Store(e.newKeys.Normalized())
	}
	e.newKeys = nil
}

// keyLoop rotates the signing keys when the current one is due, while
// this replica leads, until Close.
func (e *Engine) keyLoop() {
	defer e.loops.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		e.mu.Lock()
		adv := e.advanced
		e.mu.Unlock()
		wait := time.Until(e.keys.Load().Current.Created.Add(KeyRotation))
		if wait <= 0 {
			if err := e.retry(e.ctx, e.rotateKeys); err != nil && e.ctx.Err() == nil {
				e.log.Warn("rotate the token signing keys", "err", err)
			}
			wait = keyRetry // another leader's rotation, or a retry
		}
		t.Reset(wait)
		select {
		case <-e.ctx.Done():
			return
		case <-adv:
		case <-t.C:
		}
		t.Stop()
	}
}

// rotateKeys makes a new current key and keeps the current one as the
// previous, when this replica leads and the current key is due. It runs
// in the write slot.
func (e *Engine) rotateKeys(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	old := e.keys.Load()
	if e.closed || !e.leading || now.Before(old.Current.Created.Add(KeyRotation)) {
		return nil
	}
	ks := &forewarn.SigningKeys{Current: newSigningKey(now), Previous: old.Current}
	covered, err := e.write(ctx, &forewarn.Change{SigningKeys: ks, Fence: e.fence})
	if err != nil {
		return err
	}
	if !covered {
		e.keys.Store(ks.Normalized())
	}
	e.log.Info("rotated the token signing keys")
	return nil
}

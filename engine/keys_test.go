package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/bolt"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/etcd"
	"github.com/forewarn/forewarn/internal/etcdtest"
	"github.com/forewarn/forewarn/mem"
)

// TestSigningKeys: an engine on a store without signing keys makes them
// (one 32-byte random key), an engine that restarts on it keeps them,
// and the leader replaces the current key every KeyRotation, keeping it
// as the previous one, with one commit that every replica applies.
func TestSigningKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := mem.New()
		e := newEngine(t, store, true)
		first := e.SigningKeys()
		if first == nil || len(first.Current.Secret) != forewarn.MinSigningKey || !first.Current.Created.Equal(time.Now()) ||
			first.Previous.Secret != nil {
			t.Fatalf("new signing keys: %+v", first)
		}
		if st, _ := store.Load(t.Context()); st.SigningKeys == nil || !bytes.Equal(st.SigningKeys.Current.Secret, first.Current.Secret) {
			t.Fatalf("the store holds %+v, want the engine's keys", st.SigningKeys)
		}
		e.Close()
		e = newEngine(t, store, true)
		other := newEngine(t, store, true)
		for _, x := range []*engine.Engine{e, other} {
			if !bytes.Equal(x.SigningKeys().Current.Secret, first.Current.Secret) {
				t.Fatal("an engine started on a store with keys made others")
			}
		}

		rev := e.Revision()
		time.Sleep(engine.KeyRotation - time.Second)
		synctest.Wait()
		if k := e.SigningKeys(); k != first && !bytes.Equal(k.Current.Secret, first.Current.Secret) || e.Revision() != rev {
			t.Fatalf("the keys changed a second before KeyRotation: %+v, revision %d (was %d)", k, e.Revision(), rev)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		second := e.SigningKeys()
		if bytes.Equal(second.Current.Secret, first.Current.Secret) || !bytes.Equal(second.Previous.Secret, first.Current.Secret) ||
			!second.Current.Created.Equal(time.Now()) {
			t.Fatalf("after KeyRotation: %+v, want a new current key and the first as the previous", second)
		}
		if k := other.SigningKeys(); !bytes.Equal(k.Current.Secret, second.Current.Secret) || !bytes.Equal(k.Previous.Secret, first.Current.Secret) {
			t.Fatalf("the other engine holds %+v, want the rotated keys", k)
		}
		// Both engines lead (a store of one server each): one rotation,
		// not two.
		if got := e.Revision(); got != rev+1 {
			t.Errorf("rotation took revisions %d to %d, want one commit", rev, got)
		}
	})
}

// TestSigningKeysDurable: a key signs only once the store holds it. A
// rotation the store refuses leaves the engine on the key it had; the
// leader rotates once the store takes writes again.
func TestSigningKeysDurable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &refusing{Store: mem.New()}
		e := newEngine(t, store, true)
		first := e.SigningKeys()
		store.refuse.Store(true)
		time.Sleep(engine.KeyRotation + 10*time.Minute)
		synctest.Wait()
		if k := e.SigningKeys(); !bytes.Equal(k.Current.Secret, first.Current.Secret) {
			t.Fatal("the engine took keys the store refused")
		}
		store.refuse.Store(false)
		time.Sleep(time.Minute)
		synctest.Wait()
		st, err := store.Load(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		k := e.SigningKeys()
		if bytes.Equal(k.Current.Secret, first.Current.Secret) || !bytes.Equal(k.Current.Secret, st.SigningKeys.Current.Secret) ||
			!bytes.Equal(k.Previous.Secret, first.Current.Secret) {
			t.Fatal("once the store took writes again, want the rotation, the same in the engine and the store")
		}
	})
}

// refusing is a store that refuses every commit while refuse is set, as
// an etcd out of reach does.
type refusing struct {
	forewarn.Store
	refuse atomic.Bool
}

func (s *refusing) Commit(ctx context.Context, c *forewarn.Change) (int64, error) {
	if s.refuse.Load() {
		return 0, forewarn.Errorf(forewarn.EUNAVAILABLE, "refused")
	}
	return s.Store.Commit(ctx, c)
}

// TestSigningKeysConcurrentStart: replicas that start at once on an
// empty store, each loading it before any of them writes, agree on one
// key, the store's: on bolt (one file, engines sharing it) and on a real
// etcd (a client each, as replicas on several hosts).
func TestSigningKeysConcurrentStart(t *testing.T) {
	const replicas = 3
	t.Run("bolt", func(t *testing.T) {
		s, err := bolt.Open(filepath.Join(t.TempDir(), "forewarn.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		startTogether(t, replicas, func(int) forewarn.Store { return s })
	})
	t.Run("etcd", func(t *testing.T) {
		eps := etcdtest.Start(t).Endpoints()
		startTogether(t, replicas, func(int) forewarn.Store {
			s, err := etcd.Open(t.Context(), etcd.Options{Endpoints: eps, Prefix: "/keys/"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
}

// startTogether starts n engines at once, the i-th on open(i), each
// loading its store only when all are about to, and checks that they
// hold the same signing keys as the store.
func startTogether(t *testing.T, n int, open func(i int) forewarn.Store) {
	var loads sync.WaitGroup
	loads.Add(n)
	stores := make([]forewarn.Store, n)
	for i := range n {
		var s forewarn.Store = &together{Store: open(i), loads: &loads}
		if c, ok := s.(*together).Store.(forewarn.Cluster); ok {
			s = struct {
				*together
				forewarn.Cluster
			}{s.(*together), c}
		}
		stores[i] = s
	}
	engines := make([]*engine.Engine, n)
	var started sync.WaitGroup
	for i := range n {
		started.Go(func() {
			e, err := engine.New(t.Context(), engine.Config{Store: stores[i], Fleet: testFleet(), Replica: fmt.Sprintf("r%d", i)})
			if err != nil {
				t.Errorf("replica %d: engine.New: %v", i, err)
				return
			}
			t.Cleanup(func() { e.Close() })
			engines[i] = e
		})
	}
	started.Wait()
	if t.Failed() {
		return
	}
	st, err := stores[0].Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.SigningKeys == nil {
		t.Fatal("the store holds no signing keys")
	}
	for i, e := range engines {
		if !bytes.Equal(e.SigningKeys().Current.Secret, st.SigningKeys.Current.Secret) {
			t.Errorf("replica %d signs with another key than the store's", i)
		}
	}
}

// together is a store whose first Load waits until every store sharing
// loads has been asked to load: servers that all find the store empty.
type together struct {
	forewarn.Store
	loads *sync.WaitGroup
	once  sync.Once
}

func (s *together) Load(ctx context.Context) (*forewarn.State, error) {
	s.once.Do(func() {
		s.loads.Done()
		s.loads.Wait()
	})
	return s.Store.Load(ctx)
}

package engine_test

import (
	"bytes"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
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

package aws_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/aws"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

// startOn starts an engine and an EC2 server on store, as a server
// process does: a restart is another on the same store, a replica
// another beside it.
func startOn(t testing.TB, store forewarn.Store) (*engine.Engine, *aws.Server) {
	t.Helper()
	e, err := engine.New(t.Context(), engine.Config{Store: store, Fleet: testFleet(), AllowShortNotice: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, aws.NewServer(e, nil)
}

// getWith reads instance-id from ec2_0, which requires tokens, with the
// token header's values toks.
func getWith(h http.Handler, toks ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "http://169.254.169.254/latest/meta-data/instance-id", nil)
	r.RemoteAddr = ec2Addr
	for _, tok := range toks {
		r.Header.Add(aws.TokenHeader, tok)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestTokenSurvivesRestart: a token is good after the server restarts
// on its store, until it expires, as on EC2; one of a VM registered
// again since is not.
func TestTokenSurvivesRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := mem.New()
		e1, h1 := startOn(t, store)
		tok := token(t, h1, ec2Addr, "3600")
		want(t, "before the restart", getWith(h1, tok), 200, "i-0000000000000000a", aws.TokenTTLHeader, "3600")
		e1.Close()

		time.Sleep(time.Minute)
		e2, h2 := startOn(t, store)
		want(t, "after the restart", getWith(h2, tok), 200, "i-0000000000000000a", aws.TokenTTLHeader, "3540")
		time.Sleep(59 * time.Minute)
		want(t, "expired after the restart", getWith(h2, tok), 401, errorPage(401))

		// A VM registered again is another instance to its tokens, after
		// a restart too.
		tok = token(t, h2, ec2Addr, "3600")
		vm := *e2.Fleet().VM("ec2_0")
		change(t, e2, engine.InventoryChange{Remove: []string{"ec2_0"}})
		change(t, e2, engine.InventoryChange{Set: []*forewarn.VM{&vm}})
		e2.Close()
		_, h3 := startOn(t, store)
		want(t, "a token of the VM's last registration", getWith(h3, tok), 401, errorPage(401))
		want(t, "a new token", getWith(h3, token(t, h3, ec2Addr, "60")), 200, "i-0000000000000000a")
	})
}

// TestTokenOnEveryReplica: servers sharing a store accept each other's
// tokens, and two that start at once on an empty store agree on the key.
func TestTokenOnEveryReplica(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := mem.New()
		type started struct {
			e *engine.Engine
			h *aws.Server
		}
		ch := make(chan started, 2)
		for range 2 {
			go func() {
				e, h := startOn(t, store)
				ch <- started{e, h}
			}()
		}
		a, b := <-ch, <-ch
		synctest.Wait() // each has applied the other's commits
		if ka, kb := a.e.SigningKeys(), b.e.SigningKeys(); string(ka.Current.Secret) != string(kb.Current.Secret) {
			t.Fatal("two servers starting at once on one store made different keys")
		}
		tok := token(t, a.h, ec2Addr, "60")
		want(t, "another replica's token", getWith(b.h, tok), 200, "i-0000000000000000a")
		tok = token(t, b.h, ec2Addr, "60")
		want(t, "and back", getWith(a.h, tok), 200, "i-0000000000000000a")
	})
}

// TestTokenKeyRotation: the key that signs new tokens is replaced every
// engine.KeyRotation; a token signed with the replaced key is good until
// it expires, on every replica.
func TestTokenKeyRotation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := mem.New()
		e, h := startOn(t, store)
		_, other := startOn(t, store)
		first := e.SigningKeys()
		time.Sleep(engine.KeyRotation - time.Hour)
		old := token(t, h, ec2Addr, "21600") // 6 hours, past the rotation
		time.Sleep(time.Hour)
		synctest.Wait()
		second := e.SigningKeys()
		if string(second.Previous.Secret) != string(first.Current.Secret) || string(second.Current.Secret) == string(first.Current.Secret) {
			t.Fatal("the keys did not rotate after engine.KeyRotation")
		}
		want(t, "a token of the previous key", getWith(h, old), 200, "i-0000000000000000a", aws.TokenTTLHeader, "18000")
		want(t, "on the other replica", getWith(other, old), 200, "i-0000000000000000a")
		time.Sleep(engine.KeyPublish)
		fresh := token(t, other, ec2Addr, "60")
		want(t, "a token of the new key", getWith(h, fresh), 200, "i-0000000000000000a")

		// The previous key is kept, but its token ends with its TTL.
		time.Sleep(5*time.Hour - engine.KeyPublish - time.Second)
		want(t, "the previous key's token, a second before it expires", getWith(other, old), 200, "i-0000000000000000a", aws.TokenTTLHeader, "1")
		time.Sleep(time.Second)
		want(t, "the previous key's token, expired", getWith(other, old), 401, errorPage(401))
		if k := e.SigningKeys(); k != second {
			t.Fatal("the keys changed before the next rotation")
		}

		time.Sleep(engine.KeyRotation)
		synctest.Wait()
		if third := e.SigningKeys(); string(third.Previous.Secret) != string(second.Current.Secret) {
			t.Fatal("the keys did not rotate a second time")
		}
	})
}

// TestTokenHeaderTwice: a request whose token header has several
// values, as a client's retry that adds the new token beside the old
// one sends, is served when one of the first four is good, on separate
// lines or folded into one.
func TestTokenHeaderTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, h := setup(t)
		good := token(t, h, ec2Addr, "60")
		other := token(t, h, optAddr, "60")
		bad := strings.Repeat("A", 56)
		want(t, "a bad one, then a good one", getWith(h, bad, good), 200, "i-0000000000000000a", aws.TokenTTLHeader, "60")
		want(t, "a good one, then another VM's", getWith(h, good, other), 200, "i-0000000000000000a")
		want(t, "an empty one and a good one", getWith(h, "", good), 200, "i-0000000000000000a")
		want(t, "two bad ones", getWith(h, bad, other), 401, errorPage(401))
		want(t, "a good one fifth", getWith(h, bad, bad, bad, bad, good), 401, errorPage(401))
		// A proxy may fold the lines into one, comma-separated.
		want(t, "folded: a bad one, then a good one", getWith(h, bad+", "+good), 200, "i-0000000000000000a", aws.TokenTTLHeader, "60")
		want(t, "folded without a space", getWith(h, other+","+good), 200, "i-0000000000000000a")
		want(t, "folded: two bad ones", getWith(h, bad+", "+other), 401, errorPage(401))
		want(t, "folded: a good one fifth", getWith(h, bad+", "+bad, bad+","+bad, good), 401, errorPage(401))
	})
}

// TestTokenRotationOnLaggingReplica: a token signed just after a
// rotation is good on a replica that has not applied the rotation yet:
// for engine.KeyPublish the replaced key still signs. A replica that lags
// longer refuses the new key's tokens until it catches up.
func TestTokenRotationOnLaggingReplica(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := mem.New()
		ea, a := startOn(t, store)
		lag := newLagging(store)
		eb, b := startOn(t, lag)
		first := ea.SigningKeys()
		time.Sleep(engine.KeyRotation - time.Second)
		lag.hold()
		time.Sleep(time.Second)
		synctest.Wait()
		if ka, kb := ea.SigningKeys(), eb.SigningKeys(); bytes.Equal(ka.Current.Secret, first.Current.Secret) ||
			!bytes.Equal(kb.Current.Secret, first.Current.Secret) || kb.Previous.Secret != nil {
			t.Fatal("want A rotated and B, held, on the first key alone")
		}
		want(t, "a token of the rotation's first minute, on the lagging replica", getWith(b, token(t, a, ec2Addr, "60")), 200, "i-0000000000000000a")

		time.Sleep(engine.KeyPublish)
		tok := token(t, a, ec2Addr, "60")
		want(t, "a token of the new key, on a replica a minute behind", getWith(b, tok), 401, errorPage(401))
		want(t, "on its own replica", getWith(a, tok), 200, "i-0000000000000000a")
		lag.release()
		synctest.Wait()
		want(t, "once the replica caught up", getWith(b, tok), 200, "i-0000000000000000a")
	})
}

// lagging is a store whose server, while it is held, applies no commit
// and makes none: a replica whose watch lags behind the store.
type lagging struct {
	forewarn.Store
	mu   sync.Mutex
	gate chan struct{} // closed while not held
}

func newLagging(s forewarn.Store) *lagging {
	l := &lagging{Store: s, gate: make(chan struct{})}
	close(l.gate)
	return l
}

func (l *lagging) hold() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gate = make(chan struct{})
}

func (l *lagging) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	close(l.gate)
}

// pass waits until l is not held, or ctx ends.
func (l *lagging) pass(ctx context.Context) error {
	l.mu.Lock()
	g := l.gate
	l.mu.Unlock()
	select {
	case <-g:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *lagging) Commit(ctx context.Context, c *forewarn.Change) (int64, error) {
	if err := l.pass(ctx); err != nil {
		return 0, err
	}
	return l.Store.Commit(ctx, c)
}

func (l *lagging) Follow(ctx context.Context, since int64) <-chan *forewarn.Update {
	in := l.Store.Follow(ctx, since)
	out := make(chan *forewarn.Update)
	go func() {
		defer close(out)
		for u := range in {
			if l.pass(ctx) != nil {
				return
			}
			select {
			case out <- u:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

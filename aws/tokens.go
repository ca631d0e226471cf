package aws

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"hash"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
)

// maxTokenValues is how many tokens of the token header a request's
// token is looked for in: a client's retry may add the new token beside
// the old one (docs/aws-wire.md, section 1).
const maxTokenValues = 4

// keyring is the engine's signing keys in force, each with MACs keyed
// with it for reuse; the current key first.
type keyring struct {
	src  *forewarn.SigningKeys
	macs []*sync.Pool // of *tokenMAC
	// publish is when the current key begins to sign: until then, the
	// key it replaced still does (engine.KeyPublish).
	publish time.Time
}

// tokenMAC is an HMAC-SHA256 of one key with the buffers a signature
// takes, reused, so that checking a token allocates nothing.
type tokenMAC struct {
	h   hash.Hash
	in  []byte // the message
	sum []byte // room for the sum
}

// ring returns the keyring of the engine's signing keys now, made once
// per set of keys: the store's, so a token is good on every replica and
// after a restart until it expires.
func (s *Server) ring() *keyring {
	ks := s.eng.SigningKeys()
	if r := s.keys.Load(); r != nil && r.src == ks {
		return r
	}
	r := &keyring{src: ks, publish: ks.Current.Created.Add(engine.KeyPublish)}
	for _, k := range []forewarn.SigningKey{ks.Current, ks.Previous} {
		if len(k.Secret) == 0 {
			continue
		}
		secret := k.Secret
		r.macs = append(r.macs, &sync.Pool{New: func() any {
			return &tokenMAC{h: hmac.New(sha256.New, secret), sum: make([]byte, 0, sha256.Size)}
		}})
	}
	s.keys.Store(r) // a racing request's ring is the same
	return r
}

// signer returns the MACs of the key that signs at now: the current
// key, or the one it replaced while the current one is published.
func (r *keyring) signer(now time.Time) *sync.Pool {
	if len(r.macs) > 1 && now.Before(r.publish) {
		return r.macs[1]
	}
	return r.macs[0]
}

// checked is a token found good, with its expiry.
type checked struct {
	tok string
	exp int64  // Unix nanoseconds
	reg uint64 // the registration it was checked against
}

// tokenEncoding is padded URL-safe base64 that refuses a last character
// with unused bits set, so that a token has one spelling only.
var tokenEncoding = base64.URLEncoding.Strict()

// tokenLen is a token's length in bytes before encoding: a version byte,
// the expiry in Unix nanoseconds, and a truncated signature. Encoded, it is
// 56 characters of URL-safe base64, as EC2's tokens are.
const (
	tokenLen   = 1 + 8 + sigLen
	sigLen     = 31
	tokenChars = (tokenLen + 2) / 3 * 4
)

// issue returns a token for vm, in the registration of slot sl, made at
// now, that expires at exp. It is signed, not stored: the server keeps
// nothing per token, so no caller can make it hold more.
func (s *Server) issue(vm *forewarn.VM, sl *slot, now, exp time.Time) string {
	var b [tokenLen]byte
	b[0] = 1
	binary.BigEndian.PutUint64(b[1:9], uint64(exp.UnixNano())) // not whole seconds: a token lasts its full TTL
	sign(s.ring().signer(now), vm, sl.reg.Load(), b[:9], b[9:])
	return tokenEncoding.EncodeToString(b[:])
}

// sign writes into sig the signature, with a key's MACs, of a token of
// vm, in its registration reg, whose head (version and expiry) is head.
func sign(macs *sync.Pool, vm *forewarn.VM, reg uint64, head, sig []byte) {
	m := macs.Get().(*tokenMAC)
	m.in = append(binary.BigEndian.AppendUint64(append(m.in[:0], head...), reg), vm.Name...)
	m.h.Reset()
	m.h.Write(m.in)
	m.sum = m.h.Sum(m.sum[:0])
	copy(sig, m.sum)
	macs.Put(m)
}

// checkAny is check of the first tokens of a request's token header,
// its values each split at commas (a proxy may fold several lines into
// one): the remaining-TTL header value of the first good one, or nil.
func (s *Server) checkAny(vm *forewarn.VM, sl *slot, vals []string) []string {
	n := 0
	for _, v := range vals {
		for more := true; more; {
			var tok string
			tok, v, more = strings.Cut(v, ",")
			if n++; n > maxTokenValues {
				return nil
			}
			if left := s.check(vm, sl, strings.Trim(tok, " \t")); left != nil {
				return left
			}
		}
	}
	return nil
}

// check returns the remaining-TTL header value of tok, a token issued to
// vm in the registration of slot sl, or nil when tok is not one or has
// expired. The VM's newest good token is checked by comparison; others
// by their signature. Neither allocates.
func (s *Server) check(vm *forewarn.VM, sl *slot, tok string) []string {
	now := time.Now().UnixNano()
	reg := sl.reg.Load()
	c := sl.lastToken.Load()
	var exp int64
	if c != nil && c.reg == reg && sameToken(c.tok, tok) {
		exp = c.exp
	} else if exp = s.expiry(vm, reg, tok); exp > now && (c == nil || c.reg != reg || exp > c.exp) {
		// Kept while it is the newest: two clients of one VM, each
		// with its token, replace it once per new token, not per
		// request. A racing request's token is as good. The
		// registration it was checked against goes with it: a check
		// that raced a new registration is no good for it.
		sl.lastToken.CompareAndSwap(c, &checked{tok: tok, exp: exp, reg: reg})
	}
	if now >= exp {
		return nil
	}
	return s.ttls.get(min((exp-now)/int64(time.Second), MaxTokenTTL))
}

// sameToken reports whether a and b are equal, in time that does not
// depend on where they differ.
func sameToken(a, b string) bool {
	return subtle.ConstantTimeCompare(unsafe.Slice(unsafe.StringData(a), len(a)), unsafe.Slice(unsafe.StringData(b), len(b))) == 1
}

// expiry returns the expiry, in Unix nanoseconds, of tok, a token issued
// to vm in its registration reg and signed with a key in force,
// or -1 when tok is not one. It does not look at the clock.
func (s *Server) expiry(vm *forewarn.VM, reg uint64, tok string) int64 {
	if len(tok) != tokenChars {
		return -1
	}
	// On the stack: a []byte(tok) of this length would be on the heap.
	var src [tokenChars]byte
	copy(src[:], tok)
	// Decode needs room for whole quanta, padding included: 42 bytes.
	var b [(tokenLen + 2) / 3 * 3]byte
	if n, err := tokenEncoding.Decode(b[:], src[:]); err != nil || n != tokenLen || b[0] != 1 {
		return -1
	}
	var sig [sigLen]byte
	for _, macs := range s.ring().macs {
		sign(macs, vm, reg, b[:9], sig[:])
		if hmac.Equal(sig[:], b[9:tokenLen]) {
			return int64(binary.BigEndian.Uint64(b[1:9]))
		}
	}
	return -1
}

// ttlBlock is how many remaining-TTL header values are made at once.
const ttlBlock = 64

// ttlValues holds the remaining-TTL header values, block i those of
// seconds i*ttlBlock to (i+1)*ttlBlock-1, each block made at its first
// use; every answer with a value shares it.
type ttlValues [MaxTokenTTL/ttlBlock + 1]atomic.Pointer[[ttlBlock]string]

// get returns the header value of sec remaining seconds, 0 to
// MaxTokenTTL.
func (t *ttlValues) get(sec int64) []string {
	p := &t[sec/ttlBlock]
	b := p.Load()
	if b == nil {
		b = new([ttlBlock]string)
		for i := range b {
			b[i] = strconv.FormatInt(sec/ttlBlock*ttlBlock+int64(i), 10)
		}
		p.Store(b) // a racing request's block is the same
	}
	i := sec % ttlBlock
	return b[i : i+1 : i+1]
}

package aws

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"hash"
	"io"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/forewarn/forewarn"
)

// maxTokenValues is how many values of the token header a request's
// token is looked for in: a client's retry may add the new token beside
// the old one (docs/aws-wire.md, section 1).
const maxTokenValues = 4

// keyring is the engine's signing keys in force, each with HMACs keyed
// with it for reuse; the current key, which signs, first.
type keyring struct {
	src     *forewarn.SigningKeys
	signers []*sync.Pool
}

// ring returns the keyring of the engine's signing keys now, made once
// per set of keys: the store's, so a token is good on every replica and
// after a restart until it expires.
func (s *Server) ring() *keyring {
	ks := s.eng.SigningKeys()
	if r := s.keys.Load(); r != nil && r.src == ks {
		return r
	}
	r := &keyring{src: ks}
	for _, k := range []forewarn.SigningKey{ks.Current, ks.Previous} {
		if len(k.Secret) == 0 {
			continue
		}
		secret := k.Secret
		r.signers = append(r.signers, &sync.Pool{New: func() any { return hmac.New(sha256.New, secret) }})
	}
	s.keys.Store(r) // a racing request's ring is the same
	return r
}

// checked is a token found valid, with its expiry and the remaining-TTL
// header value of one second of its life.
type checked struct {
	tok string
	exp int64 // Unix nanoseconds
	sec int64
	hdr []string
}

// tokenEncoding is padded URL-safe base64 that refuses a last character
// with unused bits set, so that a token has one spelling only.
var tokenEncoding = base64.URLEncoding.Strict()

// tokenLen is a token's length in bytes before encoding: a version byte,
// the expiry in Unix nanoseconds, and a truncated signature. Encoded, it is
// 56 characters of URL-safe base64, as EC2's tokens are.
const tokenLen = 1 + 8 + 31

// issue returns a token for vm, in the registration of slot sl, that
// expires at exp. It is signed, not stored: the server keeps nothing per
// token, so no caller can make it hold more.
func (s *Server) issue(vm *forewarn.VM, sl *slot, exp time.Time) string {
	var b [tokenLen]byte
	b[0] = 1
	binary.BigEndian.PutUint64(b[1:9], uint64(exp.UnixNano())) // not whole seconds: a token lasts its full TTL
	copy(b[9:], sign(s.ring().signers[0], vm, sl, b[:9]))
	return tokenEncoding.EncodeToString(b[:])
}

// sign returns the signature of a token of vm, in the registration of
// slot sl, whose head (version and expiry) is head, with a key's HMACs.
func sign(macs *sync.Pool, vm *forewarn.VM, sl *slot, head []byte) []byte {
	m := macs.Get().(hash.Hash)
	defer macs.Put(m)
	m.Reset()
	m.Write(head)
	var reg [8]byte
	binary.BigEndian.PutUint64(reg[:], sl.reg.Load())
	m.Write(reg[:])
	io.WriteString(m, vm.Name)
	return m.Sum(nil)[:tokenLen-9]
}

// checkAny is check of the first values of a request's token header:
// the remaining-TTL header value of the first good one, or nil.
func (s *Server) checkAny(vm *forewarn.VM, sl *slot, toks []string) []string {
	for _, tok := range toks[:min(len(toks), maxTokenValues)] {
		if left := s.check(vm, sl, tok); left != nil {
			return left
		}
	}
	return nil
}

// check returns the remaining-TTL header value of tok, a token issued to
// vm in the registration of slot sl, or nil when tok is not one or has
// expired. The VM's last good token is checked by comparison; others by
// their signature.
func (s *Server) check(vm *forewarn.VM, sl *slot, tok string) []string {
	p := &sl.lastToken
	now := time.Now().UnixNano()
	c := p.Load()
	if c == nil || !sameToken(c.tok, tok) {
		left := s.remaining(vm, sl, tok)
		if left < 0 {
			return nil
		}
		c = &checked{tok: tok, exp: now + int64(left), sec: -1}
	}
	if now >= c.exp {
		return nil
	}
	if sec := (c.exp - now) / int64(time.Second); sec != c.sec {
		c = &checked{tok: c.tok, exp: c.exp, sec: sec, hdr: []string{strconv.FormatInt(sec, 10)}}
		p.Store(c)
	}
	return c.hdr
}

// sameToken reports whether a and b are equal, in time that does not
// depend on where they differ.
func sameToken(a, b string) bool {
	return subtle.ConstantTimeCompare(unsafe.Slice(unsafe.StringData(a), len(a)), unsafe.Slice(unsafe.StringData(b), len(b))) == 1
}

// remaining returns the time left of tok, a token issued to vm in the
// registration of slot sl and signed with a key in force, or -1 when
// tok is not one or has expired.
func (s *Server) remaining(vm *forewarn.VM, sl *slot, tok string) time.Duration {
	// Decode needs room for whole quanta, padding included: 42 bytes.
	var b [(tokenLen + 2) / 3 * 3]byte
	if tokenEncoding.EncodedLen(tokenLen) != len(tok) {
		return -1
	}
	if n, err := tokenEncoding.Decode(b[:], []byte(tok)); err != nil || n != tokenLen || b[0] != 1 {
		return -1
	}
	good := false
	for _, macs := range s.ring().signers {
		if hmac.Equal(b[9:tokenLen], sign(macs, vm, sl, b[:9])) {
			good = true
			break
		}
	}
	if !good {
		return -1
	}
	left := time.Until(time.Unix(0, int64(binary.BigEndian.Uint64(b[1:9]))))
	if left <= 0 {
		return -1
	}
	return left
}

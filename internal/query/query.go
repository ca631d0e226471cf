// Package query parses URL query strings without allocating in the
// common case, for the metadata hot paths. Keys and values are
// substrings of the raw query unless they need percent-decoding.
package query

import (
	"errors"
	"net/url"
	"strings"
)

// Param is one decoded key=value pair.
type Param struct {
	Key, Value string
}

// ErrMalformed reports a query string that does not decode.
var ErrMalformed = errors.New("malformed query string")

// Parse appends the pairs of raw to dst, in order, and returns it. Pass a
// slice of a stack array as dst to parse without allocating. Empty
// segments ("a=1&&b=2") are skipped, as net/url does.
func Parse(raw string, dst []Param) ([]Param, error) {
	for raw != "" {
		var seg string
		seg, raw, _ = strings.Cut(raw, "&")
		if seg == "" {
			continue
		}
		if strings.IndexByte(seg, ';') >= 0 {
			return dst, ErrMalformed // as net/url refuses semicolons
		}
		k, v, _ := strings.Cut(seg, "=")
		var err error
		if k, err = unescape(k); err != nil {
			return dst, err
		}
		if v, err = unescape(v); err != nil {
			return dst, err
		}
		dst = append(dst, Param{k, v})
	}
	return dst, nil
}

func unescape(s string) (string, error) {
	if strings.IndexByte(s, '%') < 0 && strings.IndexByte(s, '+') < 0 {
		return s, nil
	}
	u, err := url.QueryUnescape(s)
	if err != nil {
		return "", ErrMalformed
	}
	return u, nil
}

// Get returns the value of the first pair named key, and whether there is one.
func Get(ps []Param, key string) (string, bool) {
	for _, p := range ps {
		if p.Key == key {
			return p.Value, true
		}
	}
	return "", false
}

// Repeated returns a key that occurs more than once, or "".
func Repeated(ps []Param) string {
	for i := range ps {
		for j := i + 1; j < len(ps); j++ {
			if ps[i].Key == ps[j].Key {
				return ps[i].Key
			}
		}
	}
	return ""
}

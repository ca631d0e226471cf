// Package echo bounds what an error message repeats of a request's own
// values, so that an error never carries a request's megabytes back.
package echo

import "unicode/utf8"

// Max is the most bytes of a request's value an error repeats.
const Max = 64

// Cut returns the largest index at most n that does not split a UTF-8
// sequence of s, looking back at most utf8.UTFMax bytes (len(s) > n).
func Cut(s string, n int) int {
	for i := n; i > n-utf8.UTFMax && i > 0; i-- {
		if utf8.RuneStart(s[i]) {
			return i
		}
	}
	return n
}

// Clip returns v as an error repeats it: whole up to Max bytes, else cut
// at a character boundary to at most Max bytes and marked with "…".
func Clip(v string) string {
	if len(v) <= Max {
		return v
	}
	return v[:Cut(v, Max)] + "…"
}

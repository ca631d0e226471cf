// Package jsonstr appends strings as JSON strings, as encoding/json
// writes them, without encoding/json's cost for the plain values
// metadata answers and stored events mostly hold.
package jsonstr

import (
	"bytes"
	"encoding/json"
)

// Append appends s to b as encoding/json writes a string, <, > and &
// escaped: as it is when it holds only printable ASCII that needs no
// escape, through encoding/json otherwise.
func Append(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	return append(append(append(b, '"'), s...), '"')
}

// AppendHTML is Append with <, > and & left as they are, as an
// encoding/json Encoder with SetEscapeHTML(false) writes them.
func AppendHTML(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' || c == '"' || c == '\\' {
			var q bytes.Buffer
			enc := json.NewEncoder(&q)
			enc.SetEscapeHTML(false)
			_ = enc.Encode(s) // a string always encodes
			return append(b, bytes.TrimSuffix(q.Bytes(), []byte("\n"))...)
		}
	}
	return append(append(append(b, '"'), s...), '"')
}

package fleetfile

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"unicode/utf8"
)

// A JSON document is YAML too, and the YAML decoder reads it with the
// fleet file's rules and messages, but slowly: about 10 µs a VM. The
// fast path reads it with encoding/json instead, only when that gives
// exactly what the YAML decoder would: every key is a known key spelled
// exactly (encoding/json matches keys without regard to case), no key is
// repeated (the YAML decoder refuses that; encoding/json keeps the last),
// every value has the shape the YAML decoder reads alike, and every
// character is one YAML allows. Any other document, and any document
// encoding/json refuses, goes to the YAML decoder, so that a refusal has
// the fleet file's message.
//
// The fast path also reads two escapes valid JSON may hold and the YAML
// decoder refuses: \/ and the UTF-16 surrogate pairs that encode
// characters beyond U+FFFF.

// decodeJSON decodes data into f and reports whether it did, when data
// is a JSON fleet document that the fast path reads alike (see above).
func decodeJSON(data []byte, f *file) bool {
	ok, lens := jsonKeys(data, documentShape)
	if !ok {
		return false
	}
	// Room for every entry at once: encoding/json appends to the slice
	// it is given, and growing it copies every entry again.
	if n := lens[documentShape.keys["vms"]]; n > 0 {
		f.VMs = make([]vmEntry, 0, n)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(f) == nil
}

// decodeEntryJSON decodes data into e and reports whether it did, when
// data is one JSON VM entry that the fast path reads alike.
func decodeEntryJSON(data []byte, e *vmEntry) bool {
	if ok, _ := jsonKeys(data, entryShape); !ok {
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(e) == nil
}

// shape is what the fast path lets a JSON object hold: the keys it may
// have and, for each, the shape of its value; a key of no shape takes a
// scalar.
type shape struct {
	keys  map[string]int // a key's bit in a set of keys seen
	elems []*shape       // by bit: the shape of the key's value's elements, an array's; nil for a scalar
}

// keysOf returns the shape of an object with the keys keys, each a
// scalar but those elems gives the element shape of: arrays of objects.
func keysOf(keys []fieldKey, elems map[string]*shape) *shape {
	s := &shape{keys: map[string]int{}}
	for _, k := range keys {
		s.keys[k.name] = len(s.elems)
		s.elems = append(s.elems, elems[k.name])
	}
	return s
}

var (
	entryShape    = keysOf(vmKeys, nil)
	documentShape = keysOf(fieldKeys(reflect.TypeFor[file]()), map[string]*shape{
		"vms":       entryShape,
		"scaleSets": keysOf(scaleSetKeys, nil),
	})
)

// fieldKey is a struct field's key in a fleet file and the field's index.
type fieldKey struct {
	name  string
	index int
}

// fieldKeys returns the yaml keys of struct type t's fields, in order.
func fieldKeys(t reflect.Type) []fieldKey {
	keys := make([]fieldKey, 0, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		keys = append(keys, fieldKey{name, i})
	}
	return keys
}

// The keys of a VM entry and of a scale set entry, in the order Encode
// writes them.
var (
	vmKeys       = fieldKeys(reflect.TypeFor[vmEntry]())
	scaleSetKeys = fieldKeys(reflect.TypeFor[scaleSetEntry]())
)

// jsonKeys reports whether data is one JSON object of shape s, with
// nothing after it but white space, and only characters YAML allows,
// and returns the length of each of its arrays, by the bit of its key.
// It does not check numbers and literals: encoding/json does.
func jsonKeys(data []byte, s *shape) (ok bool, lens [64]int) {
	if len(s.elems) > len(lens) {
		return false, lens
	}
	sc := scanner{data: data}
	sc.space()
	if !sc.object(s, &lens) {
		return false, lens
	}
	sc.space()
	return sc.pos == len(data), lens
}

// scanner walks a JSON document for jsonKeys.
type scanner struct {
	data []byte
	pos  int
}

func (sc *scanner) space() {
	for sc.pos < len(sc.data) {
		switch sc.data[sc.pos] {
		case ' ', '\t', '\n', '\r':
			sc.pos++
		default:
			return
		}
	}
}

// next skips white space and reports whether the next byte is c,
// consuming it if it is.
func (sc *scanner) next(c byte) bool {
	sc.space()
	if sc.pos < len(sc.data) && sc.data[sc.pos] == c {
		sc.pos++
		return true
	}
	return false
}

// object reads an object of shape s, and sets lens[bit] to the length
// of the array under the key of that bit, if lens is not nil.
func (sc *scanner) object(s *shape, lens *[64]int) bool {
	if !sc.next('{') {
		return false
	}
	if sc.next('}') {
		return true
	}
	var seen uint64
	for {
		sc.space()
		key, escaped, ok := sc.str()
		if !ok || escaped {
			return false
		}
		bit, known := s.keys[string(key)]
		if !known || seen&(1<<bit) != 0 {
			return false
		}
		seen |= 1 << bit
		if !sc.next(':') {
			return false
		}
		sc.space()
		if elem := s.elems[bit]; elem != nil {
			n, ok := sc.array(elem)
			if !ok {
				return false
			}
			if lens != nil {
				lens[bit] = n
			}
		} else if !sc.scalar() {
			return false
		}
		if sc.next('}') {
			return true
		}
		if !sc.next(',') {
			return false
		}
	}
}

// array reads an array of objects of shape s, or null, and returns its
// length.
func (sc *scanner) array(s *shape) (n int, ok bool) {
	if bytes.HasPrefix(sc.data[sc.pos:], []byte("null")) {
		sc.pos += len("null")
		return 0, true
	}
	if !sc.next('[') {
		return 0, false
	}
	if sc.next(']') {
		return 0, true
	}
	for {
		if !sc.object(s, nil) {
			return n, false
		}
		n++
		if sc.next(']') {
			return n, true
		}
		if !sc.next(',') {
			return n, false
		}
	}
}

// scalar reads a string, or skips a number or literal up to the next
// delimiter.
func (sc *scanner) scalar() bool {
	if sc.pos < len(sc.data) && sc.data[sc.pos] == '"' {
		_, _, ok := sc.str()
		return ok
	}
	start := sc.pos
	for sc.pos < len(sc.data) {
		c := sc.data[sc.pos]
		if c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			break
		}
		if c == '"' || c == '{' || c == '[' || c == ':' || c >= utf8.RuneSelf {
			return false
		}
		sc.pos++
	}
	return sc.pos > start
}

// str reads a string and returns its bytes between the quotes, and
// reports whether they hold an escape.
func (sc *scanner) str() (raw []byte, escaped, ok bool) {
	if sc.pos >= len(sc.data) || sc.data[sc.pos] != '"' {
		return nil, false, false
	}
	sc.pos++
	start := sc.pos
	for sc.pos < len(sc.data) {
		c := sc.data[sc.pos]
		switch {
		case c == '"':
			sc.pos++
			return sc.data[start : sc.pos-1], escaped, true
		case c == '\\':
			escaped = true
			sc.pos += 2
		case c < 0x20 || c == 0x7f:
			return nil, false, false
		case c >= utf8.RuneSelf:
			r, n := utf8.DecodeRune(sc.data[sc.pos:])
			if n == 1 || !yamlPrintable(r) {
				return nil, false, false
			}
			sc.pos += n
		default:
			sc.pos++
		}
	}
	return nil, false, false
}

// yamlPrintable reports whether YAML allows the character r, not ASCII,
// in a document (YAML 1.1's c-printable, which the YAML decoder checks).
func yamlPrintable(r rune) bool {
	switch {
	case r == 0xFEFF:
		return false
	case r == 0x85, r >= 0xA0 && r <= 0xD7FF, r >= 0xE000 && r <= 0xFFFD, r >= 0x10000 && r <= 0x10FFFF:
		return true
	}
	return false
}

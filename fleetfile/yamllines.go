package fleetfile

import (
	"bytes"
	"reflect"
	"strconv"
	"unicode/utf8"
)

// The YAML decoder takes about 10 µs a VM, 1.1 s for 100,000. Most large
// fleet files are written by programs, one entry a line as Encode writes
// them or as plain block mappings, and decodeLines reads those about
// four times faster. It reads a document only when it keeps to the
// small part of YAML described below, which the YAML decoder reads
// alike; anything else, and anything the fleet file refuses before its
// checks of values (an unknown or repeated key, a value of the wrong
// type), goes to the YAML decoder, so that a refusal has its message.
//
// The part of YAML read here, a line at a time:
//   - blank lines, and comments: # at the start of a line or after a space;
//   - at column 0, the keys vms and scaleSets, each once, each followed
//     by nothing or by [];
//   - under each, list items at one column: a flow mapping on one line
//     ("- {name: a, ip: 10.0.0.1}"), or a block mapping ("- name: a"
//     and a "key: value" line for each other key, at the column of the
//     first key);
//   - keys of the entry, each once; values that are a plain scalar of
//     letters, digits, '_', '.' and '-' (no leading '-' or '.', or a
//     whole number), a double-quoted string with no backslash, a
//     single-quoted string with no quote, or nothing (null) in a block
//     mapping;
//   - only characters YAML allows, and no tab.

// decodeLines decodes data into f and reports whether it did, when data
// is a fleet file in the part of YAML described above. With eachVM set,
// the VM entries go to eachVM as they are read rather than into f; when
// decodeLines then reports false, eachVM may have seen some of them.
func decodeLines(data []byte, f *file, eachVM func(*vmEntry)) bool {
	if !yamlChars(data) {
		return false
	}
	d := lines{data: data}
	var out file
	seen := map[string]bool{}
	for d.next() {
		if d.indent != 0 {
			return false
		}
		key, rest, ok := keyOf(d.line)
		if !ok || seen[key] {
			return false
		}
		seen[key] = true
		empty := false
		switch rest = trimComment(rest); {
		case len(rest) == 0:
		case string(rest) == "[]":
			empty = true
		default:
			return false
		}
		switch key {
		case "vms":
			if out.VMs, ok = list(&d, vmFields, empty, items(data), eachVM); !ok {
				return false
			}
		case "scaleSets":
			if out.ScaleSets, ok = list[scaleSetEntry](&d, scaleSetFields, empty, 0, nil); !ok {
				return false
			}
		default:
			return false
		}
	}
	if len(seen) == 0 {
		return false
	}
	*f = out
	return true
}

// yamlChars reports whether data holds only characters YAML allows, and
// no tab or carriage return other than before a newline.
func yamlChars(data []byte) bool {
	for i := 0; i < len(data); {
		c := data[i]
		switch {
		case c == '\n' || c >= ' ' && c < 0x7f:
			i++
		case c == '\r' && i+1 < len(data) && data[i+1] == '\n':
			i++
		case c >= utf8.RuneSelf:
			r, n := utf8.DecodeRune(data[i:])
			if n == 1 || !yamlPrintable(r) {
				return false
			}
			i += n
		default:
			return false
		}
	}
	return true
}

// lines walks a document a line at a time, past blank and comment lines.
type lines struct {
	data   []byte
	pos    int
	line   []byte // the current line, without its indentation and line break
	indent int    // its indentation
	held   bool   // the current line is to be read again
}

// next moves to the next line that is neither blank nor a comment, and
// reports whether there is one.
func (d *lines) next() bool {
	if d.held {
		d.held = false
		return true
	}
	for d.pos < len(d.data) {
		end := bytes.IndexByte(d.data[d.pos:], '\n')
		if end < 0 {
			end = len(d.data) - d.pos
		}
		line := bytes.TrimSuffix(d.data[d.pos:d.pos+end], []byte("\r"))
		d.pos += end + 1
		trimmed := bytes.TrimLeft(line, " ")
		if len(trimmed) == 0 || trimmed[0] == '#' {
			continue
		}
		d.line, d.indent = trimmed, len(line)-len(trimmed)
		return true
	}
	return false
}

// hold makes next return the current line again.
func (d *lines) hold() { d.held = true }

// keyOf reads "key:" at the start of s, the key being letters only, and
// returns the key and what follows the colon: nothing, or a space and
// more.
func keyOf(s []byte) (key string, rest []byte, ok bool) {
	i := 0
	for i < len(s) && (s[i] >= 'a' && s[i] <= 'z' || s[i] >= 'A' && s[i] <= 'Z') {
		i++
	}
	if i == 0 || i == len(s) || s[i] != ':' || i+1 < len(s) && s[i+1] != ' ' {
		return "", nil, false
	}
	return string(s[:i]), s[i+1:], true
}

// trimComment returns s without leading spaces and without a trailing
// comment and the spaces before it; s holds no quotes.
func trimComment(s []byte) []byte {
	s = bytes.TrimLeft(s, " ")
	if len(s) > 0 && s[0] == '#' {
		return nil
	}
	if i := bytes.Index(s, []byte(" #")); i >= 0 {
		s = s[:i]
	}
	return bytes.TrimRight(s, " ")
}

// fields maps the keys of an entry type to their fields.
type fields struct {
	index map[string]int // field index by key
	bit   map[string]int // by key, its bit in a set of keys seen
}

func fieldsOf(keys []fieldKey) *fields {
	f := &fields{index: map[string]int{}, bit: map[string]int{}}
	for i, k := range keys {
		f.index[k.name], f.bit[k.name] = k.index, i
	}
	return f
}

var (
	vmFields       = fieldsOf(vmKeys)
	scaleSetFields = fieldsOf(scaleSetKeys)
)

// items counts the lines of data that start a list item: at least as
// many as the items of its lists.
func items(data []byte) int {
	n := 0
	for len(data) > 0 {
		line := bytes.TrimLeft(data, " ")
		if len(line) > 1 && line[0] == '-' && line[1] == ' ' {
			n++
		}
		i := bytes.IndexByte(line, '\n')
		if i < 0 {
			break
		}
		data = line[i+1:]
	}
	return n
}

// list reads the items of a list of entries of type T under a key at
// column 0, making room for size items at once (growing the list copies
// every entry again); empty means the key said [] and no item may
// follow.
// With each set, list hands each item to each as it is read, in one
// entry it reuses, and keeps none: a big document's entries are never
// all held at once.
func list[T any](d *lines, fs *fields, empty bool, size int, each func(*T)) ([]T, bool) {
	var out []T
	if empty {
		out = []T{}
	}
	var cur *T
	col := -1
	for d.next() {
		if d.indent == 0 && d.line[0] != '-' {
			d.hold()
			break
		}
		if empty || d.line[0] != '-' || len(d.line) < 2 || d.line[1] != ' ' || col >= 0 && d.indent != col {
			return nil, false
		}
		col = d.indent
		switch {
		case each != nil && cur == nil:
			cur = new(T)
		case each != nil:
			*cur = *new(T)
		case out == nil:
			out = make([]T, 0, max(size, 1))
		}
		if each == nil {
			out = append(out, *new(T))
			cur = &out[len(out)-1]
		}
		e := reflect.ValueOf(cur).Elem()
		item := bytes.TrimLeft(d.line[2:], " ")
		if len(item) > 0 && item[0] == '{' {
			if !flowEntry(item, e, fs) {
				return nil, false
			}
		} else if !blockEntry(d, col+len(d.line)-len(item), item, e, fs) {
			return nil, false
		}
		if each != nil {
			each(cur)
		}
	}
	return out, true
}

// flowEntry reads the flow mapping s, "{key: value, ...}" and perhaps a
// comment, into the entry e.
func flowEntry(s []byte, e reflect.Value, fs *fields) bool {
	s = bytes.TrimLeft(s[1:], " ")
	var seen uint64
	if len(s) > 0 && s[0] == '}' {
		return len(s) == 1 || s[1] == ' ' && len(trimComment(s[1:])) == 0
	}
	for {
		key, rest, ok := keyOf(s)
		if !ok || len(rest) == 0 {
			return false
		}
		value, after, ok := scalar(bytes.TrimLeft(rest, " "), true)
		if !ok || !set(e, fs, key, value, &seen) {
			return false
		}
		after = bytes.TrimLeft(after, " ")
		switch {
		case len(after) > 0 && after[0] == ',':
			s = bytes.TrimLeft(after[1:], " ")
		case len(after) > 0 && after[0] == '}':
			return len(after) == 1 || after[1] == ' ' && len(trimComment(after[1:])) == 0
		default:
			return false
		}
	}
}

// blockEntry reads a block mapping into the entry e: first, the
// key-value line first at column col, then each line at that column.
func blockEntry(d *lines, col int, first []byte, e reflect.Value, fs *fields) bool {
	var seen uint64
	line := first
	for {
		key, rest, ok := keyOf(line)
		if !ok {
			return false
		}
		var value []byte
		null := len(trimComment(rest)) == 0
		if !null {
			var after []byte
			value, after, ok = scalar(bytes.TrimLeft(rest, " "), false)
			if !ok || len(trimComment(after)) != 0 || len(after) > 0 && after[0] != ' ' {
				return false
			}
		}
		if !set(e, fs, key, value, &seen) {
			return false
		}
		if !d.next() {
			return true
		}
		if d.indent != col {
			if d.indent > col {
				return false // a value continued on the next line, or a nested block
			}
			d.hold()
			return true
		}
		line = d.line
	}
}

// scalar reads the scalar at the start of s and returns it with its
// quotes, and what follows. In a flow mapping a plain scalar ends at ','
// or '}'.
func scalar(s []byte, flow bool) (value, after []byte, ok bool) {
	if len(s) == 0 {
		return nil, nil, false
	}
	if q := s[0]; q == '"' || q == '\'' {
		end := bytes.IndexByte(s[1:], q)
		if end < 0 || q == '"' && bytes.IndexByte(s[1:end+1], '\\') >= 0 {
			return nil, nil, false
		}
		return s[:end+2], s[end+2:], true
	}
	i := 0
	for i < len(s) {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-' {
			i++
			continue
		}
		if c == ' ' || flow && (c == ',' || c == '}') {
			break
		}
		return nil, nil, false
	}
	return s[:i], s[i:], i > 0
}

// set sets the field of key in the entry e to value: as written, with
// its quotes, or nil for null. It refuses a key that is unknown or seen
// before, and a value the YAML decoder would read otherwise than set
// does, or refuse.
func set(e reflect.Value, fs *fields, key string, value []byte, seen *uint64) bool {
	i, ok := fs.index[key]
	bit := uint64(1) << fs.bit[key]
	if !ok || *seen&bit != 0 {
		return false
	}
	*seen |= bit
	if value == nil {
		return true // null leaves the field zero, as the YAML decoder does
	}
	f := e.Field(i)
	if f.Kind() == reflect.Pointer {
		f.Set(reflect.New(f.Type().Elem()))
		f = f.Elem()
	}
	quoted := value[0] == '"' || value[0] == '\''
	switch f.Kind() {
	case reflect.String:
		if quoted {
			f.SetString(string(value[1 : len(value)-1]))
			return true
		}
		switch string(value) {
		case "null", "Null", "NULL":
			return false
		}
		if c := value[0]; c == '-' || c == '.' {
			return false
		}
		f.SetString(string(value))
	case reflect.Bool:
		switch string(value) {
		case "true":
			f.SetBool(true)
		case "false":
		default:
			return false
		}
	case reflect.Int:
		if quoted || len(value) > 1 && value[0] == '0' || len(value) > 1 && value[0] == '-' && value[1] == '0' || len(value) > 18 {
			return false
		}
		n, err := strconv.Atoi(string(value))
		if err != nil {
			return false
		}
		f.SetInt(int64(n))
	default:
		return false
	}
	return true
}

package jsonstr

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestAsEncodingJSON: both appenders give encoding/json's bytes, with
// and without HTML escaping, for plain strings and for every kind that
// needs an escape, after what b already holds.
func TestAsEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "vm-1", "MIGRATE_ON_HOST_MAINTENANCE", `a"b`, `back\slash`, "<html>&amp;", "tab\there",
		"nl\n", "\x00", "é ünïcode", "\u2028\u2029", "bad \xff utf8", "del\x7f", "~ and space", "[Canceled] scheduled reboot"} {
		want, _ := json.Marshal(s)
		if got := Append([]byte("x"), s); !bytes.Equal(got, append([]byte("x"), want...)) {
			t.Errorf("Append(%q) = %s, want x%s", s, got, want)
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(s)
		want = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
		if got := AppendHTML([]byte("x"), s); !bytes.Equal(got, append([]byte("x"), want...)) {
			t.Errorf("AppendHTML(%q) = %s, want x%s", s, got, want)
		}
	}
}

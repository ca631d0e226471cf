package fleetfile_test

import (
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/fleetfile"
)

// TestMergePatchRFC7396: the examples of RFC 7396's Appendix A, and its
// section 3 example. Object members come out in the order of their
// names.
func TestMergePatchRFC7396(t *testing.T) {
	for _, c := range []struct{ doc, patch, want string }{
		{`{"a":"b"}`, `{"a":"c"}`, `{"a":"c"}`},
		{`{"a":"b"}`, `{"b":"c"}`, `{"a":"b","b":"c"}`},
		{`{"a":"b"}`, `{"a":null}`, `{}`},
		{`{"a":"b","b":"c"}`, `{"a":null}`, `{"b":"c"}`},
		{`{"a":["b"]}`, `{"a":"c"}`, `{"a":"c"}`},
		{`{"a":"c"}`, `{"a":["b"]}`, `{"a":["b"]}`},
		{`{"a":{"b":"c"}}`, `{"a":{"b":"d","c":null}}`, `{"a":{"b":"d"}}`},
		{`{"a":[{"b":"c"}]}`, `{"a":[1]}`, `{"a":[1]}`},
		{`["a","b"]`, `["c","d"]`, `["c","d"]`},
		{`{"a":"b"}`, `["c"]`, `["c"]`},
		{`{"a":"foo"}`, `null`, `null`},
		{`{"a":"foo"}`, `"bar"`, `"bar"`},
		{`{"e":null}`, `{"a":1}`, `{"a":1,"e":null}`},
		{`[1,2]`, `{"a":"b","c":null}`, `{"a":"b"}`},
		{`{}`, `{"a":{"bb":{"ccc":null}}}`, `{"a":{"bb":{}}}`},
		// Section 3.
		{`{"title":"Goodbye!","author":{"givenName":"John","familyName":"Doe"},"tags":["example","sample"],"content":"This will be unchanged"}`,
			`{"title":"Hello!","phoneNumber":"+01-123-456-7890","author":{"familyName":null},"tags":["example"]}`,
			`{"author":{"givenName":"John"},"content":"This will be unchanged","phoneNumber":"+01-123-456-7890","tags":["example"],"title":"Hello!"}`},
		// Numbers are kept as written; <, > and & are not escaped.
		{`{"n":1.50}`, `{"m":1e400,"s":"<a&b>"}`, `{"m":1e400,"n":1.50,"s":"<a&b>"}`},
		{" {\"a\": 1}\n", "\t{}\n", `{"a":1}`},
	} {
		got, err := fleetfile.MergePatch([]byte(c.doc), []byte(c.patch))
		if err != nil || string(got) != c.want {
			t.Errorf("MergePatch(%s, %s) = %s, %v; want %s", c.doc, c.patch, got, err, c.want)
		}
	}
}

// TestMergePatchRefuses: a document or patch that is not one JSON value,
// or names a member twice, is refused.
func TestMergePatchRefuses(t *testing.T) {
	for _, c := range []struct{ doc, patch, want string }{
		{`{"a":1}`, `{"a":2,"a":null}`, `the merge patch names the member "a" twice`},
		{`{"a":1}`, `{"b":{"c":1,"c":2}}`, `the merge patch names the member "c" twice`},
		{`{"a":1,"a":1}`, `{}`, `the document names the member "a" twice`},
		{`{"a":1}`, ``, "the merge patch is empty or ends early"},
		{`{"a":1}`, `{"a":`, "the merge patch is empty or ends early"},
		{`{"a":1}`, `{"a" 1}`, "the merge patch is not JSON: invalid character '1' after object key"},
		{`{"a":1}`, `{a: 1}`, "the merge patch is not JSON: invalid character 'a'"},
		{`{"a":1}`, `{} {}`, "the merge patch has more after its JSON value"},
		{`{"a":1}`, `{}}`, "the merge patch has more after its JSON value"},
	} {
		got, err := fleetfile.MergePatch([]byte(c.doc), []byte(c.patch))
		if forewarn.ErrorCode(err) != forewarn.EINVALID || forewarn.ErrorMessage(err) != c.want {
			t.Errorf("MergePatch(%s, %s) = %s, %v; want %s", c.doc, c.patch, got, err, c.want)
		}
	}
}

package fleetfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/forewarn/forewarn"
)

// MergePatch applies patch, a JSON merge patch, to the JSON document doc
// as RFC 7396 says: a patch that is an object changes the members it
// names (null removes one, an object is merged into the member's value
// the same way, any other value replaces it) of doc, or of an empty
// object if doc is not one; any other patch replaces doc whole. Arrays
// are replaced, never merged. A document or patch that is not one JSON
// value, or has an object naming one member twice, is refused (EINVALID).
// The result's object members are in the order of their names.
func MergePatch(doc, patch []byte) ([]byte, error) {
	d, err := decodeJSONValue(doc)
	if err != nil {
		return nil, forewarn.Errorf(forewarn.EINVALID, "the document %v", err)
	}
	p, err := decodeJSONValue(patch)
	if err != nil {
		return nil, forewarn.Errorf(forewarn.EINVALID, "the merge patch %v", err)
	}
	return marshal(mergePatch(d, p))
}

// mergePatch is RFC 7396's MergePatch(Target, Patch).
func mergePatch(target, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	t, ok := target.(map[string]any)
	if !ok {
		t = map[string]any{}
	}
	for name, v := range p {
		if v == nil {
			delete(t, name)
		} else {
			t[name] = mergePatch(t[name], v)
		}
	}
	return t
}

// decodeJSONValue decodes data, one JSON value, keeping numbers as they
// are written and refusing an object that names a member twice. An
// error completes "the document ...".
func decodeJSONValue(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec)
	var twice repeated
	switch {
	case errors.As(err, &twice):
		return nil, fmt.Errorf("names the member %q twice", string(twice))
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return nil, errors.New("is empty or ends early")
	case err != nil:
		return nil, fmt.Errorf("is not JSON: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("has more after its JSON value")
	}
	return v, nil
}

// repeated is the name of a member an object names twice.
type repeated string

func (r repeated) Error() string { return "repeated member " + string(r) }

// decodeValue decodes the next value of dec.
func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		obj := map[string]any{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return nil, err
			}
			name := tok.(string)
			if _, dup := obj[name]; dup {
				return nil, repeated(name)
			}
			if obj[name], err = decodeValue(dec); err != nil {
				return nil, err
			}
		}
		_, err := dec.Token()
		return obj, err
	case json.Delim('['):
		arr := []any{}
		for dec.More() {
			v, err := decodeValue(dec)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		_, err := dec.Token()
		return arr, err
	}
	return tok, nil
}

// Package codec is the JSON the bolt and etcd stores keep an inventory,
// maintenance sessions, sightings and signing keys in: definitions
// (forewarn.Definition), scale set definitions (forewarn.ScaleSet),
// sessions (forewarn.Session) and sightings (forewarn.Sighting), each
// under its name or ID, and the signing keys (forewarn.SigningKeys). A fleet's worth is encoded at once into one
// buffer, and a decoded value is checked against the key it was stored
// under.
package codec

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/forewarn/forewarn"
)

// Batch is the JSON of several values, one after another in one buffer.
type Batch struct {
	buf  []byte
	ends []int // value i is buf[ends[i-1]:ends[i]], from 0 for the first
}

// Encode encodes m's value of each of names, in that order, into one
// Batch. A nil value (a removal) encodes as nothing: its Bytes are empty.
func Encode[T any](names []string, m map[string]*T) (*Batch, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	ends := make([]int, len(names))
	for i, name := range names {
		if v := m[name]; v != nil {
			if err := enc.Encode(v); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			buf.Truncate(buf.Len() - 1) // Encode's newline
		}
		ends[i] = buf.Len()
	}
	return &Batch{buf: buf.Bytes(), ends: ends}, nil
}

// Bytes returns the JSON of value i; it shares the Batch's buffer.
func (b *Batch) Bytes(i int) []byte {
	start := 0
	if i > 0 {
		start = b.ends[i-1]
	}
	return b.buf[start:b.ends[i]:b.ends[i]]
}

// Strings returns the JSON of every value as strings that share one
// copy of the buffer.
func (b *Batch) Strings() []string {
	all := string(b.buf)
	out := make([]string, len(b.ends))
	start := 0
	for i, end := range b.ends {
		out[i] = all[start:end]
		start = end
	}
	return out
}

// Definition decodes the definition stored under the VM name name.
func Definition(name string, b []byte) (*forewarn.Definition, error) {
	d := new(forewarn.Definition)
	if err := json.Unmarshal(b, d); err != nil {
		return nil, err
	}
	switch {
	case d.VM == nil:
		return nil, fmt.Errorf("definition of %q holds no VM", name)
	case d.VM.Name != name:
		return nil, fmt.Errorf("definition of VM %q is stored under %q", d.VM.Name, name)
	}
	return d, nil
}

// ScaleSet decodes the scale set definition stored under name.
func ScaleSet(name string, b []byte) (*forewarn.ScaleSet, error) {
	ss := new(forewarn.ScaleSet)
	if err := json.Unmarshal(b, ss); err != nil {
		return nil, err
	}
	if ss.Name != name {
		return nil, fmt.Errorf("scale set definition %q is stored under %q", ss.Name, name)
	}
	return ss, nil
}

// Session decodes the session stored under the ID id, normalized as a
// store returns it (forewarn.Session.Normalized).
func Session(id string, b []byte) (*forewarn.Session, error) {
	ses := new(forewarn.Session)
	if err := json.Unmarshal(b, ses); err != nil {
		return nil, err
	}
	if ses.ID != id {
		return nil, fmt.Errorf("session %q is stored under %q", ses.ID, id)
	}
	return ses.Normalized(), nil
}

// NormalizedSessions returns m with each session normalized as a store
// keeps it (forewarn.Session.Normalized), a copy of its own, and each
// nil (a removal) kept: what the stores write of a commit's sessions.
func NormalizedSessions(m map[string]*forewarn.Session) map[string]*forewarn.Session {
	out := make(map[string]*forewarn.Session, len(m))
	for id, ses := range m {
		if ses != nil {
			ses = ses.Normalized()
		}
		out[id] = ses
	}
	return out
}

// Sighting decodes the sighting of an event stored under its ID,
// normalized as a store returns it.
func Sighting(_ string, b []byte) (*forewarn.Sighting, error) {
	var si forewarn.Sighting
	if err := json.Unmarshal(b, &si); err != nil {
		return nil, err
	}
	return si.Normalized(), nil
}

// SigningKeys decodes the signing keys b holds, normalized; nil for
// none (b nil).
func SigningKeys(b []byte) (*forewarn.SigningKeys, error) {
	if b == nil {
		return nil, nil
	}
	var k forewarn.SigningKeys
	if err := json.Unmarshal(b, &k); err != nil {
		return nil, err
	}
	if len(k.Current.Secret) < forewarn.MinSigningKey {
		return nil, fmt.Errorf("a signing key of %d bytes, under %d", len(k.Current.Secret), forewarn.MinSigningKey)
	}
	return k.Normalized(), nil
}

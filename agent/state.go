package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/forewarn/forewarn"
)

// stateVersion is the version of the state file's format.
const stateVersion = 1

// stateDoc is the state file: the events whose handlers ran and that
// have not cleared yet.
type stateDoc struct {
	Version int       `json:"version"`
	Events  []*record `json:"events"`
}

// record is one handled event in the state file.
type record struct {
	Notice    forewarn.Notice `json:"notice"`
	HandledAt time.Time       `json:"handledAt"`
	// OK reports whether every handler succeeded.
	OK bool `json:"ok"`
}

// stateFile is the agent's memory of handled events across restarts.
// Its map is guarded by Agent.mu; writes are serialized by wmu.
type stateFile struct {
	path   string
	events map[string]*record

	wmu sync.Mutex
}

// loadState reads the state file at path. A missing file is an empty
// state; an unreadable or corrupt one is an error naming the file.
func loadState(path string) (*stateFile, error) {
	s := &stateFile{path: path, events: map[string]*record{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("state file %s: %w", path, err)
	}
	var doc stateDoc
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("state file %s is corrupt (%v); fix or remove it", path, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("state file %s is corrupt (data after the document); fix or remove it", path)
	}
	if doc.Version != stateVersion {
		return nil, fmt.Errorf("state file %s has version %d, want %d", path, doc.Version, stateVersion)
	}
	for i, r := range doc.Events {
		if r == nil || r.Notice.ID == "" {
			return nil, fmt.Errorf("state file %s is corrupt (event %d has no id); fix or remove it", path, i)
		}
		s.events[r.Notice.ID] = r
	}
	return s, nil
}

// records returns the records by event ID.
func (s *stateFile) records() map[string]*record { return maps.Clone(s.events) }

// put records that n was handled and returns its record.
func (s *stateFile) put(n forewarn.Notice, ok bool) *record {
	r := &record{Notice: n, HandledAt: time.Now().UTC().Round(0), OK: ok}
	s.events[n.ID] = r
	return r
}

// remove forgets the event id if its record is still r.
func (s *stateFile) remove(id string, r *record) {
	if s.events[id] == r {
		delete(s.events, id)
	}
}

// save writes the state atomically: to a temporary file in the same
// directory, synced, then renamed over the state file. mu guards the
// map; concurrent saves are serialized, and each writes the state as of
// its own turn, so the last write on disk is the latest state.
func (s *stateFile) save(mu *sync.Mutex) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	mu.Lock()
	doc := stateDoc{Version: stateVersion, Events: make([]*record, 0, len(s.events))}
	for _, r := range s.events {
		doc.Events = append(doc.Events, r)
	}
	slices.SortFunc(doc.Events, func(a, b *record) int { return strings.Compare(a.Notice.ID, b.Notice.ID) })
	b, err := json.MarshalIndent(doc, "", "  ")
	mu.Unlock()
	if err != nil {
		return err
	}
	b = append(b, '\n')
	return writeAtomic(s.path, b)
}

// writeAtomic replaces path with b, mode 0600, so that a crash leaves
// either the old file or the new one.
func writeAtomic(path string, b []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op after the rename
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

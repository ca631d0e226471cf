package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/forewarn/forewarn"
)

// markFile, beside the embedded store in the data directory, holds the
// highest revision the store reached and the highest DocumentIncarnation
// it recorded for any VM. It outlives the store file: when forewarn.db is
// replaced by an older copy (a backup restored, or an empty store put in
// its place), the store's revision is below the mark's, and the server
// raises every VM's incarnation past the highest it can have served
// before it serves anything, so that no VM sees its incarnation go back.
const markFile = "incarnation.mark"

// markSyncEvery is how often a changed mark is synced to disk. It is
// written after every commit, so a crash of the process loses nothing
// of it; a power loss can lose up to this much of its news.
const markSyncEvery = time.Second

// mark is the content of the mark file.
type mark struct {
	Revision    int64
	Incarnation int64
}

// markLen is the length of the mark file: two 20-digit numbers and
// their separators, written in place at offset 0, so an update is one
// small write that never changes the file's length.
const markLen = 2*20 + 2

func (m mark) bytes() []byte {
	return fmt.Appendf(nil, "%020d %020d\n", m.Revision, m.Incarnation)
}

// readMark reads the mark file at path; ok is false when there is none.
func readMark(path string) (m mark, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return mark{}, false, nil
	}
	if err != nil {
		return mark{}, false, fmt.Errorf("incarnation mark: %w", err)
	}
	f := strings.Fields(string(b))
	var e1, e2 error
	if len(f) == 2 {
		m.Revision, e1 = strconv.ParseInt(f[0], 10, 64)
		m.Incarnation, e2 = strconv.ParseInt(f[1], 10, 64)
	}
	if len(f) != 2 || e1 != nil || e2 != nil || m.Revision < 0 || m.Incarnation < 0 {
		return mark{}, false, forewarn.Errorf(forewarn.EINVALID,
			"incarnation mark %s is unreadable (%d bytes): if %s is the newest copy of the store, delete the mark and start again",
			path, len(b), storeFile)
	}
	return m, true, nil
}

// markedStore is the embedded store with its mark kept current: after
// each commit it records the revision and the highest incarnation.
type markedStore struct {
	forewarn.Store
	f    *os.File
	log  *slog.Logger
	stop chan struct{}
	done chan struct{}

	mu    sync.Mutex
	m     mark
	dirty bool
	err   error // the last write error, logged once
	// first is the state openMarked read, for the first Load (the
	// engine's), so that a start decodes the store once; a Commit drops
	// it.
	first atomic.Pointer[forewarn.State]
}

// openMarked wraps st, the store of the data directory dir, with its
// mark. When the store is behind the mark (restored from an older copy,
// or replaced by an empty one), it first raises every VM's incarnation,
// for the VMs of fleet, of the store's inventory and those the store
// remembers, to one above the highest the mark holds, in one commit, and
// logs that it did.
func openMarked(ctx context.Context, st forewarn.Store, dir string, fleet *forewarn.Fleet, log *slog.Logger) (*markedStore, error) {
	path := filepath.Join(dir, markFile)
	m, had, err := readMark(path)
	if err != nil {
		return nil, err
	}
	state, err := st.Load(ctx)
	if err != nil {
		return nil, err
	}
	first := state
	cur := mark{Revision: state.Revision}
	for _, n := range state.Incarnations {
		cur.Incarnation = max(cur.Incarnation, n)
	}
	if had && state.Revision < m.Revision {
		floor := max(m.Incarnation, cur.Incarnation) + 1
		c := &forewarn.Change{Revision: state.Revision, Incarnations: make(map[string]int64, len(fleet.VMs)+len(state.Incarnations))}
		for name, n := range state.Incarnations {
			c.Incarnations[name] = max(n, floor)
		}
		for _, vm := range fleet.VMs {
			c.Incarnations[vm.Name] = max(state.Incarnations[vm.Name], floor)
		}
		for name := range state.Inventory {
			c.Incarnations[name] = max(state.Incarnations[name], floor)
		}
		rev, err := st.Commit(ctx, c)
		if err != nil {
			return nil, fmt.Errorf("raise incarnations past the mark: %w", err)
		}
		log.Warn("the store is behind its incarnation mark: restored from an older copy, or replaced; every VM's DocumentIncarnation is raised past the highest served",
			"store", filepath.Join(dir, storeFile), "storeRevision", state.Revision, "markRevision", m.Revision,
			"markIncarnation", m.Incarnation, "raisedTo", floor, "vms", len(c.Incarnations))
		cur = mark{Revision: rev, Incarnation: floor}
		first = nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("incarnation mark: %w", err)
	}
	// The mark never goes back: a store ahead of it (the mark's last
	// news lost to a power cut) moves it on.
	cur.Incarnation = max(cur.Incarnation, m.Incarnation)
	s := &markedStore{Store: st, f: f, log: log, m: cur, stop: make(chan struct{}), done: make(chan struct{})}
	s.first.Store(first)
	if err := s.write(true); err != nil {
		f.Close()
		return nil, err
	}
	go s.syncLoop()
	return s, nil
}

// Load returns the state openMarked read the first time, when nothing
// was committed since, and the store's current state after that.
func (s *markedStore) Load(ctx context.Context) (*forewarn.State, error) {
	if st := s.first.Swap(nil); st != nil {
		return st, nil
	}
	return s.Store.Load(ctx)
}

// Commit commits c and, when it succeeds, records its revision and
// incarnations in the mark.
func (s *markedStore) Commit(ctx context.Context, c *forewarn.Change) (int64, error) {
	s.first.Store(nil)
	rev, err := s.Store.Commit(ctx, c)
	if err != nil {
		return rev, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m.Revision = max(s.m.Revision, rev)
	for _, n := range c.Incarnations {
		s.m.Incarnation = max(s.m.Incarnation, n)
	}
	s.dirty = true
	if werr := s.writeLocked(false); werr != nil && s.err == nil {
		s.err = werr
		s.log.Error("write the incarnation mark", "err", werr)
	}
	return rev, nil
}

// write writes the mark, and syncs it when sync is set.
func (s *markedStore) write(sync bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writeLocked(sync)
}

func (s *markedStore) writeLocked(sync bool) error {
	if _, err := s.f.WriteAt(s.m.bytes(), 0); err != nil {
		return fmt.Errorf("incarnation mark: %w", err)
	}
	if sync {
		if err := s.f.Sync(); err != nil {
			return fmt.Errorf("incarnation mark: %w", err)
		}
		s.dirty = false
	}
	return nil
}

// syncLoop syncs a changed mark every markSyncEvery until Close.
func (s *markedStore) syncLoop() {
	defer close(s.done)
	t := time.NewTicker(markSyncEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.mu.Lock()
			if s.dirty {
				if err := s.writeLocked(true); err != nil && s.err == nil {
					s.err = err
					s.log.Error("sync the incarnation mark", "err", err)
				}
			}
			s.mu.Unlock()
		}
	}
}

// Close syncs the mark and closes it and the store.
func (s *markedStore) Close() error {
	s.mu.Lock()
	stopped := s.f == nil
	s.mu.Unlock()
	if stopped {
		return s.Store.Close()
	}
	close(s.stop)
	<-s.done
	s.mu.Lock()
	werr := s.writeLocked(true)
	cerr := s.f.Close()
	s.f = nil
	s.mu.Unlock()
	return errors.Join(s.Store.Close(), werr, cerr)
}

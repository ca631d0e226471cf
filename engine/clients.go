package engine

import (
	"context"
	"sync"
	"time"

	"github.com/forewarn/forewarn"
)

// What the metadata servers note of their clients, for the
// client-behaviour report, is kept in the store so that a restart, or a
// report asked of another replica, changes none of its findings: each
// event's sighting (who read it first, who read it only after it
// started), written in the background soon after it changes, and each
// VM's client record (its counts), written with its VM record within
// about clientSavePeriod when the history says it is due, at most hourly
// otherwise, and when the engine closes. A crash (no Close) loses no
// sighting and no record due that is older than that: nothing of what a
// finding depends on.

// clientSavePeriod is how often the engine asks the history for the
// client records due, while some are: a record due is in the store about
// that long after the request that made it due (and the write's time).
const clientSavePeriod = time.Second

// maxCountSaves bounds the records due for a finding's count alone that
// one look saves (a few hundred bytes each): more VMs whose counts grow
// at once (a fleet's clients all at the preview api-version) take turns,
// each saved every (VMs ÷ maxCountSaves) looks, so that a misbehaving
// fleet does not keep the store writing.
const maxCountSaves = 1024

// ClientRecords is what the engine saves of each VM's client with its
// VM record: the history package implements it.
type ClientRecords interface {
	// ClientRecord returns the VM named name's client record to save
	// now, or nil when there is none to save.
	ClientRecord(name string) []byte
	// Unsaved returns the names of the VMs whose records changed since
	// ClientRecord last returned them, or whose write failed since.
	Unsaved() []string
	// NotSaved notes that the record ClientRecord last returned of the
	// VM named name was not written: Unsaved returns the VM again.
	NotSaved(name string)
	// Due returns the names of the VMs whose records are due for saving
	// now: every one due for a read of an event, and at most max others,
	// in turn; and reports whether more are due.
	Due(max int) (names []string, more bool)
}

// SetClientRecords makes the engine save r's client records with the VM
// records. Call it before the servers serve.
func (e *Engine) SetClientRecords(r ClientRecords) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.clients = r
}

// ClientRecord returns the client record of the VM named name that the
// store holds, or nil.
func (e *Engine) ClientRecord(name string) []byte {
	if m := e.member(name); m != nil {
		if b := m.client.Load(); b != nil {
			return *b
		}
	}
	return nil
}

// NoteClients tells the engine that client records are due for saving
// (ClientRecords.Due): it asks for them within clientSavePeriod, and
// saves them in the background.
func (e *Engine) NoteClients() {
	if e.clientsDue.Swap(true) {
		return // noted already, and not yet taken
	}
	select {
	case e.persist <- "":
	default: // the loop is at work: it looks at clientsDue next
	}
}

// Unsaved reports whether what the client report's findings depend on
// is not all in the store yet: sightings noted and not yet written, or
// client records due (NoteClients) that the engine has not yet looked
// for and written. A crash loses nothing of it once Unsaved is false.
func (e *Engine) Unsaved() bool {
	e.noted.mu.Lock()
	sightings := len(e.noted.m) > 0 || e.noted.writing
	e.noted.mu.Unlock()
	return sightings || e.clientsDue.Load() || e.clientsLook.Load()
}

// dueClients returns the names of the VMs whose client records the
// history has due, and reports whether more are due.
func (e *Engine) dueClients() (names []string, more bool) {
	if r := e.clientRecords(); r != nil {
		return r.Due(maxCountSaves)
	}
	return nil, false
}

// historyRecords returns the client records the history has to save of
// the VMs named that are in the inventory, by name: encoded once, before
// a write and its retries, and without e.mu held.
func (e *Engine) historyRecords(names []string) map[string][]byte {
	r := e.clientRecords()
	if r == nil {
		return nil
	}
	out := map[string][]byte{}
	for _, name := range names {
		if _, ok := out[name]; ok || e.member(name) == nil {
			continue
		}
		if b := r.ClientRecord(name); b != nil {
			out[name] = b
		}
	}
	return out
}

// clientRecord returns what the VM record of m, the VM named name, holds
// as its client record in a write now: the history's, in hist, else the
// store's; and reports whether it is the history's.
func clientRecord(hist map[string][]byte, name string, m *member) (b []byte, fromHistory bool) {
	if b := hist[name]; b != nil {
		return b, true
	}
	if b := m.client.Load(); b != nil {
		return *b, false
	}
	return nil, false
}

// sightings holds the sightings noted and not yet written: merged as
// they come, written in the background (persistLoop) in one commit.
type sightings struct {
	mu sync.Mutex
	m  map[string]*forewarn.Sighting
	// writing reports that saveSightings is writing those it took.
	writing bool
}

// NoteSighting notes what a server saw of event id's readers, s, for the
// store, where it is merged with what other servers and runs noted:
// the earliest first reader, the most late readers, and the NotBefore
// and start last read. It is written in the background, soon.
func (e *Engine) NoteSighting(id string, s forewarn.Sighting) {
	e.noted.mu.Lock()
	if e.noted.m == nil {
		e.noted.m = make(map[string]*forewarn.Sighting)
	}
	e.noted.m[id] = merge(e.noted.m[id], &s)
	e.noted.mu.Unlock()
	select {
	case e.persist <- "":
	default: // a write is due already
	}
}

// SubscribeSightings calls fn with every sighting the store holds now,
// by event ID, and again with those of each commit applied (all of them
// after a reload). fn runs with the engine locked: it must be quick and
// must not call the engine, and it must not keep the map.
func (e *Engine) SubscribeSightings(fn func(map[string]*forewarn.Sighting)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ssubs = append(e.ssubs, fn)
	fn(e.sightings)
}

// installSightings takes in the sightings a commit wrote, or a reload's
// (all), and tells the subscribers. e.mu must be held.
func (e *Engine) installSightings(m map[string]*forewarn.Sighting, all bool) {
	if all {
		e.sightings = make(map[string]*forewarn.Sighting, len(m))
	}
	for id, s := range m {
		if e.events[id] != nil {
			e.sightings[id] = s
		}
	}
	if len(m) == 0 && !all {
		return
	}
	for _, fn := range e.ssubs {
		fn(m)
	}
}

// saveSightings writes the sightings noted since the last write, merged
// with the store's, leaving out those that change nothing and those of
// events gone. It runs only in persistLoop.
func (e *Engine) saveSightings() {
	e.noted.mu.Lock()
	noted := e.noted.m
	e.noted.m = nil
	e.noted.writing = len(noted) > 0
	e.noted.mu.Unlock()
	if len(noted) == 0 {
		return
	}
	defer func() {
		e.noted.mu.Lock()
		e.noted.writing = false
		e.noted.mu.Unlock()
	}()
	err := e.retry(context.Background(), func(ctx context.Context) error {
		e.mu.Lock()
		defer e.mu.Unlock()
		c := &forewarn.Change{Sightings: map[string]*forewarn.Sighting{}}
		for id, s := range noted {
			if e.events[id] == nil {
				continue
			}
			if m := merge(e.sightings[id], s); *m != *orZero(e.sightings[id]) {
				c.Sightings[id] = m
			}
		}
		if len(c.Sightings) == 0 {
			return nil
		}
		covered, err := e.write(ctx, c)
		if err == nil && !covered {
			e.installSightings(c.Sightings, false)
		}
		return err
	})
	if err != nil {
		e.log.Error("save who read the events", "events", len(noted), "err", err)
	}
}

// merge returns what a and b, two sightings of one event (either nil),
// say together.
func merge(a, b *forewarn.Sighting) *forewarn.Sighting {
	switch {
	case a == nil:
		return b.Normalized()
	case b == nil:
		return a.Normalized()
	}
	m := *a.Normalized()
	b = b.Normalized()
	if b.By != "" && (m.By == "" || b.At.Before(m.At)) {
		m.By, m.At = b.By, b.At
	}
	if !b.NotBefore.IsZero() {
		m.NotBefore = b.NotBefore
	}
	if m.Started.IsZero() {
		m.Started = b.Started
	}
	m.LateReaders = max(m.LateReaders, b.LateReaders)
	if b.FirstLate != "" && (m.FirstLate == "" || b.FirstLateAt.Before(m.FirstLateAt)) {
		m.FirstLate, m.FirstLateAt = b.FirstLate, b.FirstLateAt
	}
	return &m
}

// orZero returns *s, or a zero sighting for nil.
func orZero(s *forewarn.Sighting) *forewarn.Sighting {
	if s == nil {
		return new(forewarn.Sighting)
	}
	return s
}

// unsavedClients returns the VMs whose client records changed since they
// were saved, for the last write before the engine closes.
func (e *Engine) unsavedClients() []string {
	if r := e.clientRecords(); r != nil {
		return r.Unsaved()
	}
	return nil
}

// clientRecords returns the ClientRecords SetClientRecords set, or nil.
func (e *Engine) clientRecords() ClientRecords {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.clients
}

// clientSaveBatch bounds the VM records of one write that carries client
// records, a few hundred bytes each: well within etcd's default request
// size (1.5 MiB).
const clientSaveBatch = 512

// saveClients writes the VM records of names, with their client records,
// in commits of at most clientSaveBatch.
func (e *Engine) saveClients(names []string) {
	for len(names) > 0 {
		n := min(len(names), clientSaveBatch)
		e.saveSeen(names[:n])
		names = names[n:]
	}
}

// clientSaved notes that m's VM record, with client record b, is the
// store's. e.mu must be held, or the write just made.
func clientSaved(m *member, b []byte) {
	if b != nil {
		m.client.Store(&b)
	}
}

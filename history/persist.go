package history

import (
	"encoding/json"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
)

// What the report needs is kept across a restart (and shared between
// replicas) through the engine's store: each event's Mark as a
// forewarn.Sighting, noted to the engine as it changes (a first reader,
// a late reader, a NotBefore or a start read), and each VM's Stats as
// its client record, which the engine saves with the VM's record. A
// record is due for saving when it changed in a way a finding depends
// on: the VM read an event that appeared since its last read, or counted
// a slow gap or a read after a start, or a finding's count went from 0
// (dueRead, once per VM and event or finding), or a finding's count grew
// (dueCount: a request refused, throttled, at
// an api-version that counts in a finding for its VM (NoteCountedVersion),
// a long-poll without last_etag, an approval of another VM's Terminate
// or after a NotBefore). The engine asks Due for
// them about once a second and saves them in a few commits, so that a
// crash loses none that is older than that; its other changes (requests
// made, first and last call, gaps that are no finding) are saved with
// the VM's LastSeen (hourly), and every change when the engine closes.
// A VM's ring, made at its first request after a restart or when its
// Stats are asked for, starts from its record; a Mark starts from its
// event's sighting.

// What makes a VM's record due (stats.due): dueRead is saved at the
// engine's next look, whatever the number of VMs; dueCount for a bounded
// number of VMs at each look, in turn.
const (
	dueRead uint8 = 1 << iota
	dueCount
)

// keeper is the engine that keeps h's records, nil for none. It is set
// once, by Follow, before requests are recorded.
type keeper struct {
	eng *engine.Engine
	// born is when h began to follow the engine (Unix ns): a VM's counts
	// saved before were saved by a server that ran before this one.
	born int64
}

// keep makes eng keep h's records, and h take in what eng's store holds.
func (h *History) keep(eng *engine.Engine) {
	h.keeper = &keeper{eng: eng, born: time.Now().UnixNano()}
	h.marks.note = func(m *Mark) { eng.NoteSighting(m.id, m.sighting()) }
	eng.SubscribeSightings(h.restoreSightings)
	eng.SetClientRecords(h)
}

// visible returns how much of the time from from to to (Unix ns) a
// server ran: all of it but what falls between r's stop and restart.
func (r *ring) visible(from, to int64) int64 {
	return visibleNs(from, to, r.stop, r.restart)
}

// Visible returns how much of the time from from to to a server ran, to
// see the VM's requests: all of it but what falls between Stopped and
// Restarted.
func (s *Stats) Visible(from, to time.Time) time.Duration {
	if s.Stopped.IsZero() {
		return to.Sub(from)
	}
	return time.Duration(visibleNs(from.UnixNano(), to.UnixNano(), s.Stopped.UnixNano(), s.Restarted.UnixNano()))
}

// visibleNs returns how much of the time from from to to a server ran:
// all of it but what falls between stop and restart (all times Unix ns;
// stop and restart 0 when no server stopped).
func visibleNs(from, to, stop, restart int64) int64 {
	return to - from - max(min(to, restart)-max(from, stop), 0)
}

// sighting returns m as the store keeps it.
func (m *Mark) sighting() forewarn.Sighting {
	m.mu.Lock()
	defer m.mu.Unlock()
	var s forewarn.Sighting
	if m.by != "" {
		s.By, s.At = m.by, time.Unix(0, m.at).UTC()
	}
	if nb := m.notBefore.Load(); nb != 0 {
		s.NotBefore = time.Unix(0, nb).UTC()
	}
	if st := m.started.Load(); st != 0 {
		s.Started = time.Unix(0, st).UTC()
	}
	if m.lateBy != "" {
		s.LateReaders, s.FirstLate, s.FirstLateAt = int(m.late.Load()), m.lateBy, time.Unix(0, m.lateAt).UTC()
	}
	return s
}

// noteSighting tells the keeper of m's change, if any keeps the marks.
func (ms *marks) noteSighting(m *Mark) {
	if ms.note != nil {
		ms.note(m)
	}
}

// restoreSightings takes in the sightings a store holds: what the
// servers saw before a restart, or another replica saw. A Mark keeps the
// earliest first reader, the most late readers, and what it read
// itself.
func (h *History) restoreSightings(sightings map[string]*forewarn.Sighting) {
	for id, s := range sightings {
		m := h.marks.get(id)
		if s.By != "" && (!m.seen.Load() || s.At.UnixNano() < m.atOf()) {
			m.mu.Lock()
			m.by, m.at = s.By, s.At.UnixNano()
			m.mu.Unlock()
			m.seen.Store(true)
		}
		if !s.NotBefore.IsZero() && m.notBefore.Load() == 0 {
			m.notBefore.Store(s.NotBefore.UnixNano())
		}
		if !s.Started.IsZero() && m.started.Load() == 0 {
			m.started.Store(s.Started.UnixNano())
		}
		if s.LateReaders > 0 {
			m.mu.Lock()
			if int(m.late.Load()) < s.LateReaders {
				m.late.Store(int32(s.LateReaders))
			}
			if m.lateBy == "" || s.FirstLateAt.UnixNano() < m.lateAt {
				m.lateBy, m.lateAt = s.FirstLate, s.FirstLateAt.UnixNano()
			}
			m.mu.Unlock()
		}
	}
}

// atOf returns when m was first seen (Unix ns).
func (m *Mark) atOf() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.at
}

// clientRecord is a VM's Stats as the engine saves them: what a
// restarted server needs to report the same findings, and to judge the
// VM's next requests as it would have.
type clientRecord struct {
	API            API            `json:"api,omitempty"`
	Requests       uint64         `json:"requests,omitempty"`
	First          int64          `json:"first,omitempty"`
	Last           int64          `json:"last,omitempty"`
	Saved          int64          `json:"saved,omitempty"`
	LastEnd        int64          `json:"lastEnd,omitempty"`
	MaxGap         int64          `json:"maxGap,omitempty"`
	MaxGapEnd      int64          `json:"maxGapEnd,omitempty"`
	MaxPend        int64          `json:"maxPending,omitempty"`
	MaxPendEnd     int64          `json:"maxPendingEnd,omitempty"`
	Slow           uint64         `json:"slow,omitempty"`
	NoHeader       uint64         `json:"noHeader,omitempty"`
	Throttled      uint64         `json:"throttled,omitempty"`
	NoETag         int64          `json:"noETag,omitempty"`
	MaintPolls     int64          `json:"maintenancePolls,omitempty"`
	Versions       []VersionCount `json:"versions,omitempty"`
	OtherVersions  uint64         `json:"otherVersions,omitempty"`
	Foreign        uint64         `json:"foreign,omitempty"`
	Late           uint64         `json:"late,omitempty"`
	LastForeign    string         `json:"lastForeign,omitempty"`
	LastLate       string         `json:"lastLate,omitempty"`
	WatchSince     int64          `json:"watchSince,omitempty"`
	WatchUntil     int64          `json:"watchUntil,omitempty"`
	WatchEvent     string         `json:"watchEvent,omitempty"`
	LastRead       int64          `json:"lastRead,omitempty"`
	ReadLate       uint64         `json:"readLate,omitempty"`
	LastReadLate   string         `json:"lastReadLate,omitempty"`
	ReadLateBy     int64          `json:"readLateBy,omitempty"`
	ReadLateNotice int64          `json:"readLateNotice,omitempty"`
}

// idOf returns m's event ID, "" for nil.
func idOf(m *Mark) string {
	if m == nil {
		return ""
	}
	return m.id
}

// ClientRecord returns the client record of the VM named name, with
// every count it has, for the engine to save; nil when the VM has made
// no request since h began (its record, if any, is the store's). The
// VM's record counts as saved from now on, unless NotSaved says
// otherwise (see Unsaved).
func (h *History) ClientRecord(name string) []byte {
	rg, g, ok := h.ring(name)
	if !ok || rg == nil || !rg.lock(g) {
		return nil
	}
	rg.st.dirty, rg.st.due, rg.st.taken = false, 0, rg.st.due
	st := rg.st
	rg.mu.Unlock()
	t := h.strs.Load()
	r := clientRecord{
		API: st.api, Requests: st.requests, First: st.first, Last: st.last, Saved: time.Now().UnixNano(), LastEnd: rg.lastEnd.Load(),
		MaxGap: st.maxGap, MaxGapEnd: st.maxGapEnd, MaxPend: st.maxPend, MaxPendEnd: st.maxPendEnd,
		Slow: st.slow, NoHeader: st.noHeader, Throttled: st.throttled, NoETag: rg.noETag.Load(), MaintPolls: rg.maintPolls.Load(),
		OtherVersions: st.otherVersions, Foreign: st.foreign, Late: st.late,
		LastForeign: idOf(st.lastForeign), LastLate: idOf(st.lastLate),
		LastRead: st.lastRead, ReadLate: st.readLate, LastReadLate: idOf(st.lastReadLate),
		ReadLateBy: st.readLateBy, ReadLateNotice: st.readLateNotice,
	}
	if st.watch.until > 0 {
		r.WatchSince, r.WatchUntil, r.WatchEvent = st.watch.since, st.watch.until, idOf(st.watch.mark)
	}
	for i, id := range st.versionIDs {
		if id != 0 && int(id) < len(t.strs) {
			r.Versions = append(r.Versions, VersionCount{Version: t.strs[id], Requests: st.versions[i]})
		}
	}
	b, _ := json.Marshal(r) // a struct of numbers and strings always encodes
	return b
}

// Unsaved returns the names of the VMs whose Stats changed since
// ClientRecord last returned them, or that NotSaved named since.
func (h *History) Unsaved() []string {
	var out []string
	h.rings.Range(func(name string, c *cell) bool {
		m := c.m.Load()
		if m == nil || m == left || !m.r.lock(m.gen) {
			return true
		}
		if m.r.st.dirty {
			out = append(out, name)
		}
		m.r.mu.Unlock()
		return true
	})
	return out
}

// NotSaved notes that the client record ClientRecord last returned of
// the VM named name was not written: Unsaved returns the VM again, and
// Due as it was due before (a read at the next look), or as a count at
// its next turn when it was not due.
func (h *History) NotSaved(name string) {
	if rg, g, ok := h.ring(name); ok && rg != nil && rg.lock(g) {
		due := rg.st.taken
		if due == 0 {
			due = dueCount
		}
		h.noteClient(rg, due)
		rg.mu.Unlock()
	}
}

// Due returns the names of the VMs whose client records are due for
// saving (see dueRead and dueCount): every one due for a read, and at
// most max due for a count only, in the order they became due, those
// left over keeping their place; and reports whether more are due. Its
// cost follows the VMs due, not the fleet. The engine calls it from one
// goroutine.
func (h *History) Due(max int) (names []string, more bool) {
	h.dueMu.Lock()
	queue := h.queue
	h.queue = nil
	h.dueMu.Unlock()
	var counts, rest []string
	for _, name := range queue {
		rg, g, ok := h.ring(name)
		if !ok || rg == nil || !rg.lock(g) {
			continue // left the inventory
		}
		st := &rg.st
		switch {
		case !st.queued:
			// Queued again after leaving and rejoining the inventory:
			// taken at its other place in the queue.
		case st.due&dueRead != 0:
			names = append(names, name)
			st.queued = false
		case st.due&dueCount != 0 && len(counts) < max:
			counts = append(counts, name)
			st.queued = false
		case st.due&dueCount != 0:
			rest = append(rest, name) // stays queued
		default:
			st.queued = false // saved since it was queued (hourly, say)
		}
		rg.mu.Unlock()
	}
	if len(rest) > 0 {
		h.dueMu.Lock()
		h.queue = append(rest, h.queue...)
		h.dueMu.Unlock()
		more = true
	}
	return append(names, counts...), more
}

// restore starts r, the new ring of the VM named name, from the VM's
// client record in the store, if it has one. No request holds r yet.
func (h *History) restore(r *ring, name string) {
	if h.keeper == nil {
		return
	}
	b := h.keeper.eng.ClientRecord(name)
	if b == nil {
		return
	}
	var c clientRecord
	if err := json.Unmarshal(b, &c); err != nil {
		return // a record of another version: the VM starts afresh
	}
	mark := func(id string) *Mark {
		if id == "" {
			return nil
		}
		return h.marks.get(id)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.st = stats{
		api: c.API, requests: c.Requests, first: c.First, last: c.Last,
		maxGap: c.MaxGap, maxGapEnd: c.MaxGapEnd, maxPend: c.MaxPend, maxPendEnd: c.MaxPendEnd,
		slow: c.Slow, noHeader: c.NoHeader, throttled: c.Throttled, otherVersions: c.OtherVersions,
		foreign: c.Foreign, late: c.Late, lastForeign: mark(c.LastForeign), lastLate: mark(c.LastLate),
		lastRead: c.LastRead, readLate: c.ReadLate, lastReadLate: mark(c.LastReadLate),
		readLateBy: c.ReadLateBy, readLateNotice: c.ReadLateNotice,
	}
	if c.WatchUntil > 0 {
		r.st.watch = watch{since: c.WatchSince, until: c.WatchUntil, mark: mark(c.WatchEvent)}
	}
	for i, v := range c.Versions[:min(len(c.Versions), maxVersions)] {
		r.st.versionIDs[i], r.st.versions[i] = h.intern(v.Version, false), v.Requests
	}
	r.lastEnd.Store(c.LastEnd)
	r.noETag.Store(c.NoETag)
	r.maintPolls.Store(c.MaintPolls)
	if c.Saved > 0 && c.Saved < h.keeper.born {
		r.stop, r.restart = c.Saved, h.keeper.born
	}
}

// noteClient notes that r's Stats changed, and what of it makes its
// record due for saving (0 for nothing: the change is saved with the
// VM's next LastSeen, within the hour, or when the engine closes). A
// record that becomes due joins the queue Due takes from, unless it is
// in it; the first to join an empty queue tells the keeper. r.mu is
// held.
func (h *History) noteClient(r *ring, due uint8) {
	if h.keeper == nil {
		return
	}
	r.st.dirty = true
	if due == 0 || r.st.due&due == due {
		return
	}
	r.st.due |= due
	if r.st.queued {
		return
	}
	r.st.queued = true
	h.dueMu.Lock()
	first := len(h.queue) == 0
	h.queue = append(h.queue, r.name)
	h.dueMu.Unlock()
	if first {
		h.keeper.eng.NoteClients()
	}
}

// recalls reports whether the store holds a client record of the VM
// named name.
func (h *History) recalls(name string) bool {
	return h.keeper != nil && h.keeper.eng.ClientRecord(name) != nil
}

package history

import (
	"net/http"
	"time"
)

// SlowFactor is how many times its API's expected interval a gap
// between a VM's calls, while an event it could see was pending, must
// exceed, beside the room SlowGap leaves for jitter, to count as slow
// polling.
const SlowFactor = 5

// Expected returns how often a client of api is expected to call: once
// a second on Azure, where seed 000 recommends polling "once per
// second"; once a second on Compute Engine, where a client holds a
// wait_for_change long-poll and re-issues it at once (seed 002), so only
// the time between its requests counts; every 5 seconds on EC2, which
// advises checking for Spot interruption notices every 5 s
// (docs/aws-wire.md).
func Expected(api API) time.Duration {
	if api == AWS {
		return 5 * time.Second
	}
	return time.Second
}

// SlowGap returns the gap between calls above which a client of api
// polls too slowly while an event is pending: SlowFactor times Expected,
// and one Expected more of room for jitter, so that a client that polls
// every SlowFactor intervals (every 5 s, many clients' default) is not
// flagged when its timer fires or its request is answered a little
// late: 6 s on Azure and Compute Engine, 30 s on EC2.
func SlowGap(api API) time.Duration { return (SlowFactor + 1) * Expected(api) }

// maxVersions bounds the distinct Scheduled Events api-versions counted
// per VM; further ones are counted together.
const maxVersions = 4

// eventsPath is the Azure path whose api-versions are counted.
const eventsPath = "/metadata/scheduledevents"

// stats is one VM's accumulators: fixed size, updated in constant time
// under its ring's lock. Times are Unix nanoseconds, 0 for never.
type stats struct {
	api API
	// versionIDs are the table ids of the api-versions counted (0: none
	// yet), and versions their counts, kept apart to pack: a ring fits
	// the 352-byte size class.
	versionIDs [maxVersions]uint16
	// dirty reports that the accumulators changed since their record was
	// last saved, due what of it is to be saved soon (persist.go), taken
	// the due bits ClientRecord last cleared, which NotSaved restores, and
	// queued that the VM is in the History's queue of records due.
	dirty, queued         bool
	due, taken            uint8
	requests              uint64
	first, last           int64 // starts of the first and the latest request
	maxGap, maxGapEnd     int64
	maxPend, maxPendEnd   int64
	slow                  uint64
	noHeader, throttled   uint64
	versions              [maxVersions]uint64
	otherVersions         uint64
	foreign, late         uint64
	lastForeign, lastLate *Mark
	// watch is the window of the Scheduled events the VM last read, for
	// its next gap, whatever the request that ends it reads.
	watch watch
	// lastRead is when the latest request that read a document showing
	// an event ended.
	lastRead int64
	// readLate counts the events first read after they started, their
	// notice unread; lastReadLate is the latest, read readLateBy after
	// its start, with a notice of readLateNotice.
	readLate                   uint64
	lastReadLate               *Mark
	readLateBy, readLateNotice int64
}

// watch is a window in which events a VM read were Scheduled: from the
// earliest one's appearance to the latest NotBefore read (Unix
// nanoseconds), and the Mark of the event with that NotBefore, whose
// start, once a read of it shows it, ends the window sooner (an event
// approved or started early). until is 0 for no window.
type watch struct {
	since, until int64
	mark         *Mark
}

// end returns when w's window ends.
func (w *watch) end() int64 {
	if w.mark != nil {
		if s := w.mark.started.Load(); s > 0 && s < w.until {
			return s
		}
	}
	return w.until
}

// notice counts r, an event that the request read and whose document
// showed it Scheduled for a while, with Mark m: the part of the gap
// before the request during which r was Scheduled; r, if still
// Scheduled, in the window the VM's next gap is checked against; r, if
// Started, as an event the VM may have read only after its notice
// passed (stats.add decides).
func (hw *Writer) notice(r *Ref, m *Mark) {
	end := hw.start.UnixNano()
	if r.Started > 0 {
		end = min(end, r.Started)
	}
	if hw.gapFrom >= 0 { // else another request was in flight: no gap
		hw.noticeGap = max(hw.noticeGap, hw.ring.visible(max(r.Since, hw.gapFrom), end))
	}
	hw.since = max(hw.since, r.Since)
	switch w := &hw.watch; {
	case r.Started > 0:
		if r.Started > r.Since && int(hw.nStarted) < len(hw.started) {
			hw.started[hw.nStarted] = r
			hw.nStarted++
		}
	case r.NotBefore == 0:
	case w.until == 0:
		*w = watch{since: r.Since, until: r.NotBefore, mark: m}
	default:
		w.since = min(w.since, r.Since)
		if r.NotBefore > w.until {
			w.until, w.mark = r.NotBefore, m
		}
	}
}

// add counts one request of the VM that hw answered, begun at start and
// ended at end, at the api-version of table id version, and returns what makes the VM's
// record due for saving (persist.go): dueRead when the VM read an event
// that appeared since its last read, counted a slow gap or a read after
// a start, or a finding's count went from 0 (a new finding); dueCount
// when another finding's count grew.
//
// The gap before it counts as pending for its longest part during which
// an event the VM could see was Scheduled: from the event's appearance,
// or the VM's previous request if later, to this request, or the
// event's start if sooner. The events are those this request read (a
// Started one with its start) and those the VM last read Scheduled
// (st.watch, until their NotBefore), so the gap counts whatever this
// request reads: the event Started, or nothing once it has ended.
func (st *stats) add(hw *Writer, api API, code int, start, end int64, version uint16, path string) (due uint8) {
	findings := st.slow + st.readLate
	st.api = api
	st.requests++
	if st.first == 0 {
		st.first = start
	}
	st.last = max(st.last, start)
	if gap := hw.ring.visible(hw.gapFrom, start); hw.gapFrom > 0 && gap > st.maxGap {
		st.maxGap, st.maxGapEnd = gap, start
	}
	g := hw.noticeGap
	if w := &st.watch; w.until > 0 && hw.gapFrom >= 0 {
		g = max(g, hw.ring.visible(max(w.since, hw.gapFrom), min(start, w.end())))
	}
	if g > 0 {
		if g > st.maxPend {
			st.maxPend, st.maxPendEnd = g, start
		}
		if g > int64(SlowGap(api)) {
			st.slow++
		}
	}
	// A Started event read with no read since it appeared is read for the
	// first time, after its notice passed: counted when the notice was
	// long enough for a client polling as expected to read it.
	for _, r := range hw.started[:hw.nStarted] {
		if st.lastRead < r.Since && r.Started-r.Since > int64(SlowGap(api)) {
			m := r.mark.Load()
			st.readLate++
			st.lastReadLate, st.readLateBy, st.readLateNotice = m, start-r.Started, r.Started-r.Since
			m.noteLate(hw.ring.name, start)
		}
	}
	if hw.read {
		// The first read since an event appeared: the read that tells
		// later ones of it from reads after its notice passed unread.
		if hw.since > st.lastRead {
			due |= dueRead
		}
		st.lastRead = max(st.lastRead, end)
	}
	if hw.watch.until > 0 {
		st.watch = hw.watch
	}
	if hw.approved != nil {
		// The VM approved: it has acted on its notice, and may now go
		// down with the event it let start.
		st.watch = watch{}
	}
	// counted reports that a finding's count grew, and first that one
	// was 0 before: a new finding, saved as soon as a read.
	counted, first := false, hw.flags&flagFirstNoETag != 0
	if code == http.StatusTooManyRequests {
		st.throttled++
		counted, first = true, first || st.throttled == 1
	}
	if hw.flags&flagNoHeader != 0 {
		st.noHeader++
		counted, first = true, first || st.noHeader == 1
	}
	if api == Azure && version != 0 && path == eventsPath {
		if n := st.addVersion(version); n > 0 && hw.flags&flagCounted != 0 {
			counted, first = true, first || n == 1
		}
	}
	if hw.foreign > 0 {
		first = first || st.foreign == 0
		st.foreign += uint64(hw.foreign)
		st.lastForeign = hw.lastForeign
		counted = true
	}
	if hw.late > 0 {
		first = first || st.late == 0
		st.late += uint64(hw.late)
		st.lastLate = hw.lastLate
		counted = true
	}
	if st.slow+st.readLate != findings || first {
		due |= dueRead
	}
	if counted || hw.flags&flagNoETag != 0 {
		due |= dueCount
	}
	return due
}

// addVersion counts a request at the api-version of table id, and
// returns the VM's requests at it now, or 0 when it counts it among the
// others (not one of the VM's api-versions).
func (st *stats) addVersion(id uint16) uint64 {
	for i, v := range st.versionIDs {
		if v == id || v == 0 {
			st.versionIDs[i] = id
			st.versions[i]++
			return st.versions[i]
		}
	}
	st.otherVersions++
	return 0
}

// NoteNoHeader notes, on the request answered through w, that it was
// refused for lacking its API's metadata header (Azure's Metadata: true,
// Compute Engine's Metadata-Flavor: Google). It does nothing when w is
// not recorded.
func NoteNoHeader(w http.ResponseWriter) {
	if hw := find(w); hw != nil {
		hw.flags |= flagNoHeader
	}
}

// NoteCountedVersion notes, on the request answered through w, that its
// api-version counts in a finding of the client report for its VM
// (azure.CountedVersion): the VM's record is then due for saving soon
// (persist.go), where requests at other versions are saved hourly. It
// does nothing when w is not recorded.
func NoteCountedVersion(w http.ResponseWriter) {
	if hw := find(w); hw != nil {
		hw.flags |= flagCounted
	}
}

// NoteLongPoll notes, on the request answered through w, a
// wait_for_change request: on instance/maintenance-event when maint,
// and with a last_etag when withETag. It is counted at once, not when
// the request is done: a long-poll may be held for as long as nothing
// changes.
func NoteLongPoll(w http.ResponseWriter, maint, withETag bool) {
	if hw := find(w); hw != nil {
		if maint {
			hw.flags |= flagMaintPoll
			hw.ring.maintPolls.Add(1)
		}
		if !withETag {
			if hw.ring.noETag.Add(1) == 1 {
				hw.flags |= flagFirstNoETag // a new finding
			}
			hw.flags |= flagNoETag
		}
	}
}

// NoteHeld notes, on the request answered through w, that its
// maintenance-event long-poll (NoteLongPoll) is held, until Done.
func NoteHeld(w http.ResponseWriter) {
	if hw := find(w); hw != nil && hw.flags&(flagMaintPoll|flagHeld) == flagMaintPoll {
		hw.flags |= flagHeld
		hw.ring.held.Add(1)
	}
}

// NoteApproval notes, on the request answered through w, that it
// approved event id: of a Terminate that does not name the VM (foreign,
// seed 004: each scale set VM approves only its own), and after the
// event's NotBefore (late). It does nothing when w is not recorded or
// neither holds.
func (h *History) NoteApproval(w http.ResponseWriter, id string, foreign, late bool) {
	hw := find(w)
	if h == nil || hw == nil || !foreign && !late {
		return
	}
	m := h.marks.get(id)
	if foreign && hw.foreign < 255 {
		hw.foreign++
		hw.lastForeign = m
	}
	if late && hw.late < 255 {
		hw.late++
		hw.lastLate = m
	}
}

// VersionCount is how many requests a VM made at one api-version.
type VersionCount struct {
	Version  string `json:"version"`
	Requests uint64 `json:"requests"`
}

// Stats is a copy of one VM's accumulators, since it last joined the
// inventory (or the server started).
type Stats struct {
	// API is the metadata API of the VM's latest request.
	API API
	// Requests counts every request, refused ones too; First and Last
	// are when the first and the latest began.
	Requests    uint64
	First, Last time.Time
	// LastEnd is when the latest-ending request ended; InFlight counts
	// those being answered now.
	LastEnd  time.Time
	InFlight int
	// LongestGap is the longest time the VM had no request in flight,
	// ending at LongestGapEnd.
	LongestGap    time.Duration
	LongestGapEnd time.Time
	// LongestPendingGap is the longest part of a gap during which an
	// event the VM could see was pending (Scheduled), ending at
	// LongestPendingGapEnd, when the request that ended the gap began;
	// SlowGaps counts the gaps whose part is over SlowGap. An event
	// counts if the request that ended the gap read it, or if it is one
	// of those the VM last read Scheduled (PendingSince), whatever that
	// request read.
	LongestPendingGap    time.Duration
	LongestPendingGapEnd time.Time
	SlowGaps             uint64
	// PendingSince and PendingUntil bound the window in which the events
	// the VM last read Scheduled were pending as far as it knows: from
	// the earliest one's appearance to the latest NotBefore, or that
	// event's start once a read showed it started. Both are zero when it
	// read none, or approved events since.
	PendingSince, PendingUntil time.Time
	// ReadsAfterStart counts the events the VM first read after they
	// started, having read no event since each appeared, when the notice
	// it missed was over SlowGap; LastReadAfterStart is the latest, read
	// LastReadLate after its start, whose notice was LastReadNotice.
	ReadsAfterStart              uint64
	LastReadAfterStart           string
	LastReadLate, LastReadNotice time.Duration
	// NoHeader counts requests refused for a missing metadata header,
	// Throttled those answered 429, NoETag wait_for_change requests
	// without last_etag (from when they began).
	NoHeader, Throttled, NoETag uint64
	// MaintenanceLongPolls counts wait_for_change requests on
	// maintenance-event, from when they began; HeldLongPolls those held
	// now.
	MaintenanceLongPolls uint64
	HeldLongPolls        int
	// APIVersions are the Scheduled Events api-versions used, at most 4,
	// with OtherVersions counting requests at any further ones.
	APIVersions   []VersionCount
	OtherVersions uint64
	// ForeignApprovals counts approvals of other VMs' Terminates,
	// LateApprovals those after the event's NotBefore; LastForeign and
	// LastLate are the latest such events' IDs.
	ForeignApprovals, LateApprovals uint64
	LastForeign, LastLate           string
	// Stopped and Restarted bound the time before this server ran when
	// none ran, after the VM's counts were saved (zero when they were
	// not): no gap counts it (Visible).
	Stopped, Restarted time.Time
}

// Stats returns a copy of vm's accumulators, and whether h has vm (a VM
// of the inventory).
func (h *History) Stats(vm string) (Stats, bool) {
	rg, g, ok := h.ring(vm)
	if !ok {
		return Stats{}, false
	}
	if rg == nil && h.recalls(vm) {
		// Its counts before a restart: a ring, as its next request makes.
		if rg, g = h.first(vm); rg == nil {
			return Stats{}, false
		}
	}
	if rg == nil {
		return Stats{}, true // no request yet
	}
	if !rg.lock(g) {
		return Stats{}, false
	}
	st, stop, restart := rg.st, rg.stop, rg.restart
	lastEnd, inFlight := rg.lastEnd.Load(), inflight(rg.state.Load())
	noETag, maintPolls, held := rg.noETag.Load(), rg.maintPolls.Load(), rg.held.Load()
	rg.mu.Unlock()
	t := h.strs.Load()
	tm := func(ns int64) time.Time {
		if ns == 0 {
			return time.Time{}
		}
		return time.Unix(0, ns).UTC()
	}
	out := Stats{
		API: st.api, Requests: st.requests, First: tm(st.first), Last: tm(st.last),
		LastEnd: tm(lastEnd), InFlight: inFlight,
		LongestGap: time.Duration(st.maxGap), LongestGapEnd: tm(st.maxGapEnd),
		LongestPendingGap: time.Duration(st.maxPend), LongestPendingGapEnd: tm(st.maxPendEnd), SlowGaps: st.slow,
		NoHeader: st.noHeader, Throttled: st.throttled, NoETag: uint64(noETag),
		MaintenanceLongPolls: uint64(maintPolls), HeldLongPolls: int(max(held, 0)),
		OtherVersions: st.otherVersions, ForeignApprovals: st.foreign, LateApprovals: st.late,
	}
	for i, id := range st.versionIDs {
		if id != 0 && int(id) < len(t.strs) {
			out.APIVersions = append(out.APIVersions, VersionCount{Version: t.strs[id], Requests: st.versions[i]})
		}
	}
	if st.lastForeign != nil {
		out.LastForeign = st.lastForeign.id
	}
	if st.lastLate != nil {
		out.LastLate = st.lastLate.id
	}
	if st.watch.until > 0 {
		out.PendingSince, out.PendingUntil = tm(st.watch.since), tm(st.watch.end())
	}
	if st.lastReadLate != nil {
		out.ReadsAfterStart, out.LastReadAfterStart = st.readLate, st.lastReadLate.id
		out.LastReadLate, out.LastReadNotice = time.Duration(st.readLateBy), time.Duration(st.readLateNotice)
	}
	out.Stopped, out.Restarted = tm(stop), tm(restart)
	return out, true
}

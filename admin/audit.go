package admin

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/forewarn/forewarn"
)

// AuditEntry is one operator action, or a summary of refused requests.
type AuditEntry struct {
	At time.Time `json:"at"`
	// Who is the caller's address, prefixed with "token@" when it proved
	// itself with the bearer token; "*" on a summary of refusals from
	// more addresses than are counted one by one.
	Who string `json:"who"`
	// Action is the method and path, such as "POST /v1/events/ID/approve".
	Action string `json:"action"`
	// Status is the HTTP status the action was answered with. 0 means
	// that its outcome was never recorded: the server stopped, or could
	// not write it, after it had recorded the attempt, so the change may
	// or may not have been made.
	Status int `json:"status"`
	// Count is set on a summary of refused requests: how many more
	// requests from Who were refused since Who's previous entry. Action
	// and Status are those of the last of them.
	Count int `json:"count,omitempty"`
}

// refusalInterval is how often refused requests are summarized: the
// first refusal from an address in an interval gets its own entry, the
// others one summary entry at the interval's end.
const refusalInterval = time.Minute

// maxRefusalSources is how many addresses an interval counts one by
// one; refusals from further addresses are counted together, as "*".
const maxRefusalSources = 32

// Line phases: a write's entry is two lines under one ID, its intent,
// written before the write is attempted, and its outcome.
const (
	phaseIntent  = "intent"
	phaseOutcome = "outcome"
)

// line is one line of the audit file. Refusals, summaries, and the
// entries of files written before intents existed, are single lines
// without an ID or a phase.
type line struct {
	AuditEntry
	ID    string `json:"id,omitempty"`
	Phase string `json:"phase,omitempty"`
}

// refusals counts an address's refused requests in an interval.
type refusals struct {
	n    int
	last AuditEntry
}

// AuditLog is an append-only file of operator actions, one JSON object a
// line, each synced to disk before its request is answered. A write is
// recorded twice: its intent before it is attempted (a write whose intent
// cannot be recorded is refused) and its outcome before it is answered.
// Refused requests are counted, and written at most twice per address
// a minute, so that a flood of them costs little disk and time.
type AuditLog struct {
	path   string
	prefix string // of this run's IDs

	// Shared, when set before the log is used, also receives every line,
	// after the file has it, and is what Entries reads: the log that
	// replicas sharing a store share. A line it refuses fails the write.
	Shared SharedLog

	mu     sync.Mutex // guards the fields below and the file's writes
	f      *os.File
	size   int64 // of the file
	torn   bool  // the file may end in a partial line
	closed bool
	nextID uint64

	rmu     sync.Mutex // guards the fields below
	refused map[string]*refusals
	flush   *time.Timer
}

// SharedLog is an audit log kept where every replica reads it (the etcd
// store).
type SharedLog interface {
	// AppendAuditLines appends lines, each one JSON object.
	AppendAuditLines(ctx context.Context, lines [][]byte) error
	// AuditLines returns the lines, oldest first.
	AuditLines(ctx context.Context) ([][]byte, error)
}

// sharedTimeout bounds a call to the shared log.
const sharedTimeout = 5 * time.Second

// OpenAuditLog opens (creating with mode 0600) the audit log at path. A
// last line torn by a crash is ended with a newline, so that it is
// skipped and the entries appended after it are read.
func OpenAuditLog(path string) (*AuditLog, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open audit log: %w", err)
	}
	l := &AuditLog{path: path, f: f, prefix: rand.Text()[:8]}
	if err := l.mend(); err != nil {
		f.Close()
		return nil, fmt.Errorf("open audit log %s: %w", path, err)
	}
	return l, nil
}

// mend ends a torn last line and learns the file's size.
func (l *AuditLog) mend() error {
	info, err := l.f.Stat()
	if err != nil {
		return err
	}
	l.size = info.Size()
	if l.size == 0 || !info.Mode().IsRegular() {
		return nil
	}
	last := make([]byte, 1)
	if _, err := l.f.ReadAt(last, l.size-1); err != nil {
		return err
	}
	if last[0] != '\n' {
		l.torn = true
		return l.write()
	}
	return nil
}

// write appends lines, after a newline when the file may end in a torn
// line, and syncs the file. When that fails it cuts the file back to its
// last whole line, or, failing that too, notes that it may be torn.
func (l *AuditLog) write(lines ...line) error {
	var buf []byte
	raw := make([][]byte, 0, len(lines))
	for _, ln := range lines {
		b, err := json.Marshal(ln)
		if err != nil {
			return err
		}
		raw = append(raw, b)
		buf = append(append(buf, b...), '\n')
	}
	if err := l.writeFile(buf); err != nil {
		return err
	}
	if l.Shared != nil {
		ctx, cancel := context.WithTimeout(context.Background(), sharedTimeout)
		defer cancel()
		if err := l.Shared.AppendAuditLines(ctx, raw); err != nil {
			return fmt.Errorf("write the shared audit log: %w", err)
		}
	}
	return nil
}

// writeFile appends buf, whole lines, to the file and syncs it.
func (l *AuditLog) writeFile(buf []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return forewarn.Errorf(forewarn.EUNAVAILABLE, "audit log is closed")
	}
	if l.torn {
		buf = append([]byte{'\n'}, buf...)
	}
	n, err := l.f.Write(buf)
	if err == nil {
		err = l.f.Sync()
	}
	if err != nil {
		if n > 0 && l.f.Truncate(l.size) != nil {
			l.size += int64(n)
			l.torn = true
		}
		return fmt.Errorf("write audit log %s: %w", l.path, err)
	}
	l.size += int64(n)
	l.torn = false
	return nil
}

// Append writes e and syncs the file.
func (l *AuditLog) Append(e AuditEntry) error { return l.write(line{AuditEntry: e}) }

// Intend records, synced, that e.Who is about to attempt e.Action, and
// returns the ID under which Outcome records how it ended.
func (l *AuditLog) Intend(e AuditEntry) (id string, err error) {
	l.mu.Lock()
	l.nextID++
	id = l.prefix + "-" + strconv.FormatUint(l.nextID, 10)
	l.mu.Unlock()
	e.Status = 0
	return id, l.write(line{AuditEntry: e, ID: id, Phase: phaseIntent})
}

// Outcome records, synced, how the write Intend returned id for ended:
// e.Status, at e.At.
func (l *AuditLog) Outcome(id string, e AuditEntry) error {
	return l.write(line{AuditEntry: e, ID: id, Phase: phaseOutcome})
}

// Refuse records the refused request e. The first refusal from e.Who in
// an interval of a minute is written at once; the others are counted,
// and one summary entry per address is written when the interval ends.
// Past 32 addresses in an interval, refusals are counted together under
// "*".
func (l *AuditLog) Refuse(e AuditEntry) error {
	l.rmu.Lock()
	if l.refused == nil {
		l.refused = map[string]*refusals{}
		l.flush = time.AfterFunc(refusalInterval, l.summarize)
	}
	who := e.Who
	if l.refused[who] == nil && len(l.refused) >= maxRefusalSources {
		who = "*"
	}
	if r := l.refused[who]; r != nil || who == "*" {
		if r == nil {
			r = new(refusals)
			l.refused[who] = r
		}
		r.n++
		r.last = e
		l.rmu.Unlock()
		return nil
	}
	l.refused[who] = new(refusals)
	l.rmu.Unlock()
	return l.write(line{AuditEntry: e})
}

// summarize ends the refusal interval: it writes one summary entry per
// address with refusals not yet written. Summaries that cannot be
// written are lost; the requests they count changed nothing.
func (l *AuditLog) summarize() {
	l.rmu.Lock()
	counted := l.refused
	l.refused, l.flush = nil, nil
	l.rmu.Unlock()
	now := time.Now().UTC()
	var lines []line
	for _, who := range slices.Sorted(maps.Keys(counted)) {
		if r := counted[who]; r.n > 0 {
			e := r.last
			e.At, e.Who, e.Count = now, who, r.n
			lines = append(lines, line{AuditEntry: e})
		}
	}
	if len(lines) > 0 {
		_ = l.write(lines...)
	}
}

// Entries returns every entry, oldest first. A write's intent and
// outcome are one entry, with the outcome's status; an intent without
// an outcome has status 0. A line torn by a crash is skipped.
func (l *AuditLog) Entries() ([]AuditEntry, error) {
	var data []byte
	if l.Shared != nil {
		ctx, cancel := context.WithTimeout(context.Background(), sharedTimeout)
		defer cancel()
		lines, err := l.Shared.AuditLines(ctx)
		if err != nil {
			return nil, fmt.Errorf("read the shared audit log: %w", err)
		}
		for _, ln := range lines {
			data = append(append(data, ln...), '\n')
		}
	} else {
		var err error
		if data, err = os.ReadFile(l.path); err != nil {
			return nil, fmt.Errorf("read audit log: %w", err)
		}
	}
	out := []AuditEntry{}
	intents := map[string]int{} // ID → index in out
	for raw := range bytes.Lines(data) {
		var ln line
		if json.Unmarshal(raw, &ln) != nil {
			continue
		}
		if i, ok := intents[ln.ID]; ok && ln.Phase == phaseOutcome {
			out[i].Status = ln.Status
			delete(intents, ln.ID)
			continue
		}
		if ln.Phase == phaseIntent {
			intents[ln.ID] = len(out)
		}
		out = append(out, ln.AuditEntry)
	}
	return out, nil
}

// Close writes the summary of refusals still being counted and closes
// the file.
func (l *AuditLog) Close() error {
	l.rmu.Lock()
	if l.flush != nil {
		l.flush.Stop()
	}
	l.rmu.Unlock()
	l.summarize()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	return l.f.Close()
}

// maxAction caps the recorded method and path; a longer one is cut.
const maxAction = 1024

// entry returns the audit entry of r from who, as of now.
func entry(r *http.Request, who string, status int) AuditEntry {
	action := r.Method + " " + r.URL.Path
	if len(action) > maxAction {
		action = action[:maxAction] + "…"
	}
	return AuditEntry{At: time.Now().UTC(), Who: who, Action: action, Status: status}
}

// audited serves the write r from who. Its intent is recorded before it
// is attempted, and a write whose intent cannot be recorded is refused
// unattempted. Its answer is held until its outcome is recorded too; if
// the outcome cannot be, the answer is still sent, since the change is
// made and its intent is on record.
func (s *Server) audited(w http.ResponseWriter, r *http.Request, who string) {
	e := entry(r, who, 0)
	id, err := s.Audit.Intend(e)
	if err != nil {
		s.log.Error("audit", logMethod, r.Method, logPath, r.URL.Path, logErr, err)
		s.writeError(w, r, auditError(err))
		return
	}
	held := &heldWriter{header: w.Header()}
	s.route(held, r)
	e.At, e.Status = time.Now().UTC(), held.status()
	if err := s.Audit.Outcome(id, e); err != nil {
		s.log.Error("audit outcome", logMethod, r.Method, logPath, r.URL.Path, logErr, err)
	}
	held.release(w)
}

// auditError is the refusal of a write whose intent could not be
// recorded.
func auditError(err error) error {
	if forewarn.NoSpace(err) {
		return forewarn.Errorf(forewarn.ENOSPACE, "no space left on device: the audit log could not record this request, so it was not attempted; free space on the server's disk")
	}
	if forewarn.ErrorCode(err) == forewarn.EUNAVAILABLE {
		// The shared log's store is down (etcd without a quorum): say so.
		return forewarn.Errorf(forewarn.EUNAVAILABLE, "the audit log could not record this request, so it was not attempted: %s", forewarn.ErrorMessage(err))
	}
	return forewarn.Errorf(forewarn.EUNAVAILABLE, "the audit log could not record this request, so it was not attempted; the server log says why")
}

// refuse answers a request that guard or authenticate refused with err,
// and records it when it is a write.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, who string, err error) {
	if forewarn.ErrorCode(err) == forewarn.EUNAUTHORIZED {
		w.Header().Set("WWW-Authenticate", `Bearer realm="forewarn"`)
	}
	// A refused caller holds nothing: the connection closes after the
	// answer (401 without the token, 403 from a VM's address or another
	// site's page, 415, 421).
	w.Header().Set("Connection", "close")
	s.writeError(w, r, err)
	if s.Audit != nil && r.Method != http.MethodGet && r.Method != http.MethodHead {
		if err := s.Audit.Refuse(entry(r, who, errorStatus(err))); err != nil {
			s.log.Error("audit", logErr, err)
		}
	}
}

func (s *Server) handleAudit(w http.ResponseWriter, r *http.Request) {
	if s.Audit == nil {
		s.writeJSON(w, r, http.StatusOK, auditResponse{Entries: []AuditEntry{}})
		return
	}
	entries, err := s.Audit.Entries()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeList(s, w, r, "entries", entries) // as auditResponse
}

// auditResponse is the body of GET /v1/audit.
type auditResponse struct {
	Entries []AuditEntry `json:"entries"`
}

// heldWriter holds an answer's status and body until release; its
// headers go straight to the real writer's map, which sends nothing
// before its WriteHeader.
type heldWriter struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (h *heldWriter) Header() http.Header { return h.header }

func (h *heldWriter) WriteHeader(code int) {
	if h.code == 0 {
		h.code = code
	}
}

func (h *heldWriter) Write(b []byte) (int, error) {
	h.WriteHeader(http.StatusOK)
	return h.body.Write(b)
}

// status is the status the handler answered with.
func (h *heldWriter) status() int { return cmp.Or(h.code, http.StatusOK) }

// release sends the held answer to w.
func (h *heldWriter) release(w http.ResponseWriter) {
	w.WriteHeader(h.status())
	_, _ = w.Write(h.body.Bytes()) // a failed write means the client went away
}

// Audit returns every recorded operator action, oldest first.
func (c *Client) Audit(ctx context.Context) ([]AuditEntry, error) {
	var resp auditResponse
	if err := c.do(ctx, http.MethodGet, "/v1/audit", nil, &resp); err != nil {
		return nil, err
	}
	return resp.Entries, nil
}

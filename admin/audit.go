package admin

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// AuditEntry is one operator action.
type AuditEntry struct {
	At time.Time `json:"at"`
	// Who is the caller's address, prefixed with "token@" when it proved
	// itself with the bearer token.
	Who string `json:"who"`
	// Action is the method and path, such as "POST /v1/events/ID/approve".
	Action string `json:"action"`
	// Status is the HTTP status the action was answered with.
	Status int `json:"status"`
}

// AuditLog is an append-only file of operator actions, one JSON object a
// line, each synced to disk before the next request is answered.
type AuditLog struct {
	path string
	mu   sync.Mutex
	f    *os.File
}

// OpenAuditLog opens (creating with mode 0600) the audit log at path.
func OpenAuditLog(path string) (*AuditLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open audit log: %w", err)
	}
	return &AuditLog{path: path, f: f}, nil
}

// Append writes e and syncs the file.
func (l *AuditLog) Append(e AuditEntry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write audit log %s: %w", l.path, err)
	}
	return l.f.Sync()
}

// Entries returns every entry, oldest first. A line torn by a crash is
// skipped.
func (l *AuditLog) Entries() ([]AuditEntry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	data, err := os.ReadFile(l.path)
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	out := []AuditEntry{}
	for line := range bytes.Lines(data) {
		var e AuditEntry
		if json.Unmarshal(line, &e) == nil {
			out = append(out, e)
		}
	}
	return out, nil
}

// Close closes the file.
func (l *AuditLog) Close() error { return l.f.Close() }

// authenticate checks r's bearer token when the server has one, and
// returns who the caller is.
func (s *Server) authenticate(r *http.Request) (who string, ok bool) {
	who = r.RemoteAddr
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		who = host
	}
	if s.Token == "" || r.URL.Path == "/healthz" {
		return who, true
	}
	const prefix = "Bearer "
	h := r.Header.Get("Authorization")
	if len(h) <= len(prefix) || h[:len(prefix)] != prefix {
		return who, false
	}
	if subtle.ConstantTimeCompare([]byte(h[len(prefix):]), []byte(s.Token)) != 1 {
		return who, false
	}
	return "token@" + who, true
}

// maxAction caps the recorded method and path; a longer one is cut.
const maxAction = 1024

// audit records an operator action; a failure to record is logged.
func (s *Server) audit(r *http.Request, who string, status int) {
	action := r.Method + " " + r.URL.Path
	if len(action) > maxAction {
		action = action[:maxAction] + "…"
	}
	e := AuditEntry{At: time.Now().UTC(), Who: who, Action: action, Status: status}
	if err := s.Audit.Append(e); err != nil {
		s.log.Error("audit", logErr, err)
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
	s.writeJSON(w, r, http.StatusOK, auditResponse{Entries: entries})
}

// auditResponse is the body of GET /v1/audit.
type auditResponse struct {
	Entries []AuditEntry `json:"entries"`
}

// statusWriter remembers the status a handler answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// Audit returns every recorded operator action, oldest first.
func (c *Client) Audit(ctx context.Context) ([]AuditEntry, error) {
	var resp auditResponse
	if err := c.do(ctx, http.MethodGet, "/v1/audit", nil, &resp); err != nil {
		return nil, err
	}
	return resp.Entries, nil
}

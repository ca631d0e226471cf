package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/forewarn/forewarn"
)

// Answers that grow with the fleet or the state: the VM list holds 400
// bytes a VM (40 MB for 100,000 VMs) while it is written, the host list
// every VM's name, the event list a copy of every event, the audit log
// the whole file, a dashboard fragment the VM list while it is rendered,
// a named profile the runtime's. Written to a reader that does not read, such an answer is
// held until the connection's write deadline cuts it, so that sixteen of
// them from one address held 16 copies (1.4 GB for the VM list of 100,000
// VMs). They take turns: maxLarge at a time, each written as it is
// encoded (never also as one JSON buffer). A request that waits longer
// than largeWait for its turn gets 503 with Retry-After. The report is
// streamed VM by VM and holds nothing of that size, but takes a turn to
// read the events.

// maxLarge is how many large answers are built and written at once.
const maxLarge = 2

// defaultLargeWait is how long a request for a large answer waits for
// its turn.
const defaultLargeWait = 10 * time.Second

// largeRoutes are the patterns of the large answers.
var largeRoutes = map[string]bool{
	"GET /v1/vms":             true,
	"GET /v1/events":          true,
	"GET /v1/hosts":           true,
	"GET /v1/audit":           true,
	"GET /ui/fragment/{name}": true,
	"GET /debug/pprof/":       true,
}

// turn waits for a large answer's turn and returns the function that
// ends it. Errors: EUNAVAILABLE after largeWait, or when ctx ends.
func (s *Server) turn(ctx context.Context) (end func(), err error) {
	t := time.NewTimer(s.largeWait)
	defer t.Stop()
	select {
	case s.large <- struct{}{}:
		return func() { <-s.large }, nil
	case <-ctx.Done():
		return nil, forewarn.Errorf(forewarn.EUNAVAILABLE, "the request ended before its turn")
	case <-t.C:
		return nil, errBusy
	}
}

// errBusy refuses a large answer that waited too long for its turn.
var errBusy = forewarn.Errorf(forewarn.EUNAVAILABLE,
	"the server is busy writing %d other large answers (the VM list, the host list, the event list, the report, the audit log, dashboard fragments, profiles); try again", maxLarge)

// writeBusy answers a request refused with errBusy, or whose client
// went away.
func (s *Server) writeBusy(w http.ResponseWriter, r *http.Request, err error) {
	w.Header().Set("Retry-After", "1")
	s.writeError(w, r, err)
}

// writeList answers 200 with {"key":items} as writeJSON answers it (the
// same bytes), but writes each item as it is encoded, and lets it go
// once written.
func writeList[T any](s *Server, w http.ResponseWriter, r *http.Request, key string, items []T) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	buf.WriteString(`{` + jsonString(key) + `:`)
	if items == nil {
		buf.WriteString("null}\n")
		_, _ = w.Write(buf.Bytes())
		return
	}
	buf.WriteByte('[')
	var zero T
	for i := range items {
		if i > 0 {
			buf.WriteByte(',')
		}
		if err := enc.Encode(items[i]); err != nil {
			// The status is sent: the client sees a truncated answer.
			s.log.Error("encode response", logMethod, r.Method, logPath, r.URL.Path, logErr, err)
			return
		}
		buf.Truncate(buf.Len() - 1) // Encode's newline
		items[i] = zero
		if buf.Len() >= 16<<10 {
			if _, err := w.Write(buf.Bytes()); err != nil {
				return // the client went away
			}
			buf.Reset()
		}
	}
	buf.WriteString("]}\n")
	_, _ = w.Write(buf.Bytes()) // a failed write means the client went away
}

// jsonString returns s as a JSON string.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

package gce

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/internal/linklocal"
	"github.com/forewarn/forewarn/internal/retry"
)

// DefaultEndpoint is the real metadata server's address.
const DefaultEndpoint = "http://metadata.google.internal"

// HostEnv is the environment variable that, as for Google's own clients,
// names the metadata server as host:port when NewClient gets "".
const HostEnv = "GCE_METADATA_HOST"

// The keys Notices and Watch read, below /computeMetadata/v1/.
const (
	KeyName                = "instance/name"
	KeyMaintenanceEvent    = "instance/maintenance-event"
	KeyPreempted           = "instance/preempted"
	KeyUpcomingMaintenance = "instance/upcoming-maintenance"
)

// Client defaults.
const (
	defaultRetryInitial = 500 * time.Millisecond
	defaultRetryMax     = 30 * time.Second
	// getTimeout bounds one attempt of a request that does not wait for a
	// change; a long-poll is bounded only by its context.
	getTimeout = time.Minute
	// maxResponse caps the bytes read from one answer.
	maxResponse = 4 << 20
)

// Log attribute keys.
const (
	logURL     = "url"
	logAttempt = "attempt"
	logStatus  = "status"
	logErr     = "err"
	logWait    = "wait"
)

// ErrNotMetadataServer is returned for an answer without the header
// Metadata-Flavor: Google, which every answer of a metadata server, errors
// included, carries.
var ErrNotMetadataServer = errors.New("gce: the answer lacks Metadata-Flavor: Google; not a metadata server")

// ErrNoNotification is returned by Get and WaitForChange for
// instance/upcoming-maintenance while no maintenance is announced: the
// server's 503 "no notifications have been received yet" answer. It is a
// state, not a failure, and comes with that state's ETag, which
// WaitForChange accepts as lastETag to wait for an announcement.
var ErrNoNotification = errors.New("gce: no maintenance notification has been received")

// noNotification is the text of the 503 answer that means nothing is
// announced.
const noNotificationText = "no notifications have been received"

// Client reads a VM's maintenance keys from the Compute Engine metadata
// server, real or Forewarn's. It is safe for concurrent use.
//
// Every call retries, with exponential backoff and full jitter, answers
// that may succeed later (429, 410, 5xx: the real server answers 503
// during maintenance) and connection failures, until its context ends.
// A 404 and other client errors come back at once as a *StatusError.
type Client struct {
	base     *url.URL
	baseErr  error
	hc       *http.Client
	log      *slog.Logger
	retryMin time.Duration
	retryMax time.Duration

	// mu guards the ID of the upcoming maintenance being announced, kept
	// from its first sight until the key goes absent.
	mu         sync.Mutex
	upcomingID string
	ongoing    bool
}

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithHTTPClient makes the Client send its requests with hc. hc must not
// have a Timeout shorter than the waits WaitForChange and Watch make:
// they hang until a value changes. The default client dials directly,
// ignoring proxies, and has no overall timeout. A nil hc keeps the
// default.
func WithHTTPClient(hc *http.Client) ClientOption {
	return func(c *Client) {
		if hc != nil {
			c.hc = hc
		}
	}
}

// WithLogger makes the Client log retries to l. By default it logs
// nothing.
func WithLogger(l *slog.Logger) ClientOption {
	return func(c *Client) {
		if l != nil {
			c.log = l
		}
	}
}

// WithRetry sets the bounds of the retry backoff: the first wait is at
// most initial, each next one at most twice the previous bound, never
// more than max. Defaults: 500ms and 30s. Non-positive values keep the
// defaults; a max below initial is raised to initial.
func WithRetry(initial, max time.Duration) ClientOption {
	return func(c *Client) {
		if initial > 0 {
			c.retryMin = initial
		}
		if max > 0 {
			c.retryMax = max
		}
	}
}

// NewClient returns a Client of the metadata server at baseURL, such as
// "http://metadata.google.internal". For "" it uses "http://" + the value
// of GCE_METADATA_HOST when that is set, else DefaultEndpoint. A malformed
// baseURL is reported by every call.
func NewClient(baseURL string, opts ...ClientOption) *Client {
	if baseURL == "" {
		baseURL = DefaultEndpoint
		if h := os.Getenv(HostEnv); h != "" {
			baseURL = "http://" + h
		}
	}
	c := &Client{
		log:      slog.New(slog.DiscardHandler),
		retryMin: defaultRetryInitial,
		retryMax: defaultRetryMax,
	}
	c.base, c.baseErr = parseBase(baseURL)
	for _, o := range opts {
		o(c)
	}
	if c.retryMax < c.retryMin {
		c.retryMax = c.retryMin
	}
	if c.hc == nil {
		c.hc = defaultHTTPClient()
	}
	return c
}

// parseBase checks that s is an http or https URL with a host.
func parseBase(s string) (*url.URL, error) {
	u, err := linklocal.ParseBase(s)
	if err != nil {
		return nil, fmt.Errorf("gce: bad metadata server URL %q: %w", s, err)
	}
	return u, nil
}

func defaultHTTPClient() *http.Client {
	// No Timeout: long-polls hang until a change; plain reads are
	// bounded per attempt. Watch holds three long-polls.
	return linklocal.Client(0, 8)
}

// StatusError is an answer that retrying cannot change, such as a 404
// for an unknown key or a 403.
type StatusError struct {
	// Code is the HTTP status code.
	Code int
	// Message is the body's text when it is short plain text, else the
	// status text (real error bodies are HTML pages).
	Message string
}

// Error implements the error interface.
func (e *StatusError) Error() string {
	return fmt.Sprintf("gce: metadata server answered %d: %s", e.Code, e.Message)
}

// Get reads key, below /computeMetadata/v1/ (for example
// "instance/maintenance-event"; a query such as "?alt=json" may follow),
// and returns its value unmodified and its ETag.
// For instance/upcoming-maintenance with nothing announced it returns
// ErrNoNotification and the ETag of that state.
func (c *Client) Get(ctx context.Context, key string) (value, etag string, err error) {
	return c.get(ctx, key, false, "")
}

// WaitForChange waits until key's ETag differs from lastETag and returns
// the new value and ETag: at once when they already differ, else when the
// value changes, with no time limit but ctx's. It returns
// ErrNoNotification as Get does; that state's ETag as lastETag waits for
// an announcement.
func (c *Client) WaitForChange(ctx context.Context, key, lastETag string) (value, etag string, err error) {
	return c.get(ctx, key, true, lastETag)
}

// InstanceName returns the VM's name.
func (c *Client) InstanceName(ctx context.Context) (string, error) {
	v, _, err := c.Get(ctx, KeyName)
	return v, err
}

func (c *Client) get(ctx context.Context, key string, wait bool, lastETag string) (string, string, error) {
	if c.baseErr != nil {
		return "", "", c.baseErr
	}
	u := *c.base
	path, rawQuery, _ := strings.Cut(key, "?")
	u.Path += Prefix + strings.TrimPrefix(path, "/")
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return "", "", fmt.Errorf("get %s: bad query: %w", key, err)
	}
	if wait {
		q.Set("wait_for_change", "true")
		q.Set("last_etag", lastETag)
	}
	u.RawQuery = q.Encode()
	r, err := c.do(ctx, u.String(), wait)
	if err != nil {
		return "", "", fmt.Errorf("get %s: %w", key, err)
	}
	etag := r.header.Get("ETag")
	switch {
	case r.status == http.StatusOK:
		return string(r.body), etag, nil
	case r.absent():
		return "", etag, ErrNoNotification
	}
	return "", "", fmt.Errorf("get %s: %w", key, r.statusError())
}

// response is one answer, read in full.
type response struct {
	status int
	header http.Header
	body   []byte
}

// absent reports whether r is the 503 that says no maintenance
// notification has been received.
func (r *response) absent() bool {
	return r.status == http.StatusServiceUnavailable && strings.Contains(string(r.body), noNotificationText)
}

func (r *response) statusError() *StatusError {
	msg := strings.TrimSpace(string(r.body))
	if msg == "" || len(msg) > 512 || strings.HasPrefix(msg, "<") {
		msg = http.StatusText(r.status)
	}
	return &StatusError{Code: r.status, Message: msg}
}

// do sends a GET until it gets an answer that retrying would not change,
// or ctx ends. Every request carries Metadata-Flavor: Google, and every
// answer must.
func (c *Client) do(ctx context.Context, u string, wait bool) (*response, error) {
	var r *response
	err := retry.Do(ctx, c.retryMin, c.retryMax, func(ctx context.Context) (retry.Answer, error) {
		var err error
		switch r, err = c.once(ctx, u, wait); {
		case err != nil:
			return retry.Answer{}, err
		case !strings.EqualFold(r.header.Get("Metadata-Flavor"), "Google"):
			return retry.Answer{}, retry.Permanent{Err: fmt.Errorf("%w (status %d)", ErrNotMetadataServer, r.status)}
		case retry.Status(r.status) && !r.absent():
			return retry.Answer{Status: r.status, Header: r.header, Err: r.statusError()}, nil
		}
		return retry.Answer{}, nil
	}, func(n int, err error, a retry.Answer, wait time.Duration) {
		if err != nil {
			c.log.Warn("metadata request failed; retrying", logURL, u, logAttempt, n, logErr, err, logWait, wait)
		} else {
			c.log.Warn("metadata server answered an error; retrying", logURL, u, logAttempt, n, logStatus, a.Status, logWait, wait)
		}
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// once sends one GET and reads its answer. An attempt that does not wait
// for a change is bounded by getTimeout.
func (c *Client) once(ctx context.Context, u string, wait bool) (*response, error) {
	actx := ctx
	if !wait {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, getTimeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(actx, http.MethodGet, u, nil)
	if err != nil {
		return nil, retry.Permanent{Err: err}
	}
	req.Header.Set("Metadata-Flavor", "Google")
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return nil, err
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// watched are the keys Watch follows, in the order Notices lists what
// they announce. upcoming-maintenance is read as JSON.
var watched = [...]string{KeyMaintenanceEvent, KeyPreempted, KeyUpcomingMaintenance + "?alt=json"}

// Indexes into watched and state.
const (
	iMaintenance = iota
	iPreempted
	iUpcoming
)

// keyState is one key's value as last read.
type keyState struct {
	value, etag string
	// absent: upcoming-maintenance with nothing announced.
	absent bool
	// gone: the server does not have the key (404), so there is nothing to
	// follow; only upcoming-maintenance may be missing.
	gone bool
}

// sameValue reports whether a and b show the same value, whatever their
// ETags.
func (a keyState) sameValue(b keyState) bool {
	return a.value == b.value && a.absent == b.absent && a.gone == b.gone
}

// read gets or waits on watched key i.
func (c *Client) read(ctx context.Context, i int, wait bool, lastETag string) (keyState, error) {
	v, tag, err := c.get(ctx, watched[i], wait, lastETag)
	var se *StatusError
	switch {
	case err == nil:
		return keyState{value: v, etag: tag}, nil
	case errors.Is(err, ErrNoNotification):
		return keyState{etag: tag, absent: true}, nil
	case i == iUpcoming && errors.As(err, &se) && se.Code == http.StatusNotFound:
		// A server without advance notice has no such key.
		return keyState{absent: true, gone: true}, nil
	}
	return keyState{}, err
}

// Notices reads the VM's maintenance keys and returns what they announce,
// in this order (empty, not nil, when nothing is announced):
//
//   - instance/maintenance-event other than NONE: a Started notice of the
//     value as Type, ID "maintenance-event-" + the key's ETag, NotBefore the
//     upcoming window's start when one is announced;
//   - instance/preempted TRUE: a Started Preempt notice, ID "preempted";
//   - instance/upcoming-maintenance announced: an UPCOMING_MAINTENANCE
//     notice, Scheduled while PENDING and Started once ONGOING, NotBefore
//     window_start_time. The 503 "no notifications" answer, and a 404 from
//     a server without the key, announce nothing.
//
// Every notice has the VM's name as its only Resource, Duration -1,
// Source Platform and Provider forewarn.GCE.
//
// The upcoming notice's ID is "upcoming-maintenance-" + window_start_time
// as this Client first saw it, kept until the key goes absent again (or
// an ONGOING maintenance is followed by a PENDING one). Neither time
// field is stable on its own: window_start_time moves when maintenance is
// rescheduled or starts early, and latest_window_start_time follows it
// once the maintenance starts.
func (c *Client) Notices(ctx context.Context) ([]forewarn.Notice, error) {
	name, err := c.InstanceName(ctx)
	if err != nil {
		return nil, err
	}
	var st [len(watched)]keyState
	for i := range watched {
		if st[i], err = c.read(ctx, i, false, ""); err != nil {
			return nil, err
		}
	}
	return c.notices(name, &st), nil
}

// Watch calls fn with the VM's notices, as Notices returns them, once at
// start and then once every time they change, which is every time the
// value of maintenance-event, preempted or upcoming-maintenance changes.
// It follows the three keys with concurrent wait_for_change long-polls
// (upcoming-maintenance's absent state included, by that state's ETag),
// so it wakes when the server answers and does not poll. Calls to fn are
// sequential.
//
// Watch returns fn's error, ctx.Err() once ctx ends, or an error that
// retrying cannot fix (a *StatusError or ErrNotMetadataServer). Every
// goroutine it starts has ended when it returns.
func (c *Client) Watch(ctx context.Context, fn func([]forewarn.Notice) error) error {
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	fail := func(err error) error {
		if parent.Err() != nil {
			return parent.Err()
		}
		return err
	}
	name, err := c.InstanceName(ctx)
	if err != nil {
		return fail(err)
	}
	var st [len(watched)]keyState
	for i := range watched {
		if st[i], err = c.read(ctx, i, false, ""); err != nil {
			return fail(err)
		}
	}
	last := c.notices(name, &st)
	if err := fn(last); err != nil {
		return err
	}

	type update struct {
		i   int
		st  keyState
		err error
	}
	updates := make(chan update)
	for i := range watched {
		if st[i].gone {
			continue
		}
		wg.Add(1)
		go func(cur keyState) {
			defer wg.Done()
			idle := 0
			for {
				next, err := c.read(ctx, i, true, cur.etag)
				if ctx.Err() != nil {
					return
				}
				if err == nil && next.etag == cur.etag && next.sameValue(cur) {
					// The server answered without a change (it gave no ETag,
					// or ignored last_etag): wait before asking again rather
					// than spin.
					if retry.Sleep(ctx, retry.Backoff(c.retryMin, c.retryMax, idle)) != nil {
						return
					}
					idle++
					continue
				}
				idle = 0
				select {
				case updates <- update{i, next, err}:
				case <-ctx.Done():
					return
				}
				if err != nil || next.gone {
					return
				}
				cur = next
			}
		}(st[i])
	}

	for {
		select {
		case <-ctx.Done():
			return parent.Err()
		case u := <-updates:
			if u.err != nil {
				return fail(u.err)
			}
			st[u.i] = u.st
			// Every change of a value changes the notices; a new ETag of
			// the same maintenance-event value changes its notice's ID.
			ns := c.notices(name, &st)
			if slices.EqualFunc(ns, last, equalNotice) {
				continue
			}
			last = ns
			if err := fn(ns); err != nil {
				return err
			}
		}
	}
}

// notices normalizes the keys' states for the VM named name.
func (c *Client) notices(name string, st *[len(watched)]keyState) []forewarn.Notice {
	out := []forewarn.Notice{}
	up := parseUpcoming(st[iUpcoming])
	windowStart := time.Time{}
	if up != nil {
		windowStart = parseTime(up["window_start_time"])
	}
	if me := st[iMaintenance]; !me.absent && me.value != "NONE" {
		out = append(out, forewarn.Notice{
			ID:          "maintenance-event-" + me.etag,
			Type:        me.value,
			Status:      string(forewarn.Started),
			Resources:   []string{name},
			NotBefore:   windowStart,
			Duration:    -1,
			Source:      string(forewarn.Platform),
			Description: "maintenance-event is " + me.value,
			Provider:    forewarn.GCE,
		})
	}
	if p := st[iPreempted]; !p.absent && p.value == "TRUE" {
		out = append(out, forewarn.Notice{
			ID:        "preempted",
			Type:      string(forewarn.Preempt),
			Status:    string(forewarn.Started),
			Resources: []string{name},
			Duration:  -1,
			Source:    string(forewarn.Platform),
			Provider:  forewarn.GCE,
		})
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if up == nil {
		c.upcomingID, c.ongoing = "", false
		return out
	}
	ongoing := strings.EqualFold(up["maintenance_status"], "ONGOING")
	if c.upcomingID == "" || c.ongoing && !ongoing {
		first := up["window_start_time"]
		if first == "" {
			first = up["latest_window_start_time"]
		}
		c.upcomingID = "upcoming-maintenance-" + first
	}
	c.ongoing = ongoing
	status := forewarn.Scheduled
	if ongoing {
		status = forewarn.Started
	}
	desc := fmt.Sprintf("type %s, can_reschedule %s", up["type"], up["can_reschedule"])
	if end := up["window_end_time"]; end != "" {
		desc += ", window_end_time " + end
	}
	return append(out, forewarn.Notice{
		ID:          c.upcomingID,
		Type:        forewarn.UpcomingMaintenance,
		Status:      string(status),
		Resources:   []string{name},
		NotBefore:   windowStart,
		Duration:    -1,
		Source:      string(forewarn.Platform),
		Description: desc,
		Provider:    forewarn.GCE,
	})
}

// parseUpcoming returns the fields of an upcoming-maintenance value, or
// nil when nothing is announced. It reads the alt=json object (values
// that are not strings are kept as their JSON text) and, should a server
// ignore alt=json, the text form of one "key value" a line. An object
// without maintenance_status or window_start_time, such as the "{ }" the
// documentation shows, announces nothing.
func parseUpcoming(s keyState) map[string]string {
	if s.absent || s.gone {
		return nil
	}
	fields := map[string]string{}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s.value), &raw); err == nil {
		for k, v := range raw {
			var str string
			if json.Unmarshal(v, &str) == nil {
				fields[k] = str
			} else {
				fields[k] = string(v)
			}
		}
	} else {
		for line := range strings.Lines(s.value) {
			k, v, _ := strings.Cut(strings.TrimSpace(line), " ")
			if k != "" {
				fields[k] = strings.TrimSpace(v)
			}
		}
	}
	if fields["maintenance_status"] == "" && fields["window_start_time"] == "" {
		return nil
	}
	return fields
}

// parseTime reads an upcoming-maintenance time (RFC 3339, such as
// 2024-07-29T14:19:53+00:00) in UTC; zero when empty or unreadable.
func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(s))
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}

// equalNotice reports whether a and b are the same notice.
func equalNotice(a, b forewarn.Notice) bool {
	return a.ID == b.ID && a.Type == b.Type && a.Status == b.Status && slices.Equal(a.Resources, b.Resources) &&
		a.NotBefore.Equal(b.NotBefore) && a.Duration == b.Duration && a.Source == b.Source &&
		a.Description == b.Description && a.Provider == b.Provider
}

package azure

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/internal/linklocal"
	"github.com/forewarn/forewarn/internal/retry"
)

// DefaultEndpoint is the real IMDS address.
const DefaultEndpoint = "http://169.254.169.254"

// Client defaults.
const (
	// DefaultAPIVersion is the Scheduled Events api-version a Client asks
	// for unless WithAPIVersion says otherwise.
	DefaultAPIVersion = "2020-07-01"
	// defaultPollInterval is Watch's period: one request a second stays
	// well within IMDS's five per second per VM.
	defaultPollInterval = time.Second
	defaultRetryInitial = 500 * time.Millisecond
	defaultRetryMax     = 30 * time.Second
	// defaultTimeout bounds one request of the default HTTP client. The
	// call that enables a VM's scheduled events can take up to two minutes
	// to answer, so it is well above that.
	defaultTimeout = 3 * time.Minute
	// maxResponse caps the bytes read from one answer.
	maxResponse = 4 << 20
	// instanceVersion is the api-version of the compute/name call.
	instanceVersion = "2021-02-01"
)

// Log attribute keys.
const (
	logURL       = "url"
	logMethod    = "method"
	logAttempt   = "attempt"
	logStatus    = "status"
	logErr       = "err"
	logWait      = "wait"
	logEvent     = "event"
	logNotBefore = "notBefore"
)

// Client reads and approves a VM's Scheduled Events through the Azure
// Instance Metadata Service, real or Forewarn's. It is safe for
// concurrent use.
//
// Every call retries, with exponential backoff and full jitter, answers
// that may succeed later (429, 410, 5xx) and connection failures, until
// its context ends. Other answers come back at once as a *StatusError.
type Client struct {
	base       *url.URL
	baseErr    error
	hc         *http.Client
	apiVersion string
	poll       time.Duration
	log        *slog.Logger
	retryMin   time.Duration
	retryMax   time.Duration

	// mu guards the last document and the ETag it came with, which the
	// next Document sends as If-None-Match.
	mu     sync.Mutex
	etag   string
	cached *Document
}

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithHTTPClient makes the Client send its requests with hc. The default
// client dials IMDS directly (IMDS must not be reached through a proxy)
// and gives each request three minutes. A nil hc keeps the default.
func WithHTTPClient(hc *http.Client) ClientOption {
	return func(c *Client) {
		if hc != nil {
			c.hc = hc
		}
	}
}

// WithAPIVersion sets the Scheduled Events api-version, DefaultAPIVersion
// by default. An empty v keeps the default.
func WithAPIVersion(v string) ClientOption {
	return func(c *Client) {
		if v != "" {
			c.apiVersion = v
		}
	}
}

// WithPollInterval sets the period at which Watch reads the document,
// one second by default. A d of zero or less keeps the default.
func WithPollInterval(d time.Duration) ClientOption {
	return func(c *Client) {
		if d > 0 {
			c.poll = d
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
// more than max. Defaults: 500ms and 30s. A non-positive initial keeps
// the default; a max below initial is raised to initial.
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

// NewClient returns a Client of the IMDS at baseURL, such as
// "http://169.254.169.254"; "" means DefaultEndpoint. A malformed baseURL
// is reported by every call.
func NewClient(baseURL string, opts ...ClientOption) *Client {
	if baseURL == "" {
		baseURL = DefaultEndpoint
	}
	c := &Client{
		apiVersion: DefaultAPIVersion,
		poll:       defaultPollInterval,
		log:        slog.New(slog.DiscardHandler),
		retryMin:   defaultRetryInitial,
		retryMax:   defaultRetryMax,
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
		return nil, fmt.Errorf("azure: bad IMDS URL %q: %w", s, err)
	}
	return u, nil
}

func defaultHTTPClient() *http.Client {

	return linklocal.Client(defaultTimeout, 2)
}

// StatusError is an answer that retrying cannot change, such as a 400
// for a bad api-version or an unknown EventId, or a 403 or 404.
type StatusError struct {
	// Code is the HTTP status code.
	Code int
	// Message is the "error" of the JSON body, or else the body's text
	// or the status text.
	Message string
}

// Error implements the error interface.
func (e *StatusError) Error() string {
	return fmt.Sprintf("azure: IMDS answered %d: %s", e.Code, e.Message)
}

// Document is one Scheduled Events document, normalized.
type Document struct {
	// Incarnation is the DocumentIncarnation; it changes whenever the
	// events do.
	Incarnation int64
	// Notices are the events in the order the document lists them, with
	// Provider forewarn.Azure. It is empty, not nil, when there are none.
	Notices []forewarn.Notice
}

// clone returns a deep copy of d.
func (d *Document) clone() *Document {
	out := &Document{Incarnation: d.Incarnation, Notices: make([]forewarn.Notice, len(d.Notices))}
	for i, n := range d.Notices {
		if n.Resources != nil {
			n.Resources = slices.Clone(n.Resources)
		}
		out.Notices[i] = n
	}
	return out
}

// Document reads the VM's scheduled events. It sends the ETag of the
// last document it read as If-None-Match and, when IMDS answers 304 Not
// Modified, returns a copy of that document. The caller owns the
// returned document.
func (c *Client) Document(ctx context.Context) (*Document, error) {
	c.mu.Lock()
	etag, cached := c.etag, c.cached
	c.mu.Unlock()
	hdr := http.Header{}
	if etag != "" && cached != nil {
		hdr.Set("If-None-Match", etag)
	}
	r, err := c.do(ctx, http.MethodGet, c.eventsURL(), nil, hdr)
	if err != nil {
		return nil, fmt.Errorf("get scheduled events: %w", err)
	}
	switch r.status {
	case http.StatusOK:
	case http.StatusNotModified:
		if cached == nil {
			return nil, errors.New("get scheduled events: 304 Not Modified to a request without If-None-Match")
		}
		return cached.clone(), nil
	default:
		return nil, fmt.Errorf("get scheduled events: %w", r.statusError())
	}
	d, err := decodeDocument(r.body, c.log)
	if err != nil {
		return nil, fmt.Errorf("get scheduled events: %w", err)
	}
	c.mu.Lock()
	c.etag, c.cached = r.header.Get("ETag"), d
	c.mu.Unlock()
	return d.clone(), nil
}

// approval is the body of an approval.
type approval struct {
	StartRequests []approvalEntry `json:"StartRequests"`
}

type approvalEntry struct {
	EventID string `json:"EventId"`
}

// Approve asks IMDS to start the events ids now, on behalf of all their
// VMs. IMDS accepts an event that is already approved or started. With
// no ids it sends nothing.
func (c *Client) Approve(ctx context.Context, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	req := approval{StartRequests: make([]approvalEntry, len(ids))}
	for i, id := range ids {
		req.StartRequests[i].EventID = id
	}
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("approve: %w", err)
	}
	hdr := http.Header{"Content-Type": {"application/json"}}
	r, err := c.do(ctx, http.MethodPost, c.eventsURL(), body, hdr)
	if err != nil {
		return fmt.Errorf("approve %s: %w", strings.Join(ids, ", "), err)
	}
	if r.status != http.StatusOK {
		return fmt.Errorf("approve %s: %w", strings.Join(ids, ", "), r.statusError())
	}
	return nil
}

// VMName returns the VM's name, as its events' Resources show it, from
// the compute/name leaf of the instance metadata.
func (c *Client) VMName(ctx context.Context) (string, error) {
	u := c.url("/metadata/instance/compute/name", url.Values{"api-version": {instanceVersion}, "format": {"text"}})
	r, err := c.do(ctx, http.MethodGet, u, nil, nil)
	if err != nil {
		return "", fmt.Errorf("get VM name: %w", err)
	}
	if r.status != http.StatusOK {
		return "", fmt.Errorf("get VM name: %w", r.statusError())
	}
	// Real answers carry no newline; VM names hold no white space.
	return strings.TrimSpace(string(r.body)), nil
}

// Watch reads the document now and then once every poll interval, and
// calls fn with the first document and then once with every document
// whose Incarnation differs from the last one fn saw. A 304 or a
// document of the same incarnation does not call fn. Calls to fn are
// sequential; fn owns the document it gets.
//
// Watch returns fn's error, ctx.Err() once ctx ends, or an error that
// retrying cannot fix (a *StatusError, such as a 403 for an unknown VM,
// or an undecodable document); transient failures are retried inside
// each read.
func (c *Client) Watch(ctx context.Context, fn func(*Document) error) error {
	var (
		last int64
		seen bool
	)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		d, err := c.Document(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			return err
		}
		if !seen || d.Incarnation != last {
			seen, last = true, d.Incarnation
			if err := fn(d); err != nil {
				return err
			}
		}
		t.Reset(c.poll)
	}
}

func (c *Client) eventsURL() string {
	return c.url("/metadata/scheduledevents", url.Values{"api-version": {c.apiVersion}})
}

func (c *Client) url(path string, q url.Values) string {
	if c.base == nil {
		return ""
	}
	u := *c.base
	u.Path += path
	u.RawQuery = q.Encode()
	return u.String()
}

// response is one answer, read in full.
type response struct {
	status int
	header http.Header
	body   []byte
}

// statusError returns the *StatusError of an answer IMDS gave.
func (r *response) statusError() *StatusError {
	var e struct {
		Error string `json:"error"`
	}
	msg := ""
	if json.Unmarshal(r.body, &e) == nil && e.Error != "" {
		msg = e.Error
	} else if s := strings.TrimSpace(string(r.body)); s != "" && len(s) <= 512 {
		msg = s
	}
	if msg == "" {
		msg = http.StatusText(r.status)
	}
	return &StatusError{Code: r.status, Message: msg}
}

// do sends a request until it gets an answer that retrying would not
// change, or ctx ends. Every request carries Metadata: true.
func (c *Client) do(ctx context.Context, method, u string, body []byte, hdr http.Header) (*response, error) {
	if c.baseErr != nil {
		return nil, c.baseErr
	}
	var r *response
	err := retry.Do(ctx, c.retryMin, c.retryMax, func(ctx context.Context) (retry.Answer, error) {
		var err error
		if r, err = c.once(ctx, method, u, body, hdr); err != nil || !retry.Status(r.status) {
			return retry.Answer{}, err
		}
		return retry.Answer{Status: r.status, Header: r.header, Err: r.statusError()}, nil
	}, func(n int, err error, a retry.Answer, wait time.Duration) {
		if err != nil {
			c.log.Warn("IMDS request failed; retrying", logMethod, method, logURL, u, logAttempt, n, logErr, err, logWait, wait)
		} else {
			c.log.Warn("IMDS answered an error; retrying", logMethod, method, logURL, u, logAttempt, n, logStatus, a.Status, logWait, wait)
		}
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// once sends one request and reads its answer.
func (c *Client) once(ctx context.Context, method, u string, body []byte, hdr http.Header) (*response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, retry.Permanent{Err: err}
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Metadata", "true")
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

// wireDocument is a Scheduled Events document as any api-version sends
// it. Field names match case-insensitively and unknown fields are
// ignored.
type wireDocument struct {
	DocumentIncarnation flexInt     `json:"DocumentIncarnation"`
	Events              []wireEvent `json:"Events"`
}

type wireEvent struct {
	EventID      string   `json:"EventId"`
	EventStatus  string   `json:"EventStatus"`
	EventType    string   `json:"EventType"`
	ResourceType string   `json:"ResourceType"`
	Resources    []string `json:"Resources"`
	NotBefore    string   `json:"NotBefore"`
	// Description (2019-04-01), EventSource (2019-08-01) and
	// DurationInSeconds (2020-07-01) are missing in older versions.
	Description       string   `json:"Description"`
	EventSource       string   `json:"EventSource"`
	DurationInSeconds *flexInt `json:"DurationInSeconds"`
}

// flexInt is an integer sent as a JSON number or as a numeric string, as
// 2017-era documents sometimes do. null leaves it unchanged.
type flexInt int64

// UnmarshalJSON implements json.Unmarshaler.
func (n *flexInt) UnmarshalJSON(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "null" {
		return nil
	}
	if strings.HasPrefix(s, `"`) {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		s = strings.TrimSpace(s)
	}
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		*n = flexInt(v)
		return nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<62 {
		*n = flexInt(f)
		return nil
	}
	return fmt.Errorf("%s is not an integer", b)
}

// decodeDocument normalizes a Scheduled Events document of any
// api-version. A NotBefore in no known form is logged and read as zero
// (unknown), the cautious reading for an agent.
func decodeDocument(b []byte, log *slog.Logger) (*Document, error) {
	var w wireDocument
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, fmt.Errorf("decode document: %w", err)
	}
	d := &Document{Incarnation: int64(w.DocumentIncarnation), Notices: make([]forewarn.Notice, 0, len(w.Events))}
	for _, ev := range w.Events {
		n := forewarn.Notice{
			ID:          ev.EventID,
			Type:        ev.EventType,
			Status:      ev.EventStatus,
			Resources:   ev.Resources,
			Duration:    -1,
			Source:      ev.EventSource,
			Description: ev.Description,
			Provider:    forewarn.Azure,
		}
		if n.Resources == nil {
			n.Resources = []string{}
		}
		if ev.DurationInSeconds != nil {
			n.Duration = int(*ev.DurationInSeconds)
		}
		t, ok := ParseNotBefore(ev.NotBefore)
		if !ok {
			log.Warn("unreadable NotBefore; taken as unknown", logEvent, ev.EventID, logNotBefore, ev.NotBefore)
		}
		n.NotBefore = t
		d.Notices = append(d.Notices, n)
	}
	return d, nil
}

// notBeforeLayouts are the NotBefore forms read: RFC 1123 with GMT (what
// IMDS sends), UTC or a numeric zone, with one- or two-digit days, and
// RFC 3339.
var notBeforeLayouts = []string{
	time.RFC1123,
	time.RFC1123Z,
	"Mon, 2 Jan 2006 15:04:05 MST",
	"Mon, 2 Jan 2006 15:04:05 -0700",
	time.RFC3339Nano,
}

// ParseNotBefore reads a NotBefore value in UTC. It returns the zero
// time and true for "" (an event that has started), and the zero time
// and false for a value in no known form.
func ParseNotBefore(s string) (time.Time, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, true
	}
	for _, l := range notBeforeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}

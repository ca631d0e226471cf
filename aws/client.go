package aws

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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/internal/linklocal"
	"github.com/forewarn/forewarn/internal/retry"
)

// DefaultEndpoint is the real instance metadata service's address.
const DefaultEndpoint = "http://169.254.169.254"

// EndpointEnv is the environment variable that, as for the AWS SDKs,
// names the instance metadata service as a URL when NewClient gets "".
const EndpointEnv = "AWS_EC2_METADATA_SERVICE_ENDPOINT"

// The keys the Client reads, below /latest/meta-data/.
const (
	KeyInstanceID           = "instance-id"
	KeyScheduled            = "events/maintenance/scheduled"
	KeyHistory              = "events/maintenance/history"
	KeyInstanceAction       = "spot/instance-action"
	KeyRebalance            = "events/recommendations/rebalance"
	KeyTargetLifecycleState = "autoscaling/target-lifecycle-state"
)

// The States of a scheduled event.
const (
	StateActive    = "active"
	StateCompleted = "completed"
	StateCanceled  = "canceled"
)

// Client defaults.
const (
	// DefaultTokenTTL is the lifetime a Client asks for its session
	// tokens unless WithTokenTTL says otherwise: the longest, six hours.
	DefaultTokenTTL = MaxTokenTTL * time.Second
	// defaultPollInterval is Watch's period. EC2 has no long-poll; one
	// round of reads a second stays far below IMDS's packet limit.
	defaultPollInterval = time.Second
	defaultRetryInitial = 500 * time.Millisecond
	defaultRetryMax     = 30 * time.Second
	// attemptTimeout bounds one request: IMDS answers at once.
	attemptTimeout = 30 * time.Second
	// maxTokenMargin caps how long before its expiry a token is
	// replaced; a token is replaced a tenth of its TTL early, at most
	// this.
	maxTokenMargin = time.Minute
	// maxResponse caps the bytes read from one answer.
	maxResponse = 4 << 20
)

// Log attribute keys.
const (
	logURL     = "url"
	logMethod  = "method"
	logAttempt = "attempt"
	logStatus  = "status"
	logErr     = "err"
	logWait    = "wait"
	logKey     = "key"
	logValue   = "value"
)

// Client reads a VM's maintenance keys from the EC2 instance metadata
// service, real or Forewarn's. It is safe for concurrent use.
//
// It speaks IMDSv2 only: it asks for a session token with PUT
// /latest/api/token, keeps it until shortly before it expires, and sends
// it with every GET. When a GET answers 401 (the token expired early or
// the service forgot it), it gets a new token and tries once more.
//
// Every call retries, with exponential backoff and full jitter, answers
// that may succeed later (429, 410, 5xx) and connection failures, until
// its context ends. Other answers come back at once as a *StatusError.
type Client struct {
	base     *url.URL
	baseErr  error
	hc       *http.Client
	log      *slog.Logger
	poll     time.Duration
	ttl      time.Duration
	retryMin time.Duration
	retryMax time.Duration

	// tokenSem is held by the one caller that reads or fetches the
	// token, so that concurrent calls share one PUT; it guards token and
	// renewAt.
	tokenSem chan struct{}
	token    string
	renewAt  time.Time

	// mu guards the ID of the Spot interruption notice being given, kept
	// from its first sight until the key goes absent.
	mu     sync.Mutex
	spotID string
}

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithHTTPClient makes the Client send its requests with hc. The default
// client dials IMDS directly (IMDS must not be reached through a proxy).
// A nil hc keeps the default.
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

// WithPollInterval sets the period at which Watch reads the keys, one
// second by default. A d of zero or less keeps the default.
func WithPollInterval(d time.Duration) ClientOption {
	return func(c *Client) {
		if d > 0 {
			c.poll = d
		}
	}
}

// WithTokenTTL sets the lifetime the Client asks for its session tokens,
// in whole seconds from 1 s to six hours; DefaultTokenTTL (six hours) by
// default. A d of zero or less keeps the default; others are rounded down
// to whole seconds and clamped to that range.
func WithTokenTTL(d time.Duration) ClientOption {
	return func(c *Client) {
		if d > 0 {
			c.ttl = min(max(d.Truncate(time.Second), time.Second), DefaultTokenTTL)
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

// NewClient returns a Client of the instance metadata service at
// baseURL, such as "http://169.254.169.254". For "" it uses the value of
// AWS_EC2_METADATA_SERVICE_ENDPOINT when that is set, else
// DefaultEndpoint. A malformed baseURL is reported by every call.
func NewClient(baseURL string, opts ...ClientOption) *Client {
	if baseURL == "" {
		baseURL = DefaultEndpoint
		if e := os.Getenv(EndpointEnv); e != "" {
			baseURL = e
		}
	}
	c := &Client{
		log:      slog.New(slog.DiscardHandler),
		poll:     defaultPollInterval,
		ttl:      DefaultTokenTTL,
		retryMin: defaultRetryInitial,
		retryMax: defaultRetryMax,
		tokenSem: make(chan struct{}, 1),
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
		return nil, fmt.Errorf("aws: bad IMDS URL %q: %w", s, err)
	}
	return u, nil
}

func defaultHTTPClient() *http.Client {
	// Each attempt is bounded by attemptTimeout instead.
	return linklocal.Client(0, 2)
}

// StatusError is an answer that retrying cannot change, such as a 404
// for a key that is not there, a 401 that a new token did not cure, or a
// 403.
type StatusError struct {
	// Code is the HTTP status code.
	Code int
	// Message is the body's text when it is short plain text, else the
	// status text (IMDS's error bodies are XHTML pages).
	Message string
}

// Error implements the error interface.
func (e *StatusError) Error() string {
	return fmt.Sprintf("aws: IMDS answered %d: %s", e.Code, e.Message)
}

// notFound reports whether err is a 404 answer.
func notFound(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == http.StatusNotFound
}

// Get reads key, below /latest/meta-data/ (for example "instance-id" or
// "events/maintenance/scheduled"), and returns its value unmodified. A
// key that is not there is a *StatusError with Code 404.
func (c *Client) Get(ctx context.Context, key string) (string, error) {
	b, err := c.get(ctx, key)
	return string(b), err
}

// InstanceID returns the VM's instance ID, as its notices' Resources
// show it.
func (c *Client) InstanceID(ctx context.Context) (string, error) {
	return c.Get(ctx, KeyInstanceID)
}

// ScheduledEvent is one entry of events/maintenance/scheduled or
// history.
type ScheduledEvent struct {
	// EventID is the EventId, such as instance-event-0d59937288b749b32.
	EventID string
	// Code is the event type, such as system-reboot.
	Code        string
	Description string
	// State is StateActive in scheduled; StateCompleted or StateCanceled
	// in history.
	State string
	// NotBefore and NotAfter bound the maintenance window;
	// NotBeforeDeadline is the latest NotBefore it can be rescheduled to.
	// Each is zero when the entry lacks it or it is unreadable (which is
	// logged).
	NotBefore, NotAfter, NotBeforeDeadline time.Time
}

// wireEvent is a scheduled event as IMDS sends it.
type wireEvent struct {
	NotBefore         string `json:"NotBefore"`
	Code              string `json:"Code"`
	Description       string `json:"Description"`
	EventID           string `json:"EventId"`
	NotAfter          string `json:"NotAfter"`
	NotBeforeDeadline string `json:"NotBeforeDeadline"`
	State             string `json:"State"`
}

// ScheduledEvents returns the VM's events/maintenance/scheduled, in the
// order IMDS lists them: the active events. It is empty, not nil, when
// there are none.
func (c *Client) ScheduledEvents(ctx context.Context) ([]ScheduledEvent, error) {
	return c.events(ctx, KeyScheduled)
}

// EventHistory returns the VM's events/maintenance/history: the events
// that completed or were canceled. It is empty, not nil, when there are
// none.
func (c *Client) EventHistory(ctx context.Context) ([]ScheduledEvent, error) {
	return c.events(ctx, KeyHistory)
}

func (c *Client) events(ctx context.Context, key string) ([]ScheduledEvent, error) {
	b, err := c.get(ctx, key)
	if err != nil {
		return nil, err
	}
	var wire []wireEvent
	if err := json.Unmarshal(b, &wire); err != nil {
		return nil, fmt.Errorf("decode %s: %w", key, err)
	}
	out := make([]ScheduledEvent, 0, len(wire))
	for _, w := range wire {
		out = append(out, ScheduledEvent{
			EventID: w.EventID, Code: w.Code, Description: w.Description, State: w.State,
			NotBefore:         c.parseTime(key, EventTime, w.NotBefore),
			NotAfter:          c.parseTime(key, EventTime, w.NotAfter),
			NotBeforeDeadline: c.parseTime(key, EventTime, w.NotBeforeDeadline),
		})
	}
	return out, nil
}

// parseTime reads a time of key in layout, in UTC: zero when s is empty,
// or unreadable (logged).
func (c *Client) parseTime(key, layout, s string) time.Time {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(layout, s)
	if err != nil {
		c.log.Warn("unreadable time; taken as unknown", logKey, key, logValue, s)
		return time.Time{}
	}
	return t.UTC()
}

// InstanceAction is a Spot interruption notice.
type InstanceAction struct {
	// Action is terminate, stop or hibernate.
	Action string
	// Time is when the action happens; zero if unreadable (logged).
	Time time.Time
}

// InstanceAction returns the VM's Spot interruption notice, or nil and
// no error when there is none (the key answers 404).
func (c *Client) InstanceAction(ctx context.Context) (*InstanceAction, error) {
	b, err := c.get(ctx, KeyInstanceAction)
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var w struct {
		Action string `json:"action"`
		Time   string `json:"time"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, fmt.Errorf("decode %s: %w", KeyInstanceAction, err)
	}
	return &InstanceAction{Action: w.Action, Time: c.parseTime(KeyInstanceAction, time.RFC3339, w.Time)}, nil
}

// RebalanceRecommendation is a rebalance recommendation.
type RebalanceRecommendation struct {
	// NoticeTime is when it was issued; zero if unreadable (logged).
	NoticeTime time.Time
	// raw is noticeTime as sent, which names the notice.
	raw string
}

// Rebalance returns the VM's rebalance recommendation, or nil and no
// error when there is none (the key answers 404).
func (c *Client) Rebalance(ctx context.Context) (*RebalanceRecommendation, error) {
	b, err := c.get(ctx, KeyRebalance)
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var w struct {
		NoticeTime string `json:"noticeTime"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, fmt.Errorf("decode %s: %w", KeyRebalance, err)
	}
	return &RebalanceRecommendation{NoticeTime: c.parseTime(KeyRebalance, time.RFC3339, w.NoticeTime), raw: w.NoticeTime}, nil
}

// TargetLifecycleState returns the VM's Auto Scaling target lifecycle
// state, such as InService, Terminated or Warmed:Stopped, or "" and no
// error when there is none (the key answers 404: the VM is in no Auto
// Scaling group).
func (c *Client) TargetLifecycleState(ctx context.Context) (string, error) {
	v, err := c.Get(ctx, KeyTargetLifecycleState)
	if notFound(err) {
		return "", nil
	}
	return strings.TrimSpace(v), err
}

// keys is one reading of the keys Notices normalizes.
type keys struct {
	scheduled []ScheduledEvent
	action    *InstanceAction
	rebalance *RebalanceRecommendation
	lifecycle string
}

// read reads the keys Notices normalizes.
func (c *Client) read(ctx context.Context) (*keys, error) {
	var k keys
	var err error
	if k.scheduled, err = c.ScheduledEvents(ctx); err != nil {
		return nil, err
	}
	if k.action, err = c.InstanceAction(ctx); err != nil {
		return nil, err
	}
	if k.rebalance, err = c.Rebalance(ctx); err != nil {
		return nil, err
	}
	if k.lifecycle, err = c.TargetLifecycleState(ctx); err != nil {
		return nil, err
	}
	return &k, nil
}

// The IDs of the notices that have no EventId.
const (
	spotIDPrefix      = "spot-instance-action-"
	rebalanceIDPrefix = "rebalance-recommendation-"
	terminatedID      = "target-lifecycle-state-Terminated"
)

// Notices reads the VM's maintenance keys and returns what they announce,
// in this order (empty, not nil, when nothing is announced):
//
//   - each active event of events/maintenance/scheduled: a notice with
//     the EventId as ID, the Code as Type, Scheduled until its NotBefore
//     passes and Started after, NotBefore the window's start (kept once
//     started), and the event's Description;
//   - spot/instance-action: a Preempt notice, Scheduled until the
//     action's time and Started after, NotBefore that time, ID
//     "spot-instance-action-" + the time as this Client first saw it,
//     kept until the key goes absent (the time may move by a second as
//     the interruption starts);
//   - events/recommendations/rebalance: a Started REBALANCE_RECOMMENDATION
//     notice, ID "rebalance-recommendation-" + its noticeTime;
//   - autoscaling/target-lifecycle-state Terminated: a Started Terminate
//     notice, ID "target-lifecycle-state-Terminated".
//
// Every notice has the instance ID as its only Resource, Duration -1,
// Source Platform and Provider forewarn.AWS. EC2 gives times to the
// second, so a notice turns Started at the whole second of its NotBefore.
func (c *Client) Notices(ctx context.Context) ([]forewarn.Notice, error) {
	id, err := c.InstanceID(ctx)
	if err != nil {
		return nil, err
	}
	k, err := c.read(ctx)
	if err != nil {
		return nil, err
	}
	return c.notices(id, k, time.Now()), nil
}

// Watch calls fn with the VM's notices, as Notices returns them, once at
// start and then once every time they change: it reads the keys every
// poll interval (EC2 has no long-poll), and also at the moment a
// Scheduled notice's NotBefore passes, when it turns Started. Calls to fn
// are sequential; fn owns the slice it gets.
//
// Watch returns fn's error, ctx.Err() once ctx ends, or an error that
// retrying cannot fix (a *StatusError, such as a 403 for an unknown VM
// or a 404 once the instance is terminated, or an undecodable key);
// transient failures are retried inside each read.
func (c *Client) Watch(ctx context.Context, fn func([]forewarn.Notice) error) error {
	fail := func(err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	id, err := c.InstanceID(ctx)
	if err != nil {
		return fail(err)
	}
	var last []forewarn.Notice
	t := time.NewTimer(0)
	defer t.Stop()
	for first := true; ; first = false {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		k, err := c.read(ctx)
		if err != nil {
			return fail(err)
		}
		now := time.Now()
		ns := c.notices(id, k, now)
		if first || !slices.EqualFunc(ns, last, equalNotice) {
			last = ns
			if err := fn(slices.Clone(ns)); err != nil {
				return err
			}
		}
		t.Reset(nextRead(ns, now, c.poll))
	}
}

// nextRead returns how long after now Watch reads again: the poll
// interval, or less when a Scheduled notice of ns turns Started sooner.
func nextRead(ns []forewarn.Notice, now time.Time, poll time.Duration) time.Duration {
	d := poll
	for _, n := range ns {
		if n.Status == string(forewarn.Scheduled) && n.NotBefore.After(now) {
			d = min(d, n.NotBefore.Sub(now))
		}
	}
	return d
}

// notices normalizes k for the instance id as of now.
func (c *Client) notices(id string, k *keys, now time.Time) []forewarn.Notice {
	status := func(notBefore time.Time) string {
		if notBefore.After(now) {
			return string(forewarn.Scheduled)
		}
		return string(forewarn.Started)
	}
	notice := func(nid, typ, st string, notBefore time.Time, desc string) forewarn.Notice {
		return forewarn.Notice{
			ID: nid, Type: typ, Status: st, Resources: []string{id}, NotBefore: notBefore, Duration: -1,
			Source: string(forewarn.Platform), Description: desc, Provider: forewarn.AWS,
		}
	}
	out := []forewarn.Notice{}
	for _, ev := range k.scheduled {
		if ev.State != "" && ev.State != StateActive {
			continue
		}
		out = append(out, notice(ev.EventID, ev.Code, status(ev.NotBefore), ev.NotBefore, ev.Description))
	}

	c.mu.Lock()
	if k.action == nil {
		c.spotID = ""
	} else if c.spotID == "" {
		c.spotID = spotIDPrefix + k.action.Time.Format(time.RFC3339)
	}
	spotID := c.spotID
	c.mu.Unlock()
	if a := k.action; a != nil {
		desc := fmt.Sprintf("Spot interruption: %s at %s", a.Action, a.Time.Format(time.RFC3339))
		out = append(out, notice(spotID, string(forewarn.Preempt), status(a.Time), a.Time, desc))
	}
	if r := k.rebalance; r != nil {
		out = append(out, notice(rebalanceIDPrefix+r.raw, forewarn.RebalanceRecommendation, string(forewarn.Started),
			time.Time{}, "rebalance recommended at "+r.raw))
	}
	if k.lifecycle == "Terminated" {
		out = append(out, notice(terminatedID, string(forewarn.Terminate), string(forewarn.Started),
			time.Time{}, "Auto Scaling target lifecycle state Terminated"))
	}
	return out
}

// equalNotice reports whether a and b are the same notice.
func equalNotice(a, b forewarn.Notice) bool {
	return a.ID == b.ID && a.Type == b.Type && a.Status == b.Status && slices.Equal(a.Resources, b.Resources) &&
		a.NotBefore.Equal(b.NotBefore) && a.Duration == b.Duration && a.Source == b.Source &&
		a.Description == b.Description && a.Provider == b.Provider
}

// get reads key below /latest/meta-data/ with a session token; on a 401
// it gets a new token and tries once more.
func (c *Client) get(ctx context.Context, key string) ([]byte, error) {
	if c.baseErr != nil {
		return nil, c.baseErr
	}
	u := *c.base
	u.Path += "/latest/meta-data/" + strings.TrimPrefix(key, "/")
	stale := ""
	for retried := false; ; retried = true {
		tok, err := c.sessionToken(ctx, stale)
		if err != nil {
			return nil, fmt.Errorf("get %s: %w", key, err)
		}
		r, err := c.do(ctx, http.MethodGet, u.String(), http.Header{tokenKey: {tok}})
		if err != nil {
			return nil, fmt.Errorf("get %s: %w", key, err)
		}
		switch {
		case r.status == http.StatusOK:
			return r.body, nil
		case r.status == http.StatusUnauthorized && !retried:
			c.log.Debug("IMDS refused the session token; getting a new one", logURL, u.String())
			stale = tok
			continue
		}
		return nil, fmt.Errorf("get %s: %w", key, r.statusError())
	}
}

// sessionToken returns the cached token, or gets a new one when there is
// none, it is about to expire, or it is stale, a token IMDS refused.
func (c *Client) sessionToken(ctx context.Context, stale string) (string, error) {
	select {
	case c.tokenSem <- struct{}{}:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	defer func() { <-c.tokenSem }()
	if c.token != "" && c.token != stale && time.Now().Before(c.renewAt) {
		return c.token, nil
	}
	asked := time.Now()
	u := *c.base
	u.Path += TokenPath
	hdr := http.Header{http.CanonicalHeaderKey(TokenTTLHeader): {strconv.Itoa(int(c.ttl / time.Second))}}
	r, err := c.do(ctx, http.MethodPut, u.String(), hdr)
	if err != nil {
		return "", fmt.Errorf("get a session token: %w", err)
	}
	tok := strings.TrimSpace(string(r.body))
	if r.status != http.StatusOK {
		return "", fmt.Errorf("get a session token: %w", r.statusError())
	}
	if tok == "" {
		return "", errors.New("get a session token: the answer is empty")
	}
	// The token lives as long as the answer says, or else as asked.
	ttl := c.ttl
	if s, err := strconv.Atoi(strings.TrimSpace(r.header.Get(TokenTTLHeader))); err == nil && s > 0 {
		ttl = time.Duration(s) * time.Second
	}
	c.token, c.renewAt = tok, asked.Add(ttl-min(ttl/10, maxTokenMargin))
	return tok, nil
}

// response is one answer, read in full.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r *response) statusError() *StatusError {
	msg := strings.TrimSpace(string(r.body))
	if msg == "" || len(msg) > 512 || strings.HasPrefix(msg, "<") {
		msg = http.StatusText(r.status)
	}
	return &StatusError{Code: r.status, Message: msg}
}

// do sends a request until it gets an answer that retrying would not
// change, or ctx ends.
func (c *Client) do(ctx context.Context, method, u string, hdr http.Header) (*response, error) {
	var r *response
	err := retry.Do(ctx, c.retryMin, c.retryMax, func(ctx context.Context) (retry.Answer, error) {
		var err error
		if r, err = c.once(ctx, method, u, hdr); err != nil || !retry.Status(r.status) {
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

// once sends one request, bounded by attemptTimeout, and reads its
// answer.
func (c *Client) once(ctx context.Context, method, u string, hdr http.Header) (*response, error) {
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, retry.Permanent{Err: err}
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
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

// Package webhook delivers the transitions of maintenance sessions to
// HTTP receivers: each host and session transition (engine.Transition
// of kind "host" or "session"; event transitions are not sent) is POSTed
// as a CloudEvents 1.0 structured-mode JSON document, signed with
// HMAC-SHA256 over a shared secret, to every URL the server was given
// and to the URLs of the transition's session (SessionSpec.Webhooks).
//
// Only the leading replica delivers: a transition is queued if the
// engine leads when the sender takes it from the engine. Each target URL
// has its own queue of at most QueueSize deliveries, sent one at a time
// in order; when the queue is full the oldest delivery waiting is
// dropped. A delivery is tried up to MaxAttempts times within
// MaxElapsed, each attempt bounded by AttemptTimeout, again after a
// network error, a 429 or a 5xx, with full-jitter exponential backoff
// (or what Retry-After asks for). Delivery is at least once: a CloudEvent
// keeps its id across retries, and a replica that takes over the lead
// sends again what it applied as a follower in the minute before, which
// the old leader may not have sent; receivers dedupe by id.
package webhook

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/internal/memo"
	"github.com/forewarn/forewarn/internal/retry"
)

// Bounds of delivery.
const (
	// QueueSize is how many deliveries wait per target URL; when one
	// more comes, the oldest waiting is dropped.
	QueueSize = 1024
	// MaxAttempts and MaxElapsed bound the tries of one delivery.
	MaxAttempts = 10
	MaxElapsed  = 10 * time.Minute
	// AttemptTimeout bounds one attempt: connecting, sending, and the
	// receiver's answer.
	AttemptTimeout = 10 * time.Second
)

// Pacing of retries and of the lead's hand-over.
const (
	initialBackoff = time.Second
	maxBackoff     = time.Minute
	// intakeSize is how many commits wait between the engine's callback
	// and the dispatcher; beyond it they are dropped (counted under
	// IntakeTarget).
	intakeSize = 4096
	// leaderCheck is how often the dispatcher asks whether the engine
	// leads, so that a new leader sends what it applied as a follower
	// without waiting for a commit.
	leaderCheck = time.Second
	// replayWindow and replayKeep bound what a follower keeps to send
	// when it takes over the lead.
	replayWindow = time.Minute
	replayKeep   = 1024
	// maxAnswer is how much of a receiver's answer is read.
	maxAnswer = 64 << 10
)

// The wire: headers and media type of a delivery.
const (
	// ContentType is the media type of a CloudEvent in structured mode.
	ContentType = "application/cloudevents+json"
	// SignatureHeader carries "sha256=" and the hex HMAC-SHA256, keyed
	// with the shared secret, of the timestamp, a ".", and the body.
	SignatureHeader = "Forewarn-Signature"
	// TimestampHeader carries the attempt's time in Unix seconds; it is
	// part of the signed material, so receivers can refuse old ones.
	TimestampHeader = "Forewarn-Timestamp"
)

// IntakeTarget is the target label of transitions dropped before any
// target was chosen: the engine produced commits faster than the
// dispatcher took them.
const IntakeTarget = "intake"

// Observer receives the sender's counts, by target label (a URL's
// scheme and host: see Label). A Metrics of package metrics implements
// it.
type Observer interface {
	// Delivered: a receiver answered 2xx.
	Delivered(target string)
	// AttemptFailed: an attempt got a network error or a non-2xx answer.
	AttemptFailed(target string)
	// GaveUp: a delivery failed MaxAttempts times, ran past MaxElapsed,
	// or got an answer retrying cannot change (a 4xx but 429, a 3xx).
	GaveUp(target string)
	// Dropped: a delivery was dropped from a full queue.
	Dropped(target string)
	// Queued: the deliveries waiting for target changed by delta.
	Queued(target string, delta int)
}

// Config configures a Sender.
type Config struct {
	// Engine is the engine whose transitions are sent.
	Engine *engine.Engine
	// Secret signs every delivery. Without it the Sender sends nothing,
	// and URLs must be empty.
	Secret []byte
	// URLs receive every session's transitions.
	URLs []string
	// Observer, when set, receives the counts.
	Observer Observer
	// Logger receives failures; nil discards them.
	Logger *slog.Logger
	// Client sends the deliveries; nil means a client of its own that
	// follows no redirects. Each attempt is bounded by AttemptTimeout
	// whatever the client's own timeouts.
	Client *http.Client
}

// Sender delivers transitions to webhooks. Close stops it.
type Sender struct {
	eng    *engine.Engine
	secret []byte
	urls   []string
	obs    Observer
	log    *slog.Logger
	hc     *http.Client
	intake chan []pending
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	targets map[string]*target // by URL, while deliveries wait or run

	// The dispatcher's own: each session's targets, whether the engine
	// led at the last look, and what it applied as a follower.
	sessionTargets memo.Table[string, []string]
	led            bool
	recent         []job
}

// pending is one transition taken from the engine, with its index among
// its commit's transitions.
type pending struct {
	index int
	t     *engine.Transition
}

// job is one transition to send to its targets.
type job struct {
	at      time.Time
	d       *delivery
	targets []string
}

// delivery is one CloudEvent, encoded once for all its targets.
type delivery struct {
	id   string
	body []byte
}

// target is one URL's queue.
type target struct {
	url, label string
	queue      []*delivery
}

// New returns a Sender for cfg and subscribes it to the engine's
// transitions. Errors: EINVALID for a URL that forewarn.ValidWebhookURL
// refuses, or URLs
// without a Secret.
func New(cfg Config) (*Sender, error) {
	if len(cfg.URLs) > 0 && len(cfg.Secret) == 0 {
		return nil, forewarn.Errorf(forewarn.EINVALID, "webhooks need a secret to sign their deliveries")
	}
	for _, u := range cfg.URLs {
		if err := forewarn.ValidWebhookURL(u); err != nil {
			return nil, err
		}
	}
	s := &Sender{eng: cfg.Engine, secret: bytes.Clone(cfg.Secret), urls: dedupe(cfg.URLs), obs: cfg.Observer, log: cfg.Logger,
		hc: cfg.Client, intake: make(chan []pending, intakeSize), targets: map[string]*target{}}
	if s.obs == nil {
		s.obs = nopObserver{}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.hc == nil {
		s.hc = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if !s.Configured() {
		return s, nil
	}
	s.eng.SubscribeTransitions(s.take)
	s.wg.Go(s.dispatch)
	return s, nil
}

// Configured reports whether s can send: it has a secret. A session
// that names webhooks on a server whose Sender is not configured (or
// nil) would get nothing delivered.
func (s *Sender) Configured() bool { return s != nil && len(s.secret) > 0 }

// Close stops the sender: deliveries in flight are abandoned, and those
// waiting dropped. It waits for its goroutines to end.
func (s *Sender) Close() {
	if s == nil {
		return
	}
	s.cancel()
	s.wg.Wait()
}

// take is the engine's callback: under the engine's lock, it passes the
// commit's host and session transitions on without blocking.
func (s *Sender) take(_ int64, ts []engine.Transition) {
	if s.ctx.Err() != nil {
		return
	}
	var ps []pending
	for i := range ts {
		if ts[i].Kind == "host" || ts[i].Kind == "session" {
			ps = append(ps, pending{index: i, t: &ts[i]})
		}
	}
	if len(ps) == 0 {
		return
	}
	select {
	case s.intake <- ps:
	default:
		for range ps {
			s.obs.Dropped(IntakeTarget)
		}
	}
}

// dispatch turns each commit's transitions into deliveries, queued when
// the engine leads, until Close.
func (s *Sender) dispatch() {
	tick := time.NewTicker(leaderCheck)
	defer tick.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case ps := <-s.intake:
			jobs := make([]job, 0, len(ps))
			for _, p := range ps {
				if j, ok := s.job(p); ok {
					jobs = append(jobs, j)
				}
			}
			if !s.leading() {
				s.remember(jobs)
				continue
			}
			s.queue(jobs)
		case <-tick.C:
			s.leading()
		}
	}
}

// leading reports whether the engine leads; when it has just taken the
// lead, it first queues what it applied as a follower within
// replayWindow.
func (s *Sender) leading() bool {
	leads := s.eng.Leading()
	if leads && !s.led {
		since := time.Now().Add(-replayWindow)
		for i, j := range s.recent {
			if !j.at.Before(since) {
				s.queue(s.recent[i:])
				break
			}
		}
		s.recent = nil
	}
	s.led = leads
	return leads
}

// remember keeps a follower's jobs, the newest replayKeep of them.
func (s *Sender) remember(jobs []job) {
	s.recent = append(s.recent, jobs...)
	if n := len(s.recent) - replayKeep; n > 0 {
		s.recent = append(s.recent[:0:0], s.recent[n:]...)
	}
}

// job encodes p's CloudEvent and finds its targets: the Sender's URLs
// and its session's webhooks, each once. A transition without targets
// gives no job.
func (s *Sender) job(p pending) (job, bool) {
	t := p.t
	session := sessionOf(t)
	targets := s.sessionTargets.Get(session, func() []string { return s.targetsOf(session) })
	if len(targets) == 0 {
		return job{}, false
	}
	body, err := Encode(p.index, t)
	if err != nil {
		s.log.Error("encode webhook delivery", "err", err)
		return job{}, false
	}
	return job{at: time.Now(), d: &delivery{id: ID(t.Revision, p.index), body: body}, targets: targets}, true
}

// targetsOf returns the targets of the session id's transitions: the
// Sender's URLs and the session's webhooks (which the engine checked
// when the session was made), each once. The jobs share the slice.
func (s *Sender) targetsOf(id string) []string {
	ses, err := s.eng.Session(id)
	if err != nil || len(ses.Spec.Webhooks) == 0 {
		return s.urls
	}
	return dedupe(append(slices.Clone(s.urls), ses.Spec.Webhooks...))
}

// queue adds each job's delivery to its targets' queues.
func (s *Sender) queue(jobs []job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, j := range jobs {
		for _, u := range j.targets {
			t := s.targets[u]
			if t == nil {
				t = &target{url: u, label: Label(u)}
				s.targets[u] = t
				s.wg.Go(func() { s.work(t) })
			}
			if len(t.queue) >= QueueSize {
				t.queue[0] = nil
				t.queue = t.queue[1:]
				s.obs.Dropped(t.label)
				s.obs.Queued(t.label, -1)
			}
			t.queue = append(t.queue, j.d)
			s.obs.Queued(t.label, 1)
		}
	}
}

// work sends t's deliveries in order until its queue is empty.
func (s *Sender) work(t *target) {
	for {
		s.mu.Lock()
		if len(t.queue) == 0 || s.ctx.Err() != nil {
			s.obs.Queued(t.label, -len(t.queue))
			delete(s.targets, t.url)
			s.mu.Unlock()
			return
		}
		d := t.queue[0]
		t.queue[0] = nil
		t.queue = t.queue[1:]
		s.obs.Queued(t.label, -1)
		s.mu.Unlock()
		s.deliver(t, d)
	}
}

// deliver sends d to t, trying again as the package documentation says.
func (s *Sender) deliver(t *target, d *delivery) {
	ctx, cancel := context.WithTimeout(s.ctx, MaxElapsed)
	defer cancel()
	attempts := 0
	err := retry.Do(ctx, initialBackoff, maxBackoff, func(ctx context.Context) (retry.Answer, error) {
		attempts++
		a, err := s.attempt(ctx, t.url, d)
		if err == nil && a.Err == nil {
			return a, nil
		}
		s.obs.AttemptFailed(t.label)
		if attempts >= MaxAttempts {
			return a, retry.Permanent{Err: cmp.Or(err, a.Err)}
		}
		return a, err
	}, nil)
	switch {
	case err == nil:
		s.obs.Delivered(t.label)
	case s.ctx.Err() != nil:
		// Closing: not a receiver's failure.
	default:
		s.obs.GaveUp(t.label)
		s.log.Warn("webhook delivery given up", "target", t.label, "id", d.id, "attempts", attempts, "err", err)
	}
}

// attempt POSTs d to u once.
func (s *Sender) attempt(ctx context.Context, u string, d *delivery) (retry.Answer, error) {
	ctx, cancel := context.WithTimeout(ctx, AttemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(d.body))
	if err != nil {
		return retry.Answer{}, retry.Permanent{Err: err}
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req.Header.Set("Content-Type", ContentType)
	req.Header.Set("User-Agent", "forewarn-webhook")
	req.Header.Set(TimestampHeader, ts)
	req.Header.Set(SignatureHeader, Sign(s.secret, ts, d.body))
	resp, err := s.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which may hold a secret
		}
		return retry.Answer{}, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer)) // so the connection can be reused
	resp.Body.Close()
	switch code := resp.StatusCode; {
	case code/100 == 2:
		return retry.Answer{}, nil
	case code == http.StatusTooManyRequests || code >= 500:
		return retry.Answer{Status: code, Header: resp.Header, Err: fmt.Errorf("answered %s", resp.Status)}, nil
	default:
		return retry.Answer{}, retry.Permanent{Err: fmt.Errorf("answered %s", resp.Status)}
	}
}

// CloudEvent is what a delivery's body holds: a CloudEvents 1.0 event
// in structured mode whose data is the transition.
type CloudEvent struct {
	SpecVersion     string             `json:"specversion"`
	ID              string             `json:"id"`
	Source          string             `json:"source"`
	Type            string             `json:"type"`
	Subject         string             `json:"subject"`
	Time            time.Time          `json:"time"`
	DataContentType string             `json:"datacontenttype"`
	Data            *engine.Transition `json:"data"`
}

// Encode returns the body of the delivery of t, the transition at index
// among its commit's transitions.
func Encode(index int, t *engine.Transition) ([]byte, error) {
	session := sessionOf(t)
	return json.Marshal(CloudEvent{
		SpecVersion:     "1.0",
		ID:              ID(t.Revision, index),
		Source:          "/forewarn/sessions/" + session,
		Type:            "io.forewarn." + t.Kind + "." + strings.ToLower(t.To),
		Subject:         t.ID,
		Time:            t.Time,
		DataContentType: "application/json",
		Data:            t,
	})
}

// sessionOf returns the session of a host's or a session's transition.
func sessionOf(t *engine.Transition) string {
	if t.Kind == "host" {
		return t.Session
	}
	return t.ID
}

// ID returns the CloudEvent id of the transition at index among the
// transitions of the commit at revision rev: the same on every replica
// and on every retry.
func ID(rev int64, index int) string {
	return strconv.FormatInt(rev, 10) + "-" + strconv.Itoa(index)
}

// Sign returns the SignatureHeader value of body sent at timestamp (the
// TimestampHeader value): "sha256=" and the hex HMAC-SHA256, keyed with
// secret, of timestamp + "." + body.
func Sign(secret []byte, timestamp string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(timestamp))
	m.Write([]byte{'.'})
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Verify reports whether signature is body's signature at timestamp
// under secret, compared in constant time. Receivers should also refuse
// a timestamp far from their clock.
func Verify(secret []byte, timestamp, signature string, body []byte) bool {
	return hmac.Equal([]byte(signature), []byte(Sign(secret, timestamp, body)))
}

// Label returns the target label of the webhook URL u: its scheme and
// host, without its path and query, which may hold a secret.
func Label(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "invalid"
	}
	return p.Scheme + "://" + p.Host
}

// dedupe returns urls without repeats, in their order.
func dedupe(urls []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, u := range urls {
		if !seen[u] {
			seen[u] = true
			out = append(out, u)
		}
	}
	return out
}

// nopObserver counts nothing.
type nopObserver struct{}

func (nopObserver) Delivered(string)     {}
func (nopObserver) AttemptFailed(string) {}
func (nopObserver) GaveUp(string)        {}
func (nopObserver) Dropped(string)       {}
func (nopObserver) Queued(string, int)   {}

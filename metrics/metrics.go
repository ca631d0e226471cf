// Package metrics holds the Prometheus metrics of a Forewarn server, in a
// registry of their own: the metadata APIs' requests, the engine's
// transitions, approvals, deadlines and store commits, and gauges read
// from the engine when scraped. docs/metrics.md documents every metric.
//
// A Metrics is handed to the engine as its engine.Observer, to each
// metadata API server as an API, and to the operator API, which serves
// it at GET /metrics.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
)

// Label values of the approvals counter's by label.
const (
	byVM       = "vm"
	byOperator = "operator"
)

// fromNone is the from label of a transition that creates an event.
const fromNone = "none"

// Metrics are a server's metrics and the registry that serves them. Its
// methods are safe for concurrent use. It implements engine.Observer.
type Metrics struct {
	reg *prometheus.Registry

	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	throttled *prometheus.CounterVec
	longPolls prometheus.Gauge

	transitions      *prometheus.CounterVec
	approvals        *prometheus.CounterVec
	byVM, byOperator prometheus.Counter
	noticeToApproval prometheus.Histogram
	approvalToStart  prometheus.Histogram
	deadlineLag      prometheus.Histogram
	commit           prometheus.Observer

	hooks *webhookMetrics // metrics/webhook.go
}

var _ engine.Observer = (*Metrics)(nil)

// latencyBuckets bound a metadata request's duration in seconds: most
// answers take microseconds; a long-poll up to its timeout.
var latencyBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 60, 300}

// leadBuckets bound notices and leads in seconds, 1 second to 30 days:
// notices run from 30 seconds (a Preempt) to weeks (EC2).
var leadBuckets = []float64{1, 5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400, 604800, 2592000}

// New returns the metrics of a server whose store is of the kind store
// ("bolt", "etcd", "mem"), registered with the Go and process collectors.
func New(store string) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forewarn_metadata_requests_total",
			Help: "Metadata API requests answered, by API (azure, gce, aws), route and status code.",
		}, []string{"api", "route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "forewarn_metadata_request_duration_seconds",
			Help:    "Time from a metadata API request's arrival at its handler to its answer, held long-polls included, by API and route.",
			Buckets: latencyBuckets,
		}, []string{"api", "route"}),
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forewarn_metadata_throttled_total",
			Help: "Metadata API requests refused with 429 over a VM's rate limit, by API.",
		}, []string{"api"}),
		longPolls: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "forewarn_gce_long_polls_held",
			Help: "GCE wait_for_change requests being held now.",
		}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forewarn_event_transitions_total",
			Help: "Event status changes this server committed, by event type and from and to status (from is none for a created event).",
		}, []string{"type", "from", "to"}),
		approvals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forewarn_approvals_total",
			Help: "Approvals recorded, by who gave them (vm or operator).",
		}, []string{"by"}),
		noticeToApproval: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "forewarn_event_notice_to_approval_seconds",
			Help:    "Time from an event's creation (its notice) to its first approval.",
			Buckets: leadBuckets,
		}),
		approvalToStart: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "forewarn_event_approval_to_not_before_seconds",
			Help:    "Time from a Scheduled event's first approval to the NotBefore it had: the notice the approval gave back.",
			Buckets: leadBuckets,
		}),
		deadlineLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "forewarn_deadline_lag_seconds",
			Help:    "How late a deadline timer ran after the deadline it was armed for.",
			Buckets: []float64{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60},
		}),
	}
	commit := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "forewarn_store_commit_duration_seconds",
		Help:    "Time one write to the store took, whatever its result, by store kind.",
		Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
	}, []string{"store"})
	m.commit = commit.WithLabelValues(store)
	m.byVM = m.approvals.WithLabelValues(byVM)
	m.byOperator = m.approvals.WithLabelValues(byOperator)
	m.hooks = newWebhookMetrics(m.reg)
	m.reg.MustRegister(m.requests, m.duration, m.throttled, m.longPolls, m.transitions, m.approvals,
		m.noticeToApproval, m.approvalToStart, m.deadlineLag, commit,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Registry returns the registry the metrics are in.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Watch registers the gauges read from eng when scraped: its events by
// type and status, and its enabled VMs. Call it once.
func (m *Metrics) Watch(eng *engine.Engine) {
	m.reg.MustRegister(&eventsCollector{eng: eng}, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "forewarn_vms_enabled",
		Help: "Fleet VMs whose scheduled events are enabled: a VM of their service called within the disable window.",
	}, func() float64 { return float64(eng.EnabledVMs()) }), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "forewarn_client_report_unsaved",
		Help: "1 while what the client report's findings depend on (who read the events, VMs' counts due) is not all in the store yet, else 0.",
	}, func() float64 {
		if eng.Unsaved() {
			return 1
		}
		return 0
	}))
}

// eventsDesc describes the events gauge.
var eventsDesc = prometheus.NewDesc("forewarn_events",
	"Events the engine holds, active and ended, by type and status.", []string{"type", "status"}, nil)

// eventsCollector reads the events gauge from the engine's counts.
type eventsCollector struct{ eng *engine.Engine }

func (c *eventsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- eventsDesc }

func (c *eventsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, n := range c.eng.EventCounts() {
		ch <- prometheus.MustNewConstMetric(eventsDesc, prometheus.GaugeValue, float64(n.N), string(n.Type), string(n.Status))
	}
}

// Transition implements engine.Observer.
func (m *Metrics) Transition(t forewarn.EventType, from, to forewarn.Status) {
	f := string(from)
	if f == "" {
		f = fromNone
	}
	m.transitions.WithLabelValues(string(t), f, string(to)).Inc()
}

// Approval implements engine.Observer. The notice histograms observe an
// event's first approval only; the counter every approval recorded.
func (m *Metrics) Approval(by string, ev *forewarn.Event, at time.Time) {
	if by == forewarn.Operator {
		m.byOperator.Inc()
	} else {
		m.byVM.Inc()
	}
	if len(ev.Approvals) > 0 {
		return
	}
	m.noticeToApproval.Observe(max(at.Sub(ev.Created), 0).Seconds())
	if ev.Status == forewarn.Scheduled && !ev.NotBefore.IsZero() {
		m.approvalToStart.Observe(max(ev.NotBefore.Sub(at), 0).Seconds())
	}
}

// DeadlineLag implements engine.Observer.
func (m *Metrics) DeadlineLag(late time.Duration) { m.deadlineLag.Observe(late.Seconds()) }

// Commit implements engine.Observer.
func (m *Metrics) Commit(took time.Duration) { m.commit.Observe(took.Seconds()) }

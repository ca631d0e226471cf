package agent

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler kinds, the kind label of the handler metrics.
const (
	kindExec    = "exec"
	kindWebhook = "webhook"
	kindOnClear = "on_clear"
)

// metrics are the agent's Prometheus metrics, in a registry of its own.
type metrics struct {
	reg            *prometheus.Registry
	seen           *prometheus.CounterVec
	runs           *prometheus.CounterVec
	failures       *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	approvals      prometheus.Counter
	approvalErrors prometheus.Counter
	approvalLead   prometheus.Histogram
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		seen: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forewarn_agent_events_seen_total",
			Help: "Events concerning this VM that the agent saw, by type.",
		}, []string{"type"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forewarn_agent_handler_runs_total",
			Help: "Handler runs, by kind (exec, webhook, on_clear) and result (success, failure).",
		}, []string{"kind", "result"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forewarn_agent_handler_failures_total",
			Help: "Handler runs that failed (non-zero exit, timeout, non-2xx answer), by kind.",
		}, []string{"kind"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "forewarn_agent_handler_duration_seconds",
			Help:    "How long handler runs took, by kind.",
			Buckets: []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 120, 300, 600},
		}, []string{"kind"}),
		approvals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forewarn_agent_approvals_total",
			Help: "Events the agent approved.",
		}),
		approvalErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forewarn_agent_approval_errors_total",
			Help: "Approvals the metadata service refused or that could not be sent.",
		}),
		approvalLead: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "forewarn_agent_approval_lead_seconds",
			Help:    "Time from an approval to the event's NotBefore.",
			Buckets: []float64{0, 5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600},
		}),
	}
	m.reg.MustRegister(m.seen, m.runs, m.failures, m.duration, m.approvals, m.approvalErrors, m.approvalLead,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, kind := range []string{kindExec, kindWebhook, kindOnClear} {
		m.runs.WithLabelValues(kind, "success")
		m.runs.WithLabelValues(kind, "failure")
		m.failures.WithLabelValues(kind)
	}
	return m
}

// handler serves the registry in the Prometheus exposition formats.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// observe records one handler run.
func (m *metrics) observe(kind string, ok bool, seconds float64) {
	result := "success"
	if !ok {
		result = "failure"
		m.failures.WithLabelValues(kind).Inc()
	}
	m.runs.WithLabelValues(kind, result).Inc()
	m.duration.WithLabelValues(kind).Observe(seconds)
}

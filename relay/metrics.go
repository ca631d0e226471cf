package relay

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// relayMetrics are the relay's metrics, served at GET /metrics on
// --metrics-addr. Labels are bounded: networks are the relay's own
// listeners, servers its --server list, codes the statuses it answers.
type relayMetrics struct {
	reg            *prometheus.Registry
	requests       *prometheus.CounterVec   // network, code
	duration       *prometheus.HistogramVec // network
	inFlight       *prometheus.GaugeVec     // network
	refused        *prometheus.CounterVec   // reason
	upstreamErrors *prometheus.CounterVec   // server
	upstreamConns  *prometheus.GaugeVec     // server, proto
	upstreamDials  *prometheus.CounterVec   // server
	// upstreamRequests is by server and proto: http/1.1 for a short
	// connection, h2 for HTTP/2.
	upstreamRequests *prometheus.CounterVec
	failovers        prometheus.Counter
}

func newMetrics(r *Relay) *relayMetrics {
	m := &relayMetrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "forewarn_relay_requests_total",
			Help: "VM requests the relay answered, by network and status (0: the VM left first)."}, []string{"network", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "forewarn_relay_request_duration_seconds",
			Help:    "Time from a VM's request to the end of the relay's answer, held long-polls included.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .05, .25, 1, 5, 30, 300}}, []string{"network"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "forewarn_relay_requests_in_flight",
			Help: "VM requests the relay holds now (held long-polls included), by network."}, []string{"network"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "forewarn_relay_refused_total",
			Help: "VM requests the relay refused itself: forwarded (a token request with X-Forwarded-For), body (over 64 KiB), headers (over 16 KiB), method (CONNECT)."}, []string{"reason"}),
		upstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "forewarn_relay_upstream_errors_total",
			Help: "Requests a server failed (no connection, or one that broke), each then sent again."}, []string{"server"}),
		upstreamConns: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "forewarn_relay_upstream_connections",
			Help: "Connections open to each server, by kind: h2 (HTTP/2, shared by every request; long-polls ride on these) and http/1.1 (short ones, a request at a time); at most --max-upstream-conns in all."}, []string{"server", "proto"}),
		upstreamDials: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "forewarn_relay_upstream_dials_total",
			Help: "Connections opened to each server, HTTP/2 and short ones."}, []string{"server"}),
		upstreamRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "forewarn_relay_upstream_requests_total",
			Help: "Requests sent to each server, by the kind of connection: http/1.1 (a short one: a request the server answers at once, while one is free) or h2 (long-polls, and the rest)."}, []string{"server", "proto"}),
		failovers: prometheus.NewCounter(prometheus.CounterOpts{Name: "forewarn_relay_failovers_total",
			Help: "Times the relay moved to another server after the one in use failed."}),
	}
	m.reg.MustRegister(m.requests, m.duration, m.inFlight, m.refused, m.upstreamErrors, m.upstreamConns,
		m.upstreamDials, m.upstreamRequests, m.failovers, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, l := range r.cfg.Listeners {
		m.inFlight.WithLabelValues(l.Network)
	}
	return m
}

// listenerMetrics are the series of one listener's network, looked up
// once rather than at every request.
type listenerMetrics struct {
	network  string
	requests *prometheus.CounterVec
	inFlight prometheus.Gauge
	duration prometheus.Observer
}

// of returns the series of network.
func (m *relayMetrics) of(network string) *listenerMetrics {
	return &listenerMetrics{network: network, requests: m.requests,
		inFlight: m.inFlight.WithLabelValues(network), duration: m.duration.WithLabelValues(network)}
}

// start counts a request in flight.
func (l *listenerMetrics) start() { l.inFlight.Inc() }

// done counts a request that ended with code after d.
func (l *listenerMetrics) done(code int, d time.Duration) {
	l.inFlight.Dec()
	l.requests.WithLabelValues(l.network, strconv.Itoa(code)).Inc()
	l.duration.Observe(d.Seconds())
}

func (m *relayMetrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

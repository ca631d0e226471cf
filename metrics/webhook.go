package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/forewarn/forewarn/webhook"
)

var _ webhook.Observer = (*Metrics)(nil)

// webhookMetrics count the deliveries of package webhook, by target: a
// webhook URL's scheme and host (webhook.Label).
type webhookMetrics struct {
	delivered, failed, gaveUp, dropped *prometheus.CounterVec
	queued                             *prometheus.GaugeVec
}

// newWebhookMetrics returns the webhook metrics, registered with reg.
func newWebhookMetrics(reg prometheus.Registerer) *webhookMetrics {
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"target"})
	}
	w := &webhookMetrics{
		delivered: counter("forewarn_webhook_delivered_total", "Webhook deliveries a receiver accepted (2xx), by target (scheme and host)."),
		failed:    counter("forewarn_webhook_failed_attempts_total", "Webhook delivery attempts that failed (network error or non-2xx answer), by target."),
		gaveUp:    counter("forewarn_webhook_given_up_total", "Webhook deliveries abandoned after their last attempt, or at an answer retrying cannot change, by target."),
		dropped:   counter("forewarn_webhook_dropped_total", "Webhook deliveries dropped from a full queue (the oldest waiting), by target."),
		queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "forewarn_webhook_queue_length",
			Help: "Webhook deliveries waiting, by target.",
		}, []string{"target"}),
	}
	reg.MustRegister(w.delivered, w.failed, w.gaveUp, w.dropped, w.queued)
	return w
}

// Delivered implements webhook.Observer.
func (m *Metrics) Delivered(target string) { m.hooks.delivered.WithLabelValues(target).Inc() }

// AttemptFailed implements webhook.Observer.
func (m *Metrics) AttemptFailed(target string) { m.hooks.failed.WithLabelValues(target).Inc() }

// GaveUp implements webhook.Observer.
func (m *Metrics) GaveUp(target string) { m.hooks.gaveUp.WithLabelValues(target).Inc() }

// Dropped implements webhook.Observer.
func (m *Metrics) Dropped(target string) { m.hooks.dropped.WithLabelValues(target).Inc() }

// Queued implements webhook.Observer.
func (m *Metrics) Queued(target string, delta int) {
	m.hooks.queued.WithLabelValues(target).Add(float64(delta))
}

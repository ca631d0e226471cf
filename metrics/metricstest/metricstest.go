// Package metricstest reads metrics back in tests.
package metricstest

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/forewarn/forewarn/metrics"
)

// Value returns the value of the series of the metric name whose labels
// include labels, given as "key=value": a counter's or gauge's value, a
// histogram's sample count. A series not there yet is 0; several series
// matching fail the test.
func Value(tb testing.TB, m *metrics.Metrics, name string, labels ...string) float64 {
	tb.Helper()
	return gatherValue(tb, m.Registry(), name, labels)
}

func gatherValue(tb testing.TB, g prometheus.Gatherer, name string, labels []string) float64 {
	tb.Helper()
	mfs, err := g.Gather()
	if err != nil {
		tb.Fatalf("gather metrics: %v", err)
	}
	var v float64
	found := false
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			if !matches(mt, labels) {
				continue
			}
			if found {
				tb.Fatalf("%s%v matches several series", name, labels)
			}
			found = true
			switch {
			case mt.Counter != nil:
				v = mt.Counter.GetValue()
			case mt.Gauge != nil:
				v = mt.Gauge.GetValue()
			case mt.Histogram != nil:
				v = float64(mt.Histogram.GetSampleCount())
			case mt.Untyped != nil:
				v = mt.Untyped.GetValue()
			}
		}
	}
	return v
}

// matches reports whether mt carries every "key=value" of labels.
func matches(mt *dto.Metric, labels []string) bool {
	for _, kv := range labels {
		k, v, _ := strings.Cut(kv, "=")
		ok := false
		for _, lp := range mt.GetLabel() {
			if lp.GetName() == k && lp.GetValue() == v {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

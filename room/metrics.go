package room

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/roompub/roompub/events"
)

// Metrics is an Observer that exports Prometheus metrics:
//
//	roompub_items_total{kind,outcome}            items decided (stored, duplicate, refused, failed)
//	roompub_refusals_total{kind,code}            refusals by code
//	roompub_item_duration_seconds{kind,outcome}  time to decide one item
type Metrics struct {
	items    *prometheus.CounterVec
	refusals *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

// NewMetrics registers the metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		items: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "roompub", Name: "items_total", Help: "Journal entries and execution records decided by the gate, by outcome.",
		}, []string{"kind", "outcome"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "roompub", Name: "refusals_total", Help: "Items refused by the gate, by refusal code.",
		}, []string{"kind", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "roompub", Name: "item_duration_seconds", Help: "Time the gate took to decide one item, including the append.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"kind", "outcome"}),
	}
	for _, c := range []prometheus.Collector{m.items, m.refusals, m.latency} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Item implements Observer.
func (m *Metrics) Item(kind, outcome string, code events.Code, took time.Duration) {
	m.items.WithLabelValues(kind, outcome).Inc()
	if outcome == OutcomeRefused {
		m.refusals.WithLabelValues(kind, string(code)).Inc()
	}
	m.latency.WithLabelValues(kind, outcome).Observe(took.Seconds())
}

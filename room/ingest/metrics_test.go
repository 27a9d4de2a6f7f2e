package ingest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// metricValue gathers reg and returns the value of the series name with
// exactly the labels given (name, value pairs), and whether it exists.
func metricValue(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		want := map[string]string{}
		for i := 0; i+1 < len(labels); i += 2 {
			want[labels[i]] = labels[i+1]
		}
	series:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(want) {
				continue
			}
			for _, l := range m.GetLabel() {
				if v, ok := want[l.GetName()]; !ok || v != l.GetValue() {
					continue series
				}
			}
			return value(m), true
		}
	}
	return 0, false
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

// TestMetricsAfterRealItems: a gate with ingest.Metrics as its observer
// counts a stored chain, a refused line by its code, and reports its
// pause state as roompub_gate_paused.
func TestMetricsAfterRealItems(t *testing.T) {
	e := roomtest.NewEnv(t)
	reg := prometheus.NewRegistry()
	m, err := ingest.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	g, err := ingest.NewGate(ctx, e.Nc, ingest.GateOptions{Validator: e.V, Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := metricValue(t, reg, "roompub_gate_paused"); !ok || v != 0 {
		t.Fatalf("roompub_gate_paused before any pause: %v (present %v), want 0", v, ok)
	}

	_, body := roomtest.Journal(t, "run-metrics", "cap-1", 3)
	r, err := g.AppendJournal(ctx, "room:metrics", body, nil)
	if err != nil || r.Stored != 3 {
		t.Fatalf("append: %+v, %v", r, err)
	}
	if v, _ := metricValue(t, reg, "roompub_items_total", "kind", "journal", "outcome", "stored"); v != 3 {
		t.Fatalf("stored items: %v, want 3", v)
	}

	// The next position with its payload edited after hashing: refused
	// invalid_entry, counted once under its code.
	_, more := roomtest.Journal(t, "run-metrics", "cap-1", 4)
	tampered := append(append([]byte{}, body...), roomtest.ReplaceOnce(t, more[len(body):], `"status":"ok"`, `"status":"no"`)...)
	r, err = g.AppendJournal(ctx, "room:metrics", tampered, nil)
	if err != nil || r.Refused != 1 {
		t.Fatalf("tampered append: %+v, %v", r, err)
	}
	if v, _ := metricValue(t, reg, "roompub_refusals_total", "kind", "journal", "code", string(events.InvalidEntry)); v != 1 {
		t.Fatalf("refusals {journal, invalid_entry}: %v, want 1", v)
	}
	if v, _ := metricValue(t, reg, "roompub_item_duration_seconds", "kind", "journal", "outcome", "refused"); v != 1 {
		t.Fatalf("refused latency observations: %v, want 1", v)
	}

	g.Pause(errors.New("the stream is weak"))
	if v, _ := metricValue(t, reg, "roompub_gate_paused"); v != 1 {
		t.Fatalf("roompub_gate_paused while paused: %v, want 1", v)
	}
	_, next := roomtest.Journal(t, "run-metrics", "cap-2", 1)
	if r, _ := g.AppendJournal(ctx, "room:metrics", next, nil); r.Failures != 1 {
		t.Fatalf("append while paused: %+v, want 1 failed", r)
	}
	if v, _ := metricValue(t, reg, "roompub_items_total", "kind", "journal", "outcome", string(room.OutcomeFailed)); v != 1 {
		t.Fatalf("failed items while paused: %v, want 1", v)
	}
	g.Pause(nil)
	if v, _ := metricValue(t, reg, "roompub_gate_paused"); v != 0 {
		t.Fatalf("roompub_gate_paused after resume: %v, want 0", v)
	}
}

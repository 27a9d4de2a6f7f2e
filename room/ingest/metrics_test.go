package ingest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
)

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
	for _, name := range []string{"roompub_over_quota_total", "roompub_replies_refused_total"} {
		if v, ok := roomtest.MetricValue(t, reg, name, "endpoint", room.EndpointJournal); !ok || v != 0 {
			t.Fatalf("%s{endpoint=journal} before any request: %v (present %v), want 0", name, v, ok)
		}
	}
	if v, ok := roomtest.MetricValue(t, reg, "roompub_gate_paused"); !ok || v != 0 {
		t.Fatalf("roompub_gate_paused before any pause: %v (present %v), want 0", v, ok)
	}

	_, body := roomtest.Journal(t, "run-metrics", "cap-1", 3)
	r, err := g.AppendJournal(ctx, "room:metrics", body, nil)
	if err != nil || r.Stored != 3 {
		t.Fatalf("append: %+v, %v", r, err)
	}
	if v, _ := roomtest.MetricValue(t, reg, "roompub_items_total", "kind", "journal", "outcome", "stored"); v != 3 {
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
	if v, _ := roomtest.MetricValue(t, reg, "roompub_refusals_total", "kind", "journal", "code", string(events.InvalidEntry)); v != 1 {
		t.Fatalf("refusals {journal, invalid_entry}: %v, want 1", v)
	}
	if v, _ := roomtest.MetricValue(t, reg, "roompub_item_duration_seconds", "kind", "journal", "outcome", "refused"); v != 1 {
		t.Fatalf("refused latency observations: %v, want 1", v)
	}

	g.Pause(errors.New("the stream is weak"))
	if v, _ := roomtest.MetricValue(t, reg, "roompub_gate_paused"); v != 1 {
		t.Fatalf("roompub_gate_paused while paused: %v, want 1", v)
	}
	_, next := roomtest.Journal(t, "run-metrics", "cap-2", 1)
	if r, _ := g.AppendJournal(ctx, "room:metrics", next, nil); r.Failures != 1 {
		t.Fatalf("append while paused: %+v, want 1 failed", r)
	}
	if v, _ := roomtest.MetricValue(t, reg, "roompub_items_total", "kind", "journal", "outcome", string(room.OutcomeFailed)); v != 1 {
		t.Fatalf("failed items while paused: %v, want 1", v)
	}
	g.Pause(nil)
	if v, _ := roomtest.MetricValue(t, reg, "roompub_gate_paused"); v != 0 {
		t.Fatalf("roompub_gate_paused after resume: %v, want 0", v)
	}
}

// TestMetricsSumOverStreams: one Metrics watches the gates and stream
// guards of every partition; each stream's value is its own, and the
// gauges are their sum, so one stream's all-clear does not hide
// another's damage. A contradiction the checkpointer reports is a damaged
// room, as /healthz says.
func TestMetricsSumOverStreams(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := ingest.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.ChainsDamaged("ROOMS", 2)
	m.ChainsDamaged("ROOMS-1", 3)
	m.RoomsDamaged("ROOMS-1", 1)
	m.StoreLost("ROOMS", 7)
	m.Paused("ROOMS", true)
	m.Paused("ROOMS-1", true)
	m.ChainsDamaged("ROOMS", 0)
	m.Paused("ROOMS", false)
	for name, want := range map[string]float64{"roompub_store_damaged_chains": 3, "roompub_store_damaged_rooms": 1,
		"roompub_store_lost_messages": 7, "roompub_gate_paused": 1} {
		if v, ok := roomtest.MetricValue(t, reg, name); !ok || v != want {
			t.Errorf("%s: %v (present %v), want %v", name, v, ok, want)
		}
	}

	e := roomtest.NewEnv(t)
	g, err := ingest.NewGate(context.Background(), e.Nc, ingest.GateOptions{Validator: e.V, Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	g.NoteContradiction("room:x", "its checkpoint contradicts")
	if v, _ := roomtest.MetricValue(t, reg, "roompub_store_damaged_rooms"); v != 2 {
		t.Fatalf("after a contradiction on %s: roompub_store_damaged_rooms %v, want 2", room.DefaultStream, v)
	}
	g.NoteContradiction("room:x", "")
	if v, _ := roomtest.MetricValue(t, reg, "roompub_store_damaged_rooms"); v != 1 {
		t.Fatalf("after it matched again: roompub_store_damaged_rooms %v, want 1", v)
	}
}

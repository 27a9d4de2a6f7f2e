package checkpointer_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// TestCheckpointLagMetrics: the lag series follow real appends and real
// checkpoints: two rooms behind by 4 and 7 leaves, then the second
// checkpointed at Every (lag 4, one room), then Stop's final checkpoints
// (lag 0, no room).
func TestCheckpointLagMetrics(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	key := roomtest.NewPublisherKey(t)
	reg := prometheus.NewRegistry()
	ckp, _ := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: key, Every: 10, Interval: time.Hour, Registerer: reg})
	gate := roomtest.AttestingGate(e, e.Nc, key, ckp, ingest.GateOptions{})
	gauge := func(name string) float64 {
		t.Helper()
		v, ok := roomtest.MetricValue(t, reg, name)
		if !ok {
			t.Fatalf("%s is not exposed", name)
		}
		return v
	}
	if m, s, n, u := gauge("roompub_checkpoint_lag_max_messages"), gauge("roompub_checkpoint_lag_max_seconds"), gauge("roompub_checkpoint_lagging_rooms"), gauge("roompub_checkpoint_unread_messages"); m != 0 || s != 0 || n != 0 || u != 0 {
		t.Fatalf("an empty stream lags %v messages, %v s, %v rooms, %v unread; want 0", m, s, n, u)
	}

	esA, _ := roomtest.Journal(t, "run-lag", "cap-a", 4)
	esB, _ := roomtest.Journal(t, "run-lag", "cap-b", 13)
	if r, err := gate.AppendJournal(ctx, "room:lag-a", roomtest.Lines(esA), nil); err != nil || r.Stored != 4 {
		t.Fatalf("%+v %v", r, err)
	}
	if r, err := gate.AppendJournal(ctx, "room:lag-b", roomtest.Lines(esB[:7]), nil); err != nil || r.Stored != 7 {
		t.Fatalf("%+v %v", r, err)
	}
	roomtest.WaitFor(t, 10*time.Second, "lag of 7 messages in 2 rooms", func() bool {
		return gauge("roompub_checkpoint_lag_max_messages") == 7 && gauge("roompub_checkpoint_lagging_rooms") == 2
	})
	time.Sleep(50 * time.Millisecond)
	if s := gauge("roompub_checkpoint_lag_max_seconds"); s < 0.05 || s > 10 {
		t.Fatalf("lag of %v s, want between the 50 ms slept and 10 s", s)
	}

	// Room B reaches Every (13 leaves): its checkpoint covers it whole.
	if r, err := gate.AppendJournal(ctx, "room:lag-b", roomtest.Lines(esB[7:]), nil); err != nil || r.Stored != 6 {
		t.Fatalf("%+v %v", r, err)
	}
	roomtest.WaitFor(t, 10*time.Second, "room B checkpointed", func() bool {
		return gauge("roompub_checkpoint_lag_max_messages") == 4 && gauge("roompub_checkpoint_lagging_rooms") == 1
	})
	if v, _ := roomtest.MetricValue(t, reg, "roompub_checkpoints_written_total"); v != 1 {
		t.Fatalf("checkpoints written: %v, want 1", v)
	}

	// Stop writes room A's final checkpoint: nothing lags.
	if err := ckp.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if m, s, n, u := gauge("roompub_checkpoint_lag_max_messages"), gauge("roompub_checkpoint_lag_max_seconds"), gauge("roompub_checkpoint_lagging_rooms"), gauge("roompub_checkpoint_unread_messages"); m != 0 || s != 0 || n != 0 || u != 0 {
		t.Fatalf("after the final checkpoints: lag %v messages, %v s, %v rooms, %v unread; want 0", m, s, n, u)
	}
	if v, _ := roomtest.MetricValue(t, reg, "roompub_checkpoints_written_total"); v != 2 {
		t.Fatalf("checkpoints written: %v, want 2", v)
	}
}

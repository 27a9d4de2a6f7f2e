package node_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// TestRestartMidJournal: half a journal, a server restart on the same
// store, then the whole journal: the first half is duplicate, the second
// stored, and every entry is in the stream exactly once.
func TestRestartMidJournal(t *testing.T) {
	e := roomtest.NewEnv(t)
	const n, half = 20, 10
	const subj = "rooms.alpha.journal.run-1.cap-1"
	entries, body := roomtest.Journal(t, "run-1", "cap-1", n)
	if r := e.ShipJournal("room:alpha", roomtest.Lines(entries[:half])); r.Stored != half {
		t.Fatalf("first half: %+v", r)
	}
	e.Stop()
	e.Start()
	if st := e.State(); st.Msgs != half || st.LastSeq != half {
		t.Fatalf("after restart: %+v", st)
	}
	r := e.ShipJournal("room:alpha", body)
	if r.Stored != n-half || r.Dupes != half || r.Refused+r.Skipped+r.Failures != 0 {
		t.Fatalf("whole journal: %+v", r)
	}
	for i, it := range r.Items[:half] {
		if it.Outcome != "duplicate" || roomtest.SeqOf(it) != int64(i) {
			t.Fatalf("item %d: %+v", i, it)
		}
	}
	roomtest.CheckStored(t, r, entries, half, n, half+1, subj)
	msgs := e.OnSubject(subj)
	if len(msgs) != n {
		t.Fatalf("%d messages on %s, want %d", len(msgs), subj, n)
	}
	for i, m := range msgs {
		if m.Sequence != uint64(i+1) || !bytes.Equal(m.Data, entries[i].Canonical()) {
			t.Fatalf("message %d: seq %d %s", i, m.Sequence, m.Data)
		}
	}
	if st := e.State(); st.Msgs != n {
		t.Fatalf("stream holds %d messages, want %d", st.Msgs, n)
	}
}

// TestStreamStaysAppendOnly tries every way of taking something out of the
// stream through the JetStream API; the server refuses each one.
func TestStreamStaysAppendOnly(t *testing.T) {
	e := roomtest.NewEnv(t)
	_, body := roomtest.Journal(t, "run-1", "cap-1", 3)
	e.ShipJournal("room:alpha", body)
	rec := roomtest.ReferenceBytes(t, "verified.json")
	e.ShipRecord(rec)
	ctx := context.Background()
	before := e.State()
	// Three entries and a record, the record's markers beside them.
	if leaves := len(e.StoredUnmarked()); leaves != 4 || before.Msgs <= 4 {
		t.Fatalf("stream: %+v, %d leaves", before, leaves)
	}
	apiCode := func(err error) jetstream.ErrorCode {
		t.Helper()
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) {
			t.Fatalf("not an API error: %v", err)
		}
		return apiErr.ErrorCode
	}
	// Purge, whole or by subject.
	for _, opts := range [][]jetstream.StreamPurgeOpt{nil, {jetstream.WithPurgeSubject("rooms.alpha.>")}, {jetstream.WithPurgeKeep(1)}} {
		err := e.Stream.Purge(ctx, opts...)
		if c := apiCode(err); c != 10110 || !strings.Contains(err.Error(), "stream purge not permitted") {
			t.Fatalf("purge: %v", err)
		}
	}
	// Message delete, plain and secure (the client reports these as
	// ErrMsgDeleteUnsuccessful with the server's error in the text).
	for name, del := range map[string]func(context.Context, uint64) error{"delete": e.Stream.DeleteMsg, "secure delete": e.Stream.SecureDeleteMsg} {
		err := del(ctx, 2)
		if !errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) || !strings.Contains(err.Error(), "err_code=10057") ||
			!strings.Contains(err.Error(), "message delete not permitted") {
			t.Fatalf("%s: %v", name, err)
		}
	}
	// Weakening the configuration.
	cfg := e.Stream.CachedInfo().Config
	for _, c := range []struct {
		name   string
		change func(*jetstream.StreamConfig)
		text   string
	}{
		{"deny_delete off", func(c *jetstream.StreamConfig) { c.DenyDelete = false }, "can not cancel deny message deletes"},
		{"deny_purge off", func(c *jetstream.StreamConfig) { c.DenyPurge = false }, "can not cancel deny purge"},
		{"both off", func(c *jetstream.StreamConfig) { c.DenyPurge, c.DenyDelete = false, false }, "can not cancel deny"},
		{"rollup on", func(c *jetstream.StreamConfig) { c.AllowRollup = true }, "roll-ups require the purge permission"},
	} {
		weak := cfg
		c.change(&weak)
		_, err := e.Js.UpdateStream(ctx, weak)
		if code := apiCode(err); code != 10052 || !strings.Contains(err.Error(), c.text) {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
	// Deleting the stream is the one thing an administrator's connection
	// can still do; it is not tried here (no publisher identity may).
	if after := e.State(); after != before {
		t.Fatalf("stream changed: %+v, was %+v", after, before)
	}
	info, err := e.Stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := room.CheckStreamConfig(info.Config, room.Subjects{}); err != nil {
		t.Fatalf("config after the attempts: %v", err)
	}
	// Every message is still readable.
	for i, m := range e.Stored() {
		if m.Sequence != uint64(i+1) {
			t.Fatalf("message %d has seq %d", i, m.Sequence)
		}
	}
}

// TestStreamMaxAgeStopsServe: the server accepts an update that adds
// MaxAge. EnsureStream and CheckStreamConfig then refuse the stream, and a
// running Serve pauses appends and reports unhealthy.
func TestStreamMaxAgeStopsServe(t *testing.T) {
	s := startServe(t, 100*time.Millisecond)
	entries, body := roomtest.Journal(t, "run-1", "cap-1", 4)
	if r := s.shipJournal("room:alpha", roomtest.Lines(entries[:2])); r.Stored != 2 {
		t.Fatalf("before: %+v", r)
	}
	if code, _ := s.get("/healthz"); code != 200 {
		t.Fatalf("healthz %d before", code)
	}
	ctx := context.Background()
	st, err := s.js.Stream(ctx, room.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxAge = time.Hour
	if _, err := s.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatalf("the server refused max_age (the test assumes it accepts it): %v", err)
	}

	// The library's checks refuse the weakened stream.
	_, err = room.EnsureStream(ctx, s.js, room.StreamConfig("", room.Subjects{}, 1), room.Subjects{})
	if !errors.Is(err, room.ErrStreamConfig) || !strings.Contains(err.Error(), "max_age is 1h0m0s") {
		t.Fatalf("EnsureStream: %v", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = room.CheckStreamConfig(info.Config, room.Subjects{})
	if !errors.Is(err, room.ErrStreamConfig) || err.Error() != "room stream is not append-only: max_age is 1h0m0s, want none" {
		t.Fatalf("CheckStreamConfig: %v", err)
	}

	// Serve notices within a few check intervals.
	s.waitHealth(503, "unhealthy: room stream is not append-only: max_age is 1h0m0s, want none\n")
	before := s.count()
	r := s.shipJournal("room:alpha", body)
	// The two stored entries are still duplicates (nothing is appended for
	// them); the first new one fails, naming the check, and the rest waits.
	if r.Dupes != 2 || r.Failures != 1 || r.Skipped != 1 || r.Stored != 0 {
		t.Fatalf("paused: %+v", r)
	}
	if it := r.Items[2]; it.Outcome != "failed" || !strings.Contains(it.Reason, "appends paused") || !strings.Contains(it.Reason, "max_age") {
		t.Fatalf("paused item: %+v", it)
	}
	rr := s.shipRecord(roomtest.ReferenceBytes(t, "verified.json"))
	if rr.Item.Outcome != "failed" || !strings.Contains(rr.Item.Reason, "max_age") {
		t.Fatalf("paused record: %+v", rr)
	}
	if after := s.count(); after != before {
		t.Fatalf("%d messages appended while paused", after-before)
	}
	// The metrics say the same: the guard's check failed, the gate is
	// paused, the journal line and the record failed.
	for name, want := range map[string]float64{"roompub_stream_guard_ok": 0, "roompub_gate_paused": 1, "roompub_items_total{kind=\"journal\",outcome=\"failed\"}": 1,
		"roompub_items_total{kind=\"execution\",outcome=\"failed\"}": 1} {
		if got := metricSum(t, s.info.HTTPAddr, name); got != want {
			t.Errorf("paused: %s = %v, want %v", name, got, want)
		}
	}

	// An administrator restores the stream: appends resume.
	cfg.MaxAge = 0
	if _, err := s.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	s.waitHealth(200, "ok\n")
	if r := s.shipJournal("room:alpha", body); r.Dupes != 2 || r.Stored != 2 || r.Items[3].StreamSeq != 4 {
		t.Fatalf("resumed: %+v", r)
	}
	if ok, paused := metricSum(t, s.info.HTTPAddr, "roompub_stream_guard_ok"), metricSum(t, s.info.HTTPAddr, "roompub_gate_paused"); ok != 1 || paused != 0 {
		t.Errorf("resumed: roompub_stream_guard_ok %v, roompub_gate_paused %v; want 1 and 0", ok, paused)
	}
	s.stop()
}

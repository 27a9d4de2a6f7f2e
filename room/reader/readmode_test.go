package reader_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
)

// auditBothWays audits with o read by an ordered consumer and by direct
// gets (with batches of 1,000, 7 and 1 message(s), one to three requests
// in flight: answers that overlap and leave gaps; several rooms merged or
// read as one), checks that every
// report is the same but for how it was read, and returns the consumer's.
func auditBothWays(t *testing.T, e *roomtest.Env, o reader.AuditOptions) *reader.AuditReport {
	t.Helper()
	o.Read = reader.ReadConsumer
	want, err := reader.Audit(t.Context(), e.Js, o)
	if err != nil {
		t.Fatal(err)
	}
	if want.ReadBy != reader.ReadByConsumer || want.ReadWhy != "" {
		t.Errorf("read by %q (%q), want consumer", want.ReadBy, want.ReadWhy)
	}
	wantJSON := reportJSON(t, want)
	for _, c := range []struct{ batch, inFlight, mergeMax int }{{1000, 2, 8}, {1000, 2, 0}, {7, 2, 8}, {7, 2, 0}, {1, 1, 8}, {3, 3, 0}} {
		o.Read = reader.ReadDirect
		got, err := reader.AuditDirect(t.Context(), e.Js, o, c.batch, c.inFlight, c.mergeMax)
		if err != nil {
			t.Fatalf("direct %+v: %v", c, err)
		}
		if got.ReadBy != reader.ReadByDirect {
			t.Errorf("direct: read by %q", got.ReadBy)
		}
		if g := reportJSON(t, got); g != wantJSON {
			t.Errorf("direct %+v: report differs:\n%s\nconsumer:\n%s", c, g, wantJSON)
		}
	}
	return want
}

// reportJSON is rep as JSON without how it was read.
func reportJSON(t *testing.T, rep *reader.AuditReport) string {
	t.Helper()
	r := *rep
	r.ReadBy, r.ReadWhy = "", ""
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestReadDirectSameReport: an audit read with direct gets reports what
// one read with an ordered consumer does (totals, chains, violations,
// verified checkpoints), on a stream of two attested rooms with records,
// checkpoints and a forged message, for every room, both rooms named, one
// room, from a stream sequence and from a time; and on the compromised
// writer's stream.
func TestReadDirectSameReport(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	pub := roomtest.NewPublisherKey(t)
	trust := roomtest.Trusting(t, pub)
	ckp, _ := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: pub, Every: 40, Interval: time.Hour})
	gate := roomtest.AttestingGate(e, e.Nc, pub, ckp, ingest.GateOptions{})
	const beta = "room:beta"
	ea, _ := roomtest.Journal(t, "run-a", "cap-a", 61)
	eb, _ := roomtest.Journal(t, "run-b", "cap-b", 30)
	for k := range 3 {
		if r, err := gate.AppendJournal(ctx, roomtest.AttRoom, roomtest.Lines(ea[20*k:20*k+20]), nil); err != nil || r.Stored != 20 {
			t.Fatalf("%+v %v", r, err)
		}
		if r, err := gate.AppendJournal(ctx, beta, roomtest.Lines(eb[10*k:10*k+10]), nil); err != nil || r.Stored != 10 {
			t.Fatalf("%+v %v", r, err)
		}
	}
	for _, id := range []string{roomtest.AttRoom, beta} {
		if r := gate.AppendRecord(ctx, roomtest.RecordIn(t, e.Key, id, "rec-"+id[5:], nil).Canonical()); r.Item.Outcome != room.OutcomeStored {
			t.Fatalf("%+v", r)
		}
	}
	if err := ckp.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	forged := roomtest.PublishRaw(t, e.Js, room.Subjects{}.Journal(roomtest.AttRoom, events.ChainKey{RunID: "run-a", CapsuleID: "cap-a"}), ea[60].Canonical())

	rep := auditBothWays(t, e, reader.AuditOptions{Validator: e.V, Trust: trust})
	if rep.Totals.Messages != forged || rep.Totals.Entries != 90 || rep.Totals.Records != 2 || rep.Totals.SetAside != 1 ||
		rep.Totals.ChainsOK != 2 || rep.Totals.Checkpoints < 3 || len(rep.Checkpoints) != 2 || !rep.Attestation.Checked {
		t.Errorf("every room: totals %+v, checkpoints %+v", rep.Totals, rep.Checkpoints)
	}
	if got := roomtest.Mismatches(t, rep.Violations); !slices.Equal(got, []uint64{forged}) {
		t.Errorf("violations %v, want the forgery at %d", rep.Violations, forged)
	}
	for _, f := range rep.Checkpoints {
		if f.Checkpoints == 0 || f.CheckpointsRefused != 0 || f.Refused != "" {
			t.Errorf("checkpoints of %s: %+v", f.RoomID, f)
		}
	}
	all := rep.Totals

	// Both rooms by name: several filters, read as one and kept by subject.
	rep = auditBothWays(t, e, reader.AuditOptions{Validator: e.V, Trust: trust, Rooms: []string{beta, roomtest.AttRoom}})
	if fmt.Sprint(rep.Totals) != fmt.Sprint(all) {
		t.Errorf("both rooms: totals %+v, want %+v", rep.Totals, all)
	}
	// One room (and the other's messages not read).
	rep = auditBothWays(t, e, reader.AuditOptions{Validator: e.V, Trust: trust, Rooms: []string{beta}})
	if rep.Totals.Entries != 30 || rep.Totals.Records != 1 || rep.Totals.SetAside != 0 || len(rep.Checkpoints) != 1 {
		t.Errorf("room %s: totals %+v", beta, rep.Totals)
	}
	// From a stream sequence, and from the time of one.
	rep = auditBothWays(t, e, reader.AuditOptions{Validator: e.V, FromSeq: 40})
	if rep.FromSeq != 40 || rep.Totals.Messages != forged-39 || rep.Attestation.Checked {
		t.Errorf("from stream seq 40: from %d, totals %+v", rep.FromSeq, rep.Totals)
	}
	m, err := e.Stream.GetMsg(ctx, 50)
	if err != nil {
		t.Fatal(err)
	}
	rep = auditBothWays(t, e, reader.AuditOptions{Validator: e.V, Since: m.Time})
	if rep.Totals.Messages < forged-49 || rep.Totals.Messages > forged {
		t.Errorf("since the time of stream seq 50: totals %+v", rep.Totals)
	}
	// Nothing on the rooms' subjects from the start on: nothing read (the
	// consumer used to wait for ever, its end check asking the leader from
	// stream seq 1).
	rep = auditBothWays(t, e, reader.AuditOptions{Validator: e.V, Since: time.Now().Add(time.Hour)})
	if rep.Totals.Messages != 0 {
		t.Errorf("since an hour from now: totals %+v", rep.Totals)
	}
	rep = auditBothWays(t, e, reader.AuditOptions{Validator: e.V, Rooms: []string{beta}, FromSeq: forged})
	if rep.Totals.Messages != 0 || rep.FromSeq != forged {
		t.Errorf("room %s from stream seq %d: totals %+v", beta, forged, rep.Totals)
	}

	// The compromised writer's stream: many violations, two rooms.
	// compromisedStream's seqs are fixed by hand: no record markers.
	e2 := roomtest.NewEnvUnmarked(t, embedded.Options{})
	sc := compromisedStream(t, e2)
	rep = auditBothWays(t, e2, reader.AuditOptions{Validator: e2.V})
	if rep.Totals.Messages != sc.last || rep.Totals.SetAside != uint64(len(sc.asides)) || rep.Totals.ChainsBroken != 3 {
		t.Errorf("compromised stream: totals %+v", rep.Totals)
	}
	auditBothWays(t, e2, reader.AuditOptions{Validator: e2.V, Rooms: []string{evilRoom, roomtest.RefRoom}, FromSeq: 3})
	// Two filters, one room without messages: the other room's are left.
	rep = auditBothWays(t, e2, reader.AuditOptions{Validator: e2.V, Rooms: []string{"room:none", roomtest.RefRoom}})
	if rep.Totals.Messages != 2 || rep.Totals.Records != 1 || len(rep.Chains) != 0 {
		t.Errorf("rooms none and %s: totals %+v", roomtest.RefRoom, rep.Totals)
	}
}

// TestReadAtConsumerLimit: on a stream that has as many consumers as the
// server allows (5 here, 1,000 by default), an audit read by consumer
// fails with the limit error, and one with ReadAuto reads by direct get,
// says so, and reports what it would have.
func TestReadAtConsumerLimit(t *testing.T) {
	e := roomtest.NewEnvWith(t, embedded.Options{Configure: func(o *server.Options) { o.JetStreamLimits.DefaultMaxConsumers = 5 }})
	es, body := roomtest.Journal(t, "run-1", "cap-1", 5)
	e.ShipJournal("room:alpha", body)
	e.ShipRecord(roomtest.ReferenceBytes(t, "verified.json"))
	e.ShipRecord(roomtest.ReferenceBytes(t, "refused.json"))

	rep, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V})
	if err != nil || rep.ReadBy != reader.ReadByConsumer {
		t.Fatalf("below the limit: %v, read by %q", err, rep.ReadBy)
	}
	want := reportJSON(t, rep)

	// Another client fills the stream's consumers (the audit's ordered
	// consumer may still be there: it goes after its inactive threshold).
	js, _ := jetstream.New(e.Connect())
	for i := 0; ; i++ {
		_, err := js.CreateOrUpdateConsumer(t.Context(), room.DefaultStream, jetstream.ConsumerConfig{Durable: fmt.Sprintf("d%d", i)})
		if errors.Is(err, jetstream.ErrMaximumConsumersLimit) && i > 0 {
			break
		}
		if err != nil || i == 5 {
			t.Fatalf("durable %d: %v", i, err)
		}
	}
	st, err := js.Stream(t.Context(), room.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	consumers := func() int {
		info, err := st.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Consumers
	}
	if n := consumers(); n != 5 {
		t.Fatalf("%d consumers, want 5", n)
	}

	_, err = reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, Read: reader.ReadConsumer})
	if !errors.Is(err, jetstream.ErrMaximumConsumersLimit) {
		t.Errorf("read by consumer at the limit: %v, want the limit error", err)
	}
	for _, mode := range []reader.ReadMode{"", reader.ReadAuto, reader.ReadDirect} {
		rep, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, Read: mode})
		if err != nil {
			t.Fatalf("%q at the limit: %v", mode, err)
		}
		if rep.ReadBy != reader.ReadByDirect || mode != reader.ReadDirect && !strings.Contains(rep.ReadWhy, "maximum consumers limit reached (10026)") {
			t.Errorf("%q at the limit: read by %q (%q)", mode, rep.ReadBy, rep.ReadWhy)
		}
		if got := reportJSON(t, rep); got != want {
			t.Errorf("%q at the limit:\n%s\nwant\n%s", mode, got, want)
		}
		if !rep.Clean() || rep.Totals.Messages != 7+rep.Totals.Markers || rep.Totals.Markers == 0 || rep.Totals.Entries != 5 || rep.Totals.Records != 2 || rep.Totals.ChainsOK != 1 || rep.Chains[0].Head != es[4].EntryHash() {
			t.Errorf("%q at the limit: %+v", mode, rep.Totals)
		}
	}
	if n := consumers(); n != 5 {
		t.Errorf("%d consumers after the audits, want 5", n)
	}
}

// TestFollowRebuildAtConsumerLimit: a follower restarted on a stream at
// its consumer limit rebuilds by direct get (ReadAuto), so the chain's
// continuation verifies against the rebuilt head; with ReadConsumer the
// rebuild fails with the limit error.
func TestFollowRebuildAtConsumerLimit(t *testing.T) {
	e := roomtest.NewEnvWith(t, embedded.Options{Configure: func(o *server.Options) { o.JetStreamLimits.DefaultMaxConsumers = 5 }})
	es, _ := roomtest.Journal(t, "run-1", "cap-1", 10)
	e.ShipJournal("room:alpha", roomtest.Lines(es[:5]))
	o := reader.FollowOptions{Durable: "fl", Validator: e.V}
	f := roomtest.StartFollow(t, e.Js, o, nil)
	f.WaitSeen(t, 5)
	f.Cancel()
	<-f.Done
	js, _ := jetstream.New(e.Connect())
	for i := 0; ; i++ {
		_, err := js.CreateOrUpdateConsumer(t.Context(), room.DefaultStream, jetstream.ConsumerConfig{Durable: fmt.Sprintf("d%d", i)})
		if errors.Is(err, jetstream.ErrMaximumConsumersLimit) && i > 0 {
			break
		}
		if err != nil || i == 5 {
			t.Fatalf("durable %d: %v", i, err)
		}
	}
	e.ShipJournal("room:alpha", roomtest.Lines(es[5:]))

	o.Read = reader.ReadConsumer
	f = roomtest.StartFollow(t, e.Js, o, nil)
	select {
	case <-f.Done:
	case <-time.After(15 * time.Second):
		t.Fatal("rebuild by consumer at the limit: Follow still runs")
	}
	if !errors.Is(f.Err, jetstream.ErrMaximumConsumersLimit) {
		t.Errorf("rebuild by consumer at the limit: %v", f.Err)
	}
	o.Read = ""
	f = roomtest.StartFollow(t, e.Js, o, nil)
	f.WaitSeen(t, 5)
	time.Sleep(100 * time.Millisecond)
	f.Mu.Lock()
	defer f.Mu.Unlock()
	var seqs []uint64
	for _, ev := range f.Events {
		seqs = append(seqs, ev.Seq)
	}
	if len(f.Asides) != 0 || fmt.Sprint(seqs) != "[6 7 8 9 10]" {
		t.Errorf("after the rebuild: events at stream seqs %v, set aside %v", seqs, f.Asides)
	}
}

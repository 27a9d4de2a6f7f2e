package reader_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/jsapi"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
)

// TestReadersIgnoreStoredServerHeaders: a message written straight into
// the stream with headers named like the ones a direct get adds
// (Nats-Sequence, Nats-Subject, Nats-Stream, Nats-Num-Pending) cannot pass
// for another stream sequence or subject with any reader: audits by
// consumer and by direct get see it where the server stored it, and end.
func TestReadersIgnoreStoredServerHeaders(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	es, _ := roomtest.Journal(t, "run-hdr", "cap-hdr", 4)
	if r, err := e.Gate.AppendJournal(ctx, "room:hdr", roomtest.Lines(es[:3]), nil); err != nil || r.Stored != 3 {
		t.Fatalf("%+v %v", r, err)
	}
	key := events.ChainKey{RunID: "run-hdr", CapsuleID: "cap-hdr"}
	msg := &nats.Msg{Subject: room.Subjects{}.Journal("room:hdr", key), Data: es[3].Canonical(),
		Header: nats.Header{"Nats-Sequence": []string{"1"}, "Nats-Subject": []string{"rooms.other.journal.run-hdr.cap-hdr"},
			"Nats-Stream": []string{"OTHER"}, "Nats-Num-Pending": []string{"0"}}}
	ack, err := e.Js.PublishMsg(ctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []reader.ReadMode{reader.ReadConsumer, reader.ReadDirect} {
		rep, err := reader.Audit(ctx, e.Js, reader.AuditOptions{Validator: e.V, Read: mode})
		if err != nil {
			t.Fatalf("%v: %v", mode, err)
		}
		if rep.Totals.Messages != 4 || rep.Totals.Entries != 4 || rep.LastSeq != ack.Sequence || len(rep.Chains) != 1 || rep.Chains[0].Entries != 4 {
			t.Errorf("%v: %d messages, %d entries, last seq %d (want 4, 4, %d), chains %+v", mode,
				rep.Totals.Messages, rep.Totals.Entries, rep.LastSeq, ack.Sequence, rep.Chains)
		}
	}
}

// TestReadersReadPastHiddenServerHeaders: a message written straight into
// the stream with a blank line inside its header block (which the server
// stores as sent) hides the headers a direct get appends from nats.go;
// with the server's headers forged before it, it claimed another seq.
// It stopped every audit by direct get ("direct get refused: status"),
// for good. Audits by consumer and by direct get now give the same
// report: every message where the server stored it, the raw entry
// judged as any message written around the gate.
func TestReadersReadPastHiddenServerHeaders(t *testing.T) {
	for name, hdr := range map[string]string{
		"blank line": "NATS/1.0\r\nX: 1\r\n\r\nY: 2\r\n\r\n",
		"forged":     "NATS/1.0\r\nNats-Stream: ROOMS\r\nNats-Subject: rooms.other.exec\r\nNats-Sequence: 1\r\nNats-Time-Stamp: 2026-01-01T00:00:00Z\r\nNats-Num-Pending: 0\r\nNats-Last-Sequence: 0\r\n\r\nY: 2\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			e := roomtest.NewEnv(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			es, _ := roomtest.Journal(t, "run-blank", "cap-blank", 5)
			if r, err := e.Gate.AppendJournal(ctx, "room:blank", roomtest.Lines(es[:3]), nil); err != nil || r.Stored != 3 {
				t.Fatalf("%+v %v", r, err)
			}
			key := events.ChainKey{RunID: "run-blank", CapsuleID: "cap-blank"}
			raw := roomtest.PublishRawHeader(t, e.Connect(), room.Subjects{}.Journal("room:blank", key), hdr, es[3].Canonical())
			if r, err := e.Gate.AppendJournal(ctx, "room:blank", roomtest.Lines(es[4:]), nil); err != nil || r.Stored != 1 {
				t.Fatalf("after the raw message: %+v %v", r, err)
			}
			rep := auditBothWays(t, e, reader.AuditOptions{Validator: e.V})
			if rep.Totals.Messages != 5 || rep.Totals.Entries != 5 || rep.LastSeq != raw+1 || len(rep.Chains) != 1 || rep.Chains[0].Entries != 5 {
				t.Errorf("%d messages, %d entries, last seq %d (want 5, 5, %d), chains %+v",
					rep.Totals.Messages, rep.Totals.Entries, rep.LastSeq, raw+1, rep.Chains)
			}
		})
	}
}

// TestReadersReadPastForgedHeadersAddingUp: a stray entry on room:blank's
// chain subject whose header forges the server's (another room's subject)
// before a blank line, padded with bare-LF lines so that nats.go's
// headers add up to the bytes sent, was read by direct get on the
// subject it claimed: a gap in room:blank and a room_conflict in
// room:other, where the consumer read the chain whole (found by a
// reviewer). Both reads now give one report. The forgery assumes the
// server's time stamp has 30 characters; each try that misses is one
// more stray message, which both reads must agree on too.
func TestReadersReadPastForgedHeadersAddingUp(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	es, _ := roomtest.Journal(t, "run-blank", "cap-blank", 5)
	if r, err := e.Gate.AppendJournal(ctx, "room:blank", roomtest.Lines(es[:3]), nil); err != nil || r.Stored != 3 {
		t.Fatalf("%+v %v", r, err)
	}
	key := events.ChainKey{RunID: "run-blank", CapsuleID: "cap-blank"}
	subj := room.Subjects{}.Journal("room:blank", key)
	other := room.Subjects{}.Journal("room:other", key)
	nc := e.Connect()
	for try := 0; ; try++ {
		info, err := e.Stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		name, seq := info.Config.Name, info.State.LastSeq+1
		forged := [][2]string{{"Nats-Stream", name}, {"Nats-Subject", other}, {"Nats-Sequence", fmt.Sprint(seq)}, {"Nats-Time-Stamp", "2026-01-01T00:00:00Z"},
			{"Nats-Num-Pending", "0"}, {"Nats-Last-Sequence", fmt.Sprint(seq - 1)}}
		server := [][2]string{{"Nats-Stream", name}, {"Nats-Subject", subj}, {"Nats-Sequence", fmt.Sprint(seq)}, {"Nats-Time-Stamp", strings.Repeat("x", 30)},
			{"Nats-Num-Pending", "1"}, {"Nats-Last-Sequence", fmt.Sprint(seq - 1)}}
		if at := roomtest.PublishRawHeader(t, nc, subj, roomtest.HeaderAddingUp(forged, server), es[3].Canonical()); at != seq {
			t.Fatalf("stored at %d, want %d", at, seq)
		}
		lm, err := jsapi.LeaderGet(ctx, e.Nc, name, 5*time.Second, map[string]uint64{"seq": seq})
		if err != nil {
			t.Fatal(err)
		}
		if len(lm.Time.UTC().Format(time.RFC3339Nano)) == 30 {
			break
		}
		if try == 20 {
			t.Fatal("no time stamp of 30 characters in 20 tries")
		}
	}
	if r, err := e.Gate.AppendJournal(ctx, "room:blank", roomtest.Lines(es[4:]), nil); err != nil || r.Stored != 1 {
		t.Fatalf("after the raw message: %+v %v", r, err)
	}
	auditBothWays(t, e, reader.AuditOptions{Validator: e.V})
}

// TestConsumerAuditPastStoredStatus: an empty message whose stored block
// (bare LFs, which the server does not strip a status line from) reads as
// "409 Consumer Deleted" is taken by nats.go's ordered consumer for the
// server's status: it resets onto the same message again and again, and
// an audit by consumer hung until its deadline (found by a reviewer). A
// consumer that delivers nothing while messages are left is given up on:
// the default read goes on from that message by direct gets, with the
// report a direct read gives; a read by consumer only fails, naming the
// stream seq.
func TestConsumerAuditPastStoredStatus(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	es, _ := roomtest.Journal(t, "run-blank", "cap-blank", 3)
	if r, err := e.Gate.AppendJournal(ctx, "room:blank", roomtest.Lines(es), nil); err != nil || r.Stored != 3 {
		t.Fatalf("%+v %v", r, err)
	}
	key := events.ChainKey{RunID: "run-blank", CapsuleID: "cap-blank"}
	raw := roomtest.PublishRawHeader(t, e.Connect(), room.Subjects{}.Journal("room:blank", key), "NATS/1.0 409 Consumer Deleted\n\n", nil)
	more, _ := roomtest.Journal(t, "run-more", "cap-more", 4)
	if r, err := e.Gate.AppendJournal(ctx, "room:more", roomtest.Lines(more), nil); err != nil || r.Stored != 4 {
		t.Fatalf("%+v %v", r, err)
	}
	direct, err := reader.Audit(ctx, e.Js, reader.AuditOptions{Validator: e.V, Read: reader.ReadDirect})
	if err != nil {
		t.Fatal(err)
	}
	if direct.Totals.Messages != 8 || direct.LastSeq != raw+4 {
		t.Fatalf("direct: %d messages, last seq %d; want 8, %d", direct.Totals.Messages, direct.LastSeq, raw+4)
	}
	auto, err := reader.AuditIdle(ctx, e.Js, reader.AuditOptions{Validator: e.V}, 50*time.Millisecond)
	if err != nil {
		t.Fatalf("auto: %v", err)
	}
	if auto.ReadBy != reader.ReadByDirect || !strings.Contains(auto.ReadWhy, fmt.Sprintf("from stream seq %d: the ordered consumer delivered nothing past stream seq %d", raw, raw-1)) {
		t.Errorf("auto read by %q (%q); want direct, from stream seq %d", auto.ReadBy, auto.ReadWhy, raw)
	}
	if got, want := reportJSON(t, auto), reportJSON(t, direct); got != want {
		t.Errorf("auto's report:\n%s\ndirect's:\n%s", got, want)
	}
	if _, err := reader.AuditIdle(ctx, e.Js, reader.AuditOptions{Validator: e.V, Read: reader.ReadConsumer}, 50*time.Millisecond); err == nil ||
		!strings.Contains(err.Error(), fmt.Sprintf("delivered nothing past stream seq %d", raw-1)) {
		t.Errorf("consumer: %v; want the stall past stream seq %d", err, raw-1)
	}
}

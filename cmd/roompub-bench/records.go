package main

import (
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
)

// records: pre-signed execution records, each stored as the gate stores
// it on a stream with record markers (serve's, docs/design.md, "Record
// markers"): one atomic batch of the record and its markers, the expected
// last subject sequences on each (rawRecordBatch), versus
// client.Client.AppendRecords (what publisher execution does): the gate
// stores each record with its own atomic batch too, one after another,
// checking the next ones meanwhile.
func (b *bench) records() (*result, error) {
	if err := b.startRoompub(); err != nil {
		return nil, err
	}
	n := b.sz.records
	const rawRoom, pubRoom = "room:bench-raw-records", "room:bench-pub-records"
	r := &result{key: "records", name: fmt.Sprintf("records (%d)", n), unit: "records", items: n * b.rounds, floor: 0.7,
		rawHow: "jetstreamext.PublishMsgBatch per record: the record and its markers (key, run, decision, instance), expected last subject sequences, one after another",
		pubHow: fmt.Sprintf("client.Client.AppendRecords, %d records per request (ingest service, gate: schema, signature, trust, room rules; ", room.DefaultRecordsPerRequest) +
			b.storePath() + "), each record its own atomic batch with its markers, one after another"}
	// Each round signs its own records (untimed), tagged by side and
	// round so that no two share an idempotency/key or run/ref.
	sign := func(roomID, tag string) ([]*events.Record, int64, error) {
		b.logf("records: signing %d records", n)
		recs, err := genRecords(b.key, roomID, tag, n)
		var size int64
		for _, rec := range recs {
			size += int64(len(rec.Canonical()))
		}
		return recs, size, err
	}
	var pos uint64            // the next raw record's position on its subject
	var last, decision uint64 // the raw side's last record and decision marker, across rounds
	err := b.inRounds(r, func(round int) (side, error) {
		recs, size, err := sign(rawRoom, fmt.Sprintf("raw-r%d", round))
		if err != nil {
			return side{}, err
		}
		s := side{bytes: size}
		t := startTimer()
		for _, rec := range recs {
			msgs, at := rawRecordBatch(b.rawSubjects, rec, last, decision, pos)
			ack, err := jetstreamext.PublishMsgBatch(b.ctx, b.js, msgs)
			if err != nil {
				return s, fmt.Errorf("raw record %d: %w", s.n, err)
			}
			last = ack.Sequence - uint64(len(msgs)) + 1 // a batch is stored at consecutive sequences
			decision = last + at
			pos++
			s.n++
		}
		t.stop(&s)
		return s, nil
	}, func(round int) (side, error) {
		recs, size, err := sign(pubRoom, fmt.Sprintf("pub-r%d", round))
		if err != nil {
			return side{}, err
		}
		s := side{bytes: size}
		raws := make([][]byte, len(recs))
		for i, rec := range recs {
			raws[i] = rec.Canonical()
		}
		t := startTimer()
		replies, err := b.client.AppendRecords(b.ctx, raws)
		t.stop(&s)
		for _, reply := range replies {
			if reply.Item.Outcome != room.OutcomeStored {
				return s, fmt.Errorf("roompub record %d: %s %s %s", s.n, reply.Item.Outcome, reply.Item.Code, reply.Item.Reason)
			}
			s.n++
		}
		if err != nil {
			return s, fmt.Errorf("roompub record %d: %w", s.n, err)
		}
		return s, nil
	})
	if err != nil {
		return nil, err
	}
	return r, b.countStored(r, []string{rawRoom}, []string{pubRoom})
}

// rawRecordBatch is rec as the gate stores it on a stream with record
// markers, written by hand: the record, expecting last on its room's
// record subject, then its markers naming it by offset: key and run
// expecting none before them, the decision expecting its last marker
// decision (every generated record has the template's decision), the
// instance with the record's position pos, and the room's format marker
// with its first record. at is the decision marker's offset.
func rawRecordBatch(s room.Subjects, rec *events.Record, last, decision, pos uint64) (msgs []*nats.Msg, at uint64) {
	roomID, digest := rec.RoomID(), rec.ContentDigest()
	rm := &nats.Msg{Subject: s.Records(roomID), Data: rec.Canonical(), Header: nats.Header{}}
	rm.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last, 10))
	msgs = []*nats.Msg{rm}
	add := func(k room.MarkerKind, v string, mk room.Marker, expect string) {
		mk.Record, mk.Offset = digest, uint64(len(msgs))
		m := &nats.Msg{Subject: s.Marker(roomID, k, v), Data: mk.Encode(), Header: nats.Header{}}
		if expect != "" {
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, expect)
		}
		msgs = append(msgs, m)
	}
	add(room.MarkKey, rec.IdempotencyKey(), room.Marker{}, "0")
	add(room.MarkRun, rec.RunRef(), room.Marker{}, "0")
	if d := rec.DecisionRef(); d != "" {
		at = uint64(len(msgs))
		add(room.MarkDecision, d, room.Marker{Outcome: rec.Outcome()}, strconv.FormatUint(decision, 10))
	}
	if env, ok := rec.EnvironmentRef(); ok {
		add(room.MarkInstance, env, room.Marker{Position: &pos}, "")
	}
	if last == 0 {
		add(room.MarkFormat, "", room.Marker{}, "0")
	}
	return msgs, at
}

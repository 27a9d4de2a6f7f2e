package main

import (
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
)

// records: pre-signed execution records, one synchronous publish each
// with the headers the gate sets for records (Nats-Msg-Id = the content
// digest, the expected last sequence of the room's record subject) versus
// client.Client.AppendRecords (what publisher execution does): the gate
// stores each record with its own synchronous publish too, one after
// another, checking the next ones meanwhile.
func (b *bench) records() (*result, error) {
	if err := b.startRoompub(); err != nil {
		return nil, err
	}
	n := b.sz.records
	const rawRoom, pubRoom = "room:bench-raw-records", "room:bench-pub-records"
	r := &result{key: "records", name: fmt.Sprintf("records (%d)", n), unit: "records", items: n * b.rounds, floor: 0.6,
		rawHow: "js.PublishMsg per record, Nats-Msg-Id and expected last subject sequence, one after another",
		pubHow: fmt.Sprintf("client.Client.AppendRecords, %d records per request (ingest service, gate: schema, signature, trust, room rules; ", room.DefaultRecordsPerRequest) +
			b.storePath() + "), each record its own synchronous store, one after another"}
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
	subj := b.rawSubjects.Records(rawRoom)
	var last uint64 // the raw side's last record, across rounds
	err := b.inRounds(r, func(round int) (side, error) {
		recs, size, err := sign(rawRoom, fmt.Sprintf("raw-r%d", round))
		if err != nil {
			return side{}, err
		}
		s := side{bytes: size}
		t := startTimer()
		for _, rec := range recs {
			msg := &nats.Msg{Subject: subj, Data: rec.Canonical(), Header: nats.Header{}}
			msg.Header.Set(jetstream.MsgIDHeader, rec.ContentDigest())
			msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last, 10))
			ack, err := b.js.PublishMsg(b.ctx, msg)
			if err != nil {
				return s, fmt.Errorf("raw record %d: %w", s.n, err)
			}
			if ack.Duplicate {
				return s, fmt.Errorf("raw record %d: acknowledged as a duplicate", s.n)
			}
			last = ack.Sequence
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

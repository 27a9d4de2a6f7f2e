package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
)

// records: pre-signed execution records, one synchronous publish each
// with the headers the gate sets for records (Nats-Msg-Id = the content
// digest, the expected last sequence of the room's record subject) versus
// room.Client.AppendRecord, one after another.
func (b *bench) records() (*result, error) {
	if err := b.startRoompub(); err != nil {
		return nil, err
	}
	n := b.sz.records
	const rawRoom, pubRoom = "room:bench-raw-records", "room:bench-pub-records"
	b.logf("records: signing 2 × %d records", n)
	type signed struct {
		recs []*events.Record
		err  error
	}
	ch := make(chan signed, 1)
	go func() {
		recs, err := genRecords(b.key, pubRoom, "pub", n)
		ch <- signed{recs, err}
	}()
	rawRecs, err := genRecords(b.key, rawRoom, "raw", n)
	pub := <-ch
	if err != nil {
		return nil, err
	}
	if pub.err != nil {
		return nil, pub.err
	}
	var rawBytes, pubBytes int64
	for i := range n {
		rawBytes += int64(len(rawRecs[i].Canonical()))
		pubBytes += int64(len(pub.recs[i].Canonical()))
	}
	r := &result{key: "records", name: fmt.Sprintf("records (%d)", n), unit: "records", items: n, floor: 0.6,
		rawHow: "js.PublishMsg per record, Nats-Msg-Id and expected last subject sequence, one after another",
		pubHow: "room.Client.AppendRecord per record (ingest service, gate: schema, signature, trust, room rules), one after another"}

	b.logf("records: raw")
	subj := b.subjects.Records(rawRoom)
	var last uint64
	start := time.Now()
	for _, rec := range rawRecs {
		msg := &nats.Msg{Subject: subj, Data: rec.Canonical(), Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, rec.ContentDigest())
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last, 10))
		ack, err := b.js.PublishMsg(b.ctx, msg)
		if err != nil {
			return nil, fmt.Errorf("raw record %d: %w", r.raw.n, err)
		}
		if ack.Duplicate {
			return nil, fmt.Errorf("raw record %d: acknowledged as a duplicate", r.raw.n)
		}
		last = ack.Sequence
		r.raw.n++
	}
	r.raw.dur, r.raw.bytes = time.Since(start), rawBytes

	b.logf("records: roompub")
	start = time.Now()
	for _, rec := range pub.recs {
		reply, err := b.client.AppendRecord(b.ctx, rec.Canonical())
		if err != nil {
			return nil, fmt.Errorf("roompub record %d: %w", r.pub.n, err)
		}
		if reply.Item.Outcome != room.OutcomeStored {
			return nil, fmt.Errorf("roompub record %d: %s %s %s", r.pub.n, reply.Item.Outcome, reply.Item.Code, reply.Item.Reason)
		}
		r.pub.n++
	}
	r.pub.dur, r.pub.bytes = time.Since(start), pubBytes
	return r, b.countStored(r, rawRoom, pubRoom)
}

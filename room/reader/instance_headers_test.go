package reader_test

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
)

// TestInstanceRecordsTakeOnlyCheckedHeaders: records written around the
// gate one message at a time (no atomic batch), their markers after them,
// are judged as the audit judges them, read through markers one page or
// one marker per request: a record whose key and run markers the server
// stored expecting their subjects empty is kept; one holding a kept
// record's key, whose key marker was checked against another subject
// (Nats-Expected-Last-Subject-Sequence-Subject), is set aside
// idempotency_conflict; one whose markers follow a message of another
// record (its own not next to it) is kept.
func TestInstanceRecordsTakeOnlyCheckedHeaders(t *testing.T) {
	e := roomtest.NewEnvMarked(t, embedded.Options{})
	const lab, inst = "room:lab", "environment:a"
	on := map[string]any{"environment/ref": inst, "evidence": roomtest.EvidenceOn(inst, 1)}
	var raws [][]byte
	for i := range 3 {
		raws = append(raws, roomtest.RecordIn(t, e.Key, lab, "r-"+strconv.Itoa(i), on).Canonical())
	}
	for i, r := range e.Gate.AppendRecords(t.Context(), raws) {
		if r.Item.Outcome != room.OutcomeStored {
			t.Fatalf("record %d: %+v", i, r.Item)
		}
	}
	var s room.Subjects
	pos := uint64(3) // the records on the room's record subject so far
	// publish stores m and returns its stream sequence.
	publish := func(subj string, data []byte, h nats.Header) uint64 {
		t.Helper()
		ack, err := e.Js.PublishMsg(t.Context(), &nats.Msg{Subject: subj, Data: data, Header: h})
		if err != nil {
			t.Fatalf("publish %s: %v", subj, err)
		}
		return ack.Sequence
	}
	expectEmpty := func(other string) nats.Header {
		h := nats.Header{}
		h.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
		if other != "" {
			h.Set(jetstream.ExpectedLastSubjSeqSubjHeader, other)
		}
		return h
	}
	// write stores rec, then, if gap, another record's message, then its
	// key marker (checked against keyOther when set), run marker and
	// instance marker; it returns rec's stream sequence.
	write := func(rec *events.Record, keyOther string, gap bool) uint64 {
		t.Helper()
		seq := publish(s.Records(lab), rec.Canonical(), nil)
		next := uint64(1)
		if gap {
			publish(s.Records(lab), roomtest.RecordIn(t, e.Key, "room:other", "gap-"+strconv.FormatUint(seq, 10), nil).Canonical(), nil)
			next++
		}
		for _, k := range []room.MarkerKind{room.MarkKey, room.MarkRun} {
			other := ""
			if k == room.MarkKey {
				other = keyOther
			}
			publish(s.Marker(lab, k, room.MarkedValue(rec, k)), room.Marker{Record: rec.ContentDigest(), Offset: next}.Encode(), expectEmpty(other))
			next++
		}
		p := pos
		publish(s.Marker(lab, room.MarkInstance, inst), room.Marker{Record: rec.ContentDigest(), Offset: next, Position: &p}.Encode(), nil)
		pos++
		if gap {
			pos++
		}
		return seq
	}
	own := write(roomtest.RecordIn(t, e.Key, lab, "f-own", on), "", false)
	// r-0's key again, another run; its key marker checked on a subject
	// nothing is on.
	dup := write(roomtest.RecordIn(t, e.Key, lab, "r-0", map[string]any{"environment/ref": inst, "evidence": roomtest.EvidenceOn(inst, 2),
		"run/ref": "operator-task-run:f-dup"}), s.Marker(lab, room.MarkKey, "nothing"), false)
	apart := write(roomtest.RecordIn(t, e.Key, lab, "f-apart", on), "", true)

	byAudit := reader.NewEvidenceIndex()
	if _, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, OnEvent: func(ev *reader.Event) {
		if ev.Record != nil {
			byAudit.Add(ev.RoomID, ev.Record, ev.Seq)
		}
	}}); err != nil {
		t.Fatal(err)
	}
	want := byAudit.Instance(inst, "")
	var seqs []uint64
	for _, r := range want {
		seqs = append(seqs, r.StreamSeq)
	}
	if len(want) != 5 || seqs[3] != own || seqs[4] != apart {
		t.Fatalf("the audit files %v, want the gate's 3, %d and %d", seqs, own, apart)
	}
	exp, _ := json.Marshal(want)
	for _, page := range []int{0, 1} {
		o := reader.WithMarkerPage(reader.InstanceOptions{Instance: inst, Validator: e.V}, page)
		rep, err := reader.InstanceRecords(t.Context(), e.Nc, o)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := json.Marshal(rep.Records)
		if string(got) != string(exp) {
			t.Errorf("page %d: markers found\n%s\nthe audit files\n%s", page, got, exp)
		}
		if len(rep.SetAside) != 1 || rep.SetAside[0].Seq != dup || rep.SetAside[0].Code != events.IdempotencyConflict {
			t.Errorf("page %d: set aside %+v, want the record at %d, idempotency_conflict", page, rep.SetAside, dup)
		}
	}
}

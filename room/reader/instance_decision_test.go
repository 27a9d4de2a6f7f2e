package reader_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
)

// The room, instance and decision of the decision tests.
const (
	roomID   = "room:decided"
	inst     = "environment:a"
	dig      = "sha256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	decision = "corpus-experiment-chair-decision:" + dig
)

// decidedRoom returns a marked embedded store, a gate attesting to it,
// and a maker of records of roomID and decision, observed on env, with
// more fields set.
func decidedRoom(t *testing.T) (*roomtest.Env, *ingest.Gate, func(name, env string, more map[string]any) *events.Record) {
	e := roomtest.NewEnvMarked(t, embedded.Options{})
	g := roomtest.AttestingGate(e, e.Connect(), roomtest.NewPublisherKey(t), nil, ingest.GateOptions{})
	return e, g, func(name, env string, more map[string]any) *events.Record {
		m := map[string]any{"environment/ref": env, "evidence": roomtest.EvidenceOn(env, 1), "decision/ref": decision, "decision/digest": dig}
		for k, v := range more {
			m[k] = v
		}
		return roomtest.RecordIn(t, e.Key, roomID, name, m)
	}
}

// TestInstanceRecordsReadADecisionOnce: the records of one decision are
// judged on its markers read once per InstanceRecords call, not once per
// record (n²/2 reads and signature checks for n records), with the same
// verdicts: ten records of one decision and a last one whose outcome is
// unknown, stored by the gate, are the instance's records; a record of
// that decision written after it around the gate, with forged markers, is
// set aside unknown_not_consent; each of the decision's twelve markers has
// its record read and judged exactly once.
func TestInstanceRecordsReadADecisionOnce(t *testing.T) {
	e, g, recOn := decidedRoom(t)
	rec := func(name string, more map[string]any) *events.Record { return recOn(name, inst, more) }
	var raws [][]byte
	for i := range 10 {
		raws = append(raws, rec("d-"+strconv.Itoa(i), nil).Canonical())
	}
	raws = append(raws, rec("d-unknown", map[string]any{"outcome": "unknown"}).Canonical())
	for i, r := range g.AppendRecords(t.Context(), raws) {
		if r.Item.Outcome != room.OutcomeStored {
			t.Fatalf("record %d: %+v", i, r.Item)
		}
	}
	// Around the gate: one more execution of the closed decision, with
	// its decision marker at +1 and its instance marker at +2.
	after := rec("d-after", nil)
	var s room.Subjects
	seq := roomtest.PublishRaw(t, e.Js, s.Records(roomID), after.Canonical())
	if at := roomtest.PublishRaw(t, e.Js, s.Marker(roomID, room.MarkDecision, decision), room.Marker{Record: after.ContentDigest(), Offset: 1}.Encode()); at != seq+1 {
		t.Fatalf("decision marker at %d", at)
	}
	pos := uint64(0)
	if at := roomtest.PublishRaw(t, e.Js, s.Marker(roomID, room.MarkInstance, inst), room.Marker{Record: after.ContentDigest(), Offset: 2, Position: &pos}.Encode()); at != seq+2 {
		t.Fatalf("instance marker at %d", at)
	}

	var judged atomic.Int64
	o := reader.WithGenuineCounter(reader.InstanceOptions{Room: roomID, Instance: inst, Validator: e.V}, &judged)
	rep, err := reader.InstanceRecords(t.Context(), e.Nc, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Records) != 11 {
		t.Fatalf("%d records, want the 11 the gate stored", len(rep.Records))
	}
	for i, r := range rep.Records {
		if i > 0 && r.StreamSeq <= rep.Records[i-1].StreamSeq {
			t.Fatalf("records out of stream order: %d after %d", r.StreamSeq, rep.Records[i-1].StreamSeq)
		}
	}
	if len(rep.SetAside) != 1 || rep.SetAside[0].Seq != seq || rep.SetAside[0].Code != events.UnknownNotConsent {
		t.Fatalf("set aside %+v, want the record at %d, unknown_not_consent", rep.SetAside, seq)
	}
	if n := judged.Load(); n != 12 {
		t.Fatalf("%d markers' records judged, want 12: each of the decision's markers once", n)
	}
}

// TestInstanceRecordsReadADecisionOn: a decision's markers, read once for
// a record of one page of instance markers, are read on for a record of a
// later page stored after that read. Records r0, r1 and r4 of one decision
// are stored by the gate (r1 and r4 on the instance, so judging r1 reads
// the decision's markers); once they are read, and before the second page
// is listed, the gate stores r2 with an unknown outcome and r3 of the
// instance is written around the gate. r3 is set aside
// unknown_not_consent: the markers read for r1 end at r4, before r2.
func TestInstanceRecordsReadADecisionOn(t *testing.T) {
	e, g, rec := decidedRoom(t)
	store := func(r *events.Record) {
		t.Helper()
		if res := g.AppendRecord(t.Context(), r.Canonical()); res.Item.Outcome != room.OutcomeStored {
			t.Fatalf("%s: %+v", r.RunRef(), res.Item)
		}
	}
	store(rec("r0", "environment:b", nil))
	r1, r4 := rec("r1", inst, nil), rec("r4", inst, nil)
	store(r1)
	store(r4)

	var judged atomic.Int64
	var r3seq uint64
	o := reader.WithGenuineCounter(reader.InstanceOptions{Room: roomID, Instance: inst, Validator: e.V}, &judged)
	o = reader.WithMarkerPage(o, 1)
	o = reader.WithBeforeList(o, func(page int) {
		if page != 1 {
			return
		}
		for judged.Load() < 3 { // r0's, r1's and r4's markers: r1's decision read
			time.Sleep(time.Millisecond)
		}
		store(rec("r2", "environment:b", map[string]any{"outcome": "unknown"}))
		r3 := rec("r3", inst, nil)
		var s room.Subjects
		r3seq = roomtest.PublishRaw(t, e.Js, s.Records(roomID), r3.Canonical())
		roomtest.PublishRaw(t, e.Js, s.Marker(roomID, room.MarkDecision, decision), room.Marker{Record: r3.ContentDigest(), Offset: 1}.Encode())
		pos := uint64(4)
		roomtest.PublishRaw(t, e.Js, s.Marker(roomID, room.MarkInstance, inst), room.Marker{Record: r3.ContentDigest(), Offset: 2, Position: &pos}.Encode())
	})
	rep, err := reader.InstanceRecords(t.Context(), e.Nc, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Records) != 2 || rep.Records[0].Digest != r1.ContentDigest() || rep.Records[1].Digest != r4.ContentDigest() {
		t.Fatalf("records %+v, want r1 and r4", rep.Records)
	}
	if len(rep.SetAside) != 1 || rep.SetAside[0].Seq != r3seq || rep.SetAside[0].Code != events.UnknownNotConsent {
		t.Fatalf("set aside %+v, want r3 at %d, unknown_not_consent", rep.SetAside, r3seq)
	}
}

// TestInstanceRecordsDecisionClosedOnlyByItsKeysRecord: a record the gate
// refused (its key held by r1), with an unknown outcome, written around
// the gate with its key, run and decision markers at their offsets, does
// not close the decision: the gate stores r2 after it and the audit
// admits r2, since the key's first genuine marker names r1. Evidence
// took the copy's decision marker for genuine and set r2 aside
// unknown_not_consent; it now judges the marker as the gate does.
func TestInstanceRecordsDecisionClosedOnlyByItsKeysRecord(t *testing.T) {
	e, g, rec := decidedRoom(t)
	store := func(r *events.Record) {
		t.Helper()
		if res := g.AppendRecord(t.Context(), r.Canonical()); res.Item.Outcome != room.OutcomeStored {
			t.Fatalf("%s: %+v", r.RunRef(), res.Item)
		}
	}
	r1 := rec("r1", inst, nil)
	store(r1)
	copied := rec("r1", inst, map[string]any{"outcome": "unknown", "recorded-at": "2026-09-25T12:58:00Z"})
	if res := g.AppendRecord(t.Context(), copied.Canonical()); res.Item.Code != events.IdempotencyConflict {
		t.Fatalf("the copy: %+v, want idempotency_conflict", res.Item)
	}
	var s room.Subjects
	at := roomtest.PublishRaw(t, e.Js, s.Records(roomID), copied.Canonical())
	for i, k := range []room.MarkerKind{room.MarkKey, room.MarkRun, room.MarkDecision} {
		mk := room.Marker{Record: copied.ContentDigest(), Offset: uint64(i + 1)}
		if k == room.MarkDecision {
			mk.Outcome = "unknown"
		}
		roomtest.PublishRaw(t, e.Js, s.Marker(roomID, k, room.MarkedValue(copied, k)), mk.Encode())
	}
	r2 := rec("r2", inst, nil)
	store(r2)

	var audited []string
	if _, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, OnEvent: func(ev *reader.Event) {
		if ev.Record != nil {
			audited = append(audited, ev.Record.RunRef())
		}
	}}); err != nil {
		t.Fatal(err)
	}
	rep, err := reader.InstanceRecords(t.Context(), e.Nc, reader.InstanceOptions{Room: roomID, Instance: inst, Validator: e.V})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rep.Records {
		got = append(got, r.RunRef)
	}
	if len(audited) != 2 || audited[0] != r1.RunRef() || audited[1] != r2.RunRef() {
		t.Fatalf("the audit admitted %v, want r1 and r2", audited)
	}
	if len(got) != 2 || got[0] != r1.RunRef() || got[1] != r2.RunRef() || len(rep.SetAside) != 0 {
		t.Errorf("evidence %v, set aside %+v; want r1 and r2, none (the audit admitted %v; the copy at stream seq %d)", got, rep.SetAside, audited, at)
	}
}

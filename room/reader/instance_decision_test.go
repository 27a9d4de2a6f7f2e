package reader_test

import (
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
)

// TestInstanceRecordsReadADecisionOnce: the records of one decision are
// judged on its markers read once per InstanceRecords call, not once per
// record (n²/2 reads and signature checks for n records), with the same
// verdicts: ten records of one decision and a last one whose outcome is
// unknown, stored by the gate, are the instance's records; a record of
// that decision written after it around the gate, with forged markers, is
// set aside unknown_not_consent; each of the decision's twelve markers has
// its record read and judged exactly once.
func TestInstanceRecordsReadADecisionOnce(t *testing.T) {
	e := roomtest.NewEnvMarked(t, embedded.Options{})
	g := roomtest.AttestingGate(e, e.Connect(), roomtest.NewPublisherKey(t), nil, ingest.GateOptions{})
	const roomID, inst = "room:decided", "environment:a"
	const dig = "sha256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	const decision = "corpus-experiment-chair-decision:" + dig
	rec := func(name string, more map[string]any) *events.Record {
		m := map[string]any{"environment/ref": inst, "evidence": roomtest.EvidenceOn(inst, 1), "decision/ref": decision, "decision/digest": dig}
		for k, v := range more {
			m[k] = v
		}
		return roomtest.RecordIn(t, e.Key, roomID, name, m)
	}
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

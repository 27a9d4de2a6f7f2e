package reader_test

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
)

// TestInstanceRecordsMatchTheAudit: on a stream with record markers, the
// records InstanceRecords finds through one instance's markers are the
// ones the evidence index of a whole audit files under it, in every room
// and in one, attested or not; the records of the other instance, the
// refused ones and a record written around the gate with forged markers
// (its key already held) are not among them, and that record is set aside
// idempotency_conflict. A room whose records have no markers is listed as
// unmarked, and InstanceEvidence reads it whole: the same records again.
func TestInstanceRecordsMatchTheAudit(t *testing.T) {
	e := roomtest.NewEnvMarked(t, embedded.Options{})
	pub := roomtest.NewPublisherKey(t)
	g := roomtest.AttestingGate(e, e.Connect(), pub, nil, ingest.GateOptions{})
	const lab, lab2, old = "room:lab", "room:lab-2", "room:old"
	const instA, instB = "environment:a", "environment:b"
	on := func(inst string, n int) map[string]any {
		return map[string]any{"environment/ref": inst, "evidence": roomtest.EvidenceOn(inst, n)}
	}
	// The old room's record goes straight into the stream, as a build
	// before markers stored it: its room has no format marker.
	oldRec := roomtest.RecordIn(t, e.Key, old, "a-old", on(instA, 1))
	roomtest.PublishRaw(t, e.Js, "rooms.old.exec", oldRec.Canonical())
	var raws [][]byte
	for i := range 30 {
		inst, roomID := instA, lab
		if i%3 == 0 {
			inst = instB
		}
		if i%5 == 0 {
			roomID = lab2
		}
		raws = append(raws, roomtest.RecordIn(t, e.Key, roomID, "r-"+strconv.Itoa(i), on(inst, 1+i%3)).Canonical())
	}
	// Refused: the key of r-1 again, another record.
	raws = append(raws, roomtest.RecordIn(t, e.Key, lab, "r-1", map[string]any{"environment/ref": instA, "evidence": roomtest.EvidenceOn(instA, 2), "recorded-at": "2026-09-25T12:59:00Z"}).Canonical())
	stored := 0
	for _, r := range g.AppendRecords(t.Context(), raws) {
		if r.Item.Outcome == room.OutcomeStored {
			stored++
		}
	}
	if stored != 30 {
		t.Fatalf("%d of 31 stored, want 30", stored)
	}
	// Around the gate: a record holding r-2's key, in a batch with its own
	// (forged) markers, as a writer with the stream's rights could.
	forged := roomtest.RecordIn(t, e.Key, lab, "r-2", map[string]any{"environment/ref": instA, "evidence": roomtest.EvidenceOn(instA, 1), "recorded-at": "2026-09-25T12:58:00Z"})
	seq := roomtest.PublishRaw(t, e.Js, "rooms.lab.exec", forged.Canonical())
	// Its markers follow it at once (nothing else appends here): key at
	// +1, instance at +2, both naming it.
	var s room.Subjects
	pos := uint64(0)
	if at := roomtest.PublishRaw(t, e.Js, s.Marker(lab, room.MarkKey, forged.IdempotencyKey()), room.Marker{Record: forged.ContentDigest(), Offset: 1}.Encode()); at != seq+1 {
		t.Fatalf("key marker at %d", at)
	}
	if at := roomtest.PublishRaw(t, e.Js, s.Marker(lab, room.MarkInstance, instA), room.Marker{Record: forged.ContentDigest(), Offset: 2, Position: &pos}.Encode()); at != seq+2 {
		t.Fatalf("instance marker at %d", at)
	}

	trust := roomtest.Trusting(t, pub)
	for _, tc := range []struct {
		name   string
		roomID string
		inst   string
	}{{"a everywhere", "", instA}, {"b everywhere", "", instB}, {"a in lab-2", lab2, instA}} {
		byAudit := reader.NewEvidenceIndex()
		var rooms []string
		if tc.roomID != "" {
			rooms = []string{tc.roomID}
		}
		if _, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, Rooms: rooms, OnEvent: func(ev *reader.Event) {
			if ev.Record != nil {
				byAudit.Add(ev.RoomID, ev.Record, ev.Seq)
			}
		}}); err != nil {
			t.Fatal(err)
		}
		var want []reader.VerifiedRecord
		for _, r := range byAudit.Instance(tc.inst, tc.roomID) {
			if r.RoomID != old {
				want = append(want, r)
			}
		}
		// No keys, nil or empty (the subscriber's flag unset), checks no
		// attestation, as the audit does.
		noKeys, err := checkpoint.NewTrust()
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range []*checkpoint.Trust{nil, noKeys, trust} {
			o := reader.InstanceOptions{Room: tc.roomID, Instance: tc.inst, Validator: e.V, Trust: tr}
			rep, err := reader.InstanceRecords(t.Context(), e.Nc, o)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(rep.Records)
			exp, _ := json.Marshal(want)
			if string(got) != string(exp) || len(want) == 0 {
				t.Fatalf("%s (%d trusted keys): markers found\n%s\nthe audit files\n%s", tc.name, tr.Len(), got, exp)
			}
			wantUnmarked := tc.roomID == ""
			if (len(rep.Unmarked) == 1 && rep.Unmarked[0] == old) != wantUnmarked {
				t.Fatalf("%s: unmarked rooms %v", tc.name, rep.Unmarked)
			}
			if tc.inst == instA && tc.roomID == "" {
				if len(rep.SetAside) != 1 || rep.SetAside[0].Seq != seq || rep.SetAside[0].Code != "idempotency_conflict" {
					t.Fatalf("set aside %+v, want the forged record at %d, idempotency_conflict", rep.SetAside, seq)
				}
			}
		}
		// InstanceEvidence: the marked rooms by markers, the old one whole.
		place, err := reader.OpenLayout(t.Context(), e.Js, room.Layout{})
		if err != nil {
			t.Fatal(err)
		}
		ev, err := reader.InstanceEvidence(t.Context(), e.Nc, e.Js, reader.EvidenceOptions{Instance: tc.inst, Room: tc.roomID, Audit: reader.AuditOptions{Validator: e.V}}, place)
		if err != nil {
			t.Fatal(err)
		}
		all := byAudit.Instance(tc.inst, tc.roomID)
		if len(ev.Records) != len(all) || ev.Marked != 1 {
			t.Fatalf("%s: InstanceEvidence found %d records (%d partitions by markers), the audit %d", tc.name, len(ev.Records), ev.Marked, len(all))
		}
		// The marked rooms' records and the old room's, in stream order.
		for i := 1; i < len(ev.Records); i++ {
			if ev.Records[i].StreamSeq <= ev.Records[i-1].StreamSeq {
				t.Fatalf("%s: record at %d after %d", tc.name, ev.Records[i].StreamSeq, ev.Records[i-1].StreamSeq)
			}
		}
		if tc.inst == instA && tc.roomID == "" && (ev.SetAside != 1 || len(ev.ByCode) != 1 || ev.ByCode["idempotency_conflict"] != 1) {
			t.Fatalf("%s: %d set aside, by code %v; want the forged record, idempotency_conflict", tc.name, ev.SetAside, ev.ByCode)
		}
	}
}

// TestInstanceForgedPositionMarker: an instance marker written around the
// gate that names a genuine record at another position fails its
// attestation check, but the gate's own marker verified the record: it is
// served once and not also set aside (it was both, and evidence counted a
// checkpoint_mismatch for a record it printed).
func TestInstanceForgedPositionMarker(t *testing.T) {
	e := roomtest.NewEnvMarked(t, embedded.Options{})
	pub := roomtest.NewPublisherKey(t)
	g := roomtest.AttestingGate(e, e.Connect(), pub, nil, ingest.GateOptions{})
	a := e.Sign(roomtest.ReferenceRecord(t, "verified.json"), map[string]any{"room/id": "room:p"})
	r := g.AppendRecord(t.Context(), a.Canonical())
	if r.Item.Outcome != room.OutcomeStored {
		t.Fatalf("%+v", r.Item)
	}
	env, _ := a.EnvironmentRef()
	var s room.Subjects
	pos, next := uint64(9), e.State().LastSeq+1
	roomtest.PublishRaw(t, e.Js, s.Marker("room:p", room.MarkInstance, env),
		room.Marker{Record: a.ContentDigest(), Offset: next - r.Item.StreamSeq, Position: &pos}.Encode())
	rep, err := reader.InstanceRecords(t.Context(), e.Nc, reader.InstanceOptions{Room: "room:p", Instance: env, Validator: e.V, Trust: roomtest.Trusting(t, pub)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Records) != 1 || rep.Records[0].StreamSeq != r.Item.StreamSeq || len(rep.SetAside) != 0 {
		t.Fatalf("records %+v, set aside %+v: want the record at stream seq %d alone", rep.Records, rep.SetAside, r.Item.StreamSeq)
	}
}

// TestInstanceForgedFormatMarker: a room whose records were stored before
// markers keeps being read whole by evidence when a message written
// around the gate lands on its format subject (junk, or a marker naming
// another record): its record of the instance is still found. Without the
// check it was read through instance markers it does not have, and its
// records vanished from evidence (exit 0, nothing set aside).
func TestInstanceForgedFormatMarker(t *testing.T) {
	e := roomtest.NewEnvMarked(t, embedded.Options{})
	const old, instA = "room:old", "environment:a"
	rec := roomtest.RecordIn(t, e.Key, old, "a-old", map[string]any{"environment/ref": instA, "evidence": roomtest.EvidenceOn(instA, 1)})
	seq := roomtest.PublishRaw(t, e.Js, "rooms.old.exec", rec.Canonical())
	for range room.MaxBatchMarkers { // the first record's neighbours, long taken
		roomtest.PublishRaw(t, e.Js, "rooms.other.filler", []byte("x"))
	}
	rec2 := roomtest.RecordIn(t, e.Key, old, "a-old-2", map[string]any{"environment/ref": instA, "evidence": roomtest.EvidenceOn(instA, 1)})
	roomtest.PublishRaw(t, e.Js, "rooms.old.exec", rec2.Canonical())
	count := func() int {
		t.Helper()
		place, err := reader.OpenLayout(t.Context(), e.Js, room.Layout{})
		if err != nil {
			t.Fatal(err)
		}
		ev, err := reader.InstanceEvidence(t.Context(), e.Nc, e.Js, reader.EvidenceOptions{Instance: instA, Audit: reader.AuditOptions{Validator: e.V}}, place)
		if err != nil {
			t.Fatal(err)
		}
		return len(ev.Records)
	}
	if n := count(); n != 2 {
		t.Fatalf("before: %d records, want 2", n)
	}
	var s room.Subjects
	fsubj := s.Marker(old, room.MarkFormat, "")
	roomtest.PublishRaw(t, e.Js, fsubj, []byte("x"))
	next := e.State().LastSeq + 1
	roomtest.PublishRaw(t, e.Js, fsubj, room.Marker{Record: rec2.ContentDigest(), Offset: next - seq - 1}.Encode()) // names the second record
	// Naming the first record, by its digest and offset, after its batch.
	next = e.State().LastSeq + 1
	roomtest.PublishRaw(t, e.Js, fsubj, room.Marker{Record: rec.ContentDigest(), Offset: next - seq}.Encode())
	if n := count(); n != 2 {
		t.Fatalf("after messages written around the gate on the format subject: evidence finds %d records of %s, want 2", n, instA)
	}
}

// TestInstanceRefusedRecordOfAnother: a marker written on instance A's
// subject that names a refused record of instance B (an untrusted host)
// sets nothing aside as A's: it was counted among A's set-aside records,
// nothing of B's may be filed under A. The same marker on B's subject,
// naming that record by its digest, sets it aside there.
func TestInstanceRefusedRecordOfAnother(t *testing.T) {
	e := roomtest.NewEnvMarked(t, embedded.Options{})
	const lab, instA, instB = "room:lab", "environment:a", "environment:b"
	other := roomtest.NewHostKey(t) // not trusted by e.V
	recB := roomtest.RecordIn(t, other, lab, "b-1", map[string]any{"environment/ref": instB, "evidence": roomtest.EvidenceOn(instB, 1)})
	seq := roomtest.PublishRaw(t, e.Js, "rooms.lab.exec", recB.Canonical())
	var s room.Subjects
	pos := uint64(0)
	for _, inst := range []string{instA, instB} {
		roomtest.PublishRaw(t, e.Js, s.Marker(lab, room.MarkInstance, inst), room.Marker{Record: recB.ContentDigest(), Offset: e.State().LastSeq + 1 - seq, Position: &pos}.Encode())
	}
	for _, c := range []struct {
		inst  string
		aside int
	}{{instA, 0}, {instB, 1}} {
		rep, err := reader.InstanceRecords(t.Context(), e.Nc, reader.InstanceOptions{Instance: c.inst, Validator: e.V})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Records) != 0 || len(rep.SetAside) != c.aside || (c.aside == 1 && rep.SetAside[0].Seq != seq) {
			t.Errorf("instance %s: records %d, set aside %+v; want none served and %d set aside (the record at %d is %s's)", c.inst, len(rep.Records), rep.SetAside, c.aside, seq, instB)
		}
	}
}

// TestInstanceEvidenceUnplacedRoom: on a deployment of two partitions, a
// room written before placements were recorded (placed nowhere, on the
// first partition) is found by evidence of that room, as audit finds it.
// It was looked for on a partition of no stream ("stream : ...").
func TestInstanceEvidenceUnplacedRoom(t *testing.T) {
	e := roomtest.NewEnvMarked(t, embedded.Options{})
	const old, instA = "room:old", "environment:a"
	rec := roomtest.RecordIn(t, e.Key, old, "a-old", map[string]any{"environment/ref": instA, "evidence": roomtest.EvidenceOn(instA, 1)})
	seq := roomtest.PublishRaw(t, e.Js, "rooms.old.exec", rec.Canonical())
	l := room.Layout{Partitions: 2}
	if _, err := room.OpenPlacement(t.Context(), e.Js, l, 1, true); err != nil {
		t.Fatal(err)
	}
	q := l.Partition(1)
	if _, err := e.Js.CreateStream(t.Context(), room.StreamConfig(q.Stream, q.Subjects, 1)); err != nil {
		t.Fatal(err)
	}
	place, err := reader.OpenLayout(t.Context(), e.Js, room.Layout{})
	if err != nil || len(place.Partitions()) != 2 {
		t.Fatalf("layout: %v", err)
	}
	ev, err := reader.InstanceEvidence(t.Context(), e.Nc, e.Js, reader.EvidenceOptions{Instance: instA, Room: old, Audit: reader.AuditOptions{Validator: e.V}}, place)
	if err != nil {
		t.Fatal(err)
	}
	if len(ev.Records) != 1 || ev.Records[0].StreamSeq != seq || ev.EmptyOn != "" {
		t.Fatalf("records %+v, empty on %q: want the record at stream seq %d", ev.Records, ev.EmptyOn, seq)
	}
}

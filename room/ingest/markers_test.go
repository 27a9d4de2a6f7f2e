package ingest_test

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// markersOf returns the record markers stored on e's stream, by subject.
func markersOf(t *testing.T, e *roomtest.Env) map[string]room.Marker {
	t.Helper()
	out := map[string]room.Marker{}
	for _, m := range e.Stored() {
		p, err := (room.Subjects{}).Parse(m.Subject)
		if err != nil || p.Kind != room.KindMarker {
			continue
		}
		mk, err := room.ParseMarker(m.Data)
		if err != nil {
			t.Fatalf("marker %s: %v", m.Subject, err)
		}
		out[m.Subject] = mk
	}
	return out
}

// TestMarkedRecord: on a stream with record markers, a record is stored
// with its key, run, decision, instance and (first of its room) format
// markers in one batch after it, each naming it by digest and offset; the
// record carries no Nats-Msg-Id. Sent again it is a duplicate of its
// stream seq; another record with its key and run is refused for both;
// after an unknown outcome the decision takes nothing more.
func TestMarkedRecord(t *testing.T) {
	e := roomtest.NewEnvMarked(t, embedded.Options{})
	base := roomtest.ReferenceRecord(t, "verified.json")
	a := e.Sign(base, map[string]any{"room/id": "room:m"})
	checkRecordStored(t, e.ShipRecord(a.Canonical()), a, room.OutcomeStored, 1)
	msgs := e.Stored()
	if len(msgs) != 6 || msgs[0].Header.Get("Nats-Msg-Id") != "" || !bytes.Equal(msgs[0].Data, a.Canonical()) {
		t.Fatalf("stream: %d messages, first %s %q", len(msgs), msgs[0].Subject, msgs[0].Header)
	}
	var s room.Subjects
	env, _ := a.EnvironmentRef()
	want := []struct {
		subj    string
		outcome string
	}{
		{s.Marker("room:m", room.MarkKey, a.IdempotencyKey()), ""},
		{s.Marker("room:m", room.MarkRun, a.RunRef()), ""},
		{s.Marker("room:m", room.MarkDecision, a.DecisionRef()), "verified"},
		{s.Marker("room:m", room.MarkInstance, env), ""},
		{s.Marker("room:m", room.MarkFormat, ""), ""},
	}
	for i, w := range want {
		m := msgs[i+1]
		mk, err := room.ParseMarker(m.Data)
		if m.Subject != w.subj || err != nil || mk.Record != a.ContentDigest() || mk.RecordSeq(m.Sequence) != 1 || mk.Outcome != w.outcome {
			t.Fatalf("message %d: %s %s (%v), want %s naming stream seq 1", i+2, m.Subject, m.Data, err, w.subj)
		}
	}
	checkRecordStored(t, e.ShipRecord(a.Canonical()), a, room.OutcomeDuplicate, 1)
	// Another gate, which has read nothing of the room, says the same.
	g := e.NewGate(e.Connect())
	checkRecordStored(t, g.AppendRecord(t.Context(), a.Canonical()), a, room.OutcomeDuplicate, 1)
	b := e.Sign(base, map[string]any{"room/id": "room:m", "recorded-at": "2026-09-25T12:16:00Z"})
	r := g.AppendRecord(t.Context(), b.Canonical())
	checkRefused(t, r, events.IdempotencyConflict, events.RunConflict)
	if p := r.Item.Problems[0]; p.Expected != a.ContentDigest() || p.Reason != "idempotency/key already names another record in this room (stream seq 1)" {
		t.Fatalf("problem %+v", p)
	}
	u := e.Sign(base, map[string]any{"room/id": "room:m", "idempotency/key": "key-u", "run/ref": "operator-task-run:u", "outcome": "unknown"})
	checkRecordStored(t, e.ShipRecord(u.Canonical()), u, room.OutcomeStored, 7)
	// The gate that stored u knows the decision is closed; the other
	// learns it from the server.
	for _, gate := range []func([]byte) room.RecordReply{e.ShipRecord, func(b []byte) room.RecordReply { return g.AppendRecord(t.Context(), b) }} {
		v := e.Sign(base, map[string]any{"room/id": "room:m", "idempotency/key": "key-v", "run/ref": "operator-task-run:v"})
		checkRefused(t, gate(v.Canonical()), events.UnknownNotConsent)
	}
	if n := len(e.StoredUnmarked()); n != 2 {
		t.Fatalf("%d records stored, want 2", n)
	}
	if g.RecordsRead() != 0 || e.Gate.RecordsRead() != 0 {
		t.Fatalf("gates read %d and %d records: a marked room is decided on its markers", g.RecordsRead(), e.Gate.RecordsRead())
	}
}

// TestMarkedRestartReadsNoRecords: a gate that starts on a room of many
// records decides its next record on the markers and the room's count,
// reading none of them, and attests it at its place on the subject.
func TestMarkedRestartReadsNoRecords(t *testing.T) {
	e := roomtest.NewEnvMarked(t, embedded.Options{})
	base := roomtest.ReferenceRecord(t, "verified.json")
	const n = 200
	raws := make([][]byte, n)
	for i := range raws {
		raws[i] = e.Sign(base, map[string]any{"room/id": "room:big", "idempotency/key": "key-" + strconv.Itoa(i), "run/ref": "operator-task-run:" + strconv.Itoa(i)}).Canonical()
	}
	for i, r := range e.Gate.AppendRecords(t.Context(), raws) {
		if r.Item.Outcome != room.OutcomeStored {
			t.Fatalf("record %d: %+v", i, r.Item)
		}
	}
	pub := roomtest.NewPublisherKey(t)
	g := roomtest.AttestingGate(e, e.Connect(), pub, nil, ingest.GateOptions{})
	last := e.Sign(base, map[string]any{"room/id": "room:big", "idempotency/key": "key-last", "run/ref": "operator-task-run:last"})
	r := g.AppendRecord(t.Context(), last.Canonical())
	if r.Item.Outcome != room.OutcomeStored {
		t.Fatalf("%+v", r.Item)
	}
	dup := g.AppendRecord(t.Context(), raws[17])
	if dup.Item.Outcome != room.OutcomeDuplicate {
		t.Fatalf("record 17 again: %+v", dup.Item)
	}
	if got := g.RecordsRead(); got != 0 {
		t.Fatalf("the restarted gate read %d records", got)
	}
	msgs := e.OnSubject("rooms.big.exec")
	if len(msgs) != n+1 || msgs[n].Sequence != r.Item.StreamSeq || msgs[17].Sequence != dup.Item.StreamSeq {
		t.Fatalf("%d records; last at %d (reply %d); record 17 at %d (reply %d)", len(msgs), msgs[len(msgs)-1].Sequence, r.Item.StreamSeq, msgs[17].Sequence, dup.Item.StreamSeq)
	}
	trust := roomtest.Trusting(t, pub)
	m := msgs[n]
	if _, err := trust.VerifyAttestation(m.Header.Get(checkpoint.AttestationHeader), "room:big", m.Subject, checkpoint.RecordPosition(n), checkpoint.ContentHash(m.Data)); err != nil {
		t.Fatalf("the attestation does not hold at the record's place on the subject (%d): %v", n, err)
	}
}

// TestMarkedForgedMarker: a marker written around the gate (it names no
// record that holds the key) blocks nothing: the gate appends after it,
// and the record's own marker then holds the key.
func TestMarkedForgedMarker(t *testing.T) {
	e := roomtest.NewEnvMarked(t, embedded.Options{})
	base := roomtest.ReferenceRecord(t, "verified.json")
	other := e.Sign(base, map[string]any{"room/id": "room:f", "idempotency/key": "key-o", "run/ref": "operator-task-run:o"})
	checkRecordStored(t, e.ShipRecord(other.Canonical()), other, room.OutcomeStored, 1)
	a := e.Sign(base, map[string]any{"room/id": "room:f"})
	var s room.Subjects
	forged := room.Marker{Record: other.ContentDigest(), Offset: 1}
	for _, subj := range []string{s.Marker("room:f", room.MarkKey, a.IdempotencyKey()), s.Marker("room:f", room.MarkRun, a.RunRef())} {
		if _, err := e.Js.Publish(t.Context(), subj, forged.Encode()); err != nil {
			t.Fatal(err)
		}
	}
	g := e.NewGate(e.Connect())
	r := g.AppendRecord(t.Context(), a.Canonical())
	if r.Item.Outcome != room.OutcomeStored {
		t.Fatalf("after forged markers: %+v", r.Item)
	}
	checkRecordStored(t, e.ShipRecord(a.Canonical()), a, room.OutcomeDuplicate, r.Item.StreamSeq)
	b := e.Sign(base, map[string]any{"room/id": "room:f", "recorded-at": "2026-09-25T12:16:00Z"})
	checkRefused(t, e.ShipRecord(b.Canonical()), events.IdempotencyConflict, events.RunConflict)
}

// TestMarkedStreamOldRoom: a room whose records were stored without
// markers (by a build before them) keeps the index: the gate reads its
// records and writes no markers there, and its rules hold.
func TestMarkedStreamOldRoom(t *testing.T) {
	e := roomtest.NewEnvMarked(t, embedded.Options{})
	base := roomtest.ReferenceRecord(t, "verified.json")
	a := e.Sign(base, map[string]any{"room/id": "room:old"})
	if _, err := e.Js.Publish(t.Context(), "rooms.old.exec", a.Canonical()); err != nil {
		t.Fatal(err)
	}
	g := e.NewGate(e.Connect())
	checkRecordStored(t, g.AppendRecord(t.Context(), a.Canonical()), a, room.OutcomeDuplicate, 1)
	b := e.Sign(base, map[string]any{"room/id": "room:old", "idempotency/key": "key-b", "run/ref": "operator-task-run:b"})
	checkRecordStored(t, g.AppendRecord(t.Context(), b.Canonical()), b, room.OutcomeStored, 2)
	c := e.Sign(base, map[string]any{"room/id": "room:old", "recorded-at": "2026-09-25T12:16:00Z"})
	checkRefused(t, g.AppendRecord(t.Context(), c.Canonical()), events.IdempotencyConflict, events.RunConflict)
	if n := len(markersOf(t, e)); n != 0 || g.RecordsRead() != 1 {
		t.Fatalf("%d markers in a room without them; %d records read", n, g.RecordsRead())
	}
}

// TestUnmarkedStreamWritesNoMarkers: a stream without the record markers'
// metadata (StreamConfig's, and every stream of v0.2.0 and before) gets
// none.
func TestUnmarkedStreamWritesNoMarkers(t *testing.T) {
	e := roomtest.NewEnvUnmarked(t, embedded.Options{})
	base := roomtest.ReferenceRecord(t, "verified.json")
	a := e.Sign(base, map[string]any{"room/id": "room:u"})
	checkRecordStored(t, e.ShipRecord(a.Canonical()), a, room.OutcomeStored, 1)
	if msgs := e.Stored(); len(msgs) != 1 || msgs[0].Header.Get("Nats-Msg-Id") != a.ContentDigest() {
		t.Fatalf("%d messages", len(msgs))
	}
}

// TestMarkedForgedDecisionMarker: a decision its unknown outcome closed
// stays closed for a gate that reads its markers afresh (a restart) when
// a message written around the gate copies an earlier run's genuine
// marker: one published alone (its offset far from the record), and one
// after a raw copy of that run's record and two more messages (the offset
// a decision marker has in its batch). Readers refuse the new run too.
func TestMarkedForgedDecisionMarker(t *testing.T) {
	for _, withCopy := range []bool{false, true} {
		t.Run("copy="+strconv.FormatBool(withCopy), func(t *testing.T) {
			e := roomtest.NewEnvMarked(t, embedded.Options{})
			base := roomtest.ReferenceRecord(t, "verified.json")
			a := e.Sign(base, map[string]any{"room/id": "room:d"})
			checkRecordStored(t, e.ShipRecord(a.Canonical()), a, room.OutcomeStored, 1)
			u := e.Sign(base, map[string]any{"room/id": "room:d", "idempotency/key": "key-u", "run/ref": "operator-task-run:u", "outcome": "unknown"})
			if r := e.ShipRecord(u.Canonical()); r.Item.Outcome != room.OutcomeStored {
				t.Fatalf("%+v", r.Item)
			}
			var s room.Subjects
			forged := room.Marker{Record: a.ContentDigest(), Outcome: "verified"}
			if withCopy {
				roomtest.PublishRaw(t, e.Js, s.Records("room:d"), a.Canonical())
				roomtest.PublishRaw(t, e.Js, "rooms.d.filler", []byte("x"))
				roomtest.PublishRaw(t, e.Js, "rooms.d.filler", []byte("x"))
				forged.Offset = 3
			} else {
				forged.Offset = e.State().LastSeq // names a at stream seq 1
			}
			roomtest.PublishRaw(t, e.Js, s.Marker("room:d", room.MarkDecision, a.DecisionRef()), forged.Encode())
			v := e.Sign(base, map[string]any{"room/id": "room:d", "idempotency/key": "key-v", "run/ref": "operator-task-run:v"})
			checkRefused(t, e.NewGate(e.Connect()).AppendRecord(t.Context(), v.Canonical()), events.UnknownNotConsent)
		})
	}
}

// TestMarkedForgedFormatMarker: a message written around the gate on a
// room's format subject neither blocks the room's first record (the gate
// follows it) nor turns a room whose records were stored before markers
// over to the markers' rules, under which its keys would look free.
func TestMarkedForgedFormatMarker(t *testing.T) {
	e := roomtest.NewEnvMarked(t, embedded.Options{})
	base := roomtest.ReferenceRecord(t, "verified.json")
	var s room.Subjects
	roomtest.PublishRaw(t, e.Js, s.Marker("room:new", room.MarkFormat, ""), []byte("x"))
	a := e.Sign(base, map[string]any{"room/id": "room:new"})
	first := e.Gate.AppendRecord(t.Context(), a.Canonical())
	checkRecordStored(t, first, a, room.OutcomeStored, first.Item.StreamSeq)
	// The gate's format marker follows the junk, naming the record.
	var onFormat [][]byte
	for _, m := range e.Stored() {
		if m.Subject == s.Marker("room:new", room.MarkFormat, "") {
			onFormat = append(onFormat, m.Data)
		}
	}
	if len(onFormat) != 2 {
		t.Fatalf("%d messages on the format subject, want the junk and the gate's marker", len(onFormat))
	}
	if mk, err := room.ParseMarker(onFormat[1]); err != nil || mk.Record != a.ContentDigest() {
		t.Fatalf("format marker %+v, %v", mk, err)
	}
	// An old room (no markers), then format markers written around the
	// gate naming its first record, by its digest and at the right
	// offset, but after its batch: a record with the old one's key is
	// still refused.
	old := e.Sign(base, map[string]any{"room/id": "room:old"})
	oldSeq := roomtest.PublishRaw(t, e.Js, "rooms.old.exec", old.Canonical())
	// Later messages of other rooms: a room stored before markers has
	// its first record's neighbours taken long ago.
	for range room.MaxBatchMarkers {
		roomtest.PublishRaw(t, e.Js, "rooms.other.filler", []byte("x"))
	}
	for _, digest := range []string{"sha256:junk", old.ContentDigest()} {
		fmSeq := e.State().LastSeq + 1
		roomtest.PublishRaw(t, e.Js, s.Marker("room:old", room.MarkFormat, ""), room.Marker{Record: digest, Offset: fmSeq - oldSeq}.Encode())
		g := e.NewGate(e.Connect())
		b := e.Sign(base, map[string]any{"room/id": "room:old", "recorded-at": "2026-09-25T12:16:00Z"})
		checkRefused(t, g.AppendRecord(t.Context(), b.Canonical()), events.IdempotencyConflict, events.RunConflict)
	}
}

// TestMarkedForgedKeyMarkerCopy: a raw copy of a stored record and a key
// marker naming the copy do not move the key: the record sent again is a
// duplicate of its own stream seq, not of the copy (which readers set
// aside as replayed).
func TestMarkedForgedKeyMarkerCopy(t *testing.T) {
	e := roomtest.NewEnvMarked(t, embedded.Options{})
	base := roomtest.ReferenceRecord(t, "verified.json")
	a := e.Sign(base, map[string]any{"room/id": "room:k"})
	checkRecordStored(t, e.ShipRecord(a.Canonical()), a, room.OutcomeStored, 1)
	var s room.Subjects
	roomtest.PublishRaw(t, e.Js, s.Records("room:k"), a.Canonical())
	roomtest.PublishRaw(t, e.Js, s.Marker("room:k", room.MarkKey, a.IdempotencyKey()), room.Marker{Record: a.ContentDigest(), Offset: 1}.Encode())
	checkRecordStored(t, e.NewGate(e.Connect()).AppendRecord(t.Context(), a.Canonical()), a, room.OutcomeDuplicate, 1)
}

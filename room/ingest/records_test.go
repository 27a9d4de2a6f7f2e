package ingest_test

import (
	"bytes"
	"crypto/rand"
	"github.com/roompub/roompub/room/embedded"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// checkRecordStored asserts that reply stored rec at stream seq seq.
func checkRecordStored(t *testing.T, r room.RecordReply, rec *events.Record, outcome room.Outcome, seq uint64) {
	t.Helper()
	it := r.Item
	if it.Outcome != outcome || it.StreamSeq != seq || it.Subject != "rooms."+room.EncodeToken(rec.RoomID()[len("room:"):])+".exec" ||
		it.Hash != rec.ComputedRef() || it.Code != "" || r.RoomID != rec.RoomID() {
		t.Fatalf("reply %+v, want %s at stream seq %d", r, outcome, seq)
	}
}

// checkRefused asserts that reply refused its record with code, first
// among problems, and lists exactly the codes in also after it.
func checkRefused(t *testing.T, r room.RecordReply, codes ...events.Code) {
	t.Helper()
	it := r.Item
	if it.Outcome != room.OutcomeRefused || it.Code != codes[0] || it.StreamSeq != 0 || it.Subject != "" || len(it.Problems) == 0 {
		t.Fatalf("reply %+v, want refused %s", r, codes[0])
	}
	// The item's place is its first problem's; none (no "at") for one
	// about the whole record.
	if at := it.Problems[0].At; (it.At == nil) != (at == events.Location{}) || it.At != nil && *it.At != at {
		t.Fatalf("reply %+v: at %v, want the first problem's, %v", r, it.At, at)
	}
	var got []events.Code
	for _, p := range it.Problems {
		if len(got) == 0 || got[len(got)-1] != p.Code {
			got = append(got, p.Code)
		}
	}
	if len(got) != len(codes) {
		t.Fatalf("problem codes %v, want %v", got, codes)
	}
	for i := range codes {
		if got[i] != codes[i] {
			t.Fatalf("problem codes %v, want %v", got, codes)
		}
	}
}

func TestRecordStoreAndDuplicate(t *testing.T) {
	e := roomtest.NewEnvUnmarked(t, embedded.Options{})
	pretty := roomtest.ReferenceBytes(t, "verified.json")
	rec, err := events.ParseRecord(pretty)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(pretty, rec.Canonical()) {
		t.Fatal("the reference file is already canonical; the test needs pretty-printed bytes")
	}
	r := e.ShipRecord(pretty)
	checkRecordStored(t, r, rec, room.OutcomeStored, 1)
	before := e.State()
	msgs := e.Stored()
	if len(msgs) != 1 || msgs[0].Subject != roomtest.RefSubject || !bytes.Equal(msgs[0].Data, rec.Canonical()) ||
		msgs[0].Header.Get("Nats-Msg-Id") != rec.ContentDigest() {
		t.Fatalf("stored: %+v", msgs)
	}
	// The same file again, and its canonical bytes: both duplicate of seq 1.
	for _, raw := range [][]byte{pretty, rec.Canonical()} {
		checkRecordStored(t, e.ShipRecord(raw), rec, room.OutcomeDuplicate, 1)
	}
	// A fresh gate (another process) sees the same from the stream.
	g := e.NewGate(e.Connect())
	checkRecordStored(t, g.AppendRecord(t.Context(), pretty), rec, room.OutcomeDuplicate, 1)
	if after := e.State(); after != before {
		t.Fatalf("duplicates changed the stream: %+v, was %+v", after, before)
	}
	// Another record of the room, from the reference set, is stored next.
	other := roomtest.ReferenceBytes(t, "refused.json")
	orec, _ := events.ParseRecord(other)
	checkRecordStored(t, e.ShipRecord(other), orec, room.OutcomeStored, 2)
	if n := e.CountOn(roomtest.RefSubject); n != 2 {
		t.Fatalf("%d records stored, want 2", n)
	}
}

func TestRecordStreamRules(t *testing.T) {
	e := roomtest.NewEnvUnmarked(t, embedded.Options{})
	base := roomtest.ReferenceRecord(t, "verified.json")
	// A record of our own host in a room of its own.
	first := e.Sign(base, map[string]any{"room/id": "room:rules"})
	const subj = "rooms.rules.exec"
	checkRecordStored(t, e.ShipRecord(first.Canonical()), first, room.OutcomeStored, 1)

	// Each refusal below must leave the stream as it is.
	refuse := func(name string, rec *events.Record, codes ...events.Code) room.RecordReply {
		t.Helper()
		before := e.State()
		r := e.ShipRecord(rec.Canonical())
		checkRefused(t, r, codes...)
		if r.RoomID != rec.RoomID() || r.Item.Hash != rec.ComputedRef() {
			t.Fatalf("%s: %+v", name, r)
		}
		if after := e.State(); after != before {
			t.Fatalf("%s changed the stream: %+v, was %+v", name, after, before)
		}
		return r
	}

	// Other bytes under the same idempotency/key (and so the same run).
	r := refuse("idempotency", e.Sign(base, map[string]any{"room/id": "room:rules", "recorded-at": "2026-09-25T12:16:00Z"}),
		events.IdempotencyConflict, events.RunConflict)
	if p := r.Item.Problems[0]; p.At.Pointer != "/idempotency~1key" || p.Expected != first.ContentDigest() {
		t.Fatalf("idempotency problem: %+v", p)
	}
	// A new key for a run that already concluded.
	r = refuse("run", e.Sign(base, map[string]any{"room/id": "room:rules", "idempotency/key": "key-2"}), events.RunConflict)
	if p := r.Item.Problems[0]; p.At.Pointer != "/run~1ref" || p.Expected != first.ContentDigest() {
		t.Fatalf("run problem: %+v", p)
	}

	// An unknown outcome for a decision is never consent to run it again.
	const decision = "corpus-experiment-chair-decision:sha256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	unknown := e.Sign(base, map[string]any{"room/id": "room:rules", "outcome": "unknown", "decision/ref": decision,
		"decision/digest": "sha256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
		"idempotency/key": "key-unknown", "run/ref": "operator-task-run:run-unknown"})
	checkRecordStored(t, e.ShipRecord(unknown.Canonical()), unknown, room.OutcomeStored, 2)
	again := e.Sign(base, map[string]any{"room/id": "room:rules", "outcome": "verified", "decision/ref": decision,
		"decision/digest": "sha256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
		"idempotency/key": "key-again", "run/ref": "operator-task-run:run-again"})
	r = refuse("unknown", again, events.UnknownNotConsent)
	if p := r.Item.Problems[0]; p.At.Pointer != "/decision~1ref" {
		t.Fatalf("unknown problem: %+v", p)
	}
	// The same decision in another room is another matter (keys and runs
	// are scoped to their room, and so is the unknown outcome).
	elsewhere := e.Sign(again.Object(), map[string]any{"room/id": "room:rules-2"})
	checkRecordStored(t, e.ShipRecord(elsewhere.Canonical()), elsewhere, room.OutcomeStored, 3)

	// A host that is not trusted here.
	stranger, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	m := roomtest.Mutate(base, "room/id", "room:rules")
	m = roomtest.Mutate(m, "idempotency/key", "key-stranger")
	m = roomtest.Mutate(m, "run/ref", "operator-task-run:run-stranger")
	foreign, err := events.SignRecord(m, stranger)
	if err != nil {
		t.Fatal(err)
	}
	r = refuse("untrusted", foreign, events.UntrustedHost)
	if p := r.Item.Problems[0]; p.Actual != stranger.NodeID() {
		t.Fatalf("untrusted problem: %+v", p)
	}

	if n := e.CountOn(subj); n != 2 {
		t.Fatalf("%d records on %s, want 2", n, subj)
	}
	if n := e.CountOn("rooms.>"); n != 3 {
		t.Fatalf("%d messages in the stream, want 3", n)
	}
}

func TestRecordValidatorRefusals(t *testing.T) {
	e := roomtest.NewEnv(t)
	verified := roomtest.ReferenceBytes(t, "verified.json")
	obj := roomtest.ReferenceRecord(t, "verified.json")
	dupKey := append([]byte(`{"outcome":"verified",`), bytes.TrimPrefix(bytes.TrimSpace(verified), []byte("{"))...)
	cases := []struct {
		name  string
		raw   []byte
		codes []events.Code
	}{
		{"not JSON", []byte(`not json`), []events.Code{events.MalformedJSON}},
		{"duplicate key", dupKey, []events.Code{events.MalformedJSON}},
		{"JSON array", []byte(`[1,2]`), []events.Code{events.MalformedJSON}},
		{"inline output", roomtest.ReferenceBytes(t, "invalid/inline-output.json"), []events.Code{events.SchemaInvalid, events.RefMismatch, events.SignatureInvalid}},
		{"refused without code", roomtest.ReferenceBytes(t, "invalid/refused-without-code.json"), []events.Code{events.SchemaInvalid, events.RefMismatch, events.SignatureInvalid}},
		{"verified without instance", roomtest.ReferenceBytes(t, "invalid/verified-without-instance.json"), []events.Code{events.SchemaInvalid, events.RefMismatch, events.SignatureInvalid, events.ForeignEvidence}},
		{"foreign evidence", roomtest.ReferenceBytes(t, "foreign-evidence.json"), []events.Code{events.ForeignEvidence}},
		{"signed foreign evidence", e.Sign(obj, map[string]any{"environment/ref": "environment:qmail-99"}).Canonical(), []events.Code{events.ForeignEvidence}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := e.State()
			r := e.ShipRecord(c.raw)
			checkRefused(t, r, c.codes...)
			if after := e.State(); after != before || after.Msgs != 0 {
				t.Fatalf("stream: %+v, was %+v", after, before)
			}
		})
	}
	if p := e.ShipRecord(roomtest.ReferenceBytes(t, "foreign-evidence.json")).Item.Problems[0]; p.At.Pointer != "/evidence/0/environment~1ref" ||
		p.Expected != "environment:qmail-01" || p.Actual != "environment:qmail-00" {
		t.Fatalf("foreign evidence problem: %+v", p)
	}
	// An empty body is an empty record (empty_input), not a request error.
	checkRefused(t, e.ShipRecord(nil), events.EmptyInput)
	if n := e.CountOn("rooms.>"); n != 0 {
		t.Fatalf("%d messages stored, want 0", n)
	}
}

// TestRecordSkipsForeignMessages: a message on a room's record subject that
// no gate wrote (not a record) does not stop the room: the gate reads past
// it, and its rules still see every record around it.
func TestRecordSkipsForeignMessages(t *testing.T) {
	e := roomtest.NewEnvUnmarked(t, embedded.Options{})
	base := roomtest.ReferenceRecord(t, "verified.json")
	a := e.Sign(base, map[string]any{"room/id": "room:mixed"})
	checkRecordStored(t, e.ShipRecord(a.Canonical()), a, room.OutcomeStored, 1)
	if _, err := e.Js.Publish(t.Context(), "rooms.mixed.exec", []byte("not a record")); err != nil {
		t.Fatal(err)
	}
	// A fresh gate reads the room from the start, past the stranger.
	g := e.NewGate(e.Connect())
	b := e.Sign(base, map[string]any{"room/id": "room:mixed", "idempotency/key": "key-b", "run/ref": "operator-task-run:run-b"})
	checkRecordStored(t, g.AppendRecord(t.Context(), b.Canonical()), b, room.OutcomeStored, 3)
	checkRecordStored(t, g.AppendRecord(t.Context(), a.Canonical()), a, room.OutcomeDuplicate, 1)
	// And the gate that stored a, which has not read the stranger yet.
	r := e.ShipRecord(e.Sign(base, map[string]any{"room/id": "room:mixed", "recorded-at": "2026-09-25T12:16:00Z"}).Canonical())
	checkRefused(t, r, events.IdempotencyConflict, events.RunConflict)
	if n := e.CountOn("rooms.mixed.exec"); n != 3 {
		t.Fatalf("%d messages, want 3", n)
	}
}

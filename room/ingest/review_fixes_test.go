package ingest_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
)

// TestStaleViewNeverRefuses: a harness ships one chain in order, chunk by
// chunk, and each chunk happens to reach another publisher process (gate).
// Each gate's cached view of the chain is stale by then; the gate must
// decide on the stream's word, so every line is stored, none refused.
func TestStaleViewNeverRefuses(t *testing.T) {
	e := roomtest.NewEnv(t)
	gates := racers(e)
	entries, _ := roomtest.Journal(t, "run-stale", "cap-1", 140)
	for i, from := 0, 0; from < len(entries); i, from = i+1, from+7 {
		r, err := gates[i%2].AppendJournal(t.Context(), "room:stale", roomtest.Lines(entries[from:min(from+7, len(entries))]), nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Stored != min(7, len(entries)-from) || r.Refused != 0 || r.Failures != 0 {
			t.Fatalf("chunk %d through gate %d: %+v", i, i%2, r)
		}
	}
	if st := e.State(); st.Msgs != 140 {
		t.Fatalf("stream holds %d messages, want 140", st.Msgs)
	}
	// A stale view of the room (another gate stored the chain) still gives
	// room_conflict for another room, decided on a fresh read.
	other := e.NewGate(e.Connect())
	r, err := other.AppendJournal(t.Context(), "room:elsewhere", roomtest.Lines(entries[:1]), nil)
	if err != nil || r.Items[0].Code != events.RoomConflict {
		t.Fatalf("room conflict: %+v %v", r, err)
	}
}

// TestLongRoomTokenRefused: a room id of the schema's form whose subject
// token would pass MaxRoomTokenBytes (mostly non-ASCII) is a bad request
// (journal) or too_large (record), and the service stays connected.
func TestLongRoomTokenRefused(t *testing.T) {
	e := roomtest.NewEnv(t)
	_, body := roomtest.Journal(t, "run-1", "cap-1", 2)
	long := "room:" + strings.Repeat("€", 460) // 460 × 3 bytes × 3 = 4,140 bytes encoded
	code, er := e.RequestError(roomtest.SubjJournal, nats.Header{room.HeaderRoom: {long}}, body)
	if code != "400" || er.Code != events.BadRequest || !strings.Contains(er.Reason, "too long for a subject") {
		t.Fatalf("got %q %+v", code, er)
	}
	// Still connected and serving.
	if r := e.ShipJournal("room:after", body); r.Stored != 2 {
		t.Fatalf("after the long room id: %+v", r)
	}
	// The longest ASCII room id (dots take three bytes each) fits.
	ascii := "room:" + strings.Repeat(".", 507)
	if r := e.ShipJournal(ascii, func() []byte { _, b := roomtest.Journal(t, "run-2", "cap-1", 1); return b }()); r.Stored != 1 {
		t.Fatalf("507 dots: %+v", r)
	}
	rec := e.Sign(roomtest.ReferenceRecord(t, "verified.json"), map[string]any{"room/id": long})
	rr := e.ShipRecord(rec.Canonical())
	if rr.Item.Code != events.TooLarge || rr.Item.At == nil || rr.Item.At.Pointer != "/room~1id" {
		t.Fatalf("record: %+v", rr.Item)
	}
}

// TestRoomHeaderStrict: the room header is matched without regard to case,
// given once; two values or none are a bad request that says so.
func TestRoomHeaderStrict(t *testing.T) {
	e := roomtest.NewEnv(t)
	_, body := roomtest.Journal(t, "run-1", "cap-1", 1)
	code, er := e.RequestError(roomtest.SubjJournal, nats.Header{room.HeaderRoom: {"room:one", "room:two"}}, body)
	if code != "400" || er.Code != events.BadRequest || !strings.Contains(er.Reason, "send exactly one") {
		t.Fatalf("two values: %q %+v", code, er)
	}
	code, er = e.RequestError(roomtest.SubjJournal, nats.Header{}, body)
	if code != "400" || !strings.Contains(er.Reason, "no Roompub-Room header") {
		t.Fatalf("missing: %q %+v", code, er)
	}
	var r room.JournalReply
	if code := e.Request(roomtest.SubjJournal, nats.Header{"roompub-room": {"room:lower"}}, body, &r); code != "" || r.Stored != 1 || r.RoomID != "room:lower" {
		t.Fatalf("lower-case header: %q %+v", code, r)
	}
	if st := e.State(); st.Msgs != 1 {
		t.Fatalf("stream holds %d, want 1", st.Msgs)
	}
}

// TestHeadStrict: a head request is exactly two ids of the envelope's form.
func TestHeadStrict(t *testing.T) {
	e := roomtest.NewEnv(t)
	for _, body := range []string{
		`{"run_id":"run-a","capsule_id":"cap-a","run_id":"run-b"}`, // duplicate key
		`{"run_id":"run a","capsule_id":"cap-a"}`,
		`{"run_id":"*","capsule_id":"cap-a"}`,
		`{"run_id":">","capsule_id":"cap-a"}`,
		`{"run_id":"run-a","capsule_id":"cap-a","extra":1}`,
		`{"run_id":"` + strings.Repeat("r", 129) + `","capsule_id":"cap-a"}`,
	} {
		code, er := e.RequestError(roomtest.SubjHead, nil, []byte(body))
		if code != "400" || er.Code != events.BadRequest {
			t.Errorf("%s: %q %+v", body, code, er)
		}
	}
	var h room.ChainHead
	if code := e.Request(roomtest.SubjHead, nil, []byte(`{"run_id":"run-a","capsule_id":"cap-a"}`), &h); code != "" || h.Next != 0 || h.Head != events.ZeroHash {
		t.Fatalf("good request: %q %+v", code, h)
	}
}

// TestHugeRecordReasonFits: a record with tens of thousands of unknown
// keys is refused with a verdict that fits a reply (texts are clipped).
func TestHugeRecordReasonFits(t *testing.T) {
	e := roomtest.NewEnv(t)
	var b strings.Builder
	b.WriteString(`{"schema/v":1,"room/id":"room:mk"`)
	for i := range 60000 {
		fmt.Fprintf(&b, `,"k%06d":1`, i)
	}
	b.WriteString("}")
	r := e.ShipRecord([]byte(b.String()))
	if r.Item.Outcome != room.OutcomeRefused || r.Item.Code != events.SchemaInvalid || len(r.Item.Reason) > events.MaxTextBytes+64 {
		t.Fatalf("got outcome %s code %s reason of %d bytes", r.Item.Outcome, r.Item.Code, len(r.Item.Reason))
	}
}

// TestGateIgnoresUnverifiedStoredRecords: a record a compromised writer put
// straight into the stream (here the reference foreign-evidence record,
// which shares verified.json's idempotency/key and run/ref) does not count
// for the relation rules: the genuine record is still stored.
func TestGateIgnoresUnverifiedStoredRecords(t *testing.T) {
	e := roomtest.NewEnv(t)
	roomtest.PublishRaw(t, e.Js, "rooms.qmail-open-relay.exec", roomtest.ReferenceBytes(t, "foreign-evidence.json"))
	r := e.ShipRecord(roomtest.ReferenceBytes(t, "verified.json"))
	if r.Item.Outcome != room.OutcomeStored || r.Item.StreamSeq != 2 {
		t.Fatalf("genuine record after a forged one: %+v", r.Item)
	}
}

// TestReaderRecordNotCanonical: the gate stores records canonical, so a
// reader sets aside stored record bytes that are not (non_canonical), and
// an entry on an empty chain's subject that names another capsule leaves
// no phantom chain in the report.
func TestReaderRecordNotCanonical(t *testing.T) {
	e := roomtest.NewEnv(t)
	seq := roomtest.PublishRaw(t, e.Js, "rooms.qmail-open-relay.exec", roomtest.ReferenceBytes(t, "verified.json")) // pretty-printed
	entries, _ := roomtest.Journal(t, "run-a", "cap-a", 1)
	roomtest.PublishRaw(t, e.Js, "rooms.r.journal.run-b.cap-b", entries[0].Canonical())
	rep, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Violations) != 2 || rep.Violations[0].Code != events.NonCanonical || rep.Violations[0].Seq != seq ||
		rep.Violations[1].Code != events.WrongRoom {
		t.Fatalf("violations: %+v", rep.Violations)
	}
	if len(rep.Chains) != 0 {
		t.Fatalf("phantom chains: %+v", rep.Chains)
	}
}

package ingest_test

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// TestControlCharacterRoomIDRefused: a room id with a C0 control
// character or DEL, which seed 004's pattern admits but no checkpoint's
// origin line can hold, is refused before anything is stored: a journal
// request as bad_request, a record as bad_request at /room~1id; the
// service goes on serving.
func TestControlCharacterRoomIDRefused(t *testing.T) {
	e := roomtest.NewEnv(t)
	_, body := roomtest.Journal(t, "run-1", "cap-1", 2)
	for _, c := range []struct {
		id, char string
	}{
		{"room:a\x01b", "U+0001"},
		{"room:\x1b[31mred", "U+001B"},
		{"room:a\x7fb", "U+007F"},
	} {
		code, er := e.RequestError(roomtest.SubjJournal, nats.Header{room.HeaderRoom: {c.id}}, body)
		if code != "400" || er.Code != events.BadRequest || !strings.Contains(er.Reason, "control character "+c.char) {
			t.Errorf("journal in %q: %q %+v", c.id, code, er)
		}
		rec := e.Sign(roomtest.ReferenceRecord(t, "verified.json"), map[string]any{"room/id": c.id})
		rr := e.ShipRecord(rec.Canonical())
		if rr.Item.Outcome != room.OutcomeRefused || rr.Item.Code != events.BadRequest || rr.Item.At == nil || rr.Item.At.Pointer != "/room~1id" ||
			!strings.Contains(rr.Item.Reason, c.char) || rr.Item.Hash != rec.ComputedRef() {
			t.Errorf("record in %q: %+v", c.id, rr.Item)
		}
	}
	if st := e.State(); st.Msgs != 0 {
		t.Fatalf("the stream holds %d messages after refusals only", st.Msgs)
	}
	// Printable non-ASCII and subject characters are taken, and so are
	// C1 controls, which a signed note's text may hold.
	for _, id := range []string{"room:x.y*>~2E/ü", "room:a\u0085b"} {
		if r := e.ShipJournal(id, body); r.Stored != 2 {
			t.Fatalf("%q after the refusals: %+v", id, r)
		}
		_, body = roomtest.Journal(t, "run-2", "cap-2", 2)
	}
}

package room_test

import (
	"encoding/json"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
)

// TestRecordReplyInFile: a refused record's locations name its file: the
// gate's whole-document location (malformed_json: no pointer, no line)
// becomes the file alone, a pointer stays beside it, a refusal cut to
// outcomes gets the file; an outcome without a refusal gets no location;
// the reply given is not changed.
func TestRecordReplyInFile(t *testing.T) {
	malformed := room.RecordReply{Item: room.RefusedItem(0, []events.Problem{{Code: events.MalformedJSON, Reason: "not strict JSON: Duplicate key: \"a\""}})}
	pointed := room.RecordReply{RoomID: "room:r", Item: room.RefusedItem(0, []events.Problem{
		{Code: events.SchemaInvalid, At: events.Location{Pointer: "/outcome"}, Reason: "schema: not one of the outcomes"},
		{Code: events.IdempotencyConflict, At: events.Location{Pointer: "/idempotency~1key", Seq: 9}, Reason: "other bytes"},
	})}
	for _, c := range []struct {
		name  string
		reply room.RecordReply
		want  string
	}{
		{"malformed", malformed,
			`{"item":{"index":0,"outcome":"refused","code":"malformed_json","at":{"file":"r.json"},"reason":"not strict JSON: Duplicate key: \"a\"","problems":[{"code":"malformed_json","at":{"file":"r.json"},"reason":"not strict JSON: Duplicate key: \"a\""}]}}`},
		{"pointed", pointed,
			`{"room":"room:r","item":{"index":0,"outcome":"refused","code":"schema_invalid","at":{"file":"r.json","pointer":"/outcome"},"reason":"schema: not one of the outcomes","problems":[{"code":"schema_invalid","at":{"file":"r.json","pointer":"/outcome"},"reason":"schema: not one of the outcomes"},{"code":"idempotency_conflict","at":{"file":"r.json","pointer":"/idempotency~1key","seq":9},"reason":"other bytes"}]}}`},
		{"cut to outcomes", room.RecordReply{Item: room.ItemResult{Outcome: room.OutcomeRefused, Code: events.SchemaInvalid}},
			`{"item":{"index":0,"outcome":"refused","code":"schema_invalid","at":{"file":"r.json"}}}`},
		{"stored", room.RecordReply{RoomID: "room:r", Item: room.ItemResult{Outcome: room.OutcomeStored, StreamSeq: 7}},
			`{"room":"room:r","item":{"index":0,"outcome":"stored","stream_seq":7}}`},
		{"skipped", room.RecordReply{Item: room.ItemResult{Outcome: room.OutcomeSkipped, Reason: "not confirmed"}},
			`{"item":{"index":0,"outcome":"skipped","reason":"not confirmed"}}`},
	} {
		before, _ := json.Marshal(c.reply)
		got, err := json.Marshal(c.reply.InFile("r.json"))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != c.want {
			t.Errorf("%s: got\n%s\nwant\n%s", c.name, got, c.want)
		}
		if after, _ := json.Marshal(c.reply); string(after) != string(before) {
			t.Errorf("%s: InFile changed the reply given: %s, was %s", c.name, after, before)
		}
	}
}

// TestRefusedItemWholeRecord: a refusal about a whole record (no file,
// line, pointer or stream seq) carries no "at" in the reply, the item's or
// its problems', rather than "at":{}; one with a place keeps it.
func TestRefusedItemWholeRecord(t *testing.T) {
	for _, c := range []struct {
		name     string
		problems []events.Problem
		want     string
	}{
		{"whole record", []events.Problem{{Code: events.MalformedJSON, Reason: "not strict JSON"}},
			`{"index":3,"outcome":"refused","code":"malformed_json","reason":"not strict JSON","problems":[{"code":"malformed_json","reason":"not strict JSON"}]}`},
		{"a pointer, then the whole record", []events.Problem{
			{Code: events.SchemaInvalid, At: events.Location{Pointer: "/outcome"}, Reason: "schema"},
			{Code: events.UntrustedHost, Reason: "untrusted", Actual: "node:x"},
		}, `{"index":3,"outcome":"refused","code":"schema_invalid","at":{"pointer":"/outcome"},"reason":"schema","problems":[{"code":"schema_invalid","at":{"pointer":"/outcome"},"reason":"schema"},{"code":"untrusted_host","reason":"untrusted","actual":"node:x"}]}`},
	} {
		item := room.RefusedItem(3, c.problems)
		got, err := json.Marshal(item)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != c.want {
			t.Errorf("%s: got\n%s\nwant\n%s", c.name, got, c.want)
		}
		var back room.ItemResult
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatal(err)
		}
		if again, _ := json.Marshal(back); string(again) != c.want {
			t.Errorf("%s: read back as %s", c.name, again)
		}
	}
}

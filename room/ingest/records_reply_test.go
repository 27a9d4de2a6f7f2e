package ingest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
)

// FuzzEncodeRecordsReply: whatever the items (any outcome, code, reason
// and pointer, up to the most a max payload can answer), the encoded
// records reply fits the max payload, names a known Trimmed form, and keeps
// each item's index, outcome, stream sequence and code; a reply that fits
// whole is sent whole.
func FuzzEncodeRecordsReply(f *testing.F) {
	f.Add(uint16(3), uint8(0), []byte("stored\x00refused<<<<\x01duplicate"))
	f.Add(uint16(510), uint8(1), []byte(strings.Repeat("<", 300)))
	f.Add(uint16(9), uint8(0), []byte("\xff\xfe\x00\x01"))
	outcomes := []room.Outcome{room.OutcomeStored, room.OutcomeDuplicate, room.OutcomeRefused, room.OutcomeSkipped, room.OutcomeFailed}
	codes := []events.Code{"", events.IdempotencyConflict, events.SchemaInvalid, events.UnknownNotConsent, events.TooLarge}
	f.Fuzz(func(t *testing.T, n uint16, small uint8, data []byte) {
		max := 1 << 20
		if small%2 == 1 {
			max = 64 << 10
		}
		most := (max - room.RecordsReplyOverhead) / minRecordItemBytes
		count := min(int(n), most, room.MaxBatchRecords)
		var r room.RecordsReply
		for i := range count {
			b := byte(i)
			if len(data) > 0 {
				b = data[i%len(data)]
			}
			text := strings.Repeat(string(data), int(b)%7)
			it := room.ItemResult{Index: i, Outcome: outcomes[int(b)%len(outcomes)], Code: codes[int(b>>3)%len(codes)], Reason: text}
			if it.Outcome == room.OutcomeStored || it.Outcome == room.OutcomeDuplicate {
				it.StreamSeq = uint64(b)<<56 | uint64(i)
				it.Hash = "corpus-task-pack-execution:sha256:" + strings.Repeat("A", 43)
			}
			if it.Outcome == room.OutcomeRefused {
				it.At = &events.Location{Pointer: "/" + text}
				for range int(b) % 4 {
					it.Problems = append(it.Problems, events.Problem{Code: it.Code, Reason: text, Expected: text, Actual: text})
				}
			}
			r.Records = append(r.Records, room.RecordReply{RoomID: "room:" + strings.Repeat("é", int(b)), Item: it})
		}
		want := make([]room.RecordReply, len(r.Records))
		copy(want, r.Records)
		whole, _ := json.Marshal(r)
		body, err := encodeRecordsReply(&r, max)
		if err != nil {
			t.Fatal(err)
		}
		if len(body) > max {
			t.Fatalf("%d items: a reply of %d bytes, max %d (trimmed %q)", count, len(body), max, r.Trimmed)
		}
		var got room.RecordsReply
		if err := json.Unmarshal(body, &got); err != nil || len(got.Records) != count {
			t.Fatalf("%v, %d items", err, len(got.Records))
		}
		switch got.Trimmed {
		case "":
			if len(whole) > max {
				t.Fatalf("a %d-byte reply sent whole", len(whole))
			}
		case room.RecordsTrimmedProblems, room.RecordsTrimmedTexts, room.RecordsTrimmedItems:
			if len(whole) <= max {
				t.Fatalf("a %d-byte reply trimmed to %q", len(whole), got.Trimmed)
			}
		default:
			t.Fatalf("trimmed %q", got.Trimmed)
		}
		for i, g := range got.Records {
			w := want[i].Item
			if g.Item.Index != w.Index || g.Item.Outcome != w.Outcome || g.Item.StreamSeq != w.StreamSeq || g.Item.Code != w.Code {
				t.Fatalf("item %d: %+v, was %+v", i, g.Item, w)
			}
		}
	})
}

// TestOutcomeCountsUnknown: an outcome without a count of its own (ahead
// in a records reply, which has none, or one not known) counts as failed
// instead of being lost or panicking, as the records reply counted it
// before the tally was shared with journal replies.
func TestOutcomeCountsUnknown(t *testing.T) {
	var r room.RecordsReply
	c := outcomeCounts{&r.Stored, &r.Dupes, &r.Refused, &r.Skipped, &r.Failures, nil}
	for _, o := range []room.Outcome{room.OutcomeStored, room.OutcomeAhead, "mystery", room.OutcomeFailed, room.OutcomeSkipped} {
		c.add(o)
	}
	if r.Stored != 1 || r.Failures != 3 || r.Skipped != 1 {
		t.Fatalf("counts %+v, want 1 stored, 3 failed, 1 skipped", r)
	}
	j := room.JournalReply{Items: []room.ItemResult{{Outcome: room.OutcomeAhead}, {Outcome: room.OutcomeDuplicate}}}
	tally(&j)
	if j.Ahead != 1 || j.Dupes != 1 || j.Failures != 0 {
		t.Fatalf("journal counts %+v", j)
	}
}

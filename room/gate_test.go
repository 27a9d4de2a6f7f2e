package room_test

import (
	"bytes"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
)

func TestJournalStoreAndDuplicate(t *testing.T) {
	e := newEnv(t)
	entries, body := journal(t, "run-1", "cap-1", 5)
	r := e.shipJournal("room:alpha", body)
	if r.Stored != 5 || r.Dupes != 0 || r.Refused != 0 {
		t.Fatalf("first ship: %+v", r)
	}
	if r.Head.Next != 5 || r.Head.Head != entries[4].EntryHash() || r.Head.RoomID != "room:alpha" {
		t.Fatalf("head: %+v", r.Head)
	}
	for i, it := range r.Items {
		if it.StreamSeq != uint64(i+1) || it.Subject != "rooms.alpha.journal.run-1.cap-1" {
			t.Fatalf("item %d: %+v", i, it)
		}
	}
	r = e.shipJournal("room:alpha", body)
	if r.Stored != 0 || r.Dupes != 5 {
		t.Fatalf("re-ship: %+v", r)
	}
	msgs := e.stored()
	if len(msgs) != 5 {
		t.Fatalf("stream holds %d messages, want 5", len(msgs))
	}
	for i, m := range msgs {
		if !bytes.Equal(m.Data, entries[i].Canonical()) {
			t.Fatalf("message %d is not entry %d", i+1, i)
		}
	}
	// Continue from the head: only the new ones are stored.
	more, body2 := journal(t, "run-1", "cap-1", 8)
	_ = more
	r = e.shipJournal("room:alpha", body2)
	if r.Stored != 3 || r.Dupes != 5 {
		t.Fatalf("extend: %+v", r)
	}
}

func TestJournalRefusalStopsBatch(t *testing.T) {
	e := newEnv(t)
	entries, _ := journal(t, "run-1", "cap-1", 6)
	// Swap entries 3 and 4: line 4 is reordered.
	bad := append(append([]*events.Entry{}, entries[:3]...), entries[4], entries[3], entries[5])
	r := e.shipJournal("room:alpha", lines(bad))
	if r.Stored != 3 || r.Refused != 1 || r.Skipped != 2 {
		t.Fatalf("reply: %+v", r)
	}
	if it := r.Items[3]; it.Code != events.Reordered || it.At == nil || it.At.Line != 4 {
		t.Fatalf("item 3: %+v", it)
	}
	if n := len(e.stored()); n != 3 {
		t.Fatalf("stream holds %d, want 3", n)
	}
}

func TestRoomConflictAndFork(t *testing.T) {
	e := newEnv(t)
	entries, body := journal(t, "run-1", "cap-1", 3)
	e.shipJournal("room:alpha", body)
	r := e.shipJournal("room:beta", body)
	if r.Items[0].Code != events.RoomConflict {
		t.Fatalf("room conflict: %+v", r.Items[0])
	}
	// A different entry at position 1.
	alt, err := events.NewEntry(mutate(entries[1].Object(), "kind", "other.kind"))
	if err != nil {
		t.Fatal(err)
	}
	r = e.shipJournal("room:alpha", lines([]*events.Entry{alt}))
	if r.Items[0].Code != events.Fork {
		t.Fatalf("fork: %+v", r.Items[0])
	}
	if n := len(e.stored()); n != 3 {
		t.Fatalf("stream holds %d, want 3", n)
	}
	_ = room.OutcomeRefused
}

func mutate(obj map[string]any, k string, v any) map[string]any {
	m := map[string]any{}
	for kk, vv := range obj {
		m[kk] = vv
	}
	m[k] = v
	return m
}

func TestRecords(t *testing.T) {
	e := newEnv(t)
	r := e.shipRecord(referenceBytes(t, "verified.json"))
	if r.Item.Outcome != room.OutcomeStored || r.RoomID != "room:qmail-open-relay" {
		t.Fatalf("verified: %+v", r)
	}
	r = e.shipRecord(referenceBytes(t, "verified.json"))
	if r.Item.Outcome != room.OutcomeDuplicate || r.Item.StreamSeq != 1 {
		t.Fatalf("again: %+v", r)
	}
	r = e.shipRecord(referenceBytes(t, "foreign-evidence.json"))
	if r.Item.Code != events.ForeignEvidence {
		t.Fatalf("foreign: %+v", r)
	}
	base := referenceRecord(t, "verified.json")
	r = e.shipRecord(e.sign(base, map[string]any{"recorded-at": "2026-09-25T12:16:00Z"}).Canonical())
	if r.Item.Code != events.IdempotencyConflict {
		t.Fatalf("idempotency: %+v", r)
	}
}

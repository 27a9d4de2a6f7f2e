package ingest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// TestLossNoticeOpensRoom: with a publisher key, a room whose store lost
// positions of chain A takes no append at all once the gate knows it (its
// survey): a new chain, chain B and a record are refused store_lost,
// naming A's loss and how to acknowledge it. A loss notice written by the
// gate (AcknowledgeLoss) is attested on the room's notice subject; after
// it B, the new chain and the record go on, A stays closed, and a fresh
// gate reads the notice back (nothing unacknowledged). A room with no
// known loss gets no notice (ErrNothingLost).
func TestLossNoticeOpensRoom(t *testing.T) {
	e := roomtest.NewEnv(t)
	key := roomtest.NewPublisherKey(t)
	const roomID = "room:noticed"
	a, _ := roomtest.Journal(t, "run-a", "cap-a", 160)
	b, _ := roomtest.Journal(t, "run-b", "cap-b", 110)
	g := roomtest.AttestingGate(e, e.Nc, key, nil, ingest.GateOptions{})
	ctx := context.Background()
	e.ChainWithHole(roomID, a, b, func(body []byte) room.JournalReply {
		r, err := g.AppendJournal(ctx, roomID, body, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	})
	g = roomtest.AttestingGate(e, e.Nc, key, nil, ingest.GateOptions{})
	if sv, err := g.Survey(ctx); err != nil || len(sv.Damaged) != 1 || sv.Damaged[0].Loss.Count != 50 {
		t.Fatalf("survey: %+v, %v", sv, err)
	}
	if _, _, err := g.AcknowledgeLoss(ctx, "room:whole", time.Now()); !errors.Is(err, ingest.ErrNothingLost) {
		t.Fatalf("acknowledge a room with no loss: %v", err)
	}
	c, cbody := roomtest.Journal(t, "run-c", "cap-c", 5)
	rec := roomtest.RecordNamed(e, roomID, "noticed")
	refusedRoom := func(what string, it room.ItemResult) {
		t.Helper()
		if it.Outcome != room.OutcomeRefused || it.Code != events.StoreLost || !strings.Contains(it.Reason, "the store lost acknowledged messages of room room:noticed (chain run-a/cap-a lost 50 entries, positions 50-99") ||
			!strings.Contains(it.Reason, "publisher serve --acknowledge-loss room:noticed") {
			t.Errorf("%s before the notice: %+v", what, it)
		}
	}
	r, _ := g.AppendJournal(ctx, roomID, cbody, nil)
	refusedRoom("new chain", r.Items[0])
	r, _ = g.AppendJournal(ctx, roomID, roomtest.Lines(b[100:]), nil)
	refusedRoom("chain B", r.Items[0])
	refusedRoom("record", g.AppendRecord(ctx, rec).Item)
	if ch, rooms := g.Unacknowledged(); len(ch) != 1 || len(rooms) != 0 {
		t.Fatalf("unacknowledged: %+v %+v", ch, rooms)
	}

	noted := time.Date(2026, 12, 2, 7, 30, 0, 0, time.UTC)
	n, seq, err := g.AcknowledgeLoss(ctx, roomID, noted)
	if err != nil || seq == 0 || n.NotedAt != "2026-12-02T07:30:00Z" || n.Publisher != key.NodeID() || len(n.Chains) != 1 ||
		n.Chains[0].Chain != (events.ChainKey{RunID: "run-a", CapsuleID: "cap-a"}) || n.Chains[0].Loss.Count != 50 || n.Checkpoint != nil {
		t.Fatalf("notice: %+v at %d, %v", n, seq, err)
	}
	m, err := roomtest.LeaderMsg(ctx, e.Nc, room.DefaultStream, seq)
	if err != nil || m.Subject != "rooms.noticed.notice" {
		t.Fatalf("notice in the stream: %+v, %v", m, err)
	}
	if back, err := room.ParseLossNotice(m.Data, roomID); err != nil || back.Chains[0].Loss.String() != n.Chains[0].Loss.String() {
		t.Fatalf("notice read back: %+v, %v", back, err)
	}
	if signer, err := roomtest.Trusting(t, key).VerifyAttestation(m.Header.Get(checkpoint.AttestationHeader), roomID, m.Subject, checkpoint.NoticePosition, checkpoint.ContentHash(m.Data)); err != nil || signer != key.NodeID() {
		t.Fatalf("notice attestation: %q, %v", signer, err)
	}

	if r, _ := g.AppendJournal(ctx, roomID, cbody, nil); r.Stored != len(c) {
		t.Errorf("new chain after the notice: %+v", r)
	}
	if r, _ := g.AppendJournal(ctx, roomID, roomtest.Lines(b[100:]), nil); r.Stored != 10 {
		t.Errorf("chain B after the notice: %+v", r)
	}
	if it := g.AppendRecord(ctx, rec).Item; it.Outcome != room.OutcomeStored {
		t.Errorf("record after the notice: %+v", it)
	}
	r, _ = g.AppendJournal(ctx, roomID, roomtest.Lines(a[150:]), nil)
	if it := r.Items[0]; it.Code != events.StoreLost || !strings.HasPrefix(it.Reason, "the store lost 50 of the chain's 150 acknowledged entries") {
		t.Errorf("chain A after the notice: %+v", it)
	}
	// A gate started later reads the notice in its survey.
	g2 := roomtest.AttestingGate(e, e.Connect(), key, nil, ingest.GateOptions{})
	if _, err := g2.Survey(ctx); err != nil {
		t.Fatal(err)
	}
	if ch, rooms := g2.Unacknowledged(); len(ch) != 0 || len(rooms) != 0 || len(g2.Damaged()) != 1 {
		t.Errorf("a later gate: unacknowledged %+v %+v, damaged %+v", ch, rooms, g2.Damaged())
	}
}

// TestRecordLossFoundAndNoticed: with a publisher key, the server drops
// records a05..a09 of a room from inside the stream (a flipped byte in
// the first block file, whose records a10..a14 are in the second). The
// survey finds it from the last record's attestation (its ordinal is 5
// above the count the stream holds), the room takes no record until a
// loss notice acknowledges the 5 records, then it does.
func TestRecordLossFoundAndNoticed(t *testing.T) {
	e := roomtest.NewEnv(t)
	key := roomtest.NewPublisherKey(t)
	const roomID = "room:records-lost"
	ctx := context.Background()
	g := roomtest.AttestingGate(e, e.Nc, key, nil, ingest.GateOptions{})
	recs := make([][]byte, 16)
	for i := range recs {
		recs[i] = roomtest.RecordNamed(e, roomID, fmt.Sprintf("a%02d", i))
	}
	store := func(from, to int) uint64 {
		var seq uint64
		for i := from; i < to; i++ {
			it := g.AppendRecord(ctx, recs[i]).Item
			if it.Outcome != room.OutcomeStored {
				t.Fatalf("record a%02d: %+v", i, it)
			}
			seq = it.StreamSeq
		}
		return seq
	}
	store(0, 10)
	filler := make([]byte, 950_000)
	for range 9 {
		if _, err := e.Js.Publish(ctx, "rooms.filler.exec", filler); err != nil {
			t.Fatal(err)
		}
	}
	last := store(10, 15)
	e.Stop()
	e.Damage([]byte("key-a05"))
	e.Start()

	g = roomtest.AttestingGate(e, e.Nc, key, nil, ingest.GateOptions{})
	sv, err := g.Survey(ctx)
	want := ingest.DamagedRoom{RoomID: roomID, RecordsLost: 5, RecordsBefore: last}
	if err != nil || len(sv.DamagedRooms) != 1 || sv.DamagedRooms[0] != want {
		t.Fatalf("survey: %+v, %v; want %+v", sv.DamagedRooms, err, want)
	}
	it := g.AppendRecord(ctx, recs[15]).Item
	if it.Code != events.StoreLost || !strings.Contains(it.Reason, fmt.Sprintf("(5 records lost before the record at stream seq %d)", last)) {
		t.Fatalf("record before the notice: %+v", it)
	}
	n, _, err := g.AcknowledgeLoss(ctx, roomID, time.Now())
	if err != nil || n.Records == nil || *n.Records != (room.NoticedRecords{Lost: 5, Before: last}) || len(n.Chains) != 0 || n.Checkpoint != nil {
		t.Fatalf("notice: %+v, %v", n, err)
	}
	if it := g.AppendRecord(ctx, recs[15]).Item; it.Outcome != room.OutcomeStored {
		t.Fatalf("record after the notice: %+v", it)
	}
}

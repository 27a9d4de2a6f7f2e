package ingest_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// TestStoreLostClosesChain: a flipped byte in a block file makes the
// server, rebuilding its state on restart, drop the rest of that block:
// chain A loses positions 50..99 from inside the stream, as in a real
// store whose later block survives. The gate then refuses every item
// sent to A (store_lost, naming the positions and the stream sequences
// around them), resent old lines included, and A's head says what is
// lost; chain B, stored in the later block, and a new chain C go on. A
// fresh gate's survey finds A without any append.
func TestStoreLostClosesChain(t *testing.T) {
	e := roomtest.NewEnv(t)
	const roomID = "room:lossy"
	a, _ := roomtest.Journal(t, "run-a", "cap-a", 160)
	b, _ := roomtest.Journal(t, "run-b", "cap-b", 110)
	at100 := e.ChainWithHole(roomID, a, b)

	st, err := e.Stream.Info(context.Background())
	// Lost: A's positions 50..99 (stream seqs 51..100) and the fillers
	// in the same block.
	if err != nil || st.State.LastSeq != at100+49 || st.State.FirstSeq != 1 || st.State.NumDeleted < 50 || st.State.NumDeleted > 59 {
		t.Fatalf("after the damage: %+v, %v; want stream seqs 51..100 and up to 9 fillers deleted", st.State, err)
	}
	keyA := events.ChainKey{RunID: "run-a", CapsuleID: "cap-a"}
	wantLoss := &room.ChainLoss{Count: 50, Stored: 100, Missing: []room.LostRun{{From: 50, To: 99, After: 50, Before: at100}}}
	wantReason := fmt.Sprintf("the store lost 50 of the chain's 150 acknowledged entries, positions 50-99 (between stream seqs 50 and %d); the chain is closed, as an append would build on the hole", at100)

	// The next lines of A, and a resent old one: refused, nothing stored.
	for _, part := range [][]*events.Entry{a[150:155], a[10:11], a[50:51]} {
		r := e.ShipJournal(roomID, roomtest.Lines(part))
		if r.Stored != 0 || r.Dupes != 0 || r.Refused != 1 || r.Skipped != len(part)-1 {
			t.Fatalf("lines %d.. of A: %+v", roomtest.SeqOf(r.Items[0]), r)
		}
		it := r.Items[0]
		if it.Code != events.StoreLost || it.Reason != wantReason || it.At == nil || it.At.Line != 1 {
			t.Fatalf("refusal: %+v", it)
		}
		if !reflect.DeepEqual(r.Head.Lost, wantLoss) || r.Head.Next != 150 {
			t.Fatalf("head in the reply: %+v (lost %+v)", r.Head, r.Head.Lost)
		}
	}
	head, err := e.Gate.Head(context.Background(), keyA)
	if err != nil || !reflect.DeepEqual(head.Lost, wantLoss) || head.Next != 150 || head.Head != a[149].EntryHash() {
		t.Fatalf("head of A: %+v (lost %+v), %v", head, head.Lost, err)
	}
	if got := e.State(); got.LastSeq != at100+49 {
		t.Fatalf("refusals stored something: %+v", got)
	}
	if d := e.Gate.Damaged(); len(d) != 1 || d[0].RoomID != roomID || d[0].Chain != keyA || !reflect.DeepEqual(&d[0].Loss, wantLoss) {
		t.Fatalf("damaged: %+v", d)
	}

	// B lost nothing (its entries are all stored): it goes on, as does a
	// new chain in the same room.
	if r := e.ShipJournal(roomID, roomtest.Lines(b[100:])); r.Stored != 10 || r.Refused != 0 || r.Head.Lost != nil {
		t.Fatalf("B goes on: %+v", r)
	}
	c, body := roomtest.Journal(t, "run-c", "cap-c", 5)
	if r := e.ShipJournal(roomID, body); r.Stored != len(c) || r.Head.Lost != nil {
		t.Fatalf("new chain C: %+v", r)
	}

	// A fresh gate, which no append has used yet: its survey finds A.
	g := e.NewGate(e.Connect())
	sv, err := g.Survey(context.Background())
	if err != nil || sv.ChainsSeen != 3 || sv.RoomsSeen != 2 || len(sv.Damaged) != 1 || sv.Damaged[0].Chain != keyA ||
		!reflect.DeepEqual(&sv.Damaged[0].Loss, wantLoss) || len(sv.DamagedRooms) != 0 {
		t.Fatalf("survey: %+v, %v", sv, err)
	}
	if !strings.Contains(sv.Damaged[0].Loss.String(), fmt.Sprintf("positions 50-99 (between stream seqs 50 and %d)", at100)) {
		t.Fatalf("loss named: %s", sv.Damaged[0].Loss.String())
	}
}

// TestStoreLostStateFileKept: the block is damaged but the server's state
// file is kept, so the server still counts the message (no deletion, the
// subject's count unchanged) and nothing but a read finds it. A resent
// line of a position the store still holds is decided on that entry alone
// (a duplicate); one of the lost position makes the gate read the chain:
// it finds position 50 missing and closes the chain (store_lost naming
// it), where it used to fail the line as not decided ("run again") on
// every try.
func TestStoreLostStateFileKept(t *testing.T) {
	e := roomtest.NewEnv(t)
	const roomID = "room:kept"
	a, _ := roomtest.Journal(t, "run-a", "cap-a", 100)
	if r := e.ShipJournal(roomID, roomtest.Lines(a)); r.Stored != 100 {
		t.Fatalf("ship: %+v", r)
	}
	e.Stop()
	e.DamageKeepingState([]byte(a[50].EntryHash()))
	e.Start()
	if st, _ := e.Stream.Info(context.Background()); st.State.Msgs != 100 || st.State.NumDeleted != 0 {
		t.Fatalf("the server's view: %+v; want all 100 counted", st.State)
	}
	if it := e.ShipJournal(roomID, roomtest.Lines(a[10:11])).Items[0]; it.Outcome != room.OutcomeDuplicate || it.StreamSeq != 11 {
		t.Fatalf("resent line of a position still held: %+v", it)
	}
	r := e.ShipJournal(roomID, roomtest.Lines(a[50:51]))
	it := r.Items[0]
	if it.Outcome != room.OutcomeRefused || it.Code != events.StoreLost || !strings.Contains(it.Reason, "the store lost 1 of the chain's 100 acknowledged entries, positions 50 (between stream seqs 50 and 52)") {
		t.Fatalf("resent line: %+v", it)
	}
	if d := e.Gate.Damaged(); len(d) != 1 || d[0].Loss.Count != 1 {
		t.Fatalf("damaged: %+v", d)
	}
}

// TestStoreLostCountsStale: a block whose tail was lost while the
// server's state file was kept: the server shows the messages deleted,
// but its per-subject counts still hold them, so no chain looks short by
// its count. A chain whose messages span the deleted stream seqs is read:
// the survey finds A's lost positions, its next lines are refused
// store_lost, and B, stored after the deleted seqs, is not read and goes
// on.
func TestStoreLostCountsStale(t *testing.T) {
	e := roomtest.NewEnv(t)
	const roomID = "room:stale"
	a, _ := roomtest.Journal(t, "run-a", "cap-a", 160)
	b, _ := roomtest.Journal(t, "run-b", "cap-b", 110)
	for _, part := range [][]*events.Entry{a[:100], nil, b[:100], a[100:150]} {
		if part == nil { // over a block's worth of messages the gate never sees
			filler := make([]byte, 950_000)
			for range 9 {
				if _, err := e.Js.Publish(context.Background(), "rooms.filler.exec", filler); err != nil {
					t.Fatal(err)
				}
			}
			continue
		}
		if r := e.ShipJournal(roomID, roomtest.Lines(part)); r.Stored != len(part) {
			t.Fatalf("ship: %+v", r)
		}
	}
	e.Stop()
	e.TruncateBlockAt([]byte(a[50].EntryHash()))
	e.Start()
	if n := e.CountOn("rooms.stale.journal.run-a.cap-a"); n != 150 {
		t.Fatalf("the server counts %d messages on A's subject; the test wants its stale count, 150", n)
	}
	sv, err := e.NewGate(e.Connect()).Survey(context.Background())
	if err != nil || len(sv.Damaged) != 1 || sv.Damaged[0].Chain.RunID != "run-a" || sv.Damaged[0].Loss.Count != 50 ||
		!strings.HasPrefix(sv.Damaged[0].Loss.String(), "positions 50-99 (between stream seqs 50 and ") {
		t.Fatalf("survey: %+v, %v", sv, err)
	}
	r := e.ShipJournal(roomID, roomtest.Lines(a[150:155]))
	if r.Stored != 0 || r.Refused != 1 || r.Items[0].Code != events.StoreLost {
		t.Fatalf("A's next lines: %+v", r)
	}
	if r := e.ShipJournal(roomID, roomtest.Lines(b[100:])); r.Stored != 10 || r.Head.Lost != nil {
		t.Fatalf("B goes on: %+v", r)
	}
}

// TestStoreLostLastUnreadable: without a publisher key, a chain whose last
// message the server counts but can no longer read (its state file kept)
// looked new to the gate (no last message on its subject), and a re-ship
// stored it a second time. The gate counts the subject's messages when it
// finds no last one, reads the chain and closes it (store_lost naming
// the position); a fresh gate's survey finds it too.
func TestStoreLostLastUnreadable(t *testing.T) {
	e := roomtest.NewEnv(t)
	const roomID = "room:lastgone"
	a, body := roomtest.Journal(t, "run-a", "cap-a", 100)
	if r := e.ShipJournal(roomID, body); r.Stored != 100 {
		t.Fatalf("ship: %+v", r)
	}
	e.Stop()
	e.DamageKeepingState([]byte(a[99].EntryHash()))
	e.Start()
	sv, err := e.NewGate(e.Connect()).Survey(context.Background())
	if err != nil || len(sv.Damaged) != 1 || sv.Damaged[0].Loss.String() != "positions 99 (after stream seq 99)" {
		t.Fatalf("survey: %+v, %v", sv, err)
	}
	before := e.State()
	r := e.ShipJournal(roomID, body)
	it := r.Items[0]
	if r.Stored != 0 || r.Refused != 1 || it.Code != events.StoreLost ||
		!strings.Contains(it.Reason, "the store lost at least 1 of the chain's 100 or more acknowledged entries (its end was lost: entries acknowledged after it, lost with it, leave no trace), positions 99 (after stream seq 99)") {
		t.Fatalf("re-ship: stored %d, dupes %d, refused %d, skipped %d; first %+v", r.Stored, r.Dupes, r.Refused, r.Skipped, it)
	}
	if got := e.State(); got.LastSeq != before.LastSeq {
		t.Fatalf("the re-ship stored something: last seq %d, was %d", got.LastSeq, before.LastSeq)
	}
	if h, err := e.Gate.Head(context.Background(), events.ChainKey{RunID: "run-a", CapsuleID: "cap-a"}); err != nil || h.Lost == nil || h.Next != 99 {
		t.Fatalf("head: %+v, %v", h, err)
	}
}

// TestStoreLostAttested: with a publisher key, a batch the store damaged
// is not admitted, and that is the store's loss, not a forgery. A fresh
// gate reads the chain's positions, finds the lost ones and closes the
// chain and its room (store_lost): a message the server still counts but
// cannot read (its state file kept), in the chain's only batch or in one
// after an admitted batch; and a batch whose end the server dropped (a
// torn record cut the block), which the messages left on the subject
// alone would not show, but whose attestation says how many it held; and
// a chain whose last message the server counts but returns none for (its
// head read finds no chain). A whole re-ship stores nothing: the chain is
// not stored a second time after the damage.
func TestStoreLostAttested(t *testing.T) {
	const roomID, subj = "room:kept", "rooms.kept.journal.run-a.cap-a"
	for _, tc := range []struct {
		name    string
		batches []int // lines per request
		damage  func(e *roomtest.Env, a []*events.Entry)
		loss    string // the loss as the reason names it
		lost    int64
		// surveyed: a fresh gate's survey, which reads each chain's last
		// message and no other, finds the loss without an append (a
		// message the server counts but cannot read takes a read of the
		// chain: an append, or serve --checkpoint-full-read).
		surveyed bool
	}{
		{"unreadable in the only batch", []int{200},
			func(e *roomtest.Env, a []*events.Entry) { e.DamageKeepingState([]byte(a[126].EntryHash())) },
			"lost 1 entries, positions 126 (between stream seqs 126 and 128)", 1, false},
		{"unreadable after an admitted batch", []int{100, 100},
			func(e *roomtest.Env, a []*events.Entry) { e.DamageKeepingState([]byte(a[150].EntryHash())) },
			"lost 1 entries, positions 150 (between stream seqs 150 and 152)", 1, false},
		{"the chain's last message unreadable", []int{200},
			func(e *roomtest.Env, a []*events.Entry) { e.DamageKeepingState([]byte(a[199].EntryHash())) },
			"lost at least 1 entries, positions 199 (after stream seq 199)", 1, true},
		{"batch cut at its end", []int{200},
			func(e *roomtest.Env, a []*events.Entry) { e.CutBlockAt(subj, 126) },
			"lost at least 74 entries, positions 126-199 (after stream seq 126)", 74, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := roomtest.NewEnv(t)
			key := roomtest.NewPublisherKey(t)
			a, _ := roomtest.Journal(t, "run-a", "cap-a", 200)
			ship := func(g *ingest.Gate, part []*events.Entry) room.JournalReply {
				t.Helper()
				r, err := g.AppendJournal(context.Background(), roomID, roomtest.Lines(part), nil)
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			g := roomtest.AttestingGate(e, e.Nc, key, nil, ingest.GateOptions{})
			from := 0
			for _, n := range tc.batches {
				if r := ship(g, a[from:from+n]); r.Stored != n {
					t.Fatalf("ship %d..: %+v", from, r)
				}
				from += n
			}
			e.Stop()
			tc.damage(e, a)
			e.Start()
			before := e.State()
			g = roomtest.AttestingGate(e, e.Nc, key, nil, ingest.GateOptions{})
			r := ship(g, a)
			it := r.Items[0]
			// With a publisher key the loss blocks the whole room
			// until a loss notice covers it (TestLossNoticeOpensRoom).
			want := "the store lost acknowledged messages of room room:kept (chain run-a/cap-a " + tc.loss + ")"
			if r.Stored != 0 || r.Dupes != 0 || r.Refused != 1 || r.Skipped != 199 || it.Code != events.StoreLost || !strings.Contains(it.Reason, want) {
				t.Fatalf("re-ship: stored %d, dupes %d, refused %d, skipped %d; first %+v; want the reason to hold %q", r.Stored, r.Dupes, r.Refused, r.Skipped, it, want)
			}
			if got := e.State(); got.LastSeq != before.LastSeq {
				t.Fatalf("the re-ship stored something: last seq %d, was %d", got.LastSeq, before.LastSeq)
			}
			d := g.Damaged()
			if len(d) != 1 || d[0].Chain != (events.ChainKey{RunID: "run-a", CapsuleID: "cap-a"}) || d[0].Loss.Count != tc.lost || d[0].Loss.Stored != 200-tc.lost {
				t.Fatalf("damaged: %+v", d)
			}
			sv, err := roomtest.AttestingGate(e, e.Nc, key, nil, ingest.GateOptions{}).Survey(context.Background())
			if err != nil || len(sv.Damaged) != map[bool]int{true: 1}[tc.surveyed] || (tc.surveyed && sv.Damaged[0].Loss.String() != d[0].Loss.String()) {
				t.Fatalf("survey (finds it: %v): %+v, %v", tc.surveyed, sv, err)
			}
		})
	}
}

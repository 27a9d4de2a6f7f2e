package ingest_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// TestResentLineInLongChain: an old line resent into a long chain is
// answered as in a short one (a duplicate at its stream seq, another entry
// at its position a fork naming the stored one), and finding the stored
// entry reads about as many messages in a chain of 3,000 entries as in
// one of 20: a search, not the chain. The chains are interleaved with
// another, as a busy room has them. With and without a publisher key.
func TestResentLineInLongChain(t *testing.T) {
	e := roomtest.NewEnv(t)
	for _, keyed := range []bool{false, true} {
		t.Run(fmt.Sprint("keyed=", keyed), func(t *testing.T) {
			var reads atomic.Uint64
			o := ingest.WithEntryReads(ingest.GateOptions{Validator: e.V}, &reads)
			g := newGate(t, e, o)
			if keyed {
				g = roomtest.AttestingGate(e, e.Nc, roomtest.NewPublisherKey(t), nil, o)
			}
			roomID := fmt.Sprint("room:resent-", keyed)
			run := fmt.Sprint("run-", keyed)
			short, _ := roomtest.Journal(t, run, "short", 20)
			long, _ := roomtest.Journal(t, run, "long", 3000)
			noise, _ := roomtest.Journal(t, run, "noise", 600)
			ship := func(es []*events.Entry) room.JournalReply {
				t.Helper()
				r, err := g.AppendJournal(t.Context(), roomID, roomtest.Lines(es), nil)
				if err != nil || r.Stored != len(es) {
					t.Fatalf("ship %d lines: %+v %v", len(es), r, err)
				}
				return r
			}
			shortSeq := ship(short).Items[7].StreamSeq
			seqs := map[int]uint64{}
			for i := 0; i < len(long); i += 500 {
				r := ship(long[i : i+500])
				for k, it := range r.Items {
					seqs[i+k] = it.StreamSeq
				}
				ship(noise[i/5 : i/5+100])
			}

			resend := func(e *events.Entry) (room.ItemResult, uint64) {
				t.Helper()
				reads.Store(0)
				r, err := g.AppendJournal(t.Context(), roomID, roomtest.Lines([]*events.Entry{e}), nil)
				if err != nil || len(r.Items) != 1 {
					t.Fatalf("resend: %+v %v", r, err)
				}
				return r.Items[0], reads.Load()
			}
			it, inShort := resend(short[7])
			if it.Outcome != room.OutcomeDuplicate || it.StreamSeq != shortSeq {
				t.Fatalf("short chain, line 7: %+v, want duplicate at %d", it, shortSeq)
			}
			var inLong uint64
			for _, pos := range []int{0, 7, 1499, 2999} {
				it, n := resend(long[pos])
				if it.Outcome != room.OutcomeDuplicate || it.StreamSeq != seqs[pos] || it.Subject != fmt.Sprintf("rooms.resent-%v.journal.%s.long", keyed, run) {
					t.Fatalf("long chain, line %d: %+v, want duplicate at %d", pos, it, seqs[pos])
				}
				inLong = max(inLong, n)
			}
			alt, err := events.NewEntry(roomtest.Mutate(long[7].Object(), "kind", "other.kind"))
			if err != nil {
				t.Fatal(err)
			}
			it, n := resend(alt)
			if it.Outcome != room.OutcomeRefused || it.Code != events.Fork || it.Problems[0].Expected != long[7].EntryHash() || it.Problems[0].Actual != alt.EntryHash() {
				t.Fatalf("fork at line 7 of the long chain: %+v", it)
			}
			inLong = max(inLong, n)
			// About log2 of the stream seqs searched (3,700) + 2 gets, and
			// 4 counts; the short chain's search spans fewer seqs.
			if inShort == 0 || inLong > 20 || inShort > inLong {
				t.Fatalf("messages read to find a resent line's entry: %d in a chain of 20, %d in one of 3,000", inShort, inLong)
			}
			t.Logf("messages read: %d in a chain of 20, at most %d in one of 3,000", inShort, inLong)
		})
	}
}

// TestResentLineAroundTheGate: a chain whose subject holds a message
// written around the gate (no publisher key) is not what the search can
// vouch for: the gate reads the chain, and the resent line is decided on
// the chain's n-th message as before.
func TestResentLineAroundTheGate(t *testing.T) {
	e := roomtest.NewEnv(t)
	var reads atomic.Uint64
	g := newGate(t, e, ingest.WithEntryReads(ingest.GateOptions{Validator: e.V}, &reads))
	es, _ := roomtest.Journal(t, "run-around", "cap", 40)
	r, err := g.AppendJournal(t.Context(), "room:around", roomtest.Lines(es), nil)
	if err != nil || r.Stored != 40 {
		t.Fatalf("ship: %+v %v", r, err)
	}
	// A copy of entry 30 published straight onto the chain's subject: it
	// is the chain's head now (position 30 again, as the gate reads it).
	if _, err := e.Js.Publish(t.Context(), "rooms.around.journal.run-around.cap", es[30].Canonical()); err != nil {
		t.Fatal(err)
	}
	// A gate that reads the chain's head from the stream (as after a
	// restart).
	g = newGate(t, e, ingest.WithEntryReads(ingest.GateOptions{Validator: e.V}, &reads))
	reads.Store(0)
	r, err = g.AppendJournal(t.Context(), "room:around", roomtest.Lines(es[12:13]), nil)
	if err != nil || r.Items[0].Outcome != room.OutcomeDuplicate || r.Items[0].StreamSeq != 13 {
		t.Fatalf("resent line 12: %+v %v", r, err)
	}
	if n := reads.Load(); n < 41 {
		t.Fatalf("%d messages read: the chain was not read through", n)
	}
}

// newGate is a gate of e's stream with options o.
func newGate(t *testing.T, e *roomtest.Env, o ingest.GateOptions) *ingest.Gate {
	t.Helper()
	g, err := ingest.NewGate(t.Context(), e.Nc, o)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

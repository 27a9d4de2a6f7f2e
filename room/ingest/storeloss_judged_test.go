package ingest_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// TestStoreLostJudgedOnce: judging a damaged chain reads it whole from
// the stream leader, one get a message. Once the survey has judged it,
// a Head (which keeps no chain state of its own), a Head after the
// chain was dropped idle, and an append are answered from the verdict
// kept for the damaged chain, with no read of the chain, as long as the chain's
// subjects hold what they held; a new loss generation (Recheck) judges
// it again. Before, every head request read the chain again, and a
// 150,000-entry chain took longer than the client's timeout on each.
func TestStoreLostJudgedOnce(t *testing.T) {
	const roomID, subj = "room:judged", "rooms.judged.journal.run-a.cap-a"
	key := events.ChainKey{RunID: "run-a", CapsuleID: "cap-a"}
	for _, tc := range []struct {
		name   string
		attest bool
		damage func(e *roomtest.Env, a []*events.Entry)
		loss   string
		passes int // whole reads of the chain the first judgment takes
	}{
		{"attested, last message unreadable", true,
			func(e *roomtest.Env, a []*events.Entry) { e.DamageKeepingState([]byte(a[199].EntryHash())) },
			"positions 199 (after stream seq 199)", 1},
		{"attested, batch cut at its end", true,
			func(e *roomtest.Env, a []*events.Entry) { e.CutBlockAt(subj, 126) },
			"positions 126-199 (after stream seq 126)", 2},
		{"keyless, last message unreadable", false,
			func(e *roomtest.Env, a []*events.Entry) { e.DamageKeepingState([]byte(a[199].EntryHash())) },
			"positions 199 (after stream seq 199)", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := roomtest.NewEnv(t)
			pub := roomtest.NewPublisherKey(t)
			gate := func(o ingest.GateOptions) *ingest.Gate {
				if tc.attest {
					return roomtest.AttestingGate(e, e.Nc, pub, nil, o)
				}
				o.Validator = e.V
				g, err := ingest.NewGate(context.Background(), e.Nc, o)
				if err != nil {
					t.Fatal(err)
				}
				return g
			}
			a, _ := roomtest.Journal(t, "run-a", "cap-a", 200)
			if r, err := gate(ingest.GateOptions{}).AppendJournal(context.Background(), roomID, roomtest.Lines(a), nil); err != nil || r.Stored != 200 {
				t.Fatalf("ship: %+v %v", r, err)
			}
			e.Stop()
			tc.damage(e, a)
			e.Start()

			var gets atomic.Uint64
			g := gate(ingest.WithLeaderGets(ingest.GateOptions{}, &gets))
			sv, err := g.Survey(context.Background())
			if err != nil || len(sv.Damaged) != 1 || sv.Damaged[0].Loss.String() != tc.loss {
				t.Fatalf("survey: %+v, %v", sv, err)
			}
			// The first judgment reads the chain whole from the leader
			// once for a last message the server cannot return (that
			// read gives the admitted head and the lost positions too);
			// a cut batch whose last message it returns takes the head's
			// scan and the loss's read.
			if n := gets.Load(); n < 100 || n > uint64(tc.passes*200+10) {
				t.Fatalf("the survey's judgment got %d messages from the leader, want %d whole reads of the chain's 200", n, tc.passes)
			}
			head := func(what string) {
				t.Helper()
				gets.Store(0)
				h, err := g.Head(context.Background(), key)
				if err != nil || h.Lost == nil || h.Lost.String() != tc.loss || h.RoomID != roomID {
					t.Fatalf("%s: %+v, %v", what, h, err)
				}
				if n := gets.Load(); n != 0 {
					t.Errorf("%s: %d messages got from the leader, want 0 (the verdict kept)", what, n)
				}
			}
			head("head")
			head("head again")
			g.SweepChains()
			head("head after a sweep")
			gets.Store(0)
			r, err := g.AppendJournal(context.Background(), roomID, roomtest.Lines(a[199:]), nil)
			if err != nil || r.Refused != 1 || r.Items[0].Code != events.StoreLost {
				t.Fatalf("append: %+v, %v", r, err)
			}
			if n := gets.Load(); n > 1 {
				t.Errorf("append: %d messages got from the leader, want at most the chain's last (an append reads it from the leader)", n)
			}
			// A new loss generation: judged again, from the stream.
			g.Recheck()
			gets.Store(0)
			if h, err := g.Head(context.Background(), key); err != nil || h.Lost == nil || h.Lost.String() != tc.loss {
				t.Fatalf("head after Recheck: %+v, %v", h, err)
			}
			if n := gets.Load(); n < 100 {
				t.Errorf("head after Recheck got %d messages from the leader; want the chain read again", n)
			}
			if st := e.State(); st.LastSeq == 0 || e.CountOn(subj) == 0 {
				t.Fatalf("state %+v", st)
			}
		})
	}
}

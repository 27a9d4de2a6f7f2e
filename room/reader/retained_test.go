package reader_test

import (
	"testing"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
)

// TestAuditRetainedFlat: what an audit's reader retains while it reads
// one chain does not grow with the chain. The chain is written as the
// gate and a checkpointer write it: batches of 100 entries, one signature
// each, and after every 10 batches a checkpoint of the room as it was one
// batch before (the checkpointer a little behind). The largest state the
// reader held over 10,000 entries is the one it held over 2,000, every
// entry is served, and every checkpoint verified.
func TestAuditRetainedFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("12,000 entries")
	}
	oneBatchBehind := func(_, before uint64) uint64 { return before }
	peak := func(n int) reader.Retained { return retainedPeak(t, n, checkpoint.LeafBounds{}, oneBatchBehind) }
	small, large := peak(2000), peak(10000)
	if large != small {
		t.Errorf("retained at most %+v over 10,000 entries, %+v over 2,000: it grows with the chain", large, small)
	}
	// The checkpoint lags a batch behind ten: at most 11 batches of leaves
	// past it, and the queue holds what waits for the next checkpoint.
	if small.Leaves > 1100 || small.Queued > 1100 || small.Chains != 1 || small.Rooms != 1 {
		t.Errorf("retained at most %+v over 2,000 entries", small)
	}
}

// retainedPeak feeds n entries of one chain to an audit's reader whose
// leaves in memory b bounds, written as the gate and a checkpointer write
// them: batches of 100 entries, one signature each, and after every 10
// batches a checkpoint at the size ckAt picks from the room's size now
// and one batch before. It fails unless every entry is served and every
// checkpoint verified, and returns the most the reader retained.
func retainedPeak(t *testing.T, n int, b checkpoint.LeafBounds, ckAt func(now, before uint64) uint64) reader.Retained {
	t.Helper()
	pub := roomtest.NewHostKey(t)
	v := roomtest.ReferenceOnly(t)
	trust := roomtest.Trusting(t, pub)
	signer, err := checkpoint.NewNoteSigner(pub)
	if err != nil {
		t.Fatal(err)
	}
	a := &roomtest.Attestor{T: t, Key: pub, Room: roomtest.AttRoom, Tree: checkpoint.NewTree()}
	es, _ := roomtest.Journal(t, "run-flat", "cap-flat", n)
	feed, end, retained := reader.AuditFeedRetainedBounded(v, room.Subjects{}, trust, b)
	var most reader.Retained
	seq, served, checkpoints := uint64(0), 0, 0
	count := func(vs []reader.Verdict) {
		for _, vd := range vs {
			switch {
			case vd.Aside != nil:
				t.Fatalf("%d entries: set aside %s", n, vd.Aside.Error())
			case vd.Event != nil:
				served++
			default:
				checkpoints++
			}
		}
	}
	var before uint64 // the room's size one batch ago
	for i := 0; i < n; i += 100 {
		ms := make([]roomtest.AttMsg, 0, 100)
		for _, e := range es[i:min(i+100, n)] {
			m := a.EntryMsg(e)
			a.Leaf(checkpoint.LeafHash(a.Room, m.Subject, checkpoint.ContentHash(m.Data)))
			ms = append(ms, m)
		}
		for j, h := range a.Sign(ms) {
			seq++
			count(feed(reader.StreamMsg{Subject: ms[j].Subject, Seq: seq, Data: ms[j].Data, Attestation: h}))
			most = most.Max(retained())
		}
		if (i/100)%10 == 9 {
			size := ckAt(a.Tree.Size(), before)
			root, err := a.Tree.RootAt(size)
			if err != nil {
				t.Fatal(err)
			}
			note, err := checkpoint.Sign(signer, a.Room, size, root)
			if err != nil {
				t.Fatal(err)
			}
			seq++
			count(feed(reader.StreamMsg{Subject: room.Subjects{}.Checkpoint(a.Room), Seq: seq, Data: note}))
			most = most.Max(retained())
		}
		before = a.Tree.Size()
	}
	count(end())
	if served != n || checkpoints != n/1000 {
		t.Fatalf("%d entries: %d served, %d checkpoints verified (want %d)", n, served, checkpoints, n/1000)
	}
	return most
}

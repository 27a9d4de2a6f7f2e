package checkpointer

import (
	"fmt"
	"testing"

	"github.com/roompub/roompub/room"
)

// ownBatchOf returns n stored messages of one batch (headers "b i/n").
func ownBatchOf(name string, n int) []room.StoredMsg {
	out := make([]room.StoredMsg, n)
	for i := range out {
		// The compact form: the batch's signature (here its name) on its
		// last message only.
		h := fmt.Sprintf("node:x %d/%d", i, n)
		if i == n-1 {
			h = fmt.Sprintf("node:x %s %d/%d", name, i, n)
		}
		out[i] = room.StoredMsg{Subject: "s", Header: h, Content: [32]byte{byte(i)}}
	}
	return out
}

func newAckedOwn(max int) *ackedOwn {
	a := &ackedOwn{}
	a.init()
	a.max = max
	return a
}

// TestAckedOwnWholeBatches: a batch is kept whole or not at all, taken only
// at its first sequence and whole, and forgotten once follow read past its
// first sequence (a read landing inside it reads the rest too).
func TestAckedOwnWholeBatches(t *testing.T) {
	t.Run("cap applies per whole batch", func(t *testing.T) {
		a := newAckedOwn(5)
		a.stored(10, ownBatchOf("a", 3))
		a.stored(13, ownBatchOf("b", 3)) // 3+3 > 5: not kept, not even 2 of it
		if a.kept != 3 || len(a.batches) != 1 || a.skipped.Load() != 1 {
			t.Fatalf("kept %d in %d batches, %d skipped; want 3 in 1, 1 skipped", a.kept, len(a.batches), a.skipped.Load())
		}
		if b, ok := a.take(13); ok {
			t.Fatalf("took %d messages of the batch that did not fit", len(b))
		}
		b, ok := a.take(10)
		if !ok || len(b) != 3 || b[2].Header != "node:x a 2/3" || a.kept != 0 || a.floor != 13 {
			t.Fatalf("take(10) = %d messages, %v; kept %d, floor %d", len(b), ok, a.kept, a.floor)
		}
		a.stored(16, ownBatchOf("c", 5)) // fits exactly now
		if b, ok := a.take(16); !ok || len(b) != 5 {
			t.Fatalf("take(16) = %d messages, %v", len(b), ok)
		}
		a.stored(21, ownBatchOf("d", 6)) // larger than the cap: never kept
		if _, ok := a.take(21); ok || a.skipped.Load() != 2 {
			t.Fatalf("a batch larger than the cap was kept (skipped %d)", a.skipped.Load())
		}
	})
	t.Run("taken only at its first sequence", func(t *testing.T) {
		a := newAckedOwn(100)
		a.stored(10, ownBatchOf("a", 4))
		for _, s := range []uint64{9, 11, 13, 14} {
			if _, ok := a.take(s); ok {
				t.Fatalf("take(%d) found a batch that starts at 10", s)
			}
		}
		if b, ok := a.take(10); !ok || len(b) != 4 {
			t.Fatalf("take(10) = %d messages, %v", len(b), ok)
		}
		if _, ok := a.take(10); ok {
			t.Fatal("a batch taken twice")
		}
	})
	t.Run("a read inside a batch drops it", func(t *testing.T) {
		a := newAckedOwn(100)
		a.stored(10, ownBatchOf("a", 4))
		a.stored(14, ownBatchOf("b", 2))
		a.advance(11) // message 10 was read from the stream
		if _, ok := a.take(11); ok {
			t.Fatal("the rest of a batch whose first message was read was taken from memory")
		}
		if a.kept != 2 || a.skipped.Load() != 1 {
			t.Fatalf("kept %d, skipped %d; want 2, 1", a.kept, a.skipped.Load())
		}
		a.advance(14) // 11..13 read too: batch b is next, whole
		if b, ok := a.take(14); !ok || len(b) != 2 {
			t.Fatalf("take(14) = %d messages, %v", len(b), ok)
		}
	})
	t.Run("a late acknowledgement of what was read is not kept", func(t *testing.T) {
		a := newAckedOwn(100)
		a.advance(20)
		a.stored(12, ownBatchOf("a", 3))
		a.stored(19, ownBatchOf("b", 3)) // its first message was read
		if a.kept != 0 || a.skipped.Load() != 2 {
			t.Fatalf("kept %d, skipped %d; want 0, 2", a.kept, a.skipped.Load())
		}
		a.stored(20, ownBatchOf("c", 1))
		if b, ok := a.take(20); !ok || len(b) != 1 {
			t.Fatalf("take(20) = %d messages, %v", len(b), ok)
		}
	})
	t.Run("advance far scans the map", func(t *testing.T) {
		a := newAckedOwn(100)
		for s := uint64(100); s < 110; s += 2 {
			a.stored(s, ownBatchOf(fmt.Sprint("b", s), 2))
		}
		a.stored(1000, ownBatchOf("far", 2))
		a.advance(1 << 40)
		if a.kept != 0 || len(a.batches) != 0 || a.skipped.Load() != 6 || a.floor != 1<<40 {
			t.Fatalf("kept %d in %d batches, skipped %d, floor %d", a.kept, len(a.batches), a.skipped.Load(), a.floor)
		}
		a.advance(5) // never back
		if a.floor != 1<<40 {
			t.Fatalf("floor went back to %d", a.floor)
		}
	})
	t.Run("acknowledged batches are no longer in flight", func(t *testing.T) {
		a := newAckedOwn(1)
		for _, m := range ownBatchOf("a", 3) {
			a.expect(m.Header)
		}
		// The batch is known by its last message, which carries its
		// signature.
		if len(a.inflight) != 1 || a.expects.Load() != 1 {
			t.Fatalf("%d in flight, %d expects; want 1, 1", len(a.inflight), a.expects.Load())
		}
		a.stored(1, ownBatchOf("a", 3)) // not kept (cap 1), still acknowledged
		if len(a.inflight) != 0 {
			t.Fatalf("%d batches still in flight", len(a.inflight))
		}
	})
}

package reader_test

import (
	"context"
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
)

// TestAuditLeafBoundsLagging: an audit whose rooms' leaves in memory are
// bounded to a few (so nearly every leaf goes to the file, and checkpoints
// far behind the tree, truncations and rebuilds read leaves back) gives
// the verdicts, totals and checkpoint facts of an unbounded audit. The
// stream: one room's chain in batches, a checkpoint after every fifth
// batch covering only the first third of the room (some with a wrong
// root, one smaller than the one before), entries forged under a genuine
// header of another message (leaves refused once their batch is checked,
// the tree rebuilt without them), and a second room with no checkpoint at
// all.
func TestAuditLeafBoundsLagging(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	pub := roomtest.NewPublisherKey(t)
	trust := roomtest.Trusting(t, pub)
	a := roomtest.NewAttestor(t, e.Js, pub, roomtest.AttRoom)
	b := roomtest.NewAttestor(t, e.Js, pub, "room:attested-other")
	es, _ := roomtest.Journal(t, "run-lag", "cap-lag", 1200)
	other, _ := roomtest.Journal(t, "run-other", "cap-other", 330)
	forged, _ := roomtest.Journal(t, "run-forged", "cap-forged", 4)
	var last uint64
	wrong, smaller, forgedN := 0, 0, 0
	for i, batch := 0, 0; i < len(es); batch++ {
		n := 12
		if batch%17 == 16 && forgedN < len(forged) {
			// A batch of one whose header a forger copies.
			_, hs := a.Headers(es[i])
			a.ForgedEntry(forged[forgedN], hs[0])
			forgedN++
			i++
		} else {
			a.Entries(es[i:min(i+n, len(es))]...)
			i = min(i+n, len(es))
		}
		b.Entries(other[batch*3 : batch*3+3]...)
		if batch%5 != 4 {
			continue
		}
		s := a.Tree.Size() / 3
		if batch%35 == 34 && last > 0 {
			s = last - 1 // smaller than the one before: refused
			smaller++
		}
		root, err := a.Tree.RootAt(s)
		if err != nil {
			t.Fatal(err)
		}
		if batch%20 == 19 {
			root[0] ^= 1
			wrong++
		} else if s > last {
			last = s
		}
		a.CheckpointOf(s, root, a.Signer)
	}
	o := reader.AuditOptions{Validator: e.V, Trust: trust}
	full, err := reader.AuditLeafBounds(ctx, e.Js, o, checkpoint.LeafBounds{Window: math.MaxInt32})
	if err != nil {
		t.Fatal(err)
	}
	lean, err := reader.AuditLeafBounds(ctx, e.Js, o, checkpoint.LeafBounds{Window: 2, Chunk: 4, MaxChunks: 8})
	if err != nil {
		t.Fatal(err)
	}
	// A temporary directory that does not exist: the leaves stay in
	// memory, the report says why, the verdicts do not change.
	noDir := checkpoint.LeafBounds{Window: 2, Chunk: 4, MaxChunks: 8, Dir: filepath.Join(t.TempDir(), "missing")}
	inMemory, err := reader.AuditLeafBounds(ctx, e.Js, o, noDir)
	if err != nil {
		t.Fatal(err)
	}
	if wrong == 0 || smaller == 0 || forgedN != len(forged) || len(full.Violations) < wrong+smaller+forgedN {
		t.Fatalf("%d wrong, %d smaller checkpoints, %d forged entries: %d violations", wrong, smaller, forgedN, len(full.Violations))
	}
	if len(full.Checkpoints) != 2 || full.Checkpoints[0].Checkpoints == 0 || full.Checkpoints[1].Checkpoints != 0 {
		t.Fatalf("checkpoints %+v", full.Checkpoints)
	}
	for i, f := range full.Checkpoints {
		if f.LeavesSpilled != 0 || f.LeavesReread != 0 {
			t.Errorf("unbounded room %s: %d spilled, %d read back", f.RoomID, f.LeavesSpilled, f.LeavesReread)
		}
		l := lean.Checkpoints[i]
		if l.LeavesSpilled == 0 || i == 0 && l.LeavesReread == 0 {
			t.Errorf("bounded room %s: %d spilled, %d read back", l.RoomID, l.LeavesSpilled, l.LeavesReread)
		}
		l.LeavesSpilled, l.LeavesReread = 0, 0
		if !reflect.DeepEqual(f, l) {
			t.Errorf("room %s: bounded %+v, unbounded %+v", f.RoomID, l, f)
		}
		m := inMemory.Checkpoints[i]
		if m.LeavesSpilled != 0 || !strings.Contains(m.LeavesSpillFailed, "no such file or directory") {
			t.Errorf("room %s without its temporary directory: %d spilled, failure %q", m.RoomID, m.LeavesSpilled, m.LeavesSpillFailed)
		}
		m.LeavesSpillFailed, m.LeavesReread = "", 0
		if !reflect.DeepEqual(f, m) {
			t.Errorf("room %s: in memory %+v, unbounded %+v", f.RoomID, m, f)
		}
	}
	if !reflect.DeepEqual(full.Violations, inMemory.Violations) || !reflect.DeepEqual(full.Totals, inMemory.Totals) {
		t.Errorf("in memory: %+v %+v; unbounded: %+v %+v", inMemory.Totals, inMemory.Violations, full.Totals, full.Violations)
	}
	if !reflect.DeepEqual(full.Violations, lean.Violations) || !reflect.DeepEqual(full.Totals, lean.Totals) ||
		!reflect.DeepEqual(full.Chains, lean.Chains) {
		t.Errorf("bounded: %+v %+v; unbounded: %+v %+v", lean.Totals, lean.Violations, full.Totals, full.Violations)
	}
}

// TestAuditRetainedFlatLagging: with checkpoints that cover only the
// first tenth of the room, the leaves an audit holds in memory stay
// within its bounds (a window of 256 and a chunk of 64), the same over
// 12,000 entries as over 3,000, while the leaves no checkpoint covers
// grow with the chain (an unbounded reader holds them all); every entry is served and every checkpoint
// verified.
func TestAuditRetainedFlatLagging(t *testing.T) {
	if testing.Short() {
		t.Skip("27,000 entries")
	}
	bounds := checkpoint.LeafBounds{Window: 256, Chunk: 64}
	tenth := func(now, _ uint64) uint64 { return now / 10 }
	peak := func(n int, b checkpoint.LeafBounds) reader.Retained { return retainedPeak(t, n, b, tenth) }
	small, large := peak(3000, bounds), peak(12000, bounds)
	if large != small {
		t.Errorf("retained at most %+v over 12,000 entries, %+v over 3,000: it grows with the chain", large, small)
	}
	if small.Leaves >= bounds.Window+bounds.Chunk {
		t.Errorf("%d leaves held in memory, window %d, chunk %d", small.Leaves, bounds.Window, bounds.Chunk)
	}
	// Unbounded, the same reader holds every leaf no checkpoint covers.
	if all := peak(12000, checkpoint.LeafBounds{Window: math.MaxInt32}); all.Leaves < 10000 {
		t.Errorf("unbounded: %d leaves held in memory over 12,000 entries, a tenth covered", all.Leaves)
	}
}

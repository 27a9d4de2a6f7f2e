package checkpoint

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// The rules of Ledger, each with the value it must give and a case that
// passes it, so none can hold vacuously; every rule runs on a lean and a
// full ledger, which must agree.

const lRoom = "room:ledger"

// ledgers are the two kinds of Ledger, by name.
var ledgers = []struct {
	name string
	make func() *Ledger
}{{"lean", NewLedger}, {"full", NewFullLedger}}

// ledgerOf returns a ledger of kind mk holding the first n leaves of room.
func ledgerOf(mk func() *Ledger, room string, n int) *Ledger {
	l := mk()
	for i := range n {
		if got := l.Append(leafN(room, i)); got != uint64(i) {
			panic(fmt.Sprintf("Append returned index %d for leaf %d", got, i))
		}
	}
	return l
}

// ckAt is the checkpoint of room's first n leaves.
func ckAt(room string, n int) *Checkpoint {
	return &Checkpoint{Room: lRoom, Size: uint64(n), Root: treeOf(room, n).Root()}
}

// wantMismatch fails unless err is a mismatch whose text is want.
func wantMismatch(t *testing.T, err error, want string) {
	t.Helper()
	if !errors.Is(err, ErrCheckpointMismatch) || errors.Is(err, ErrRolledBack) || err.Error() != want {
		t.Fatalf("err = %v, want mismatch %q", err, want)
	}
}

func TestLedgerCheck(t *testing.T) {
	const room, other = "a", "b" // other: another room's leaves, another tree
	for _, k := range ledgers {
		t.Run(k.name, func(t *testing.T) {
			l := ledgerOf(k.make, room, 10)
			if l.Size() != 10 || l.Covered() != 0 {
				t.Fatalf("Size %d Covered %d", l.Size(), l.Covered())
			}
			if c, _ := l.Latest(); c != nil {
				t.Fatalf("Latest of a new ledger: %+v", c)
			}
			// No checkpoint yet: the root at its size decides.
			for _, n := range []int{0, 1, 4, 10} {
				if err := l.Check(ckAt(room, n)); err != nil {
					t.Fatalf("the tree's own checkpoint at %d: %v", n, err)
				}
			}
			wantMismatch(t, l.Check(ckAt(room, 11)), "it covers 11 messages, but only 10 admitted messages of the room precede it")
			wrong := ckAt(other, 4)
			wantMismatch(t, l.Check(wrong), fmt.Sprintf("root %s at size 4, but the room's admitted messages give %s", hexRoot(wrong.Root), hexRoot(treeOf(room, 4).Root())))

			// Accepted at 4, read at stream seq 40.
			c4 := ckAt(room, 4)
			if err := l.Accept(c4, 40); err != nil {
				t.Fatal(err)
			}
			if c, seq := l.Latest(); c != c4 || seq != 40 || l.Covered() != 4 {
				t.Fatalf("Latest %+v at %d, Covered %d", c, seq, l.Covered())
			}
			wantMismatch(t, l.Check(ckAt(room, 3)), "size 3 is smaller than the previous checkpoint's, 4 at stream seq 40")
			for _, n := range []int{4, 7, 10} {
				if err := l.Check(ckAt(room, n)); err != nil {
					t.Fatalf("checkpoint at %d after 4: %v", n, err)
				}
			}
			// At the latest's size another root; past it another tree
			// (the consistency proof fails, the root says why).
			wantMismatch(t, l.Check(ckAt(other, 4)), fmt.Sprintf("root %s at size 4, but the room's admitted messages give %s", hexRoot(ckAt(other, 4).Root), hexRoot(c4.Root)))
			wantMismatch(t, l.Check(ckAt(other, 7)), fmt.Sprintf("root %s at size 7, but the room's admitted messages give %s", hexRoot(ckAt(other, 7).Root), hexRoot(ckAt(room, 7).Root)))
			wantMismatch(t, l.Check(ckAt(room, 12)), "it covers 12 messages, but only 10 admitted messages of the room precede it")

			// The tree grows; a checkpoint at 12 is accepted.
			l.Append(leafN(room, 10))
			l.Append(leafN(room, 11))
			if err := l.Check(ckAt(room, 12)); err != nil {
				t.Fatal(err)
			}
			if err := l.Accept(ckAt(room, 12), 120); err != nil || l.Covered() != 12 {
				t.Fatalf("Accept: %v, Covered %d", err, l.Covered())
			}
			wantMismatch(t, l.Check(c4), "size 4 is smaller than the previous checkpoint's, 12 at stream seq 120")
		})
	}
}

// TestLedgerCheckConsistency: the consistency rule is checked, not only
// the root: a ledger whose latest checkpoint was accepted unchecked
// (another tree's root at its size) refuses the next checkpoint, whose
// root is the tree's, as not consistent with it.
func TestLedgerCheckConsistency(t *testing.T) {
	for _, k := range ledgers {
		t.Run(k.name, func(t *testing.T) {
			l := ledgerOf(k.make, "a", 10)
			if err := l.Accept(ckAt("b", 4), 9); err != nil { // no Check: the caller's mistake
				t.Fatal(err)
			}
			if err := l.Check(ckAt("a", 4)); err == nil {
				t.Fatal("the tree's root at the latest's size passed against another root")
			}
			err := l.Check(ckAt("a", 8))
			const want = "not consistent with the previous checkpoint (size 4 at stream seq 9): proof does not verify: consistency from size 4 to 8: "
			if !errors.Is(err, ErrCheckpointMismatch) || !errors.Is(err, ErrBadProof) || !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("err = %v, want %q...", err, want)
			}
		})
	}
}

func TestLedgerAccept(t *testing.T) {
	for _, k := range ledgers {
		t.Run(k.name, func(t *testing.T) {
			l := ledgerOf(k.make, "a", 6)
			if err := l.Accept(ckAt("a", 7), 1); !errors.Is(err, ErrTreeSize) {
				t.Fatalf("Accept past the tree: %v", err)
			}
			if c, _ := l.Latest(); c != nil || l.Covered() != 0 {
				t.Fatalf("a refused Accept changed the ledger: %+v", c)
			}
			if err := l.Accept(ckAt("a", 5), 2); err != nil {
				t.Fatal(err)
			}
			if err := l.Accept(ckAt("a", 4), 3); !errors.Is(err, ErrTreeSize) || l.Covered() != 5 {
				t.Fatalf("Accept below the latest: %v, Covered %d", err, l.Covered())
			}
			// The leaves a checkpoint covers stay; the others can go.
			if err := l.Truncate(4); !errors.Is(err, ErrTreeSize) || l.Size() != 6 {
				t.Fatalf("Truncate below the latest: %v, Size %d", err, l.Size())
			}
			if err := l.Truncate(5); err != nil || l.Size() != 5 {
				t.Fatalf("Truncate to the latest: %v, Size %d", err, l.Size())
			}
			if got := l.Append(leafN("a", 5)); got != 5 {
				t.Fatalf("Append after Truncate: index %d", got)
			}
			if r, err := l.RootAt(6); err != nil || r != treeOf("a", 6).Root() {
				t.Fatalf("root at 6: %x %v", r, err)
			}
			// A lean ledger keeps no root below its latest checkpoint, a
			// full one every root and proof.
			_, rerr := l.RootAt(3)
			p, perr := l.InclusionProof(2, 5)
			if k.name == "lean" {
				if !errors.Is(rerr, ErrTreeSize) || !errors.Is(perr, ErrTreeSize) {
					t.Fatalf("lean: root below the base %v, proof %v", rerr, perr)
				}
				return
			}
			if rerr != nil || perr != nil {
				t.Fatalf("full: %v %v", rerr, perr)
			}
			if err := VerifyInclusion(leafN("a", 2), 2, 5, p, ckAt("a", 5).Root); err != nil {
				t.Fatalf("full: inclusion proof: %v", err)
			}
		})
	}
}

// TestLedgerKept: the checkpoint an earlier read verified (a reader's
// state directory) must be extended: a room that forks before it, or
// whose newest checkpoint is smaller, is rolled back or forked.
func TestLedgerKept(t *testing.T) {
	// The earlier read saw room "a" up to 50; this copy has "a" up to 30
	// and then another history ("b" leaves).
	forked := func(mk func() *Ledger) *Ledger {
		l := ledgerOf(mk, "a", 30)
		for i := 30; i < 60; i++ {
			l.Append(leafN("b", i))
		}
		return l
	}
	kept := ckAt("a", 50)
	rolled := func(t *testing.T, err error, want string) {
		t.Helper()
		if !errors.Is(err, ErrRolledBack) || errors.Is(err, ErrCheckpointMismatch) || !strings.HasPrefix(err.Error(), want) {
			t.Fatalf("err = %v, want rolled back %q...", err, want)
		}
	}
	for _, k := range ledgers {
		t.Run(k.name, func(t *testing.T) {
			l := forked(k.make)
			l.Keep(kept)
			if c, ok := l.Kept(); c != kept || ok {
				t.Fatalf("Kept %+v %v", c, ok)
			}
			before := fmt.Sprintf("rolled back or forked: this reader verified a checkpoint of size 50 (root %s) before", hexRoot(kept.Root))
			rolled(t, l.RolledBack(), before+"; no checkpoint of the room was verified")
			// The copy's own checkpoints up to 30 are fine, and the kept
			// one is not reached yet.
			c30 := &Checkpoint{Room: lRoom, Size: 30, Root: mustRoot(t, l, 30)}
			if err := l.Check(c30); err != nil {
				t.Fatal(err)
			}
			if err := l.Accept(c30, 300); err != nil {
				t.Fatal(err)
			}
			rolled(t, l.RolledBack(), before+"; the newest verified checkpoint has size 30")
			// Reaching 50 on the other history: refused.
			c55 := &Checkpoint{Room: lRoom, Size: 55, Root: mustRoot(t, l, 55)}
			rolled(t, l.Check(c55), before+", and the checkpoint of size 55 is not consistent with it: proof does not verify")
			if _, ok := l.Kept(); ok {
				t.Fatal("kept reached by a refused checkpoint")
			}

			// A copy that extends the kept checkpoint passes it once.
			l = ledgerOf(k.make, "a", 60)
			l.Keep(kept)
			if err := l.Check(ckAt("a", 40)); err != nil {
				t.Fatal(err)
			}
			if err := l.Accept(ckAt("a", 40), 1); err != nil {
				t.Fatal(err)
			}
			if _, ok := l.Kept(); ok || l.RolledBack() == nil {
				t.Fatal("kept reached at 40")
			}
			if err := l.Check(ckAt("a", 55)); err != nil {
				t.Fatal(err)
			}
			if err := l.Accept(ckAt("a", 55), 2); err != nil {
				t.Fatal(err)
			}
			if _, ok := l.Kept(); !ok || l.RolledBack() != nil {
				t.Fatalf("kept not reached at 55: %v", l.RolledBack())
			}
		})
	}
}

func mustRoot(t *testing.T, l *Ledger, n uint64) [32]byte {
	t.Helper()
	r, err := l.RootAt(n)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestLedgerCheckNewest: Follow's start judges a room by its newest
// checkpoint on the stream against the kept one.
func TestLedgerCheckNewest(t *testing.T) {
	l := NewLedger()
	if err := l.CheckNewest(nil, 0); err != nil {
		t.Fatalf("nothing kept: %v", err)
	}
	kept := ckAt("a", 50)
	l.Keep(kept)
	before := fmt.Sprintf("rolled back or forked: this reader verified a checkpoint of size 50 (root %s) before; ", hexRoot(kept.Root))
	for _, tc := range []struct {
		newest *Checkpoint
		want   string // "": not rolled back
	}{
		{nil, before + "no checkpoint of the room was verified"},
		{ckAt("a", 49), before + fmt.Sprintf("the newest on the stream has size 49 (root %s, stream seq 7)", hexRoot(ckAt("a", 49).Root))},
		{ckAt("b", 50), before + fmt.Sprintf("the newest on the stream has size 50 (root %s, stream seq 7)", hexRoot(ckAt("b", 50).Root))},
		{ckAt("a", 50), ""},
		{ckAt("b", 51), ""}, // larger: checked against the room once read (Check)
	} {
		err := l.CheckNewest(tc.newest, 7)
		if tc.want == "" {
			if err != nil {
				t.Errorf("newest %+v: %v", tc.newest, err)
			}
			continue
		}
		if !errors.Is(err, ErrRolledBack) || err.Error() != tc.want {
			t.Errorf("newest %+v: %v, want %q", tc.newest, err, tc.want)
		}
	}
}

// TestLedgerCheckOther: a checkpoint obtained elsewhere must describe the
// room as read, at any size, consistently with the latest checkpoint.
func TestLedgerCheckOther(t *testing.T) {
	l := ledgerOf(NewFullLedger, "a", 20)
	if err := l.Accept(ckAt("a", 12), 120); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 5, 12, 20} {
		if err := l.CheckOther(ckAt("a", n)); err != nil {
			t.Fatalf("the room's own checkpoint at %d: %v", n, err)
		}
	}
	wantMismatch(t, l.CheckOther(ckAt("a", 21)), "the room as read has 20 admitted messages: this copy of the room is behind the checkpoint, or forked")
	b := ckAt("b", 5)
	wantMismatch(t, l.CheckOther(b), fmt.Sprintf("forked: the room as read has root %s at size 5, the checkpoint %s", hexRoot(ckAt("a", 5).Root), hexRoot(b.Root)))
	// A lean ledger has no root below its latest checkpoint.
	lean := ledgerOf(NewLedger, "a", 20)
	if err := lean.Accept(ckAt("a", 12), 120); err != nil {
		t.Fatal(err)
	}
	if err := lean.CheckOther(ckAt("a", 5)); !errors.Is(err, ErrCheckpointMismatch) || !errors.Is(err, ErrTreeSize) {
		t.Fatalf("lean, below the base: %v", err)
	}
	if err := lean.CheckOther(ckAt("a", 15)); err != nil {
		t.Fatalf("lean, above the base: %v", err)
	}
}

// TestLedgerAgreesWithTree: across a long room and checkpoints at uneven
// sizes, a lean ledger's roots are the full tree's at every size it keeps,
// and both accept exactly the room's own checkpoints.
func TestLedgerAgreesWithTree(t *testing.T) {
	const n = 1100
	full := treeOf("a", n)
	lean, whole := NewLedger(), NewFullLedger()
	seq := uint64(0)
	next := 0
	for _, size := range []int{1, 2, 3, 64, 65, 127, 512, 777, 1024, 1100} {
		for ; next < size; next++ {
			lean.Append(leafN("a", next))
			whole.Append(leafN("a", next))
		}
		for _, l := range []*Ledger{lean, whole} {
			for s := l.Covered(); s <= uint64(size); s += 1 + uint64(size)/17 {
				want, _ := full.RootAt(s)
				if got := mustRoot(t, l, s); got != want {
					t.Fatalf("root at %d (latest at %d): %x, want %x", s, l.Covered(), got, want)
				}
			}
			c := ckAt("a", size)
			if err := l.Check(c); err != nil {
				t.Fatalf("checkpoint at %d: %v", size, err)
			}
			if err := l.Check(ckAt("b", size)); err == nil {
				t.Fatalf("another room's checkpoint at %d passed", size)
			}
			seq++
			if err := l.Accept(c, seq); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestLedgerNoAllocs: appending a leaf allocates nothing (beyond the
// amortised growth of the leaf slice), and checking and accepting a
// checkpoint allocates a bounded number of times, not once per leaf it
// covers (the checkpointer and every reader do both for every message).
func TestLedgerNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	l := NewLedger()
	leaf := leafN("a", 1)
	if n := testing.AllocsPerRun(10000, func() { l.Append(leaf) }); n != 0 {
		t.Errorf("Append: %v allocations", n)
	}
	// Checks of checkpoints that each cover 1,000 or 10,000 new leaves:
	// the count is O(log n) (proof nodes), the same for both.
	checkAllocs := func(covered int) float64 {
		full := NewTree()
		var allocs float64
		l := NewLedger()
		for range 3 {
			size := int(l.Size())
			for i := range covered {
				l.Append(leafN("a", size+i))
				full.Append(leafN("a", size+i))
			}
			c := &Checkpoint{Room: lRoom, Size: l.Size(), Root: full.Root()}
			allocs = max(allocs, testing.AllocsPerRun(1, func() {
				if err := l.Check(c); err != nil {
					t.Fatal(err)
				}
			}))
			if err := l.Accept(c, 1); err != nil {
				t.Fatal(err)
			}
		}
		return allocs
	}
	small, large := checkAllocs(1000), checkAllocs(10000)
	if small > 100 || large > small+10 {
		t.Errorf("Check of a checkpoint covering 1,000 new leaves: %v allocations; 10,000: %v", small, large)
	}
	full := NewLedger()
	for i := range 10000 {
		full.Append(leafN("a", i))
	}
	if n := testing.AllocsPerRun(1, func() {
		if err := full.Accept(&Checkpoint{Room: lRoom, Size: 10000}, 1); err != nil {
			t.Fatal(err)
		}
	}); n > 2 {
		t.Errorf("Accept of 10,000 leaves: %v allocations", n)
	}
}

// TestLedgerBound: a lean ledger, new or resumed from a checkpoint, is
// bounded from then on, with the roots and verdicts of an unbounded one;
// a full ledger, or one bounded already, refuses.
func TestLedgerBound(t *testing.T) {
	const room, n = "room:bound", 300
	full := treeOf(room, n)
	if err := NewFullLedger().Bound(LeafBounds{}); err == nil {
		t.Fatal("a full ledger was bounded")
	}
	root37, _ := full.RootAt(37)
	base := &Checkpoint{Room: room, Size: 37, Root: root37}
	fresh := NewLedger()
	for i := range 37 {
		fresh.Append(leafN(room, i))
	}
	rs, err := fresh.ResumeAt(37)
	if err != nil {
		t.Fatal(err)
	}
	resumed, err := ResumeLedger(base, 1, rs)
	if err != nil {
		t.Fatal(err)
	}
	b := LeafBounds{Window: 4, Chunk: 2, MaxChunks: 4, Dir: t.TempDir()}
	if err := resumed.Bound(b); err != nil {
		t.Fatal(err)
	}
	defer resumed.Close()
	if err := resumed.Bound(b); err == nil {
		t.Fatal("bounded twice")
	}
	unbounded, err := ResumeLedger(base, 1, rs)
	if err != nil {
		t.Fatal(err)
	}
	for i := 37; i < n; i++ {
		resumed.Append(leafN(room, i))
		unbounded.Append(leafN(room, i))
		want, _ := full.RootAt(uint64(i + 1))
		if got, err := resumed.RootAt(uint64(i + 1)); err != nil || got != want {
			t.Fatalf("root at %d: %x %v, want %x", i+1, got, err, want)
		}
	}
	st := resumed.LeafStats()
	if st.Spilled == 0 || st.Held > 6 || st.Spilled+st.Held != n-37 {
		t.Fatalf("%+v: want at most 6 held, the other %d spilled", st, n-37)
	}
	for _, size := range []uint64{38, 100, 250, n} {
		got, err := resumed.ResumeAt(size)
		want, _ := unbounded.ResumeAt(size)
		if err != nil || got.String() != want.String() {
			t.Fatalf("resume state at %d: %v %v, want %v", size, got, err, want)
		}
	}
	root250, _ := full.RootAt(250)
	ck := &Checkpoint{Room: room, Size: 250, Root: root250}
	if err := resumed.Check(ck); err != nil {
		t.Fatalf("a checkpoint of the stream's leaves: %v", err)
	}
	bad := &Checkpoint{Room: room, Size: 250, Root: root37}
	if err := resumed.Check(bad); !errors.Is(err, ErrCheckpointMismatch) {
		t.Fatalf("a checkpoint of another root: %v", err)
	}
}

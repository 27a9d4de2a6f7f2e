package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"testing"
)

// leafOf is a distinct leaf hash per index.
func leafOf(i uint64) [32]byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], i)
	return sha256.Sum256(b[:])
}

// boundedRun applies ops to a bounded LeanTree and to a Tree side by side
// and fails t at the first root, proof, size or bound that differs. Each
// op reads two bytes of ops: what to do and how much.
type boundedRun struct {
	t      testing.TB
	lean   *LeanTree
	full   *Tree
	b      LeafBounds
	next   uint64 // the next leaf's seed: a truncated leaf comes back different
	checks int
}

func newBoundedRun(t testing.TB, b LeafBounds) *boundedRun {
	lean := NewLeanTree()
	if err := lean.Bound(b); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lean.Close() })
	return &boundedRun{t: t, lean: lean, full: NewTree(), b: b}
}

func (r *boundedRun) op(what, n byte) {
	t, lean := r.t, r.lean
	at := func() uint64 { return lean.Base() + uint64(n)*(lean.Size()-lean.Base()+1)/256 }
	switch what % 6 {
	case 0, 1:
		k := uint64(n) * uint64(1+what/64) // up to about 1,000 leaves
		for range k {
			l := leafOf(r.next)
			r.next++
			lean.Append(l)
			r.full.Append(l)
			r.bounds()
		}
	case 2:
		s := at()
		if err := lean.Truncate(s); err != nil {
			t.Fatalf("truncate to %d: %v", s, err)
		}
		if err := r.full.Truncate(s); err != nil {
			t.Fatal(err)
		}
		r.bounds()
	case 3:
		s := at()
		if err := lean.Advance(s); err != nil {
			t.Fatalf("advance to %d: %v", s, err)
		}
	case 4, 5:
		s1 := at()
		s2 := s1 + uint64(what)*(lean.Size()-s1+1)/256
		r.consistent(s1, s2)
	}
	if lean.Size() != r.full.Size() {
		t.Fatalf("size %d, want %d", lean.Size(), r.full.Size())
	}
	r.root(lean.Size())
	r.root(at())
	if lean.Base() > 0 {
		if _, err := lean.RootAt(lean.Base() - 1); !errors.Is(err, ErrTreeSize) {
			t.Fatalf("root below the base %d: %v", lean.Base(), err)
		}
	}
}

func (r *boundedRun) root(s uint64) {
	got, err := r.lean.RootAt(s)
	want, _ := r.full.RootAt(s)
	if err != nil || got != want {
		r.t.Fatalf("root at %d (base %d, size %d): %x, %v; want %x", s, r.lean.Base(), r.lean.Size(), got, err, want)
	}
	r.checks++
}

func (r *boundedRun) consistent(s1, s2 uint64) {
	p, err := r.lean.ConsistencyProof(s1, s2)
	if err != nil {
		r.t.Fatalf("consistency %d..%d (base %d): %v", s1, s2, r.lean.Base(), err)
	}
	want, _ := r.full.ConsistencyProof(s1, s2)
	if len(p) != len(want) {
		r.t.Fatalf("consistency %d..%d: %d hashes, want %d", s1, s2, len(p), len(want))
	}
	for i := range p {
		if p[i] != want[i] {
			r.t.Fatalf("consistency %d..%d: hash %d differs", s1, s2, i)
		}
	}
	r1, _ := r.full.RootAt(s1)
	r2, _ := r.full.RootAt(s2)
	if err := VerifyConsistency(s1, s2, p, r1, r2); err != nil {
		r.t.Fatalf("consistency %d..%d does not verify: %v", s1, s2, err)
	}
	r.checks++
}

// bounds fails unless the leaves in memory and the chunk hashes are
// within the bounds.
func (r *boundedRun) bounds() {
	sp := r.lean.sp
	if sp.stats.WriteErr != nil {
		return
	}
	if len(r.lean.tail) >= sp.window+r.b.Chunk {
		r.t.Fatalf("%d leaves in memory, window %d, chunk %d", len(r.lean.tail), sp.window, r.b.Chunk)
	}
	if len(sp.chunks) > sp.maxChunks {
		r.t.Fatalf("%d chunk hashes, at most %d", len(sp.chunks), sp.maxChunks)
	}
}

// TestBoundedLeanTreeAgreesWithTree: through random appends,
// truncations, advances and checks, with windows and chunks small enough
// that leaves are spilled, read back and chunks merged, a bounded lean
// tree gives checkpoint.Tree's roots at every size checked and its
// consistency proofs, within its bounds.
func TestBoundedLeanTreeAgreesWithTree(t *testing.T) {
	for _, b := range []LeafBounds{
		{Window: 1, Chunk: 1, MaxChunks: 2},
		{Window: 3, Chunk: 2, MaxChunks: 3},
		{Window: 5, Chunk: 4, MaxChunks: 8},
		{Window: 16, Chunk: 8, MaxChunks: 5},
		{Window: 64, Chunk: 32, MaxChunks: 64},
	} {
		for seed := range uint64(8) {
			rng := rand.New(rand.NewPCG(seed, 7))
			r := newBoundedRun(t, b)
			for range 60 {
				r.op(byte(rng.IntN(256)), byte(rng.IntN(256)))
			}
			// The file is compacted past compactMin dead leaves: a
			// long lagging run reaches it.
			st := r.lean.LeafStats()
			if st.Spilled == 0 || st.Reread == 0 || st.WriteErr != nil || st.ReadErr != nil {
				t.Errorf("bounds %+v seed %d: %+v: nothing spilled or read back", b, seed, st)
			}
		}
	}
}

// TestBoundedLeanTreeLagging: a tree whose checkpoints cover ever less of
// it (Advance far behind Size, as with a checkpointer that lags) keeps
// its bounds, merges chunks, compacts its file and still agrees with
// checkpoint.Tree; the leaves read back for one root stay within about
// three chunks.
func TestBoundedLeanTreeLagging(t *testing.T) {
	b := LeafBounds{Window: 8, Chunk: 4, MaxChunks: 16}
	r := newBoundedRun(t, b)
	const n = 3 * compactMin
	for i := uint64(0); i < n; i++ {
		r.lean.Append(leafOf(i))
		r.full.Append(leafOf(i))
		r.bounds()
		if i%4099 == 4098 {
			// A checkpoint at a third of the way: the lag grows.
			r.op(3, 85)
			before := r.lean.LeafStats().Reread
			r.root(r.lean.Base() + (r.lean.Size()-r.lean.Base())/2)
			st := r.lean.LeafStats()
			if got := st.Reread - before; got > 3*st.Chunk {
				t.Fatalf("one root read back %d leaves, chunk %d", got, st.Chunk)
			}
		}
	}
	st := r.lean.LeafStats()
	if st.Chunk <= 4 {
		t.Errorf("chunk %d: never merged", st.Chunk)
	}
	sp := r.lean.sp
	if sp.fileFirst == 0 {
		t.Errorf("the file was never compacted: it starts at leaf 0, base %d", r.lean.Base())
	}
	if live := r.lean.tailStart - r.lean.Base(); sp.fileEnd-sp.fileFirst > 2*live+compactMin {
		t.Errorf("the file holds %d leaves, %d of them live", sp.fileEnd-sp.fileFirst, live)
	}
}

// TestBoundedLeanTreeNoFile: when the file cannot be made the leaves stay
// in memory and the roots are the same.
func TestBoundedLeanTreeNoFile(t *testing.T) {
	r := newBoundedRun(t, LeafBounds{Window: 2, Chunk: 2, Dir: filepath.Join(t.TempDir(), "missing")})
	for i := range 40 {
		r.op(byte(i*37), byte(i*11))
	}
	st := r.lean.LeafStats()
	if st.WriteErr == nil || st.Spilled != 0 {
		t.Fatalf("%+v: want a write error and nothing spilled", st)
	}
}

// TestBoundedLedgerVerdicts: a bounded ledger and an unbounded one refuse
// and accept the same checkpoints with the same words, for checkpoints far
// behind the tree, wrong roots and a kept checkpoint.
func TestBoundedLedgerVerdicts(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 30 {
		lean := NewLedger()
		bounded, err := NewBoundedLedger(LeafBounds{Window: 3, Chunk: 2, MaxChunks: 4})
		if err != nil {
			t.Fatal(err)
		}
		full := NewFullLedger()
		for i := range uint64(2000) {
			full.Append(leafOf(i))
		}
		if round%3 == 0 {
			s := uint64(rng.IntN(2000) + 1)
			root, _ := full.RootAt(s)
			if round%2 == 0 {
				root[0] ^= 1
			}
			kept := &Checkpoint{Size: s, Root: root}
			lean.Keep(kept)
			bounded.Keep(kept)
		}
		var latest uint64
		for i := uint64(0); i < 2000; i++ {
			lean.Append(leafOf(i))
			bounded.Append(leafOf(i))
			if rng.IntN(40) != 0 {
				continue
			}
			// A checkpoint lagging by up to the whole tree.
			s := latest + uint64(rng.Int64N(int64(i+2-latest)))
			root, _ := full.RootAt(s)
			if rng.IntN(4) == 0 {
				root[31] ^= 1
			}
			if rng.IntN(8) == 0 && latest > 0 {
				s = latest - 1
			}
			c := &Checkpoint{Size: s, Root: root}
			e1, e2 := lean.Check(c), bounded.Check(c)
			if errString(e1) != errString(e2) {
				t.Fatalf("round %d, size %d: unbounded %v, bounded %v", round, s, e1, e2)
			}
			if e1 == nil {
				if err := lean.Accept(c, i); err != nil {
					t.Fatal(err)
				}
				if err := bounded.Accept(c, i); err != nil {
					t.Fatal(err)
				}
				latest = s
			}
		}
		if errString(lean.RolledBack()) != errString(bounded.RolledBack()) {
			t.Fatalf("round %d: rolled back: %v, %v", round, lean.RolledBack(), bounded.RolledBack())
		}
		if st := bounded.LeafStats(); st.Spilled == 0 {
			t.Errorf("round %d: nothing spilled: %+v", round, st)
		}
		if err := bounded.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// FuzzBoundedLeanTree: any sequence of appends, truncations, advances and
// checks, with the bounds its first three bytes pick, gives a bounded lean
// tree checkpoint.Tree's roots and proofs, within its bounds.
func FuzzBoundedLeanTree(f *testing.F) {
	f.Add([]byte{0, 1, 1, 0, 200, 4, 100, 3, 50, 1, 255, 2, 10, 5, 200})
	f.Add(bytes.Repeat([]byte{1, 255, 3, 20, 4, 128}, 20))
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) < 3 || len(ops) > 64 {
			return
		}
		b := LeafBounds{Window: 1 + int(ops[0]%16), Chunk: 1 << (ops[1] % 5), MaxChunks: 2 + int(ops[2]%8)}
		r := newBoundedRun(t, b)
		for i := 3; i+1 < len(ops); i += 2 {
			r.op(ops[i], ops[i+1])
		}
	})
}

// TestBoundedLeanTreeReadFails: when spilled leaves cannot be read back,
// a root that needs them is an error wrapping ErrLeafSpill (never a
// wrong root), and so is every later one that needs the file; the
// window's roots stay known.
func TestBoundedLeanTreeReadFails(t *testing.T) {
	lean := NewLeanTree()
	if err := lean.Bound(LeafBounds{Window: 4, Chunk: 4}); err != nil {
		t.Fatal(err)
	}
	full := NewTree()
	for i := range uint64(64) {
		lean.Append(leafOf(i))
		full.Append(leafOf(i))
	}
	if lean.LeafStats().Spilled == 0 {
		t.Fatal("nothing spilled")
	}
	lean.sp.f.Close() // the file goes away under the tree
	for _, s := range []uint64{3, 30} {
		if r, err := lean.RootAt(s); !errors.Is(err, ErrLeafSpill) {
			t.Errorf("root at %d: %x, %v", s, r, err)
		}
	}
	if err := lean.LeafStats().ReadErr; !errors.Is(err, ErrLeafSpill) {
		t.Errorf("read error %v", err)
	}
	want, _ := full.RootAt(64)
	// At 64: the chunk hashes and the leaves in memory, not the file.
	if r, err := lean.RootAt(64); err != nil || r != want {
		t.Errorf("root at 64: %x, %v; want %x", r, err, want)
	}
}

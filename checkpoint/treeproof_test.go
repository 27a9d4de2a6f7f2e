package checkpoint

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/transparency-dev/merkle/proof"
)

const (
	siblingRoom = "room:test/a.sibling"
	maxLeaves   = 1000
)

// TestInclusionEveryLeafEverySize proves every leaf of every tree of size
// 1..1000 against the root at that size. The negatives (checkInclusionNegatives:
// the sibling room's root, a flipped proof byte, a flipped leaf, the root of
// the previous and the next size, a neighbour leaf) run for every leaf up to
// size 64 and for the first, the last and two random leaves of larger sizes,
// which keeps the test within seconds under -race.
func TestInclusionEveryLeafEverySize(t *testing.T) {
	tr, sib := treeOf(tRoom, maxLeaves), treeOf(siblingRoom, maxLeaves)
	leaves := make([][32]byte, maxLeaves)
	for i := range leaves {
		leaves[i] = leafN(tRoom, i)
	}
	roots := make([][32]byte, maxLeaves+1)
	sibRoots := make([][32]byte, maxLeaves+1)
	for s := range roots {
		roots[s], _ = tr.RootAt(uint64(s))
		sibRoots[s], _ = sib.RootAt(uint64(s))
		if s > 0 && roots[s] == sibRoots[s] {
			t.Fatalf("size %d: the rooms' roots are equal", s)
		}
	}
	// Two halves with about equal work, in parallel on two cores.
	for _, half := range []struct {
		name     string
		from, to int
	}{{"1-707", 1, 707}, {"708-1000", 708, maxLeaves}} {
		t.Run(half.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(half.from), 9))
			for size := half.from; size <= half.to; size++ {
				s := uint64(size)
				r1, r2 := rng.Uint64N(s), rng.Uint64N(s)
				for idx := range s {
					path, err := tr.InclusionProof(idx, s)
					if err != nil {
						t.Fatalf("InclusionProof(%d, %d): %v", idx, s, err)
					}
					if err := VerifyInclusion(leaves[idx], idx, s, path, roots[s]); err != nil {
						t.Fatalf("leaf %d at size %d: %v", idx, s, err)
					}
					if size <= 64 || idx == 0 || idx == s-1 || idx == r1 || idx == r2 {
						checkInclusionNegatives(t, leaves, roots, sibRoots, idx, s, path)
					}
				}
			}
		})
	}
}

func checkInclusionNegatives(t *testing.T, leaves, roots, sibRoots [][32]byte, idx, s uint64, path [][32]byte) {
	t.Helper()
	leaf := leaves[idx]
	if VerifyInclusion(leaf, idx, s, path, sibRoots[s]) == nil {
		t.Fatalf("leaf %d at size %d verifies against the sibling room's root", idx, s)
	}
	var mismatch proof.RootMismatchError
	for i := range path {
		bad := append([][32]byte(nil), path...)
		bad[i][i%32] ^= 0x01
		if err := VerifyInclusion(leaf, idx, s, bad, roots[s]); !errors.Is(err, ErrBadProof) || !errors.As(err, &mismatch) {
			t.Fatalf("leaf %d at size %d, proof byte flipped at %d: err = %v", idx, s, i, err)
		}
	}
	bad := leaf
	bad[31] ^= 0x80
	if VerifyInclusion(bad, idx, s, path, roots[s]) == nil {
		t.Fatalf("flipped leaf %d at size %d verifies", idx, s)
	}
	if s > 1 && VerifyInclusion(leaf, idx, s, path, roots[s-1]) == nil {
		t.Fatalf("leaf %d: proof at size %d verifies against the root at %d", idx, s, s-1)
	}
	if s < uint64(len(roots)-1) && VerifyInclusion(leaf, idx, s+1, path, roots[s+1]) == nil {
		t.Fatalf("leaf %d: proof at size %d verifies at size %d", idx, s, s+1)
	}
	if s > 1 {
		other := (idx + 1) % s
		if VerifyInclusion(leaves[other], other, s, path, roots[s]) == nil {
			t.Fatalf("leaf %d's proof at size %d verifies leaf %d", idx, s, other)
		}
	}
}

// TestConsistencyProofs proves every pair of sizes up to 200 and 1000
// random pairs up to 1000. The negatives (a wrong first or second root:
// sibling room, flipped byte; a flipped proof hash) run for every pair up
// to size 64 and for one pair in eight above, to stay within seconds under
// -race.
func TestConsistencyProofs(t *testing.T) {
	tr, sib := treeOf(tRoom, maxLeaves), treeOf(siblingRoom, maxLeaves)
	roots := make([][32]byte, maxLeaves+1)
	sibRoots := make([][32]byte, maxLeaves+1)
	for s := range roots {
		roots[s], _ = tr.RootAt(uint64(s))
		sibRoots[s], _ = sib.RootAt(uint64(s))
	}
	check := func(t *testing.T, s1, s2 uint64, negatives bool) {
		path, err := tr.ConsistencyProof(s1, s2)
		if err != nil {
			t.Fatalf("ConsistencyProof(%d, %d): %v", s1, s2, err)
		}
		r1, r2 := roots[s1], roots[s2]
		if err := VerifyConsistency(s1, s2, path, r1, r2); err != nil {
			t.Fatalf("%d -> %d: %v", s1, s2, err)
		}
		if (s1 == 0 || s1 == s2) && len(path) != 0 {
			t.Fatalf("%d -> %d: proof of %d hashes, want none", s1, s2, len(path))
		}
		if !negatives || s2 == 0 {
			return
		}
		if s1 == 0 {
			if VerifyConsistency(0, s2, path, sibRoots[5], r2) == nil {
				t.Fatalf("0 -> %d verifies from a non-empty root", s2)
			}
			return
		}
		if VerifyConsistency(s1, s2, path, sibRoots[s1], r2) == nil {
			t.Fatalf("%d -> %d verifies from the sibling room's root", s1, s2)
		}
		if VerifyConsistency(s1, s2, path, r1, sibRoots[s2]) == nil {
			t.Fatalf("%d -> %d verifies to the sibling room's root", s1, s2)
		}
		bad := r1
		bad[int(s1)%32] ^= 1
		if VerifyConsistency(s1, s2, path, bad, r2) == nil {
			t.Fatalf("%d -> %d verifies from a flipped root", s1, s2)
		}
		if s1 == s2 {
			return
		}
		bad = r2
		bad[0] ^= 0x40
		if VerifyConsistency(s1, s2, path, r1, bad) == nil {
			t.Fatalf("%d -> %d verifies to a flipped root", s1, s2)
		}
		for i := range path {
			badPath := append([][32]byte(nil), path...)
			badPath[i][7] ^= 0x10
			if VerifyConsistency(s1, s2, badPath, r1, r2) == nil {
				t.Fatalf("%d -> %d verifies with proof hash %d flipped", s1, s2, i)
			}
		}
		if VerifyConsistency(s1, s2, path[:len(path)-1], r1, r2) == nil {
			t.Fatalf("%d -> %d verifies with the last proof hash dropped", s1, s2)
		}
	}
	t.Run("all pairs to 200", func(t *testing.T) {
		t.Parallel()
		n := 0
		for s2 := uint64(0); s2 <= 200; s2++ {
			for s1 := uint64(0); s1 <= s2; s1++ {
				n++
				check(t, s1, s2, s2 <= 64 || n%8 == 0)
			}
		}
	})
	t.Run("random pairs to 1000", func(t *testing.T) {
		t.Parallel()
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range 1000 {
			a, b := rng.Uint64N(maxLeaves+1), rng.Uint64N(maxLeaves+1)
			check(t, min(a, b), max(a, b), i%8 == 0)
		}
	})
	if _, err := tr.ConsistencyProof(5, 4); !errors.Is(err, ErrTreeSize) {
		t.Fatalf("ConsistencyProof(5, 4): %v", err)
	}
	if _, err := tr.ConsistencyProof(1, maxLeaves+1); !errors.Is(err, ErrTreeSize) {
		t.Fatalf("ConsistencyProof beyond size: %v", err)
	}
	if err := VerifyConsistency(5, 4, nil, roots[5], roots[4]); !errors.Is(err, ErrBadProof) {
		t.Fatalf("VerifyConsistency(5, 4): %v", err)
	}
	if err := VerifyConsistency(0, 0, nil, roots[0], roots[0]); err != nil {
		t.Fatalf("VerifyConsistency(0, 0): %v", err)
	}
}

func TestInclusionProofBounds(t *testing.T) {
	tr := treeOf(tRoom, 10)
	for _, c := range [][2]uint64{{0, 0}, {10, 10}, {3, 11}, {11, 11}} {
		if _, err := tr.InclusionProof(c[0], c[1]); !errors.Is(err, ErrTreeSize) {
			t.Errorf("InclusionProof(%d, %d): err = %v, want ErrTreeSize", c[0], c[1], err)
		}
	}
	if err := VerifyInclusion(leafN(tRoom, 0), 10, 10, nil, tr.Root()); !errors.Is(err, ErrBadProof) {
		t.Errorf("VerifyInclusion index == size: %v", err)
	}
}

// TestTruncate cuts a tree of 1000 at many sizes and checks that it is the
// tree it was at that size, and that appending the same leaves again
// restores every root while other leaves give other roots.
func TestTruncate(t *testing.T) {
	orig := treeOf(tRoom, maxLeaves)
	want := make([][32]byte, maxLeaves+1)
	for s := range want {
		want[s], _ = orig.RootAt(uint64(s))
	}
	cuts := []uint64{0, 1, 2, 3, 4, 5, 7, 8, 9, 255, 256, 257, 511, 512, 513, 999, 1000}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		cuts = append(cuts, rng.Uint64N(maxLeaves+1))
	}
	tr := treeOf(tRoom, maxLeaves)
	for _, cut := range cuts {
		if err := tr.Truncate(cut); err != nil {
			t.Fatal(err)
		}
		if tr.Size() != cut || tr.Root() != want[cut] {
			t.Fatalf("after Truncate(%d): size %d, root %x, want %x", cut, tr.Size(), tr.Root(), want[cut])
		}
		if _, err := tr.RootAt(cut + 1); !errors.Is(err, ErrTreeSize) {
			t.Fatalf("RootAt(%d) after Truncate(%d): %v", cut+1, cut, err)
		}
		// Other leaves after the cut: a different tree.
		if cut < maxLeaves {
			tr.Append(leafN(siblingRoom, int(cut)))
			if tr.Root() == want[cut+1] {
				t.Fatalf("a different leaf at %d gives the original root", cut)
			}
			if err := tr.Truncate(cut); err != nil {
				t.Fatal(err)
			}
		}
		for i := cut; i < maxLeaves; i++ {
			tr.Append(leafN(tRoom, int(i)))
			if tr.Root() != want[i+1] {
				t.Fatalf("cut %d, re-append %d: root differs", cut, i)
			}
		}
		for _, s := range []uint64{cut, (cut + maxLeaves) / 2, maxLeaves} {
			if got, _ := tr.RootAt(s); got != want[s] {
				t.Fatalf("cut %d: RootAt(%d) differs after rebuild", cut, s)
			}
		}
		if s := uint64(maxLeaves); cut > 0 {
			path, err := tr.InclusionProof(cut-1, s)
			if err != nil || VerifyInclusion(leafN(tRoom, int(cut-1)), cut-1, s, path, want[s]) != nil {
				t.Fatalf("cut %d: inclusion after rebuild: %v", cut, err)
			}
		}
	}
	if err := tr.Truncate(maxLeaves + 1); !errors.Is(err, ErrTreeSize) {
		t.Fatalf("Truncate beyond size: %v", err)
	}
}

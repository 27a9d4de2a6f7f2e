package checkpoint_test

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/roompub/roompub/checkpoint"
)

// TestLeanTreeAgreesWithTree: at every base and size up to 70, the lean
// tree's roots and consistency proofs are checkpoint.Tree's, and the
// proofs verify; sizes below the base are refused.
func TestLeanTreeAgreesWithTree(t *testing.T) {
	const n = 70
	full := checkpoint.NewTree()
	var leaves [][32]byte
	for i := range n {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], uint64(i))
		leaves = append(leaves, sha256.Sum256(b[:]))
		full.Append(leaves[i])
	}
	for base := uint64(0); base <= n; base += 7 {
		lt := checkpoint.NewLeanTree()
		for _, l := range leaves {
			lt.Append(l)
		}
		if err := lt.Advance(base); err != nil {
			t.Fatal(err)
		}
		if lt.Base() != base || lt.Size() != n {
			t.Fatalf("base %d: Base %d Size %d", base, lt.Base(), lt.Size())
		}
		for s1 := base; s1 <= n; s1++ {
			r1, err := lt.RootAt(s1)
			want, _ := full.RootAt(s1)
			if err != nil || r1 != want {
				t.Fatalf("base %d: root at %d: %x, %v; want %x", base, s1, r1, err, want)
			}
			for s2 := s1; s2 <= n; s2++ {
				p, err := lt.ConsistencyProof(s1, s2)
				if err != nil {
					t.Fatalf("base %d: consistency %d..%d: %v", base, s1, s2, err)
				}
				wantP, _ := full.ConsistencyProof(s1, s2)
				if len(p) != len(wantP) {
					t.Fatalf("base %d: consistency %d..%d: %d hashes, want %d", base, s1, s2, len(p), len(wantP))
				}
				for i := range p {
					if p[i] != wantP[i] {
						t.Fatalf("base %d: consistency %d..%d: hash %d differs", base, s1, s2, i)
					}
				}
				r2, _ := full.RootAt(s2)
				if err := checkpoint.VerifyConsistency(s1, s2, p, r1, r2); err != nil {
					t.Fatalf("base %d: consistency %d..%d does not verify: %v", base, s1, s2, err)
				}
			}
		}
		if base > 0 {
			if _, err := lt.RootAt(base - 1); !errors.Is(err, checkpoint.ErrTreeSize) {
				t.Errorf("base %d: root below the base: %v", base, err)
			}
			if err := lt.Truncate(base - 1); !errors.Is(err, checkpoint.ErrTreeSize) {
				t.Errorf("base %d: truncate below the base: %v", base, err)
			}
		}
		// Truncate, append again: the same tree.
		if err := lt.Truncate(base); err != nil {
			t.Fatal(err)
		}
		for _, l := range leaves[base:] {
			lt.Append(l)
		}
		if r, _ := lt.RootAt(n); r != full.Root() {
			t.Errorf("base %d: root after truncate and append differs", base)
		}
	}
}

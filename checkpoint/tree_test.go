package checkpoint

import (
	"crypto/sha256"
	"errors"
	"testing"

	"github.com/transparency-dev/merkle/rfc6962"
	"github.com/transparency-dev/merkle/testonly"
)

// mth is the RFC 6962 section 2.1 definition of the Merkle Tree Hash, over
// leaf hashes, written independently of Tree: MTH of one leaf is its hash;
// of n > 1 leaves, H(0x01 || MTH(D[0:k]) || MTH(D[k:n])) with k the largest
// power of two smaller than n.
func mth(leaves [][32]byte) [32]byte {
	switch len(leaves) {
	case 0:
		return sha256.Sum256(nil)
	case 1:
		return leaves[0]
	}
	k := 1
	for k*2 < len(leaves) {
		k *= 2
	}
	l, r := mth(leaves[:k]), mth(leaves[k:])
	return sha256.Sum256(append(append([]byte{1}, l[:]...), r[:]...))
}

func TestTreeEmpty(t *testing.T) {
	tr := NewTree()
	if tr.Size() != 0 {
		t.Fatal("size")
	}
	// SHA-256 of "" (RFC 6962 section 2.1).
	if got := tr.Root(); got != sha256.Sum256(nil) {
		t.Fatalf("empty root %x", got)
	}
	if _, err := tr.RootAt(1); !errors.Is(err, ErrTreeSize) {
		t.Fatalf("RootAt(1) of empty tree: %v", err)
	}
}

// TestTreeVectors checks the tree against the RFC 6962 reference roots that
// merkle/testonly ships (the same vectors as Certificate Transparency's).
func TestTreeVectors(t *testing.T) {
	tr := NewTree()
	roots := testonly.RootHashes() // indexed by size, from 0
	if got := tr.Root(); string(got[:]) != string(roots[0]) {
		t.Fatalf("empty root = %x, want %x", got, roots[0])
	}
	for i, data := range testonly.LeafInputs() {
		tr.Append(to32(rfc6962.DefaultHasher.HashLeaf(data)))
		if got := tr.Root(); string(got[:]) != string(roots[i+1]) {
			t.Fatalf("root at %d = %x, want %x", i+1, got, roots[i+1])
		}
	}
	if len(roots) != 9 || tr.Size() != 8 {
		t.Fatalf("%d vectors, size %d", len(roots), tr.Size())
	}
}

// TestRootAtEverySize compares RootAt at every size 0..1000 with mth, on a
// tree grown to 1000 (so every earlier root comes from stored subtrees).
func TestRootAtEverySize(t *testing.T) {
	const n = 1000
	leaves := make([][32]byte, n)
	for i := range leaves {
		leaves[i] = leafN(tRoom, i)
	}
	tr := NewTree()
	for i, l := range leaves {
		tr.Append(l)
		if tr.Size() != uint64(i+1) {
			t.Fatalf("Size = %d after %d appends", tr.Size(), i+1)
		}
	}
	for size := 0; size <= n; size++ {
		got, err := tr.RootAt(uint64(size))
		if err != nil {
			t.Fatal(err)
		}
		if want := mth(leaves[:size]); got != want {
			t.Fatalf("RootAt(%d) = %x, want %x", size, got, want)
		}
	}
	if tr.Root() != mth(leaves) {
		t.Fatal("Root != mth")
	}
	if _, err := tr.RootAt(n + 1); !errors.Is(err, ErrTreeSize) {
		t.Fatalf("RootAt(n+1): %v", err)
	}
}

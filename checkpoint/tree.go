package checkpoint

import (
	"fmt"

	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/proof"
)

// Tree is a room's RFC 6962 Merkle tree of leaf hashes (LeafHash). It is
// append-only except for Truncate, and keeps the hash of every complete
// (perfect) subtree, level by level, so each node a proof or an earlier
// root needs is a lookup: about 2 x 32 bytes per leaf. A Tree is not safe
// for concurrent use.
type Tree struct {
	// levels[l][i] is the hash of the perfect subtree of 2^l leaves
	// starting at leaf i*2^l (compact.NodeID{Level: l, Index: i}); level 0
	// holds the leaf hashes.
	levels [][][32]byte
}

// NewTree returns an empty tree.
func NewTree() *Tree { return &Tree{} }

// Size is the number of leaves.
func (t *Tree) Size() uint64 {
	if len(t.levels) == 0 {
		return 0
	}
	return uint64(len(t.levels[0]))
}

// Append adds a leaf hash (LeafHash of an admitted message) and the
// subtrees it completes.
func (t *Tree) Append(leaf [32]byte) {
	h := leaf
	for level := 0; ; level++ {
		if level == len(t.levels) {
			t.levels = append(t.levels, nil)
		}
		row := append(t.levels[level], h)
		t.levels[level] = row
		if len(row)%2 == 1 {
			return
		}
		h = NodeHash(row[len(row)-2], row[len(row)-1])
	}
}

// node returns the hash of a perfect subtree of the current tree.
func (t *Tree) node(id compact.NodeID) ([32]byte, error) {
	if id.Level >= uint(len(t.levels)) || id.Index >= uint64(len(t.levels[id.Level])) {
		return [32]byte{}, fmt.Errorf("%w: node %d/%d not in a tree of size %d", ErrTreeSize, id.Level, id.Index, t.Size())
	}
	return t.levels[id.Level][id.Index], nil
}

// nodes returns the hashes of ids as slices into the tree's storage, for
// merkle/proof (Rehash reorders the slice headers but never writes through
// them).
func (t *Tree) nodes(ids []compact.NodeID) ([][]byte, error) {
	hs := make([][]byte, len(ids))
	for i, id := range ids {
		if _, err := t.node(id); err != nil {
			return nil, err
		}
		hs[i] = t.levels[id.Level][id.Index][:]
	}
	return hs, nil
}

// Root is the RFC 6962 root hash at Size; the empty tree's is SHA-256 of
// the empty string.
func (t *Tree) Root() [32]byte {
	r, _ := t.RootAt(t.Size()) // cannot fail at Size
	return r
}

// RootAt is the root hash the tree had at size leaves: the perfect subtrees
// of compact.RangeNodes(0, size) folded right to left with the RFC 6962
// HashChildren. Errors wrap ErrTreeSize when size > Size.
func (t *Tree) RootAt(size uint64) ([32]byte, error) {
	if size > t.Size() {
		return [32]byte{}, fmt.Errorf("%w: root at size %d of a tree of size %d", ErrTreeSize, size, t.Size())
	}
	if size == 0 {
		return emptyRoot, nil
	}
	var buf [64]compact.NodeID
	ids := compact.RangeNodes(0, size, buf[:0])
	root, err := t.node(ids[len(ids)-1])
	if err != nil {
		return [32]byte{}, err
	}
	for i := len(ids) - 2; i >= 0; i-- {
		left, err := t.node(ids[i])
		if err != nil {
			return [32]byte{}, err
		}
		root = NodeHash(left, root)
	}
	return root, nil
}

// Truncate drops the leaves at index size and above, and the subtrees that
// cover them, so the tree is as it was at size leaves (readers rebuild after
// an optimistic miss: docs/checkpoints.md, "The readers: `--trusted-publisher`,
// `--state-dir`"). Errors wrap ErrTreeSize when size > Size.
func (t *Tree) Truncate(size uint64) error {
	if size > t.Size() {
		return fmt.Errorf("%w: truncate to %d a tree of size %d", ErrTreeSize, size, t.Size())
	}
	for l := range t.levels {
		t.levels[l] = t.levels[l][:size>>uint(l)]
	}
	return nil
}

// InclusionProof returns the RFC 6962 audit path of leaf index in the tree
// at size leaves, built from the node ids of merkle/proof.Inclusion (its
// ephemeral node rehashed by Nodes.Rehash). Requires index < size <= Size;
// errors wrap ErrTreeSize otherwise.
func (t *Tree) InclusionProof(index, size uint64) ([][32]byte, error) {
	if size > t.Size() || index >= size {
		return nil, fmt.Errorf("%w: inclusion of leaf %d at size %d in a tree of size %d", ErrTreeSize, index, size, t.Size())
	}
	nodes, err := proof.Inclusion(index, size)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTreeSize, err)
	}
	return t.rehash(nodes)
}

// ConsistencyProof returns the RFC 6962 consistency proof from size1 to
// size2 leaves (merkle/proof.Consistency; empty when size1 is 0 or equals
// size2). Requires size1 <= size2 <= Size; errors wrap ErrTreeSize
// otherwise.
func (t *Tree) ConsistencyProof(size1, size2 uint64) ([][32]byte, error) {
	if size2 > t.Size() || size1 > size2 {
		return nil, fmt.Errorf("%w: consistency from %d to %d in a tree of size %d", ErrTreeSize, size1, size2, t.Size())
	}
	nodes, err := proof.Consistency(size1, size2)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTreeSize, err)
	}
	return t.rehash(nodes)
}

func (t *Tree) rehash(nodes proof.Nodes) ([][32]byte, error) {
	hs, err := t.nodes(nodes.IDs)
	if err != nil {
		return nil, err
	}
	hs, err = nodes.Rehash(hs, HashChildren)
	if err != nil {
		return nil, err
	}
	out := make([][32]byte, len(hs))
	for i, h := range hs {
		out[i] = to32(h)
	}
	return out, nil
}

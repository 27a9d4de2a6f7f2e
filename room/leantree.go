package room

import (
	"crypto/sha256"
	"fmt"

	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/proof"

	"github.com/roompub/roompub/checkpoint"
)

// roomTree is what a ledger needs of a room's RFC 6962 tree:
// *checkpoint.Tree (every node kept: Prove's inclusion proofs) or
// *leanTree (Audit and Follow, whose memory must not grow by a node per
// message).
type roomTree interface {
	Size() uint64
	Append(leaf [32]byte)
	RootAt(size uint64) ([32]byte, error)
	Truncate(size uint64) error
	ConsistencyProof(size1, size2 uint64) ([][32]byte, error)
}

// leanTree is a room's tree as a reader keeps it once checkpoints have
// covered its start: the compact range (merkle/compact) of the first
// Base() leaves, whose root and proof nodes stay available, and the leaf
// hashes after it. Roots, truncation and consistency proofs are for sizes
// of at least Base(); advance moves Base() on once a checkpoint has
// covered the leaves. Memory: O(log n) hashes plus 32 bytes per leaf after
// Base().
type leanTree struct {
	base *compact.Range // [0, Base())
	tail [][32]byte     // leaves Base(), Base()+1, ...
}

var leanRanges = &compact.RangeFactory{Hash: checkpoint.HashChildren}

// emptyTreeRoot is the RFC 6962 root of no leaves: SHA-256 of "".
var emptyTreeRoot = sha256.Sum256(nil)

func newLeanTree() *leanTree { return &leanTree{base: leanRanges.NewEmptyRange(0)} }

// Base is the number of leaves folded into the compact range.
func (t *leanTree) Base() uint64 { return t.base.End() }

func (t *leanTree) Size() uint64 { return t.base.End() + uint64(len(t.tail)) }

func (t *leanTree) Append(leaf [32]byte) { t.tail = append(t.tail, leaf) }

// rangeAt returns a new compact range of the first size leaves (Base() <=
// size <= Size()).
func (t *leanTree) rangeAt(size uint64) (*compact.Range, error) {
	if size < t.Base() || size > t.Size() {
		return nil, fmt.Errorf("%w: size %d outside %d..%d", checkpoint.ErrTreeSize, size, t.Base(), t.Size())
	}
	hs := t.base.Hashes()
	cp := make([][]byte, len(hs))
	copy(cp, hs)
	r, err := leanRanges.NewRange(0, t.base.End(), cp)
	if err != nil {
		return nil, err
	}
	for i := range size - t.Base() {
		if err := r.Append(t.tail[i][:], nil); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func rootOf(r *compact.Range) ([32]byte, error) {
	if r.End() == 0 {
		return emptyTreeRoot, nil
	}
	h, err := r.GetRootHash(nil)
	if err != nil {
		return [32]byte{}, err
	}
	return [32]byte(h), nil
}

func (t *leanTree) RootAt(size uint64) ([32]byte, error) {
	r, err := t.rangeAt(size)
	if err != nil {
		return [32]byte{}, err
	}
	return rootOf(r)
}

func (t *leanTree) Truncate(size uint64) error {
	if size < t.Base() || size > t.Size() {
		return fmt.Errorf("%w: truncate to %d outside %d..%d", checkpoint.ErrTreeSize, size, t.Base(), t.Size())
	}
	clear(t.tail[size-t.Base():])
	t.tail = t.tail[:size-t.Base()]
	return nil
}

// ConsistencyProof returns the RFC 6962 consistency proof from size1 to
// size2 (Base() <= size1 <= size2 <= Size()), with the node ids of
// merkle/proof.Consistency: those inside the first size1 leaves are nodes
// of their compact range, the others perfect subtrees of the leaves after
// it.
func (t *leanTree) ConsistencyProof(size1, size2 uint64) ([][32]byte, error) {
	if size2 > t.Size() || size1 > size2 {
		return nil, fmt.Errorf("%w: consistency from %d to %d in a tree of size %d", checkpoint.ErrTreeSize, size1, size2, t.Size())
	}
	r1, err := t.rangeAt(size1)
	if err != nil {
		return nil, err
	}
	nodes, err := proof.Consistency(size1, size2)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", checkpoint.ErrTreeSize, err)
	}
	ids := compact.RangeNodes(0, size1, nil)
	hs := make([][]byte, len(nodes.IDs))
	for i, id := range nodes.IDs {
		begin, end := id.Coverage()
		switch {
		case end <= size1:
			for j, rid := range ids {
				if rid == id {
					hs[i] = r1.Hashes()[j]
				}
			}
			if hs[i] == nil {
				return nil, fmt.Errorf("%w: node %d/%d is not in the compact range of %d leaves", checkpoint.ErrTreeSize, id.Level, id.Index, size1)
			}
		case begin >= size1 && end <= t.Size():
			sub := leanRanges.NewEmptyRange(begin)
			for k := begin; k < end; k++ {
				if err := sub.Append(t.tail[k-t.Base()][:], nil); err != nil {
					return nil, err
				}
			}
			// A perfect subtree: its compact range is one node.
			if h := sub.Hashes(); len(h) == 1 {
				hs[i] = h[0]
			} else {
				return nil, fmt.Errorf("%w: node %d/%d is not a perfect subtree", checkpoint.ErrTreeSize, id.Level, id.Index)
			}
		default:
			return nil, fmt.Errorf("%w: node %d/%d straddles size %d", checkpoint.ErrTreeSize, id.Level, id.Index, size1)
		}
	}
	hs, err = nodes.Rehash(hs, checkpoint.HashChildren)
	if err != nil {
		return nil, err
	}
	out := make([][32]byte, len(hs))
	for i, h := range hs {
		out[i] = [32]byte(h)
	}
	return out, nil
}

// advance folds the leaves before size (Base() <= size <= Size()) into
// the compact range; their hashes are dropped.
func (t *leanTree) advance(size uint64) error {
	if size < t.Base() || size > t.Size() {
		return fmt.Errorf("%w: advance to %d outside %d..%d", checkpoint.ErrTreeSize, size, t.Base(), t.Size())
	}
	n := size - t.Base()
	for i := range n {
		if err := t.base.Append(t.tail[i][:], nil); err != nil {
			return err
		}
	}
	rest := t.tail[n:]
	if cap(rest) > 2*len(rest)+64 {
		// Most of the slice is spent: copy what is left, so the spent
		// part can be collected.
		rest = append([][32]byte(nil), rest...)
	}
	t.tail = rest
	return nil
}

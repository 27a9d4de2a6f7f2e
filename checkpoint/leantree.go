package checkpoint

import (
	"fmt"

	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/proof"
)

// LeanTree is a room's RFC 6962 tree as a reader or the checkpointer
// keeps it once checkpoints have covered its start: the compact range (merkle/compact) of the first
// Base() leaves, whose root and proof nodes stay available, and the leaf
// hashes after it. Roots, truncation and consistency proofs are for sizes
// of at least Base(); Advance moves Base() on once a checkpoint has
// covered the leaves. Memory: O(log n) hashes plus 32 bytes per leaf after
// Base().
type LeanTree struct {
	base *compact.Range // [0, Base())
	tail [][32]byte     // leaves Base(), Base()+1, ...
}

var leanRanges = &compact.RangeFactory{Hash: HashChildren}

// NewLeanTree returns an empty lean tree.
func NewLeanTree() *LeanTree { return &LeanTree{base: leanRanges.NewEmptyRange(0)} }

// Base is the number of leaves folded into the compact range.
func (t *LeanTree) Base() uint64 { return t.base.End() }

// Size is the number of leaves.
func (t *LeanTree) Size() uint64 { return t.base.End() + uint64(len(t.tail)) }

// Append adds leaf (a leaf hash) at index Size().
func (t *LeanTree) Append(leaf [32]byte) { t.tail = append(t.tail, leaf) }

// rangeAt returns a new compact range of the first size leaves (Base() <=
// size <= Size()).
func (t *LeanTree) rangeAt(size uint64) (*compact.Range, error) {
	if size < t.Base() || size > t.Size() {
		return nil, fmt.Errorf("%w: size %d outside %d..%d", ErrTreeSize, size, t.Base(), t.Size())
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
		return emptyRoot, nil
	}
	h, err := r.GetRootHash(nil)
	if err != nil {
		return [32]byte{}, err
	}
	return [32]byte(h), nil
}

// RootAt returns the root of the first size leaves (Base() <= size <=
// Size()); outside that, an error wrapping ErrTreeSize.
func (t *LeanTree) RootAt(size uint64) ([32]byte, error) {
	r, err := t.rangeAt(size)
	if err != nil {
		return [32]byte{}, err
	}
	return rootOf(r)
}

// Truncate drops the leaves from size on (Base() <= size <= Size());
// outside that, an error wrapping ErrTreeSize.
func (t *LeanTree) Truncate(size uint64) error {
	if size < t.Base() || size > t.Size() {
		return fmt.Errorf("%w: truncate to %d outside %d..%d", ErrTreeSize, size, t.Base(), t.Size())
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
func (t *LeanTree) ConsistencyProof(size1, size2 uint64) ([][32]byte, error) {
	if size2 > t.Size() || size1 > size2 {
		return nil, fmt.Errorf("%w: consistency from %d to %d in a tree of size %d", ErrTreeSize, size1, size2, t.Size())
	}
	r1, err := t.rangeAt(size1)
	if err != nil {
		return nil, err
	}
	nodes, err := proof.Consistency(size1, size2)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTreeSize, err)
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
				return nil, fmt.Errorf("%w: node %d/%d is not in the compact range of %d leaves", ErrTreeSize, id.Level, id.Index, size1)
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
				return nil, fmt.Errorf("%w: node %d/%d is not a perfect subtree", ErrTreeSize, id.Level, id.Index)
			}
		default:
			return nil, fmt.Errorf("%w: node %d/%d straddles size %d", ErrTreeSize, id.Level, id.Index, size1)
		}
	}
	hs, err = nodes.Rehash(hs, HashChildren)
	if err != nil {
		return nil, err
	}
	out := make([][32]byte, len(hs))
	for i, h := range hs {
		out[i] = [32]byte(h)
	}
	return out, nil
}

// Advance folds the leaves before size (Base() <= size <= Size()) into
// the compact range; their hashes are dropped.
func (t *LeanTree) Advance(size uint64) error {
	if size < t.Base() || size > t.Size() {
		return fmt.Errorf("%w: advance to %d outside %d..%d", ErrTreeSize, size, t.Base(), t.Size())
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

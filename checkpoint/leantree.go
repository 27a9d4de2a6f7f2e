package checkpoint

import (
	"fmt"

	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/proof"
)

// LeanTree is a room's RFC 6962 tree as a reader or the checkpointer
// keeps it once checkpoints have covered its start: the compact range
// (merkle/compact's nodes) of the first Base() leaves, whose root and proof
// nodes stay available, and the leaf hashes after it. Roots, truncation and
// consistency proofs are for sizes of at least Base(); Advance moves Base()
// on once a checkpoint has covered the leaves. Memory: O(log n) hashes plus
// 32 bytes per leaf after Base(), or, bounded (Bound), a window of the
// latest leaves and one hash per chunk of the others, which go to a file.
// Roots and Advance fold leaves without allocating (a checkpoint check
// costs hashing only, whatever it covers).
type LeanTree struct {
	baseSize uint64
	// base holds the hashes of compact.RangeNodes(0, baseSize): the
	// perfect subtrees of the first baseSize leaves, largest first.
	base [][32]byte
	// tail holds the leaves tailStart, tailStart+1, ...; the leaves
	// Base() to tailStart are spilled (sp), tailStart == Base() without.
	tail      [][32]byte
	tailStart uint64
	sp        *spill
}

// NewLeanTree returns an empty lean tree.
func NewLeanTree() *LeanTree { return &LeanTree{} }

// Base is the number of leaves folded into the compact range.
func (t *LeanTree) Base() uint64 { return t.baseSize }

// Size is the number of leaves.
func (t *LeanTree) Size() uint64 { return t.tailStart + uint64(len(t.tail)) }

// Append adds leaf (a leaf hash) at index Size().
func (t *LeanTree) Append(leaf [32]byte) {
	t.tail = append(t.tail, leaf)
	if t.sp != nil && uint64(len(t.tail)) >= uint64(t.sp.window)+t.sp.grain {
		t.evict()
	}
}

// foldRange is the compact range of the leaves [0, end) as it is built
// leaf by leaf: the hashes of compact.RangeNodes(0, end), largest first
// (one per bit set in end; 64 at most). It also folds a range that starts
// at a multiple of its length (a perfect subtree), end then counting from
// its start.
type foldRange struct {
	h   [64][32]byte
	n   int
	end uint64
}

// push appends the leaf hash at index end: it merges with the perfect
// subtrees to its left that it completes (one per trailing one bit of end).
func (f *foldRange) push(leaf [32]byte) { f.pushNode(leaf, 0) }

// pushNode appends h, the hash of the perfect subtree of 2^level leaves
// from end on (end a multiple of 2^level), as push does a leaf.
func (f *foldRange) pushNode(h [32]byte, level uint) {
	for i := f.end >> level; i&1 == 1; i >>= 1 {
		f.n--
		h = NodeHash(f.h[f.n], h)
	}
	f.h[f.n] = h
	f.n++
	f.end += 1 << level
}

// root is the RFC 6962 root of the leaves [0, end): the subtrees folded
// right to left, as Tree.RootAt does.
func (f *foldRange) root() [32]byte {
	if f.n == 0 {
		return emptyRoot
	}
	r := f.h[f.n-1]
	for i := f.n - 2; i >= 0; i-- {
		r = NodeHash(f.h[i], r)
	}
	return r
}

// rangeAt folds the first size leaves (Base() <= size <= Size()) into f.
func (t *LeanTree) rangeAt(f *foldRange, size uint64) error {
	if size < t.baseSize || size > t.Size() {
		return fmt.Errorf("%w: size %d outside %d..%d", ErrTreeSize, size, t.baseSize, t.Size())
	}
	f.n, f.end = copy(f.h[:], t.base), t.baseSize
	return t.pushRange(f, t.baseSize, size)
}

// pushRange pushes the leaves [lo, hi) (Base() <= lo <= hi <= Size())
// into f: a spilled chunk as its hash, the other leaves one by one.
func (t *LeanTree) pushRange(f *foldRange, lo, hi uint64) error {
	if t.sp == nil || lo >= t.tailStart {
		for _, leaf := range t.tail[lo-t.tailStart : hi-t.tailStart] {
			f.push(leaf)
		}
		return nil
	}
	sp := t.sp
	n := sp.chunkLen64()
	for i := lo; i < hi; {
		if i >= t.tailStart {
			for _, leaf := range t.tail[i-t.tailStart : hi-t.tailStart] {
				f.push(leaf)
			}
			return nil
		}
		if h, ok := sp.chunkAt(i); ok && i+n <= hi {
			f.pushNode(h, sp.level)
			i += n
			continue
		}
		next := min(hi, (i/n+1)*n)
		if err := t.leaves(i, next, f.push); err != nil {
			return err
		}
		i = next
	}
	return nil
}

// leaves calls fn with each leaf of [lo, hi) (Base() <= lo <= hi <=
// Size()), in order, reading the spilled ones back.
func (t *LeanTree) leaves(lo, hi uint64, fn func([32]byte)) error {
	if lo < t.tailStart {
		if err := t.sp.read(lo, min(hi, t.tailStart), fn); err != nil {
			return err
		}
		if hi <= t.tailStart {
			return nil
		}
		lo = t.tailStart
	}
	for _, leaf := range t.tail[lo-t.tailStart : hi-t.tailStart] {
		fn(leaf)
	}
	return nil
}

// RootAt returns the root of the first size leaves (Base() <= size <=
// Size()); outside that, an error wrapping ErrTreeSize.
func (t *LeanTree) RootAt(size uint64) ([32]byte, error) {
	var f foldRange
	if err := t.rangeAt(&f, size); err != nil {
		return [32]byte{}, err
	}
	return f.root(), nil
}

// Truncate drops the leaves from size on (Base() <= size <= Size());
// outside that, an error wrapping ErrTreeSize.
func (t *LeanTree) Truncate(size uint64) error {
	if size < t.baseSize || size > t.Size() {
		return fmt.Errorf("%w: truncate to %d outside %d..%d", ErrTreeSize, size, t.baseSize, t.Size())
	}
	if size >= t.tailStart {
		clear(t.tail[size-t.tailStart:])
		t.tail = t.tail[:size-t.tailStart]
		return nil
	}
	// Into the spilled leaves: memory starts again at the multiple of
	// the grain below size, the leaves from there read back.
	start := max(t.baseSize, size/t.sp.grain*t.sp.grain)
	clear(t.tail)
	t.tail = t.tail[:0]
	if err := t.sp.read(start, size, func(leaf [32]byte) { t.tail = append(t.tail, leaf) }); err != nil {
		return err
	}
	t.sp.truncate(start)
	t.tailStart = start
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
	var r1 foldRange
	if err := t.rangeAt(&r1, size1); err != nil {
		return nil, err
	}
	nodes, err := proof.Consistency(size1, size2)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTreeSize, err)
	}
	var idBuf [64]compact.NodeID
	ids := compact.RangeNodes(0, size1, idBuf[:0])
	store := make([][32]byte, len(nodes.IDs))
	hs := make([][]byte, len(nodes.IDs))
	for i, id := range nodes.IDs {
		begin, end := id.Coverage()
		switch {
		case end <= size1:
			for j, rid := range ids {
				if rid == id {
					store[i] = r1.h[j]
					hs[i] = store[i][:]
				}
			}
			if hs[i] == nil {
				return nil, fmt.Errorf("%w: node %d/%d is not in the compact range of %d leaves", ErrTreeSize, id.Level, id.Index, size1)
			}
		case begin >= size1 && end <= t.Size():
			// A perfect subtree: its compact range is one node.
			var sub foldRange
			if err := t.pushRange(&sub, begin, end); err != nil {
				return nil, err
			}
			if sub.n != 1 {
				return nil, fmt.Errorf("%w: node %d/%d is not a perfect subtree", ErrTreeSize, id.Level, id.Index)
			}
			store[i] = sub.h[0]
			hs[i] = store[i][:]
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
	if size < t.baseSize || size > t.Size() {
		return fmt.Errorf("%w: advance to %d outside %d..%d", ErrTreeSize, size, t.baseSize, t.Size())
	}
	var f foldRange
	if err := t.rangeAt(&f, size); err != nil {
		return err
	}
	t.base = append(t.base[:0], f.h[:f.n]...)
	t.baseSize = size
	if size > t.tailStart {
		rest := t.tail[size-t.tailStart:]
		if cap(rest) > 2*len(rest)+64 {
			// Most of the slice is spent: copy what is left, so the
			// spent part can be collected.
			rest = append([][32]byte(nil), rest...)
		}
		t.tail, t.tailStart = rest, size
	}
	if t.sp != nil {
		t.sp.advance(size, t.tailStart)
	}
	return nil
}

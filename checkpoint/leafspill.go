package checkpoint

import (
	"errors"
	"fmt"
	"math/bits"
	"os"
)

// ErrLeafSpill is wrapped by a bounded LeanTree's methods (Bound) when its
// file of spilled leaves cannot be read back: the roots and proofs that
// need those leaves are then unknown.
var ErrLeafSpill = errors.New("spilled leaves unreadable")

// LeafBounds bounds the leaf hashes a LeanTree keeps in memory (Bound);
// the zero value of each field is its default.
type LeafBounds struct {
	// Window is how many of the latest leaves stay in memory (default
	// 4,096); the older ones after Base() are written to a file, a chunk
	// at a time.
	Window int
	// Chunk is the leaves per chunk, a power of two (default 1,024). For
	// each chunk of spilled leaves the tree keeps its subtree hash, so a
	// root, a consistency proof or a truncation reads back at most about
	// three chunks of leaves, wherever the size.
	Chunk int
	// MaxChunks bounds the chunk hashes kept (default 4,096): past it,
	// adjacent chunks merge into one of twice the leaves.
	MaxChunks int
	// Dir is where the file goes ("": os.TempDir()). It is removed as
	// soon as it is created (on Unix; elsewhere by Close) and holds the
	// spilled leaves after Base(), plus at most as many again or 65,536
	// before Base() (then it is compacted).
	Dir string
}

// Defaults of LeafBounds.
const (
	DefaultLeafWindow    = 4096
	DefaultLeafChunk     = 1024
	DefaultLeafMaxChunks = 4096
)

// LeafStats is what a bounded LeanTree (Bound) did with its leaves.
type LeafStats struct {
	Spilled uint64 // leaves written to the file
	Reread  uint64 // leaves read back from it
	Chunk   uint64 // leaves per chunk now (LeafBounds.Chunk, doubled per merge)
	Held    uint64 // leaves after Base() in memory now
	// WriteErr is why leaves could not be written: from then on they
	// stay in memory, as in an unbounded tree. ReadErr is why spilled
	// leaves could not be read back (ErrLeafSpill).
	WriteErr error
	ReadErr  error
}

// compactMin is how many dead leaves (before Base()) the file holds
// before it is compacted, once they are also more than the live ones.
const compactMin = 1 << 16

// spill is a bounded LeanTree's file of leaves and chunk hashes.
type spill struct {
	window, maxChunks int
	level             uint   // a chunk is 1<<level leaves
	grain             uint64 // leaves leave memory in multiples of LeafBounds.Chunk, however chunks merge
	dir               string

	f         *os.File
	name      string
	fileFirst uint64 // leaf index at offset 0
	fileEnd   uint64 // the tree's tailStart: leaves [fileFirst, fileEnd) are in the file
	// chunks holds the subtree hashes of the chunks c0, c0+1, ...: every
	// whole chunk in the file from Base() on, but perhaps the first and
	// the last (after a merge).
	c0     uint64
	chunks [][32]byte
	buf    []byte
	stats  LeafStats
}

// Bound keeps at most about b.Window+b.Chunk of t's leaves after Base() in
// memory, from now on: older ones go to a file in b.Dir, and for each
// chunk of them t keeps its subtree hash (merged past b.MaxChunks). Roots,
// proofs and verdicts are those of an unbounded tree; LeafStats says how
// many leaves were written and read back. Errors: b.Chunk not a power of
// two, or t already bounded.
func (t *LeanTree) Bound(b LeafBounds) error {
	if t.sp != nil {
		return errors.New("checkpoint: the tree is bounded already")
	}
	if b.Window <= 0 {
		b.Window = DefaultLeafWindow
	}
	if b.Chunk <= 0 {
		b.Chunk = DefaultLeafChunk
	}
	if b.MaxChunks <= 0 {
		b.MaxChunks = DefaultLeafMaxChunks
	}
	if b.Chunk&(b.Chunk-1) != 0 {
		return fmt.Errorf("checkpoint: a chunk of %d leaves is not a power of two", b.Chunk)
	}
	t.sp = &spill{window: b.Window, maxChunks: max(b.MaxChunks, 2), level: uint(bits.TrailingZeros(uint(b.Chunk))), grain: uint64(b.Chunk), dir: b.Dir,
		fileFirst: t.tailStart, fileEnd: t.tailStart}
	return nil
}

// LeafStats reports what t did with its leaves (only Held unless bounded).
func (t *LeanTree) LeafStats() LeafStats {
	if t.sp == nil {
		return LeafStats{Held: uint64(len(t.tail))}
	}
	s := t.sp.stats
	s.Chunk, s.Held = t.sp.chunkLen64(), uint64(len(t.tail))
	return s
}

// Close removes t's file of spilled leaves, if it has one; t must not be
// used after.
func (t *LeanTree) Close() error {
	if t.sp == nil || t.sp.f == nil {
		return nil
	}
	err := t.sp.f.Close()
	if rerr := os.Remove(t.sp.name); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
		err = rerr
	}
	t.sp.f = nil
	return err
}

// evict writes the leaves before the window, to a chunk boundary, to the
// file and hashes the chunks they complete. When the file cannot be
// written they stay in memory.
func (t *LeanTree) evict() {
	sp := t.sp
	if sp.stats.WriteErr != nil || sp.stats.ReadErr != nil {
		return
	}
	end := (t.Size() - uint64(sp.window)) / sp.grain * sp.grain
	if end <= t.tailStart {
		return
	}
	k := end - t.tailStart
	if err := sp.write(t.tailStart, t.tail[:k]); err != nil {
		sp.stats.WriteErr = err
		return
	}
	n := sp.chunkLen64()
	first := (t.baseSize + n - 1) / n
	if len(sp.chunks) > 0 {
		first = sp.c0 + uint64(len(sp.chunks))
	}
	for j := first; (j+1)*n <= end; j++ {
		var c foldRange
		if err := t.leaves(j*n, (j+1)*n, c.push); err != nil {
			sp.fileEnd = t.tailStart // ReadErr set: the leaves stay in memory
			return
		}
		if len(sp.chunks) == 0 {
			sp.c0 = j
		}
		sp.chunks = append(sp.chunks, c.h[0])
	}
	m := copy(t.tail, t.tail[k:])
	clear(t.tail[m:])
	t.tail, t.tailStart = t.tail[:m], end
	sp.stats.Spilled += k
	sp.merge()
}

func (sp *spill) chunkLen64() uint64 { return 1 << sp.level }

// chunkAt returns the hash of the chunk starting at leaf i, if kept.
func (sp *spill) chunkAt(i uint64) ([32]byte, bool) {
	n := sp.chunkLen64()
	if i%n != 0 || i/n < sp.c0 || i/n-sp.c0 >= uint64(len(sp.chunks)) {
		return [32]byte{}, false
	}
	return sp.chunks[i/n-sp.c0], true
}

// merge halves the chunk hashes while there are more than maxChunks: a
// chunk of twice the leaves from each aligned pair; an unpaired first or
// last chunk is dropped (its leaves are read back when needed).
func (sp *spill) merge() {
	for len(sp.chunks) > sp.maxChunks {
		if sp.c0%2 == 1 {
			sp.chunks = sp.chunks[1:]
			sp.c0++
		}
		m := len(sp.chunks) / 2
		hs := make([][32]byte, m, max(m, sp.maxChunks))
		for i := range hs {
			hs[i] = NodeHash(sp.chunks[2*i], sp.chunks[2*i+1])
		}
		sp.chunks, sp.c0 = hs, sp.c0/2
		sp.level++
	}
}

// write writes leaves, from index at (the file's end), to the file,
// creating it on first use.
func (sp *spill) write(at uint64, leaves [][32]byte) error {
	if sp.f == nil {
		f, err := os.CreateTemp(sp.dir, "roompub-leaves-*")
		if err != nil {
			return err
		}
		// Removed at once where the system allows: nothing is left
		// behind, however the process ends.
		if os.Remove(f.Name()) == nil {
			sp.name = ""
		} else {
			sp.name = f.Name()
		}
		sp.f, sp.fileFirst, sp.fileEnd = f, at, at
	}
	sp.buf = sp.buf[:0]
	for _, l := range leaves {
		sp.buf = append(sp.buf, l[:]...)
	}
	if _, err := sp.f.WriteAt(sp.buf, int64(at-sp.fileFirst)*32); err != nil {
		return err
	}
	sp.fileEnd = at + uint64(len(leaves))
	return nil
}

// grow sets buf to n bytes.
func (sp *spill) grow(n int) {
	if cap(sp.buf) < n {
		sp.buf = make([]byte, n)
	}
	sp.buf = sp.buf[:n]
}

// readBlock is how many leaves read reads at once (32 KiB).
const readBlock = 1024

// read calls fn with each of the leaves [lo, hi) of the file, in order.
func (sp *spill) read(lo, hi uint64, fn func([32]byte)) error {
	if sp.stats.ReadErr != nil {
		return sp.stats.ReadErr
	}
	if lo < sp.fileFirst || hi > sp.fileEnd {
		return fmt.Errorf("%w: leaves %d..%d, the file holds %d..%d", ErrLeafSpill, lo, hi, sp.fileFirst, sp.fileEnd)
	}
	for lo < hi {
		k := min(hi-lo, readBlock)
		sp.grow(int(k) * 32)
		if _, err := sp.f.ReadAt(sp.buf, int64(lo-sp.fileFirst)*32); err != nil {
			err = fmt.Errorf("%w: %w", ErrLeafSpill, err)
			if sp.stats.ReadErr == nil {
				sp.stats.ReadErr = err
			}
			return err
		}
		for i := range k {
			fn([32]byte(sp.buf[i*32 : i*32+32]))
		}
		sp.stats.Reread += k
		lo += k
	}
	return nil
}

// truncate drops the file's leaves from end on, and the chunks that
// reach past it.
func (sp *spill) truncate(end uint64) {
	n := sp.chunkLen64()
	keep := uint64(0)
	if end/n > sp.c0 {
		keep = min(uint64(len(sp.chunks)), end/n-sp.c0)
	}
	clear(sp.chunks[keep:])
	sp.chunks = sp.chunks[:keep]
	sp.fileEnd = end
}

// advance drops the chunks before base (the tree's new Base()) and, when
// no spilled leaf is after it, the file's contents; a file mostly of
// leaves before base is compacted.
func (sp *spill) advance(base, tailStart uint64) {
	n := sp.chunkLen64()
	drop := 0
	for drop < len(sp.chunks) && (sp.c0+uint64(drop))*n < base {
		drop++
	}
	if drop > 0 {
		m := copy(sp.chunks, sp.chunks[drop:])
		clear(sp.chunks[m:])
		sp.chunks, sp.c0 = sp.chunks[:m], sp.c0+uint64(drop)
	}
	if base >= sp.fileEnd {
		sp.fileFirst, sp.fileEnd = tailStart, tailStart
		sp.chunks = sp.chunks[:0]
		if sp.f != nil {
			if err := sp.f.Truncate(0); err != nil && sp.stats.WriteErr == nil {
				sp.stats.WriteErr = err
			}
		}
		return
	}
	dead, live := base-sp.fileFirst, sp.fileEnd-base
	if dead < compactMin || dead < live || sp.f == nil {
		return
	}
	// Move the live leaves to the front: each block is read before the
	// ones written over it (the destination is always before the source).
	for done := uint64(0); done < live; {
		k := min(live-done, readBlock)
		sp.grow(int(k) * 32)
		if _, err := sp.f.ReadAt(sp.buf, int64(dead+done)*32); err != nil {
			sp.stats.ReadErr = fmt.Errorf("%w: %w", ErrLeafSpill, err)
			return
		}
		if _, err := sp.f.WriteAt(sp.buf, int64(done)*32); err != nil {
			sp.stats.ReadErr = fmt.Errorf("%w: compacting: %w", ErrLeafSpill, err)
			return
		}
		done += k
	}
	if err := sp.f.Truncate(int64(live) * 32); err != nil {
		sp.stats.ReadErr = fmt.Errorf("%w: compacting: %w", ErrLeafSpill, err)
		return
	}
	sp.fileFirst = base
}

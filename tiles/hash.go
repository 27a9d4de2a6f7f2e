package tiles

import (
	"context"
	"crypto/sha256"
	"fmt"
)

// leafHashes appends the RFC 6962 leaf hash, SHA-256(0x00 || entry), of
// each entry to dst.
func leafHashes(dst []byte, entries [][]byte) []byte {
	h := sha256.New()
	for _, e := range entries {
		h.Reset()
		h.Write([]byte{0})
		h.Write(e)
		dst = h.Sum(dst)
	}
	return dst
}

// tileRoot returns the RFC 6962 Merkle Tree Hash of a full tile's 256
// hashes, the hash the tile stands for one level up: interior nodes are
// SHA-256(0x01 || left || right).
func tileRoot(tile []byte) [HashSize]byte {
	var buf [TileWidth * HashSize]byte
	copy(buf[:], tile)
	var node [1 + 2*HashSize]byte
	node[0] = 1
	for n := TileWidth; n > 1; n /= 2 {
		for i := 0; i < n/2; i++ {
			copy(node[1:], buf[2*i*HashSize:(2*i+2)*HashSize])
			sum := sha256.Sum256(node[:])
			copy(buf[i*HashSize:], sum[:])
		}
	}
	var root [HashSize]byte
	copy(root[:], buf[:HashSize])
	return root
}

// logView is one log as a request sees it: its source and where its full
// tiles go in the cache.
type logView struct {
	src   Source
	cache *Cache
	owner uint64
	name  string
}

// entries returns the n entries from start, checked against what a bundle
// can carry.
func (l *logView) entries(ctx context.Context, start int64, n int) ([][]byte, error) {
	es, err := l.src.Entries(ctx, start, start+int64(n))
	if err != nil {
		return nil, fmt.Errorf("entries [%d, %d): %w", start, start+int64(n), err)
	}
	if len(es) != n {
		return nil, fmt.Errorf("entries [%d, %d): %w: got %d entries", start, start+int64(n), ErrSourceShort, len(es))
	}
	for i, e := range es {
		if len(e) > MaxEntrySize {
			return nil, fmt.Errorf("entry %d: %w: %d bytes", start+int64(i), ErrEntryTooLarge, len(e))
		}
	}
	return es, nil
}

// hashTile returns the hash tile ref: level 0 from the entries' leaf
// hashes, level L from the roots of full level L-1 tiles, each of which is
// cached, so a tile is computed from entries once while it stays cached.
func (l *logView) hashTile(ctx context.Context, ref tileRef) ([]byte, error) {
	key := cacheKey{owner: l.owner, name: l.name, level: ref.level, index: ref.index}
	full := ref.width == TileWidth
	if full {
		if b, ok := l.cache.get(key); ok {
			return b, nil
		}
	}
	out := make([]byte, 0, ref.width*HashSize)
	if ref.level == 0 {
		es, err := l.entries(ctx, ref.index*TileWidth, ref.width)
		if err != nil {
			return nil, err
		}
		out = leafHashes(out, es)
	} else {
		for i := 0; i < ref.width; i++ {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			sub, err := l.hashTile(ctx, tileRef{level: ref.level - 1, index: ref.index*TileWidth + int64(i), width: TileWidth})
			if err != nil {
				return nil, err
			}
			root := tileRoot(sub)
			out = append(out, root[:]...)
		}
	}
	if full {
		l.cache.add(key, out)
	}
	return out, nil
}

// bundle returns the entry bundle ref: each entry as a big-endian uint16
// length and its bytes (C2SP tlog-tiles).
func (l *logView) bundle(ctx context.Context, ref tileRef) ([]byte, error) {
	key := cacheKey{owner: l.owner, name: l.name, level: entriesLevel, index: ref.index}
	full := ref.width == TileWidth
	if full {
		if b, ok := l.cache.get(key); ok {
			return b, nil
		}
	}
	es, err := l.entries(ctx, ref.index*TileWidth, ref.width)
	if err != nil {
		return nil, err
	}
	n := 0
	for _, e := range es {
		n += 2 + len(e)
	}
	out := make([]byte, 0, n)
	for _, e := range es {
		out = append(out, byte(len(e)>>8), byte(len(e)))
		out = append(out, e...)
	}
	if full {
		l.cache.add(key, out)
	}
	return out, nil
}

// within reports whether the tree of size holds every hash of ref: the
// tile's last hash covers (N*256 + W) * 256**L entries.
func within(ref tileRef, size int64) bool {
	level := ref.level
	if level == entriesLevel {
		level = 0
	}
	if 8*level >= 63 {
		return false
	}
	n := size >> (8 * level) // complete subtrees of 256**L entries
	if n < int64(ref.width) {
		return false
	}
	return ref.index <= (n-int64(ref.width))/TileWidth
}

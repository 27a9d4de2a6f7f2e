package tiles

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"filippo.io/torchwood"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// The verification in these tests is torchwood's and x/mod's, never ours:
// a torchwood TileFetcher and Client read the served log as any tlog
// client would.

const bigSize = 70_000

// fetchTree fetches the checkpoint through f, verifies its signature and
// parses it.
func fetchTree(t *testing.T, ctx context.Context, f *torchwood.TileFetcher, l *memLog) tlog.Tree {
	t.Helper()
	b, err := f.ReadEndpoint(ctx, "checkpoint")
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	n, err := note.Open(b, l.verifier(t))
	if err != nil {
		t.Fatalf("checkpoint signature: %v", err)
	}
	c, err := torchwood.ParseCheckpoint(n.Text)
	if err != nil {
		t.Fatalf("checkpoint body: %v", err)
	}
	if c.Origin != testOrigin {
		t.Fatalf("origin %q, want %q", c.Origin, testOrigin)
	}
	return c.Tree
}

// readAll iterates every entry from from with client.Entries (which verifies each
// against the tree), resuming where an iteration stops short of a
// trailing partial bundle, and checks each entry's bytes.
func readAll(t *testing.T, ctx context.Context, c *torchwood.Client, tree tlog.Tree, from int64, each func(i int64)) int64 {
	t.Helper()
	next := from
	for next < tree.N {
		before := next
		for i, e := range c.Entries(ctx, tree, next) {
			if i != next {
				t.Fatalf("entry %d yielded, want %d", i, next)
			}
			if !bytes.Equal(e, entryAt(i)) {
				t.Fatalf("entry %d: %d bytes differ from the log's", i, len(e))
			}
			next++
			if each != nil {
				each(i)
			}
		}
		if err := c.Err(); err != nil {
			t.Fatalf("entries from %d: %v", before, err)
		}
		if next == before {
			t.Fatalf("entries from %d: no progress", before)
		}
	}
	return next - from
}

func TestTorchwoodReadsEveryEntry(t *testing.T) {
	ctx := context.Background()
	l := newMemLog(t, bigSize)
	for _, size := range []int64{0, 1, 255, 256, 257, 1000, 65_536, 65_537, bigSize} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			srv := serve(t, NewHandler(newView(t, l, size), nil))
			f, err := torchwood.NewTileFetcher(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			c, err := torchwood.NewClient(f)
			if err != nil {
				t.Fatal(err)
			}
			tree := fetchTree(t, ctx, f, l)
			if want := l.tree(t, size); tree != want {
				t.Fatalf("tree %d %x, want %d %x", tree.N, tree.Hash, want.N, want.Hash)
			}
			// Every entry of all but the two sizes at 65,536, whose
			// last 600 entries (across the level-1 boundary) stand for
			// the rest: the race detector makes reading them slow.
			from := int64(0)
			if size == 65_536 || size == 65_537 {
				from = size - 600
			}
			if n := readAll(t, ctx, c, tree, from, nil); n != size-from {
				t.Fatalf("read %d entries, want %d", n, size-from)
			}
			if size == 0 {
				return
			}
			for _, i := range []int64{0, 1, size / 2, size - 1} {
				if i >= size {
					continue
				}
				e, proof, err := c.Entry(ctx, tree, i)
				if err != nil {
					t.Fatalf("entry %d: %v", i, err)
				}
				if !bytes.Equal(e, entryAt(i)) {
					t.Fatalf("entry %d differs", i)
				}
				if err := tlog.CheckRecord(proof, tree.N, tree.Hash, i, tlog.RecordHash(e)); err != nil {
					t.Fatalf("entry %d inclusion: %v", i, err)
				}
				// The proof is for this entry only.
				if err := tlog.CheckRecord(proof, tree.N, tree.Hash, i, tlog.RecordHash(append(e, 'x'))); err == nil {
					t.Fatalf("entry %d: the proof checks a different entry too", i)
				}
			}
		})
	}
}

func TestTorchwoodChecksConsistency(t *testing.T) {
	ctx := context.Background()
	l := newMemLog(t, bigSize)
	for _, p := range [][2]int64{{1000, bigSize}, {1000, 65_537}, {257, 1000}, {65_536, 65_537}, {65_537, bigSize}, {1, 256}} {
		old, size := p[0], p[1]
		t.Run(fmt.Sprintf("%d-%d", old, size), func(t *testing.T) {
			v := newView(t, l, old)
			srv := serve(t, NewHandler(v, nil))
			f, err := torchwood.NewTileFetcher(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			oldTree := fetchTree(t, ctx, f, l)
			v.publish(t, size)
			tree := fetchTree(t, ctx, f, l)
			if oldTree.N != old || tree.N != size {
				t.Fatalf("checkpoints of %d and %d, want %d and %d", oldTree.N, tree.N, old, size)
			}
			proof, err := tlog.ProveTree(tree.N, oldTree.N, torchwood.TileHashReaderWithContext(ctx, tree, f))
			if err != nil {
				t.Fatalf("prove: %v", err)
			}
			if err := tlog.CheckTree(proof, tree.N, tree.Hash, oldTree.N, oldTree.Hash); err != nil {
				t.Fatalf("consistency: %v", err)
			}
			// The old tree's partial tiles are still served: its root
			// can be recomputed from tiles after the log grew.
			h, err := tlog.TreeHash(oldTree.N, torchwood.TileHashReaderWithContext(ctx, oldTree, f))
			if err != nil || h != oldTree.Hash {
				t.Fatalf("old tree from tiles: %x, %v; want %x", h, err, oldTree.Hash)
			}
			wrong := oldTree.Hash
			wrong[0] ^= 1
			if err := tlog.CheckTree(proof, tree.N, tree.Hash, oldTree.N, wrong); err == nil {
				t.Fatal("the proof checks a different old root too")
			}
		})
	}
}

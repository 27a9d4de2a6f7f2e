package tiles

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"filippo.io/torchwood"
	"golang.org/x/mod/sumdb/tlog"
)

// hugeSize is the log the cache tests read: 1,171 full level-0 tiles and
// one of width 224, 4 full level-1 tiles and one of width 147, one level-2
// tile of width 4.
const hugeSize = 300_000

func TestCacheBoundWhileReadingEverything(t *testing.T) {
	ctx := context.Background()
	l := newMemLog(t, hugeSize)
	const bound = 256 << 10 // about 30 full tiles, against 2,350 full tiles read
	cache := NewCache(bound)
	v := newView(t, l, hugeSize)
	srv := serve(t, NewHandler(v, &Options{Cache: cache}))
	f, err := torchwood.NewTileFetcher(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	c, err := torchwood.NewClient(f)
	if err != nil {
		t.Fatal(err)
	}
	tree := fetchTree(t, ctx, f, l)
	if want := l.tree(t, hugeSize); tree != want {
		t.Fatalf("tree %d %x, want %d %x", tree.N, tree.Hash, want.N, want.Hash)
	}
	n := readAll(t, ctx, c, tree, 0, func(i int64) {
		if i%TileWidth == 0 {
			if b := cache.Bytes(); b > bound {
				t.Fatalf("at entry %d the cache holds %d bytes, bound %d", i, b, bound)
			}
		}
	})
	if n != hugeSize {
		t.Fatalf("read %d entries, want %d", n, hugeSize)
	}
	cache.mu.Lock()
	peak := cache.peak
	cache.mu.Unlock()
	if peak > bound || peak < bound/2 {
		t.Fatalf("the cache peaked at %d bytes: want at most %d, and used", peak, bound)
	}
	if cache.Len() == 0 {
		t.Fatal("the cache is empty after the read")
	}
	// Each of the 1,172 bundles and 1,172 level-0 tiles reads the source
	// once, and the 1,171 level-0 tiles under the top tiles the client
	// verifies against are read before, then evicted: some 3,850 reads as
	// the fetcher's parallel requests race; a cache whose level-0 tiles
	// flush its level-1 tiles reads some 5,600.
	if reads := v.entryCalls.Load(); reads < 2344 || reads > 4600 {
		t.Fatalf("the read cost %d source reads, want 2,344 to 4,600", reads)
	}
}

// TestHigherTilesReuseLowerOnes counts the source's reads: a cold level-2
// tile reads each level-0 tile's entries once, and what it cached serves
// the tiles below it without reading again.
func TestHigherTilesReuseLowerOnes(t *testing.T) {
	l := newMemLog(t, hugeSize)
	v := newView(t, l, hugeSize)
	h := NewHandler(v, nil)
	for _, c := range []struct {
		tile  tlog.Tile
		reads int64
	}{
		{tlog.Tile{H: 8, L: 2, N: 0, W: 4}, 4 * 256}, // cold: 1,024 level-0 tiles
		{tlog.Tile{H: 8, L: 2, N: 0, W: 4}, 0},       // partial, not cached, but its level-1 tiles are
		{tlog.Tile{H: 8, L: 1, N: 3, W: 256}, 0},
		{tlog.Tile{H: 8, L: 0, N: 1000, W: 256}, 0},
		{tlog.Tile{H: 8, L: 1, N: 4, W: 147}, 147},
		{tlog.Tile{H: 8, L: 1, N: 4, W: 100}, 0},
		{tlog.Tile{H: 8, L: 0, N: 1171, W: 224}, 1}, // partial level 0 reads its entries
		{tlog.Tile{H: 8, L: 0, N: 1171, W: 224}, 1},
	} {
		p := torchwood.TilePath(c.tile)
		before := v.entryCalls.Load()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/"+p, nil))
		if rec.Code != http.StatusOK || !bytes.Equal(rec.Body.Bytes(), wantTile(t, l, c.tile)) {
			t.Fatalf("%s: status %d, %d bytes", p, rec.Code, rec.Body.Len())
		}
		if got := v.entryCalls.Load() - before; got != c.reads {
			t.Errorf("%s read the source %d times, want %d", p, got, c.reads)
		}
	}
}

func BenchmarkColdTopTile(b *testing.B) {
	l := newMemLog(b, hugeSize)
	v := newView(b, l, hugeSize)
	want := wantTile(b, l, tlog.Tile{H: 8, L: 2, N: 0, W: 4})
	b.ResetTimer()
	for b.Loop() {
		h := NewHandler(v, nil) // a cold cache each time
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/tile/2/000.p/4", nil))
		if !bytes.Equal(rec.Body.Bytes(), want) {
			b.Fatal("top tile differs")
		}
	}
	b.ReportMetric(float64(4*65536)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}

func BenchmarkWarmFullTile(b *testing.B) {
	l := newMemLog(b, hugeSize)
	h := NewHandler(newView(b, l, hugeSize), nil)
	req := httptest.NewRequest("GET", "/tile/1/002", nil)
	h.ServeHTTP(httptest.NewRecorder(), req)
	b.ResetTimer()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Body.Len() != TileWidth*HashSize {
			b.Fatal("short tile")
		}
	}
}

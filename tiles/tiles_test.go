package tiles

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"filippo.io/torchwood"
	"golang.org/x/mod/sumdb/tlog"
)

// wantTile is tile t of l's first n entries as x/mod's tlog builds it from
// its own stored hashes.
func wantTile(t testing.TB, l *memLog, tile tlog.Tile) []byte {
	t.Helper()
	b, err := tlog.ReadTileData(tile, l)
	if err != nil {
		t.Fatalf("tlog.ReadTileData(%v): %v", tile, err)
	}
	return b
}

// wantBundle is the entry bundle of entries [start, start+w), encoded by
// torchwood.
func wantBundle(t testing.TB, start int64, w int) []byte {
	t.Helper()
	var b []byte
	for i := start; i < start+int64(w); i++ {
		var err error
		if b, err = torchwood.AppendTileEntry(b, entryAt(i)); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// TestTilesOfSeventyThousand: the spec's example, a tree of 70,000: 273
// full level-0 tiles and one of width 112, one full level-1 tile and one
// of width 17, one level-2 tile of width 1; nothing else.
func TestTilesOfSeventyThousand(t *testing.T) {
	l := newMemLog(t, bigSize)
	srv := serve(t, NewHandler(newView(t, l, bigSize), nil))
	tl := func(level int, n int64, w int) tlog.Tile { return tlog.Tile{H: 8, L: level, N: n, W: w} }
	for _, c := range []struct {
		tile tlog.Tile
		want []byte
	}{
		{tl(0, 0, 256), wantTile(t, l, tl(0, 0, 256))},
		{tl(0, 272, 256), wantTile(t, l, tl(0, 272, 256))},
		{tl(0, 273, 112), wantTile(t, l, tl(0, 273, 112))},
		{tl(0, 273, 5), wantTile(t, l, tl(0, 273, 5))}, // an earlier checkpoint's
		{tl(0, 3, 200), wantTile(t, l, tl(0, 3, 200))}, // superseded by the full tile, still served
		{tl(1, 0, 256), wantTile(t, l, tl(1, 0, 256))},
		{tl(1, 1, 17), wantTile(t, l, tl(1, 1, 17))},
		{tl(2, 0, 1), wantTile(t, l, tl(2, 0, 1))},
		{tl(-1, 0, 256), wantBundle(t, 0, 256)},
		{tl(-1, 273, 112), wantBundle(t, 273*256, 112)},
		{tl(-1, 100, 256), wantBundle(t, 100*256, 256)},
	} {
		p := torchwood.TilePath(c.tile)
		t.Run(p, func(t *testing.T) {
			for _, method := range []string{"GET", "HEAD"} {
				st, hd, body := get(t, method, srv.URL+"/"+p)
				if st != http.StatusOK {
					t.Fatalf("%s: status %d", method, st)
				}
				want := c.want
				if method == "HEAD" {
					want = nil
				}
				if !bytes.Equal(body, want) {
					t.Fatalf("%s: %d bytes, want %d (%x...)", method, len(body), len(want), want[:min(len(want), 8)])
				}
				cc := CacheImmutable
				if c.tile.W < 256 {
					cc = CachePartial
				}
				if got := hd.Get("Cache-Control"); got != cc {
					t.Errorf("Cache-Control %q, want %q", got, cc)
				}
				if got := hd.Get("Content-Type"); got != "application/octet-stream" {
					t.Errorf("Content-Type %q", got)
				}
				if got := hd.Get("Content-Length"); got != strconv.Itoa(len(c.want)) {
					t.Errorf("Content-Length %q, want %d", got, len(c.want))
				}
			}
		})
	}
	for _, p := range []string{
		"tile/0/273", "tile/0/273.p/113", "tile/0/274.p/1", "tile/1/001", "tile/1/001.p/18",
		"tile/2/000", "tile/2/000.p/2", "tile/3/000.p/1", "tile/63/000.p/1",
		"tile/entries/273", "tile/entries/273.p/113", "tile/entries/x001/000.p/1",
	} {
		st, hd, _ := get(t, "GET", srv.URL+"/"+p)
		if st != http.StatusNotFound || hd.Get("Cache-Control") != CacheNone {
			t.Errorf("%s beyond the tree: status %d, Cache-Control %q; want 404, %q", p, st, hd.Get("Cache-Control"), CacheNone)
		}
	}
}

func TestCheckpointServed(t *testing.T) {
	l := newMemLog(t, bigSize)
	v := newView(t, l, 1000)
	srv := serve(t, NewHandler(v, nil))
	st, hd, body := get(t, "GET", srv.URL+"/checkpoint")
	if st != 200 || !bytes.Equal(body, l.checkpoint(t, 1000)) {
		t.Fatalf("status %d, body %q", st, body)
	}
	if hd.Get("Content-Type") != "text/plain; charset=utf-8" || hd.Get("Cache-Control") != CacheNone {
		t.Fatalf("headers %v", hd)
	}
	// A tile of the next checkpoint appears with it, not before.
	if st, _, _ := get(t, "GET", srv.URL+"/tile/0/003.p/232"); st != 200 {
		t.Fatalf("tile of size 1000: %d", st)
	}
	if st, _, _ := get(t, "GET", srv.URL+"/tile/0/003.p/233"); st != 404 {
		t.Fatalf("tile beyond size 1000: %d", st)
	}
	v.publish(t, 1001)
	if st, _, _ := get(t, "GET", srv.URL+"/tile/0/003.p/233"); st != 200 {
		t.Fatalf("tile of size 1001: %d", st)
	}
}

func TestBundleGzip(t *testing.T) {
	l := newMemLog(t, bigSize)
	srv := serve(t, NewHandler(newView(t, l, 1000), nil))
	want := wantBundle(t, 256, 256)
	for _, c := range []struct {
		accept string
		gz     bool
	}{
		{"", false}, {"identity", false}, {"gzip", true}, {"br, gzip;q=0.5", true},
		{"gzip;q=0", false}, {"*", true}, {"GZIP ; Q=1", true},
	} {
		var hdr []string
		if c.accept != "" {
			hdr = []string{"Accept-Encoding", c.accept}
		}
		st, hd, body := get(t, "GET", srv.URL+"/tile/entries/001", hdr...)
		if st != 200 || hd.Get("Vary") != "Accept-Encoding" {
			t.Fatalf("%q: status %d, Vary %q", c.accept, st, hd.Get("Vary"))
		}
		if got := hd.Get("Content-Encoding") == "gzip"; got != c.gz {
			t.Fatalf("%q: gzip %v, want %v", c.accept, got, c.gz)
		}
		if c.gz {
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if body, err = io.ReadAll(zr); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(body, want) {
			t.Fatalf("%q: bundle differs", c.accept)
		}
	}
	// Hash tiles are not compressed (they would not shrink).
	_, hd, _ := get(t, "GET", srv.URL+"/tile/0/001", "Accept-Encoding", "gzip")
	if hd.Get("Content-Encoding") != "" {
		t.Fatalf("hash tile encoded %q", hd.Get("Content-Encoding"))
	}
}

func TestPathsRefused(t *testing.T) {
	l := newMemLog(t, bigSize)
	srv := serve(t, NewHandler(newView(t, l, 300), nil))
	for _, c := range []struct {
		path   string
		status int
	}{
		{"/tile/0/001.p/44", 200},
		{"/tile/0/001.p/45", 404}, // partial beyond the checkpoint
		{"/tile/0/001", 404},
		{"/tile/1/000.p/1", 200},
		{"/tile/1/000.p/2", 404},
		{"/tile/0/1", 400},
		{"/tile/0/01", 400},
		{"/tile/0/0001", 400},
		{"/tile/00/000", 400},
		{"/tile/01/000", 400},
		{"/tile/64/000", 400},
		{"/tile/-1/000", 400},
		{"/tile/+1/000", 400},
		{"/tile/0/000.p/0", 400},
		{"/tile/0/000.p/256", 400},
		{"/tile/0/000.p/01", 400},
		{"/tile/0/000.p/", 400},
		{"/tile/0/000.p", 400},
		{"/tile/0/000/", 400},
		{"/tile/0/x000/001", 400}, // non-canonical: a leading x000
		{"/tile/0/x001", 400},
		{"/tile/0/001/002", 400},
		{"/tile/0/x1/002", 400},
		{"/tile/0/%30%30%30", 400},
		{"/tile/0/00a", 400},
		{"/tile//000", 400},
		{"/tile/", 400},
		{"/tile/0", 400},
		{"/tile/entries", 400},
		{"/tile/entries/", 400},
		{"/tile/data/000", 400},
		{"/tile/0/x001/x002/x003/x004/x005/x006/x007/008", 400}, // 8 elements
		{"/tile/0/x009/x223/x372/x036/x854/x775/808", 404},      // 2**63
		{"/tile/0/x009/x223/x372/x036/x854/x775/807", 404},      // 2**63-1
		{"/tile/63/000", 404},
		{"/tile/8/000.p/1", 404},
		{"/tile", 404},
		{"/checkpoint/", 404},
		{"/checkpoint.txt", 404},
		{"/", 404},
		{"//checkpoint", 404},
		{"/Tile/0/000", 404},
	} {
		st, hd, _ := get(t, "GET", srv.URL+c.path)
		if st != c.status {
			t.Errorf("%s: status %d, want %d", c.path, st, c.status)
		}
		if st != 200 && hd.Get("Cache-Control") != CacheNone {
			t.Errorf("%s: Cache-Control %q on %d", c.path, hd.Get("Cache-Control"), st)
		}
	}
	for _, m := range []string{"POST", "PUT", "DELETE", "OPTIONS", "PATCH"} {
		st, hd, _ := get(t, m, srv.URL+"/checkpoint")
		if st != http.StatusMethodNotAllowed || hd.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: status %d, Allow %q", m, st, hd.Get("Allow"))
		}
	}
}

func TestMux(t *testing.T) {
	l := newMemLog(t, bigSize)
	a, b := newView(t, l, 300), newView(t, l, 1000)
	var mu sync.Mutex
	var asked []string
	cache := NewCache(1 << 20)
	mux := NewMux(func(ctx context.Context, seg string) (Source, error) {
		mu.Lock()
		asked = append(asked, seg)
		mu.Unlock()
		switch seg {
		case "room-a":
			return a, nil
		case "room%2Fb":
			return b, nil
		case "broken":
			return nil, errors.New("lookup failed")
		}
		return nil, ErrUnknownLog
	}, &Options{Cache: cache})
	srv := serve(t, mux)
	for _, c := range []struct {
		path   string
		status int
		body   []byte
	}{
		{"/room-a/checkpoint", 200, l.checkpoint(t, 300)},
		{"/room%2Fb/checkpoint", 200, l.checkpoint(t, 1000)},
		{"/room-a/tile/0/000", 200, wantTile(t, l, tlog.Tile{H: 8, L: 0, N: 0, W: 256})},
		{"/room%2Fb/tile/entries/002", 200, wantBundle(t, 512, 256)},
		{"/room-a/tile/0/001", 404, nil},
		{"/room%2Fb/tile/0/001", 200, wantTile(t, l, tlog.Tile{H: 8, L: 0, N: 1, W: 256})},
		{"/room-c/checkpoint", 404, nil},
		{"/broken/checkpoint", 500, nil},
		{"/room-a", 404, nil},
		{"/room-a/", 404, nil},
		{"//checkpoint", 404, nil},
		{"/room-a/tile/0/1", 400, nil},
	} {
		st, _, body := get(t, "GET", srv.URL+c.path)
		if st != c.status || (c.body != nil && !bytes.Equal(body, c.body)) {
			t.Errorf("%s: status %d (%d bytes), want %d", c.path, st, len(body), c.status)
		}
	}
	if st, _, _ := get(t, "POST", srv.URL+"/room-a/checkpoint"); st != 405 {
		t.Errorf("POST: %d", st)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(strings.Join(asked, " "), "room%2Fb") {
		t.Errorf("the resolver was not given the raw segment: %q", asked)
	}
	// Both logs' full tiles are cached under their own names.
	if cache.Len() != 3 {
		t.Errorf("cache holds %d tiles, want 3", cache.Len())
	}
}

func TestSourceErrors(t *testing.T) {
	l := newMemLog(t, bigSize)
	boom := errors.New("stream unavailable")
	for _, c := range []struct {
		name  string
		path  string
		setup func(v *view)
		want  error
	}{
		{"entries", "/tile/entries/000", func(v *view) { v.failNext.Store(&boom) }, boom},
		{"level 0", "/tile/0/000", func(v *view) { v.failNext.Store(&boom) }, boom},
		{"level 1", "/tile/1/000", func(v *view) { v.failNext.Store(&boom) }, boom},
		{"partial", "/tile/0/003.p/232", func(v *view) { v.failNext.Store(&boom) }, boom},
		{"checkpoint", "/checkpoint", func(v *view) { v.failCkpt.Store(&boom) }, boom},
		{"checkpoint for a tile", "/tile/0/000", func(v *view) { v.failCkpt.Store(&boom) }, boom},
		{"short", "/tile/0/000", func(v *view) {
			m := func(es [][]byte) [][]byte { return es[:len(es)-1] }
			v.mangle.Store(&m)
		}, ErrSourceShort},
		{"too large", "/tile/entries/000", func(v *view) {
			m := func(es [][]byte) [][]byte {
				out := append([][]byte(nil), es...)
				out[3] = make([]byte, MaxEntrySize+1)
				return out
			}
			v.mangle.Store(&m)
		}, ErrEntryTooLarge},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := newView(t, l, 70_000)
			var mu sync.Mutex
			var got []error
			cache := NewCache(1 << 30)
			h := NewHandler(v, &Options{Cache: cache, OnError: func(r *http.Request, err error) {
				mu.Lock()
				got = append(got, err)
				mu.Unlock()
			}})
			srv := serve(t, h)
			c.setup(v)
			st, hd, _ := get(t, "GET", srv.URL+c.path)
			if st != 500 || hd.Get("Cache-Control") != CacheNone {
				t.Fatalf("status %d, Cache-Control %q; want 500, %q", st, hd.Get("Cache-Control"), CacheNone)
			}
			mu.Lock()
			if len(got) != 1 || !errors.Is(got[0], c.want) {
				t.Fatalf("OnError got %v, want %v", got, c.want)
			}
			mu.Unlock()
			if cache.Len() != 0 {
				t.Fatalf("a failed tile left %d tiles cached", cache.Len())
			}
			// Repaired, the source serves the right bytes: nothing of
			// the failure was kept.
			v.failCkpt.Store(nil)
			v.mangle.Store(nil)
			st, _, body := get(t, "GET", srv.URL+c.path)
			if st != 200 {
				t.Fatalf("after repair: status %d", st)
			}
			var want []byte
			if c.path == "/checkpoint" {
				want = l.checkpoint(t, 70_000)
			} else {
				tile, err := torchwood.ParseTilePath(c.path[1:])
				if err != nil {
					t.Fatal(err)
				}
				if tile.L == -1 {
					want = wantBundle(t, tile.N*256, tile.W)
				} else {
					want = wantTile(t, l, tile)
				}
			}
			if !bytes.Equal(body, want) {
				t.Fatalf("after repair: %d bytes differ from the log's", len(body))
			}
		})
	}
}

func TestBadCheckpointRefused(t *testing.T) {
	for _, c := range []struct {
		note []byte
		size int64
	}{{nil, 5}, {[]byte("x\n"), -1}} {
		got := make(chan error, 1)
		h := NewHandler(fixedSource{c.note, c.size}, &Options{OnError: func(_ *http.Request, err error) { got <- err }})
		srv := serve(t, h)
		st, _, _ := get(t, "GET", srv.URL+"/checkpoint")
		var err error
		select {
		case err = <-got:
		default:
		}
		if st != 500 || !errors.Is(err, ErrBadCheckpoint) {
			t.Errorf("%q, %d: status %d, error %v", c.note, c.size, st, err)
		}
	}
}

type fixedSource struct {
	note []byte
	size int64
}

func (s fixedSource) Checkpoint(context.Context) ([]byte, int64, error) { return s.note, s.size, nil }
func (s fixedSource) Entries(context.Context, int64, int64) ([][]byte, error) {
	return nil, errors.New("no entries")
}

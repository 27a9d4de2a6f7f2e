package tiles

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"filippo.io/torchwood"
	"golang.org/x/mod/sumdb/tlog"
)

var fuzzSeeds = []string{
	"0/000", "0/x001/x234/067", "0/x001/x234/067.p/8", "entries/000", "entries/x001/002.p/255",
	"63/000.p/1", "1/000.p/17", "0/1", "00/000", "64/000", "0/000.p/0", "0/000.p/256",
	"0/x000/001", "0/000/", "/000", "", "entries", "0/x009/x223/x372/x036/x854/x775/807",
	"0/x009/x223/x372/x036/x854/x775/808", "0/x999/x999/x999/x999/x999/x999/999",
	"0/001.p/01", "0/%30%30%30", "0/000.p/1/2", "0/000.p.p/1", "0/x1.p/000",
}

// FuzzParseTilePath: the parser never panics, what it accepts it spells
// back the same (only canonical paths pass), torchwood spells it the same
// way, and a canonical path torchwood accepts within range is accepted.
func FuzzParseTilePath(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		ref, err := parseTilePath(p)
		if err == nil {
			if got := ref.String(); got != "tile/"+p {
				t.Fatalf("%q parsed as %+v, which spells %q", p, ref, got)
			}
			if ref.level < entriesLevel || ref.level > MaxLevel || ref.index < 0 || ref.width < 1 || ref.width > TileWidth {
				t.Fatalf("%q parsed out of range: %+v", p, ref)
			}
			tile := tlog.Tile{H: 8, L: ref.level, N: ref.index, W: ref.width}
			if got := torchwood.TilePath(tile); got != "tile/"+p {
				t.Fatalf("%q parsed as %+v, which torchwood spells %q", p, ref, got)
			}
			return
		}
		tile, terr := torchwood.ParseTilePath("tile/" + p)
		if terr == nil && tile.L <= MaxLevel && torchwood.TilePath(tile) == "tile/"+p && err != errOutOfRange {
			t.Fatalf("%q refused (%v), torchwood reads it canonically as %+v", p, err, tile)
		}
	})
}

// FuzzHandlerPath: any path below a Handler gets 200, 400 or 404 and a
// Cache-Control, never a panic or a 5xx.
func FuzzHandlerPath(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add("/tile/" + s)
	}
	f.Add("/checkpoint")
	f.Add("//tile/0/000")
	l := newMemLog(f, 70_000)
	h := NewHandler(newView(f, l, 70_000), &Options{Cache: NewCache(1 << 20)})
	f.Fuzz(func(t *testing.T, p string) {
		u, err := url.Parse("http://x" + p)
		if err != nil || strings.ContainsAny(p, "?#") {
			return
		}
		req := httptest.NewRequest("GET", "/", nil)
		req.URL = u
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusNotFound:
		default:
			t.Fatalf("%q: status %d", p, rec.Code)
		}
		if rec.Header().Get("Cache-Control") == "" {
			t.Fatalf("%q: no Cache-Control", p)
		}
	})
}

package integration

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"filippo.io/torchwood"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
)

var tilesRE = regexp.MustCompile(`(?m)^publisher: serving tlog-tiles at (http://\S+/tiles/)$`)

// TestServeTiles runs the built `publisher serve --tiles`, ships a capsule
// and reads the room's log over HTTP: the checkpoint verifies under the
// room's origin and the publisher's key, and the one entry bundle holds
// the capsule's 14 entries as leaves of the room, whose record hashes are
// the level-0 hash tile's (tlog.RecordHash, x/mod's) and whose tree the
// checkpoint's root is (torchwood's client checks each entry).
func TestServeTiles(t *testing.T) {
	const origin, roomID = "evidence.example.org/roompub", "room:eval-csv"
	key := newPublisherKey(t)
	store := t.TempDir()
	s := startKeyed(t, store, key, "--origin", origin, "--http", "127.0.0.1:0", "--tiles", "--checkpoint-interval", "100ms")
	var base string
	deadline := time.Now().Add(10 * time.Second)
	for base == "" {
		if m := tilesRE.FindStringSubmatch(s.log.String()); m != nil {
			base = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("serve does not say where it serves tiles:\n%s", s.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	shipTo(t, s.url, roomID, filepath.Join(root, csvDir), 0, 14)

	pub, err := events.ParseNodeID(key.id)
	if err != nil {
		t.Fatal(err)
	}
	vkey, err := note.NewEd25519VerifierKey(checkpoint.RoomOrigin(origin, roomID), pub)
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	logURL := base + "room/" + checkpoint.RoomSegment(roomID) + "/"
	get := func(path string) []byte {
		t.Helper()
		res, err := http.Get(logURL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != http.StatusOK {
			return nil
		}
		return b
	}
	var c torchwood.Checkpoint
	deadline = time.Now().Add(20 * time.Second)
	for c.N != 14 {
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint of size 14 served (last: %+v):\n%s", c, s.log)
		}
		time.Sleep(50 * time.Millisecond)
		b := get("checkpoint")
		if b == nil {
			continue
		}
		n, err := note.Open(b, note.VerifierList(v))
		if err != nil {
			t.Fatalf("checkpoint: %v\n%s", err, b)
		}
		if c, err = torchwood.ParseCheckpoint(n.Text); err != nil || c.Origin != checkpoint.RoomOrigin(origin, roomID) {
			t.Fatalf("checkpoint %+v: %v", c, err)
		}
	}

	hashes := get("tile/0/000.p/14")
	bundle := get("tile/entries/000.p/14")
	if len(hashes) != 14*tlog.HashSize || bundle == nil {
		t.Fatalf("hash tile of %d bytes, bundle of %d", len(hashes), len(bundle))
	}
	prefix := "roompub-leaf/v1\n" + roomID + "\nrooms.eval-csv.journal."
	for i := 0; i < 14; i++ {
		var e []byte
		if e, bundle, err = torchwood.ReadTileEntry(bundle); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if !strings.HasPrefix(string(e), prefix) {
			t.Fatalf("entry %d is %q, want a leaf of %s's journal", i, e, roomID)
		}
		if h := tlog.RecordHash(e); !bytes.Equal(h[:], hashes[i*tlog.HashSize:(i+1)*tlog.HashSize]) {
			t.Fatalf("entry %d's record hash is not the hash tile's", i)
		}
	}
	if len(bundle) != 0 {
		t.Fatalf("%d bytes after the 14th entry", len(bundle))
	}
	f, err := torchwood.NewTileFetcher(logURL)
	if err != nil {
		t.Fatal(err)
	}
	client, err := torchwood.NewClient(f)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	read := 0
	for range client.Entries(ctx, c.Tree, 0) {
		read++
	}
	if err := client.Err(); err != nil || read != 14 {
		t.Fatalf("a tlog client read %d entries: %v", read, err)
	}
	// Health and metrics answer as without --tiles.
	res, err := http.Get(strings.TrimSuffix(base, "tiles/") + "healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %d", res.StatusCode)
	}
}

// TestServeTilesRefused: --tiles without what it needs, or in secure
// mode, is refused before serve starts anything.
func TestServeTilesRefused(t *testing.T) {
	r := runPub(t, nil, "serve", "--listen", "127.0.0.1:-1", "--store-dir", t.TempDir(), "--tiles")
	if r.status == 0 || !strings.Contains(r.stderr, "--tiles serves on the --http listener") || !strings.Contains(r.stderr, "--tiles needs --origin") {
		t.Fatalf("exit %d:\n%s", r.status, r.stderr)
	}
}

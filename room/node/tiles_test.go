package node_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"filippo.io/torchwood"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/node"
)

const tilesOrigin = "evidence.example.org/roompub"

// readLog reads the log at url as a tlog client: the checkpoint, once it
// verifies under origin's key and reaches size n, and every entry, each
// checked against its tree by torchwood.
func readLog(t *testing.T, ctx context.Context, url, origin string, key *events.HostKey, n int64) (tlog.Tree, [][]byte) {
	t.Helper()
	f, err := torchwood.NewTileFetcher(url)
	if err != nil {
		t.Fatal(err)
	}
	vkey, err := note.NewEd25519VerifierKey(origin, key.Public())
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	var tree tlog.Tree
	roomtest.WaitFor(t, 20*time.Second, fmt.Sprintf("%s: a checkpoint of size %d", url, n), func() bool {
		b, err := f.ReadEndpoint(ctx, "checkpoint")
		if err != nil {
			return false
		}
		n2, err := note.Open(b, note.VerifierList(v))
		if err != nil {
			t.Fatalf("%s: %v\n%s", url, err, b)
		}
		c, err := torchwood.ParseCheckpoint(n2.Text)
		if err != nil || c.Origin != origin {
			t.Fatalf("%s: %+v %v", url, c, err)
		}
		tree = c.Tree
		return tree.N >= n
	})
	c, err := torchwood.NewClient(f)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for int64(len(out)) < tree.N {
		before := len(out)
		for _, e := range c.Entries(ctx, tree, int64(len(out))) {
			out = append(out, bytes.Clone(e))
		}
		if err := c.Err(); err != nil || len(out) == before {
			t.Fatalf("%s: entries from %d: %v", url, before, err)
		}
	}
	return tree, out
}

// TestServeTiles runs Serve with the tiles endpoint: a room's log holds
// its journal's entries as leaves, the deployment log the room's
// checkpoint, both verified by a tlog client; metrics and health answer
// as before, and an unknown room is 404.
func TestServeTiles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pub := roomtest.NewPublisherKey(t)
	s := startServeWith(t, time.Hour, func(o *node.ServeOptions, _ *events.HostKey) {
		o.PublisherKey = pub
		o.Checkpoint = checkpointer.Options{Origin: tilesOrigin, Interval: 100 * time.Millisecond,
			Deployment: checkpointer.DeploymentOptions{Interval: 50 * time.Millisecond}}
		o.Tiles = node.TilesOptions{Enabled: true, CacheBytes: 1 << 20}
	})
	if want := "http://" + s.info.HTTPAddr + "/tiles/"; s.info.Tiles != want {
		t.Fatalf("ServeInfo.Tiles %q, want %q", s.info.Tiles, want)
	}
	// No room checkpoint yet, so no deployment checkpoint: no log.
	if code, _ := s.get("/tiles/deployment/checkpoint"); code != http.StatusNotFound {
		t.Errorf("the deployment log before any checkpoint: %d, want 404", code)
	}
	const roomID = "room:served-tiles"
	_, body := roomtest.Journal(t, "run-s", "cap-s", 3)
	if r := s.shipJournal(roomID, body); r.Stored != 3 {
		t.Fatalf("%+v", r)
	}
	_, entries := readLog(t, ctx, s.info.Tiles+"room/"+checkpoint.RoomSegment(roomID)+"/", checkpoint.RoomOrigin(tilesOrigin, roomID), pub, 3)
	if len(entries) != 3 {
		t.Fatalf("%d entries, want 3", len(entries))
	}
	for i, e := range entries {
		m, err := roomtest.LeaderMsg(ctx, s.nc, room.DefaultStream, uint64(i+1))
		if err != nil {
			t.Fatal(err)
		}
		if want := checkpoint.LeafData(roomID, m.Subject, checkpoint.ContentHash(m.Data)); !bytes.Equal(e, want) {
			t.Fatalf("entry %d is %q, want %q", i, e, want)
		}
	}
	_, dep := readLog(t, ctx, s.info.Tiles+"deployment/", tilesOrigin, pub, 1)
	ck, err := roomtest.LeaderMsg(ctx, s.nc, room.DefaultStream, 4)
	if err != nil || ck.Subject != (room.Subjects{}).Checkpoint(roomID) {
		t.Fatalf("stream seq 4: %v %v, want the room's checkpoint", ck, err)
	}
	if !bytes.Equal(dep[0], ck.Data) {
		t.Fatalf("deployment entry 0 is\n%s\nwant the room's checkpoint\n%s", dep[0], ck.Data)
	}

	if code, _ := s.get("/tiles/room/" + checkpoint.RoomSegment("room:nope") + "/checkpoint"); code != http.StatusNotFound {
		t.Errorf("an unknown room: %d, want 404", code)
	}
	if code, b := s.get("/healthz"); code != http.StatusOK || b != "ok\n" {
		t.Errorf("/healthz: %d %q", code, b)
	}
	if code, b := s.get("/metrics"); code != http.StatusOK || !strings.Contains(b, "roompub_checkpoint") {
		t.Errorf("/metrics: %d, %d bytes", code, len(b))
	}
}

// TestServeWithoutTiles: the endpoint is off by default, even with a
// publisher key and an origin.
func TestServeWithoutTiles(t *testing.T) {
	s := startServeWith(t, time.Hour, func(o *node.ServeOptions, _ *events.HostKey) {
		o.PublisherKey = roomtest.NewPublisherKey(t)
		o.Checkpoint = checkpointer.Options{Origin: tilesOrigin, Interval: 100 * time.Millisecond}
	})
	if s.info.Tiles != "" {
		t.Fatalf("ServeInfo.Tiles %q without Tiles", s.info.Tiles)
	}
	const roomID = "room:unserved"
	_, body := roomtest.Journal(t, "run-u", "cap-u", 1)
	if r := s.shipJournal(roomID, body); r.Stored != 1 {
		t.Fatalf("%+v", r)
	}
	roomtest.WaitFor(t, 10*time.Second, "the room's checkpoint", func() bool { return s.count() >= 2 })
	for _, p := range []string{"/tiles/deployment/checkpoint", "/tiles/room/" + checkpoint.RoomSegment(roomID) + "/checkpoint", "/tiles/"} {
		if code, _ := s.get(p); code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, code)
		}
	}
	if code, b := s.get("/healthz"); code != http.StatusOK || b != "ok\n" {
		t.Errorf("/healthz: %d %q", code, b)
	}
}

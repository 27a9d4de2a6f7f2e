package tilesource_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/tilesource"
	"github.com/roompub/roompub/tiles"
)

// TestRoomBoundsUncoveredLeaves: a room's leaves past its latest matching
// checkpoint stay bounded in memory while its checkpoints have stopped,
// and its later checkpoint is served right. A checkpointer covers 100
// leaves and stops; 7,000 more are appended; the room as read holds at
// most checkpoint.DefaultLeafWindow+DefaultLeafChunk of them and spills
// the rest to Options.LeafDir. A second checkpointer then covers all
// 7,100, and a tlog client (torchwood) reads the served tree, its entries
// and its consistency with the first. Close ends the room's reads.
func TestRoomBoundsUncoveredLeaves(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e := roomtest.NewEnv(t)
	key := roomtest.NewPublisherKey(t)
	trust, err := roomtest.Trusting(t, key).WithOrigin(tOrigin)
	if err != nil {
		t.Fatal(err)
	}
	rooms, err := tilesource.NewRooms(e.Connect(), tilesource.Options{Trust: trust, MaxAge: 20 * time.Millisecond, LeafDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.StripPrefix("/tiles/room", tiles.NewMux(rooms.Resolve, nil)))
	t.Cleanup(srv.Close)
	const roomID = "room:bounded"
	client := newLogClient(t, srv.URL+"/tiles/room/"+checkpoint.RoomSegment(roomID)+"/", checkpoint.RoomOrigin(tOrigin, roomID), key)
	copts := checkpointer.Options{Key: key, Origin: tOrigin, Every: 100_000, Interval: 50 * time.Millisecond}
	ship := func(g *ingest.Gate, es []*events.Entry) {
		t.Helper()
		for from := 0; from < len(es); from += 1000 {
			part := es[from:min(from+1000, len(es))]
			if res, err := g.AppendJournal(ctx, roomID, roomtest.Lines(part), nil); err != nil || res.Stored != len(part) {
				t.Fatalf("%+v %v", res, err)
			}
		}
	}

	first, _ := roomtest.StartCheckpointer(t, e.Connect(), copts)
	es, _ := roomtest.Journal(t, "run-b", "cap-first", 100)
	ship(roomtest.AttestingGate(e, e.Connect(), key, first, ingest.GateOptions{}), es)
	tree1, _ := client.waitTree(t, ctx, 100)
	if err := first.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	es, _ = roomtest.Journal(t, "run-b", "cap-later", 7000)
	ship(roomtest.AttestingGate(e, e.Connect(), key, nil, ingest.GateOptions{}), es)

	r, err := rooms.Room(ctx, roomID)
	if err != nil {
		t.Fatal(err)
	}
	if _, size, err := r.Checkpoint(ctx); err != nil || size != 100 {
		t.Fatalf("checkpoint of size %d, %v; want the first one's, 100", size, err)
	}
	st := r.LeafStats()
	if limit := uint64(checkpoint.DefaultLeafWindow + checkpoint.DefaultLeafChunk); st.Held > limit || st.Held+st.Spilled != 7000 || st.WriteErr != nil {
		t.Fatalf("leaves past the checkpoint: %d held, %d spilled (%v); want at most %d held, 7,000 in all", st.Held, st.Spilled, st.WriteErr, limit)
	}

	roomtest.StartCheckpointer(t, e.Connect(), copts)
	tree2, _ := client.waitTree(t, ctx, 7100)
	want, _ := roomEntries(t, e, roomID, trust)
	checkEntries(t, "the bounded room", client.entries(t, ctx, tree2), want)
	client.consistent(t, ctx, tree1, tree2)
	if st := r.LeafStats(); st.Held != 0 {
		t.Fatalf("%d leaves held past the checkpoint of all 7,100; want 0", st.Held)
	}

	if err := rooms.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := rooms.Room(ctx, roomID); !errors.Is(err, tilesource.ErrClosed) {
		t.Fatalf("a room after Close: %v, want ErrClosed", err)
	}
	time.Sleep(30 * time.Millisecond) // past MaxAge: the next call reads
	if _, _, err := r.Checkpoint(ctx); !errors.Is(err, tilesource.ErrClosed) {
		t.Fatalf("a kept room's read after Close: %v, want ErrClosed", err)
	}
}

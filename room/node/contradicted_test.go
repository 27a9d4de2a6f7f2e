package node_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/node"
)

// TestServeRemembersContradictedRooms: a message the store lost before a
// room's latest checkpoint, the server still counting it (its state file
// kept), is found only by a read from the room's first message. What a
// start with the full read (Checkpoint.FullRead) finds is kept in the
// store directory; a later normal start names the room on /healthz from
// its first answer, reads the room whole again, and writes no checkpoint
// for it, where it used to resume the room, say ok and sign a checkpoint
// readers refuse. The other room is not kept. A loss notice covers the
// room, at this start and the next.
func TestServeRemembersContradictedRooms(t *testing.T) {
	store := t.TempDir()
	pub := roomtest.NewPublisherKey(t)
	run := func(fullRead bool) *served {
		return startServeWith(t, time.Hour, func(o *node.ServeOptions, _ *events.HostKey) {
			o.Embedded.StoreDir = store
			o.PublisherKey = pub
			o.Checkpoint.FullRead = fullRead
		})
	}
	kept := filepath.Join(store, "roompub-contradicted-"+room.DefaultStream+".json")
	keptRooms := func() map[string]string {
		t.Helper()
		data, err := os.ReadFile(kept)
		if os.IsNotExist(err) {
			return nil
		}
		var r struct {
			Stream string            `json:"stream"`
			Rooms  map[string]string `json:"rooms"`
		}
		if err != nil || json.Unmarshal(data, &r) != nil || r.Stream != room.DefaultStream {
			t.Fatalf("%s: %s, %v", kept, data, err)
		}
		return r.Rooms
	}
	checkpoints := func(s *served, roomID string) uint64 {
		t.Helper()
		st, err := s.js.Stream(context.Background(), room.DefaultStream)
		if err != nil {
			t.Fatal(err)
		}
		subj := room.Subjects{}.Checkpoint(roomID)
		info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(subj))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Subjects[subj]
	}
	a, abody := roomtest.Journal(t, "run-a", "cap-a", 20)
	_, bbody := roomtest.Journal(t, "run-b", "cap-b", 20)
	s := run(false)
	if r := s.shipJournal("room:dmg", abody); r.Stored != 20 {
		t.Fatalf("%+v", r)
	}
	if r := s.shipJournal("room:fine", bbody); r.Stored != 20 {
		t.Fatalf("%+v", r)
	}
	s.stop() // final checkpoints
	roomtest.DamageStore(t, store, room.DefaultStream, []byte(a[5].EntryHash()), true)

	// A normal start resumes the rooms: nothing found.
	s = run(false)
	s.waitHealth(200, "ok\n")
	s.stop()
	if got := keptRooms(); got != nil {
		t.Fatalf("kept after a resumed start: %v", got)
	}

	s = run(true)
	deadline := time.Now().Add(10 * time.Second)
	for c, b := s.get("/healthz"); c != 503 || !strings.Contains(b, "room:dmg"); c, b = s.get("/healthz") {
		if time.Now().After(deadline) {
			t.Fatalf("the full read: healthz %d %q", c, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := metricSum(t, s.info.HTTPAddr, "roompub_store_damaged_rooms"); n != 1 {
		t.Fatalf("roompub_store_damaged_rooms %v while /healthz names the room, want 1", n)
	}
	s.stop()
	got := keptRooms()
	if len(got) != 1 || !strings.Contains(got["room:dmg"], "contradicts the messages the stream holds") {
		t.Fatalf("kept: %v", got)
	}

	// A normal start: /healthz names the room at once, the room is read
	// whole and found again, and it gets no checkpoint.
	s = run(false)
	// (Either what was kept or the read's own finding, if it is done.)
	if c, b := s.get("/healthz"); c != 503 || !strings.Contains(b, "room:dmg: ") || !strings.Contains(b, "contradicts the messages the stream holds") {
		t.Fatalf("first healthz after the start: %d %q", c, b)
	}
	before := checkpoints(s, "room:dmg")
	if n := metricSum(t, s.info.HTTPAddr, "roompub_store_damaged_rooms"); n != 1 {
		t.Fatalf("roompub_store_damaged_rooms %v at the start, want 1", n)
	}
	_, cbody := roomtest.Journal(t, "run-c", "cap-c", 10)
	if r := s.shipJournal("room:dmg", cbody); r.Stored != 10 {
		t.Fatalf("a new chain in the room: %+v", r)
	}
	s.stop()
	s = run(false)
	if n := checkpoints(s, "room:dmg"); n != before {
		t.Fatalf("%d checkpoints of the damaged room, %d before the start", n, before)
	}
	if got := keptRooms(); len(got) != 1 || strings.Contains(got["room:dmg"], "an earlier run found") {
		t.Fatalf("kept after the normal start: %v", got)
	}
	s.stop()

	// An operator acknowledges the loss: /healthz leaves the room out
	// then and at the next start, whose survey reads the notice back.
	s = startServeWith(t, time.Hour, func(o *node.ServeOptions, _ *events.HostKey) {
		o.Embedded.StoreDir = store
		o.PublisherKey = pub
		o.AcknowledgeLoss = []string{"room:dmg"}
	})
	s.waitHealth(200, "ok\n")
	s.stop()
	s = run(false)
	s.waitHealth(200, "ok\n")
}

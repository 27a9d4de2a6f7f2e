package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/node"
	"github.com/roompub/roompub/room/reader"
	"github.com/roompub/roompub/validate"
	"github.com/roompub/roompub/witness"
)

// placed returns the stream the placement bucket records for roomID, ""
// when it records none.
func placed(t *testing.T, js jetstream.JetStream, roomID string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, room.DefaultPlacementBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, room.RoomPlacementKey(roomID))
	if err != nil {
		return ""
	}
	var p room.Partition
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		t.Fatal(err)
	}
	return p.Stream
}

// roomMessages counts roomID's messages on each stream of streams.
func roomMessages(t *testing.T, js jetstream.JetStream, streams []string, roomID string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for i, name := range streams {
		st, err := js.Stream(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		subjects := room.Layout{}.Partition(i).Subjects
		if n := roomtest.CountOn(t, st, subjects.Room(roomID)); n > 0 {
			out[name] = n
		}
	}
	return out
}

func TestPartitionsPlaceRoomsOnce(t *testing.T) {
	store := t.TempDir()
	var pub *events.HostKey // one publisher key for both serves
	with := func(partitions int) func(*node.ServeOptions, *events.HostKey) {
		return func(so *node.ServeOptions, key *events.HostKey) {
			if pub == nil {
				pub = key
			}
			so.Embedded.StoreDir = store
			so.Partitions = partitions
			so.PublisherKey = pub
		}
	}
	s := startServeWith(t, time.Hour, with(3))
	want := []string{"ROOMS", "ROOMS-1", "ROOMS-2"}
	if fmt.Sprint(s.info.Streams) != fmt.Sprint(want) {
		t.Fatalf("streams %v, want %v", s.info.Streams, want)
	}
	const rooms = 12
	on := map[string]int{}
	for i := range rooms {
		id := fmt.Sprintf("room:part-%d", i)
		_, body := roomtest.Journal(t, "run-p", fmt.Sprintf("cap-%d", i), 3)
		if r := s.shipJournal(id, body); r.Stored != 3 {
			t.Fatalf("%s: %+v", id, r)
		}
		stream := placed(t, s.js, id)
		got := roomMessages(t, s.js, want, id)
		if len(got) != 1 || got[stream] != 3 {
			t.Fatalf("%s placed on %q, its messages are on %v", id, stream, got)
		}
		on[stream]++
	}
	if len(on) < 2 {
		t.Fatalf("12 rooms all on one partition: %v", on)
	}
	// A refused request places nothing: a room exists once it holds a
	// message.
	es, _ := roomtest.Journal(t, "run-refused", "cap-refused", 2)
	if r := s.shipJournal("room:refused-only", roomtest.Lines(es[1:])); r.Refused != 1 || r.Stored != 0 {
		t.Fatalf("a chain starting at seq 1: %+v", r)
	}
	if p := placed(t, s.js, "room:refused-only"); p != "" {
		t.Fatalf("a room whose only request was refused is placed on %s", p)
	}
	// A record goes to its room's partition too.
	raw := roomtest.ReferenceBytes(t, "verified.json")
	var rec struct {
		RoomID string `json:"room/id"`
	}
	if err := json.Unmarshal(raw, &rec); err != nil || rec.RoomID == "" {
		t.Fatalf("reference record: %v", err)
	}
	if r := s.shipRecord(raw); r.Item.Outcome != room.OutcomeStored {
		t.Fatalf("record: %+v", r)
	}
	// The record and its five markers (key, run, decision, instance and
	// the room's format), all on one partition.
	if got := roomMessages(t, s.js, want, rec.RoomID); len(got) != 1 || got[placed(t, s.js, rec.RoomID)] != 6 {
		t.Fatalf("%s after its record: %v", rec.RoomID, got)
	}
	s.stop()

	// Served again with no partition count asked: the bucket's three
	// partitions are served, and every room stays where it was.
	s = startServeWith(t, time.Hour, with(0))
	if fmt.Sprint(s.info.Streams) != fmt.Sprint(want) {
		t.Fatalf("streams after restart %v, want %v", s.info.Streams, want)
	}
	for i := range rooms {
		id := fmt.Sprintf("room:part-%d", i)
		before := placed(t, s.js, id)
		es, _ := roomtest.Journal(t, "run-p", fmt.Sprintf("cap-%d", i), 5)
		if r := s.shipJournal(id, roomtest.Lines(es[3:])); r.Stored != 2 {
			t.Fatalf("%s (placed on %s, messages %v) after restart: %+v", id, before, roomMessages(t, s.js, want, id), r)
		}
		if got := roomMessages(t, s.js, want, id); placed(t, s.js, id) != before || len(got) != 1 || got[before] < 5 {
			t.Fatalf("%s moved: placed on %s, messages %v", id, before, got)
		}
	}
}

// Two serves, each with the gates of every partition, race one capsule
// into two rooms on different partitions: exactly one room gets it.
func TestPartitionsCapsuleInOneRoom(t *testing.T) {
	a := startServeWith(t, time.Hour, func(so *node.ServeOptions, key *events.HostKey) {
		so.Partitions = 3
		so.PublisherKey = key
	})
	b := startServeWith(t, time.Hour, func(so *node.ServeOptions, key *events.HostKey) {
		so.ServerURL = a.info.ClientURL
		so.Replicas = 1
		so.Embedded = embedded.Options{}
		so.Partitions = 3
		so.PublisherKey = key
	})
	_ = b
	// Two rooms on different partitions, placed by a first journal each.
	var r1, r2 string
	for i := 0; r2 == ""; i++ {
		id := fmt.Sprintf("room:race-%d", i)
		_, body := roomtest.Journal(t, "run-seed", id, 1)
		if r := a.shipJournal(id, body); r.Stored != 1 {
			t.Fatalf("%s: %+v", id, r)
		}
		switch {
		case r1 == "":
			r1 = id
		case placed(t, a.js, id) != placed(t, a.js, r1):
			r2 = id
		}
	}
	const capsules = 20
	for c := range capsules {
		_, body := roomtest.Journal(t, "run-race", fmt.Sprintf("cap-%d", c), 2)
		var wg sync.WaitGroup
		replies := make([]room.JournalReply, 2)
		for i, id := range []string{r1, r2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				replies[i] = roomtest.ShipJournal(t, a.nc, id, body)
			}()
		}
		wg.Wait()
		won := 0
		for i, r := range replies {
			switch {
			case r.Stored == 2:
				won++
			case r.Refused == 1 && r.Items[0].Code == events.RoomConflict:
			default:
				t.Fatalf("capsule %d into room %d: %+v", c, i, r)
			}
		}
		if won != 1 {
			t.Fatalf("capsule %d: %d rooms took it, want 1: %+v", c, won, replies)
		}
	}
	// Every capsule's entries are in one room, on one partition.
	streams := a.info.Streams
	total := uint64(0)
	for _, id := range []string{r1, r2} {
		for _, n := range roomMessages(t, a.js, streams, id) {
			total += n
		}
	}
	if want := uint64(2 + capsules*2); total != want {
		t.Fatalf("%d messages in the two rooms, want %d", total, want)
	}
}

// A deployment of one partition grows to three: its rooms and chains stay
// on the first, and a capsule written there before claims existed cannot
// land in a room of another partition.
func TestPartitionsAddedLaterKeepOldRooms(t *testing.T) {
	store := t.TempDir()
	s := startServeWith(t, time.Hour, func(so *node.ServeOptions, key *events.HostKey) {
		so.Embedded.StoreDir = store
	})
	const rooms = 6
	for i := range rooms {
		_, body := roomtest.Journal(t, "run-old", fmt.Sprintf("cap-%d", i), 2)
		if r := s.shipJournal(fmt.Sprintf("room:old-%d", i), body); r.Stored != 2 {
			t.Fatal(r)
		}
	}
	s.stop()
	s = startServeWith(t, time.Hour, func(so *node.ServeOptions, key *events.HostKey) {
		so.Embedded.StoreDir = store
		so.Partitions = 3
	})
	// New rooms, until one is placed off the first partition.
	other := ""
	for i := 0; other == ""; i++ {
		id := fmt.Sprintf("room:new-%d", i)
		_, body := roomtest.Journal(t, "run-new", id, 1)
		if r := s.shipJournal(id, body); r.Stored != 1 {
			t.Fatal(r)
		}
		if placed(t, s.js, id) != "ROOMS" {
			other = id
		}
	}
	for i := range rooms {
		id := fmt.Sprintf("room:old-%d", i)
		es, _ := roomtest.Journal(t, "run-old", fmt.Sprintf("cap-%d", i), 3)
		if r := s.shipJournal(id, roomtest.Lines(es[2:])); r.Stored != 1 {
			t.Fatalf("%s: %+v", id, r)
		}
		if p := placed(t, s.js, id); p != "ROOMS" {
			t.Fatalf("%s, written before partitions, placed on %s", id, p)
		}
	}
	// cap-0 lives in room:old-0 (no claim: written before partitions).
	_, body := roomtest.Journal(t, "run-old", "cap-0", 3)
	r := s.shipJournal(other, body)
	if r.Refused != 1 || r.Items[0].Code != events.RoomConflict || !strings.Contains(r.Items[0].Reason, `"room:old-0"`) {
		t.Fatalf("old capsule into %s: %+v", other, r)
	}
	// Every later try names the room that holds it, and a refused first
	// entry places no new room.
	for i := range 4 {
		id := fmt.Sprintf("room:never-%d", i)
		r := s.shipJournal(id, body)
		if r.Refused != 1 || r.Items[0].Code != events.RoomConflict || !strings.Contains(r.Items[0].Reason, `"room:old-0"`) {
			t.Fatalf("old capsule into %s: %+v", id, r)
		}
		if p := placed(t, s.js, id); p != "" {
			t.Fatalf("%s, refused room_conflict, is placed on %s", id, p)
		}
	}
}

// The deployment log of a deployment of three partitions holds every
// partition's room checkpoints (the first partition's checkpointer keeps
// it), and a witnessing audit of every partition is clean with every
// room witnessed.
func TestPartitionsDeploymentLog(t *testing.T) {
	var pub *events.HostKey
	s := startServeWith(t, time.Hour, func(so *node.ServeOptions, key *events.HostKey) {
		pub = key
		so.Partitions = 3
		so.PublisherKey = key
		so.Checkpoint = checkpointer.Options{Every: 2, Interval: 100 * time.Millisecond, Origin: roomtest.Deployment,
			Deployment: checkpointer.DeploymentOptions{Interval: 50 * time.Millisecond}}
	})
	on := map[string]bool{}
	rooms := 0
	for ; len(on) < 3; rooms++ {
		id := fmt.Sprintf("room:dl-%d", rooms)
		_, body := roomtest.Journal(t, "run-dl", id, 3)
		if r := s.shipJournal(id, body); r.Stored != 3 {
			t.Fatalf("%s: %+v", id, r)
		}
		on[placed(t, s.js, id)] = true
	}
	trust, err := checkpoint.NewTrust(pub.NodeID())
	if err == nil {
		trust, err = trust.WithOrigin(roomtest.Deployment)
	}
	if err != nil {
		t.Fatal(err)
	}
	v, err := validate.New(validate.WithTrustedHosts(s.key.NodeID()))
	if err != nil {
		t.Fatal(err)
	}
	none, err := witness.NewPolicy(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	place, err := reader.OpenLayout(ctx, s.js, room.Layout{})
	if err != nil {
		t.Fatal(err)
	}
	var rep *reader.AuditReport
	witnessed := func() int {
		n := 0
		for _, c := range rep.Checkpoints {
			if c.Witnessed != nil && c.Witnessed.Size == 3 {
				n++
			}
		}
		return n
	}
	roomtest.WaitFor(t, 15*time.Second, "every room witnessed", func() bool {
		rep, err = reader.AuditDeployment(ctx, s.js, reader.AuditOptions{Validator: v, Trust: trust, Read: reader.ReadDirect,
			Witnessing: &reader.Witnessing{Policy: none}}, place)
		return err == nil && rep.Clean() && witnessed() == rooms
	})
	if rep.Witness == nil || rep.Witness.Entries < uint64(rooms) || rep.Totals.Entries != uint64(3*rooms) {
		t.Fatalf("audit: %+v %+v", rep.Witness, rep.Totals)
	}
	// One set of checkpoint series per partition, the deployment log's
	// and the witnesses' once: the keeper's.
	code, body := s.get("/metrics")
	series := func(name string) []string {
		var out []string
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, name+"{") {
				out = append(out, l)
			}
		}
		return out
	}
	if w, l := series("roompub_witness_round_cosignatures"), series("roompub_checkpoint_leases_held"); code != 200 || len(w) != 1 ||
		!strings.Contains(w[0], `stream="ROOMS"`) || len(l) != 3 {
		t.Fatalf("metrics (%d): witness %v, leases %v", code, w, l)
	}
	s.stop()
}

// A capsule written into a room of another partition around the gate (a
// lost placement bucket, a raw publish) is in two rooms: no partition's
// audit sees both, the joined audit does and sets the copy aside.
func TestPartitionsAuditFindsChainInTwoRooms(t *testing.T) {
	s := startServeWith(t, time.Hour, func(so *node.ServeOptions, key *events.HostKey) { so.Partitions = 3 })
	es, body := roomtest.Journal(t, "run-two", "cap-two", 4)
	if r := s.shipJournal("room:home", body); r.Stored != 4 {
		t.Fatalf("ship: %+v", r)
	}
	home := placed(t, s.js, "room:home")
	var other room.Partition
	for i := range 3 {
		if q := (room.Layout{Partitions: 3}).Partition(i); q.Stream != home {
			other = q
			break
		}
	}
	ctx := context.Background()
	for _, e := range es {
		if _, err := s.js.Publish(ctx, other.Subjects.Journal("room:copy", e.Metadata().Key()), e.Canonical()); err != nil {
			t.Fatal(err)
		}
	}
	v, err := validate.New(validate.WithTrustedHosts(s.key.NodeID()))
	if err != nil {
		t.Fatal(err)
	}
	place, err := reader.OpenLayout(ctx, s.js, room.Layout{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := reader.AuditDeployment(ctx, s.js, reader.AuditOptions{Validator: v}, place)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Clean() || rep.Totals.ChainsOK != 1 || rep.Totals.ChainsBroken != 1 || rep.Totals.ByCode[events.RoomConflict] != 4 || len(rep.Violations) != 1 {
		t.Fatalf("audit: %+v %+v", rep.Totals, rep.Violations)
	}
	if a := rep.Violations[0]; a.RoomID != "room:copy" || a.Code != events.RoomConflict || !strings.Contains(a.Reason, `"room:home" (claimed in the placement bucket)`) ||
		a.Subject != other.Subjects.Journal("room:copy", es[0].Metadata().Key()) {
		t.Fatalf("violation: %+v", a)
	}
}

// A serve whose deployment gains partitions from another serve stops with
// ErrPartitionsAdded at its next check, so its supervisor's restart
// serves them all.
func TestPartitionsAddedByAnotherServe(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	on := func(partitions int) func(*node.ServeOptions, *events.HostKey) {
		return func(so *node.ServeOptions, key *events.HostKey) {
			so.ServerURL, so.Replicas, so.Embedded, so.Partitions = srv.ClientURL(), 1, embedded.Options{}, partitions
		}
	}
	a := startServeWith(t, 100*time.Millisecond, on(2))
	b := startServeWith(t, time.Hour, on(3))
	if len(b.info.Streams) != 3 {
		t.Fatalf("b serves %v", b.info.Streams)
	}
	select {
	case err := <-a.done:
		a.cancel = nil
		if !errors.Is(err, node.ErrPartitionsAdded) || !strings.Contains(err.Error(), "records 3, this serve serves 2") {
			t.Fatalf("a returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a serve of 2 partitions went on after another added a third")
	}
	b.stop()
}

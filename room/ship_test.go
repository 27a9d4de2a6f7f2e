package room_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
)

// TestShipRoomConflictNamesTheRoom: a capsule shipped into a second room
// is refused room_conflict, and the refusal the shipper hands back names
// the room the chain lives in: in its reason, as Expected, and the room
// asked for as Actual (the first problem's values were dropped, and the
// reason said only "another room").
func TestShipRoomConflictNamesTheRoom(t *testing.T) {
	e := newEnv(t)
	_, body := journal(t, "run-conflict", "cap-conflict", 5)
	dir := capsuleDir(t, "run-conflict", "cap-conflict", body)
	client := room.NewClient(e.connect(), room.ClientOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if res, err := room.ShipCapsule(ctx, client, dir, "room:alpha", room.ShipOptions{}); err != nil || res.Stored != 5 {
		t.Fatalf("ship into room:alpha: %+v %v", res, err)
	}
	res, err := room.ShipCapsule(ctx, client, dir, "room:beta", room.ShipOptions{})
	if err != nil || res.Refused == nil || res.Stored != 0 {
		t.Fatalf("ship into room:beta: %+v %v", res, err)
	}
	p := res.Refused.Problem
	if p.Code != events.RoomConflict || p.Expected != "room:alpha" || p.Actual != "room:beta" || !strings.Contains(p.Reason, `"room:alpha"`) {
		t.Errorf("refusal %+v: want room_conflict naming room:alpha in its reason, expected room:alpha, actual room:beta", p)
	}
	if len(res.Refused.Problems) != 1 || res.Refused.Problems[0].Reason != p.Reason || res.Refused.Problems[0].Expected != "room:alpha" {
		t.Errorf("problems %+v", res.Refused.Problems)
	}
	if want := `(expected "room:alpha", got "room:beta")`; !strings.HasSuffix(p.String(), want) {
		t.Errorf("printed %q, want it to end in %s", p.String(), want)
	}
}

// TestFollowCapsuleBeforeServer: a follower whose connection is not up
// yet (it keeps trying: nats.RetryOnFailedConnect) ships the capsule
// once the server comes. The request size was taken from the
// connection's max payload when the follower started, 0 before a server
// is met: every line was refused too_large.
func TestFollowCapsuleBeforeServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	// Tries every second: the service is up by the time it connects, so
	// the head request the follower sent meanwhile is answered.
	nc, err := nats.Connect("nats://"+addr, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if nc.IsConnected() {
		t.Fatal("connected before the server started")
	}
	es, body := journal(t, "run-early", "cap-early", 30)
	dir := capsuleDir(t, "run-early", "cap-early", body)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		res room.ShipResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := room.FollowCapsule(ctx, room.NewClient(nc, room.ClientOptions{Timeout: 5 * time.Second}), dir, "room:early",
			room.ShipOptions{Poll: 50 * time.Millisecond, Retry: 100 * time.Millisecond}, func(room.ShipResult) {})
		done <- result{res, err}
	}()
	time.Sleep(300 * time.Millisecond)
	e := newEnvWith(t, room.EmbeddedOptions{Listen: addr})
	subj := room.Subjects{}.Journal("room:early", events.ChainKey{RunID: "run-early", CapsuleID: "cap-early"})
	for deadline := time.Now().Add(20 * time.Second); e.countOn(subj) < uint64(len(es)); {
		select {
		case r := <-done:
			t.Fatalf("the follower stopped: %+v %v", r.res, r.err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %d entries after 20s, want %d", subj, e.countOn(subj), len(es))
		}
	}
	cancel()
	r := <-done
	if r.err != nil || r.res.Refused != nil || r.res.Stored != len(es) {
		t.Fatalf("follow: %+v %v", r.res, r.err)
	}
	chainInStream(t, e, "room:early", es)
}

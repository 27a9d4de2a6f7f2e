package reader_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
)

// TestFollowCompromisedWriter: Follow hands out every good message of the
// scenario, in stream order, and sets every bad one aside with its code
// and stream sequence, without stopping.
func TestFollowCompromisedWriter(t *testing.T) {
	t.Parallel()
	// The scenario's stream seqs are fixed by hand: a stream without
	// record markers (the reader judges records alike with them).
	e := roomtest.NewEnvUnmarked(t, embedded.Options{})
	sc := compromisedStream(t, e)
	f := roomtest.StartFollow(t, e.Js, reader.FollowOptions{Durable: "all", Validator: e.V}, nil)
	f.WaitSeen(t, int(sc.last))
	if err := f.Stop(t); err != nil {
		t.Fatal(err)
	}
	if got := f.EventSeqs(); !slices.Equal(got, sc.events) {
		t.Errorf("events at %v, want %v", got, sc.events)
	}
	var got []roomtest.Aside
	for _, s := range f.Asides {
		got = append(got, roomtest.AsideOf(t, s))
	}
	roomtest.DiffAsides(t, "set aside", got, sc.asides)

	// One room: only its subjects are delivered, the junk subject under
	// its token included.
	f = roomtest.StartFollow(t, e.Js, reader.FollowOptions{Durable: "evil", Rooms: []string{evilRoom}, Validator: e.V}, nil)
	var wantEvents []uint64
	var wantAsides []roomtest.Aside
	for _, s := range sc.events {
		if s != 8 && s != 22 && s != 26 { // seq 8 and 22 are in the reference room, 26 in room:other
			wantEvents = append(wantEvents, s)
		}
	}
	for _, a := range sc.asides {
		if a.Seq != 22 && a.Seq != 26 {
			wantAsides = append(wantAsides, a)
		}
	}
	f.WaitSeen(t, len(wantEvents)+len(wantAsides))
	if err := f.Stop(t); err != nil {
		t.Fatal(err)
	}
	if got := f.EventSeqs(); !slices.Equal(got, wantEvents) {
		t.Errorf("%s: events at %v, want %v", evilRoom, got, wantEvents)
	}
	got = nil
	for _, s := range f.Asides {
		got = append(got, roomtest.AsideOf(t, s))
	}
	roomtest.DiffAsides(t, "set aside in "+evilRoom, got, wantAsides)
}

// shipN ships n entries of one chain through the gate and returns them.
func shipN(t *testing.T, e *roomtest.Env, roomID string, n int) []*events.Entry {
	t.Helper()
	es, body := roomtest.Journal(t, "run-long", "cap-long", n)
	if r := e.ShipJournal(roomID, body); r.Stored != n {
		t.Fatalf("ship: %+v", r)
	}
	return es
}

// TestFollowCancelAndRestart: Follow stopped by its context mid-way and
// started again with the same durable name hands every event to the
// handler exactly once across the two runs, in stream order.
func TestFollowCancelAndRestart(t *testing.T) {
	t.Parallel()
	e := roomtest.NewEnv(t)
	const n = 300
	shipN(t, e, "room:long", n)
	hit := make(chan struct{})
	f1 := roomtest.StartFollow(t, e.Js, reader.FollowOptions{Durable: "d", Validator: e.V}, func(ev *reader.Event) error {
		if ev.Seq == 100 {
			close(hit)
		}
		return nil
	})
	<-hit
	f1.Cancel()
	if err := f1.Wait(t); err != nil {
		t.Fatalf("first run: %v", err)
	}
	first := f1.EventSeqs()
	if len(first) < 100 || len(first) >= n || !slices.Equal(first, roomtest.SeqRange(1, uint64(len(first)))) {
		t.Fatalf("first run handled %v", first)
	}
	var floor uint64
	f2 := roomtest.StartFollow(t, e.Js, reader.FollowOptions{Durable: "d", Validator: e.V, Ready: func(f uint64) { floor = f }}, nil)
	f2.WaitSeen(t, n-len(first))
	if err := f2.Stop(t); err != nil {
		t.Fatal(err)
	}
	if floor != uint64(len(first)) {
		t.Errorf("second run rebuilt to stream seq %d, want %d", floor, len(first))
	}
	if all := append(first, f2.EventSeqs()...); !slices.Equal(all, roomtest.SeqRange(1, n)) {
		t.Errorf("across both runs the handler saw %v", all)
	}
	if len(f1.Asides)+len(f2.Asides) != 0 {
		t.Errorf("set aside: %v %v", f1.Asides, f2.Asides)
	}
}

// TestFollowRestartAfterCrash: a run that dies between handling an event
// and acknowledging it (its connection is gone, as with SIGKILL), or whose
// handler fails, leaves messages delivered but not acknowledged. The next
// run with the same durable name hands out the unacknowledged event again
// and then every later one once, in stream order: nothing is lost, nothing
// acknowledged repeats, and no later message is mistaken for a gap.
func TestFollowRestartAfterCrash(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		repeat bool // the event handled at the crash is handed out again
	}{
		{name: "connection lost after handling", repeat: true},
		{name: "handler error", repeat: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := roomtest.NewEnv(t)
			const n, crashAt = 300, 77
			shipN(t, e, "room:long", n)
			nc := e.Connect()
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			errCrash := errors.New("crash")
			f1 := roomtest.StartFollow(t, js, reader.FollowOptions{Durable: "d", Validator: e.V}, func(ev *reader.Event) error {
				if ev.Seq != crashAt {
					return nil
				}
				if tc.repeat {
					nc.Close() // the event is handled (recorded) but its ack cannot be sent
					return nil
				}
				return errCrash
			})
			err = f1.Wait(t)
			first := f1.EventSeqs()
			switch {
			case tc.repeat && (err == nil || errors.Is(err, reader.ErrHandler)):
				t.Fatalf("first run returned %v, want the failed ack", err)
			case !tc.repeat && (!errors.Is(err, reader.ErrHandler) || !errors.Is(err, errCrash)):
				t.Fatalf("first run returned %v, want the handler's error", err)
			}
			last := uint64(crashAt - 1)
			if tc.repeat {
				last = crashAt
			}
			if !slices.Equal(first, roomtest.SeqRange(1, last)) {
				t.Fatalf("first run handled %v", first)
			}
			var floor uint64
			f2 := roomtest.StartFollow(t, e.Js, reader.FollowOptions{Durable: "d", Validator: e.V, Ready: func(f uint64) { floor = f }}, nil)
			f2.WaitSeen(t, n-crashAt+1)
			if err := f2.Stop(t); err != nil {
				t.Fatal(err)
			}
			if floor != crashAt-1 {
				t.Errorf("second run rebuilt to stream seq %d, want %d", floor, crashAt-1)
			}
			if second := f2.EventSeqs(); !slices.Equal(second, roomtest.SeqRange(crashAt, n)) {
				t.Errorf("second run handled %v, want %d to %d", second, crashAt, n)
			}
			if len(f1.Asides)+len(f2.Asides) != 0 {
				t.Errorf("set aside: %v %v", f1.Asides, f2.Asides)
			}
		})
	}
}

// TestFollowLiveAndRebuild: Follow delivers what is appended while it
// runs, and a restarted Follow rebuilds its state from the stream up to
// its acknowledgement floor, so a fork or a replayed record written after
// the restart is recognised against messages handled before it.
func TestFollowLiveAndRebuild(t *testing.T) {
	t.Parallel()
	// Stream seqs fixed by hand: no record markers.
	e := roomtest.NewEnvUnmarked(t, embedded.Options{})
	es, _ := roomtest.Journal(t, "run-1", "cap-1", 6)
	rec := roomtest.RecordIn(t, e.Key, "room:alpha", "r-1", nil)
	var floor uint64
	o := reader.FollowOptions{Durable: "live", Rooms: []string{"room:alpha"}, Validator: e.V, Ready: func(f uint64) { floor = f }}
	f := roomtest.StartFollow(t, e.Js, o, nil)
	e.ShipJournal("room:alpha", roomtest.Lines(es[:3])) // 1-3, while following
	e.ShipRecord(rec.Canonical())                       // 4
	f.WaitSeen(t, 4)
	if err := f.Stop(t); err != nil {
		t.Fatal(err)
	}
	if got := f.EventSeqs(); !slices.Equal(got, roomtest.SeqRange(1, 4)) || floor != 0 {
		t.Fatalf("live: events %v, rebuilt to %d", got, floor)
	}

	// Written while no one follows: a fork of position 1 (the first entry
	// at a position wins: the chain is broken from the fork) and the same
	// record again; then, live, the chain's next entry, set aside because
	// the chain is broken.
	roomtest.PublishRaw(t, e.Js, "rooms.alpha.journal.run-1.cap-1", roomtest.ForkOf(t, es[1]).Canonical()) // 5
	roomtest.PublishRaw(t, e.Js, "rooms.alpha.exec", rec.Canonical())                                      // 6
	f = roomtest.StartFollow(t, e.Js, o, nil)
	f.WaitSeen(t, 2)
	roomtest.PublishRaw(t, e.Js, "rooms.alpha.journal.run-1.cap-1", es[3].Canonical()) // 7
	f.WaitSeen(t, 3)
	if err := f.Stop(t); err != nil {
		t.Fatal(err)
	}
	if floor != 4 {
		t.Errorf("restart rebuilt to stream seq %d, want 4", floor)
	}
	var got []roomtest.Aside
	for _, s := range f.Asides {
		got = append(got, roomtest.AsideOf(t, s))
	}
	roomtest.DiffAsides(t, "set aside after the restart", got, []roomtest.Aside{
		{Seq: 5, Code: events.Fork, RoomID: "room:alpha", Kind: room.KindJournal, Subject: "rooms.alpha.journal.run-1.cap-1", Chain: "run-1/cap-1", Problems: []events.Code{events.Fork}},
		{Seq: 6, Code: events.Replayed, RoomID: "room:alpha", Kind: room.KindExecution, Subject: "rooms.alpha.exec", Problems: []events.Code{events.Replayed}},
		{Seq: 7, Code: events.ChainBroken, RoomID: "room:alpha", Kind: room.KindJournal, Subject: "rooms.alpha.journal.run-1.cap-1", Chain: "run-1/cap-1", Problems: []events.Code{events.ChainBroken}},
	})
	if len(f.EventSeqs()) != 0 {
		t.Errorf("events after the restart: %v", f.EventSeqs())
	}
	if err := reader.Follow(t.Context(), e.Js, reader.FollowOptions{Validator: e.V}, nil); err == nil {
		t.Error("Follow without a durable name did not fail")
	}
}

// TestFollowDurableAddedRoomRefused: a durable resumed with a room its
// earlier runs did not follow is refused, naming the room: the durable's
// acknowledgement floor is a stream sequence, so the added room's earlier
// messages would never reach the handler (they were rebuilt as state
// only, without a word). The same rooms, or fewer, resume; a new durable
// follows the added room from its start.
func TestFollowDurableAddedRoomRefused(t *testing.T) {
	e := roomtest.NewEnv(t)
	_, bodyB := roomtest.Journal(t, "run-b", "cap-b", 2)
	if r := e.ShipJournal("room:b", bodyB); r.Stored != 2 {
		t.Fatalf("ship b: %+v", r)
	}
	_, bodyA := roomtest.Journal(t, "run-a", "cap-a", 2)
	if r := e.ShipJournal("room:a", bodyA); r.Stored != 2 {
		t.Fatalf("ship a: %+v", r)
	}
	f := roomtest.StartFollow(t, e.Js, reader.FollowOptions{Durable: "d", Rooms: []string{"room:a"}, Validator: e.V}, nil)
	f.WaitSeen(t, 2)
	if err := f.Stop(t); err != nil {
		t.Fatal(err)
	}
	err := reader.Follow(t.Context(), e.Js, reader.FollowOptions{Durable: "d", Rooms: []string{"room:a", "room:b"}, Validator: e.V}, func(context.Context, *reader.Event) error { return nil })
	if !errors.Is(err, reader.ErrReader) || !strings.Contains(err.Error(), "this run would add rooms.b.>") {
		t.Fatalf("resumed with an added room: %v", err)
	}
	ready := make(chan uint64, 1)
	f = roomtest.StartFollow(t, e.Js, reader.FollowOptions{Durable: "d", Rooms: []string{"room:a"}, Validator: e.V, Ready: func(floor uint64) { ready <- floor }}, nil)
	select {
	case floor := <-ready:
		if floor != 4 {
			t.Errorf("resumed at %d, want 4", floor)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the resumed durable is not ready after 10s")
	}
	if err := f.Stop(t); err != nil || len(f.Events) != 0 {
		t.Fatalf("resumed with the same room: %v, %d events again", err, len(f.Events))
	}
	f = roomtest.StartFollow(t, e.Js, reader.FollowOptions{Durable: "d2", Rooms: []string{"room:a", "room:b"}, Validator: e.V}, nil)
	f.WaitSeen(t, 4)
	if err := f.Stop(t); err != nil || !slices.Equal(f.EventSeqs(), roomtest.SeqRange(1, 4)) {
		t.Fatalf("a new durable: %v, events %v", err, f.EventSeqs())
	}
}

// TestFollowStopMidHandler: Follow stopped while its handler runs, the
// handler returning its context's error, returns nil (it returned
// "handler: stream seq 2: context canceled"), and the event is delivered
// again on the next start, then acknowledged.
func TestFollowStopMidHandler(t *testing.T) {
	e := roomtest.NewEnv(t)
	_, body := roomtest.Journal(t, "run-h", "cap-h", 3)
	if r := e.ShipJournal("room:h", body); r.Stored != 3 {
		t.Fatalf("ship: %+v", r)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	err := reader.Follow(ctx, e.Js, reader.FollowOptions{Durable: "h", Validator: e.V}, func(hctx context.Context, ev *reader.Event) error {
		if ev.Seq == 2 {
			cancel() // SIGTERM while this event is handled
			<-hctx.Done()
			return hctx.Err()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Follow stopped by its context returned %v, want nil", err)
	}
	f := roomtest.StartFollow(t, e.Js, reader.FollowOptions{Durable: "h", Validator: e.V}, nil)
	f.WaitSeen(t, 2) // stream seqs 2 and 3: 1 was acknowledged
	if err := f.Stop(t); err != nil || !slices.Equal(f.EventSeqs(), []uint64{2, 3}) {
		t.Fatalf("the next start: %v, events %v, want 2 and 3", err, f.EventSeqs())
	}
}

// TestReaderOfOneRoomChainOfAnother: byte-for-byte copies of room:x's
// chain written on room:y's subject around the gate (no trusted publisher,
// so no attestation to fail) are set aside room_conflict by a reader of
// room:y alone, as a whole-stream audit sets them aside: Follow and Audit
// of room:y served them as room:y's. A reader of room:x alone serves its
// chain.
func TestReaderOfOneRoomChainOfAnother(t *testing.T) {
	e := roomtest.NewEnvMarked(t, embedded.Options{})
	es, body := roomtest.Journal(t, "run-m", "cap-m", 3)
	if r := e.ShipJournal("room:x", body); r.Stored != 3 {
		t.Fatalf("ship: %+v", r)
	}
	var s room.Subjects
	key := events.ChainKey{RunID: "run-m", CapsuleID: "cap-m"}
	for _, en := range es {
		roomtest.PublishRaw(t, e.Js, s.Journal("room:y", key), en.Canonical())
	}
	for _, rooms := range [][]string{nil, {"room:y"}} {
		rep, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, Rooms: rooms})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Totals.SetAside != 3 || rep.Totals.ByCode[events.RoomConflict] != 3 {
			t.Errorf("audit of rooms %v: %d set aside %v, want 3 room_conflict", rooms, rep.Totals.SetAside, rep.Totals.ByCode)
		}
	}
	f := roomtest.StartFollow(t, e.Js, reader.FollowOptions{Durable: "y", Rooms: []string{"room:y"}, Validator: e.V}, nil)
	f.WaitSeen(t, 3)
	err := f.Stop(t)
	conflicts := 0
	for _, a := range f.Asides {
		if a.Code == events.RoomConflict {
			conflicts++
		}
	}
	if err != nil || len(f.Events) != 0 || conflicts != 3 || len(f.Asides) != 3 {
		t.Fatalf("follow of room:y: %v, %d events, set aside %+v: want none served, 3 room_conflict", err, len(f.Events), f.Asides)
	}
	f = roomtest.StartFollow(t, e.Js, reader.FollowOptions{Durable: "x", Rooms: []string{"room:x"}, Validator: e.V}, nil)
	f.WaitSeen(t, 3)
	if err := f.Stop(t); err != nil || !slices.Equal(f.EventSeqs(), []uint64{1, 2, 3}) {
		t.Fatalf("follow of room:x: %v, events %v", err, f.EventSeqs())
	}
}

// TestFollowPastStoredStatus: an empty message stored on a chain's
// subject with a header block that begins with a status line
// ("NATS/1.0 409 Consumer Deleted", written around the gate) is a stored
// message like any other for Follow: it is set aside, acknowledged, and
// the messages after it are handed out, live and after a restart. Fetched
// by nats.go's pull consumer it ended every fetch where it lay, and the
// follower handed out nothing past it.
func TestFollowPastStoredStatus(t *testing.T) {
	t.Parallel()
	e := roomtest.NewEnvUnmarked(t, embedded.Options{})
	es, _ := roomtest.Journal(t, "run-1", "cap-1", 2)
	more, _ := roomtest.Journal(t, "run-2", "cap-2", 3)
	o := reader.FollowOptions{Durable: "status", Rooms: []string{"room:alpha"}, Validator: e.V}
	f := roomtest.StartFollow(t, e.Js, o, nil)
	e.ShipJournal("room:alpha", roomtest.Lines(es)) // 1-2
	f.WaitSeen(t, 2)
	for _, hdr := range []string{"NATS/1.0 409 Consumer Deleted\n\n", "NATS/1.0 409 Consumer Deleted\r\n\r\n", "NATS/1.0 404 No Messages\r\n\r\n"} {
		roomtest.PublishRawHeader(t, e.Nc, "rooms.alpha.journal.run-3.cap-3", hdr, nil) // 3-5
	}
	e.ShipJournal("room:alpha", roomtest.Lines(more[:2])) // 6-7
	f.WaitSeen(t, 7)
	if err := f.Stop(t); err != nil {
		t.Fatal(err)
	}
	if got := f.EventSeqs(); !slices.Equal(got, []uint64{1, 2, 6, 7}) {
		t.Errorf("events %v, want 1, 2, 6, 7", got)
	}
	var asides []string
	for _, s := range f.Asides {
		asides = append(asides, fmt.Sprintf("%d:%s", s.Seq, s.Code))
	}
	if want := []string{"3:empty_input", "4:chain_broken", "5:chain_broken"}; !slices.Equal(asides, want) {
		t.Errorf("set aside %v, want %v", asides, want)
	}
	// A restart resumes past them: the acknowledgements held. Its
	// rebuild reads by direct gets: by consumer it would wait out the
	// stall on them before reading on (TestConsumerAuditPastStoredStatus).
	o.Read = reader.ReadDirect
	f = roomtest.StartFollow(t, e.Js, o, nil)
	e.ShipJournal("room:alpha", roomtest.Lines(more[2:])) // 8
	f.WaitSeen(t, 1)
	if err := f.Stop(t); err != nil {
		t.Fatal(err)
	}
	if got := f.EventSeqs(); !slices.Equal(got, []uint64{8}) || len(f.Asides) != 0 {
		t.Errorf("after the restart: events %v, set aside %d; want 8 alone", got, len(f.Asides))
	}
}

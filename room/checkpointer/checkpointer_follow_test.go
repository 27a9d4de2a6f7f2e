package checkpointer_test

import (
	"context"
	"fmt"
	"github.com/roompub/roompub/room/embedded"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// heldSink passes a gate's announcements to a checkpointer at once and its
// acknowledgements when released (or never, once dropped): acknowledgements
// that come late, out of order, or not at all.
type heldSink struct {
	c    *checkpointer.Checkpointer
	mu   sync.Mutex
	hold bool
	drop bool
	held []func()
}

func (s *heldSink) Expect(msgs []room.StoredMsg) { s.c.Expect(msgs) }

func (s *heldSink) Unstored(header string) { s.c.Unstored(header) }

func (s *heldSink) Stored(first uint64, msgs []room.StoredMsg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.drop:
	case s.hold:
		s.held = append(s.held, func() { s.c.Stored(first, msgs) })
	default:
		s.c.Stored(first, msgs)
	}
}

// release passes the held acknowledgements in reverse order and stops
// holding.
func (s *heldSink) release() {
	s.mu.Lock()
	held := s.held
	s.held, s.hold = nil, false
	s.mu.Unlock()
	slices.Reverse(held)
	for _, f := range held {
		f()
	}
}

// checkRoom stops ckp and asserts that the room's checkpoints have the
// roots of an independent tree over its admitted messages, that the last
// covers all `leaves` of them, and that the checkpointer took `fromMemory`
// messages from the gate's acknowledgements and read `read` (-1: any).
func checkRoom(t *testing.T, e *roomtest.Env, ckp *checkpointer.Checkpointer, roomID string, trust *checkpoint.Trust, leaves int, fromMemory, read int) {
	t.Helper()
	if err := ckp.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	rt := roomtest.Rebuild(e, roomID, trust)
	sizes := rt.CheckCheckpoints(t)
	if rt.Tree.Size() != uint64(leaves) || len(sizes) == 0 || sizes[len(sizes)-1] != uint64(leaves) {
		t.Fatalf("independent tree has %d leaves, checkpoint sizes %v; want %d covered", rt.Tree.Size(), sizes, leaves)
	}
	mem, rd := ckp.FollowCounts()
	if mem != uint64(fromMemory) || (read >= 0 && rd != uint64(read)) {
		t.Fatalf("follow took %d messages from memory and read %d; want %d and %d", mem, rd, fromMemory, read)
	}
}

// TestCheckpointerFollowOutOfOrderAcks: the gate's batches acknowledged in
// reverse order are all taken from memory, none read (a record's markers
// too), and the tree keeps stream order.
func TestCheckpointerFollowOutOfOrderAcks(t *testing.T) {
	e := roomtest.NewEnvMarked(t, embedded.Options{})
	ctx := context.Background()
	key := roomtest.NewPublisherKey(t)
	const roomID = "room:acks"
	ckp, _ := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: key, Every: 1000, Interval: time.Hour})
	ckp.SetGapWait(time.Minute)
	sink := &heldSink{c: ckp, hold: true}
	gate := roomtest.AttestingGate(e, e.Nc, key, sink, ingest.GateOptions{MaxBatch: 4})
	es, _ := roomtest.Journal(t, "run-a", "cap-a", 10)
	if r, err := gate.AppendJournal(ctx, roomID, roomtest.Lines(es), nil); err != nil || r.Stored != 10 {
		t.Fatalf("%+v %v", r, err)
	}
	if r := gate.AppendRecord(ctx, roomtest.RecordNamed(e, roomID, "a0")); r.Item.Outcome != room.OutcomeStored {
		t.Fatalf("%+v", r)
	}
	time.Sleep(200 * time.Millisecond)
	if mem, rd := ckp.FollowCounts(); mem != 0 || rd != 0 {
		t.Fatalf("before the acknowledgements: %d from memory, %d read; want none", mem, rd)
	}
	sink.mu.Lock()
	if n := len(sink.held); n != 4 {
		sink.mu.Unlock()
		t.Fatalf("%d acknowledgements held, want 4 (batches of 4, 4, 2 and a record)", n)
	}
	sink.mu.Unlock()
	sink.release()
	// 11 leaves and the record's 5 markers (key, run, decision, instance,
	// the room's format), which its batch carries: no leaves.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mem, rd := ckp.FollowCounts()
		if mem == 16 {
			break
		}
		if mem+rd >= 16 || time.Now().After(deadline) {
			t.Fatalf("%d messages taken from memory and %d read; want all 16 from memory within 10s", mem, rd)
		}
	}
	checkRoom(t, e, ckp, roomID, roomtest.Trusting(t, key), 11, 16, 0)
}

// TestCheckpointerFollowGaps: another publisher's batch and a checkpoint
// between the gate's own batches are read; the own ones are not.
func TestCheckpointerFollowGaps(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	key, other := roomtest.NewPublisherKey(t), roomtest.NewPublisherKey(t)
	const roomID = "room:gaps"
	ckp, _ := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: key, TrustedPublishers: []string{other.NodeID()}, Every: 5, Interval: time.Hour})
	gate := roomtest.AttestingGate(e, e.Nc, key, ckp, ingest.GateOptions{})
	ogate := roomtest.AttestingGate(e, e.Connect(), other, nil, ingest.GateOptions{TrustedPublishers: []string{key.NodeID()}})
	ckSubj := room.Subjects{}.Checkpoint(roomID)
	es, _ := roomtest.Journal(t, "run-g", "cap-g", 10)
	os, _ := roomtest.Journal(t, "run-o", "cap-o", 3)
	if r, err := gate.AppendJournal(ctx, roomID, roomtest.Lines(es[:5]), nil); err != nil || r.Stored != 5 {
		t.Fatalf("%+v %v", r, err)
	}
	roomtest.WaitFor(t, 10*time.Second, "checkpoint 1", func() bool { return e.CountOn(ckSubj) == 1 })
	if r, err := ogate.AppendJournal(ctx, roomID, roomtest.Lines(os), nil); err != nil || r.Stored != 3 {
		t.Fatalf("%+v %v", r, err)
	}
	// A raw message without attestation: read, no leaf.
	if _, err := e.Js.PublishMsg(ctx, &nats.Msg{Subject: room.Subjects{}.Records(roomID), Data: []byte(`{"raw":true}`)}); err != nil {
		t.Fatal(err)
	}
	if r, err := gate.AppendJournal(ctx, roomID, roomtest.Lines(es[5:]), nil); err != nil || r.Stored != 5 {
		t.Fatalf("%+v %v", r, err)
	}
	// The record's position counts the raw exec message.
	if r := gate.AppendRecord(ctx, roomtest.RecordNamed(e, roomID, "g0")); r.Item.Outcome != room.OutcomeStored {
		t.Fatalf("%+v", r)
	}
	roomtest.WaitFor(t, 10*time.Second, "everything handled", func() bool { mem, rd := ckp.FollowCounts(); return mem+rd >= 11+3+1+2 })
	// Read: the other publisher's 3, the raw message, the checkpoints (one
	// at 5, one at 13 or later, written when due, possibly after).
	checkRoom(t, e, ckp, roomID, roomtest.Trusting(t, key, other), 14, 11, -1)
	if _, rd := ckp.FollowCounts(); rd < 3+1+1 {
		t.Fatalf("%d messages read, want at least the other publisher's 3, the raw one and a checkpoint", rd)
	}
}

// TestCheckpointerFollowLostAck: a batch whose acknowledgement never comes
// is read once the gap wait has passed, and admitted as the gate's own.
func TestCheckpointerFollowLostAck(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	key := roomtest.NewPublisherKey(t)
	const roomID = "room:lost"
	ckp, _ := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: key, Every: 1000, Interval: time.Hour})
	ckp.SetGapWait(300 * time.Millisecond)
	sink := &heldSink{c: ckp, drop: true}
	gate := roomtest.AttestingGate(e, e.Nc, key, sink, ingest.GateOptions{})
	es, _ := roomtest.Journal(t, "run-l", "cap-l", 7)
	start := time.Now()
	if r, err := gate.AppendJournal(ctx, roomID, roomtest.Lines(es[:4]), nil); err != nil || r.Stored != 4 {
		t.Fatalf("%+v %v", r, err)
	}
	roomtest.WaitFor(t, 10*time.Second, "the lost batch read", func() bool { _, rd := ckp.FollowCounts(); return rd == 4 })
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Fatalf("read %s after the append, before the gap wait", took)
	}
	sink.mu.Lock()
	sink.drop = false
	sink.mu.Unlock()
	if r, err := gate.AppendJournal(ctx, roomID, roomtest.Lines(es[4:]), nil); err != nil || r.Stored != 3 {
		t.Fatalf("%+v %v", r, err)
	}
	roomtest.WaitFor(t, 10*time.Second, "the next batch taken", func() bool { mem, _ := ckp.FollowCounts(); return mem == 3 })
	checkRoom(t, e, ckp, roomID, roomtest.Trusting(t, key), 7, 3, 4)
}

// TestCheckpointerFollowRestart: a checkpointer started on a stream with
// messages reads them (its catch-up), then takes the gate's new ones from
// memory; its checkpoints extend the first checkpointer's.
func TestCheckpointerFollowRestart(t *testing.T) {
	e := roomtest.NewEnvUnmarked(t, embedded.Options{})
	ctx := context.Background()
	key := roomtest.NewPublisherKey(t)
	const roomID = "room:restart"
	trust := roomtest.Trusting(t, key)
	ckp, _ := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: key, Every: 1000, Interval: time.Hour})
	gate := roomtest.AttestingGate(e, e.Nc, key, ckp, ingest.GateOptions{})
	es, _ := roomtest.Journal(t, "run-r", "cap-r", 12)
	if r, err := gate.AppendJournal(ctx, roomID, roomtest.Lines(es[:6]), nil); err != nil || r.Stored != 6 {
		t.Fatalf("%+v %v", r, err)
	}
	checkRoom(t, e, ckp, roomID, trust, 6, 6, 0)

	ckp2, _ := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: key, Every: 1000, Interval: time.Hour})
	gate2 := roomtest.AttestingGate(e, e.Connect(), key, ckp2, ingest.GateOptions{})
	if r, err := gate2.AppendJournal(ctx, roomID, roomtest.Lines(es[6:]), nil); err != nil || r.Stored != 6 {
		t.Fatalf("%+v %v", r, err)
	}
	if r := gate2.AppendRecord(ctx, roomtest.RecordNamed(e, roomID, "r0")); r.Item.Outcome != room.OutcomeStored {
		t.Fatalf("%+v", r)
	}
	// The 7 new messages from memory; the checkpoint at 6, if read after
	// the catch-up, is read.
	checkRoom(t, e, ckp2, roomID, trust, 13, 7, -1)
	if sizes := roomtest.Rebuild(e, roomID, trust).CheckCheckpoints(t); fmt.Sprint(sizes) != "[6 13]" {
		t.Fatalf("sizes %v, want [6 13]", sizes)
	}
}

// forgetfulSink passes a gate's acknowledgements to a checkpointer and its
// announcements only with announce: without them the checkpointer has
// forgotten the gate's attestations, as when its own-attestation
// generations rotate under load (make bench), so what it reads of the
// gate's batches goes to the batch collector and must be whole.
type forgetfulSink struct {
	c        *checkpointer.Checkpointer
	announce bool
}

func (s *forgetfulSink) Expect(msgs []room.StoredMsg) {
	if s.announce {
		s.c.Expect(msgs)
	}
}

func (s *forgetfulSink) Stored(first uint64, msgs []room.StoredMsg) { s.c.Stored(first, msgs) }
func (s *forgetfulSink) Unstored(header string)                     { s.c.Unstored(header) }

// checkCovered asserts that roomID's checkpoints, read independently from
// the stream, have the roots of an independent tree over its admitted
// messages and that the last covers all `leaves` of them.
func checkCovered(t *testing.T, e *roomtest.Env, roomID string, trust *checkpoint.Trust, leaves int) {
	t.Helper()
	rt := roomtest.Rebuild(e, roomID, trust)
	sizes := rt.CheckCheckpoints(t)
	if rt.Tree.Size() != uint64(leaves) || len(rt.NotLeaves) != 0 || len(sizes) == 0 || sizes[len(sizes)-1] != uint64(leaves) {
		t.Fatalf("%s: independent tree has %d leaves (%d messages no leaf), checkpoint sizes %v; want %d covered", roomID, rt.Tree.Size(), len(rt.NotLeaves), sizes, leaves)
	}
}

// TestCheckpointerFollowConcurrentFillsTinyCap is the regression test of
// the split 26cddf0 made in make bench: 8 gate requests at once, 8 chains
// in 2 rooms in batches of 5, and records, with room in memory for 7
// messages, so most batches do not fit. A batch is taken from memory whole
// or read whole: every stored message is a leaf, none is refused, and the
// checkpoints cover them all. Without announcements the read batches are
// verified by the batch collector, which refuses a part of a batch.
func TestCheckpointerFollowConcurrentFillsTinyCap(t *testing.T) {
	for _, announce := range []bool{true, false} {
		t.Run(fmt.Sprintf("announce=%v", announce), func(t *testing.T) {
			e := roomtest.NewEnvUnmarked(t, embedded.Options{})
			ctx := context.Background()
			key := roomtest.NewPublisherKey(t)
			trust := roomtest.Trusting(t, key)
			rooms := []string{"room:fill-a", "room:fill-b"}
			ckp, logs := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: key, Every: 100000, Interval: time.Hour})
			ckp.SetAckedMax(7)
			ckp.SetGapWait(200 * time.Millisecond)
			gate := roomtest.AttestingGate(e, e.Nc, key, &forgetfulSink{c: ckp, announce: announce}, ingest.GateOptions{MaxBatch: 5})
			const chains, entries, per, records = 8, 60, 20, 10
			var wg sync.WaitGroup
			errs := make(chan error, chains+1)
			for k := range chains {
				wg.Add(1)
				go func() {
					defer wg.Done()
					es, _ := roomtest.Journal(t, fmt.Sprint("run-f", k), fmt.Sprint("cap-f", k), entries)
					for from := 0; from < entries; from += per {
						r, err := gate.AppendJournal(ctx, rooms[k%2], roomtest.Lines(es[from:from+per]), nil)
						if err != nil || r.Stored != per {
							errs <- fmt.Errorf("chain %d lines %d..: %+v %v", k, from, r, err)
							return
						}
					}
				}()
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range records {
					if r := gate.AppendRecord(ctx, roomtest.RecordNamed(e, rooms[0], fmt.Sprint("f", i))); r.Item.Outcome != room.OutcomeStored {
						errs <- fmt.Errorf("record %d: %+v", i, r)
						return
					}
				}
			}()
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			total := chains*entries + records
			roomtest.WaitFor(t, 30*time.Second, "every message handled", func() bool { mem, rd := ckp.FollowCounts(); return mem+rd >= uint64(total) })
			if err := ckp.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			if no := logs.FilterMessageSnippet("not a leaf").All(); len(no) != 0 {
				t.Fatalf("%d logs about messages that are no leaves; the first: %s %v", len(no), no[0].Message, no[0].ContextMap())
			}
			checkCovered(t, e, rooms[0], trust, chains/2*entries+records)
			checkCovered(t, e, rooms[1], trust, chains/2*entries)
			mem, rd := ckp.FollowCounts()
			skipped := ckp.AckedSkipped()
			t.Logf("from memory %d, read %d, batches not taken from memory %d", mem, rd, skipped)
			// Both paths: some batches from memory, some (no room) read.
			if mem == 0 || skipped == 0 || rd < uint64(total)-mem {
				t.Fatalf("from memory %d, read %d, %d batches not taken from memory; want both paths and all %d messages handled", mem, rd, skipped, total)
			}
		})
	}
}

// TestCheckpointerFollowLateAckReadWhole: acknowledgements that come after
// follow read the batches (the gap read first) are not taken from memory:
// the batches are read whole from the stream and admitted, and a batch
// whose acknowledgement comes while it is being read is read on, whole.
func TestCheckpointerFollowLateAckReadWhole(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	key := roomtest.NewPublisherKey(t)
	const roomID = "room:late"
	ckp, logs := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: key, Every: 1000, Interval: time.Hour})
	ckp.SetGapWait(100 * time.Millisecond)
	sink := &heldSink{c: ckp, hold: true}
	gate := roomtest.AttestingGate(e, e.Nc, key, sink, ingest.GateOptions{MaxBatch: 4})
	es, _ := roomtest.Journal(t, "run-late", "cap-late", 15)
	if r, err := gate.AppendJournal(ctx, roomID, roomtest.Lines(es[:8]), nil); err != nil || r.Stored != 8 {
		t.Fatalf("%+v %v", r, err)
	}
	roomtest.WaitFor(t, 10*time.Second, "both batches read", func() bool { _, rd := ckp.FollowCounts(); return rd == 8 })
	sink.release()
	if mem, _ := ckp.FollowCounts(); mem != 0 || ckp.AckedSkipped() != 2 {
		t.Fatalf("%d messages from memory, %d batches not taken; want 0 and 2", mem, ckp.AckedSkipped())
	}

	// The acknowledgement comes once follow has read the batch's first
	// message (or all of it).
	sink.mu.Lock()
	sink.hold = true
	sink.mu.Unlock()
	released := make(chan struct{})
	go func() {
		defer close(released)
		for {
			if _, rd := ckp.FollowCounts(); rd >= 9 {
				sink.release()
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	if r, err := gate.AppendJournal(ctx, roomID, roomtest.Lines(es[8:12]), nil); err != nil || r.Stored != 4 {
		t.Fatalf("%+v %v", r, err)
	}
	<-released
	roomtest.WaitFor(t, 10*time.Second, "the batch read", func() bool { _, rd := ckp.FollowCounts(); return rd == 12 })
	if mem, _ := ckp.FollowCounts(); mem != 0 || ckp.AckedSkipped() != 3 {
		t.Fatalf("%d messages from memory, %d batches not taken; want 0 and 3", mem, ckp.AckedSkipped())
	}

	// Acknowledged in time: from memory. The wait for a late
	// acknowledgement is long now, so a loaded machine does not make the
	// batch late.
	ckp.SetGapWait(10 * time.Second)
	if r, err := gate.AppendJournal(ctx, roomID, roomtest.Lines(es[12:]), nil); err != nil || r.Stored != 3 {
		t.Fatalf("%+v %v", r, err)
	}
	checkRoom(t, e, ckp, roomID, roomtest.Trusting(t, key), 15, 3, 12)
	if n := logs.FilterMessageSnippet("not a leaf").Len(); n != 0 {
		t.Fatalf("%d logs about messages that are no leaves", n)
	}
}

// TestCheckpointerFollowRefusedBatchNotWaitedFor: a batch the server
// refuses (the gate's view of the chain was stale: another gate appended)
// is never acknowledged; the gate says so (Unstored), so follow does not
// wait for it at the next gap, another publisher's messages.
func TestCheckpointerFollowRefusedBatchNotWaitedFor(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	keyA, keyB := roomtest.NewPublisherKey(t), roomtest.NewPublisherKey(t)
	const roomID = "room:refused"
	ckp, _ := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: keyA, TrustedPublishers: []string{keyB.NodeID()}, Every: 1000, Interval: time.Hour})
	ckp.SetGapWait(time.Hour) // without Unstored, follow would wait for the refused batch forever
	gateA := roomtest.AttestingGate(e, e.Nc, keyA, ckp, ingest.GateOptions{TrustedPublishers: []string{keyB.NodeID()}})
	gateB := roomtest.AttestingGate(e, e.Connect(), keyB, nil, ingest.GateOptions{TrustedPublishers: []string{keyA.NodeID()}})
	es, _ := roomtest.Journal(t, "run-r", "cap-r", 15)
	other, _ := roomtest.Journal(t, "run-r", "cap-other", 40)
	for _, step := range []struct {
		g      *ingest.Gate
		body   []byte
		stored int
	}{
		{gateA, roomtest.Lines(es[:5]), 5},      // A knows the chain at 5
		{gateB, roomtest.Lines(es[5:10]), 5},    // B moves it on behind A's back
		{gateA, roomtest.Lines(es[5:15]), 5},    // A's batch is refused (wrong last sequence), then decided again: 5 duplicates, 5 stored
		{gateB, roomtest.Lines(other[:40]), 40}, // B's messages: a gap for A's checkpointer
	} {
		if r, err := step.g.AppendJournal(ctx, roomID, step.body, nil); err != nil || r.Stored != step.stored {
			t.Fatalf("%+v %v, want %d stored", r, err, step.stored)
		}
	}
	roomtest.WaitFor(t, 10*time.Second, "every message handled", func() bool {
		mem, rd := ckp.FollowCounts()
		return mem+rd == 55
	})
	checkRoom(t, e, ckp, roomID, roomtest.Trusting(t, keyA, keyB), 55, 10, 45)
}

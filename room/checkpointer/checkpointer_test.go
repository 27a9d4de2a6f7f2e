package checkpointer_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/node"
	"github.com/roompub/roompub/validate"
)

// TestGateAttestsEveryAppend: every message a gate with a publisher key
// appends carries an attestation that verifies under checkpoint.Trust at
// its position: a journal entry at its seq (an atomic batch signed once,
// "i/25", and one append per entry, "0/1"), a record at its ordinal among
// all messages on the room's exec subject, counted across another gate's
// appends and a raw message there.
func TestGateAttestsEveryAppend(t *testing.T) {
	e := roomtest.NewEnvUnmarked(t, embedded.Options{})
	ctx := context.Background()
	key, other := roomtest.NewPublisherKey(t), roomtest.NewPublisherKey(t)
	batched := roomtest.AttestingGate(e, e.Nc, key, nil, ingest.GateOptions{})
	single := roomtest.AttestingGate(e, e.Connect(), key, nil, ingest.GateOptions{MaxBatch: 1})
	second := roomtest.AttestingGate(e, e.Connect(), other, nil, ingest.GateOptions{})
	const roomID = "room:attest"

	es, body := roomtest.Journal(t, "run-a", "cap-a", 40)
	if r, err := batched.AppendJournal(ctx, roomID, body[:len(roomtest.Lines(es[:25]))], nil); err != nil || r.Stored != 25 {
		t.Fatalf("batched: %+v %v", r, err)
	}
	if r, err := single.AppendJournal(ctx, roomID, roomtest.Lines(es[25:]), nil); err != nil || r.Stored != 15 {
		t.Fatalf("one by one: %+v %v", r, err)
	}
	// A resend stores nothing new and so attests nothing new.
	if r, err := batched.AppendJournal(ctx, roomID, roomtest.Lines(es[:3]), nil); err != nil || r.Dupes != 3 {
		t.Fatalf("resend: %+v %v", r, err)
	}

	recs := []string{"r0", "r1", "r2", "r3"}
	appendRec := func(g *ingest.Gate, n string) {
		t.Helper()
		if r := g.AppendRecord(ctx, roomtest.RecordNamed(e, roomID, n)); r.Item.Outcome != room.OutcomeStored {
			t.Fatalf("record %s: %+v", n, r)
		}
	}
	appendRec(batched, recs[0]) // index 0
	appendRec(batched, recs[1]) // index 1: batched's room index is current
	appendRec(second, recs[2])  // index 2: another gate, which catches up first
	// Index 3: a raw message on the exec subject (no record at all).
	if _, err := e.Js.Publish(ctx, room.Subjects{}.Records(roomID), []byte(`{"not":"a record"}`)); err != nil {
		t.Fatal(err)
	}
	// Index 4: batched's view is two messages behind: the server refuses
	// its expected sequence, it reads them and counts them.
	appendRec(batched, recs[3])

	trust := roomtest.Trusting(t, key, other)
	rt := roomtest.Rebuild(e, roomID, trust)
	if len(rt.LeafSeqs) != 44 || len(rt.NotLeaves) != 1 {
		t.Fatalf("%d leaves, %d not (seqs %v); want 44 and the raw message", len(rt.LeafSeqs), len(rt.NotLeaves), rt.NotLeaves)
	}
	// Exact positions and signers, message by message.
	subj := room.Subjects{}
	var execIndex uint64
	var jHeaders []string
	var jStmts []checkpoint.Statement
	for _, m := range e.Stored() {
		h := m.Header.Get(checkpoint.AttestationHeader)
		content := checkpoint.ContentHash(m.Data)
		if m.Subject == subj.Records(roomID) {
			pos := checkpoint.RecordPosition(execIndex)
			execIndex++
			signer, err := trust.VerifyAttestation(h, roomID, m.Subject, pos, content)
			switch execIndex - 1 {
			case 3:
				if !errors.Is(err, checkpoint.ErrNoAttestation) {
					t.Fatalf("raw message: %v", err)
				}
			case 2:
				if err != nil || signer != other.NodeID() {
					t.Fatalf("record at %s: %s %v", pos, signer, err)
				}
			default:
				if err != nil || signer != key.NodeID() {
					t.Fatalf("record at %s: %s %v", pos, signer, err)
				}
				// Not at any other position.
				if _, err := trust.VerifyAttestation(h, roomID, m.Subject, checkpoint.RecordPosition(execIndex), content); !errors.Is(err, checkpoint.ErrBadAttestation) {
					t.Fatalf("record at %s also verifies at index %d: %v", pos, execIndex, err)
				}
			}
			continue
		}
		en, err := events.ParseEntry(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		seq, _ := en.Seq()
		jHeaders = append(jHeaders, h)
		jStmts = append(jStmts, checkpoint.Statement{Room: roomID, Subject: m.Subject, Position: checkpoint.JournalPosition(seq), Content: content})
	}
	// The journal: entries 0-24 one batch of 25, then 15 batches of one.
	if len(jHeaders) != 40 {
		t.Fatalf("%d journal messages", len(jHeaders))
	}
	for i, h := range jHeaders {
		a, err := checkpoint.ParseAttestation(h)
		want := [2]int{i, 25}
		if i >= 25 {
			want = [2]int{0, 1}
		}
		if err != nil || a.Signer != key.NodeID() || [2]int{a.Index, a.Count} != want {
			t.Fatalf("entry %d: %+v %v, want %d/%d", i, a, err, want[0], want[1])
		}
	}
	batches := [][2]int{{0, 25}}
	for i := 25; i < 40; i++ {
		batches = append(batches, [2]int{i, i + 1})
	}
	for _, b := range batches {
		hs, ss := jHeaders[b[0]:b[1]], jStmts[b[0]:b[1]]
		if signer, err := trust.VerifyBatch(hs, ss); err != nil || signer != key.NodeID() {
			t.Fatalf("entries %d-%d: %s %v", b[0], b[1]-1, signer, err)
		}
		// A flipped content bit, another room, another position of any
		// message: the batch is refused.
		for k := range ss {
			for name, edit := range map[string]func(*checkpoint.Statement){
				"content":  func(s *checkpoint.Statement) { s.Content[0] ^= 1 },
				"room":     func(s *checkpoint.Statement) { s.Room = "room:other" },
				"position": func(s *checkpoint.Statement) { s.Position = checkpoint.JournalPosition(int64(b[0]+k) + 1) },
			} {
				edited := slices.Clone(ss)
				edit(&edited[k])
				if _, err := trust.VerifyBatch(hs, edited); !errors.Is(err, checkpoint.ErrBadAttestation) {
					t.Fatalf("entries %d-%d verify with the %s of %d edited: %v", b[0], b[1]-1, name, k, err)
				}
			}
		}
	}
	// Part of the batch of 25 cannot be verified.
	if _, err := trust.VerifyBatch(jHeaders[:24], jStmts[:24]); !errors.Is(err, checkpoint.ErrBadAttestation) {
		t.Fatalf("24 of the batch of 25: %v", err)
	}
	if _, err := trust.VerifyAttestation(jHeaders[3], roomID, jStmts[3].Subject, jStmts[3].Position, jStmts[3].Content); !errors.Is(err, checkpoint.ErrIncompleteBatch) {
		t.Fatalf("one of the batch of 25 alone: %v", err)
	}
	if execIndex != 5 {
		t.Fatalf("%d messages on the exec subject, want 5", execIndex)
	}
	// Only the own key: the other gate's record is an untrusted publisher's.
	if _, err := roomtest.Trusting(t, key).VerifyAttestation(e.OnSubject(subj.Records(roomID))[2].Header.Get(checkpoint.AttestationHeader),
		roomID, subj.Records(roomID), checkpoint.RecordPosition(2), checkpoint.ContentHash(e.OnSubject(subj.Records(roomID))[2].Data)); !errors.Is(err, checkpoint.ErrUntrustedPublisher) {
		t.Fatalf("other key's record under the own key only: %v", err)
	}
}

// TestGateWithoutKeyAttestsNothing: without a publisher key no message
// carries the header (the behaviour before attestations).
func TestGateWithoutKeyAttestsNothing(t *testing.T) {
	e := roomtest.NewEnv(t)
	_, body := roomtest.Journal(t, "run-n", "cap-n", 5)
	if r := e.ShipJournal("room:none", body); r.Stored != 5 {
		t.Fatalf("%+v", r)
	}
	if r := e.ShipRecord(roomtest.RecordNamed(e, "room:none", "n0")); r.Item.Outcome != room.OutcomeStored {
		t.Fatalf("%+v", r)
	}
	for _, m := range e.Stored() {
		if h := m.Header.Get(checkpoint.AttestationHeader); h != "" {
			t.Fatalf("stream seq %d carries %q", m.Sequence, h)
		}
	}
}

// TestGateCountsAttestationSize: the attestation header counts toward the
// size the gate checks: an entry that fits without it is too_large with it.
func TestGateCountsAttestationSize(t *testing.T) {
	const maxPayload = 4096
	e := roomtest.NewEnvWith(t, embedded.Options{MaxPayload: maxPayload})
	ctx := context.Background()
	key := roomtest.NewPublisherKey(t)
	plain := roomtest.AttestingGate(e, e.Nc, nil, nil, ingest.GateOptions{})
	attesting := roomtest.AttestingGate(e, e.Connect(), key, nil, ingest.GateOptions{})
	// One entry whose message without the attestation is 80 bytes under
	// the limit: the attestation header adds len(name)+len(value)+4 bytes.
	subj := room.Subjects{}.Journal("room:size", events.ChainKey{RunID: "run-s", CapsuleID: "cap-s"})
	attSize := len(checkpoint.AttestationHeader) + len(key.NodeID()) + 1 + 86 + len(" 0/1") + 4
	fixed := 12 + len(jetstream.MsgIDHeader) + 64 + 4 + len(jetstream.ExpectedLastSubjSeqHeader) + 1 + 4 +
		len(jetstream.ExpectedLastSubjSeqSubjHeader) + len(room.Subjects{}.ChainAnyRoom(events.ChainKey{RunID: "run-s", CapsuleID: "cap-s"})) + 4
	entry := func(pad int) *events.Entry {
		en, err := events.NewEntry(map[string]any{
			"schema": events.EntrySchema, "run_id": "run-s", "capsule_id": "cap-s", "seq": json.Number("0"),
			"ts": "2026-09-02T00:00:00.000Z", "lineage": "attempt", "kind": "tool.call", "effect_class": "SE0",
			"harness_version": "test/1", "task_family": "slugify", "parent_hash": events.ZeroHash,
			"payload": map[string]any{"tool": strings.Repeat("x", pad)},
		})
		if err != nil {
			t.Fatal(err)
		}
		return en
	}
	probe := entry(0)
	pad := maxPayload - 80 - fixed - len(probe.Canonical())
	en := entry(pad)
	if got := fixed + len(en.Canonical()); got != maxPayload-80 || attSize <= 80 {
		t.Fatalf("setup: message of %d bytes, attestation %d", got, attSize)
	}
	line := append(append([]byte(nil), en.Canonical()...), '\n')
	r, err := attesting.AppendJournal(ctx, "room:size", line, nil)
	if err != nil || r.Refused != 1 || r.Items[0].Code != events.TooLarge {
		t.Fatalf("with the attestation: %+v %v", r, err)
	}
	if e.CountOn(subj) != 0 {
		t.Fatal("a refused entry was stored")
	}
	if r, err := plain.AppendJournal(ctx, "room:size", line, nil); err != nil || r.Stored != 1 {
		t.Fatalf("without the attestation it fits: %+v %v", r, err)
	}
}

// TestCheckpointerWritesEveryNAfterTAndOnStop: checkpoints appear every N
// leaves, after T, and on Stop; each verifies, sizes grow, and every root
// is the independently rebuilt tree's at that size.
func TestCheckpointerWritesEveryNAfterTAndOnStop(t *testing.T) {
	e := roomtest.NewEnvUnmarked(t, embedded.Options{})
	ctx := context.Background()
	key := roomtest.NewPublisherKey(t)
	const roomID, quiet = "room:ckpt", "room:quiet"
	ckp, _ := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: key, Every: 10, Interval: time.Hour, LeaseTTL: 5 * time.Second})
	gate := roomtest.AttestingGate(e, e.Nc, key, ckp, ingest.GateOptions{})
	ckSubj := room.Subjects{}.Checkpoint(roomID)
	trust := roomtest.Trusting(t, key)
	es, _ := roomtest.Journal(t, "run-c", "cap-c", 25)

	// Every 10: one request of 10 lines, one checkpoint of size 10; then
	// 10 more; then 5, which stay under N and T.
	for i, want := range []uint64{10, 20} {
		if r, err := gate.AppendJournal(ctx, roomID, roomtest.Lines(es[i*10:i*10+10]), nil); err != nil || r.Stored != 10 {
			t.Fatalf("%+v %v", r, err)
		}
		roomtest.WaitFor(t, 10*time.Second, fmt.Sprintf("checkpoint %d", i+1), func() bool { return e.CountOn(ckSubj) == uint64(i+1) })
		rt := roomtest.Rebuild(e, roomID, trust)
		if sizes := rt.CheckCheckpoints(t); sizes[len(sizes)-1] != want {
			t.Fatalf("sizes %v, want the last %d", sizes, want)
		}
	}
	if r, err := gate.AppendJournal(ctx, roomID, roomtest.Lines(es[20:]), nil); err != nil || r.Stored != 5 {
		t.Fatalf("%+v %v", r, err)
	}
	// Records count as leaves too.
	if r := gate.AppendRecord(ctx, roomtest.RecordNamed(e, roomID, "c0")); r.Item.Outcome != room.OutcomeStored {
		t.Fatalf("%+v", r)
	}
	// A room with 3 leaves, under N: no checkpoint before Stop either.
	_, qbody := roomtest.Journal(t, "run-q", "cap-q", 3)
	if r, err := gate.AppendJournal(ctx, quiet, qbody, nil); err != nil || r.Stored != 3 {
		t.Fatalf("%+v %v", r, err)
	}
	time.Sleep(300 * time.Millisecond)
	if n := e.CountOn(ckSubj); n != 2 {
		t.Fatalf("%d checkpoints before N or T, want 2", n)
	}
	if n := e.CountOn(room.Subjects{}.Checkpoint(quiet)); n != 0 {
		t.Fatalf("quiet room: %d checkpoints", n)
	}
	// Stop writes the final checkpoints of both rooms and releases the
	// leases.
	if err := ckp.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	rt := roomtest.Rebuild(e, roomID, trust)
	if sizes := rt.CheckCheckpoints(t); fmt.Sprint(sizes) != "[10 20 26]" {
		t.Fatalf("sizes %v, want [10 20 26]", sizes)
	}
	if rt.Tree.Size() != 26 || len(rt.NotLeaves) != 0 {
		t.Fatalf("independent tree: %d leaves, not leaves %v", rt.Tree.Size(), rt.NotLeaves)
	}
	for _, ck := range rt.Checkpoints {
		if ck.Signer != key.NodeID() || ck.Room != roomID {
			t.Fatalf("checkpoint by %s of %s", ck.Signer, ck.Room)
		}
	}
	if sizes := roomtest.Rebuild(e, quiet, trust).CheckCheckpoints(t); fmt.Sprint(sizes) != "[3]" {
		t.Fatalf("quiet room sizes %v, want [3]", sizes)
	}
	kv, err := e.Js.KeyValue(ctx, room.DefaultLeaseBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, checkpointer.LeaseKey(roomID)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("lease after Stop: %v, want released", err)
	}

	// After T: a new checkpointer (reading the stream from the start) with
	// N out of reach writes within T of growth.
	ckp2, _ := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: key, Every: 1000, Interval: 300 * time.Millisecond})
	gate2 := roomtest.AttestingGate(e, e.Connect(), key, ckp2, ingest.GateOptions{})
	if r := gate2.AppendRecord(ctx, roomtest.RecordNamed(e, roomID, "c1")); r.Item.Outcome != room.OutcomeStored {
		t.Fatalf("%+v", r)
	}
	start := time.Now()
	roomtest.WaitFor(t, 10*time.Second, "a checkpoint after T", func() bool { return e.CountOn(ckSubj) == 4 })
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Fatalf("checkpoint %s after the append, before T", took)
	}
	rt = roomtest.Rebuild(e, roomID, trust)
	if sizes := rt.CheckCheckpoints(t); fmt.Sprint(sizes) != "[10 20 26 27]" {
		t.Fatalf("sizes %v, want [10 20 26 27]", sizes)
	}
	// Nothing grew: Stop writes nothing new.
	if err := ckp2.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.CountOn(ckSubj); n != 4 {
		t.Fatalf("%d checkpoints after an idle Stop, want 4", n)
	}
}

// TestCheckpointerLeaseTakeover: two serve-like checkpointers with their
// own keys, each trusting the other: only the lease holder writes; when it
// dies (its connection closes, the lease is not released), the other takes
// over once the lease's TTL has passed, and its checkpoints extend the
// first's.
func TestCheckpointerLeaseTakeover(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	keyA, keyB := roomtest.NewPublisherKey(t), roomtest.NewPublisherKey(t)
	const roomID, ttl = "room:lease", 2 * time.Second
	opts := func(k *events.HostKey, other *events.HostKey) checkpointer.Options {
		return checkpointer.Options{Key: k, TrustedPublishers: []string{other.NodeID()}, Every: 5, Interval: 100 * time.Millisecond, LeaseTTL: ttl}
	}
	ncA, ncB := e.Connect(), e.Connect()
	ckA, _ := roomtest.StartCheckpointer(t, ncA, opts(keyA, keyB))
	ckB, _ := roomtest.StartCheckpointer(t, ncB, opts(keyB, keyA))
	// Each gate trusts the other's key, as serve --trusted-publisher does,
	// so the chain the other appended to is one chain.
	gateA := roomtest.AttestingGate(e, e.Connect(), keyA, ckA, ingest.GateOptions{TrustedPublishers: []string{keyB.NodeID()}})
	gateB := roomtest.AttestingGate(e, e.Connect(), keyB, ckB, ingest.GateOptions{TrustedPublishers: []string{keyA.NodeID()}})
	trust := roomtest.Trusting(t, keyA, keyB)
	es, _ := roomtest.Journal(t, "run-l", "cap-l", 60)

	// Both gates append; three rounds, each ending in a checkpoint.
	next := 0
	appendRound := func(g *ingest.Gate) {
		t.Helper()
		if r, err := g.AppendJournal(ctx, roomID, roomtest.Lines(es[next:next+10]), nil); err != nil || r.Stored != 10 {
			t.Fatalf("%+v %v", r, err)
		}
		next += 10
		roomtest.WaitFor(t, 10*time.Second, fmt.Sprintf("a checkpoint of size %d", next), func() bool {
			cks := roomtest.Rebuild(e, roomID, trust).Checkpoints
			return len(cks) > 0 && cks[len(cks)-1].Size == uint64(next)
		})
	}
	appendRound(gateA)
	appendRound(gateB)
	appendRound(gateA)
	rt := roomtest.Rebuild(e, roomID, trust)
	rt.CheckCheckpoints(t)
	holder := rt.Checkpoints[0].Signer
	for _, ck := range rt.Checkpoints {
		if ck.Signer != holder {
			t.Fatalf("checkpoints by %s and %s: both wrote", holder, ck.Signer)
		}
	}
	kv, err := e.Js.KeyValue(ctx, room.DefaultLeaseBucket)
	if err != nil {
		t.Fatal(err)
	}
	en, err := kv.Get(ctx, checkpointer.LeaseKey(roomID))
	if err != nil {
		t.Fatal(err)
	}
	if l, err := trust.VerifyLease(checkpointer.LeaseKey(roomID), en.Value()); err != nil || l.NodeID != holder {
		t.Fatalf("lease: %q %v, want a lease statement of %s", en.Value(), err, holder)
	}
	renewed := en.Created() // the holder writes nothing more: no renewal
	// The holder dies without releasing its lease.
	survivor, survivorGate, deadNC := keyB, gateB, ncA
	if holder == keyB.NodeID() {
		survivor, survivorGate, deadNC = keyA, gateA, ncB
	}
	deadNC.Close()
	appendRound(survivorGate)
	rt = roomtest.Rebuild(e, roomID, trust)
	sizes := rt.CheckCheckpoints(t)
	var first *jetstream.RawStreamMsg
	for i, ck := range rt.Checkpoints {
		if ck.Signer == survivor.NodeID() {
			first, err = e.Stream.GetMsg(ctx, rt.CkptSeqs[i])
			if err != nil {
				t.Fatal(err)
			}
			if ck.Size <= 30 {
				t.Fatalf("the survivor's first checkpoint is of size %d, which the holder had covered", ck.Size)
			}
			break
		}
	}
	last := rt.Checkpoints[len(rt.Checkpoints)-1]
	if first == nil || last.Signer != survivor.NodeID() || sizes[len(sizes)-1] != 40 {
		t.Fatalf("after the holder died: last checkpoint by %s at %d, want %s at 40", last.Signer, last.Size, survivor.NodeID())
	}
	if lapse := renewed.Add(ttl); first.Time.Before(lapse) {
		t.Fatalf("the survivor wrote at %s, before the holder's lease lapsed (%s)", first.Time, lapse)
	}
	t.Logf("takeover %s after the last renewal (lease TTL %s); checkpoint sizes %v", first.Time.Sub(renewed), ttl, sizes)
	en, err = kv.Get(ctx, checkpointer.LeaseKey(roomID))
	if err != nil {
		t.Fatal(err)
	}
	if l, err := trust.VerifyLease(checkpointer.LeaseKey(roomID), en.Value()); err != nil || l.NodeID != survivor.NodeID() {
		t.Fatalf("lease: %q %v, want held by the survivor", en.Value(), err)
	}
}

// TestCheckpointerSkipsForgedMessages: messages written straight into the
// room without an attestation, with one by an untrusted key, or with a
// trusted header copied from another message are no leaves: the next
// checkpoint's size excludes them and its root is the tree without them.
func TestCheckpointerSkipsForgedMessages(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	key, stranger := roomtest.NewPublisherKey(t), roomtest.NewPublisherKey(t)
	const roomID = "room:forged"
	ckp, logs := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: key, Every: 1000, Interval: time.Hour})
	gate := roomtest.AttestingGate(e, e.Nc, key, ckp, ingest.GateOptions{})
	es, _ := roomtest.Journal(t, "run-f", "cap-f", 8)
	if r, err := gate.AppendJournal(ctx, roomID, roomtest.Lines(es[:5]), nil); err != nil || r.Stored != 5 {
		t.Fatalf("%+v %v", r, err)
	}
	subj := room.Subjects{}
	chain := subj.Journal(roomID, events.ChainKey{RunID: "run-f", CapsuleID: "cap-f"})
	stored := e.OnSubject(chain)
	// A well-formed continuation of another chain of the room, raw.
	other, _ := roomtest.Journal(t, "run-x", "cap-x", 2)
	xsubj := subj.Journal(roomID, events.ChainKey{RunID: "run-x", CapsuleID: "cap-x"})
	forge := func(subject string, data []byte, header string) {
		t.Helper()
		msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
		if header != "" {
			msg.Header.Set(checkpoint.AttestationHeader, header)
		}
		if _, err := e.Js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	forge(xsubj, other[0].Canonical(), "")
	// Attested by a key nobody trusts, correctly for what it claims.
	forge(xsubj, other[1].Canonical(), checkpoint.Attest(stranger, roomID, xsubj, checkpoint.JournalPosition(1), checkpoint.ContentHash(other[1].Canonical())))
	// The trusted header of entry 0 on other bytes.
	forge(subj.Records(roomID), []byte(`{"forged":true}`), stored[0].Header.Get(checkpoint.AttestationHeader))
	// The gate appends on: 3 more entries and a record, whose position
	// counts the forged exec message (index 1).
	if r, err := gate.AppendJournal(ctx, roomID, roomtest.Lines(es[5:]), nil); err != nil || r.Stored != 3 {
		t.Fatalf("%+v %v", r, err)
	}
	if r := gate.AppendRecord(ctx, roomtest.RecordNamed(e, roomID, "f0")); r.Item.Outcome != room.OutcomeStored {
		t.Fatalf("%+v", r)
	}
	if err := ckp.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	rt := roomtest.Rebuild(e, roomID, roomtest.Trusting(t, key))
	if sizes := rt.CheckCheckpoints(t); fmt.Sprint(sizes) != "[9]" {
		t.Fatalf("sizes %v, want [9]: 8 entries and a record, no forged message", sizes)
	}
	if len(rt.NotLeaves) != 3 {
		t.Fatalf("not leaves %v, want the 3 forged messages", rt.NotLeaves)
	}
	// The checkpoint's root is not the root of the tree that takes the
	// first forged message in, in its stream place.
	leaf := map[uint64]bool{rt.NotLeaves[0]: true}
	for _, seq := range rt.LeafSeqs {
		leaf[seq] = true
	}
	withForged := checkpoint.NewTree()
	for _, m := range e.Stored() {
		if leaf[m.Sequence] {
			withForged.Append(checkpoint.LeafHash(roomID, m.Subject, checkpoint.ContentHash(m.Data)))
		}
	}
	if withForged.Size() != 10 || withForged.Root() == rt.Checkpoints[0].Root || rt.Tree.Root() != rt.Checkpoints[0].Root {
		t.Fatalf("a tree with a forged leaf (size %d) has the checkpoint's root, or the tree without has not", withForged.Size())
	}
	if n := logs.FilterMessageSnippet("not a leaf").Len(); n < 2 {
		t.Fatalf("%d logs about messages that are no leaves, want at least 2:\n%v", n, logs.All())
	}
}

// TestCheckpointerRefusesContradictedRoom: a room whose latest checkpoint,
// signed by a trusted key, has a wrong root gets no new checkpoint, and an
// error log; another room goes on.
func TestCheckpointerRefusesContradictedRoom(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	key, trusted := roomtest.NewPublisherKey(t), roomtest.NewPublisherKey(t)
	const roomID, fine = "room:contradicted", "room:fine"
	ckp, logs := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: key, TrustedPublishers: []string{trusted.NodeID()},
		Every: 5, Interval: 100 * time.Millisecond})
	gate := roomtest.AttestingGate(e, e.Nc, key, ckp, ingest.GateOptions{})
	es, _ := roomtest.Journal(t, "run-k", "cap-k", 15)
	if r, err := gate.AppendJournal(ctx, roomID, roomtest.Lines(es[:5]), nil); err != nil || r.Stored != 5 {
		t.Fatalf("%+v %v", r, err)
	}
	ckSubj := room.Subjects{}.Checkpoint(roomID)
	roomtest.WaitFor(t, 10*time.Second, "the first checkpoint", func() bool { return e.CountOn(ckSubj) == 1 })
	// A trusted key signs a checkpoint of size 5 over a wrong root,
	// written straight into the stream.
	signer, err := checkpoint.NewNoteSigner(trusted)
	if err != nil {
		t.Fatal(err)
	}
	var wrong [32]byte
	copy(wrong[:], "not the root of this room at all")
	forged, err := checkpoint.Sign(signer, roomID, 5, wrong)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Js.Publish(ctx, ckSubj, forged); err != nil {
		t.Fatal(err)
	}
	roomtest.WaitFor(t, 10*time.Second, "an error log", func() bool { return logs.FilterMessageSnippet("contradicts").Len() == 1 })
	entry := logs.FilterMessageSnippet("contradicts").All()[0]
	if entry.Level != zap.ErrorLevel || entry.ContextMap()["room"] != roomID || entry.ContextMap()["signer"] != trusted.NodeID() ||
		!strings.Contains(fmt.Sprint(entry.ContextMap()["reason"]), hex.EncodeToString(wrong[:])) {
		t.Fatalf("log: %v %v", entry.Level, entry.ContextMap())
	}
	// The room grows past N and T, and Stop comes: nothing is written.
	if r, err := gate.AppendJournal(ctx, roomID, roomtest.Lines(es[5:]), nil); err != nil || r.Stored != 10 {
		t.Fatalf("%+v %v", r, err)
	}
	_, fbody := roomtest.Journal(t, "run-g", "cap-g", 5)
	if r, err := gate.AppendJournal(ctx, fine, fbody, nil); err != nil || r.Stored != 5 {
		t.Fatalf("%+v %v", r, err)
	}
	fineSubj := room.Subjects{}.Checkpoint(fine)
	roomtest.WaitFor(t, 10*time.Second, "the other room's checkpoint", func() bool { return e.CountOn(fineSubj) == 1 })
	time.Sleep(300 * time.Millisecond)
	if err := ckp.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.CountOn(ckSubj); n != 2 {
		t.Fatalf("%d checkpoints of the contradicted room, want 2 (the first and the forged one)", n)
	}
	last := e.OnSubject(ckSubj)[1]
	if ck, err := checkpoint.Parse(last.Data, roomID, roomtest.Trusting(t, trusted)); err != nil || ck.Root != wrong {
		t.Fatalf("the latest checkpoint is not the forged one: %v", err)
	}
	if sizes := roomtest.Rebuild(e, fine, roomtest.Trusting(t, key)).CheckCheckpoints(t); fmt.Sprint(sizes) != "[5]" {
		t.Fatalf("the other room: %v", sizes)
	}
}

// TestLeaseKey: lease keys are valid key-value keys, one per room.
func TestLeaseKey(t *testing.T) {
	seen := map[string]string{}
	for _, id := range []string{"room:a", "room:a.b", "room:a:b", "room:a/b", "room:a~3Ab", "room:a=b", "room:é", "room:" + strings.Repeat("x", 512)} {
		k := checkpointer.LeaseKey(id)
		for _, c := range k {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-/_=", c)) {
				t.Fatalf("LeaseKey(%q) = %q holds %q", id, k, c)
			}
		}
		if prev, ok := seen[k]; ok {
			t.Fatalf("LeaseKey(%q) = LeaseKey(%q) = %q", id, prev, k)
		}
		seen[k] = id
	}
	if got := checkpointer.LeaseKey("room:a.b:c"); got != "a=2Eb/c" {
		t.Fatalf("LeaseKey = %q", got)
	}
}

// TestServeCheckpoints: node.Serve with a publisher key attests what its
// gate appends, writes checkpoints with its metrics, and writes the final
// checkpoint when its context ends; without a key it warns once and
// attests nothing.
func TestServeCheckpoints(t *testing.T) {
	srv, err := embedded.Start(embedded.Options{Listen: "127.0.0.1:-1", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	hostKey, pubKey := roomtest.NewPublisherKey(t), roomtest.NewPublisherKey(t)
	v, err := validate.New(validate.WithTrustedHosts(hostKey.NodeID()))
	if err != nil {
		t.Fatal(err)
	}
	serve := func(key *events.HostKey) (*observer.ObservedLogs, node.ServeInfo, func()) {
		t.Helper()
		core, logs := observer.New(zap.InfoLevel)
		ctx, cancel := context.WithCancel(context.Background())
		done, ready := make(chan error, 1), make(chan node.ServeInfo, 1)
		go func() {
			done <- node.Serve(ctx, node.ServeOptions{ServerURL: srv.ClientURL(), Replicas: 1, Validator: v, Logger: zap.New(core),
				HTTPAddr: "127.0.0.1:0", PublisherKey: key, Checkpoint: checkpointer.Options{Every: 5, Interval: time.Hour},
				Ready: func(i node.ServeInfo) { ready <- i }})
		}()
		var info node.ServeInfo
		select {
		case info = <-ready:
		case err := <-done:
			t.Fatalf("serve: %v", err)
		}
		return logs, info, func() {
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("serve returned %v", err)
			}
		}
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	st, err := js.Stream(context.Background(), room.DefaultStream)
	ckSubj := room.Subjects{}.Checkpoint("room:served")
	count := func() uint64 { t.Helper(); return roomtest.CountOn(t, st, ckSubj) }

	logs, info, stop := serve(pubKey)
	if err == nil {
		t.Fatal("the stream existed before serve")
	}
	if st, err = js.Stream(context.Background(), room.DefaultStream); err != nil {
		t.Fatal(err)
	}
	es, _ := roomtest.Journal(t, "run-s", "cap-s", 7)
	if r := roomtest.ShipJournal(t, nc, "room:served", roomtest.Lines(es[:5])); r.Stored != 5 {
		t.Fatalf("%+v", r)
	}
	roomtest.WaitFor(t, 10*time.Second, "a checkpoint every 5", func() bool { return count() == 1 })
	if r := roomtest.ShipJournal(t, nc, "room:served", roomtest.Lines(es[5:])); r.Stored != 2 {
		t.Fatalf("%+v", r)
	}
	metrics := func() string {
		resp, err := http.Get("http://" + info.HTTPAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	// The counter moves once the append's ack is in, which may be after the
	// checkpoint is seen in the stream.
	roomtest.WaitFor(t, 10*time.Second, "roompub_checkpoints_written_total 1", func() bool {
		return strings.Contains(metrics(), "roompub_checkpoints_written_total 1\n")
	})
	for _, want := range []string{"roompub_checkpoint_leases_held 1\n", "roompub_checkpoint_rooms_blocked 0\n", "roompub_checkpoint_unadmitted_messages_total 0\n"} {
		if body := metrics(); !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	stop()
	if n := count(); n != 2 {
		t.Fatalf("%d checkpoints after serve stopped, want 2 (every 5, and the final one)", n)
	}
	last, err := st.GetLastMsgForSubject(context.Background(), ckSubj)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Parse(last.Data, "room:served", roomtest.Trusting(t, pubKey))
	if err != nil || ck.Size != 7 || ck.Signer != pubKey.NodeID() {
		t.Fatalf("final checkpoint: %+v %v", ck, err)
	}
	if logs.FilterMessageSnippet("no publisher key").Len() != 0 {
		t.Fatal("warned about a missing key with one")
	}

	// Without a key: one warning, no attestation, no checkpoint.
	logs, _, stop = serve(nil)
	if r := roomtest.ShipRecord(t, nc, roomtest.RecordNamed(&roomtest.Env{T: t, Key: hostKey}, "room:served", "s0")); r.Item.Outcome != room.OutcomeStored {
		t.Fatalf("%+v", r)
	}
	stop()
	if n := logs.FilterMessageSnippet("no publisher key").Len(); n != 1 {
		t.Fatalf("%d warnings about the missing key, want 1", n)
	}
	if m, err := st.GetLastMsgForSubject(context.Background(), room.Subjects{}.Records("room:served")); err != nil || m.Header.Get(checkpoint.AttestationHeader) != "" {
		t.Fatalf("a record appended without a key: %v, header %q", err, m.Header.Get(checkpoint.AttestationHeader))
	}
	if n := count(); n != 2 {
		t.Fatalf("%d checkpoints, want still 2", n)
	}
}

// TestCheckpointerRefusesStuckBatch: a message whose header claims a place
// in a batch it does not follow (a header of message 2 of a batch of 5
// copied onto one message) is refused at once, by the readers' rule, and
// holds nothing back: the gate's record after it is checkpointed. A
// message that opens a batch that never completes (message 0 of 5 copied
// onto the stream's last message) is held only until the checkpointer has
// read the whole stream for a second (an atomic batch is read whole), then
// refused without Stop.
func TestCheckpointerRefusesStuckBatch(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	key := roomtest.NewPublisherKey(t)
	const roomID = "room:stuck"
	ckp, logs := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: key, Every: 1000, Interval: 100 * time.Millisecond})
	gate := roomtest.AttestingGate(e, e.Nc, key, ckp, ingest.GateOptions{})
	es, _ := roomtest.Journal(t, "run-s", "cap-s", 5)
	if r, err := gate.AppendJournal(ctx, roomID, roomtest.Lines(es), nil); err != nil || r.Stored != 5 {
		t.Fatalf("%+v %v", r, err)
	}
	subj := room.Subjects{}
	ckSubj := subj.Checkpoint(roomID)
	roomtest.WaitFor(t, 10*time.Second, "the first checkpoint", func() bool { return e.CountOn(ckSubj) == 1 })
	headers := e.OnSubject(subj.Journal(roomID, events.ChainKey{RunID: "run-s", CapsuleID: "cap-s"}))
	header := headers[2].Header.Get(checkpoint.AttestationHeader)
	if a, err := checkpoint.ParseAttestation(header); err != nil || a.Count != 5 {
		t.Fatalf("entry 2's header %q: %+v %v", header, a, err)
	}
	forge := func(header, data string) {
		t.Helper()
		forged := &nats.Msg{Subject: subj.Records(roomID), Data: []byte(data), Header: nats.Header{}}
		forged.Header.Set(checkpoint.AttestationHeader, header)
		if _, err := e.Js.PublishMsg(ctx, forged); err != nil {
			t.Fatal(err)
		}
	}
	notLeaves := func() int { return logs.FilterMessageSnippet("does not verify is not a leaf").Len() }
	forge(header, `{"forged":true}`)
	// The gate's record (exec index 1) is read after the forged message,
	// which is refused then if not before.
	if r := gate.AppendRecord(ctx, roomtest.RecordNamed(e, roomID, "s0")); r.Item.Outcome != room.OutcomeStored {
		t.Fatalf("%+v", r)
	}
	roomtest.WaitFor(t, 10*time.Second, "a checkpoint of the record", func() bool { return e.CountOn(ckSubj) == 2 })
	rt := roomtest.Rebuild(e, roomID, roomtest.Trusting(t, key))
	if sizes := rt.CheckCheckpoints(t); fmt.Sprint(sizes) != "[5 6]" || len(rt.NotLeaves) != 1 {
		t.Fatalf("sizes %v, not leaves %v; want [5 6] and the forged message", sizes, rt.NotLeaves)
	}
	if n := notLeaves(); n != 1 {
		t.Fatalf("%d logs of the forged message, want 1:\n%v", n, logs.All())
	}
	if f := logs.FilterMessageSnippet("does not verify is not a leaf").All()[0].ContextMap()["error"]; !strings.Contains(fmt.Sprint(f), "the message before it on the stream is not message 1 of that batch") {
		t.Errorf("the forged message's error: %v", f)
	}

	// Message 0 of the batch copied onto the stream's last message: it
	// opens a batch nothing continues.
	forge(headers[0].Header.Get(checkpoint.AttestationHeader), `{"forged":2}`)
	start := time.Now()
	roomtest.WaitFor(t, 10*time.Second, "the stuck batch given up", func() bool { return notLeaves() == 2 })
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Fatalf("the stuck batch was given up %s after it was stored: before the stream was read whole for a second", took)
	}
	if f := logs.FilterMessageSnippet("does not verify is not a leaf").All()[1].ContextMap()["error"]; !strings.Contains(fmt.Sprint(f), "only messages 0 to 0 of it were read") {
		t.Errorf("the stuck message's error: %v", f)
	}
}

// TestCheckpointerOrigin: with a deployment origin, checkpoints carry the
// room's origin as origin line and key name (C2SP tlog-checkpoint); they
// extend a room's checkpoints written before (room-id form), and a reader
// pinned to another deployment refuses them.
func TestCheckpointerOrigin(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	key := roomtest.NewPublisherKey(t)
	const roomID = "room:a+b/c"
	const origin = "evidence.example.org/roompub"
	ckSubj := room.Subjects{}.Checkpoint(roomID)
	es, _ := roomtest.Journal(t, "run-o", "cap-o", 20)

	old, _ := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: key, Every: 10, Interval: time.Hour})
	gate := roomtest.AttestingGate(e, e.Nc, key, old, ingest.GateOptions{})
	if r, err := gate.AppendJournal(ctx, roomID, roomtest.Lines(es[:10]), nil); err != nil || r.Stored != 10 {
		t.Fatalf("%+v %v", r, err)
	}
	roomtest.WaitFor(t, 10*time.Second, "the room-id form checkpoint", func() bool { return e.CountOn(ckSubj) == 1 })
	if err := old.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	ckp, _ := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: key, Origin: origin, Every: 10, Interval: time.Hour})
	gate = roomtest.AttestingGate(e, e.Connect(), key, ckp, ingest.GateOptions{})
	if r, err := gate.AppendJournal(ctx, roomID, roomtest.Lines(es[10:]), nil); err != nil || r.Stored != 10 {
		t.Fatalf("%+v %v", r, err)
	}
	roomtest.WaitFor(t, 10*time.Second, "the origin form checkpoint", func() bool { return e.CountOn(ckSubj) == 2 })

	trust := roomtest.Trusting(t, key)
	pinned, err := trust.WithOrigin(origin)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range []*checkpoint.Trust{trust, pinned} {
		rt := roomtest.Rebuild(e, roomID, tr)
		if sizes := rt.CheckCheckpoints(t); fmt.Sprint(sizes) != "[10 20]" {
			t.Fatalf("sizes %v, want [10 20]", sizes)
		}
		wantOrigins := []string{roomID, origin + "/room/a%2Bb%2Fc"}
		for i, ck := range rt.Checkpoints {
			if ck.Origin != wantOrigins[i] || ck.Room != roomID || ck.Signer != key.NodeID() {
				t.Fatalf("checkpoint %d: origin %q room %q signer %q", i, ck.Origin, ck.Room, ck.Signer)
			}
		}
		last := rt.Checkpoints[1].Note
		if !bytes.Contains(last, []byte("\n\n— "+wantOrigins[1]+" ")) {
			t.Fatalf("key name is not the origin:\n%s", last)
		}
	}
	other, _ := trust.WithOrigin("other.example.org/roompub")
	msgs := e.OnSubject(ckSubj)
	if _, err := checkpoint.Parse(msgs[1].Data, roomID, other); !errors.Is(err, checkpoint.ErrBadCheckpoint) || !strings.Contains(err.Error(), "is of deployment") {
		t.Fatalf("another deployment's reader: %v", err)
	}
}

// TestCheckpointerBlock: a room Block names (serve's survey found the
// store lost leaves its tree holds) gets no checkpoint, not even a final
// one, and counts in roompub_checkpoint_rooms_blocked; another room goes
// on.
func TestCheckpointerBlock(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	key := roomtest.NewPublisherKey(t)
	reg := prometheus.NewRegistry()
	ckp, logs := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: key, Every: 1000, Interval: time.Hour, Registerer: reg})
	gate := roomtest.AttestingGate(e, e.Nc, key, ckp, ingest.GateOptions{})
	ckp.Block("room:lost", "its latest checkpoint covers 250 leaves, the stream holds 200")
	ckp.Block("room:lost", "again") // counted once
	for _, id := range []string{"room:lost", "room:fine"} {
		_, body := roomtest.Journal(t, "run-"+id[5:], "cap", 5)
		if r, err := gate.AppendJournal(ctx, id, body, nil); err != nil || r.Stored != 5 {
			t.Fatalf("%s: %+v %v", id, r, err)
		}
	}
	if err := ckp.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n, m := e.CountOn(room.Subjects{}.Checkpoint("room:lost")), e.CountOn(room.Subjects{}.Checkpoint("room:fine")); n != 0 || m != 1 {
		t.Fatalf("checkpoints: %d of the blocked room, %d of the other; want 0 and 1", n, m)
	}
	if v, ok := roomtest.MetricValue(t, reg, "roompub_checkpoint_rooms_blocked"); !ok || v != 1 {
		t.Fatalf("roompub_checkpoint_rooms_blocked %v (present %v), want 1", v, ok)
	}
	if l := logs.FilterMessageSnippet("the store lost leaves of the room").All(); len(l) != 1 || l[0].ContextMap()["room"] != "room:lost" {
		t.Fatalf("logs: %v", l)
	}
}

// TestCheckpointerFinalLeaseHeldWarns: a checkpointer stopped while a
// dead publisher still holds a room's lease writes no final checkpoint of
// the room (the holder's, until it lapses) and says so in one warning
// naming the room; with no lease in the way, Stop warns of nothing.
func TestCheckpointerFinalLeaseHeldWarns(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	keyA, keyB := roomtest.NewPublisherKey(t), roomtest.NewPublisherKey(t)
	const roomID = "room:held"
	opts := func(k, other *events.HostKey) checkpointer.Options {
		return checkpointer.Options{Key: k, TrustedPublishers: []string{other.NodeID()}, Every: 5, Interval: 100 * time.Millisecond, LeaseTTL: time.Minute}
	}
	trust := roomtest.Trusting(t, keyA, keyB)
	ncA := e.Connect()
	ckA, _ := roomtest.StartCheckpointer(t, ncA, opts(keyA, keyB))
	gateA := roomtest.AttestingGate(e, e.Connect(), keyA, ckA, ingest.GateOptions{TrustedPublishers: []string{keyB.NodeID()}})
	es, _ := roomtest.Journal(t, "run-h", "cap-h", 20)
	if r, err := gateA.AppendJournal(ctx, roomID, roomtest.Lines(es[:10]), nil); err != nil || r.Stored != 10 {
		t.Fatalf("%+v %v", r, err)
	}
	roomtest.WaitFor(t, 10*time.Second, "A's checkpoint of size 10", func() bool {
		cks := roomtest.Rebuild(e, roomID, trust).Checkpoints
		return len(cks) > 0 && cks[len(cks)-1].Size == 10
	})
	ncA.Close() // A dies holding the lease
	ckB, logsB := roomtest.StartCheckpointer(t, e.Connect(), opts(keyB, keyA))
	gateB := roomtest.AttestingGate(e, e.Connect(), keyB, ckB, ingest.GateOptions{TrustedPublishers: []string{keyA.NodeID()}})
	if r, err := gateB.AppendJournal(ctx, roomID, roomtest.Lines(es[10:]), nil); err != nil || r.Stored != 10 {
		t.Fatalf("%+v %v", r, err)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := ckB.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	if cks := roomtest.Rebuild(e, roomID, trust).Checkpoints; cks[len(cks)-1].Size != 10 {
		t.Fatalf("the last checkpoint is of size %d: B wrote on A's lease", cks[len(cks)-1].Size)
	}
	warned := logsB.FilterMessageSnippet("no final checkpoint for rooms whose lease another publisher holds").All()
	if len(warned) != 1 {
		t.Fatalf("%d warnings of rooms left without a final checkpoint, want 1", len(warned))
	}
	f := warned[0].ContextMap()
	if f["rooms"] != int64(1) || fmt.Sprint(f["first_rooms"]) != "["+roomID+"]" {
		t.Errorf("warning fields %v", f)
	}

	// Alone, a checkpointer holds its lease, writes the final checkpoint
	// and warns of nothing.
	e2 := roomtest.NewEnv(t)
	ckC, logsC := roomtest.StartCheckpointer(t, e2.Connect(), opts(keyA, keyB))
	gateC := roomtest.AttestingGate(e2, e2.Connect(), keyA, ckC, ingest.GateOptions{})
	if r, err := gateC.AppendJournal(ctx, roomID, roomtest.Lines(es[:3]), nil); err != nil || r.Stored != 3 {
		t.Fatalf("%+v %v", r, err)
	}
	if err := ckC.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	if cks := roomtest.Rebuild(e2, roomID, trust).Checkpoints; len(cks) == 0 || cks[len(cks)-1].Size != 3 {
		t.Fatalf("alone: checkpoints %+v, want the last of size 3", cks)
	}
	if n := len(logsC.FilterMessageSnippet("no final checkpoint").All()); n != 0 {
		t.Fatalf("alone: %d warnings of rooms left without a final checkpoint", n)
	}
	// Each stop says how many final checkpoints it wrote: B none (the
	// room is A's), C the room's.
	for who, l := range map[string]*observer.ObservedLogs{"B": logsB, "C": logsC} {
		written := l.FilterMessage("checkpointer: final checkpoints written").All()
		want := map[string]int64{"B": 0, "C": 1}[who]
		if len(written) != 1 || written[0].ContextMap()["rooms"] != want {
			t.Errorf("%s: final checkpoints logged %v, want one line of %d rooms", who, written, want)
		}
	}
}

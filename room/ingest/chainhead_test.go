package ingest_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
)

// TestGateForgedHeadIsNotTheHead: with a publisher key, a message on a
// chain's subject that no trusted publisher attested is not the chain's
// head (found by the end-to-end tests: a forger who appended the chain's
// true next entry raw made the gate answer "already stored", so the real
// entry was never attested and readers refused the chain's continuation
// forever). The gate decides on the last admitted entry and expects the
// subject's real last sequence: the genuine entry lands after the
// forgeries, attested, and a trusting reader and the checkpointer admit it
// and refuse the forgeries. A gate that starts afresh on that stream sees
// every entry as stored where it is, and one that does not trust the
// publisher of the chain's entries does not take them for its head either.
func TestGateForgedHeadIsNotTheHead(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	pub := roomtest.NewPublisherKey(t)
	const roomID = "room:f"
	ckp, _ := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: pub, Every: 1000, Interval: time.Hour})
	gate := roomtest.AttestingGate(e, e.Nc, pub, ckp, ingest.GateOptions{})

	body, err := os.ReadFile(roomtest.Testdata("samples/capsules/csv-dedupe/journal.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	ls := bytes.SplitAfter(body, []byte("\n"))
	ls = ls[:len(ls)-1] // after the last "\n"
	if len(ls) != 14 {
		t.Fatalf("%d lines, want 14", len(ls))
	}
	first, err := events.ParseEntry(bytes.TrimSuffix(ls[0], []byte("\n")))
	if err != nil {
		t.Fatal(err)
	}
	subj := room.Subjects{}.Journal(roomID, events.ChainKey{RunID: first.RunID(), CapsuleID: first.CapsuleID()})
	if r, err := gate.AppendJournal(ctx, roomID, bytes.Join(ls[:13], nil), nil); err != nil || r.Stored != 13 {
		t.Fatalf("lines 1-13: %+v %v", r, err)
	}
	stored := e.OnSubject(subj)
	line14 := bytes.TrimSuffix(ls[13], []byte("\n"))
	// The chain's true next entry, raw, and again with the attestation of
	// entry 12 (the last of a batch of 13) copied onto it.
	raw := roomtest.PublishRaw(t, e.Js, subj, line14)
	copied := &nats.Msg{Subject: subj, Data: line14, Header: nats.Header{}}
	copied.Header.Set(checkpoint.AttestationHeader, stored[12].Header.Get(checkpoint.AttestationHeader))
	ack, err := e.Js.PublishMsg(ctx, copied)
	if err != nil {
		t.Fatal(err)
	}
	if raw != 14 || ack.Sequence != 15 {
		t.Fatalf("forgeries at stream seqs %d and %d, want 14 and 15", raw, ack.Sequence)
	}

	// The whole capsule again, as `publisher journal` sends it: 13 already
	// stored, line 14 stored now, after the forgeries.
	r, err := gate.AppendJournal(ctx, roomID, body, nil)
	if err != nil || r.Stored != 1 || r.Dupes != 13 {
		t.Fatalf("the whole capsule: %+v %v", r, err)
	}
	for i, it := range r.Items[:13] {
		if it.Outcome != room.OutcomeDuplicate || it.StreamSeq != uint64(i+1) {
			t.Fatalf("line %d: %+v, want a duplicate at stream seq %d", i+1, it, i+1)
		}
	}
	if it := r.Items[13]; it.Outcome != room.OutcomeStored || it.StreamSeq != 16 || r.Head.StreamSeq != 16 || r.Head.Next != 14 {
		t.Fatalf("line 14: %+v, head %+v; want stored at stream seq 16, next 14", it, r.Head)
	}
	genuine := e.OnSubject(subj)[15]
	a, err := checkpoint.ParseAttestation(genuine.Header.Get(checkpoint.AttestationHeader))
	if err != nil || a.Signer != pub.NodeID() || a.Count != 1 {
		t.Fatalf("entry 13 at stream seq 16: attestation %+v %v", a, err)
	}
	if _, err := roomtest.Trusting(t, pub).VerifyAttestation(genuine.Header.Get(checkpoint.AttestationHeader), roomID, subj,
		checkpoint.JournalPosition(13), checkpoint.ContentHash(line14)); err != nil {
		t.Fatalf("entry 13's attestation: %v", err)
	}

	// The checkpointer's tree and a trusting audit admit the 14 entries and
	// nothing else.
	if err := ckp.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	rt := roomtest.Rebuild(e, roomID, roomtest.Trusting(t, pub))
	if sizes := rt.CheckCheckpoints(t); fmt.Sprint(sizes) != "[14]" || fmt.Sprint(rt.NotLeaves) != "[14 15]" {
		t.Fatalf("checkpoints %v, not leaves %v; want [14] and the forgeries [14 15]", sizes, rt.NotLeaves)
	}
	rep, err := reader.Audit(ctx, e.Js, reader.AuditOptions{Validator: e.V, Trust: roomtest.Trusting(t, pub)})
	if err != nil {
		t.Fatal(err)
	}
	if got := roomtest.Mismatches(t, rep.Violations); !slices.Equal(got, []uint64{14, 15}) || len(rep.Violations) != 2 || rep.Totals.Entries != 14 {
		t.Fatalf("audit: %d entries, violations %v; want 14 and checkpoint_mismatch at 14 and 15", rep.Totals.Entries, rep.Violations)
	}

	// A gate that starts afresh: every line is stored where it is (only
	// admitted entries take a chain position).
	fresh := roomtest.AttestingGate(e, e.Connect(), pub, nil, ingest.GateOptions{})
	r, err = fresh.AppendJournal(ctx, roomID, body, nil)
	if err != nil || r.Dupes != 14 || r.Items[13].StreamSeq != 16 || r.Items[12].StreamSeq != 13 {
		t.Fatalf("a fresh gate, the whole capsule: %+v %v", r, err)
	}
	if h, err := fresh.Head(ctx, events.ChainKey{RunID: first.RunID(), CapsuleID: first.CapsuleID()}); err != nil || h.Next != 14 || h.StreamSeq != 16 {
		t.Fatalf("a fresh gate's head: %+v %v", h, err)
	}
	// A gate whose key is not the chain's publisher's and that does not
	// trust it sees no admitted entry: the chain is empty to it.
	stranger := roomtest.AttestingGate(e, e.Connect(), roomtest.NewPublisherKey(t), nil, ingest.GateOptions{})
	if h, err := stranger.Head(ctx, events.ChainKey{RunID: first.RunID(), CapsuleID: first.CapsuleID()}); err != nil || h.Next != 0 || h.RoomID != "" {
		t.Fatalf("a gate that does not trust the publisher: head %+v %v", h, err)
	}
	// Trusting it (serve --trusted-publisher), it sees the chain.
	trusts := roomtest.AttestingGate(e, e.Connect(), roomtest.NewPublisherKey(t), nil, ingest.GateOptions{TrustedPublishers: []string{pub.NodeID()}})
	if h, err := trusts.Head(ctx, events.ChainKey{RunID: first.RunID(), CapsuleID: first.CapsuleID()}); err != nil || h.Next != 14 || h.StreamSeq != 16 {
		t.Fatalf("a gate that trusts the publisher: head %+v %v", h, err)
	}
}

package checkpointer_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap/zaptest/observer"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// TestCheckpointerOwnBatchReadPartly: the gate announces a batch of 3 and
// only its first two messages are stored (a store that filled mid-batch),
// with no acknowledgement: the checkpointer reads them from the stream and,
// as the readers do, refuses them as an incomplete batch although the
// gate announced them (they were leaves, one by one). The same batch
// stored whole later (the same statements signed again: the same
// signature) holds messages 0 and 1 whose announcements were taken and
// message 2 whose was not: its signature is checked, the position of the
// announced message worked out from its entry, and it is admitted. The
// checkpointer's tree is an independent rebuild's.
func TestCheckpointerOwnBatchReadPartly(t *testing.T) {
	const roomID = "room:own-partly"
	e, key, ckp, logs, a := ownRoom(t, roomID)
	es, _ := roomtest.Journal(t, "run-o", "cap-o", 4)
	ms := []roomtest.AttMsg{a.EntryMsg(es[0]), a.EntryMsg(es[1]), a.EntryMsg(es[2])}
	hs := a.Sign(ms)
	ckp.Expect(announced(ms, hs))
	part := a.Append(ms[:2], hs[:2])
	whole := a.Append(ms, hs)
	for _, m := range ms {
		a.Leaf(checkpoint.LeafHash(roomID, m.Subject, checkpoint.ContentHash(m.Data)))
	}
	a.Entry(es[3])
	subj := a.Subj.Journal(roomID, events.ChainKey{RunID: "run-o", CapsuleID: "cap-o"})
	checkRoom(t, e, ckp, roomID, roomtest.Trusting(t, key), 4, 0, -1)
	rt := roomtest.Rebuild(e, roomID, roomtest.Trusting(t, key))
	if len(rt.NotLeaves) != 2 || rt.NotLeaves[0] != part[0] || rt.NotLeaves[1] != part[1] || rt.Tree.Root() != a.Tree.Root() {
		t.Fatalf("the independent rebuild: no leaves %v, want %v", rt.NotLeaves, part)
	}
	var notLeaves []uint64
	for _, l := range logs.FilterMessageSnippet("is not a leaf").All() {
		m := l.ContextMap()
		notLeaves = append(notLeaves, m["stream_seq"].(uint64))
		if m["subject"] != subj || !strings.Contains(m["error"].(string), "incomplete batch: message ") ||
			!strings.Contains(m["error"].(string), "is not message 2 of it") {
			t.Errorf("no leaf: %v", m)
		}
	}
	if len(notLeaves) != 2 || notLeaves[0] != part[0] || notLeaves[1] != part[1] || whole[0] != part[1]+1 {
		t.Fatalf("no leaves %v, want the part %v", notLeaves, part)
	}
}

// announced is ms with headers hs as the gate announces one batch to its
// attestation sink.
func announced(ms []roomtest.AttMsg, hs []string) []room.StoredMsg {
	out := make([]room.StoredMsg, len(ms))
	for i, m := range ms {
		out[i] = room.StoredMsg{Subject: m.Subject, Header: hs[i], Content: checkpoint.ContentHash(m.Data), Position: m.Position}
	}
	return out
}

// TestCheckpointerOwnBatchesNotRecombined: two batches the gate announced
// and the server refused (their announcements still held), and a batch
// stored around the gate of message 0 of one and the signed message 1 of
// the other. In the compact form the unsigned header of message 0 is the
// same in both, and each message is one the gate announced, so only the
// signature each was announced with tells the batches apart: the
// checkpointer verifies the mixed batch's signature and refuses it, as
// the readers do (in the every-message form the headers tell it), and
// signs no checkpoint of it.
func TestCheckpointerOwnBatchesNotRecombined(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    checkpoint.Form
		why  string // the refusal of each message of the mixed batch
	}{
		// Alike headers: one batch, whose signature fails.
		{"compact", checkpoint.FormCompact, "does not verify for this batch of 2"},
		// Each header names its batch's signature: two broken batches.
		{"every message", checkpoint.FormEveryMessage, "incomplete batch: message "},
	} {
		f := tc.f
		t.Run(tc.name, func(t *testing.T) {
			const roomID = "room:recombined"
			e, key, ckp, logs, a := ownRoom(t, roomID)
			es, _ := roomtest.Journal(t, "run-r", "cap-r", 5)
			b1 := []roomtest.AttMsg{a.EntryMsg(es[0]), a.EntryMsg(es[1])}
			b2 := []roomtest.AttMsg{a.EntryMsg(es[2]), a.EntryMsg(es[3])}
			h1, err := checkpoint.Reform(a.Sign(b1), f)
			if err != nil {
				t.Fatal(err)
			}
			h2, err := checkpoint.Reform(a.Sign(b2), f)
			if err != nil {
				t.Fatal(err)
			}
			ckp.Expect(announced(b1, h1))
			ckp.Expect(announced(b2, h2))
			ckp.Unstored(h1[1])
			ckp.Unstored(h2[1])
			mixed := a.Append([]roomtest.AttMsg{b2[0], b1[1]}, []string{h2[0], h1[1]})
			a.Entry(es[4]) // a genuine batch after it, for a checkpoint to cover
			checkRoom(t, e, ckp, roomID, roomtest.Trusting(t, key), 1, 0, -1)
			rt := roomtest.Rebuild(e, roomID, roomtest.Trusting(t, key))
			if fmt.Sprint(rt.NotLeaves) != fmt.Sprint(mixed) || rt.Tree.Size() != 1 || rt.Tree.Root() != a.Tree.Root() {
				t.Fatalf("the independent rebuild: %d leaves, no leaves %v; want 1 and %v", rt.Tree.Size(), rt.NotLeaves, mixed)
			}
			var refused []uint64
			for _, l := range logs.FilterMessageSnippet("is not a leaf").All() {
				m := l.ContextMap()
				refused = append(refused, m["stream_seq"].(uint64))
				if !strings.Contains(m["error"].(string), tc.why) {
					t.Errorf("no leaf: %v", m)
				}
			}
			if fmt.Sprint(refused) != fmt.Sprint(mixed) {
				t.Fatalf("the checkpointer refused %v, want the mixed batch %v", refused, mixed)
			}
		})
	}
}

// TestCheckpointerOwnMessageAtAnotherPosition: an attestation signs the
// message's position too, which its subject, content and header do not
// show: a journal entry's owner (its Roompub-Owner header) and a record's
// place on the exec subject. A copy of a message the gate announced (and
// the server refused), stored around the gate at another position, is
// not vouched for: its signature is checked, and fails, so the
// checkpointer's tree is the readers' (found by a fresh reviewer: the
// copy was admitted unchecked, and an audit took it on the checkpoint's
// word, a chain's first entry under another owner among them).
func TestCheckpointerOwnMessageAtAnotherPosition(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store func(t *testing.T, e *roomtest.Env, a *roomtest.Attestor, ckp *checkpointer.Checkpointer) uint64 // the copy's stream seq
	}{
		{"a journal entry under another owner", func(t *testing.T, e *roomtest.Env, a *roomtest.Attestor, ckp *checkpointer.Checkpointer) uint64 {
			es, _ := roomtest.Journal(t, "run-p", "cap-p", 1)
			ms := []roomtest.AttMsg{a.EntryMsg(es[0])}
			hs := a.Sign(ms)
			ckp.Expect(announced(ms, hs))
			ckp.Unstored(hs[0])
			m := nats.NewMsg(ms[0].Subject)
			m.Data = ms[0].Data
			m.Header.Set(checkpoint.AttestationHeader, hs[0])
			m.Header.Set(room.HeaderOwner, "someone-else")
			ack, err := e.Js.PublishMsg(t.Context(), m)
			if err != nil {
				t.Fatal(err)
			}
			return ack.Sequence
		}},
		{"a record at another place", func(t *testing.T, e *roomtest.Env, a *roomtest.Attestor, ckp *checkpointer.Checkpointer) uint64 {
			rm := roomtest.AttMsg{Subject: a.Subj.Records(a.Room), Data: roomtest.RecordNamed(e, a.Room, "r0"), Position: checkpoint.RecordPosition(0)}
			hs := a.Sign([]roomtest.AttMsg{rm})
			ckp.Expect(announced([]roomtest.AttMsg{rm}, hs))
			ckp.Unstored(hs[0])
			// An unattested record first: the copy lands at index 1.
			a.Publish(rm.Subject, roomtest.RecordNamed(e, a.Room, "other"), "")
			return a.Publish(rm.Subject, rm.Data, hs[0])
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const roomID = "room:own-position"
			e, key, ckp, logs, a := ownRoom(t, roomID)
			copied := tc.store(t, e, a, ckp)
			es, _ := roomtest.Journal(t, "run-q", "cap-q", 1)
			a.Entry(es[0]) // a genuine message after it, for a checkpoint to cover
			checkRoom(t, e, ckp, roomID, roomtest.Trusting(t, key), 1, 0, -1)
			var refused []uint64
			for _, l := range logs.FilterMessageSnippet("is not a leaf").All() {
				m := l.ContextMap()
				if seq := m["stream_seq"].(uint64); seq == copied {
					refused = append(refused, seq)
					if !strings.Contains(m["error"].(string), "does not verify") {
						t.Errorf("the copy: %v", m)
					}
				}
			}
			if len(refused) != 1 {
				t.Fatalf("the checkpointer did not refuse the copy at stream seq %d", copied)
			}
		})
	}
}

// ownRoom starts a server with a room stream, a checkpointer with a
// publisher key (its gap wait short), and an attestor of roomID with that
// key: the gate's side of the checkpointer's own messages.
func ownRoom(t *testing.T, roomID string) (*roomtest.Env, *events.HostKey, *checkpointer.Checkpointer, *observer.ObservedLogs, *roomtest.Attestor) {
	t.Helper()
	e := roomtest.NewEnv(t)
	key := roomtest.NewPublisherKey(t)
	ckp, logs := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: key, Every: 1000, Interval: time.Hour})
	ckp.SetGapWait(10 * time.Millisecond)
	return e, key, ckp, logs, roomtest.NewAttestor(t, e.Js, key, roomID)
}

// TestCheckpointerOwnBatchByAnotherKey: a gate that signs with a key the
// checkpointer does not trust (a library caller wiring one key's gate to
// another's checkpointer) announces and stores a batch: it is neither
// taken from memory nor vouched for, but read and refused as the readers
// refuse it.
func TestCheckpointerOwnBatchByAnotherKey(t *testing.T) {
	const roomID = "room:own-other-key"
	e, key, ckp, logs, a := ownRoom(t, roomID)
	other := roomtest.NewAttestor(t, e.Js, roomtest.NewPublisherKey(t), roomID)
	es, _ := roomtest.Journal(t, "run-k", "cap-k", 3)
	ms := []roomtest.AttMsg{other.EntryMsg(es[0]), other.EntryMsg(es[1])}
	hs := other.Sign(ms)
	ckp.Expect(announced(ms, hs))
	seqs := other.Append(ms, hs)
	ckp.Stored(seqs[0], announced(ms, hs))
	a.Entry(es[2]) // the checkpointer's own key's, for a checkpoint to cover
	checkRoom(t, e, ckp, roomID, roomtest.Trusting(t, key), 1, 0, -1)
	var refused []uint64
	for _, l := range logs.FilterMessageSnippet("is not a leaf").All() {
		m := l.ContextMap()
		refused = append(refused, m["stream_seq"].(uint64))
		if !strings.Contains(m["error"].(string), "untrusted publisher") {
			t.Errorf("no leaf: %v", m)
		}
	}
	if fmt.Sprint(refused) != fmt.Sprint(seqs) {
		t.Fatalf("refused %v, want the other key's batch %v", refused, seqs)
	}
}

package room_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/note"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
)

// Issue 9 on the read side, against a real embedded server: messages are
// written straight into the stream with the attestations and checkpoints a
// publisher would write (checkpoint.Attest, checkpoint.Sign over a
// checkpoint.Tree kept here), and forged ones beside them.

// attestor writes one room's messages as an attesting publisher would.
type attestor struct {
	t      testing.TB
	js     jetstream.JetStream
	key    *events.HostKey
	signer note.Signer
	room   string
	subj   room.Subjects
	tree   *checkpoint.Tree // the publisher's: admitted messages only
	execs  uint64           // messages on the room's exec subject
}

func newAttestor(t testing.TB, js jetstream.JetStream, key *events.HostKey, roomID string) *attestor {
	t.Helper()
	s, err := checkpoint.NewNoteSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	return &attestor{t: t, js: js, key: key, signer: s, room: roomID, tree: checkpoint.NewTree()}
}

// publish appends data on subject with the attestation header (none when
// att is "") and returns its stream sequence.
func (a *attestor) publish(subject string, data []byte, att string) uint64 {
	a.t.Helper()
	m := nats.NewMsg(subject)
	m.Data = data
	if att != "" {
		m.Header.Set(checkpoint.AttestationHeader, att)
	}
	ack, err := a.js.PublishMsg(a.t.Context(), m)
	if err != nil {
		a.t.Fatal(err)
	}
	return ack.Sequence
}

// entry appends e, attested, as the publisher admits it.
func (a *attestor) entry(e *events.Entry) uint64 {
	a.t.Helper()
	subject := a.subj.Journal(a.room, events.ChainKey{RunID: e.RunID(), CapsuleID: e.CapsuleID()})
	pos, _ := e.Seq()
	c := checkpoint.ContentHash(e.Canonical())
	a.tree.Append(checkpoint.LeafHash(a.room, subject, c))
	return a.publish(subject, e.Canonical(), checkpoint.Attest(a.key, a.room, subject, checkpoint.JournalPosition(pos), c))
}

// record appends rec, attested, as the publisher admits it.
func (a *attestor) record(rec *events.Record) uint64 {
	a.t.Helper()
	subject := a.subj.Records(a.room)
	c := checkpoint.ContentHash(rec.Canonical())
	a.tree.Append(checkpoint.LeafHash(a.room, subject, c))
	att := checkpoint.Attest(a.key, a.room, subject, checkpoint.RecordPosition(a.execs), c)
	a.execs++
	return a.publish(subject, rec.Canonical(), att)
}

// forgedEntry appends e with the attestation header att (not a leaf of
// the publisher's tree).
func (a *attestor) forgedEntry(e *events.Entry, att string) uint64 {
	a.t.Helper()
	return a.publish(a.subj.Journal(a.room, events.ChainKey{RunID: e.RunID(), CapsuleID: e.CapsuleID()}), e.Canonical(), att)
}

// checkpoint signs and appends the publisher's checkpoint at its tree's size.
func (a *attestor) checkpoint() uint64 {
	a.t.Helper()
	return a.checkpointOf(a.tree.Size(), a.tree.Root(), a.signer)
}

// checkpointOf signs and appends any checkpoint of the room.
func (a *attestor) checkpointOf(size uint64, root [32]byte, s note.Signer) uint64 {
	a.t.Helper()
	return a.publish(a.subj.Checkpoint(a.room), a.note(size, root, s), "")
}

func (a *attestor) note(size uint64, root [32]byte, s note.Signer) []byte {
	a.t.Helper()
	n, err := checkpoint.Sign(s, a.room, size, root)
	if err != nil {
		a.t.Fatal(err)
	}
	return n
}

// badAttestation is a well-formed header naming key whose signature is
// not over the message it is on.
func badAttestation(key *events.HostKey) string {
	return key.NodeID() + " " + base64.RawURLEncoding.EncodeToString(make([]byte, ed25519.SignatureSize))
}

func trusting(t testing.TB, keys ...*events.HostKey) *checkpoint.Trust {
	t.Helper()
	var ids []string
	for _, k := range keys {
		ids = append(ids, k.NodeID())
	}
	tr, err := checkpoint.NewTrust(ids...)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// mismatches returns the stream sequences of the checkpoint_mismatch
// set-asides, checking their code and that each names its sequence.
func mismatches(t testing.TB, asides []room.SetAside) []uint64 {
	t.Helper()
	var out []uint64
	for _, a := range asides {
		if a.Code != events.CheckpointMismatch {
			continue
		}
		if len(a.Problems) != 1 || a.Problems[0].At.Seq != a.Seq {
			t.Errorf("set-aside %v: problems %+v", a.Error(), a.Problems)
		}
		out = append(out, a.Seq)
	}
	return out
}

func checkFacts(t testing.TB, got room.RoomCheckpoints, want room.RoomCheckpoints) {
	t.Helper()
	g, w := got, want
	g.Latest, w.Latest, g.Stored, w.Stored, g.External, w.External = nil, nil, nil, nil, nil, nil
	if fmt.Sprintf("%+v", g) != fmt.Sprintf("%+v", w) {
		t.Errorf("facts %+v\nwant  %+v", g, w)
	}
	if (got.Latest == nil) != (want.Latest == nil) || got.Latest != nil && *got.Latest != *want.Latest {
		t.Errorf("latest checkpoint %+v, want %+v", got.Latest, want.Latest)
	}
}

const attRoom = "room:attested"

// forgedStream writes the scenario of the forged continuation: a chain of
// 12 entries written by the publisher with checkpoints at 5 and 11 and 12,
// two forged continuations between, one without an attestation and one
// with a header copied from a genuine message (a trusted key, a signature
// over something else), and a record. It returns the stream sequences of
// the forged messages and of the messages a reader must serve.
func forgedStream(t *testing.T, e *env, pub *events.HostKey) (a *attestor, forged, served []uint64) {
	t.Helper()
	a = newAttestor(t, e.js, pub, attRoom)
	es, _ := journal(t, "run-f", "cap-f", 12)
	for _, en := range es[:5] {
		served = append(served, a.entry(en))
	}
	a.checkpoint() // size 5
	for _, en := range es[5:10] {
		served = append(served, a.entry(en))
	}
	// A sound continuation (entry 10), written by someone without the key.
	forged = append(forged, a.forgedEntry(es[10], ""))
	// Another sound entry 10 with a trusted key's name and a signature
	// over something else: the optimistic path admits it until the
	// checkpoint at 11 does not match.
	fork := forkOf(t, es[10])
	forged = append(forged, a.forgedEntry(fork, badAttestation(pub)))
	served = append(served, a.entry(es[10]))
	served = append(served, a.record(recordIn(t, e.key, attRoom, "attested-1", nil)))
	a.checkpoint() // size 12
	served = append(served, a.entry(es[11]))
	a.checkpoint() // size 13
	return a, forged, served
}

// TestAttestedForgedContinuationAudit: a forged continuation written
// straight into the stream is refused by audit as checkpoint_mismatch,
// with its stream sequence, whether it has no attestation or a bad one
// that the optimistic path first took in; the checkpoint that did not
// match is accepted once the bad leaf is out; every genuine message is
// served and the chain stays whole.
func TestAttestedForgedContinuationAudit(t *testing.T) {
	e := newEnv(t)
	pub := newHostKey(t)
	a, forged, served := forgedStream(t, e, pub)
	var evs []uint64
	rep, err := room.Audit(t.Context(), e.js, room.AuditOptions{Validator: e.v, Trust: trusting(t, pub), OnEvent: func(ev *room.Event) { evs = append(evs, ev.Seq) }})
	if err != nil {
		t.Fatal(err)
	}
	if got := mismatches(t, rep.Violations); !slices.Equal(got, forged) || len(rep.Violations) != 2 {
		t.Errorf("checkpoint_mismatch at %v, want %v (violations %v)", got, forged, rep.Violations)
	}
	if !strings.Contains(rep.Violations[0].Reason, "no Roompub-Attestation header") || !strings.Contains(rep.Violations[1].Reason, "bad attestation") {
		t.Errorf("reasons %q, %q", rep.Violations[0].Reason, rep.Violations[1].Reason)
	}
	if !slices.Equal(evs, served) {
		t.Errorf("served %v, want %v", evs, served)
	}
	if len(rep.Chains) != 1 || rep.Chains[0].Verdict != "ok" || rep.Chains[0].Entries != 12 {
		t.Errorf("chains %+v", rep.Chains)
	}
	if !rep.Attestation.Checked || !slices.Equal(rep.Attestation.TrustedPublishers, []string{pub.NodeID()}) || rep.Totals.Checkpoints != 3 {
		t.Errorf("attestation %+v, %d checkpoints", rep.Attestation, rep.Totals.Checkpoints)
	}
	if len(rep.Checkpoints) != 1 {
		t.Fatalf("checkpoint facts %+v", rep.Checkpoints)
	}
	f := rep.Checkpoints[0]
	// The bad attestation was found when the checkpoint at size 12 did not
	// match: the pending attestations since the one at 5 were verified
	// (the 5 entries, the forged one, the genuine entry and the record: 8).
	checkFacts(t, f, room.RoomCheckpoints{RoomID: attRoom, Admitted: 13, Checkpoints: 3, Covered: 13, Tail: 0,
		AttestationsVerified: 8, AdmittedByCheckpoint: 6,
		Latest: &room.CheckpointFact{Size: 13, Root: fmt.Sprintf("%x", a.tree.Root()), Signer: pub.NodeID(), Seq: served[len(served)-1] + 1}})
	if rep.Clean() {
		t.Error("an audit with forged messages is clean")
	}

	// Without trusted keys: nothing is checked, the report says so, and
	// the first forged entry (a sound continuation) is served.
	evs = nil
	rep, err = room.Audit(t.Context(), e.js, room.AuditOptions{Validator: e.v, OnEvent: func(ev *room.Event) { evs = append(evs, ev.Seq) }})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Attestation.Checked || rep.Attestation.Why == "" || rep.Checkpoints != nil || !slices.Contains(evs, forged[0]) {
		t.Errorf("untrusting audit: %+v, served %v", rep.Attestation, evs)
	}
}

// TestAttestedForgedContinuationFollow: follow never hands out a forged
// message, live (every attestation verified) and after a restart (the
// rebuild relies on checkpoints), and sets it aside as checkpoint_mismatch.
func TestAttestedForgedContinuationFollow(t *testing.T) {
	e := newEnv(t)
	pub := newHostKey(t)
	a, forged, served := forgedStream(t, e, pub)
	o := room.FollowOptions{Durable: "solver", Validator: e.v, Trust: trusting(t, pub), Rooms: []string{attRoom}}
	f := startFollow(t, e.js, o, nil)
	f.waitSeen(t, len(served)+len(forged))
	if got := f.eventSeqs(); !slices.Equal(got, served) {
		t.Errorf("served %v, want %v", got, served)
	}
	if got := mismatches(t, f.asides); !slices.Equal(got, forged) || len(f.asides) != 2 {
		t.Errorf("set aside %v, want %v", f.asides, forged)
	}
	if err := f.stop(t); err != nil {
		t.Fatal(err)
	}

	// A restart rebuilds from the stream; then a forged continuation of
	// the chain (entry 12, no attestation) and a genuine one arrive live.
	es, _ := journal(t, "run-f", "cap-f", 14)
	bad := a.forgedEntry(es[12], badAttestation(pub))
	good := a.entry(es[12])
	f = startFollow(t, e.js, o, nil)
	f.waitSeen(t, 2)
	if got := f.eventSeqs(); !slices.Equal(got, []uint64{good}) {
		t.Errorf("after restart served %v, want %v", got, []uint64{good})
	}
	if got := mismatches(t, f.asides); !slices.Equal(got, []uint64{bad}) {
		t.Errorf("after restart set aside %v", f.asides)
	}
}

// TestAttestedOptimisticCount: with checkpoints covering the messages,
// the optimistic path verifies no signature of theirs, only those of the
// uncovered tail; a bad attestation that no checkpoint covers is still
// caught.
func TestAttestedOptimisticCount(t *testing.T) {
	e := newEnv(t)
	pub := newHostKey(t)
	a := newAttestor(t, e.js, pub, attRoom)
	es, _ := journal(t, "run-o", "cap-o", 300)
	for i, en := range es[:295] {
		a.entry(en)
		if (i+1)%50 == 0 {
			a.checkpoint()
		}
	}
	for _, en := range es[295:298] {
		a.entry(en)
	}
	bad := a.forgedEntry(es[298], badAttestation(pub))
	rep, err := room.Audit(t.Context(), e.js, room.AuditOptions{Validator: e.v, Trust: trusting(t, pub)})
	if err != nil {
		t.Fatal(err)
	}
	if got := mismatches(t, rep.Violations); !slices.Equal(got, []uint64{bad}) || len(rep.Violations) != 1 {
		t.Errorf("violations %v, want checkpoint_mismatch at %d", rep.Violations, bad)
	}
	f := rep.Checkpoints[0]
	// 299 messages with attestations; 49 signatures verified: the 48 of
	// the tail no checkpoint covers and the forged entry's.
	checkFacts(t, f, room.RoomCheckpoints{RoomID: attRoom, Admitted: 298, Checkpoints: 5, Covered: 250, Tail: 48,
		AttestationsVerified: 49, AdmittedByCheckpoint: 250,
		Latest: &room.CheckpointFact{Size: 250, Root: fmt.Sprintf("%x", mustRootAt(t, a.tree, 250)), Signer: pub.NodeID(), Seq: 255}})
	if f.AttestationsVerified >= rep.Totals.Messages {
		t.Errorf("%d signatures verified for %d messages", f.AttestationsVerified, rep.Totals.Messages)
	}
	if rep.Totals.Entries != 298 || rep.Totals.SetAside != 1 {
		t.Errorf("totals %+v", rep.Totals)
	}
}

// TestAttestedCheckpointRefused: every way a checkpoint can fail to cover
// its room as read is refused as checkpoint_mismatch with its stream
// sequence, and the room's later checkpoints are still checked.
func TestAttestedCheckpointRefused(t *testing.T) {
	e := newEnv(t)
	pub, other := newHostKey(t), newHostKey(t)
	a := newAttestor(t, e.js, pub, attRoom)
	es, _ := journal(t, "run-c", "cap-c", 6)
	for _, en := range es[:3] {
		a.entry(en)
	}
	a.checkpoint() // 4: size 3, good
	a.entry(es[3])
	otherTree := checkpoint.NewTree()
	for i := range 4 {
		otherTree.Append([32]byte{byte(i)})
	}
	cases := []struct {
		seq  uint64
		want string
	}{
		{a.checkpointOf(4, otherTree.Root(), a.signer), "root " + fmt.Sprintf("%x", otherTree.Root())},
		{a.checkpointOf(9, a.tree.Root(), a.signer), "it covers 9 messages, but only 4 admitted messages"},
		{a.checkpointOf(2, mustRootAt(t, a.tree, 2), a.signer), "size 2 is smaller than the previous checkpoint's, 3"},
		{a.checkpointOf(4, a.tree.Root(), mustSigner(t, other)), "untrusted publisher"},
		{a.publish(a.subj.Checkpoint(attRoom), []byte("not a note\n"), ""), "bad checkpoint"},
	}
	// Another room's checkpoint on this room's subject.
	n, err := checkpoint.Sign(a.signer, "room:elsewhere", 4, a.tree.Root())
	if err != nil {
		t.Fatal(err)
	}
	cases = append(cases, struct {
		seq  uint64
		want string
	}{a.publish(a.subj.Checkpoint(attRoom), n, ""), `origin "room:elsewhere" is not room "room:attested"`})
	good := a.checkpoint() // size 4
	rep, err := room.Audit(t.Context(), e.js, room.AuditOptions{Validator: e.v, Trust: trusting(t, pub)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Violations) != len(cases) {
		t.Fatalf("violations %v", rep.Violations)
	}
	for i, c := range cases {
		v := rep.Violations[i]
		if v.Seq != c.seq || v.Code != events.CheckpointMismatch || v.Kind != room.KindCheckpoint || !strings.Contains(v.Reason, c.want) {
			t.Errorf("case %d: %s, want stream seq %d and %q", i, v.Error(), c.seq, c.want)
		}
	}
	f := rep.Checkpoints[0]
	checkFacts(t, f, room.RoomCheckpoints{RoomID: attRoom, Admitted: 4, Checkpoints: 2, CheckpointsRefused: 6, Covered: 4,
		AttestationsVerified: 1, AdmittedByCheckpoint: 3,
		Latest: &room.CheckpointFact{Size: 4, Root: fmt.Sprintf("%x", a.tree.Root()), Signer: pub.NodeID(), Seq: good}})
}

func mustRootAt(t testing.TB, tr *checkpoint.Tree, size uint64) [32]byte {
	t.Helper()
	r, err := tr.RootAt(size)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustSigner(t testing.TB, k *events.HostKey) note.Signer {
	t.Helper()
	s, err := checkpoint.NewNoteSigner(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

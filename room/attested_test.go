package room_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
	"golang.org/x/mod/sumdb/note"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// Attestations and checkpoints on the read side, against a real embedded server: messages are
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
	leaves [][32]byte       // its leaves
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
	return a.append([]attMsg{{subject: subject, data: data}}, []string{att})[0]
}

// attMsg is one message as an attesting publisher appends it.
type attMsg struct {
	subject  string
	data     []byte
	position string // checkpoint.JournalPosition or RecordPosition
}

func (a *attestor) entryMsg(e *events.Entry) attMsg {
	pos, _ := e.Seq()
	return attMsg{subject: a.subj.Journal(a.room, events.ChainKey{RunID: e.RunID(), CapsuleID: e.CapsuleID()}), data: e.Canonical(),
		position: checkpoint.JournalPosition(pos)}
}

func (a *attestor) statement(m attMsg) checkpoint.Statement {
	return checkpoint.Statement{Room: a.room, Subject: m.subject, Position: m.position, Content: checkpoint.ContentHash(m.data)}
}

// sign returns the attestation headers of ms as one batch: one signature
// (checkpoint.AttestBatch).
func (a *attestor) sign(ms []attMsg) []string {
	stmts := make([]checkpoint.Statement, len(ms))
	for i, m := range ms {
		stmts[i] = a.statement(m)
	}
	return checkpoint.AttestBatch(a.key, stmts)
}

// append appends ms with headers (none where "") as one atomic batch
// (ADR-50: stored whole, at consecutive sequences) and returns their stream
// sequences.
func (a *attestor) append(ms []attMsg, headers []string) []uint64 {
	a.t.Helper()
	msgs := make([]*nats.Msg, len(ms))
	for i, m := range ms {
		msgs[i] = nats.NewMsg(m.subject)
		msgs[i].Data = m.data
		if headers[i] != "" {
			msgs[i].Header.Set(checkpoint.AttestationHeader, headers[i])
		}
	}
	if len(msgs) == 1 {
		ack, err := a.js.PublishMsg(a.t.Context(), msgs[0])
		if err != nil {
			a.t.Fatal(err)
		}
		return []uint64{ack.Sequence}
	}
	ack, err := jetstreamext.PublishMsgBatch(a.t.Context(), a.js, msgs)
	if err != nil {
		a.t.Fatal(err)
	}
	return roomtest.SeqRange(ack.Sequence-uint64(len(msgs))+1, ack.Sequence)
}

// entries appends es, of one chain, as the publisher admits them: one
// atomic batch attested with one signature, as the gate does.
func (a *attestor) entries(es ...*events.Entry) []uint64 {
	a.t.Helper()
	seqs, _ := a.headers(es...)
	return seqs
}

// entry appends e as a batch of one.
func (a *attestor) entry(e *events.Entry) uint64 {
	a.t.Helper()
	return a.entries(e)[0]
}

// headers appends es as entries does and returns their stream sequences
// and attestation headers (for forgers to copy).
func (a *attestor) headers(es ...*events.Entry) ([]uint64, []string) {
	a.t.Helper()
	ms := make([]attMsg, len(es))
	for i, e := range es {
		ms[i] = a.entryMsg(e)
		a.leaf(checkpoint.LeafHash(a.room, ms[i].subject, checkpoint.ContentHash(ms[i].data)))
	}
	hs := a.sign(ms)
	return a.append(ms, hs), hs
}

// record appends rec, attested (a batch of one), as the publisher admits it.
func (a *attestor) record(rec *events.Record) uint64 {
	a.t.Helper()
	m := attMsg{subject: a.subj.Records(a.room), data: rec.Canonical(), position: checkpoint.RecordPosition(a.execs)}
	a.execs++
	a.leaf(checkpoint.LeafHash(a.room, m.subject, checkpoint.ContentHash(m.data)))
	return a.append([]attMsg{m}, a.sign([]attMsg{m}))[0]
}

func (a *attestor) leaf(h [32]byte) {
	a.tree.Append(h)
	a.leaves = append(a.leaves, h)
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
// 12 entries written by the publisher in atomic batches (5, a checkpoint
// at 5, 1, 4) with checkpoints at 12 and 13 after them, three forged
// continuations between, and a record. The forgeries: entry 10 without an
// attestation; another entry 10 with the header of entry 5, a batch of one
// (a trusted key, a well-formed header, a signature over something else:
// the optimistic path takes it in until the checkpoint at 12 does not
// match); a third entry 10 with the header of entry 7, message 1 of a
// batch of 4, which follows no message 0 of that batch (refused at once).
// It returns the stream sequences of the forged messages and of the
// messages a reader must serve.
func forgedStream(t *testing.T, e *roomtest.Env, pub *events.HostKey) (a *attestor, forged, served []uint64) {
	t.Helper()
	a = newAttestor(t, e.Js, pub, attRoom)
	es, _ := roomtest.Journal(t, "run-f", "cap-f", 12)
	served = append(served, a.entries(es[:5]...)...)
	a.checkpoint() // size 5
	seqs, single := a.headers(es[5])
	served = append(served, seqs...)
	seqs, four := a.headers(es[6:10]...)
	served = append(served, seqs...)
	forged = append(forged, a.forgedEntry(es[10], ""))
	forged = append(forged, a.forgedEntry(roomtest.ForkOf(t, es[10]), single[0]))
	forged = append(forged, a.forgedEntry(roomtest.Rebuilt(t, es[10], map[string]any{"payload": map[string]any{"tool": "bash", "status": "third"}}), four[1]))
	served = append(served, a.entry(es[10]))
	served = append(served, a.record(roomtest.RecordIn(t, e.Key, attRoom, "attested-1", nil)))
	a.checkpoint() // size 12
	served = append(served, a.entry(es[11]))
	a.checkpoint() // size 13
	return a, forged, served
}

// forgedReasons checks the reasons of forgedStream's three forgeries.
func forgedReasons(t *testing.T, pub *events.HostKey, asides []room.SetAside) {
	t.Helper()
	wants := []string{
		"the message has no Roompub-Attestation header",
		"the message was not admitted by a trusted publisher: bad attestation: signature by " + pub.NodeID() + " does not verify",
		"the message was not admitted by a trusted publisher: incomplete batch: message 1 of a batch of 4 by " + pub.NodeID() +
			": the message before it on the stream is not message 0 of that batch",
	}
	if len(asides) != len(wants) {
		t.Fatalf("set aside %v", asides)
	}
	for i, w := range wants {
		if !strings.HasPrefix(asides[i].Reason, w) {
			t.Errorf("forgery %d: %q, want %q", i, asides[i].Reason, w)
		}
	}
}

// TestAttestedForgedContinuationAudit: a forged continuation written
// straight into the stream is refused by audit as checkpoint_mismatch,
// with its stream sequence, whether it has no attestation, a copied one
// that the optimistic path first took in, or a copied one out of its
// batch; the checkpoint that did not match is accepted once the bad leaf
// is out; every genuine message is served and the chain stays whole.
func TestAttestedForgedContinuationAudit(t *testing.T) {
	e := roomtest.NewEnv(t)
	pub := roomtest.NewHostKey(t)
	a, forged, served := forgedStream(t, e, pub)
	var evs []uint64
	rep, err := room.Audit(t.Context(), e.Js, room.AuditOptions{Validator: e.V, Trust: trusting(t, pub), OnEvent: func(ev *room.Event) { evs = append(evs, ev.Seq) }})
	if err != nil {
		t.Fatal(err)
	}
	if got := mismatches(t, rep.Violations); !slices.Equal(got, forged) || len(rep.Violations) != 3 {
		t.Errorf("checkpoint_mismatch at %v, want %v (violations %v)", got, forged, rep.Violations)
	}
	forgedReasons(t, pub, rep.Violations)
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
	// match: the pending batches since the one at 5 were verified, one
	// signature each: entry 5, entries 6-9, the forged entry with entry
	// 5's header, entry 10, the record (5 batches, 8 messages). Entry 11
	// and the first 5 were admitted by checkpoints.
	checkFacts(t, f, room.RoomCheckpoints{RoomID: attRoom, Admitted: 13, Checkpoints: 3, Covered: 13, Tail: 0,
		AttestationsVerified: 8, BatchesVerified: 5, AdmittedByCheckpoint: 6,
		Latest: &room.CheckpointFact{Size: 13, Root: fmt.Sprintf("%x", a.tree.Root()), Signer: pub.NodeID(), Seq: served[len(served)-1] + 1}})
	if rep.Clean() {
		t.Error("an audit with forged messages is clean")
	}

	// Without trusted keys: nothing is checked, the report says so, and
	// the first forged entry (a sound continuation) is served.
	evs = nil
	rep, err = room.Audit(t.Context(), e.Js, room.AuditOptions{Validator: e.V, OnEvent: func(ev *room.Event) { evs = append(evs, ev.Seq) }})
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
	e := roomtest.NewEnv(t)
	pub := roomtest.NewHostKey(t)
	a, forged, served := forgedStream(t, e, pub)
	state := &room.CheckpointState{Dir: t.TempDir()}
	o := room.FollowOptions{Durable: "solver", Validator: e.V, Trust: trusting(t, pub), Rooms: []string{attRoom}, State: state}
	f := roomtest.StartFollow(t, e.Js, o, nil)
	f.WaitSeen(t, len(served)+len(forged))
	if got := f.EventSeqs(); !slices.Equal(got, served) {
		t.Errorf("served %v, want %v", got, served)
	}
	if got := mismatches(t, f.Asides); !slices.Equal(got, forged) || len(f.Asides) != 3 {
		t.Errorf("set aside %v, want %v", f.Asides, forged)
	}
	forgedReasons(t, pub, f.Asides)
	// Every checkpoint verified was stored; the last one stays. (The last
	// message is that checkpoint, which hands out no verdict to wait for.)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := state.Load(attRoom)
		if err == nil && c != nil && c.Size == 13 && c.Root == a.tree.Root() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("follow's state: %+v, %v", c, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := f.Stop(t); err != nil {
		t.Fatal(err)
	}

	// A restart rebuilds from the stream; then, live: a batch of 3 (served
	// once whole); a forged entry 15 carrying a copy of that batch's first
	// header, alone at the end of the stream: once a fetch brings nothing
	// for a second it is refused (nothing waits for it longer); then the
	// genuine entry 15.
	es, _ := roomtest.Journal(t, "run-f", "cap-f", 16)
	ready := make(chan uint64, 1)
	o.Ready = func(floor uint64) { ready <- floor }
	f = roomtest.StartFollow(t, e.Js, o, nil)
	select {
	case <-ready:
	case <-time.After(15 * time.Second):
		t.Fatal("follow not ready in 15s")
	}
	batch, hs := a.headers(es[12:15]...)
	f.WaitSeen(t, 3)
	bad := a.forgedEntry(roomtest.ForkOf(t, es[15]), hs[0])
	f.WaitSeen(t, 4)
	good := a.entry(es[15])
	f.WaitSeen(t, 5)
	if got, want := f.EventSeqs(), append(slices.Clone(batch), good); !slices.Equal(got, want) {
		t.Errorf("after restart served %v, want %v", got, want)
	}
	if got := mismatches(t, f.Asides); !slices.Equal(got, []uint64{bad}) {
		t.Fatalf("after restart set aside %v", f.Asides)
	}
	want := fmt.Sprintf("the message was not admitted by a trusted publisher: incomplete batch: message 0 of a batch of 3 by %s: only messages 0 to 0 of it were read, at stream seqs %d to %d, and no message came for 1s after it",
		pub.NodeID(), bad, bad)
	if r := f.Asides[0].Reason; !strings.HasPrefix(r, want) {
		t.Errorf("reason %q\nwant %q", r, want)
	}
}

// TestAttestedOptimisticCount: with checkpoints covering the messages,
// the optimistic path verifies no signature of theirs, only those of the
// uncovered tail, one per batch; a copied header that no checkpoint covers
// is still caught: it opens a batch that the read ends before.
func TestAttestedOptimisticCount(t *testing.T) {
	e := roomtest.NewEnv(t)
	pub := roomtest.NewHostKey(t)
	a := newAttestor(t, e.Js, pub, attRoom)
	es, _ := roomtest.Journal(t, "run-o", "cap-o", 300)
	for i := 0; i < 295; i += 5 {
		a.entries(es[i : i+5]...)
		if (i+5)%50 == 0 {
			a.checkpoint()
		}
	}
	_, hs := a.headers(es[295:298]...)
	bad := a.forgedEntry(es[298], hs[0])
	rep, err := room.Audit(t.Context(), e.Js, room.AuditOptions{Validator: e.V, Trust: trusting(t, pub)})
	if err != nil {
		t.Fatal(err)
	}
	if got := mismatches(t, rep.Violations); !slices.Equal(got, []uint64{bad}) || len(rep.Violations) != 1 {
		t.Fatalf("violations %v, want checkpoint_mismatch at %d", rep.Violations, bad)
	}
	want := fmt.Sprintf("the message was not admitted by a trusted publisher: incomplete batch: message 0 of a batch of 3 by %s: only messages 0 to 0 of it were read, at stream seqs %d to %d, and the read ended there",
		pub.NodeID(), bad, bad)
	if r := rep.Violations[0].Reason; !strings.HasPrefix(r, want) {
		t.Errorf("reason %q\nwant %q", r, want)
	}
	f := rep.Checkpoints[0]
	// 299 messages with attestations; the 48 of the tail no checkpoint
	// covers verified with 10 signatures (9 batches of 5, one of 3); the
	// forged entry never verified: its batch was not whole.
	checkFacts(t, f, room.RoomCheckpoints{RoomID: attRoom, Admitted: 298, Checkpoints: 5, Covered: 250, Tail: 48,
		AttestationsVerified: 48, BatchesVerified: 10, AdmittedByCheckpoint: 250,
		Latest: &room.CheckpointFact{Size: 250, Root: fmt.Sprintf("%x", mustRootAt(t, a.tree, 250)), Signer: pub.NodeID(), Seq: 255}})
	if rep.Totals.Entries != 298 || rep.Totals.SetAside != 1 {
		t.Errorf("totals %+v", rep.Totals)
	}
}

// TestAttestedCheckpointRefused: every way a checkpoint can fail to cover
// its room as read is refused as checkpoint_mismatch with its stream
// sequence, and the room's later checkpoints are still checked.
func TestAttestedCheckpointRefused(t *testing.T) {
	e := roomtest.NewEnv(t)
	pub, other := roomtest.NewHostKey(t), roomtest.NewHostKey(t)
	a := newAttestor(t, e.Js, pub, attRoom)
	es, _ := roomtest.Journal(t, "run-c", "cap-c", 6)
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
	rep, err := room.Audit(t.Context(), e.Js, room.AuditOptions{Validator: e.V, Trust: trusting(t, pub)})
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
		AttestationsVerified: 1, BatchesVerified: 1, AdmittedByCheckpoint: 3,
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

// laterTree is the publisher's tree as it will be once es are appended
// too: what a reader of a longer copy of the room verified.
func (a *attestor) laterTree(es []*events.Entry) *checkpoint.Tree {
	tr := checkpoint.NewTree()
	for _, l := range a.leaves {
		tr.Append(l)
	}
	for _, e := range es {
		subject := a.subj.Journal(a.room, events.ChainKey{RunID: e.RunID(), CapsuleID: e.CapsuleID()})
		tr.Append(checkpoint.LeafHash(a.room, subject, checkpoint.ContentHash(e.Canonical())))
	}
	return tr
}

// parsed parses a note this test signed.
func parsed(t testing.TB, n []byte) *checkpoint.Checkpoint {
	t.Helper()
	c, err := checkpoint.ParseUnverified(n)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAttestedRolledBack: a state directory holding a checkpoint of size
// 50 refuses a copy of the room whose newest checkpoint has size 30
// (audit at the end of the read, follow at once), accepts the room once
// it reaches 50 consistently (and stores the newer checkpoint), and
// refuses a copy with another tree at 50 (forked).
func TestAttestedRolledBack(t *testing.T) {
	e := roomtest.NewEnv(t)
	pub := roomtest.NewHostKey(t)
	trust := trusting(t, pub)
	a := newAttestor(t, e.Js, pub, attRoom)
	es, _ := roomtest.Journal(t, "run-r", "cap-r", 60)
	for _, en := range es[:30] {
		a.entry(en)
	}
	ck30 := a.checkpoint()
	later := a.laterTree(es[30:50])
	state := &room.CheckpointState{Dir: t.TempDir()}
	if err := state.Save(parsed(t, a.note(50, later.Root(), a.signer))); err != nil {
		t.Fatal(err)
	}

	rep, err := room.Audit(t.Context(), e.Js, room.AuditOptions{Validator: e.V, Trust: trust, State: state})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("rolled back or forked: this reader verified a checkpoint of size 50 (root %x) before; the newest verified checkpoint has size 30", later.Root())
	if len(rep.Violations) != 1 || rep.Violations[0].Seq != ck30 || rep.Violations[0].Code != events.CheckpointMismatch || rep.Violations[0].Reason != want {
		t.Errorf("violations %v\nwant %q at stream seq %d", rep.Violations, want, ck30)
	}
	if f := rep.Checkpoints[0]; f.Stored == nil || f.Stored.Size != 50 || f.StoredConsistent || f.Refused != want || rep.Clean() {
		t.Errorf("facts %+v", f)
	}
	if c, err := state.Load(attRoom); err != nil || c.Size != 50 {
		t.Errorf("state after a rolled-back audit: %+v, %v", c, err)
	}

	// Follow refuses the room at once: nothing is served.
	f := roomtest.StartFollow(t, e.Js, room.FollowOptions{Durable: "rb", Validator: e.V, Trust: trust, State: state, Rooms: []string{attRoom}}, nil)
	// The room's set-aside, then its 30 entries and its checkpoint.
	f.WaitSeen(t, 32)
	if len(f.EventSeqs()) != 0 || len(mismatches(t, f.Asides)) != 32 || f.Asides[0].Seq != 0 || !strings.Contains(f.Asides[0].Reason, "the newest on the stream has size 30") {
		t.Errorf("follow of a rolled-back room: served %v, set aside %v", f.EventSeqs(), f.Asides[:2])
	}
	_ = f.Stop(t)

	// The room grows to 50 as the state says: consistent, and the state
	// moves on to 55.
	for _, en := range es[30:50] {
		a.entry(en)
	}
	a.checkpoint()
	for _, en := range es[50:55] {
		a.entry(en)
	}
	ck55 := a.checkpoint()
	rep, err = room.Audit(t.Context(), e.Js, room.AuditOptions{Validator: e.V, Trust: trust, State: state})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() || !rep.Checkpoints[0].StoredConsistent {
		t.Errorf("grown room: violations %v, facts %+v", rep.Violations, rep.Checkpoints)
	}
	if c, err := state.Load(attRoom); err != nil || c.Size != 55 || c.Root != a.tree.Root() || c.Signer != pub.NodeID() {
		t.Errorf("state after a clean audit: %+v, %v", c, err)
	}

	// Another tree at 50 in the state: the stream's checkpoint at 50 is
	// not consistent with it; the room is refused from there on.
	other := newAttestor(t, e.Js, pub, attRoom)
	for _, en := range es[:49] {
		other.leaf(checkpoint.LeafHash(attRoom, "x", checkpoint.ContentHash(en.Canonical())))
	}
	other.leaf([32]byte{1})
	if err := state.Save(parsed(t, a.note(50, other.tree.Root(), a.signer))); err != nil {
		t.Fatal(err)
	}
	rep, err = room.Audit(t.Context(), e.Js, room.AuditOptions{Validator: e.V, Trust: trust, State: state})
	if err != nil {
		t.Fatal(err)
	}
	got := mismatches(t, rep.Violations)
	// The checkpoint at 50 (stream seq 52), then every later message.
	if wantSeqs := roomtest.SeqRange(52, ck55); !slices.Equal(got, wantSeqs) || !strings.Contains(rep.Violations[0].Reason, "checkpoint of size 50 is not consistent with it") {
		t.Errorf("forked: set aside %v, want %v: %v", got, wantSeqs, rep.Violations[0].Reason)
	}
	if c, _ := state.Load(attRoom); c.Root != other.tree.Root() {
		t.Error("a forked audit replaced the state")
	}
	// Follow: the newest checkpoint (55) is larger, so the room is
	// refused when the read reaches the one at 50.
	f = roomtest.StartFollow(t, e.Js, room.FollowOptions{Durable: "fork", Validator: e.V, Trust: trust, State: state, Rooms: []string{attRoom}}, nil)
	f.WaitSeen(t, 50+len(got))
	if n := len(f.EventSeqs()); n != 50 {
		t.Errorf("follow of a forked room served %d entries, want the 50 before the fork", n)
	}
	if g := mismatches(t, f.Asides); !slices.Equal(g, got) {
		t.Errorf("follow of a forked room set aside %v, want %v", g, got)
	}
}

// TestAttestedExternalCheckpoint: audit --checkpoint accepts a note that
// a trusted key signed over the room as read (at any covered size) and
// refuses a forked one, one beyond the room as read, an untrusted one and
// garbage.
func TestAttestedExternalCheckpoint(t *testing.T) {
	e := roomtest.NewEnv(t)
	pub, other := roomtest.NewHostKey(t), roomtest.NewHostKey(t)
	a := newAttestor(t, e.Js, pub, attRoom)
	es, _ := roomtest.Journal(t, "run-x", "cap-x", 12)
	for _, en := range es[:10] {
		a.entry(en)
	}
	a.checkpoint()
	for _, en := range es[10:] {
		a.entry(en) // an uncovered tail: 12 leaves, the latest checkpoint at 10
	}
	forked := a.laterTree(nil)
	forked.Truncate(4)
	forked.Append([32]byte{9})
	exts := []room.ExternalCheckpoint{
		{Name: "good-5", Note: a.note(5, mustRootAt(t, a.tree, 5), a.signer)},
		{Name: "good-12", Note: a.note(12, a.tree.Root(), a.signer)},
		{Name: "forked", Note: a.note(5, forked.Root(), a.signer)},
		{Name: "beyond", Note: a.note(13, a.tree.Root(), a.signer)},
		{Name: "untrusted", Note: a.note(5, mustRootAt(t, a.tree, 5), mustSigner(t, other))},
		{Name: "garbage", Note: []byte("room:attested\n5\n")},
	}
	rep, err := room.Audit(t.Context(), e.Js, room.AuditOptions{Validator: e.V, Trust: trusting(t, pub), External: exts})
	if err != nil {
		t.Fatal(err)
	}
	wants := []string{
		"checkpoint forked (size 5): forked: the room as read has root",
		"checkpoint beyond (size 13): the room as read has 12 admitted messages",
		"checkpoint untrusted (size 5): untrusted publisher",
		"checkpoint garbage: bad checkpoint",
	}
	if len(rep.Violations) != len(wants) {
		t.Fatalf("violations %v", rep.Violations)
	}
	for i, w := range wants {
		if v := rep.Violations[i]; v.Code != events.CheckpointMismatch || !strings.HasPrefix(v.Reason, w) {
			t.Errorf("violation %d: %s, want %q", i, v.Error(), w)
		}
	}
	ext := rep.Checkpoints[0].External
	if len(ext) != 2 || ext[0].Size != 5 || ext[1].Size != 12 || ext[1].Root != fmt.Sprintf("%x", a.tree.Root()) || ext[0].Signer != pub.NodeID() {
		t.Errorf("external facts %+v", ext)
	}
	if _, err := room.Audit(t.Context(), e.Js, room.AuditOptions{Validator: e.V, External: exts[:1]}); !errors.Is(err, room.ErrReader) {
		t.Errorf("an external checkpoint without trusted keys: %v", err)
	}
}

// TestAttestedProve: inclusion proofs of a journal entry and a record
// verify offline (also through JSON) against the latest checkpoint; a
// proof against another checkpoint, or tampered, does not; a message no
// checkpoint covers, a forged one and an unknown one have no proof.
func TestAttestedProve(t *testing.T) {
	e := roomtest.NewEnv(t)
	pub := roomtest.NewHostKey(t)
	trust := trusting(t, pub)
	a, forged, served := forgedStream(t, e, pub)
	es, _ := roomtest.Journal(t, "run-f", "cap-f", 13)
	tail := a.entry(es[12]) // not covered
	prove := func(entry, ref string) (*checkpoint.Proof, error) {
		return room.Prove(t.Context(), e.Js, room.ProveOptions{Room: attRoom, Entry: entry, Ref: ref, Validator: e.V, Trust: trust})
	}
	rec := roomtest.RecordIn(t, e.Key, attRoom, "attested-1", nil)
	for _, c := range []struct {
		name, entry, ref string
		seq, index       uint64
	}{
		{"entry 3", es[3].EntryHash(), "", served[3], 3},
		{"entry 10", es[10].EntryHash(), "", served[10], 10},
		{"record", "", rec.ComputedRef(), served[11], 11},
	} {
		p, err := prove(c.entry, c.ref)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if p.StreamSeq != c.seq || p.LeafIndex != c.index || p.TreeSize != 13 || p.Room != attRoom {
			t.Errorf("%s: proof %+v", c.name, p)
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var back checkpoint.Proof
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		ck, err := back.Verify(trust)
		if err != nil || ck.Size != 13 || ck.Root != mustRootAt(t, a.tree, 13) {
			t.Errorf("%s: verify: %v, %+v", c.name, err, ck)
		}
		// Against another checkpoint of the room (its genuine one at 12).
		other := back
		other.Checkpoint = string(a.note(12, mustRootAt(t, a.tree, 12), a.signer))
		if _, err := other.Verify(trust); !errors.Is(err, checkpoint.ErrBadProof) {
			t.Errorf("%s: against the checkpoint at 12: %v", c.name, err)
		}
		other.TreeSize = 12
		if _, err := other.Verify(trust); !errors.Is(err, checkpoint.ErrBadProof) {
			t.Errorf("%s: against the checkpoint at 12, size 12: %v", c.name, err)
		}
		// Tampered: a bit of the path, the content hash (with its leaf
		// hash), the index.
		bad := back
		bad.Path = slices.Clone(back.Path)
		bad.Path[0][0] ^= 1
		if _, err := bad.Verify(trust); !errors.Is(err, checkpoint.ErrBadProof) {
			t.Errorf("%s: flipped path bit: %v", c.name, err)
		}
		bad = back
		bad.ContentHash[31] ^= 1
		bad.LeafHash = checkpoint.LeafHash(bad.Room, bad.Subject, bad.ContentHash)
		if _, err := bad.Verify(trust); !errors.Is(err, checkpoint.ErrBadProof) {
			t.Errorf("%s: other content: %v", c.name, err)
		}
		bad = back
		bad.LeafIndex ^= 1
		if _, err := bad.Verify(trust); !errors.Is(err, checkpoint.ErrBadProof) {
			t.Errorf("%s: other index: %v", c.name, err)
		}
		if _, err := back.Verify(trusting(t, roomtest.NewHostKey(t))); !errors.Is(err, checkpoint.ErrUntrustedPublisher) {
			t.Errorf("%s: under another key: %v", c.name, err)
		}
	}
	if _, err := prove(es[12].EntryHash(), ""); !errors.Is(err, room.ErrNotCovered) {
		t.Errorf("uncovered entry at stream seq %d: %v", tail, err)
	}
	fork := roomtest.ForkOf(t, es[10])
	if _, err := prove(fork.EntryHash(), ""); !errors.Is(err, room.ErrNoSuchMessage) {
		t.Errorf("forged entry at stream seq %d: %v", forged[1], err)
	}
	if _, err := prove(strings.Repeat("0", 64), ""); !errors.Is(err, room.ErrNoSuchMessage) {
		t.Errorf("unknown entry: %v", err)
	}
}

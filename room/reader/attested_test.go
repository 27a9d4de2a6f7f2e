package reader_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
	"github.com/roompub/roompub/validate"
)

// Attestations and checkpoints on the read side, against a real embedded server: messages are
// written straight into the stream with the attestations and checkpoints a
// publisher would write (checkpoint.Attest, checkpoint.Sign over a
// checkpoint.Tree kept here), and forged ones beside them.

func checkFacts(t testing.TB, got reader.RoomCheckpoints, want reader.RoomCheckpoints) {
	t.Helper()
	g, w := got, want
	g.Latest, w.Latest, g.Stored, w.Stored, g.External, w.External = nil, nil, nil, nil, nil, nil
	// What the tree spilled and read back depends on its bounds, not on
	// the verdicts (leafbounds_test.go).
	g.LeavesSpilled, g.LeavesReread = w.LeavesSpilled, w.LeavesReread
	if fmt.Sprintf("%+v", g) != fmt.Sprintf("%+v", w) {
		t.Errorf("facts %+v\nwant  %+v", g, w)
	}
	if (got.Latest == nil) != (want.Latest == nil) || got.Latest != nil && *got.Latest != *want.Latest {
		t.Errorf("latest checkpoint %+v, want %+v", got.Latest, want.Latest)
	}
}

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
func forgedStream(t *testing.T, e *roomtest.Env, pub *events.HostKey) (a *roomtest.Attestor, forged, served []uint64) {
	t.Helper()
	a = roomtest.NewAttestor(t, e.Js, pub, roomtest.AttRoom)
	es, _ := roomtest.Journal(t, "run-f", "cap-f", 12)
	served = append(served, a.Entries(es[:5]...)...)
	a.Checkpoint() // size 5
	seqs, single := a.Headers(es[5])
	served = append(served, seqs...)
	seqs, four := a.Headers(es[6:10]...)
	served = append(served, seqs...)
	forged = append(forged, a.ForgedEntry(es[10], ""))
	forged = append(forged, a.ForgedEntry(roomtest.ForkOf(t, es[10]), single[0]))
	forged = append(forged, a.ForgedEntry(roomtest.Rebuilt(t, es[10], map[string]any{"payload": map[string]any{"tool": "bash", "status": "third"}}), four[1]))
	served = append(served, a.Entry(es[10]))
	served = append(served, a.Record(roomtest.RecordIn(t, e.Key, roomtest.AttRoom, "attested-1", nil)))
	a.Checkpoint() // size 12
	served = append(served, a.Entry(es[11]))
	a.Checkpoint() // size 13
	return a, forged, served
}

// forgedReasons checks the reasons of forgedStream's three forgeries.
func forgedReasons(t *testing.T, pub *events.HostKey, asides []reader.SetAside) {
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
	rep, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, Trust: roomtest.Trusting(t, pub), OnEvent: func(ev *reader.Event) { evs = append(evs, ev.Seq) }})
	if err != nil {
		t.Fatal(err)
	}
	if got := roomtest.Mismatches(t, rep.Violations); !slices.Equal(got, forged) || len(rep.Violations) != 3 {
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
	checkFacts(t, f, reader.RoomCheckpoints{RoomID: roomtest.AttRoom, Admitted: 13, Checkpoints: 3, Covered: 13, Tail: 0,
		AttestationsVerified: 8, BatchesVerified: 5, AdmittedByCheckpoint: 6,
		Latest: &reader.CheckpointFact{Size: 13, Root: fmt.Sprintf("%x", a.Tree.Root()), Signer: pub.NodeID(), Seq: served[len(served)-1] + 1}})
	if rep.Clean() {
		t.Error("an audit with forged messages is clean")
	}

	// Without trusted keys: nothing is checked, the report says so, and
	// the first forged entry (a sound continuation) is served.
	evs = nil
	rep, err = reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, OnEvent: func(ev *reader.Event) { evs = append(evs, ev.Seq) }})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Attestation.Checked || rep.Attestation.Why == "" || rep.Checkpoints != nil || !slices.Contains(evs, forged[0]) {
		t.Errorf("untrusting audit: %+v, served %v", rep.Attestation, evs)
	}
}

// TestAttestedCopyBeforeGenuine: copies of the chain's next two entries
// under a header naming the trusted key (another key's signature),
// stored before the genuine entries, have the genuine entries' leaf
// hashes, so the publisher's checkpoint over the genuine ones matches a
// tree that holds the copies in their place. A reader that checked every
// signature first refuses the copies and serves the genuine entries, as
// the checkpointer counts them; so must the optimistic one: it verifies
// before such a checkpoint admits anything (it was: the copies admitted,
// the genuine entries a fork and the chain broken).
func TestAttestedCopyBeforeGenuine(t *testing.T) {
	e := roomtest.NewEnv(t)
	pub := roomtest.NewHostKey(t)
	a := roomtest.NewAttestor(t, e.Js, pub, roomtest.AttRoom)
	es, _ := roomtest.Journal(t, "run-c", "cap-c", 5)
	served := a.Entries(es[:3]...)
	ms := []roomtest.AttMsg{a.EntryMsg(es[3]), a.EntryMsg(es[4])}
	hs := checkpoint.AttestBatch(roomtest.NewHostKey(t), []checkpoint.Statement{a.Statement(ms[0]), a.Statement(ms[1])})
	for i := range hs {
		hs[i] = pub.NodeID() + hs[i][strings.IndexByte(hs[i], ' '):]
	}
	copies := a.Append(ms, hs)
	served = append(served, a.Entries(es[3:5]...)...)
	a.Checkpoint()
	var evs []uint64
	rep, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, Trust: roomtest.Trusting(t, pub), OnEvent: func(ev *reader.Event) { evs = append(evs, ev.Seq) }})
	if err != nil {
		t.Fatal(err)
	}
	if got := roomtest.Mismatches(t, rep.Violations); !slices.Equal(got, copies) || len(rep.Violations) != 2 ||
		!strings.Contains(rep.Violations[0].Reason, "signature by "+pub.NodeID()+" does not verify for this batch of 2") {
		t.Errorf("set aside %v, want the copies %v", rep.Violations, copies)
	}
	if !slices.Equal(evs, served) || len(rep.Chains) != 1 || rep.Chains[0].Verdict != "ok" || rep.Chains[0].Entries != 5 {
		t.Errorf("served %v, want %v; chains %+v", evs, served, rep.Chains)
	}
	checkFacts(t, rep.Checkpoints[0], reader.RoomCheckpoints{RoomID: roomtest.AttRoom, Admitted: 5, Checkpoints: 1, Covered: 5,
		AttestationsVerified: 7, BatchesVerified: 3,
		Latest: &reader.CheckpointFact{Size: 5, Root: fmt.Sprintf("%x", a.Tree.Root()), Signer: pub.NodeID(), Seq: served[4] + 1}})
}

// TestAttestedForgedContinuationFollow: follow never hands out a forged
// message, live (every attestation verified) and after a restart (the
// rebuild relies on checkpoints), and sets it aside as checkpoint_mismatch.
func TestAttestedForgedContinuationFollow(t *testing.T) {
	e := roomtest.NewEnv(t)
	pub := roomtest.NewHostKey(t)
	a, forged, served := forgedStream(t, e, pub)
	state := &reader.CheckpointState{Dir: t.TempDir()}
	o := reader.FollowOptions{Durable: "solver", Validator: e.V, Trust: roomtest.Trusting(t, pub), Rooms: []string{roomtest.AttRoom}, State: state}
	f := roomtest.StartFollow(t, e.Js, o, nil)
	f.WaitSeen(t, len(served)+len(forged))
	if got := f.EventSeqs(); !slices.Equal(got, served) {
		t.Errorf("served %v, want %v", got, served)
	}
	if got := roomtest.Mismatches(t, f.Asides); !slices.Equal(got, forged) || len(f.Asides) != 3 {
		t.Errorf("set aside %v, want %v", f.Asides, forged)
	}
	forgedReasons(t, pub, f.Asides)
	// Every checkpoint verified was stored; the last one stays. (The last
	// message is that checkpoint, which hands out no verdict to wait for.)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := state.Load(roomtest.AttRoom)
		if err == nil && c != nil && c.Size == 13 && c.Root == a.Tree.Root() {
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
	batch, hs := a.Headers(es[12:15]...)
	f.WaitSeen(t, 3)
	bad := a.ForgedEntry(roomtest.ForkOf(t, es[15]), hs[0])
	f.WaitSeen(t, 4)
	good := a.Entry(es[15])
	f.WaitSeen(t, 5)
	if got, want := f.EventSeqs(), append(slices.Clone(batch), good); !slices.Equal(got, want) {
		t.Errorf("after restart served %v, want %v", got, want)
	}
	if got := roomtest.Mismatches(t, f.Asides); !slices.Equal(got, []uint64{bad}) {
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
	a := roomtest.NewAttestor(t, e.Js, pub, roomtest.AttRoom)
	es, _ := roomtest.Journal(t, "run-o", "cap-o", 300)
	for i := 0; i < 295; i += 5 {
		a.Entries(es[i : i+5]...)
		if (i+5)%50 == 0 {
			a.Checkpoint()
		}
	}
	_, hs := a.Headers(es[295:298]...)
	bad := a.ForgedEntry(es[298], hs[0])
	rep, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, Trust: roomtest.Trusting(t, pub)})
	if err != nil {
		t.Fatal(err)
	}
	if got := roomtest.Mismatches(t, rep.Violations); !slices.Equal(got, []uint64{bad}) || len(rep.Violations) != 1 {
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
	checkFacts(t, f, reader.RoomCheckpoints{RoomID: roomtest.AttRoom, Admitted: 298, Checkpoints: 5, Covered: 250, Tail: 48,
		AttestationsVerified: 48, BatchesVerified: 10, AdmittedByCheckpoint: 250,
		Latest: &reader.CheckpointFact{Size: 250, Root: fmt.Sprintf("%x", mustRootAt(t, a.Tree, 250)), Signer: pub.NodeID(), Seq: 255}})
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
	a := roomtest.NewAttestor(t, e.Js, pub, roomtest.AttRoom)
	es, _ := roomtest.Journal(t, "run-c", "cap-c", 6)
	for _, en := range es[:3] {
		a.Entry(en)
	}
	a.Checkpoint() // 4: size 3, good
	a.Entry(es[3])
	otherTree := checkpoint.NewTree()
	for i := range 4 {
		otherTree.Append([32]byte{byte(i)})
	}
	cases := []struct {
		seq  uint64
		want string
	}{
		{a.CheckpointOf(4, otherTree.Root(), a.Signer), "root " + fmt.Sprintf("%x", otherTree.Root())},
		{a.CheckpointOf(9, a.Tree.Root(), a.Signer), "it covers 9 messages, but only 4 admitted messages"},
		{a.CheckpointOf(2, mustRootAt(t, a.Tree, 2), a.Signer), "size 2 is smaller than the previous checkpoint's, 3"},
		{a.CheckpointOf(4, a.Tree.Root(), mustSigner(t, other)), "untrusted publisher"},
		{a.Publish(a.Subj.Checkpoint(roomtest.AttRoom), []byte("not a note\n"), ""), "bad checkpoint"},
	}
	// Another room's checkpoint on this room's subject.
	n, err := checkpoint.Sign(a.Signer, "room:elsewhere", 4, a.Tree.Root())
	if err != nil {
		t.Fatal(err)
	}
	cases = append(cases, struct {
		seq  uint64
		want string
	}{a.Publish(a.Subj.Checkpoint(roomtest.AttRoom), n, ""), `origin "room:elsewhere" is not room "room:attested"`})
	good := a.Checkpoint() // size 4
	rep, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, Trust: roomtest.Trusting(t, pub)})
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
	checkFacts(t, f, reader.RoomCheckpoints{RoomID: roomtest.AttRoom, Admitted: 4, Checkpoints: 2, CheckpointsRefused: 6, Covered: 4,
		AttestationsVerified: 1, BatchesVerified: 1, AdmittedByCheckpoint: 3,
		Latest: &reader.CheckpointFact{Size: 4, Root: fmt.Sprintf("%x", a.Tree.Root()), Signer: pub.NodeID(), Seq: good}})
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

// TestAttestedRolledBack: a state directory holding a checkpoint of size
// 50 refuses a copy of the room whose newest checkpoint has size 30
// (audit at the end of the read, follow at once), accepts the room once
// it reaches 50 consistently (and stores the newer checkpoint), and
// refuses a copy with another tree at 50 (forked).
func TestAttestedRolledBack(t *testing.T) {
	e := roomtest.NewEnv(t)
	pub := roomtest.NewHostKey(t)
	trust := roomtest.Trusting(t, pub)
	a := roomtest.NewAttestor(t, e.Js, pub, roomtest.AttRoom)
	es, _ := roomtest.Journal(t, "run-r", "cap-r", 60)
	for _, en := range es[:30] {
		a.Entry(en)
	}
	ck30 := a.Checkpoint()
	later := a.LaterTree(es[30:50])
	state := &reader.CheckpointState{Dir: t.TempDir()}
	if err := state.Save(roomtest.Parsed(t, a.Note(50, later.Root(), a.Signer))); err != nil {
		t.Fatal(err)
	}

	rep, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, Trust: trust, State: state})
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
	if c, err := state.Load(roomtest.AttRoom); err != nil || c.Size != 50 {
		t.Errorf("state after a rolled-back audit: %+v, %v", c, err)
	}

	// Follow refuses the room at once: nothing is served.
	f := roomtest.StartFollow(t, e.Js, reader.FollowOptions{Durable: "rb", Validator: e.V, Trust: trust, State: state, Rooms: []string{roomtest.AttRoom}}, nil)
	// The room's set-aside, then its 30 entries and its checkpoint.
	f.WaitSeen(t, 32)
	if len(f.EventSeqs()) != 0 || len(roomtest.Mismatches(t, f.Asides)) != 32 || f.Asides[0].Seq != 0 || !strings.Contains(f.Asides[0].Reason, "the newest on the stream has size 30") {
		t.Errorf("follow of a rolled-back room: served %v, set aside %v", f.EventSeqs(), f.Asides[:2])
	}
	_ = f.Stop(t)

	// The room grows to 50 as the state says: consistent, and the state
	// moves on to 55.
	for _, en := range es[30:50] {
		a.Entry(en)
	}
	a.Checkpoint()
	for _, en := range es[50:55] {
		a.Entry(en)
	}
	ck55 := a.Checkpoint()
	rep, err = reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, Trust: trust, State: state})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() || !rep.Checkpoints[0].StoredConsistent {
		t.Errorf("grown room: violations %v, facts %+v", rep.Violations, rep.Checkpoints)
	}
	if c, err := state.Load(roomtest.AttRoom); err != nil || c.Size != 55 || c.Root != a.Tree.Root() || c.Signer != pub.NodeID() {
		t.Errorf("state after a clean audit: %+v, %v", c, err)
	}

	// Another tree at 50 in the state: the stream's checkpoint at 50 is
	// not consistent with it; the room is refused from there on.
	other := roomtest.NewAttestor(t, e.Js, pub, roomtest.AttRoom)
	for _, en := range es[:49] {
		other.Leaf(checkpoint.LeafHash(roomtest.AttRoom, "x", checkpoint.ContentHash(en.Canonical())))
	}
	other.Leaf([32]byte{1})
	if err := state.Save(roomtest.Parsed(t, a.Note(50, other.Tree.Root(), a.Signer))); err != nil {
		t.Fatal(err)
	}
	rep, err = reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, Trust: trust, State: state})
	if err != nil {
		t.Fatal(err)
	}
	got := roomtest.Mismatches(t, rep.Violations)
	// The checkpoint at 50 (stream seq 52), then every later message.
	if wantSeqs := roomtest.SeqRange(52, ck55); !slices.Equal(got, wantSeqs) || !strings.Contains(rep.Violations[0].Reason, "checkpoint of size 50 is not consistent with it") {
		t.Errorf("forked: set aside %v, want %v: %v", got, wantSeqs, rep.Violations[0].Reason)
	}
	if c, _ := state.Load(roomtest.AttRoom); c.Root != other.Tree.Root() {
		t.Error("a forked audit replaced the state")
	}
	// Follow: the newest checkpoint (55) is larger, so the room is
	// refused when the read reaches the one at 50.
	f = roomtest.StartFollow(t, e.Js, reader.FollowOptions{Durable: "fork", Validator: e.V, Trust: trust, State: state, Rooms: []string{roomtest.AttRoom}}, nil)
	f.WaitSeen(t, 50+len(got))
	if n := len(f.EventSeqs()); n != 50 {
		t.Errorf("follow of a forked room served %d entries, want the 50 before the fork", n)
	}
	if g := roomtest.Mismatches(t, f.Asides); !slices.Equal(g, got) {
		t.Errorf("follow of a forked room set aside %v, want %v", g, got)
	}
}

// TestAttestedExternalKeepsState: an audit whose --checkpoint shows the
// room as read forked, or behind a trusted checkpoint, keeps nothing of
// the room in its state (a later audit of the same history would pass the
// state's check, and one of the other history be refused as rolled back);
// one whose checkpoints from elsewhere agree keeps the room's newest.
func TestAttestedExternalKeepsState(t *testing.T) {
	e := roomtest.NewEnv(t)
	pub := roomtest.NewHostKey(t)
	a := roomtest.NewAttestor(t, e.Js, pub, roomtest.AttRoom)
	es, _ := roomtest.Journal(t, "run-x", "cap-x", 6)
	for _, en := range es {
		a.Entry(en)
	}
	a.Checkpoint() // size 6
	forked := a.LaterTree(nil)
	forked.Truncate(4)
	forked.Append([32]byte{9})
	for _, c := range []struct {
		name string
		ext  reader.ExternalCheckpoint
		kept bool
	}{
		{"forked", reader.ExternalCheckpoint{Name: "forked", Note: a.Note(5, forked.Root(), a.Signer)}, false},
		{"beyond", reader.ExternalCheckpoint{Name: "beyond", Note: a.Note(7, a.Tree.Root(), a.Signer)}, false},
		{"agrees", reader.ExternalCheckpoint{Name: "good-5", Note: a.Note(5, mustRootAt(t, a.Tree, 5), a.Signer)}, true},
	} {
		state := &reader.CheckpointState{Dir: t.TempDir()}
		rep, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, Trust: roomtest.Trusting(t, pub), External: []reader.ExternalCheckpoint{c.ext}, State: state})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Clean() == !c.kept {
			t.Errorf("%s: clean %v, want %v: %v", c.name, rep.Clean(), c.kept, rep.Violations)
		}
		k, err := state.Load(roomtest.AttRoom)
		switch {
		case err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.kept && (k == nil || k.Size != 6 || k.Root != a.Tree.Root()):
			t.Errorf("%s: kept %+v, want the room's checkpoint at size 6", c.name, k)
		case !c.kept && k != nil:
			t.Errorf("%s: an audit that found the room contradicting a trusted checkpoint kept its checkpoint at size %d as verified", c.name, k.Size)
		}
	}
}

// TestAttestedExternalCheckpoint: audit --checkpoint accepts a note that
// a trusted key signed over the room as read (at any covered size) and
// refuses a forked one and one beyond the room as read (checkpoint_mismatch,
// evidence against the stream); an untrusted one, garbage and one of a
// room not audited are the caller's error before anything is read
// (ErrExternalCheckpoint), never a message set aside.
func TestAttestedExternalCheckpoint(t *testing.T) {
	e := roomtest.NewEnv(t)
	pub, other := roomtest.NewHostKey(t), roomtest.NewHostKey(t)
	a := roomtest.NewAttestor(t, e.Js, pub, roomtest.AttRoom)
	es, _ := roomtest.Journal(t, "run-x", "cap-x", 12)
	for _, en := range es[:10] {
		a.Entry(en)
	}
	a.Checkpoint()
	for _, en := range es[10:] {
		a.Entry(en) // an uncovered tail: 12 leaves, the latest checkpoint at 10
	}
	forked := a.LaterTree(nil)
	forked.Truncate(4)
	forked.Append([32]byte{9})
	exts := []reader.ExternalCheckpoint{
		{Name: "good-5", Note: a.Note(5, mustRootAt(t, a.Tree, 5), a.Signer)},
		{Name: "good-12", Note: a.Note(12, a.Tree.Root(), a.Signer)},
		{Name: "forked", Note: a.Note(5, forked.Root(), a.Signer)},
		{Name: "beyond", Note: a.Note(13, a.Tree.Root(), a.Signer)},
	}
	trust := roomtest.Trusting(t, pub)
	rep, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, Trust: trust, External: exts})
	if err != nil {
		t.Fatal(err)
	}
	wants := []string{
		"checkpoint forked (size 5): forked: the room as read has root",
		"checkpoint beyond (size 13): the room as read has 12 admitted messages",
	}
	if len(rep.Violations) != len(wants) || rep.Totals.SetAside != uint64(len(wants)) {
		t.Fatalf("violations %v, %d set aside", rep.Violations, rep.Totals.SetAside)
	}
	for i, w := range wants {
		if v := rep.Violations[i]; v.Code != events.CheckpointMismatch || !strings.HasPrefix(v.Reason, w) {
			t.Errorf("violation %d: %s, want %q", i, v.Error(), w)
		}
	}
	ext := rep.Checkpoints[0].External
	if len(ext) != 2 || ext[0].Size != 5 || ext[1].Size != 12 || ext[1].Root != fmt.Sprintf("%x", a.Tree.Root()) || ext[0].Signer != pub.NodeID() {
		t.Errorf("external facts %+v", ext)
	}
	if _, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, External: exts[:1]}); !errors.Is(err, reader.ErrReader) {
		t.Errorf("an external checkpoint without trusted keys: %v", err)
	}
	for _, c := range []struct {
		ext   reader.ExternalCheckpoint
		rooms []string
		want  string
	}{
		{reader.ExternalCheckpoint{Name: "untrusted", Note: a.Note(5, mustRootAt(t, a.Tree, 5), mustSigner(t, other))}, nil,
			"not a usable checkpoint from elsewhere: untrusted (size 5, room " + roomtest.AttRoom + "): untrusted publisher"},
		{reader.ExternalCheckpoint{Name: "garbage", Note: []byte("room:attested\n5\n")}, nil,
			"not a usable checkpoint from elsewhere: garbage: bad checkpoint"},
		{reader.ExternalCheckpoint{Name: "empty"}, nil,
			"not a usable checkpoint from elsewhere: empty: bad checkpoint"},
		{reader.ExternalCheckpoint{Name: "bom", Note: append([]byte("\ufeff"), exts[0].Note...)}, nil,
			"not a usable checkpoint from elsewhere: bom: bad checkpoint: the note starts with a UTF-8 byte order mark"},
		{exts[0], []string{"room:other"},
			"not a usable checkpoint from elsewhere: good-5 (size 5): its room " + roomtest.AttRoom + " is not among the rooms audited (room:other)"},
	} {
		if err := c.ext.Check(trust, c.rooms); !errors.Is(err, reader.ErrExternalCheckpoint) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("Check of %s: %v, want %q", c.ext.Name, err, c.want)
		}
		_, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, Trust: trust, Rooms: c.rooms, External: []reader.ExternalCheckpoint{c.ext}})
		if !errors.Is(err, reader.ErrExternalCheckpoint) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("audit with %s: %v, want %q", c.ext.Name, err, c.want)
		}
	}
	if err := exts[2].Check(trust, []string{roomtest.AttRoom}); err != nil {
		t.Errorf("Check of a forked note, which only the stream refutes: %v", err)
	}
}

// TestAttestedProve: inclusion proofs of a journal entry and a record
// verify offline (also through JSON) against the latest checkpoint; a
// proof against another checkpoint, or tampered, does not; a message no
// checkpoint covers, a forged one and an unknown one have no proof.
func TestAttestedProve(t *testing.T) {
	e := roomtest.NewEnv(t)
	pub := roomtest.NewHostKey(t)
	trust := roomtest.Trusting(t, pub)
	a, forged, served := forgedStream(t, e, pub)
	es, _ := roomtest.Journal(t, "run-f", "cap-f", 13)
	tail := a.Entry(es[12]) // not covered
	prove := func(entry, ref string) (*checkpoint.Proof, error) {
		return reader.Prove(t.Context(), e.Js, reader.ProveOptions{Room: roomtest.AttRoom, Entry: entry, Ref: ref, Validator: e.V, Trust: trust})
	}
	rec := roomtest.RecordIn(t, e.Key, roomtest.AttRoom, "attested-1", nil)
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
		if p.StreamSeq != c.seq || p.LeafIndex != c.index || p.TreeSize != 13 || p.Room != roomtest.AttRoom {
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
		if err != nil || ck.Size != 13 || ck.Root != mustRootAt(t, a.Tree, 13) {
			t.Errorf("%s: verify: %v, %+v", c.name, err, ck)
		}
		// Against another checkpoint of the room (its genuine one at 12).
		other := back
		other.Checkpoint = string(a.Note(12, mustRootAt(t, a.Tree, 12), a.Signer))
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
		if _, err := back.Verify(roomtest.Trusting(t, roomtest.NewHostKey(t))); !errors.Is(err, checkpoint.ErrUntrustedPublisher) {
			t.Errorf("%s: under another key: %v", c.name, err)
		}
	}
	if _, err := prove(es[12].EntryHash(), ""); !errors.Is(err, reader.ErrNotCovered) {
		t.Errorf("uncovered entry at stream seq %d: %v", tail, err)
	}
	fork := roomtest.ForkOf(t, es[10])
	_, err := prove(fork.EntryHash(), "")
	var sa *reader.SetAsideError
	if !errors.Is(err, reader.ErrNoSuchMessage) || !errors.As(err, &sa) || sa.Aside.Seq != forged[1] || sa.What != "entry_hash "+fork.EntryHash() ||
		!strings.HasPrefix(err.Error(), fmt.Sprintf("entry_hash %s in %s is set aside at stream seq %d (", fork.EntryHash(), roomtest.AttRoom, forged[1])) {
		t.Errorf("forged entry at stream seq %d: %v", forged[1], err)
	}
	_, err = prove(strings.Repeat("0", 64), "")
	if !errors.Is(err, reader.ErrNoSuchMessage) || errors.As(err, &sa) || err.Error() != "no such verified message: entry_hash "+strings.Repeat("0", 64)+" in "+roomtest.AttRoom {
		t.Errorf("unknown entry: %v", err)
	}
}

// TestProveSetAsideRecord: Prove of a record a reader that does not trust
// its host sets aside says so: the record's stream seq, untrusted_host, and
// the host to trust; with the host trusted it is proven; a ref the room
// does not hold is still no such message.
func TestProveSetAsideRecord(t *testing.T) {
	e := roomtest.NewEnv(t)
	pub := roomtest.NewHostKey(t)
	trust := roomtest.Trusting(t, pub)
	a := roomtest.NewAttestor(t, e.Js, pub, roomtest.AttRoom)
	rec := roomtest.RecordIn(t, e.Key, roomtest.AttRoom, "attested-1", nil)
	seq := a.Record(rec)
	a.Checkpoint()
	untrusting, err := validate.New(validate.WithTrustedHosts(roomtest.ReferenceHost))
	if err != nil {
		t.Fatal(err)
	}
	prove := func(v *validate.Validator, ref string) (*checkpoint.Proof, error) {
		return reader.Prove(t.Context(), e.Js, reader.ProveOptions{Room: roomtest.AttRoom, Ref: ref, Validator: v, Trust: trust})
	}
	_, err = prove(untrusting, rec.ComputedRef())
	want := fmt.Sprintf("execution/ref %s in %s is set aside at stream seq %d (%s): untrusted_host: the host is not trusted here (pass --trusted-host %s if you trust that host)",
		rec.ComputedRef(), roomtest.AttRoom, seq, "rooms.attested.exec", e.Key.NodeID())
	var sa *reader.SetAsideError
	if !errors.Is(err, reader.ErrNoSuchMessage) || !errors.As(err, &sa) || sa.Aside.Code != events.UntrustedHost || err.Error() != want {
		t.Errorf("record of an untrusted host: %v\nwant %s", err, want)
	}
	if p, err := prove(e.V, rec.ComputedRef()); err != nil || p.StreamSeq != seq {
		t.Errorf("record of a trusted host: %+v, %v", p, err)
	}
	_, err = prove(untrusting, "corpus-task-pack-execution:sha256:none")
	if !errors.Is(err, reader.ErrNoSuchMessage) || errors.As(err, &sa) || !strings.HasPrefix(err.Error(), "no such verified message: execution/ref corpus-task-pack-execution:sha256:none in ") {
		t.Errorf("a ref the room does not hold: %v", err)
	}
}

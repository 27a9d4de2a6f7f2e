package reader_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
)

// The conformance suite's trust rows: the checkpoint rules and the batch
// rules (docs/checkpoints.md), each case a room written straight into the
// stream as a publisher with a trusted key (and a forger beside it) would
// write it, and run through every path that sees it, which must reach the
// same verdict:
//
//   - the readers, Audit and Follow: what they set aside
//     (checkpoint_mismatch) and why;
//   - the checkpointer: the messages it takes as no leaf (and logs, with
//     the readers' words), the checkpoints it reports as contradicting the
//     room (error log, the readers' words) and writes nothing after, and
//     the checkpoint it does write, which must cover exactly the messages
//     the readers admit (the readers verify it);
//   - the gate: a chain's head, the last entry it counts as admitted.
//
// The offline verifier sees neither attestations nor checkpoints (it
// checks files); the gate sees no checkpoints; only the readers keep the
// checkpoint an earlier read verified, so only they see a rolled-back
// room.

// trustCase is one row: write appends the room's messages through r.a and
// says what the paths must make of them in r.
type trustCase struct {
	name  string
	write func(t *testing.T, r *trustRun)
}

// trustRun is one case's room as written and the verdicts it must get.
type trustRun struct {
	a   *roomtest.Attestor
	es  []*events.Entry // the room's chain, entries 0..11
	all []uint64        // every message written, stream seqs

	// refused are the messages every path refuses: the readers set them
	// aside, the checkpointer takes them as no leaf, the gate never as
	// the chain's head. why holds, for some of them, words both the
	// readers' reason and the checkpointer's log say.
	refused []uint64
	why     map[uint64]string
	// contradict are the checkpoints a trusted key signed that do not
	// describe the room: the readers set them aside ("the checkpoint does
	// not match the room: " + the reason), the checkpointer logs the same
	// reason and writes no checkpoint of the room after them.
	contradict []uint64
	// kept is the checkpoint an earlier read verified (a state
	// directory); the readers refuse the room from roomAt on or, with
	// roomAt 0, as a whole (Audit once read, at its newest verified
	// checkpoint auditAt; Follow at once, before reading it), with these
	// reasons: Audit's and Follow's.
	kept                    *checkpoint.Checkpoint
	roomAt, auditAt         uint64
	auditRefused, followWhy string
	// head and next: the gate's chain head (stream seq of the last
	// admitted entry) and the chain's next position.
	head uint64
	next int64
	// verified counts the checkpoints the readers verify (they hand
	// nothing out for them); admitted, when not 0, is how many messages
	// the readers admit (else the publisher's tree's size).
	verified int
	admitted uint64
}

// goodCheckpoint appends the publisher's checkpoint of its tree.
func (r *trustRun) goodCheckpoint() uint64 {
	r.verified++
	return r.add(r.a.Checkpoint())[0]
}

func (r *trustRun) add(seqs ...uint64) []uint64 {
	r.all = append(r.all, seqs...)
	return seqs
}

func (r *trustRun) refuse(seqs []uint64, why string) {
	r.refused = append(r.refused, seqs...)
	if why != "" {
		for _, s := range seqs {
			r.why[s] = why
		}
	}
}

// entries appends es as one genuine atomic batch; the chain's head moves
// to its last.
func (r *trustRun) entries(es ...*events.Entry) []uint64 {
	seqs := r.add(r.a.Entries(es...)...)
	r.head = seqs[len(seqs)-1]
	seq, _ := es[len(es)-1].Seq()
	r.next = seq + 1
	return seqs
}

// signed returns es as messages and their headers signed by the
// publisher as one batch.
func (r *trustRun) signed(es ...*events.Entry) ([]roomtest.AttMsg, []string) {
	ms := make([]roomtest.AttMsg, len(es))
	for i, e := range es {
		ms[i] = r.a.EntryMsg(e)
	}
	return ms, r.a.Sign(ms)
}

// checkpoint appends the publisher's checkpoint note of size and root.
func (r *trustRun) checkpoint(size uint64, root [32]byte) uint64 {
	return r.add(r.a.CheckpointOf(size, root, r.a.Signer))[0]
}

// forkedRoot is the root of the room's first n leaves with the one at
// index at replaced: another history.
func (r *trustRun) forkedRoot(n, at int) [32]byte {
	tr := checkpoint.NewTree()
	for i, l := range r.a.Leaves[:n] {
		if i == at {
			l[0] ^= 1
		}
		tr.Append(l)
	}
	return tr.Root()
}

func trustCases(t *testing.T) []trustCase {
	other := roomtest.NewHostKey(t) // a key nobody trusts
	incomplete := func(i, n int, pub string) string {
		return fmt.Sprintf("incomplete batch: message %d of a batch of %d by %s: ", i, n, pub)
	}
	return []trustCase{
		{"batch: incomplete batch", func(t *testing.T, r *trustRun) {
			r.entries(r.es[:3]...)
			ms, hs := r.signed(r.es[3:8]...)
			part := r.add(r.a.Append(ms[:3], hs[:3])...)
			rest := r.entries(r.es[3:6]...)
			r.refuse(part, "")
			for i, s := range part {
				r.why[s] = incomplete(i, 5, r.a.Key.NodeID()) + fmt.Sprintf("only messages 0 to 2 of it were read, at stream seqs %d to %d, and the next message, stream seq %d, is not message 3 of it", part[0], part[2], rest[0])
			}
		}},
		{"batch: altered message in a batch", func(t *testing.T, r *trustRun) {
			r.entries(r.es[:3]...)
			ms, hs := r.signed(r.es[3:7]...)
			ms[2].Data = roomtest.ForkOf(t, r.es[5]).Canonical() // another sound entry for its place
			r.refuse(r.add(r.a.Append(ms, hs)...), "bad attestation: signature by "+r.a.Key.NodeID()+" does not verify for this batch of 4")
			r.entries(r.es[3:7]...)
		}},
		{"batch: forged signature", func(t *testing.T, r *trustRun) {
			r.entries(r.es[:3]...)
			// The trusted key's name on another key's signature.
			ms, _ := r.signed(r.es[3:5]...)
			stmts := []checkpoint.Statement{r.a.Statement(ms[0]), r.a.Statement(ms[1])}
			hs := checkpoint.AttestBatch(other, stmts)
			for i := range hs {
				hs[i] = r.a.Key.NodeID() + hs[i][strings.IndexByte(hs[i], ' '):]
			}
			r.refuse(r.add(r.a.Append(ms, hs)...), "bad attestation: signature by "+r.a.Key.NodeID()+" does not verify for this batch of 2")
			// A key nobody trusts.
			r.refuse(r.add(r.a.Append(ms, checkpoint.AttestBatch(other, stmts))...), "untrusted publisher: attestation by "+other.NodeID())
			r.entries(r.es[3:5]...)
		}},
		{"batch: copied header", func(t *testing.T, r *trustRun) {
			seqs, hs := r.a.Headers(r.es[:3]...)
			r.add(seqs...)
			r.head, r.next = seqs[2], 3
			r.refuse([]uint64{r.add(r.a.ForgedEntry(roomtest.ForkOf(t, r.es[3]), hs[1]))[0]},
				incomplete(1, 3, r.a.Key.NodeID())+"the message before it on the stream is not message 0 of that batch")
			r.entries(r.es[3:5]...)
		}},
		{"batch: the every-message form", func(t *testing.T, r *trustRun) {
			// The form the gate wrote before the compact one: every
			// message carries the batch's signature. Old stores hold it.
			r.entries(r.es[:3]...)
			ms, hs := r.signed(r.es[3:7]...)
			every, err := checkpoint.Reform(hs, checkpoint.FormEveryMessage)
			if err != nil {
				t.Fatal(err)
			}
			seqs := r.add(r.a.Append(ms, every)...)
			for _, m := range ms {
				r.a.Leaf(checkpoint.LeafHash(r.a.Room, m.Subject, checkpoint.ContentHash(m.Data)))
			}
			r.head, r.next = seqs[3], 7
			r.entries(r.es[7:9]...)
		}},
		{"batch: two forms in one batch", func(t *testing.T, r *trustRun) {
			r.entries(r.es[:3]...)
			ms, hs := r.signed(r.es[3:6]...)
			every, err := checkpoint.Reform(hs, checkpoint.FormEveryMessage)
			if err != nil {
				t.Fatal(err)
			}
			mixed := r.add(r.a.Append(ms, []string{every[0], hs[1], hs[2]})...)
			r.refuse(mixed, "")
			r.why[mixed[0]] = incomplete(0, 3, r.a.Key.NodeID()) + fmt.Sprintf("only messages 0 to 0 of it were read, at stream seqs %d to %d, and the next message, stream seq %d, is not message 1 of it", mixed[0], mixed[0], mixed[1])
			for i, s := range mixed[1:] {
				r.why[s] = incomplete(i+1, 3, r.a.Key.NodeID()) + fmt.Sprintf("the message before it on the stream is not message %d of that batch: a copied header, or a batch not stored whole", i)
			}
			r.entries(r.es[3:6]...)
		}},
		{"batch: a batch whole after a part of it", func(t *testing.T, r *trustRun) {
			// A store that filled mid-batch kept its first two messages;
			// the same statements, signed again (the same signature),
			// stored whole after them.
			r.entries(r.es[:3]...)
			ms, hs := r.signed(r.es[3:6]...)
			part := r.add(r.a.Append(ms[:2], hs[:2])...)
			whole := r.add(r.a.Append(ms, hs)...)
			for _, m := range ms {
				r.a.Leaf(checkpoint.LeafHash(r.a.Room, m.Subject, checkpoint.ContentHash(m.Data)))
			}
			r.refuse(part, "")
			for i, s := range part {
				r.why[s] = incomplete(i, 3, r.a.Key.NodeID()) + fmt.Sprintf("only messages 0 to 1 of it were read, at stream seqs %d to %d, and the next message, stream seq %d, is not message 2 of it", part[0], part[1], whole[0])
			}
			r.head, r.next = whole[2], 6
		}},
		{"checkpoint: does not match the tree", func(t *testing.T, r *trustRun) {
			r.entries(r.es[:3]...)
			r.goodCheckpoint()
			r.entries(r.es[3:5]...)
			big := r.checkpoint(7, r.a.Tree.Root())
			wrong := r.forkedRoot(5, 4)
			root := r.checkpoint(5, wrong)
			r.contradict = append(r.contradict, big, root)
			r.why[big] = "it covers 7 messages, but only 5 admitted messages of the room precede it"
			r.why[root] = fmt.Sprintf("root %x at size 5, but the room's admitted messages give %x", wrong, r.a.Tree.Root())
			r.entries(r.es[5:6]...)
		}},
		{"checkpoint: inconsistent with the previous one", func(t *testing.T, r *trustRun) {
			r.entries(r.es[:4]...)
			ck4 := r.goodCheckpoint()
			root3, _ := r.a.Tree.RootAt(3)
			back := r.checkpoint(3, root3) // a true root, of a size the room had before
			r.entries(r.es[4:6]...)
			forked := r.forkedRoot(6, 2) // forked before the previous checkpoint
			fork := r.checkpoint(6, forked)
			r.contradict = append(r.contradict, back, fork)
			r.why[back] = fmt.Sprintf("size 3 is smaller than the previous checkpoint's, 4 at stream seq %d", ck4)
			r.why[fork] = fmt.Sprintf("root %x at size 6, but the room's admitted messages give %x", forked, r.a.Tree.Root())
			r.entries(r.es[6:7]...)
		}},
		{"checkpoint: rolled-back room", func(t *testing.T, r *trustRun) {
			// An earlier read verified the room at 8; this copy has 5,
			// its newest checkpoint at 4.
			r.entries(r.es[:4]...)
			ck := r.add(r.a.Checkpoint())[0]
			r.auditAt = ck
			r.entries(r.es[4:5]...)
			later := r.a.LaterTree(r.es[5:8])
			r.kept = roomtest.Parsed(t, r.a.Note(8, later.Root(), r.a.Signer))
			before := fmt.Sprintf("rolled back or forked: this reader verified a checkpoint of size 8 (root %x) before; ", later.Root())
			r.auditRefused = before + "the newest verified checkpoint has size 4"
			r.followWhy = before + fmt.Sprintf("the newest on the stream has size 4 (root %x, stream seq %d)", mustRootAt(t, r.a.Tree, 4), ck)
		}},
		{"checkpoint: forked room", func(t *testing.T, r *trustRun) {
			// An earlier read verified another history at 5; this copy's
			// checkpoint at 6 is not consistent with it.
			r.entries(r.es[:6]...)
			forked := r.forkedRoot(5, 4)
			r.kept = &checkpoint.Checkpoint{Room: r.a.Room, Size: 5, Root: forked, Signer: r.a.Key.NodeID(), Note: r.a.Note(5, forked, r.a.Signer)}
			r.roomAt = r.add(r.a.Checkpoint())[0]
			r.entries(r.es[6:7]...)
			r.admitted = 6 // the room is refused from its checkpoint on
			r.auditRefused = fmt.Sprintf("the checkpoint does not match the room: rolled back or forked: this reader verified a checkpoint of size 5 (root %x) before, and the checkpoint of size 6 is not consistent with it", forked)
			r.followWhy = r.auditRefused
		}},
	}
}

// TestConformanceTrust runs every trust case through the readers (Audit
// and Follow), the checkpointer and the gate (see above).
func TestConformanceTrust(t *testing.T) {
	e := roomtest.NewEnv(t)
	pub := roomtest.NewPublisherKey(t)
	trust := roomtest.Trusting(t, pub)
	ctx := context.Background()
	cases := trustCases(t)
	runs := make([]*trustRun, len(cases))
	for i, c := range cases {
		r := &trustRun{a: roomtest.NewAttestor(t, e.Js, pub, fmt.Sprintf("room:trust-%d", i)), why: map[uint64]string{}}
		r.es, _ = roomtest.Journal(t, fmt.Sprintf("trust-%d", i), "cap", 12)
		c.write(t, r)
		slices.Sort(r.refused)
		runs[i] = r
	}
	info, err := e.Stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	written := info.State.LastSeq // later checkpoints are the checkpointer's

	// The readers.
	for i, c := range cases {
		r := runs[i]
		t.Run(c.name+"/readers", func(t *testing.T) {
			var state *reader.CheckpointState
			if r.kept != nil {
				state = &reader.CheckpointState{Dir: t.TempDir()}
				if err := state.Save(r.kept); err != nil {
					t.Fatal(err)
				}
			}
			rep, err := reader.Audit(ctx, e.Js, reader.AuditOptions{Validator: e.V, Trust: trust, Rooms: []string{r.a.Room}, State: state})
			if err != nil {
				t.Fatal(err)
			}
			r.checkAsides(t, "Audit", rep.Violations, r.auditRefused)
			admitted := r.admitted
			if admitted == 0 {
				admitted = r.a.Tree.Size()
			}
			if f := rep.Checkpoints; len(f) != 1 || f[0].Admitted != admitted {
				t.Errorf("Audit: facts %+v, want %d admitted", f, admitted)
			}
			f := roomtest.StartFollow(t, e.Js, reader.FollowOptions{Durable: fmt.Sprintf("trust-%d", i), Validator: e.V, Trust: trust,
				Rooms: []string{r.a.Room}, State: state}, nil)
			n := len(r.all) - r.verified
			if r.kept != nil && r.roomAt == 0 {
				n = len(r.all) + 1 // the room's own set-aside, then every message
			}
			f.WaitSeen(t, n)
			f.Mu.Lock()
			asides := slices.Clone(f.Asides)
			f.Mu.Unlock()
			r.checkAsides(t, "Follow", asides, r.followWhy)
			_ = f.Stop(t)
		})
	}

	// The gate: a chain's head is its last admitted entry.
	gate := roomtest.AttestingGate(e, e.Nc, pub, nil, ingest.GateOptions{})
	for i, c := range cases {
		r := runs[i]
		if r.kept != nil {
			continue // the gate keeps no earlier checkpoint
		}
		t.Run(c.name+"/gate", func(t *testing.T) {
			h, err := gate.Head(ctx, events.ChainKey{RunID: r.es[0].RunID(), CapsuleID: "cap"})
			if err != nil {
				t.Fatal(err)
			}
			if h.StreamSeq != r.head || h.Next != r.next || h.RoomID != r.a.Room {
				t.Errorf("head %+v, want entry %d at stream seq %d", h, r.next-1, r.head)
			}
		})
	}

	// The checkpointer: reads the stream from the start, then writes the
	// final checkpoint of every room that grew and matched (Stop).
	ckp, logs := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: pub, Every: 1 << 20, Interval: time.Hour})
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := ckp.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		r := runs[i]
		t.Run(c.name+"/checkpointer", func(t *testing.T) {
			var notLeaves, contradicts []uint64
			reasons := map[uint64]string{}
			for _, l := range logs.All() {
				m := l.ContextMap()
				if m["room"] != r.a.Room {
					continue
				}
				seq, _ := m["stream_seq"].(uint64)
				switch {
				case strings.Contains(l.Message, "is not a leaf"):
					notLeaves = append(notLeaves, seq)
					reasons[seq] = fmt.Sprint(m["error"])
				case strings.Contains(l.Message, "contradicts its messages"):
					contradicts = append(contradicts, seq)
					reasons[seq] = fmt.Sprint(m["reason"])
				}
			}
			if !slices.Equal(notLeaves, r.refused) {
				t.Errorf("no leaves %v, want %v", notLeaves, r.refused)
			}
			if !slices.Equal(contradicts, r.contradict) {
				t.Errorf("contradictions %v, want %v", contradicts, r.contradict)
			}
			for seq, why := range r.why {
				if slices.Contains(r.contradict, seq) && reasons[seq] != why || !strings.Contains(reasons[seq], why) {
					t.Errorf("stream seq %d: %q, want %q", seq, reasons[seq], why)
				}
			}
			var mine []*checkpoint.Checkpoint
			for _, m := range e.OnSubject(room.Subjects{}.Checkpoint(r.a.Room)) {
				if m.Sequence > written {
					mine = append(mine, roomtest.Parsed(t, m.Data))
				}
			}
			if len(r.contradict) > 0 {
				if len(mine) != 0 {
					t.Errorf("wrote %d checkpoints of a room whose checkpoint contradicts it", len(mine))
				}
				return
			}
			// What it signs over is what the readers admit: the
			// publisher's tree.
			if len(mine) != 1 || mine[0].Size != r.a.Tree.Size() || mine[0].Root != r.a.Tree.Root() {
				t.Fatalf("wrote %+v, want one checkpoint at %d", mine, r.a.Tree.Size())
			}
			if r.kept != nil {
				return
			}
			rep, err := reader.Audit(ctx, e.Js, reader.AuditOptions{Validator: e.V, Trust: trust, Rooms: []string{r.a.Room}})
			if err != nil {
				t.Fatal(err)
			}
			r.checkAsides(t, "Audit after the checkpointer", rep.Violations, "")
			if f := rep.Checkpoints[0]; f.Latest == nil || f.Latest.Seq <= written || f.Covered != r.a.Tree.Size() || f.Tail != 0 {
				t.Errorf("the checkpointer's checkpoint as the readers see it: %+v", f)
			}
			f := roomtest.StartFollow(t, e.Js, reader.FollowOptions{Durable: fmt.Sprintf("trust-after-%d", i), Validator: e.V, Trust: trust,
				Rooms: []string{r.a.Room}}, nil)
			f.WaitSeen(t, len(r.all)-r.verified) // and the checkpointer's, verified
			f.Mu.Lock()
			asides := slices.Clone(f.Asides)
			f.Mu.Unlock()
			r.checkAsides(t, "Follow after the checkpointer", asides, "")
			_ = f.Stop(t)
		})
	}
}

// checkAsides asserts the readers' verdict on r: the refused messages and
// contradicting checkpoints set aside (checkpoint_mismatch) with the
// reasons r expects or, for a room refused as rolled back or forked,
// every message from where it is refused, the first with refusedWhy.
func (r *trustRun) checkAsides(t *testing.T, who string, asides []reader.SetAside, refusedWhy string) {
	t.Helper()
	got := roomtest.Mismatches(t, asides)
	if len(got) != len(asides) {
		t.Errorf("%s: set aside %v with other codes too", who, asides)
	}
	want := slices.Sorted(slices.Values(append(slices.Clone(r.refused), r.contradict...)))
	if r.kept != nil {
		want = nil
		switch {
		case r.roomAt != 0:
			for _, s := range r.all {
				if s >= r.roomAt {
					want = append(want, s)
				}
			}
		case who == "Follow":
			want = append([]uint64{0}, r.all...)
		default:
			want = []uint64{r.auditAt}
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: set aside %v, want %v", who, got, want)
	}
	for _, s := range asides {
		if why, ok := r.why[s.Seq]; ok && !strings.Contains(s.Reason, why) {
			t.Errorf("%s: stream seq %d: %q\nwant %q", who, s.Seq, s.Reason, why)
		}
		if slices.Contains(r.contradict, s.Seq) && s.Reason != "the checkpoint does not match the room: "+r.why[s.Seq] {
			t.Errorf("%s: stream seq %d: %q", who, s.Seq, s.Reason)
		}
	}
	if refusedWhy != "" && (len(asides) == 0 || !strings.HasPrefix(asides[0].Reason, refusedWhy)) {
		t.Errorf("%s: the room refused as %v\nwant %q", who, asides, refusedWhy)
	}
}

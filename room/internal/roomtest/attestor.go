package roomtest

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/reader"
	"github.com/synadia-io/orbit.go/jetstreamext"
	"golang.org/x/mod/sumdb/note"
)

// Attestor writes one room's messages as an attesting publisher would.
type Attestor struct {
	T      testing.TB
	Js     jetstream.JetStream
	Key    *events.HostKey
	Signer note.Signer
	Room   string
	Subj   room.Subjects
	Tree   *checkpoint.Tree // the publisher's: admitted messages only
	Leaves [][32]byte       // its leaves
	Execs  uint64           // messages on the room's exec subject
}

// NewAttestor returns an Attestor that writes roomID's messages into the
// stream through js, signed with key, and keeps the tree they make.
func NewAttestor(t testing.TB, js jetstream.JetStream, key *events.HostKey, roomID string) *Attestor {
	t.Helper()
	s, err := checkpoint.NewNoteSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	return &Attestor{T: t, Js: js, Key: key, Signer: s, Room: roomID, Tree: checkpoint.NewTree()}
}

// Publish appends data on subject with the attestation header (none when
// att is "") and returns its stream sequence.
func (a *Attestor) Publish(subject string, data []byte, att string) uint64 {
	a.T.Helper()
	return a.Append([]AttMsg{{Subject: subject, Data: data}}, []string{att})[0]
}

// AttMsg is one message as an attesting publisher appends it.
type AttMsg struct {
	Subject  string
	Data     []byte
	Position string // checkpoint.JournalPosition or RecordPosition
}

// EntryMsg is e as a message of a's room, on its chain's subject.
func (a *Attestor) EntryMsg(e *events.Entry) AttMsg {
	pos, _ := e.Seq()
	return AttMsg{Subject: a.Subj.Journal(a.Room, events.ChainKey{RunID: e.RunID(), CapsuleID: e.CapsuleID()}), Data: e.Canonical(),
		Position: checkpoint.JournalPosition(pos)}
}

// Statement is what a publisher attests for m at the tree's next leaf.
func (a *Attestor) Statement(m AttMsg) checkpoint.Statement {
	return checkpoint.Statement{Room: a.Room, Subject: m.Subject, Position: m.Position, Content: checkpoint.ContentHash(m.Data)}
}

// Sign returns the attestation headers of ms as one batch: one signature
// (checkpoint.AttestBatch).
func (a *Attestor) Sign(ms []AttMsg) []string {
	stmts := make([]checkpoint.Statement, len(ms))
	for i, m := range ms {
		stmts[i] = a.Statement(m)
	}
	return checkpoint.AttestBatch(a.Key, stmts)
}

// Append appends ms with headers (none where "") as one atomic batch
// (ADR-50: stored whole, at consecutive sequences) and returns their stream
// sequences.
func (a *Attestor) Append(ms []AttMsg, headers []string) []uint64 {
	a.T.Helper()
	msgs := make([]*nats.Msg, len(ms))
	for i, m := range ms {
		msgs[i] = nats.NewMsg(m.Subject)
		msgs[i].Data = m.Data
		if headers[i] != "" {
			msgs[i].Header.Set(checkpoint.AttestationHeader, headers[i])
		}
	}
	if len(msgs) == 1 {
		ack, err := a.Js.PublishMsg(a.T.Context(), msgs[0])
		if err != nil {
			a.T.Fatal(err)
		}
		return []uint64{ack.Sequence}
	}
	ack, err := jetstreamext.PublishMsgBatch(a.T.Context(), a.Js, msgs)
	if err != nil {
		a.T.Fatal(err)
	}
	return SeqRange(ack.Sequence-uint64(len(msgs))+1, ack.Sequence)
}

// Entries appends es, of one chain, as the publisher admits them: one
// atomic batch attested with one signature, as the gate does.
func (a *Attestor) Entries(es ...*events.Entry) []uint64 {
	a.T.Helper()
	seqs, _ := a.Headers(es...)
	return seqs
}

// Entry appends e as a batch of one.
func (a *Attestor) Entry(e *events.Entry) uint64 {
	a.T.Helper()
	return a.Entries(e)[0]
}

// Headers appends es as entries does and returns their stream sequences
// and attestation headers (for forgers to copy).
func (a *Attestor) Headers(es ...*events.Entry) ([]uint64, []string) {
	a.T.Helper()
	ms := make([]AttMsg, len(es))
	for i, e := range es {
		ms[i] = a.EntryMsg(e)
		a.Leaf(checkpoint.LeafHash(a.Room, ms[i].Subject, checkpoint.ContentHash(ms[i].Data)))
	}
	hs := a.Sign(ms)
	return a.Append(ms, hs), hs
}

// Record appends rec, attested (a batch of one), as the publisher admits it.
func (a *Attestor) Record(rec *events.Record) uint64 {
	a.T.Helper()
	m := AttMsg{Subject: a.Subj.Records(a.Room), Data: rec.Canonical(), Position: checkpoint.RecordPosition(a.Execs)}
	a.Execs++
	a.Leaf(checkpoint.LeafHash(a.Room, m.Subject, checkpoint.ContentHash(m.Data)))
	return a.Append([]AttMsg{m}, a.Sign([]AttMsg{m}))[0]
}

// Leaf adds the leaf h to a's tree.
func (a *Attestor) Leaf(h [32]byte) {
	a.Tree.Append(h)
	a.Leaves = append(a.Leaves, h)
}

// ForgedEntry appends e with the attestation header att (not a leaf of
// the publisher's tree).
func (a *Attestor) ForgedEntry(e *events.Entry, att string) uint64 {
	a.T.Helper()
	return a.Publish(a.Subj.Journal(a.Room, events.ChainKey{RunID: e.RunID(), CapsuleID: e.CapsuleID()}), e.Canonical(), att)
}

// Checkpoint signs and appends the publisher's checkpoint at its tree's size.
func (a *Attestor) Checkpoint() uint64 {
	a.T.Helper()
	return a.CheckpointOf(a.Tree.Size(), a.Tree.Root(), a.Signer)
}

// CheckpointOf signs and appends any checkpoint of the room.
func (a *Attestor) CheckpointOf(size uint64, root [32]byte, s note.Signer) uint64 {
	a.T.Helper()
	return a.Publish(a.Subj.Checkpoint(a.Room), a.Note(size, root, s), "")
}

// Note is the signed checkpoint of a's room at size and root, signed by s.
func (a *Attestor) Note(size uint64, root [32]byte, s note.Signer) []byte {
	a.T.Helper()
	n, err := checkpoint.Sign(s, a.Room, size, root)
	if err != nil {
		a.T.Fatal(err)
	}
	return n
}

// Trusting is a trust in keys as publishers.
func Trusting(t testing.TB, keys ...*events.HostKey) *checkpoint.Trust {
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

// Mismatches returns the stream sequences of the checkpoint_mismatch
// set-asides, checking their code and that each names its sequence.
func Mismatches(t testing.TB, asides []reader.SetAside) []uint64 {
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

// AttRoom is the room an Attestor writes in, unless told otherwise.
const AttRoom = "room:attested"

// LaterTree is the publisher's tree as it will be once es are appended
// too: what a reader of a longer copy of the room verified.
func (a *Attestor) LaterTree(es []*events.Entry) *checkpoint.Tree {
	tr := checkpoint.NewTree()
	for _, l := range a.Leaves {
		tr.Append(l)
	}
	for _, e := range es {
		subject := a.Subj.Journal(a.Room, events.ChainKey{RunID: e.RunID(), CapsuleID: e.CapsuleID()})
		tr.Append(checkpoint.LeafHash(a.Room, subject, checkpoint.ContentHash(e.Canonical())))
	}
	return tr
}

// Parsed parses a note this test signed.
func Parsed(t testing.TB, n []byte) *checkpoint.Checkpoint {
	t.Helper()
	c, err := checkpoint.ParseUnverified(n)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ReplacedBatch appends another chain's batch of 4 (run-x/cap-x), signed
// as the publisher made it, stored with message 2 replaced by another
// sound entry for its position; it returns the batch's stream seqs.
func (a *Attestor) ReplacedBatch(t *testing.T) []uint64 {
	t.Helper()
	other, _ := Journal(t, "run-x", "cap-x", 4)
	ms := make([]AttMsg, 4)
	for i, en := range other {
		ms[i] = a.EntryMsg(en)
	}
	hs := a.Sign(ms)
	ms[2].Data = ForkOf(t, other[2]).Canonical()
	return a.Append(ms, hs)
}

package room

import (
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
)

// The read side of issue 9. A reader that trusts publisher keys admits a
// room message only with a valid attestation by one of them, keeps each
// room's admitted messages as the leaves of an RFC 6962 tree
// (checkpoint.Tree) in stream order, and checks every checkpoint on the
// room's checkpoint subject against that tree when it reaches it in stream
// order. What is not admitted, and every checkpoint that does not cover
// the room as it says, is set aside as checkpoint_mismatch.
//
// Optimistic verification (issue 9, for the audit floor of issue 8): a
// message whose header is well formed and names a trusted key becomes a
// leaf at once, its signature unchecked (attPending), and its verdict
// waits in the reader's queue. A verified checkpoint that covers it
// authenticates it (its signature and root bind every leaf: room, subject,
// content hash; stream order gives the position). When a checkpoint does
// not match, the pending attestations since the last verified checkpoint
// are verified one by one, the bad ones refused, the tree rebuilt without
// them and the checkpoint checked again. Whatever no checkpoint covers at
// the end of a read, or once the queue is full, is verified one by one.
// Verdicts leave the queue in stream order, so they are those of a reader
// that verified every signature first.

// attState is what a trusting reader knows of a message's admission.
type attState uint8

const (
	attUnchecked attState = iota // the reader trusts no publisher key, or the message is no room message
	attPending                   // a leaf on the optimistic path: a trusted key named, the signature not checked yet
	attAdmitted                  // a leaf whose signature verified or that a verified checkpoint covers; a verified checkpoint
	attRefused                   // set aside as checkpoint_mismatch with reason
)

// attestation is a trusting reader's state of one message.
type attestation struct {
	state    attState
	checked  bool   // the signature was verified one by one (state is then attAdmitted or attRefused)
	leaf     bool   // a leaf of its room's tree, at index
	index    uint64 // leaf index, while leaf
	position string // checkpoint.JournalPosition or RecordPosition; "" when unknown
	content  [32]byte
	hash     [32]byte // checkpoint.LeafHash
	reason   string   // attRefused
	ledger   *ledger  // the room's, set in step

	// Checkpoint messages: the note, verified in prepare (nil with ckptErr).
	ckpt    *checkpoint.Checkpoint
	ckptErr error
}

// attestationOf returns a message's attestation header: its one value,
// several values joined by ", " (which no attestation accepts), or "".
func attestationOf(h nats.Header) string {
	vs := h.Values(checkpoint.AttestationHeader)
	switch len(vs) {
	case 0:
		return ""
	case 1:
		return vs[0]
	default:
		return strings.Join(vs, ", ")
	}
}

// prepareAttestation is prepare's part for a trusting reader: the content
// and leaf hashes, the header's signer, the journal position; with eager,
// the signature of a journal entry (a record's position is only known in
// stream order, in step); for checkpoint messages the note's signature
// and origin. It reads only r.trust and r.eager.
func (r *Reader) prepareAttestation(x *prepared) {
	m := &x.m
	if x.p.Kind == KindCheckpoint {
		x.att.ckpt, x.att.ckptErr = checkpoint.Parse(m.Data, x.p.RoomID, r.trust)
		return
	}
	x.att.content = checkpoint.ContentHash(m.Data)
	x.att.hash = checkpoint.LeafHash(x.p.RoomID, m.Subject, x.att.content)
	if _, err := r.trust.AttestationSigner(m.Attestation); err != nil {
		x.att.state, x.att.reason = attRefused, attestationReason(err)
		return
	}
	x.att.state = attPending
	if x.p.Kind == KindJournal && x.e != nil {
		if pos, ok := x.e.Seq(); ok {
			x.att.position = checkpoint.JournalPosition(pos)
		}
	}
	if r.eager && x.p.Kind == KindJournal {
		r.checkAttestation(x)
	}
}

// attestationReason words a refused attestation.
func attestationReason(err error) string {
	if errors.Is(err, checkpoint.ErrNoAttestation) {
		return "the message has no " + checkpoint.AttestationHeader + " header: no trusted publisher admitted it"
	}
	return "the message was not admitted by a trusted publisher: " + err.Error()
}

// checkAttestation verifies x's attestation signature (x is attPending).
// Safe on several goroutines for distinct messages.
func (r *Reader) checkAttestation(x *prepared) {
	x.att.checked = true
	if x.att.position == "" {
		x.att.state, x.att.reason = attRefused, "the attestation cannot be verified: the message's chain position is unknown"
		return
	}
	if _, err := r.trust.VerifyAttestation(x.m.Attestation, x.p.RoomID, x.m.Subject, x.att.position, x.att.content); err != nil {
		x.att.state, x.att.reason = attRefused, attestationReason(err)
		return
	}
	x.att.state = attAdmitted
}

// ledger is a trusting reader's state of one room: its tree of admitted
// messages, the leaves whose admission is still open, and its checkpoints.
type ledger struct {
	roomID string
	tree   roomTree // *leanTree, or a *checkpoint.Tree for readers that prove or compare old sizes
	execs  uint64   // messages read on the room's exec subject: the next record's position
	// pending holds the room's leaves from the first one still attPending
	// on, in stream order (so none of them is decided yet, and a rebuild
	// can append them again); empty when no leaf is pending.
	pending []*prepared

	latest    *checkpoint.Checkpoint // the last verified checkpoint
	latestSeq uint64                 // its stream sequence

	// floor is the checkpoint verified by an earlier read (the state
	// directory); floorOK once a checkpoint at least as large was found
	// consistent with it.
	floor   *checkpoint.Checkpoint
	floorOK bool
	// refused, once set, refuses every later message of the room: it is
	// rolled back or forked.
	refused string

	external []CheckpointFact // checkpoints from elsewhere found consistent

	checkpoints uint64 // checkpoints verified
	ckRefused   uint64 // checkpoint messages refused
	verified    uint64 // attestation signatures verified one by one
	covered     uint64 // leaves admitted by a covering checkpoint, unchecked
}

// ledgerOf returns roomID's ledger, created on first use.
func (r *Reader) ledgerOf(roomID string) *ledger {
	l := r.ledgers[roomID]
	if l == nil {
		l = &ledger{roomID: roomID, tree: newLeanTree()}
		if r.fullTrees {
			l.tree = checkpoint.NewTree()
		}
		r.ledgers[roomID] = l
	}
	return l
}

// Bounds of the optimistic queue: verdicts waiting for a checkpoint. Past
// either, the oldest waiting room's pending attestations are verified one
// by one (a publisher that writes checkpoints rarely, or none, costs
// speed, not memory).
const (
	maxDeferred      = 8192
	maxDeferredBytes = 32 << 20
)

// feed decides x, which must come after every message fed before it in
// stream order, and hands its verdict to out (an event, a set-aside, or
// neither for a checkpoint message), now or, on the optimistic path, once
// its admission is known; verdicts always leave in stream order. full is
// decide's. finish hands out what is still waiting.
func (r *Reader) feed(x *prepared, full bool, out func(*Event, *SetAside)) {
	if r.trust == nil {
		out(r.decide(x, full))
		return
	}
	r.step(x)
	if r.qhead == len(r.queue) && x.att.state != attPending {
		r.emit(x, full, out)
		return
	}
	d := r.newDeferred()
	*d = *x
	r.queue = append(r.queue, d)
	r.qbytes += len(d.m.Data)
	if l := d.att.ledger; d.att.leaf && (d.att.state == attPending || len(l.pending) > 0) {
		l.pending = append(l.pending, d)
	}
	r.drain(full, out)
	for len(r.queue)-r.qhead > maxDeferred || r.qbytes > maxDeferredBytes {
		r.verifyPending(r.queue[r.qhead].att.ledger)
		r.drain(full, out)
	}
}

// finish verifies one by one every attestation no checkpoint covered and
// hands out every verdict still waiting. The reader's trees are then
// final for the messages read.
func (r *Reader) finish(full bool, out func(*Event, *SetAside)) {
	if r.trust == nil {
		return
	}
	var todo []*prepared
	for _, l := range r.ledgers {
		n := len(todo)
		for _, d := range l.pending {
			if d.att.state == attPending {
				todo = append(todo, d)
			}
		}
		l.verified += uint64(len(todo) - n)
	}
	r.verifyAll(todo)
	for _, l := range r.ledgers {
		l.settle()
	}
	r.drain(full, out)
}

// emit decides x and hands out its verdict.
func (r *Reader) emit(x *prepared, full bool, out func(*Event, *SetAside)) {
	ev, aside := r.decide(x, full)
	if ev != nil && x.att.leaf {
		ev.leafOK, ev.leaf, ev.content = true, x.att.index, x.att.content
	}
	out(ev, aside)
}

// drain hands out the verdicts at the head of the queue that are known.
func (r *Reader) drain(full bool, out func(*Event, *SetAside)) {
	for r.qhead < len(r.queue) {
		d := r.queue[r.qhead]
		if d.att.state == attPending {
			break
		}
		r.queue[r.qhead] = nil
		r.qhead++
		r.qbytes -= len(d.m.Data)
		r.emit(d, full, out)
		*d = prepared{}
		r.free = append(r.free, d)
	}
	if r.qhead == len(r.queue) {
		r.queue, r.qhead = r.queue[:0], 0
	} else if r.qhead > 1024 && r.qhead > len(r.queue)/2 {
		n := copy(r.queue, r.queue[r.qhead:])
		clear(r.queue[n:])
		r.queue, r.qhead = r.queue[:n], 0
	}
}

func (r *Reader) newDeferred() *prepared {
	if n := len(r.free); n > 0 {
		d := r.free[n-1]
		r.free = r.free[:n-1]
		return d
	}
	return new(prepared)
}

// step is a trusting reader's stream-order work on x before its verdict:
// the record position, the leaf appended to the room's tree, a checkpoint
// checked against it.
func (r *Reader) step(x *prepared) {
	if x.subjErr != nil {
		return
	}
	l := r.ledgerOf(x.p.RoomID)
	x.att.ledger = l
	if l.refused != "" {
		x.att.state, x.att.reason = attRefused, l.refused
		return
	}
	switch x.p.Kind {
	case KindCheckpoint:
		r.stepCheckpoint(l, x)
		return
	case KindExecution:
		x.att.position = checkpoint.RecordPosition(l.execs)
		l.execs++
		if r.eager && x.att.state == attPending {
			r.checkAttestation(x)
		}
	}
	if x.att.checked {
		l.verified++
	}
	if x.att.state == attPending || x.att.state == attAdmitted {
		x.att.leaf, x.att.index = true, l.tree.Size()
		l.tree.Append(x.att.hash)
	}
}

// stepCheckpoint checks the checkpoint message x of l's room against the
// tree as read so far (issue 9's rules, in stream order): a trusted
// signature and the room as origin (prepare), a size no smaller than the
// previous checkpoint's and no larger than the leaves read, the tree's
// root at that size, a consistency proof from the previous checkpoint,
// and from the checkpoint an earlier read verified.
func (r *Reader) stepCheckpoint(l *ledger, x *prepared) {
	if x.att.ckptErr != nil {
		l.ckRefused++
		x.att.state, x.att.reason = attRefused, "the checkpoint is refused: "+x.att.ckptErr.Error()
		return
	}
	c := x.att.ckpt
	why := l.check(c)
	if why != "" && c.Size <= l.tree.Size() && (l.latest == nil || c.Size > l.latest.Size) && l.hasPending() {
		// Perhaps a leaf the publisher did not admit: verify the pending
		// attestations, rebuild without the bad ones, check again.
		r.verifyPending(l)
		why = l.check(c)
	}
	if why == "" && l.floor != nil && !l.floorOK && c.Size >= l.floor.Size {
		if err := l.consistent(l.floor, c); err != nil {
			why = fmt.Sprintf("rolled back or forked: this reader verified a checkpoint of size %d (root %s) before, and the checkpoint of size %d is not consistent with it: %v",
				l.floor.Size, hexRoot(l.floor.Root), c.Size, err)
			l.refused = fmt.Sprintf("the room is refused from stream seq %d on: %s", x.m.Seq, why)
		} else {
			l.floorOK = true
		}
	}
	if why != "" {
		l.ckRefused++
		x.att.state, x.att.reason = attRefused, "the checkpoint does not match the room: "+why
		return
	}
	l.accept(c, x.m.Seq)
	x.att.state = attAdmitted
	if r.onVerified != nil {
		r.onVerified(c)
	}
}

// check returns why c does not cover the room's tree as read, or "".
func (l *ledger) check(c *checkpoint.Checkpoint) string {
	if l.latest != nil && c.Size < l.latest.Size {
		return fmt.Sprintf("size %d is smaller than the previous checkpoint's, %d at stream seq %d", c.Size, l.latest.Size, l.latestSeq)
	}
	if c.Size > l.tree.Size() {
		return fmt.Sprintf("it covers %d messages, but only %d admitted messages of the room precede it", c.Size, l.tree.Size())
	}
	root, err := l.tree.RootAt(c.Size)
	if err != nil {
		return err.Error()
	}
	if root != c.Root {
		return fmt.Sprintf("root %s at size %d, but the room's admitted messages give %s", hexRoot(c.Root), c.Size, hexRoot(root))
	}
	if l.latest != nil {
		if err := l.consistent(l.latest, c); err != nil {
			return fmt.Sprintf("not consistent with the previous checkpoint (size %d at stream seq %d): %v", l.latest.Size, l.latestSeq, err)
		}
	}
	return ""
}

// consistent checks an RFC 6962 consistency proof, built from the tree,
// from old to c (c.Size >= old.Size, c.Size <= the tree's size).
func (l *ledger) consistent(old, c *checkpoint.Checkpoint) error {
	proof, err := l.tree.ConsistencyProof(old.Size, c.Size)
	if err != nil {
		return err
	}
	return checkpoint.VerifyConsistency(old.Size, c.Size, proof, old.Root, c.Root)
}

// accept makes c the room's latest verified checkpoint: every pending
// leaf it covers is admitted.
func (l *ledger) accept(c *checkpoint.Checkpoint, seq uint64) {
	l.latest, l.latestSeq = c, seq
	l.checkpoints++
	if t, ok := l.tree.(*leanTree); ok {
		// Later checks need no root or proof below c's size.
		if err := t.advance(c.Size); err != nil {
			panic("room: advance a room's tree: " + err.Error()) // c.Size <= the tree's size: checked
		}
	}
	for _, d := range l.pending {
		if d.att.index >= c.Size {
			break
		}
		if d.att.state == attPending {
			d.att.state = attAdmitted
			l.covered++
		}
	}
	l.trim()
}

func (l *ledger) hasPending() bool { return len(l.pending) > 0 }

// trim drops the leading pending leaves whose admission is known.
func (l *ledger) trim() {
	i := 0
	for i < len(l.pending) && l.pending[i].att.state != attPending {
		i++
	}
	if i == 0 {
		return
	}
	n := copy(l.pending, l.pending[i:])
	clear(l.pending[n:])
	l.pending = l.pending[:n]
}

// verifyPending verifies one by one every pending attestation of l's room,
// then settles the room.
func (r *Reader) verifyPending(l *ledger) {
	var todo []*prepared
	for _, d := range l.pending {
		if d.att.state == attPending {
			todo = append(todo, d)
		}
	}
	l.verified += uint64(len(todo))
	r.verifyAll(todo)
	l.settle()
}

// settle rebuilds the tree without the pending leaves just refused and
// trims.
func (l *ledger) settle() {
	first := -1
	for i, d := range l.pending {
		if d.att.state == attRefused {
			first = i
			break
		}
	}
	if first >= 0 {
		// The tree back to the first refused leaf, and the admitted ones
		// after it appended again, at their new indexes.
		if err := l.tree.Truncate(l.pending[first].att.index); err != nil {
			panic("room: truncate a room's tree: " + err.Error()) // index < size by construction
		}
		kept := l.pending[:first]
		for _, d := range l.pending[first:] {
			if d.att.state == attRefused {
				d.att.leaf = false
				continue
			}
			d.att.index = l.tree.Size()
			l.tree.Append(d.att.hash)
			kept = append(kept, d)
		}
		clear(l.pending[len(kept):])
		l.pending = kept
	}
	l.trim()
}

// verifyAll checks the attestations of xs (each attPending), on
// verifyWorkers goroutines when there are many.
func (r *Reader) verifyAll(xs []*prepared) {
	const perWorker = 64
	workers := min(verifyWorkers(), (len(xs)+perWorker-1)/perWorker)
	if workers <= 1 {
		for _, x := range xs {
			r.checkAttestation(x)
		}
		return
	}
	var wg sync.WaitGroup
	chunk := (len(xs) + workers - 1) / workers
	for from := 0; from < len(xs); from += chunk {
		part := xs[from:min(from+chunk, len(xs))]
		wg.Go(func() {
			for _, x := range part {
				r.checkAttestation(x)
			}
		})
	}
	wg.Wait()
}

func hexRoot(h [32]byte) string { return hex.EncodeToString(h[:]) }

// refusedAttestation is decide's set-aside for a message a trusting reader
// did not admit, or a checkpoint it refused.
func (r *Reader) refusedAttestation(x *prepared) *SetAside {
	var chain *events.ChainKey
	if x.p.Kind == KindJournal {
		key := x.p.Chain
		chain = &key
	}
	return r.aside(x.m, x.p, chain, []events.Problem{{Code: events.CheckpointMismatch, At: events.Location{Seq: x.m.Seq}, Reason: x.att.reason}})
}

// CheckpointFact is one signed checkpoint as a reader saw it.
type CheckpointFact struct {
	Size   uint64 `json:"size"`
	Root   string `json:"root"`   // lowercase hex of the RFC 6962 root
	Signer string `json:"signer"` // node id of the trusted key that signed it
	// Seq is the stream sequence of the checkpoint message (0: not read
	// from the stream).
	Seq uint64 `json:"stream_seq,omitempty"`
}

func factOf(c *checkpoint.Checkpoint, seq uint64) *CheckpointFact {
	if c == nil {
		return nil
	}
	return &CheckpointFact{Size: c.Size, Root: hexRoot(c.Root), Signer: c.Signer, Seq: seq}
}

// RoomCheckpoints is what a trusting reader verified of one room's
// attestations and checkpoints (issue 9).
type RoomCheckpoints struct {
	RoomID string `json:"room"`
	// Admitted is how many messages of the room carry a valid attestation
	// by a trusted publisher: the leaves of its tree.
	Admitted uint64 `json:"admitted"`
	// Checkpoints and CheckpointsRefused count the room's checkpoint
	// messages verified and set aside.
	Checkpoints        uint64 `json:"checkpoints_verified"`
	CheckpointsRefused uint64 `json:"checkpoints_refused,omitempty"`
	// Latest is the last verified checkpoint; Covered the admitted
	// messages it covers, Tail those after it, whose attestations were
	// verified one by one.
	Latest  *CheckpointFact `json:"latest,omitempty"`
	Covered uint64          `json:"covered"`
	Tail    uint64          `json:"tail"`
	// AttestationsVerified counts the signatures verified one by one;
	// AdmittedByCheckpoint the messages a covering checkpoint admitted
	// with no signature check of their own.
	AttestationsVerified uint64 `json:"attestations_verified"`
	AdmittedByCheckpoint uint64 `json:"admitted_by_checkpoint"`
	// Stored is the checkpoint an earlier read verified (state directory),
	// if any; StoredConsistent reports whether the room as read extends it.
	Stored           *CheckpointFact `json:"stored,omitempty"`
	StoredConsistent bool            `json:"stored_consistent,omitempty"`
	// External are the checkpoints obtained elsewhere (audit
	// --checkpoint) that the room as read is consistent with.
	External []CheckpointFact `json:"external,omitempty"`
	// Refused says why the room is refused (rolled back or forked).
	Refused string `json:"refused,omitempty"`
}

// facts summarises l.
func (l *ledger) facts() RoomCheckpoints {
	f := RoomCheckpoints{RoomID: l.roomID, Admitted: l.tree.Size(), Checkpoints: l.checkpoints, CheckpointsRefused: l.ckRefused,
		Latest: factOf(l.latest, l.latestSeq), Tail: l.tree.Size(), AttestationsVerified: l.verified, AdmittedByCheckpoint: l.covered,
		Stored: factOf(l.floor, 0), StoredConsistent: l.floor != nil && l.floorOK, External: l.external, Refused: l.refused}
	if l.latest != nil {
		f.Covered, f.Tail = l.latest.Size, l.tree.Size()-l.latest.Size
	}
	return f
}

// roomAside is a set-aside about a room rather than one message: Seq is
// the checkpoint message it concerns, or 0.
func roomAside(subjects Subjects, roomID string, seq uint64, reason string) *SetAside {
	p := events.Problem{Code: events.CheckpointMismatch, At: events.Location{Seq: seq}, Reason: reason}
	ref := events.NewRefusal([]events.Problem{p})
	return &SetAside{RoomID: roomID, Kind: KindCheckpoint, Seq: seq, Subject: subjects.Checkpoint(roomID),
		Code: ref.Code, Reason: ref.Reason, Problems: ref.Problems}
}

// rolledBack returns why l's room is rolled back, when an earlier read
// verified a larger checkpoint than any this read verified, or "".
func (l *ledger) rolledBack() string {
	if l.floor == nil || l.floorOK || l.refused != "" {
		return ""
	}
	newest := "no checkpoint of the room was verified"
	if l.latest != nil {
		newest = "the newest verified checkpoint has size " + strconv.FormatUint(l.latest.Size, 10)
	}
	return fmt.Sprintf("rolled back or forked: this reader verified a checkpoint of size %d (root %s) before; %s",
		l.floor.Size, hexRoot(l.floor.Root), newest)
}

// ledgerRooms returns the rooms with a ledger, sorted.
func (r *Reader) ledgerRooms() []string {
	ids := make([]string, 0, len(r.ledgers))
	for id := range r.ledgers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// checkExternal checks a checkpoint obtained elsewhere against its room as
// read (audit --checkpoint): signed by a trusted key, the room among those
// read, its size within the room's admitted messages, its root the tree's
// at that size, consistent with the room's latest verified checkpoint
// (a consistency proof from the smaller to the larger). It returns the
// set-aside that refuses it, or nil (and records it in the room's facts).
func (r *Reader) checkExternal(subjects Subjects, rooms []string, e ExternalCheckpoint) *SetAside {
	u, err := checkpoint.ParseUnverified(e.Note)
	if err != nil {
		return &SetAside{Kind: KindCheckpoint, Subject: e.Name, Code: events.CheckpointMismatch,
			Reason:   "checkpoint " + e.Name + ": " + err.Error(),
			Problems: []events.Problem{{Code: events.CheckpointMismatch, Reason: "checkpoint " + e.Name + ": " + err.Error()}}}
	}
	refuse := func(why string) *SetAside {
		return roomAside(subjects, u.Room, 0, "checkpoint "+e.Name+" (size "+strconv.FormatUint(u.Size, 10)+"): "+why)
	}
	c, err := checkpoint.Parse(e.Note, u.Room, r.trust)
	if err != nil {
		return refuse(err.Error())
	}
	if len(rooms) > 0 && !slices.Contains(rooms, c.Room) {
		return refuse("its room is not among the rooms audited")
	}
	l := r.ledgerOf(c.Room)
	if c.Size > l.tree.Size() {
		return refuse(fmt.Sprintf("the room as read has %d admitted messages: this copy of the room is behind the checkpoint, or forked", l.tree.Size()))
	}
	root, err := l.tree.RootAt(c.Size)
	if err != nil {
		return refuse(err.Error())
	}
	if root != c.Root {
		return refuse(fmt.Sprintf("forked: the room as read has root %s at size %d, the checkpoint %s", hexRoot(root), c.Size, hexRoot(c.Root)))
	}
	if l.latest != nil {
		old, now := c, l.latest
		if c.Size > l.latest.Size {
			old, now = l.latest, c
		}
		if err := l.consistent(old, now); err != nil {
			return refuse(fmt.Sprintf("not consistent with the room's checkpoint of size %d at stream seq %d: %v", l.latest.Size, l.latestSeq, err))
		}
	}
	l.external = append(l.external, *factOf(c, 0))
	return nil
}

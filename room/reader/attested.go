package reader

import (
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
)

// The read side of attestations and checkpoints (docs/checkpoints.md, "The
// readers: `--trusted-publisher`, `--state-dir`"). A reader that trusts
// publisher keys admits a room message only with a valid attestation by one of them, keeps each
// room's admitted messages as the leaves of an RFC 6962 tree
// (checkpoint.Tree) in stream order, and checks every checkpoint on the
// room's checkpoint subject against that tree when it reaches it in stream
// order. What is not admitted, and every checkpoint that does not cover
// the room as it says, is set aside as checkpoint_mismatch.
//
// A publisher signs each atomic batch (ADR-50) once: every message carries
// the batch's signature and its place in it ("i/n"), and the signature
// covers the statements of all n messages. An atomic batch is stored whole
// and contiguously, in index order, so a reader meets messages 0..n-1 of a
// batch at consecutive stream sequences. A reader follows the batch it is
// in the middle of by the rule the gate and the checkpointer follow too
// (checkpoint.BatchRun): any message that is not the batch's next one
// ends it, and a batch ended before its last message can never be whole,
// so its messages are refused at once ("incomplete batch: message i of
// n"); so are a message that claims a place in a batch without following
// its predecessor (a copied header) and, at the end of a read, the batch
// still open. Each room's tree and checkpoints are a checkpoint.Ledger,
// the checkpointer's rules.
//
// Optimistic verification (so that an audit meets its floor in `make bench`): a
// message whose header is well formed and names a trusted key becomes a
// leaf at once, its signature unchecked (attPending), and its verdict
// waits in the reader's queue. A verified checkpoint that covers it
// authenticates it (its signature and root bind every leaf: room, subject,
// content hash; stream order gives the position). When a checkpoint does
// not match, the pending attestations since the last verified checkpoint
// are verified batch by batch (checkpoint.(*Trust).VerifyBatch: one
// signature per batch), the bad ones refused, the tree rebuilt without
// them and the checkpoint checked again. Whatever no checkpoint covers at
// the end of a read, or once the queue is full, is verified batch by
// batch. Verdicts leave the queue in stream order, so they are those of a
// reader that verified every signature first. Follow's live delivery
// (eager) verifies each batch as soon as its last message arrives, and
// hands out none of its messages before; a batch still open once no
// message has come for idleFor is refused (idle).

// attState is what a trusting reader knows of a message's admission.
type attState uint8

const (
	attUnchecked attState = iota // the reader trusts no publisher key, or the message is no room message
	attPending                   // a leaf on the optimistic path: a trusted key named, the signature not checked yet
	attAdmitted                  // a leaf whose batch signature verified or that a verified checkpoint covers; a verified checkpoint
	attRefused                   // set aside as checkpoint_mismatch with reason
)

// attestation is a trusting reader's state of one message.
type attestation struct {
	state    attState
	checked  bool                   // decided by its batch's signature (state is then attAdmitted or attRefused)
	a        checkpoint.Attestation // the header, parsed (attPending and after)
	run      uint64                 // stream seq of message 0 of its batch, once a leaf
	leaf     bool                   // a leaf of its room's tree, at index
	index    uint64                 // leaf index, while leaf
	position string                 // checkpoint.JournalPosition or RecordPosition; "" when unknown
	content  [32]byte
	hash     [32]byte // checkpoint.LeafHash
	reason   string   // attRefused
	ledger   *ledger  // the room's, set in step

	// Checkpoint messages: the note, verified in prepare (nil with ckptErr).
	ckpt    *checkpoint.Checkpoint
	ckptErr error
}

// prepareAttestation is prepare's part for a trusting reader: the content
// and leaf hashes, the header's form and signer (trusted or not: the
// signature is checked later, per batch), the journal position (a
// record's position is only known in stream order, in step); for
// checkpoint messages the note's signature and origin. It reads only
// r.trust.
func (r *Reader) prepareAttestation(x *prepared) {
	m := &x.m
	if x.p.Kind == room.KindCheckpoint {
		x.att.ckpt, x.att.ckptErr = checkpoint.Parse(m.Data, x.p.RoomID, r.trust)
		return
	}
	if x.p.Kind == room.KindMarker {
		return // no leaf, no attestation: an index of the room's records
	}
	if x.p.Kind == room.KindNotice {
		// No leaf, no batch: its one attestation is checked here.
		x.signer, x.sigErr = r.trust.VerifyAttestation(m.Attestation, x.p.RoomID, m.Subject, checkpoint.NoticePosition, checkpoint.ContentHash(m.Data))
		return
	}
	x.att.content = checkpoint.ContentHash(m.Data)
	x.att.hash = checkpoint.LeafHash(x.p.RoomID, m.Subject, x.att.content)
	a, err := checkpoint.ParseAttestation(m.Attestation)
	if err == nil && !r.trust.Trusts(a.Signer) {
		_, err = r.trust.AttestationSigner(m.Attestation) // its wording of the untrusted key
	}
	if err != nil {
		x.att.state, x.att.reason = attRefused, attestationReason(err)
		return
	}
	if x.p.Kind == room.KindJournal {
		pos, ok := int64(0), false
		if x.e != nil {
			pos, ok = x.e.Seq()
		}
		if !ok {
			x.att.state, x.att.reason = attRefused, "the attestation cannot be verified: the message's chain position is unknown"
			return
		}
		x.att.position = checkpoint.OwnedJournalPosition(pos, m.Owner)
	}
	x.att.state, x.att.a = attPending, a
}

// attestationReason words a refused attestation.
func attestationReason(err error) string {
	if errors.Is(err, checkpoint.ErrNoAttestation) {
		return "the message has no " + checkpoint.AttestationHeader + " header: no trusted publisher admitted it"
	}
	return "the message was not admitted by a trusted publisher: " + err.Error()
}

// statement is what x's attestation says of it (x is a room message whose
// position is known).
func (x *prepared) statement() checkpoint.Statement {
	return checkpoint.Statement{Room: x.p.RoomID, Subject: x.m.Subject, Position: x.att.position, Content: x.att.content}
}

// runHolds reports whether the pending leaf d is a message of the open
// batch.
func (r *Reader) runHolds(d *prepared) bool {
	return r.run.Open() && d.att.ledger == r.runLedger && d.att.state == attPending && d.att.run == r.run.First()
}

// breakRun refuses the messages of the open batch, which can no longer
// be whole for the reason why, and closes it.
func (r *Reader) breakRun(why string) {
	if b, ok := r.run.Break(why); ok {
		r.refuseRun(b)
	}
}

// refuseRun refuses the messages of b, a batch that ended incomplete in
// r.runLedger's room, and settles the room.
func (r *Reader) refuseRun(b checkpoint.BrokenBatch) {
	l := r.runLedger
	r.runLedger = nil
	for _, d := range l.pending {
		if d.att.state == attPending && d.att.run == b.First {
			d.att.state, d.att.reason = attRefused, attestationReason(b.Err(d.att.a))
		}
	}
	l.settle()
}

// ledger is a trusting reader's state of one room: its tree of admitted
// messages and its checkpoints (checkpoint.Ledger: the rules), the leaves
// whose admission is still open, and what the audit report tells.
type ledger struct {
	*checkpoint.Ledger // a lean one, or a full one for readers that prove or compare old sizes

	roomID string
	execs  uint64 // messages read on the exec subject: the next record's position
	// pending holds the room's leaves from the first one still attPending
	// on, in stream order (so none of them is decided yet, and a rebuild
	// can append them again); empty when no leaf is pending.
	pending []*prepared
	// lead holds the statements of a batch's first messages that a
	// checkpoint covered while the rest of the batch still waits: its
	// signature covers them all.
	lead []leadMsg

	// refused, once set, refuses every later message of the room: it is
	// rolled back or forked.
	refused string

	external []CheckpointFact // checkpoints from elsewhere found consistent

	checkpoints uint64 // checkpoints verified
	ckRefused   uint64 // checkpoint messages refused
	verified    uint64 // messages decided by their batch's signature
	batches     uint64 // batch signatures checked
	covered     uint64 // leaves admitted by a covering checkpoint, unchecked
}

// leadMsg is a covered message of a batch whose other messages wait.
type leadMsg struct {
	run    uint64 // the batch's first stream seq
	header string
	st     checkpoint.Statement
}

// ledgerOf returns roomID's ledger, created on first use.
func (r *Reader) ledgerOf(roomID string) *ledger {
	l := r.ledgers[roomID]
	if l == nil {
		l = &ledger{roomID: roomID}
		if r.fullTrees {
			l.Ledger = checkpoint.NewFullLedger()
		} else {
			var err error
			if l.Ledger, err = checkpoint.NewBoundedLedger(r.leafBounds); err != nil {
				panic("room: bound a room's leaves: " + err.Error()) // leafBounds is the package's own
			}
		}
		r.ledgers[roomID] = l
	}
	return l
}

// Bounds of the optimistic queue: verdicts waiting for a checkpoint. Past
// either, the oldest waiting room's pending attestations are verified
// batch by batch (a publisher that writes checkpoints rarely, or none,
// costs speed, not memory). The batch still being read may hold the queue
// past them, up to maxHeldBytes of data, if it has at most maxHeldMsgs
// messages (nats-server's atomic batches hold at most 1,000 by default);
// a larger one is refused as incomplete once the queue holds more than
// maxHeldMsgs messages or heldBytes of data (where it was refused when
// the queue's own bounds were those: the same verdict and reason).
//
// A waiting verdict holds its message and its parsed entry (about 5 KB
// for a 600-byte entry), so the queue is most of an audit's live heap:
// 1,024 keeps it at a few MiB. A batch's signature costs one Ed25519
// check whether or not a checkpoint covers it first, so a shorter queue
// costs little speed (bench read row, docs/performance.md).
const (
	maxDeferred      = 1024
	maxDeferredBytes = 4 << 20
	maxHeldMsgs      = 8192
	heldBytes        = 32 << 20
	maxHeldBytes     = 8 * heldBytes
)

// feed decides x, which must come after every message fed before it in
// stream order, and hands its verdict to out (an event, a set-aside, or
// neither for a checkpoint message), now or, on the optimistic path, once
// its admission is known; verdicts always leave in stream order. full is
// decide's. finish hands out what is still waiting.
func (r *Reader) feed(x *prepared, full bool, out func(*Event, *SetAside)) {
	if r.trust == nil {
		ev, aside := r.decide(x, full)
		if aside != nil && r.onAside != nil {
			r.onAside(x, aside)
		}
		out(ev, aside)
		return
	}
	d := r.newDeferred()
	*d = *x
	r.step(d)
	if r.qhead == len(r.queue) && d.att.state != attPending {
		r.emit(d, full, out)
		r.recycle(d)
		return
	}
	r.queue = append(r.queue, d)
	r.qbytes += len(d.m.Data)
	r.drain(full, out)
	for len(r.queue)-r.qhead > maxDeferred || r.qbytes > maxDeferredBytes {
		head := r.queue[r.qhead]
		if r.runHolds(head) {
			// The head waits for the rest of its batch, which is still
			// being read.
			n := len(r.queue) - r.qhead
			if r.run.Attestation().Count <= maxHeldMsgs && r.qbytes <= maxHeldBytes || n <= maxHeldMsgs && r.qbytes <= heldBytes {
				break
			}
			r.breakRun(fmt.Sprintf("a reader holds back at most %d messages and %d MiB of a batch", maxHeldMsgs, maxHeldBytes>>20))
		} else {
			r.verifyLedger(head.att.ledger)
		}
		r.drain(full, out)
	}
}

// finish refuses the batch still open (the read ended before its last
// message), verifies batch by batch every attestation no checkpoint
// covered and hands out every verdict still waiting. The reader's trees
// are then final for the messages read.
func (r *Reader) finish(full bool, out func(*Event, *SetAside)) {
	if r.trust == nil {
		return
	}
	if r.run.Open() {
		r.breakRun("the read ended there")
	}
	r.verifyAllLedgers()
	r.drain(full, out)
}

// startLive ends Follow's rebuild and switches r to live delivery: every
// attestation of the rebuild no checkpoint covered is verified, its
// verdicts handed to out, except those of the batch still open, which may
// go on past the rebuild (its verdicts come out during live delivery, in
// stream order, before any live message's). It returns how many verdicts
// wait: that batch's messages. From here on a batch is verified as soon
// as its last message arrives, and a batch of more than maxRun messages
// is refused (Follow cannot hold so many unacknowledged).
func (r *Reader) startLive(maxRun int, out func(*Event, *SetAside)) int {
	r.eager, r.maxRun = true, maxRun
	if r.trust == nil {
		return 0
	}
	r.verifyAllLedgers()
	r.drain(false, out)
	return len(r.queue) - r.qhead
}

func (r *Reader) verifyAllLedgers() {
	for _, id := range r.ledgerRooms() {
		r.verifyLedger(r.ledgers[id])
	}
}

// emit decides x and hands out its verdict.
func (r *Reader) emit(x *prepared, full bool, out func(*Event, *SetAside)) {
	ev, aside := r.decide(x, full)
	if ev != nil && x.att.leaf {
		ev.leafOK, ev.leaf, ev.content = true, x.att.index, x.att.content
		ev.data, ev.attestation, ev.position = x.m.Data, x.m.Attestation, x.att.position
	}
	if aside != nil && r.onAside != nil {
		r.onAside(x, aside)
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
		r.recycle(d)
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

// recycle keeps d, whose verdict is out, for reuse.
func (r *Reader) recycle(d *prepared) {
	*d = prepared{}
	r.free = append(r.free, d)
}

// step is a trusting reader's stream-order work on x before its verdict:
// the batch it belongs to (ending the open one if x is not its next
// message), the record position, the leaf appended to the room's tree, a
// checkpoint checked against it; live, a batch verified once whole.
func (r *Reader) step(x *prepared) {
	var l *ledger
	if x.subjErr == nil {
		l = r.ledgerOf(x.p.RoomID)
		x.att.ledger = l
		if l.refused != "" {
			x.att.state, x.att.reason = attRefused, l.refused
		}
	}
	if x.att.state == attPending && r.maxRun > 0 && x.att.a.Count > r.maxRun {
		x.att.state, x.att.reason = attRefused, attestationReason(&checkpoint.IncompleteBatchError{A: x.att.a,
			Why: fmt.Sprintf("a batch of more than %d messages cannot be held back until it is whole", r.maxRun)})
	}
	roomID := ""
	if l != nil {
		roomID = l.roomID
	}
	bs := r.run.Next(x.m.Seq, roomID, x.att.a, x.att.state == attPending)
	if bs.Ended.Count() > 0 {
		r.refuseRun(bs.Ended)
	}
	if l == nil || l.refused != "" {
		return
	}
	switch x.p.Kind {
	case room.KindCheckpoint:
		r.stepCheckpoint(l, x)
		return
	case room.KindNotice, room.KindMarker:
		return
	case room.KindExecution:
		x.att.position = checkpoint.RecordPosition(l.execs)
		l.execs++
	}
	if x.att.state != attPending {
		return
	}
	switch bs.Place {
	case checkpoint.Stray:
		x.att.state, x.att.reason = attRefused, attestationReason(bs.Err(x.att.a))
		return
	case checkpoint.Opens:
		r.runLedger = l
	}
	x.att.run = bs.First
	x.att.leaf, x.att.index = true, l.Append(x.att.hash)
	l.pending = append(l.pending, x)
	if r.eager && (bs.Place == checkpoint.Alone || bs.Place == checkpoint.Completes) {
		r.verifyLedger(l)
	}
}

// idleFor is how long Follow's live delivery waits for the rest of an
// open batch: one fetch that brings nothing (jetstream.FetchMaxWait).
// An atomic batch is stored whole, within moments (a message of one may
// be delivered while the rest are being stored), so once the server has
// had nothing more to deliver for that long, and the stream leader holds
// nothing more on the followed subjects, the batch cannot be whole.
const idleFor = time.Second

// openBatch returns the stream seq of the last message read of the batch
// still open, if one is.
func (r *Reader) openBatch() (last uint64, open bool) { return r.run.Last(), r.run.Open() }

// idle tells a live reader that no message came for idleFor: the batch
// still open is refused, and the verdicts it held handed out.
func (r *Reader) idle(out func(*Event, *SetAside)) {
	if r.trust == nil || !r.run.Open() {
		return
	}
	r.breakRun(fmt.Sprintf("no message came for %v after it", idleFor))
	r.drain(true, out)
}

// stepCheckpoint checks the checkpoint message x of l's room against the
// tree as read so far, by the rules of checkpoint.(*Ledger).Check, in
// stream order: a trusted signature and the room as origin (prepare), a
// size no smaller than the previous checkpoint's and no larger than the
// leaves read, consistent with the previous checkpoint and the tree's root
// at its size, and consistent with the checkpoint an earlier read verified.
// A message that is not a checkpoint of the room signed by a trusted
// publisher is set aside and leaves the room as it was: the next checkpoint
// is checked against the last verified one (docs/secure-mode.md,
// "Checkpoints and leases").
func (r *Reader) stepCheckpoint(l *ledger, x *prepared) {
	if x.att.ckptErr != nil {
		l.ckRefused++
		x.att.state, x.att.reason = attRefused, notCheckpointReason+x.att.ckptErr.Error()
		return
	}
	c := x.att.ckpt
	err := l.Check(c)
	if latest, _ := l.Latest(); errors.Is(err, checkpoint.ErrCheckpointMismatch) && c.Size <= l.Size() && (latest == nil || c.Size > latest.Size) && l.hasPending() {
		// Perhaps a leaf the publisher did not admit: verify the pending
		// attestations, rebuild without the bad ones, check again.
		r.verifyLedger(l)
		err = l.Check(c)
	}
	if err == nil && l.coversCopy(c) {
		// c cannot tell which of two messages with one leaf hash it
		// covers; a reader that checked every signature first would have
		// refused the one whose attestation does not verify, and so does
		// this one.
		r.verifyLedger(l)
		err = l.Check(c)
	}
	if errors.Is(err, checkpoint.ErrLeafSpill) && r.leafFail == nil {
		// Not a verdict: the leaves to check c against are lost. The
		// readers stop before handing it out.
		r.leafFail = fmt.Errorf("%w: room %s: %w", ErrReader, l.roomID, err)
	}
	if errors.Is(err, checkpoint.ErrRolledBack) {
		l.refused = fmt.Sprintf("the room is refused from stream seq %d on: %v", x.m.Seq, err)
	}
	if err != nil {
		l.ckRefused++
		x.att.state, x.att.reason = attRefused, "the checkpoint does not match the room: "+err.Error()
		return
	}
	l.accept(c, x.m.Seq)
	x.att.state = attAdmitted
	if r.onVerified != nil {
		r.onVerified(c)
	}
}

// notCheckpointReason starts the reason of a message set aside on a
// checkpoint subject because it is not a checkpoint of the room signed by
// a trusted publisher; the error follows.
const notCheckpointReason = "not a checkpoint of the room signed by a trusted publisher (set aside; the room's checkpoints are checked without it): "

// accept makes c the room's latest verified checkpoint
// (checkpoint.(*Ledger).Accept): every pending leaf it covers is
// admitted. When c ends inside a batch whose later messages still wait,
// the statements of the messages it covers are kept (lead): that batch's
// signature covers them too.
func (l *ledger) accept(c *checkpoint.Checkpoint, seq uint64) {
	if err := l.Accept(c, seq); err != nil {
		panic("room: accept a room's checkpoint: " + err.Error()) // Check passed
	}
	l.checkpoints++
	var cut *prepared // the first leaf c does not cover
	for _, d := range l.pending {
		if d.att.index >= c.Size {
			cut = d
			break
		}
	}
	keep := cut != nil && cut.att.state == attPending && cut.att.a.Index > 0
	if !keep || len(l.lead) > 0 && l.lead[0].run != cut.att.run {
		l.lead = nil
	}
	for _, d := range l.pending {
		if d.att.index >= c.Size {
			break
		}
		if d.att.state == attPending {
			if keep && d.att.run == cut.att.run {
				l.lead = append(l.lead, leadMsg{run: d.att.run, header: d.m.Attestation, st: d.statement()})
			}
			d.att.state = attAdmitted
			l.covered++
		}
	}
	l.trim()
}

func (l *ledger) hasPending() bool { return len(l.pending) > 0 }

// coversCopy reports whether c, which matches the tree, would admit
// unchecked a pending leaf whose hash a leaf after c's size has too. A
// leaf binds room, subject and content, not the message's attestation: a
// copy of a genuine message under a header naming a trusted key, stored
// before the genuine one, takes the genuine one's place in the tree, and
// a checkpoint the publisher signed over the genuine one matches it. The
// genuine message is then a leaf after c's size, read before c. Only the
// leaves after c's size are compared with the covered ones: few, as a
// publisher writes a checkpoint soon after what it covers.
func (l *ledger) coversCopy(c *checkpoint.Checkpoint) bool {
	if l.Size() <= c.Size {
		return false
	}
	var after map[[32]byte]bool
	var few [8][32]byte
	n := 0
	for _, d := range l.pending {
		if d.att.index < c.Size {
			continue
		}
		if n < len(few) {
			few[n] = d.att.hash
		} else {
			if after == nil {
				after = make(map[[32]byte]bool, 2*len(few))
				for _, h := range few {
					after[h] = true
				}
			}
			after[d.att.hash] = true
		}
		n++
	}
	for _, d := range l.pending {
		if d.att.index >= c.Size {
			break
		}
		if d.att.state != attPending {
			continue
		}
		if after != nil {
			if after[d.att.hash] {
				return true
			}
			continue
		}
		for _, h := range few[:n] {
			if h == d.att.hash {
				return true
			}
		}
	}
	return false
}

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

// batchCheck is one batch whose signature is to be checked: the
// statements of its first messages a checkpoint covered (lead), then its
// pending messages.
type batchCheck struct {
	lead    []leadMsg
	members []*prepared
	err     error
}

// verifyLedger verifies the signature of every batch of l's room with
// pending messages, but the one still being read, and settles the room:
// each batch's messages admitted or refused together.
func (r *Reader) verifyLedger(l *ledger) {
	var checks []*batchCheck
	for i := 0; i < len(l.pending); {
		d := l.pending[i]
		if d.att.state != attPending {
			i++
			continue
		}
		j := i + 1
		for j < len(l.pending) && l.pending[j].att.state == attPending && l.pending[j].att.run == d.att.run {
			j++
		}
		if !r.runHolds(d) {
			c := &batchCheck{members: l.pending[i:j]}
			if len(l.lead) > 0 && l.lead[0].run == d.att.run {
				c.lead = l.lead
				l.lead = nil
			}
			checks = append(checks, c)
		}
		i = j
	}
	r.checkBatches(checks)
	for _, c := range checks {
		l.batches++
		l.verified += uint64(len(c.members))
		for _, d := range c.members {
			d.att.checked = true
			if c.err != nil {
				d.att.state, d.att.reason = attRefused, attestationReason(c.err)
			} else {
				d.att.state = attAdmitted
			}
		}
	}
	l.settle()
}

// checkBatches checks the signatures of cs, on verifyWorkers goroutines
// when they hold many messages.
func (r *Reader) checkBatches(cs []*batchCheck) {
	n := 0
	for _, c := range cs {
		n += len(c.lead) + len(c.members)
	}
	const perWorker = 256
	workers := min(verifyWorkers(), len(cs), (n+perWorker-1)/perWorker)
	if workers <= 1 {
		for _, c := range cs {
			r.checkBatch(c)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(cs)); i = next.Add(1) - 1 {
				r.checkBatch(cs[i])
			}
		})
	}
	wg.Wait()
}

// checkBatch checks one batch's signature over all its statements
// (checkpoint.(*Trust).VerifyBatch).
func (r *Reader) checkBatch(c *batchCheck) {
	n := len(c.lead) + len(c.members)
	if a := c.members[0].att.a; n != a.Count {
		// Not reached: a batch is checked once read whole (step ends the
		// others), with the statements a checkpoint covered in its lead.
		c.err = &checkpoint.IncompleteBatchError{A: a, Why: fmt.Sprintf("%d of its messages were read", n)}
		return
	}
	headers := make([]string, 0, n)
	stmts := make([]checkpoint.Statement, 0, n)
	for _, m := range c.lead {
		headers, stmts = append(headers, m.header), append(stmts, m.st)
	}
	for _, d := range c.members {
		headers, stmts = append(headers, d.m.Attestation), append(stmts, d.statement())
	}
	_, c.err = r.trust.VerifyBatch(headers, stmts)
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
		if err := l.Truncate(l.pending[first].att.index); err != nil {
			panic("room: truncate a room's tree: " + err.Error()) // index < size by construction
		}
		kept := l.pending[:first]
		for _, d := range l.pending[first:] {
			if d.att.state == attRefused {
				d.att.leaf = false
				continue
			}
			d.att.index = l.Append(d.att.hash)
			kept = append(kept, d)
		}
		clear(l.pending[len(kept):])
		l.pending = kept
	}
	l.trim()
}

func hexRoot(h [32]byte) string { return hex.EncodeToString(h[:]) }

// refusedAttestation is decide's set-aside for a message a trusting reader
// did not admit, or a checkpoint it refused.
func (r *Reader) refusedAttestation(x *prepared) *SetAside {
	var chain *events.ChainKey
	if x.p.Kind == room.KindJournal {
		key := x.p.Chain
		chain = &key
		// The chain's next entry, not in the room: the gap a later entry
		// finds names it.
		if pos, ok := seqOf(x.e); ok {
			switch c := r.chains[key]; {
			case c != nil:
				if c.unadmitted == 0 && pos == c.cv.Next() {
					c.unadmitted = x.m.Seq
				}
			case pos == 0 && r.unadmitted[key] == 0:
				if r.unadmitted == nil {
					r.unadmitted = map[events.ChainKey]uint64{}
				}
				r.unadmitted[key] = x.m.Seq
			}
		}
	}
	return r.aside(x.m, x.p, chain, []events.Problem{{Code: events.CheckpointMismatch, At: events.Location{Seq: x.m.Seq}, Reason: x.att.reason}})
}

// seqOf is e's chain position, if e is an entry that claims one.
func seqOf(e *events.Entry) (int64, bool) {
	if e == nil {
		return 0, false
	}
	return e.Seq()
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
// attestations and checkpoints.
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
	// verified batch by batch.
	Latest  *CheckpointFact `json:"latest,omitempty"`
	Covered uint64          `json:"covered"`
	Tail    uint64          `json:"tail"`
	// AttestationsVerified counts the messages whose attestation was
	// checked against its batch's signature (admitted or refused by it),
	// BatchesVerified those signatures (one Ed25519 check per batch);
	// AdmittedByCheckpoint the messages a covering checkpoint admitted
	// with no signature check of their own.
	AttestationsVerified uint64 `json:"attestations_verified"`
	BatchesVerified      uint64 `json:"batches_verified"`
	AdmittedByCheckpoint uint64 `json:"admitted_by_checkpoint"`
	// LeavesSpilled counts the leaf hashes after the latest checkpoint
	// the reader wrote to its temporary file (more than it keeps in
	// memory waited for a checkpoint), LeavesReread those it read back
	// to check checkpoints behind them or to rebuild the tree
	// (checkpoint.LeafBounds).
	LeavesSpilled uint64 `json:"leaves_spilled,omitempty"`
	LeavesReread  uint64 `json:"leaves_reread,omitempty"`
	// LeavesSpillFailed says why leaves could not be written to that file
	// (it could not be made, the disk is full): from then on the room's
	// leaves stay in memory. The verdicts are the same; the bound on the
	// audit's memory is gone.
	LeavesSpillFailed string `json:"leaves_spill_failed,omitempty"`
	// Stored is the checkpoint an earlier read verified (state directory),
	// if any; StoredConsistent reports whether the room as read extends it.
	Stored           *CheckpointFact `json:"stored,omitempty"`
	StoredConsistent bool            `json:"stored_consistent,omitempty"`
	// External are the checkpoints obtained elsewhere (audit
	// --checkpoint) that the room as read is consistent with.
	External []CheckpointFact `json:"external,omitempty"`
	// Refused says why the room is refused (rolled back or forked).
	Refused string `json:"refused,omitempty"`
	// Witnessed is the room's largest checkpoint that a deployment log
	// checkpoint with the witness quorum covers (AuditOptions.Witnessing).
	Witnessed *RoomWitness `json:"witnessed,omitempty"`
}

// facts summarises l.
func (l *ledger) facts() RoomCheckpoints {
	latest, seq := l.Latest()
	kept, extended := l.Kept()
	f := RoomCheckpoints{RoomID: l.roomID, Admitted: l.Size(), Checkpoints: l.checkpoints, CheckpointsRefused: l.ckRefused,
		Latest: factOf(latest, seq), Tail: l.Size(), AttestationsVerified: l.verified, BatchesVerified: l.batches, AdmittedByCheckpoint: l.covered,
		Stored: factOf(kept, 0), StoredConsistent: kept != nil && extended, External: l.external, Refused: l.refused}
	if latest != nil {
		f.Covered, f.Tail = latest.Size, l.Size()-latest.Size
	}
	st := l.LeafStats()
	f.LeavesSpilled, f.LeavesReread = st.Spilled, st.Reread
	if st.WriteErr != nil {
		f.LeavesSpillFailed = st.WriteErr.Error()
	}
	return f
}

// leafErr returns why a room's spilled leaves could not be read back, if
// they could not: its checkpoints' verdicts after that are unknown.
func (r *Reader) leafErr() error {
	if r.leafFail != nil {
		return r.leafFail
	}
	for _, id := range r.ledgerRooms() {
		if err := r.ledgers[id].LeafStats().ReadErr; err != nil {
			return fmt.Errorf("%w: room %s: %w", ErrReader, id, err)
		}
	}
	return nil
}

// closeLedgers removes the rooms' files of spilled leaves.
func (r *Reader) closeLedgers() {
	for _, l := range r.ledgers {
		l.Close()
	}
}

// roomAside is a set-aside about a room rather than one message: Seq is
// the checkpoint message it concerns, or 0.
func roomAside(subjects room.Subjects, roomID string, seq uint64, reason string) *SetAside {
	p := events.Problem{Code: events.CheckpointMismatch, At: events.Location{Seq: seq}, Reason: reason}
	ref := events.NewRefusal([]events.Problem{p})
	return &SetAside{RoomID: roomID, Kind: room.KindCheckpoint, Seq: seq, Subject: subjects.Checkpoint(roomID),
		Code: ref.Code, Reason: ref.Reason, Problems: ref.Problems}
}

// rolledBack returns why l's room is rolled back, when an earlier read
// verified a larger checkpoint than any this read verified
// (checkpoint.(*Ledger).RolledBack), or "".
func (l *ledger) rolledBack() string {
	if l.refused != "" {
		return ""
	}
	if err := l.RolledBack(); err != nil {
		return err.Error()
	}
	return ""
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
// read, then checkpoint.(*Ledger).CheckOther: its size within the room's
// admitted messages, its root the tree's at that size, consistent with the
// room's latest verified checkpoint (a consistency proof from the smaller
// to the larger). It returns the
// set-aside that refuses it, or nil (and records it in the room's facts).
func (r *Reader) checkExternal(subjects room.Subjects, rooms []string, e ExternalCheckpoint) *SetAside {
	u, err := checkpoint.ParseUnverified(e.Note)
	if err != nil {
		return &SetAside{Kind: room.KindCheckpoint, Subject: e.Name, Code: events.CheckpointMismatch,
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
	if err := l.CheckOther(c); err != nil {
		// A trusted checkpoint the room as read contradicts: the room
		// is forked or rolled back here, so its newest checkpoint is
		// not kept in the state as verified (a later audit of the same
		// history would pass the state's check, one of the other be
		// refused).
		a := refuse(err.Error())
		if l.refused == "" {
			l.refused = a.Reason
		}
		return a
	}
	l.external = append(l.external, *factOf(c, 0))
	return nil
}

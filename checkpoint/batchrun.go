package checkpoint

import (
	"fmt"
	"strconv"
)

// BatchRun follows, in stream order, the atomic batch a reader of the
// stream is in the middle of: the one rule by which the gate, the
// checkpointer and the readers reassemble batches (docs/checkpoints.md,
// "The readers: `--trusted-publisher`, `--state-dir`"). An atomic batch
// (ADR-50) is stored whole, in order, at consecutive stream sequences, so
// its messages 0..n-1 are met one after the other. Hence:
//
//   - message 0 of a batch of n > 1 opens it; a batch of one is whole at
//     once;
//   - the open batch's next message (same room, signer, signature and
//     size, the next index, the next stream sequence) joins it, and its
//     last message makes it whole;
//   - any other message ends the open batch, which can then never be
//     whole: its messages are refused (IncompleteBatchError);
//   - a message that claims place i > 0 without joining the open batch is
//     refused (a copied header, or a batch not stored whole).
//
// Stream sequences must grow from call to call; messages the caller does
// not see (other subjects) may lie between them, and a gap ends the open
// batch as any other message does, so the verdicts do not depend on which
// subjects are read. A BatchRun keeps no messages (its callers hold them),
// allocates nothing, and is not safe for concurrent use. The zero value has
// no batch open.
type BatchRun struct {
	room        string
	a           Attestation // message 0's
	first, last uint64      // stream seqs of the messages read
	next        int         // the next index; 0: none open
	prev        uint64      // the stream seq of the last message given
	// gone is a batch read after a place of it that was not read: its
	// later messages are refused for that reason.
	gone goneRun
}

// goneRun is the batch a BatchRun reads after places of it that were not
// read; zero when none.
type goneRun struct {
	room string
	a    Attestation // the last message's
	last uint64      // its stream seq
	why  string
}

// Place is where BatchRun.Next puts a message.
type Place uint8

const (
	// NotMember: the message is no attested member of a batch (none was
	// given); it ends the open batch, if any.
	NotMember Place = iota
	// Alone: a batch of one, whole.
	Alone
	// Opens: message 0 of a batch of more than one; the batch is open.
	Opens
	// Joins: the open batch's next message; the batch is still open.
	Joins
	// Completes: the open batch's last message; the batch is whole and
	// closed.
	Completes
	// Stray: a place i > 0 claimed without following message i-1: the
	// message is refused (BatchStep.Err).
	Stray
)

// BatchStep is what BatchRun.Next decided of one message.
type BatchStep struct {
	Place Place
	// First is the stream seq of message 0 of the message's batch (Alone,
	// Opens, Joins, Completes).
	First uint64
	// Ended is the batch that was open before the message and that the
	// message ended incomplete (Ended.Count() > 0): refuse its messages.
	Ended BrokenBatch
	why   string // a Stray's, when more is known than its place
}

// Err is the refusal of a Stray message with attestation a; nil for the
// other places.
func (s BatchStep) Err(a Attestation) error {
	if s.Place != Stray {
		return nil
	}
	if s.why != "" {
		return &IncompleteBatchError{A: a, Why: s.why}
	}
	return &IncompleteBatchError{A: a, Why: "the message before it on the stream is not message " + strconv.Itoa(a.Index-1) +
		" of that batch: a copied header, or a batch not stored whole"}
}

// notRead says that messages from to to of a batch (whose: "it", "its
// batch"), at stream seqs fromSeq to toSeq, were not read, where a batch
// stored whole keeps them.
func notRead(whose string, from, to int, fromSeq, toSeq uint64) string {
	if from == to {
		return fmt.Sprintf("message %d of %s, at stream seq %d, was not read (the store lost it, or the message there is not of this batch)", from, whose, fromSeq)
	}
	return fmt.Sprintf("messages %d to %d of %s, at stream seqs %d to %d, were not read (the store lost them, or the messages there are not of this batch)", from, to, whose, fromSeq, toSeq)
}

// BrokenBatch is a batch that ended before its last message: its messages
// 0 to Count()-1, at stream seqs First to Last, were read; it can never be
// whole.
type BrokenBatch struct {
	A           Attestation // message 0's
	Room        string
	First, Last uint64
	why         string
}

// Count is the number of messages of the batch read; 0 for no batch.
func (b BrokenBatch) Count() int {
	if b.why == "" {
		return 0
	}
	return int(b.Last-b.First) + 1
}

// Holds reports whether the message at stream seq is one of the batch's.
func (b BrokenBatch) Holds(seq uint64) bool {
	return b.why != "" && b.First <= seq && seq <= b.Last
}

// Err is the refusal of the batch's message whose attestation is a
// (ErrIncompleteBatch, wrapped).
func (b BrokenBatch) Err(a Attestation) error {
	return &IncompleteBatchError{A: a, Why: b.why}
}

// IncompleteBatchError is the refusal of a message whose atomic batch was
// not read whole, at consecutive stream sequences; it wraps
// ErrIncompleteBatch.
type IncompleteBatchError struct {
	A   Attestation // the message's
	Why string      // what was read instead
}

// Error names the message's place in its batch, its signer and what was
// read instead.
func (e *IncompleteBatchError) Error() string {
	return fmt.Sprintf("%v: message %d of a batch of %d by %s: %s (an atomic batch is stored whole, its messages consecutive)",
		ErrIncompleteBatch, e.A.Index, e.A.Count, e.A.Signer, e.Why)
}

// Unwrap returns ErrIncompleteBatch, for errors.Is.
func (e *IncompleteBatchError) Unwrap() error { return ErrIncompleteBatch }

// Open reports whether a batch is open.
func (b *BatchRun) Open() bool { return b.next > 0 }

// Attestation is message 0's attestation of the open batch.
func (b *BatchRun) Attestation() Attestation { return b.a }

// Room is the open batch's room.
func (b *BatchRun) Room() string { return b.room }

// First and Last are the stream seqs of the open batch's first and last
// messages read.
func (b *BatchRun) First() uint64 { return b.first }

// Last: see First.
func (b *BatchRun) Last() uint64 { return b.last }

// Read is how many messages of the open batch were read.
func (b *BatchRun) Read() int { return b.next }

// Next places the message at stream seq, of roomID: with member, an
// attested message whose attestation a is well formed and names a trusted
// key (its signature is its caller's to check, once the batch is whole);
// without, any other message (no or a refused attestation, a checkpoint, a
// message of no room). seq must be greater than every seq given before.
func (b *BatchRun) Next(seq uint64, roomID string, a Attestation, member bool) BatchStep {
	var s BatchStep
	prev := b.prev
	b.prev = seq
	if g := &b.gone; g.why != "" {
		if member && seq == g.last+1 && a.Index == g.a.Index+1 && a.SameBatch(g.a) && roomID == g.room {
			// A later message of a batch read after a gap in it.
			s.Place, s.why = Stray, g.why
			g.a, g.last = a, seq
			if a.Index == a.Count-1 {
				*g = goneRun{}
			}
			return s
		}
		*g = goneRun{}
	}
	if b.next > 0 {
		if member && seq == b.last+1 && a.Index == b.next && a.SameBatch(b.a) && roomID == b.room {
			b.next++
			b.last = seq
			s.First = b.first
			if b.next == b.a.Count {
				s.Place = Completes
				b.close()
			} else {
				s.Place = Joins
			}
			return s
		}
		if member && a.Index > b.next && seq-b.last == uint64(a.Index-b.next)+1 && a.SameBatch(b.a) && roomID == b.room {
			// Exactly the stream seqs of the places between are missing.
			s.Place, s.why = Stray, notRead("its batch", b.next, a.Index-1, b.last+1, seq-1)
			s.Ended = b.end("the next message read, stream seq " + strconv.FormatUint(seq, 10) + ", is message " + strconv.Itoa(a.Index) + ": " +
				notRead("it", b.next, a.Index-1, b.last+1, seq-1))
			b.gone = goneRun{room: roomID, a: a, last: seq, why: s.why}
			return s
		}
		s.Ended = b.end("the next message, stream seq " + strconv.FormatUint(seq, 10) + ", is not message " + strconv.Itoa(b.next) + " of it")
	}
	switch {
	case !member:
		s.Place = NotMember
	case a.Count == 1:
		s.Place, s.First = Alone, seq
	case a.Index == 0:
		s.Place, s.First = Opens, seq
		b.room, b.a, b.first, b.last, b.next = roomID, a, seq, seq, 1
	default:
		s.Place = Stray
		if uint64(a.Index) < seq && prev < seq-uint64(a.Index) {
			// Nothing was read where its batch's places before it are.
			s.why = notRead("its batch", 0, a.Index-1, seq-uint64(a.Index), seq-1)
			b.gone = goneRun{room: roomID, a: a, last: seq, why: s.why}
		}
	}
	return s
}

// close forgets the open batch.
func (b *BatchRun) close() {
	b.room, b.a, b.first, b.last, b.next = "", Attestation{}, 0, 0, 0
}

// Break ends the open batch incomplete for the reason why (what came
// instead of its next message: "the read ended there") and returns it; ok
// is false when none is open.
func (b *BatchRun) Break(why string) (ended BrokenBatch, ok bool) {
	if b.next == 0 {
		return BrokenBatch{}, false
	}
	return b.end(why), true
}

func (b *BatchRun) end(why string) BrokenBatch {
	e := BrokenBatch{A: b.a, Room: b.room, First: b.first, Last: b.last,
		why: fmt.Sprintf("only messages 0 to %d of it were read, at stream seqs %d to %d, and %s", b.next-1, b.first, b.last, why)}
	b.close()
	return e
}

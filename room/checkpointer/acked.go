package checkpointer

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/room"
)

// Expect implements AttestationSink: the gate of this process is about to
// send msgs, one attested batch. Its messages are vouched for when read
// (checkpoint.BatchCollector.Vouch) with the signature its last header
// carries; a batch whose last header carries none, or another size, is
// not a batch the gate makes and is left to be verified, and so is one by
// a key the checkpointer does not trust (a gate wired to another key's
// checkpointer: what it would refuse read from the stream).
func (c *Checkpointer) Expect(msgs []room.StoredMsg) {
	a, last, ok := c.ownBatch(msgs)
	if !ok {
		return
	}
	c.own.add(msgs, &a.Sig)
	c.acked.expect(last)
}

// ownBatch returns the header of the last attested message of msgs, and
// its attestation, when msgs' attested messages (those with a header: a
// record's markers have none) are one whole batch, signed by a key the
// checkpointer trusts.
func (c *Checkpointer) ownBatch(msgs []room.StoredMsg) (a checkpoint.Attestation, last string, ok bool) {
	n := 0
	for _, m := range msgs {
		if m.Header != "" {
			n, last = n+1, m.Header
		}
	}
	if n == 0 {
		return checkpoint.Attestation{}, "", false
	}
	a, err := checkpoint.ParseAttestation(last)
	return a, last, err == nil && a.Signed && a.Count == n && c.trust.Trusts(a.Signer)
}

// Unstored implements AttestationSink: the batch of header was refused,
// so follow does not wait for its acknowledgement at a gap.
func (c *Checkpointer) Unstored(header string) { c.acked.unstored(header) }

// Stored implements AttestationSink: the gate's messages Expect announced
// are stored from stream sequence first on. They are taken from memory as
// leaves, unchecked, only when they are a whole batch by a trusted key;
// else they are read from the stream and verified.
func (c *Checkpointer) Stored(first uint64, msgs []room.StoredMsg) {
	if len(msgs) > 0 {
		c.sawUpTo(first + uint64(len(msgs)) - 1)
	}
	if _, _, ok := c.ownBatch(msgs); !ok {
		msgs = nil
	}
	c.acked.stored(first, msgs)
}

// sawUpTo notes that the stream holds messages up to seq.
func (c *Checkpointer) sawUpTo(seq uint64) {
	for {
		old := c.seen.Load()
		if seq <= old || c.seen.CompareAndSwap(old, seq) {
			return
		}
	}
}

// ackedOwn is what the gate told of its own messages: the batches the
// server stored, each whole (an atomic batch is stored at consecutive
// stream sequences; a record or a one-by-one append is a batch of one),
// and the batches announced and not acknowledged yet (acknowledgements
// arrive out of order: several batches are in flight). A batch is kept
// whole or not at all: follow takes it from memory whole or reads it from
// the stream whole, since its attestation covers all its messages and a
// part read alone goes to the batch collector incomplete and is refused.
type ackedOwn struct {
	mu sync.Mutex
	// batches holds the kept batches by the stream sequence of their
	// first message; kept counts their messages, at most max.
	batches map[uint64][]room.StoredMsg
	kept    int
	max     int
	// floor is follow's next stream sequence: a batch that starts below
	// it was read from the stream (or by the catch-up read) meanwhile.
	floor    uint64
	skipped  atomic.Uint64        // batches told and not taken from memory (no room, or read)
	inflight map[string]time.Time // batch (header without "i/n") -> when announced
	wake     chan struct{}        // a batch was stored
	expects  atomic.Uint64        // Expect calls so far
}

// ackedMax bounds the messages ackedOwn keeps: beyond it (a reader that
// does not keep up) a batch is not kept, and is read instead, whole.
const ackedMax = 1 << 16

// ckGapWait is how long follow waits, at a gap in the gate's own stored
// messages, for batches announced before the gap was seen to be
// acknowledged, before it reads the gap (reading early is safe: what it
// reads is handled as the catch-up read handles it). ckIdlePoll is how
// often it looks for others' messages when it has nothing to read;
// ckOwnWait how long it waits for the gate's next acknowledgement after
// one it took from memory.
const (
	ckOwnWait  = 5 * time.Millisecond
	ckGapWait  = time.Second
	ckIdlePoll = 50 * time.Millisecond
)

// init makes a's maps, with the cap at ackedMax.
func (a *ackedOwn) init() {
	a.batches, a.max = map[uint64][]room.StoredMsg{}, ackedMax
	a.inflight, a.wake = map[string]time.Time{}, make(chan struct{}, 1)
}

// expect notes the batch of an attestation the gate is about to send as
// in flight (a gap is not read before its acknowledgement, for a while).
func (a *ackedOwn) expect(header string) {
	batch, ok := signedBatch(header)
	if !ok {
		return // not the batch's last message: that one names the batch
	}
	a.expects.Add(1)
	a.mu.Lock()
	if _, ok := a.inflight[batch]; !ok {
		a.inflight[batch] = time.Now()
	}
	a.mu.Unlock()
}

// stored keeps msgs, one batch stored from stream sequence first on,
// whole if it fits under max and follow has not passed first; else not at
// all.
func (a *ackedOwn) stored(first uint64, msgs []room.StoredMsg) {
	a.mu.Lock()
	for _, m := range msgs {
		if batch, ok := signedBatch(m.Header); ok {
			delete(a.inflight, batch)
		}
	}
	switch {
	case len(msgs) == 0:
	case first < a.floor || a.kept+len(msgs) > a.max:
		a.skipped.Add(1)
	default:
		a.batches[first] = msgs
		a.kept += len(msgs)
	}
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// unstored forgets the batch of header as in flight: it was refused.
func (a *ackedOwn) unstored(header string) {
	if batch, ok := signedBatch(header); ok {
		a.mu.Lock()
		delete(a.inflight, batch)
		a.mu.Unlock()
	}
}

// take returns and forgets the batch that starts at stream sequence seq,
// if one is kept; follow goes on after it.
func (a *ackedOwn) take(seq uint64) ([]room.StoredMsg, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	b, ok := a.batches[seq]
	if ok {
		delete(a.batches, seq)
		a.kept -= len(b)
		a.floor = seq + uint64(len(b))
	}
	return b, ok
}

// advance tells that follow read the stream up to before seq: the kept
// batches that start below it were read (whole, or their first part and
// so the rest too) and are forgotten, and so are those told later.
func (a *ackedOwn) advance(seq uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if seq <= a.floor {
		return
	}
	// Every kept batch starts at floor or later: look up the sequences
	// passed, or scan the map if it is the shorter.
	if seq-a.floor <= uint64(len(a.batches)) {
		for s := a.floor; s < seq; s++ {
			a.forget(s)
		}
	} else {
		for s := range a.batches {
			if s < seq {
				a.forget(s)
			}
		}
	}
	a.floor = seq
}

// forget drops the batch kept at seq, if any. a.mu is held.
func (a *ackedOwn) forget(seq uint64) {
	if b, ok := a.batches[seq]; ok {
		delete(a.batches, seq)
		a.kept -= len(b)
		a.skipped.Add(1)
	}
}

// nextKept returns the first stream sequence of the first batch kept
// after seq, if any.
func (a *ackedOwn) nextKept(seq uint64) (uint64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	first, ok := uint64(0), false
	for s := range a.batches {
		if s > seq && (!ok || s < first) {
			first, ok = s, true
		}
	}
	return first, ok
}

// waiting reports whether a batch announced no later than since is still
// unacknowledged and younger than gapWait; it forgets older ones (never
// stored, or acknowledged to nobody).
func (a *ackedOwn) waiting(since, now time.Time, gapWait time.Duration) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	wait := false
	for b, at := range a.inflight {
		switch {
		case now.Sub(at) >= gapWait:
			delete(a.inflight, b)
		case !at.After(since):
			wait = true
		}
	}
	return wait
}

// ownAttestations holds the attestations the gate made and the reader has
// not seen yet, by message (subject and content hash), each with its
// position and its batch's signature, in two generations: the older one
// is dropped when the newer has grown by ownGeneration messages or a
// minute has passed, so an attestation whose message never landed costs
// memory only for a while. A message found here, stored at the position
// announced (its attestation signs room, subject, position and content),
// is vouched for with its batch's signature
// (checkpoint.BatchCollector.Vouch); its batch is admitted without a
// signature check only when every message of it was, with the signature
// the batch's last message carries. So a batch whose messages were partly
// dropped meanwhile, one the gate announced twice (a retried append of
// the same entries), or messages of two announced batches stored as one
// (in the compact form their unsigned headers are alike) have the
// signature verified instead: it costs time, never a verdict.
type ownAttestations struct {
	mu       sync.Mutex
	cur, old map[ownKey]ownRef
	since    time.Time
}

// ownKey names one message the gate attested.
type ownKey struct {
	subject string
	content [32]byte
}

// ownRef is what the gate attested for one message: its header, its
// position, and its batch's signature (shared by the batch's messages).
type ownRef struct {
	header, position string
	sig              *[64]byte
}

const (
	ownGeneration    = 1 << 16
	ownGenerationAge = time.Minute
)

// signedBatch returns the batch an attestation header names by its
// signature ("<node id> <sig>", the header without its "i/n"), when it
// carries one: a batch's last message does in both of the header's forms
// (checkpoint.AttestationHeader), so every batch has one such header.
func signedBatch(header string) (string, bool) {
	sp := strings.LastIndexByte(header, ' ')
	if sp < 0 || strings.IndexByte(header[:sp], ' ') < 0 {
		return "", false
	}
	return header[:sp], true
}

func (o *ownAttestations) add(msgs []room.StoredMsg, sig *[64]byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cur == nil {
		o.cur, o.since = make(map[ownKey]ownRef), time.Now()
	}
	if len(o.cur) >= ownGeneration || time.Since(o.since) > ownGenerationAge {
		o.old, o.cur, o.since = o.cur, make(map[ownKey]ownRef), time.Now()
	}
	for _, m := range msgs {
		o.cur[ownKey{m.Subject, m.Content}] = ownRef{m.Header, m.Position, sig}
	}
}

// take reports whether the gate attested exactly this header for content
// on subject, and with which position and batch signature, and forgets
// it.
func (o *ownAttestations) take(content [32]byte, subject, header string) (r ownRef, ok bool) {
	k := ownKey{subject, content}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, m := range []map[ownKey]ownRef{o.cur, o.old} {
		if r, ok := m[k]; ok {
			if r.header != header {
				return ownRef{}, false
			}
			delete(m, k)
			return r, true
		}
	}
	return ownRef{}, false
}

// at reports whether a message the gate announced at position r.position
// is stored at the position its statement has there: a record at
// position (its place on the exec subject, as read), a journal entry
// with owner (its Roompub-Owner header; the entry's seq, the rest of its
// position, is in its content, which the announcement names). A message
// announced without a position is at none.
func (r ownRef) at(kind room.Kind, position, owner string) bool {
	if r.position == "" {
		return false
	}
	if kind == room.KindJournal {
		o, ok := checkpoint.JournalPositionOwner(r.position)
		return ok && o == owner
	}
	return r.position == position
}

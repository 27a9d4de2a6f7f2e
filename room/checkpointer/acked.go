package checkpointer

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/room"
)

// Expect implements AttestationSink: the gate of this process is about to
// send a message on subject with this attestation and content hash.
func (c *Checkpointer) Expect(subject, header string, content [32]byte) {
	c.own.add(content, subject, header)
	c.acked.expect(header)
}

// Unstored implements AttestationSink: the batch of header was refused,
// so follow does not wait for its acknowledgement at a gap.
func (c *Checkpointer) Unstored(header string) { c.acked.unstored(header) }

// Stored implements AttestationSink: the gate's messages Expect announced
// are stored from stream sequence first on.
func (c *Checkpointer) Stored(first uint64, msgs []room.StoredMsg) {
	if len(msgs) > 0 {
		c.sawUpTo(first + uint64(len(msgs)) - 1)
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
	batch, _, _, ok := splitOwn(header)
	if !ok {
		return
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
		if batch, _, _, ok := splitOwn(m.Header); ok {
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
	if batch, _, _, ok := splitOwn(header); ok {
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
// not seen yet, by batch (the header without its "i/n" suffix), in two
// generations: the older one is dropped when the newer has grown by
// ownGeneration messages or a minute has passed, so an attestation whose
// message never landed costs memory only for a while (a batch seen later
// than that has its signature verified instead). A batch the reader has
// begun to take is never dropped: its messages are stored together, so
// the rest follow, and a batch is admitted as the gate's own whole or not
// at all (a part of a batch cannot be verified on its own).
type ownAttestations struct {
	mu       sync.Mutex
	cur, old map[string]*ownBatch
	curSize  int // messages expected in cur
	since    time.Time
}

// ownBatch is one batch the gate attested: members[i] is message i.
type ownBatch struct {
	members []ownAttestation
	taken   int
}

type ownAttestation struct {
	subject string
	content [32]byte
	set     bool
}

const (
	ownGeneration    = 1 << 16
	ownGenerationAge = time.Minute
)

// splitOwn splits an attestation header the gate made into its batch
// ("<node id> <sig>"), index and count.
func splitOwn(header string) (batch string, index, count int, ok bool) {
	sp := strings.LastIndexByte(header, ' ')
	if sp < 0 {
		return "", 0, 0, false
	}
	is, ns, ok := strings.Cut(header[sp+1:], "/")
	i, err1 := strconv.Atoi(is)
	n, err2 := strconv.Atoi(ns)
	if !ok || err1 != nil || err2 != nil || i < 0 || i >= n || n > checkpoint.MaxBatch {
		return "", 0, 0, false
	}
	return header[:sp], i, n, true
}

func (o *ownAttestations) add(content [32]byte, subject, header string) {
	batch, i, n, ok := splitOwn(header)
	if !ok {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cur == nil {
		o.cur, o.since = make(map[string]*ownBatch), time.Now()
	}
	b := o.cur[batch]
	if b == nil {
		b = o.old[batch]
	}
	if b == nil {
		if o.curSize >= ownGeneration || time.Since(o.since) > ownGenerationAge {
			o.rotate()
		}
		b = &ownBatch{members: make([]ownAttestation, n)}
		o.cur[batch] = b
		o.curSize += n
	}
	if len(b.members) == n {
		b.members[i] = ownAttestation{subject: subject, content: content, set: true}
	}
}

// rotate drops the old generation but for the batches begun.
func (o *ownAttestations) rotate() {
	next := make(map[string]*ownBatch)
	size := 0
	for k, b := range o.old {
		if b.taken > 0 {
			next[k] = b
			size += len(b.members)
		}
	}
	o.old, o.cur, o.curSize, o.since = o.cur, next, size, time.Now()
}

// take reports whether the gate attested exactly this header for content
// on subject, and forgets it.
func (o *ownAttestations) take(content [32]byte, subject, header string) bool {
	batch, i, n, ok := splitOwn(header)
	if !ok {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, m := range []map[string]*ownBatch{o.cur, o.old} {
		b := m[batch]
		if b == nil || len(b.members) != n {
			continue
		}
		if a := b.members[i]; !a.set || a.subject != subject || a.content != content {
			return false
		}
		b.members[i] = ownAttestation{}
		if b.taken++; b.taken == n {
			delete(m, batch)
		}
		return true
	}
	return false
}

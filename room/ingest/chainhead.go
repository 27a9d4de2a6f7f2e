package ingest

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/jsapi"
)

// Attestations on the gate's side: with a publisher key, a chain's head is its
// last entry that a trusted publisher attested. A message a forger put
// straight on the chain's subject (raw, or with a header copied from
// another message) is not the head, so the genuine next entry is still
// decided, attested and stored (after the forgery, which readers refuse).

// statementOf is what the attestation of a journal message m states: its
// room and subject, its position (checkpoint.EntryPosition: its entry's
// seq and owner), its content hash. ok is false for a message that is no
// entry of a room's journal.
func (g *Gate) statementOf(m *jetstream.RawStreamMsg) (checkpoint.Statement, bool) {
	p, err := g.subjects.Parse(m.Subject)
	if err != nil || p.Kind != room.KindJournal {
		return checkpoint.Statement{}, false
	}
	pos, err := checkpoint.EntryPosition(m.Data, m.Header.Get(room.HeaderOwner))
	if err != nil {
		return checkpoint.Statement{}, false
	}
	return checkpoint.Statement{Room: p.RoomID, Subject: m.Subject, Position: pos, Content: checkpoint.ContentHash(m.Data)}, true
}

// admittedHead returns the last admitted entry of the chain up to last, the
// last message on its subjects (nil when there is none): last itself when
// its batch verifies, else the result of a scan, in stream order, of the
// messages after c's head (an admitted entry) or from the start. cut
// reports that the scan found a batch cut short (ErrIncompleteBatch): a
// store that lost a message it still counts (a damaged block, its state
// file kept) looks so, and only the chain's positions tell it from a
// forgery (judgeLoss).
func (g *Gate) admittedHead(ctx context.Context, key events.ChainKey, c *chainState, last *jetstream.RawStreamMsg) (head *jetstream.RawStreamMsg, cut bool, err error) {
	ok, err := g.lastAdmitted(ctx, key, last)
	if err != nil || ok {
		return last, false, err
	}
	var from uint64 // c's head is admitted (reload and stored keep it so)
	if c.roomID != "" && c.streamSeq < last.Sequence {
		from = c.streamSeq
	}
	var forged int
	if r := c.read; from == 0 && r != nil && r.scan != nil && r.to == last.Sequence {
		head, forged, cut = r.scan.head, r.scan.refused, r.scan.cut // read whole already (lastReadable)
	} else if head, forged, cut, err = g.scanAdmitted(ctx, key, from, last.Sequence); err != nil {
		return nil, false, err
	}
	if head == nil && from > 0 {
		head, err = g.leaderMsg(ctx, map[string]any{"seq": from})
		if err != nil {
			return nil, false, err
		}
	}
	headSeq := uint64(0)
	if head != nil {
		headSeq = head.Sequence
	}
	if forged == 0 && headSeq == last.Sequence {
		return head, false, nil // the last message's batch was not read whole at first (a lagging replica)
	}
	g.log.Warn("messages on a chain's subject that no trusted publisher attested: the chain goes on after its last admitted entry",
		zap.String("chain", key.RunID+"/"+key.CapsuleID), zap.Uint64("head_stream_seq", headSeq), zap.Uint64("last_stream_seq", last.Sequence),
		zap.Int("not_admitted", forged), zap.Bool("batch_cut", cut))
	return head, cut, nil
}

// lastAdmitted reports whether m, the last message on the chain's subjects,
// is an admitted entry: its attestation names a trusted publisher as the
// last message of its batch, and that batch, read from the stream sequence
// its place puts message 0 at, is whole and verifies (a BatchCollector:
// the readers' rule).
func (g *Gate) lastAdmitted(ctx context.Context, key events.ChainKey, m *jetstream.RawStreamMsg) (bool, error) {
	a, err := checkpoint.ParseAttestation(checkpoint.AttestationOf(m.Header))
	if err != nil || !g.trust.Trusts(a.Signer) || a.Index != a.Count-1 || uint64(a.Index) >= m.Sequence {
		return false, nil
	}
	bc := checkpoint.NewBatchCollector(g.trust)
	add := func(mm *jetstream.RawStreamMsg) []checkpoint.BatchVerdict {
		st, ok := g.statementOf(mm)
		if !ok {
			return bc.Pass(mm.Sequence)
		}
		return bc.Add(mm.Sequence, checkpoint.AttestationOf(mm.Header), st)
	}
	if a.Count > 1 {
		// Messages before m that a verdict is reached for are not of
		// m's batch (or a lagging replica left one out): m's verdict
		// tells.
		if err := g.readRange(ctx, g.subjects.ChainAnyRoom(key), m.Sequence-uint64(a.Index), m.Sequence-1, func(mm *jetstream.RawStreamMsg) { add(mm) }); err != nil {
			return false, err
		}
	}
	for _, v := range add(m) {
		if v.ID == m.Sequence {
			return v.Err == nil, nil
		}
	}
	return false, nil
}

// readRange calls each with the messages on subj (wildcards allowed) from
// stream sequence from up to to, in stream order, read by direct batch gets
// of up to 1,000 (a lagging replica may answer with fewer: the caller
// decides what a short read means).
func (g *Gate) readRange(ctx context.Context, subj string, from, to uint64, each func(*jetstream.RawStreamMsg)) error {
	for from <= to {
		gctx, cancel := context.WithTimeout(ctx, g.timeout)
		msgs, err := jsapi.DirectBatch(gctx, g.nc, g.streamName(),
			jsapi.BatchRequest{Seq: from, NextBySubj: subj, Batch: int(min(to-from+1, 1000))}, g.timeout)
		cancel()
		if errors.Is(err, nats.ErrNoResponders) {
			return g.readRangeLeader(ctx, subj, from, to, each)
		}
		if err != nil {
			return fmt.Errorf("read %s from stream seq %d: %w", subj, from, err)
		}
		got := 0
		for _, m := range msgs {
			if m.Seq > to {
				break
			}
			each(m.Raw())
			from = m.Seq + 1
			got++
		}
		if got == 0 {
			return nil
		}
	}
	return nil
}

// readChain reads subj from stream sequence from up to to: start, then
// each message in stream order, then whole, which says whether the read
// found all it must. A direct get may be answered by a replica that lags
// behind the stream (a follower cut off from the leader, say): when the
// read falls short, it is read again, from start, from the stream leader,
// whose answer stands.
func (g *Gate) readChain(ctx context.Context, subj string, from, to uint64, start func(), each func(*jetstream.RawStreamMsg), whole func() bool) error {
	start()
	if err := g.readRange(ctx, subj, from, to, each); err != nil {
		return err
	}
	if whole() {
		return nil
	}
	start()
	if err := g.readRangeLeader(ctx, subj, from, to, each); err != nil {
		return err
	}
	whole()
	return nil
}

// readRangeLeader is readRange from the stream leader, one message get
// at a time (next_by_subj): for a stream that answers no direct get
// (allow_direct off, or replicas not answering yet), as lastOn falls back.
func (g *Gate) readRangeLeader(ctx context.Context, subj string, from, to uint64, each func(*jetstream.RawStreamMsg)) error {
	for from <= to {
		m, err := g.leaderMsg(ctx, map[string]any{"seq": from, "next_by_subj": subj})
		if err != nil {
			return fmt.Errorf("read %s from stream seq %d: %w", subj, from, err)
		}
		if m == nil || m.Sequence > to {
			return nil
		}
		each(m)
		from = m.Sequence + 1
	}
	return nil
}

// scanAdmitted reads the messages on the chain's subjects after stream
// sequence from up to to, in stream order, from the stream leader, and
// returns the last one that is an admitted entry (nil if none), how many
// were not, and whether any of those was refused as a member of a batch
// cut short (ErrIncompleteBatch).
func (g *Gate) scanAdmitted(ctx context.Context, key events.ChainKey, from, to uint64) (_ *jetstream.RawStreamMsg, refused int, cut bool, _ error) {
	s := g.newAdmittedScan()
	subj := g.subjects.ChainAnyRoom(key)
	for after := from; after < to; {
		m, err := g.leaderMsg(ctx, map[string]any{"seq": after + 1, "next_by_subj": subj})
		if err != nil {
			return nil, 0, false, fmt.Errorf("read chain %s after stream seq %d: %w", subj, after, err)
		}
		if m == nil || m.Sequence > to {
			break
		}
		after = m.Sequence
		s.add(m)
	}
	s.finish()
	return s.head, s.refused, s.cut, nil
}

// admittedScan finds the last admitted entry among a chain's messages
// given in stream order (scanAdmitted; lastReadable's whole read): each
// batch is judged as the readers judge it (checkpoint.BatchCollector).
type admittedScan struct {
	g       *Gate
	bc      *checkpoint.BatchCollector
	held    map[uint64]*jetstream.RawStreamMsg
	head    *jetstream.RawStreamMsg
	refused int  // messages that are no admitted entry
	cut     bool // one of them was refused as a member of a batch cut short
}

func (g *Gate) newAdmittedScan() *admittedScan {
	return &admittedScan{g: g, bc: checkpoint.NewBatchCollector(g.trust), held: map[uint64]*jetstream.RawStreamMsg{}}
}

// add takes m, the next message in stream order.
func (s *admittedScan) add(m *jetstream.RawStreamMsg) {
	st, ok := s.g.statementOf(m)
	if !ok {
		s.refused++
		s.take(s.bc.Pass(m.Sequence))
		return
	}
	s.held[m.Sequence] = m
	s.take(s.bc.Add(m.Sequence, checkpoint.AttestationOf(m.Header), st))
}

// finish judges the batches still open: the read is over.
func (s *admittedScan) finish() { s.take(s.bc.Flush()) }

func (s *admittedScan) take(vs []checkpoint.BatchVerdict) {
	for _, v := range vs {
		m := s.held[v.ID]
		delete(s.held, v.ID)
		if v.Err != nil {
			s.refused++
			s.cut = s.cut || errors.Is(v.Err, checkpoint.ErrIncompleteBatch)
		} else if s.head == nil || m.Sequence > s.head.Sequence {
			s.head = m
		}
	}
}

// Resent lines: a line for a position below the chain's head is decided
// on the entry the stream holds there (Gate.resent). The gate keeps no
// list of a chain's entries: it finds that one entry in the stream
// (docs/design.md, "Resent lines").

// storedEntry is what the stream holds at one chain position: the
// Nats-Msg-Id of its message (the gate sets it to entry_hash), a copy,
// and its stream sequence.
type storedEntry struct {
	hash string
	seq  uint64
}

// maxSeekProbes bounds the gets of seekEntry's search, which takes about
// log2 of the head's stream sequence on a chain the gate stored.
const maxSeekProbes = 64

// entryAt returns what the chain holds at position pos, below c.next: the
// pos-th message on its subject in stream order (with a publisher key,
// the pos-th admitted entry). It reads a few messages, not the chain
// (seekEntry); a chain the search cannot vouch for is read through
// (scanEntry, scanAdmittedEntry), keeping that position alone.
func (g *Gate) entryAt(ctx context.Context, c *chainState, key events.ChainKey, pos int64) (storedEntry, error) {
	subj := g.subjects.Journal(c.roomID, key)
	if at, ok, err := g.seekEntry(ctx, c, subj, pos); err != nil || ok {
		return at, err
	}
	if g.trust != nil {
		return g.scanAdmittedEntry(ctx, c, key, pos)
	}
	return g.scanEntry(ctx, c, subj, pos)
}

// seekEntry finds the chain's entry at pos without reading the chain: a
// binary search, by direct gets, over the stream sequences up to the
// head's for the message on subj that claims seq pos (the gate stores the
// chain's n-th message with seq n), then the server's counts of the
// messages on subj (a batch direct get's Nats-Num-Pending) place it: pos
// messages before it, c.next-1 before the head, none added to subj
// between the two counts from it. ok is false when any of that fails (a
// message written around the gate, a replica that lags or answers no
// direct get): the chain is read instead. With a publisher key only a
// chain whose subject holds no message after its head is searched: then
// its c.next messages are its admitted entries (a trusted publisher
// attests seq n only after n admitted entries).
func (g *Gate) seekEntry(ctx context.Context, c *chainState, subj string, pos int64) (storedEntry, bool, error) {
	if g.trust != nil && c.lastSeq != c.streamSeq {
		return storedEntry{}, false, nil
	}
	var found *jsapi.Msg
	lo, hi := uint64(1), c.streamSeq
	for probe := 0; found == nil; probe++ {
		if lo > hi || probe == maxSeekProbes {
			return storedEntry{}, false, nil
		}
		mid := lo + (hi-lo)/2
		m, err := g.directGet(ctx, map[string]any{"seq": mid, "next_by_subj": subj})
		if err != nil || m == nil {
			return storedEntry{}, false, err // nil: not even the head (a replica that lags)
		}
		if m.Seq > hi { // nothing on subj from mid to hi
			hi = mid - 1
			continue
		}
		switch _, s := events.LineSeq(m.Data); {
		case s < 0:
			return storedEntry{}, false, nil
		case s == pos:
			found = m
		case s < pos:
			lo = m.Seq + 1
		default: // nothing on subj between mid and m
			hi = mid - 1
		}
	}
	var from, head, all, again uint64
	var err error
	for _, q := range []struct {
		n   *uint64
		seq uint64
	}{{&from, found.Seq}, {&head, c.streamSeq}, {&all, 1}, {&again, found.Seq}} {
		if *q.n, err = g.countFrom(ctx, subj, q.seq); err != nil || *q.n == 0 {
			return storedEntry{}, false, err
		}
	}
	if from != again || all-from != uint64(pos) || all-head != uint64(c.next-1) {
		return storedEntry{}, false, nil
	}
	return storedEntry{hash: strings.Clone(found.Header.Get(jetstream.MsgIDHeader)), seq: found.Seq}, true, nil
}

// directGet is one direct get (jsapi.DirectGet) bounded by the gate's
// timeout, counted in entryReads; a stream no replica answers direct gets
// for is nil, nil (the caller reads from the leader).
func (g *Gate) directGet(ctx context.Context, req any) (*jsapi.Msg, error) {
	g.countReads(1)
	dctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	m, err := jsapi.DirectGet(dctx, g.nc, g.streamName(), req)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, nil
	}
	return m, err
}

// countFrom returns how many messages subj holds at or after stream
// sequence seq, as the replica that answers a batch direct get of one
// message counts them, when its first one is at seq itself (seq 1: any);
// 0 otherwise, or when no replica answers direct gets.
func (g *Gate) countFrom(ctx context.Context, subj string, seq uint64) (uint64, error) {
	g.countReads(1)
	msgs, err := jsapi.DirectBatch(ctx, g.nc, g.streamName(), jsapi.BatchRequest{Seq: seq, NextBySubj: subj, Batch: 1}, g.timeout)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return 0, nil
	case err != nil:
		return 0, err
	case len(msgs) != 1 || (seq > 1 && msgs[0].Seq != seq):
		return 0, nil
	}
	return msgs[0].Pending + 1, nil
}

// countReads adds n to GateOptions.entryReads, when set.
func (g *Gate) countReads(n uint64) {
	if g.entryReads != nil {
		g.entryReads.Add(n)
	}
}

// scanEntry is entryAt without a publisher key, by reading the chain's
// messages up to its head, as the gate did before seekEntry: the pos-th
// message on subj (it reads from the stream leader when a replica's copy
// falls short: readChain).
func (g *Gate) scanEntry(ctx context.Context, c *chainState, subj string, pos int64) (storedEntry, error) {
	var n int64
	var at storedEntry
	// Every entry up to the head is at or below the head's stream sequence.
	err := g.readChain(ctx, subj, 1, max(c.lastSeq, c.streamSeq), func() {
		n, at = 0, storedEntry{}
	}, func(m *jetstream.RawStreamMsg) {
		g.countReads(1)
		if n == pos {
			at = storedEntry{hash: strings.Clone(m.Header.Get(jetstream.MsgIDHeader)), seq: m.Sequence}
		}
		n++
	}, func() bool { return n >= c.next })
	if err != nil {
		return storedEntry{}, fmt.Errorf("read chain %s: %w", subj, err)
	}
	if n < c.next {
		return storedEntry{}, fmt.Errorf("read chain %s: %d of %d entries found: %w", subj, n, c.next, errShortChain)
	}
	return at, nil
}

// scanAdmittedEntry is scanEntry with a publisher key: only admitted
// entries take a chain position, so a message no trusted publisher
// attested (a forged copy of an entry, say) does not shift them. It reads
// the chain's messages whole (their attestations sign their content) up to
// c.lastSeq; the verdicts come in stream order (a batch is verified whole,
// batches do not interleave).
func (g *Gate) scanAdmittedEntry(ctx context.Context, c *chainState, key events.ChainKey, pos int64) (storedEntry, error) {
	var bc *checkpoint.BatchCollector
	var held map[uint64]storedEntry
	var admitted int64
	var at storedEntry
	take := func(vs []checkpoint.BatchVerdict) {
		for _, v := range vs {
			if s, ok := held[v.ID]; ok && v.Err == nil {
				if admitted == pos {
					at = s
				}
				admitted++
			}
			delete(held, v.ID)
		}
	}
	subj := g.subjects.Journal(c.roomID, key)
	err := g.readChain(ctx, subj, 1, c.lastSeq, func() {
		bc, held, admitted, at = checkpoint.NewBatchCollector(g.trust), map[uint64]storedEntry{}, 0, storedEntry{}
	}, func(m *jetstream.RawStreamMsg) {
		g.countReads(1)
		if st, ok := g.statementOf(m); ok {
			held[m.Sequence] = storedEntry{strings.Clone(m.Header.Get(jetstream.MsgIDHeader)), m.Sequence}
			take(bc.Add(m.Sequence, checkpoint.AttestationOf(m.Header), st))
		} else {
			take(bc.Pass(m.Sequence))
		}
	}, func() bool {
		take(bc.Flush())
		return admitted >= c.next
	})
	if err != nil {
		return storedEntry{}, fmt.Errorf("read chain %s: %w", subj, err)
	}
	if admitted < c.next {
		return storedEntry{}, fmt.Errorf("read chain %s: %d of %d admitted entries found: %w", subj, admitted, c.next, errShortChain)
	}
	return at, nil
}

package ingest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

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
// messages after c's head (an admitted entry) or from the start.
func (g *Gate) admittedHead(ctx context.Context, key events.ChainKey, c *chainState, last *jetstream.RawStreamMsg) (*jetstream.RawStreamMsg, error) {
	ok, err := g.lastAdmitted(ctx, key, last)
	if err != nil || ok {
		return last, err
	}
	var from uint64 // c's head is admitted (reload and stored keep it so)
	if c.roomID != "" && c.streamSeq < last.Sequence {
		from = c.streamSeq
	}
	head, forged, err := g.scanAdmitted(ctx, key, from, last.Sequence)
	if err != nil {
		return nil, err
	}
	if head == nil && from > 0 {
		head, err = g.leaderMsg(ctx, map[string]any{"seq": from})
		if err != nil {
			return nil, err
		}
	}
	headSeq := uint64(0)
	if head != nil {
		headSeq = head.Sequence
	}
	if forged == 0 && headSeq == last.Sequence {
		return head, nil // the last message's batch was not read whole at first (a lagging replica)
	}
	g.log.Warn("messages on a chain's subject that no trusted publisher attested: the chain goes on after its last admitted entry",
		zap.String("chain", key.RunID+"/"+key.CapsuleID), zap.Uint64("head_stream_seq", headSeq), zap.Uint64("last_stream_seq", last.Sequence), zap.Int("not_admitted", forged))
	return head, nil
}

// lastAdmitted reports whether m, the last message on the chain's subjects,
// is an admitted entry: its attestation names a trusted publisher as the
// last message of its batch, and that batch, read from the stream sequence
// its place puts message 0 at, is whole and verifies (a BatchCollector:
// the readers' rule).
func (g *Gate) lastAdmitted(ctx context.Context, key events.ChainKey, m *jetstream.RawStreamMsg) (bool, error) {
	a, err := checkpoint.ParseAttestation(m.Header.Get(checkpoint.AttestationHeader))
	if err != nil || !g.trust.Trusts(a.Signer) || a.Index != a.Count-1 || uint64(a.Index) >= m.Sequence {
		return false, nil
	}
	bc := checkpoint.NewBatchCollector(g.trust)
	add := func(mm *jetstream.RawStreamMsg) []checkpoint.BatchVerdict {
		st, ok := g.statementOf(mm)
		if !ok {
			return bc.Pass(mm.Sequence)
		}
		return bc.Add(mm.Sequence, mm.Header.Get(checkpoint.AttestationHeader), st)
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
// returns the last one that is an admitted entry (nil if none) and how
// many were not.
func (g *Gate) scanAdmitted(ctx context.Context, key events.ChainKey, from, to uint64) (*jetstream.RawStreamMsg, int, error) {
	bc := checkpoint.NewBatchCollector(g.trust)
	held := map[uint64]*jetstream.RawStreamMsg{}
	var head *jetstream.RawStreamMsg
	refused := 0
	take := func(vs []checkpoint.BatchVerdict) {
		for _, v := range vs {
			m := held[v.ID]
			delete(held, v.ID)
			if v.Err != nil {
				refused++
			} else if head == nil || m.Sequence > head.Sequence {
				head = m
			}
		}
	}
	subj := g.subjects.ChainAnyRoom(key)
	for after := from; after < to; {
		m, err := g.leaderMsg(ctx, map[string]any{"seq": after + 1, "next_by_subj": subj})
		if err != nil {
			return nil, 0, fmt.Errorf("read chain %s after stream seq %d: %w", subj, after, err)
		}
		if m == nil || m.Sequence > to {
			break
		}
		after = m.Sequence
		st, ok := g.statementOf(m)
		if !ok {
			refused++
			take(bc.Pass(m.Sequence))
			continue
		}
		held[m.Sequence] = m
		take(bc.Add(m.Sequence, m.Header.Get(checkpoint.AttestationHeader), st))
	}
	take(bc.Flush())
	return head, refused, nil
}

// loadAdmittedHashes is loadHashes with a publisher key: only admitted
// entries take a chain position, so a message no trusted publisher
// attested (a forged copy of an entry, say) does not shift them. It reads
// the chain's messages whole (their attestations sign their content) up to
// c.lastSeq.
func (g *Gate) loadAdmittedHashes(ctx context.Context, c *chainState, key events.ChainKey) error {
	type stored struct {
		seq  uint64
		hash string
	}
	var bc *checkpoint.BatchCollector
	var held map[uint64]stored
	var admitted []stored
	take := func(vs []checkpoint.BatchVerdict) {
		for _, v := range vs {
			if s, ok := held[v.ID]; ok && v.Err == nil {
				admitted = append(admitted, s)
			}
			delete(held, v.ID)
		}
	}
	subj := g.subjects.Journal(c.roomID, key)
	err := g.readChain(ctx, subj, 1, c.lastSeq, func() {
		bc, held, admitted = checkpoint.NewBatchCollector(g.trust), map[uint64]stored{}, nil
	}, func(m *jetstream.RawStreamMsg) {
		if st, ok := g.statementOf(m); ok {
			held[m.Sequence] = stored{m.Sequence, m.Header.Get(jetstream.MsgIDHeader)}
			take(bc.Add(m.Sequence, m.Header.Get(checkpoint.AttestationHeader), st))
		} else {
			take(bc.Pass(m.Sequence))
		}
	}, func() bool {
		take(bc.Flush())
		return int64(len(admitted)) >= c.next
	})
	if err != nil {
		return fmt.Errorf("read chain %s: %w", subj, err)
	}
	// Admitted in stream order: a batch is verified whole, batches do not
	// interleave.
	slices.SortFunc(admitted, func(a, b stored) int { return cmp.Compare(a.seq, b.seq) })
	if int64(len(admitted)) < c.next {
		return fmt.Errorf("read chain %s: %d of %d admitted entries found: %w", subj, len(admitted), c.next, errShortChain)
	}
	c.hashes, c.seqs = make([]string, c.next), make([]uint64, c.next)
	for i := range c.hashes {
		c.hashes[i], c.seqs[i] = admitted[i].hash, admitted[i].seq
	}
	return nil
}

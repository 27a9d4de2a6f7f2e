package ingest

// The gate's journal and record paths before atomic batches and its own
// room index, kept as test oracles.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/jsapi"
	"github.com/roompub/roompub/validate"
)

// AppendJournalOneByOne is the gate's AppendJournal as it was before atomic
// batches (commit 0d93e38): each line decided and then appended alone. It
// is the oracle of TestBatchEquivalence.
//
// AppendJournal decided a batch of journal lines of one chain, in order.
// body holds the lines exactly as a journal file does: each line the
// canonical JSON of one entry followed by "\n". Lines before the first
// refused or failed one may be stored; that one and every later one are
// not (the later ones are "skipped"). capsule, when not nil, is the
// capsule.json metadata every entry must repeat. A request-level problem
// (bad room id, empty body) is returned as an *events.Refusal with code
// bad_request and no items.
func (g *Gate) AppendJournalOneByOne(ctx context.Context, roomID string, body []byte, capsule *events.CapsuleMeta) (room.JournalReply, error) {
	reply := room.JournalReply{RoomID: roomID}
	if err := validate.CheckRoomID(roomID); err != nil {
		return reply, err
	}
	if err := g.subjects.CheckRoom(roomID); err != nil {
		return reply, events.NewRefusal([]events.Problem{{Code: events.BadRequest, Reason: err.Error()}})
	}
	lines := splitLines(body)
	if len(lines) == 0 {
		return reply, events.NewRefusal([]events.Problem{{Code: events.BadRequest, Reason: "the request holds no journal line"}})
	}
	if len(lines) > room.MaxBatchLines {
		return reply, events.NewRefusal([]events.Problem{{Code: events.BadRequest,
			Reason: fmt.Sprintf("the request holds %d lines; at most %d per request", len(lines), room.MaxBatchLines)}})
	}
	reply.Items = make([]room.ItemResult, len(lines))
	for i := range reply.Items {
		reply.Items[i] = room.ItemResult{Index: i, Outcome: room.OutcomeSkipped}
	}
	// The chain is named by the first line; a later line of another chain
	// fails metadata_mismatch like any entry that differs from its capsule.
	first, bad := parseLine(lines[0], 0)
	if bad != nil {
		start := time.Now()
		reply.Items[0] = *bad
		g.observe(room.KindJournal, reply.Items[0], start)
		tally(&reply)
		return reply, nil
	}
	key := events.ChainKey{RunID: first.RunID(), CapsuleID: first.CapsuleID()}
	reply.Chain = key
	c := g.chain(key)
	defer g.unchain(c)
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, ln := range lines {
		start := time.Now()
		res := g.oldAppendLine(ctx, roomID, key, c, capsule, ln, i)
		reply.Items[i] = res
		g.observe(room.KindJournal, res, start)
		if res.Outcome != room.OutcomeStored && res.Outcome != room.OutcomeDuplicate {
			break
		}
	}
	if c.loaded {
		reply.Head = c.view(key)
	}
	tally(&reply)
	return reply, nil
}

// oldAppendLine decides one line with c locked.
func (g *Gate) oldAppendLine(ctx context.Context, roomID string, key events.ChainKey, c *chainState, capsule *events.CapsuleMeta, ln line, idx int) room.ItemResult {
	at := events.Location{Line: idx + 1}
	e, bad := parseLine(ln, idx)
	if bad != nil {
		return *bad
	}
	seq, _ := e.Seq()
	// fresh: the view was read during this call from the stream leader,
	// whose word a refusal waits for (a cached view may be stale: another
	// publisher appended; so may a follower's copy, which answers direct
	// gets in a cluster).
	fresh, wantFresh := false, false
	retryUntil := time.Now().Add(retryWindow)
	for attempt := 0; ; attempt++ {
		if attempt >= g.attempts {
			return failed(idx, fmt.Errorf("gave up after %d attempts", attempt))
		}
		if !c.loaded {
			if err := g.reload(ctx, key, c, wantFresh); err != nil {
				if !g.waitRead(ctx, err, &attempt, retryUntil) {
					return failed(idx, err)
				}
				continue
			}
			fresh = wantFresh
		}
		if c.roomID != "" && c.roomID != roomID && !fresh {
			c.loaded, wantFresh = false, true // decide on the stream's word, not a cached view
			continue
		}
		if c.roomID != "" && c.roomID != roomID {
			return room.RefusedItem(idx, []events.Problem{{Code: events.RoomConflict, At: at,
				Reason: fmt.Sprintf("the capsule's chain already lives in %q", c.roomID), Expected: c.roomID, Actual: roomID}})
		}
		cv := g.v.NewChain(nil)
		switch {
		case c.next > 0:
			cv.Resume(c.next, c.head, c.meta)
		case capsule != nil:
			cv.Resume(0, c.head, *capsule)
		}
		problems := cv.CheckLine(e, ln.data, at)
		if cp := capsuleProblems(capsule, c, idx); cp != nil {
			problems = append(cp, problems...)
		}
		res := room.ItemResult{Index: idx, Seq: &seq, Hash: e.EntryHash()}
		if seq < c.next && onlyPosition(problems) {
			stored, err := g.entryAt(ctx, c, key, seq)
			if err != nil {
				if !g.waitRead(ctx, err, &attempt, retryUntil) {
					return failed(idx, err)
				}
				c.loaded = false
				continue
			}
			return g.resent(key, c, e, seq, stored, res)
		}
		if len(problems) > 0 && !fresh {
			// The view may be stale: a refusal is final, so it is decided
			// on a fresh read.
			c.loaded, wantFresh = false, true
			continue
		}
		if len(problems) > 0 {
			r := room.RefusedItem(idx, problems)
			r.Seq, r.Hash = res.Seq, res.Hash
			return r
		}
		subj := g.subjects.Journal(roomID, key)
		msg := &nats.Msg{Subject: subj, Data: e.Canonical(), Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, e.EntryHash())
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(c.streamSeq, 10))
		msg.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, g.subjects.ChainAnyRoom(key))
		if tl := g.tooLarge(msg, at, 0, 1); tl != nil {
			r := room.RefusedItem(idx, tl)
			r.Seq, r.Hash = res.Seq, res.Hash
			return r
		}
		if perr := g.pausedErr(); perr != nil {
			return failed(idx, perr)
		}
		ack, err := g.publish(ctx, msg)
		switch {
		case err == nil && !ack.Duplicate:
			c.next, c.head, c.streamSeq, c.roomID = seq+1, e.EntryHash(), ack.Sequence, roomID
			if c.next == 1 {
				c.meta = e.Metadata()
			}
			res.Outcome, res.StreamSeq, res.Subject = room.OutcomeStored, ack.Sequence, subj
			return res
		case err == nil && ack.Duplicate:
			// The server merged it with a message of the same Msg-Id: confirm
			// by reading what is stored there (docs/design.md, "Identity, order and
			// duplicates"), then resync.
			if same, serr := g.storedEquals(ctx, ack.Sequence, subj, e.Canonical()); serr != nil || !same {
				return failed(idx, fmt.Errorf("duplicate ack at stream seq %d does not hold this entry (%v)", ack.Sequence, serr))
			}
			c.loaded = false
			res.Outcome, res.StreamSeq, res.Subject = room.OutcomeDuplicate, ack.Sequence, subj
			return res
		case jsapi.IsWrongLastSequence(err):
			// Someone else appended to the chain (or to another room's copy):
			// reload and decide again, possibly as a duplicate or a fork.
			// From the leader: a lagging replica would say the same again.
			c.loaded, wantFresh = false, true
			continue
		case jsapi.IsStoreFull(err):
			return failed(idx, errStoreFull(err))
		case jsapi.IsRetryable(err):
			c.loaded = false
			attempt = g.waitOut(attempt, retryUntil)
			if !jsapi.Sleep(ctx, jsapi.Backoff(attempt)) {
				return failed(idx, ctx.Err())
			}
			continue
		default:
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum {
				r := room.RefusedItem(idx, []events.Problem{{Code: events.TooLarge, At: at, Reason: apiErr.Description}})
				r.Seq, r.Hash = res.Seq, res.Hash
				return r
			}
			if errors.As(err, &apiErr) {
				return failed(idx, err)
			}
			// Ambiguous: the append may or may not have happened. Read
			// before deciding; the retry carries the same Msg-Id.
			g.log.Warn("ambiguous append, reading back", zap.String("subject", subj), zap.Int64("seq", seq), zap.Error(err))
			c.loaded = false
			if ctx.Err() != nil {
				return failed(idx, err)
			}
			continue
		}
	}
}

// AppendRecordCatchingUp is the gate's record path before the room index
// was kept current by the gate's own appends (commit 0d93e38): it brings
// the index up to the stream head before every decision. It is the oracle
// of TestRecordEquivalence.
func (g *Gate) AppendRecordCatchingUp(ctx context.Context, raw []byte) room.RecordReply {
	at := events.Location{}
	rec, err := g.v.Record(raw, at)
	var reply room.RecordReply
	if rec != nil {
		reply.RoomID = rec.RoomID()
		reply.Item.Hash = rec.ComputedRef()
	}
	if err != nil {
		var ref *events.Refusal
		if !errors.As(err, &ref) {
			reply.Item = failed(0, err)
			return reply
		}
		reply.Item = room.RefusedItem(0, ref.Problems)
		if rec != nil {
			reply.Item.Hash = rec.ComputedRef()
		}
		return reply
	}
	roomID := rec.RoomID()
	if err := g.subjects.CheckRoom(roomID); err != nil {
		reply.Item = room.RefusedItem(0, []events.Problem{{Code: events.TooLarge, At: events.Location{Pointer: "/room~1id"}, Reason: err.Error()}})
		reply.Item.Hash = rec.ComputedRef()
		return reply
	}
	r := g.room(roomID)
	r.mu.Lock()
	defer r.mu.Unlock()
	subj := g.subjects.Records(roomID)
	digest := rec.ContentDigest()
	retryUntil := time.Now().Add(retryWindow)
	for attempt := 0; ; attempt++ {
		if attempt >= g.attempts {
			reply.Item = failed(0, fmt.Errorf("gave up after %d attempts", attempt))
			return reply
		}
		if err := g.catchUp(ctx, roomID, r); err != nil {
			if !g.waitRead(ctx, err, &attempt, retryUntil) {
				reply.Item = failed(0, err)
				return reply
			}
			continue
		}
		if seq, ok := r.Stored(digest); ok {
			reply.Item = room.ItemResult{Outcome: room.OutcomeDuplicate, Hash: rec.ComputedRef(), StreamSeq: seq, Subject: subj}
			return reply
		}
		if ps := r.Problems(rec, at); len(ps) > 0 {
			reply.Item = room.RefusedItem(0, ps)
			reply.Item.Hash = rec.ComputedRef()
			return reply
		}
		msg := &nats.Msg{Subject: subj, Data: rec.Canonical(), Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, digest)
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(r.streamSeq, 10))
		if tl := g.tooLarge(msg, at, 0, 1); tl != nil {
			reply.Item = room.RefusedItem(0, tl)
			reply.Item.Hash = rec.ComputedRef()
			return reply
		}
		if perr := g.pausedErr(); perr != nil {
			reply.Item = failed(0, perr)
			return reply
		}
		ack, err := g.publish(ctx, msg)
		switch {
		case err == nil && !ack.Duplicate:
			r.streamSeq = ack.Sequence
			r.Add(rec, ack.Sequence)
			reply.Item = room.ItemResult{Outcome: room.OutcomeStored, Hash: rec.ComputedRef(), StreamSeq: ack.Sequence, Subject: subj}
			return reply
		case err == nil && ack.Duplicate:
			if same, serr := g.storedEquals(ctx, ack.Sequence, subj, rec.Canonical()); serr != nil || !same {
				reply.Item = failed(0, fmt.Errorf("duplicate ack at stream seq %d does not hold this record (%v)", ack.Sequence, serr))
				return reply
			}
			reply.Item = room.ItemResult{Outcome: room.OutcomeDuplicate, Hash: rec.ComputedRef(), StreamSeq: ack.Sequence, Subject: subj}
			return reply
		case jsapi.IsWrongLastSequence(err):
			continue // another gate appended to the room: catch up, decide again
		case jsapi.IsStoreFull(err):
			reply.Item = failed(0, errStoreFull(err))
			return reply
		case jsapi.IsRetryable(err):
			attempt = g.waitOut(attempt, retryUntil)
			if !jsapi.Sleep(ctx, jsapi.Backoff(attempt)) {
				reply.Item = failed(0, ctx.Err())
				return reply
			}
			continue
		default:
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum {
				reply.Item = room.RefusedItem(0, []events.Problem{{Code: events.TooLarge, At: at, Reason: apiErr.Description}})
				return reply
			}
			if errors.As(err, &apiErr) || ctx.Err() != nil {
				reply.Item = failed(0, err)
				return reply
			}
			g.log.Warn("ambiguous record append, reading back", zap.String("subject", subj), zap.Error(err))
			continue // catchUp reads what is stored before deciding again
		}
	}
}

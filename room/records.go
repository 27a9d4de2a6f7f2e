package room

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
)

// roomState indexes one room's stored records for the relation rules
// (idempotency/key, run/ref, unknown outcomes, same bytes). The gate
// brings it up to the stream head before every decision; a Reader builds
// it in stream order; both apply the rules with the same code.
type roomState struct {
	mu sync.Mutex
	// loaded: the index has been brought up to the stream head at least
	// once. From then on it is kept current by this gate's own appends,
	// and every append says which last sequence it expects: another
	// gate's append in between makes the server refuse it, and the index
	// is brought up to date before deciding again.
	loaded    bool
	streamSeq uint64 // last record read from the room's record subject
	// count is the number of messages on the room's record subject up to
	// streamSeq, every one of them whether it counts for the rules or
	// not: the next record's position (checkpoint.RecordPosition, issue
	// 9). Kept by the gate only.
	count   uint64
	digests map[string]uint64 // content digest → stream seq
	keys    map[string]string // idempotency/key → content digest
	runs    map[string]string // run/ref → content digest
	unknown map[string]uint64 // decision/ref with an unknown outcome → stream seq
}

func (g *Gate) room(roomID string) *roomState {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.rooms[roomID]
	if r == nil {
		r = newRoomState()
		g.rooms[roomID] = r
	}
	return r
}

func newRoomState() *roomState {
	return &roomState{digests: map[string]uint64{}, keys: map[string]string{}, runs: map[string]string{}, unknown: map[string]uint64{}}
}

// catchUp reads every record stored on the room's record subject after
// r.streamSeq, in stream order, into the index, as the stream leader has
// them (see leaderMsg).
func (g *Gate) catchUp(ctx context.Context, roomID string, r *roomState) error {
	subj := g.subjects.Records(roomID)
	for {
		m, err := g.leaderMsg(ctx, map[string]any{"seq": r.streamSeq + 1, "next_by_subj": subj})
		if err != nil {
			return fmt.Errorf("read records of %s: %w", roomID, err)
		}
		if m == nil {
			return nil
		}
		r.streamSeq = m.Sequence
		r.count++
		// Only records that pass every rule count for the relation rules:
		// a record a compromised writer put straight into the stream must
		// not block a genuine one (idempotency_conflict, run_conflict).
		// Subscribers and audits report such records.
		rec, err := g.v.Record(m.Data, events.Location{Seq: m.Sequence})
		if err != nil || rec.RoomID() != roomID || !bytes.Equal(m.Data, rec.Canonical()) {
			g.log.Warn("unverifiable record in stream: ignored by the gate", zap.Uint64("stream_seq", m.Sequence), zap.String("room", roomID), zap.Error(err))
			continue
		}
		r.add(rec, m.Sequence)
	}
}

func (r *roomState) add(rec *events.Record, seq uint64) {
	d := rec.ContentDigest()
	if _, ok := r.digests[d]; ok {
		return
	}
	r.digests[d] = seq
	if k := rec.IdempotencyKey(); k != "" {
		if _, ok := r.keys[k]; !ok {
			r.keys[k] = d
		}
	}
	if run := rec.RunRef(); run != "" {
		if _, ok := r.runs[run]; !ok {
			r.runs[run] = d
		}
	}
	if rec.Outcome() == "unknown" && rec.DecisionRef() != "" {
		if _, ok := r.unknown[rec.DecisionRef()]; !ok {
			r.unknown[rec.DecisionRef()] = seq
		}
	}
}

// streamProblems applies the stream-side record rules (DESIGN.md order:
// idempotency_conflict, run_conflict, unknown_not_consent).
func (r *roomState) streamProblems(rec *events.Record, at events.Location) []events.Problem {
	var ps []events.Problem
	ptr := func(p string) events.Location { l := at; l.Pointer = p; return l }
	if d, ok := r.keys[rec.IdempotencyKey()]; ok {
		ps = append(ps, events.Problem{Code: events.IdempotencyConflict, At: ptr("/idempotency~1key"),
			Reason:   "idempotency/key already names another record in this room (stream seq " + strconv.FormatUint(r.digests[d], 10) + ")",
			Expected: d, Actual: rec.ContentDigest()})
	}
	if d, ok := r.runs[rec.RunRef()]; ok {
		ps = append(ps, events.Problem{Code: events.RunConflict, At: ptr("/run~1ref"),
			Reason:   "run/ref already concluded in this room (stream seq " + strconv.FormatUint(r.digests[d], 10) + ")",
			Expected: d, Actual: rec.ContentDigest()})
	}
	if seq, ok := r.unknown[rec.DecisionRef()]; ok {
		ps = append(ps, events.Problem{Code: events.UnknownNotConsent, At: ptr("/decision~1ref"),
			Reason: "the decision already has an execution with outcome unknown (stream seq " + strconv.FormatUint(seq, 10) +
				"); an unknown outcome is never consent to run it again"})
	}
	return ps
}

// AppendRecord decides one execution record (any JSON formatting; it is
// stored in its RFC 8785 form). The room is the record's room/id.
func (g *Gate) AppendRecord(ctx context.Context, raw []byte) RecordReply {
	start := time.Now()
	res := g.appendRecord(ctx, raw)
	g.observe(KindExecution, res.Item, start)
	return res
}

func (g *Gate) appendRecord(ctx context.Context, raw []byte) RecordReply {
	at := events.Location{}
	rec, err := g.v.Record(raw, at)
	var reply RecordReply
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
		reply.Item = refused(0, ref.Problems)
		if rec != nil {
			reply.Item.Hash = rec.ComputedRef()
		}
		return reply
	}
	roomID := rec.RoomID()
	if err := g.subjects.CheckRoom(roomID); err != nil {
		reply.Item = refused(0, []events.Problem{{Code: events.TooLarge, At: events.Location{Pointer: "/room~1id"}, Reason: err.Error()}})
		reply.Item.Hash = rec.ComputedRef()
		return reply
	}
	r := g.room(roomID)
	r.mu.Lock()
	defer r.mu.Unlock()
	subj := g.subjects.Records(roomID)
	digest := rec.ContentDigest()
	var content [32]byte // checkpoint.ContentHash of the record, with a key
	if g.key != nil {
		content = checkpoint.ContentHash(rec.Canonical())
	}
	retryUntil := time.Now().Add(retryWindow)
	// stale: the index must be brought up to the stream head before the
	// next decision; fresh: it was during this call.
	stale, fresh := !r.loaded, false
	for attempt := 0; ; attempt++ {
		if attempt >= g.attempts {
			reply.Item = failed(0, fmt.Errorf("gave up after %d attempts", attempt))
			return reply
		}
		if stale {
			if err := g.catchUp(ctx, roomID, r); err != nil {
				if !g.waitRead(ctx, err, &attempt, retryUntil) {
					reply.Item = failed(0, err)
					return reply
				}
				continue
			}
			r.loaded, stale, fresh = true, false, true
		}
		// The index only grows, in stream order: a record found in it is
		// stored there whatever came later.
		if seq, ok := r.digests[digest]; ok {
			reply.Item = ItemResult{Outcome: OutcomeDuplicate, Hash: rec.ComputedRef(), StreamSeq: seq, Subject: subj}
			return reply
		}
		if ps := r.streamProblems(rec, at); len(ps) > 0 {
			if !fresh {
				// A refusal is final: decide it on the stream as it is now
				// (the same record may have been stored meanwhile).
				stale = true
				continue
			}
			reply.Item = refused(0, ps)
			reply.Item.Hash = rec.ComputedRef()
			return reply
		}
		msg := &nats.Msg{Subject: subj, Data: rec.Canonical(), Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, digest)
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(r.streamSeq, 10))
		// The position is the record's ordinal on the subject if it lands
		// right after r.streamSeq, which the expected sequence makes sure
		// of; after a catch-up it is signed again.
		if att := g.attest(roomID, subj, checkpoint.RecordPosition(r.count), content); att != "" {
			msg.Header.Set(checkpoint.AttestationHeader, att)
		}
		if tl := g.tooLarge(msg, at, 0, 1); tl != nil {
			reply.Item = refused(0, tl)
			reply.Item.Hash = rec.ComputedRef()
			return reply
		}
		if perr := g.pausedErr(); perr != nil {
			reply.Item = failed(0, perr)
			return reply
		}
		g.expect(msg, content)
		ack, err := g.publish(ctx, msg)
		g.unstored(msg, ack, err)
		switch {
		case err == nil && !ack.Duplicate:
			g.stored(ack.Sequence, []*nats.Msg{msg}, func(int) [32]byte { return content })
			r.streamSeq = ack.Sequence
			r.count++
			r.add(rec, ack.Sequence)
			reply.Item = ItemResult{Outcome: OutcomeStored, Hash: rec.ComputedRef(), StreamSeq: ack.Sequence, Subject: subj}
			return reply
		case err == nil && ack.Duplicate:
			if same, serr := g.storedEquals(ctx, ack.Sequence, subj, rec.Canonical()); serr != nil || !same {
				reply.Item = failed(0, fmt.Errorf("duplicate ack at stream seq %d does not hold this record (%v)", ack.Sequence, serr))
				return reply
			}
			reply.Item = ItemResult{Outcome: OutcomeDuplicate, Hash: rec.ComputedRef(), StreamSeq: ack.Sequence, Subject: subj}
			return reply
		case isWrongLastSequence(err):
			stale = true // another gate appended to the room: catch up, decide again
			continue
		case isStoreFull(err):
			reply.Item = failed(0, errStoreFull(err))
			return reply
		case isRetryable(err):
			stale = true
			attempt = g.waitOut(attempt, retryUntil)
			if !sleepCtx(ctx, backoff(attempt)) {
				reply.Item = failed(0, ctx.Err())
				return reply
			}
			continue
		default:
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum {
				reply.Item = refused(0, []events.Problem{{Code: events.TooLarge, At: at, Reason: apiErr.Description}})
				return reply
			}
			if errors.As(err, &apiErr) || ctx.Err() != nil {
				reply.Item = failed(0, err)
				return reply
			}
			g.log.Warn("ambiguous record append, reading back", zap.String("subject", subj), zap.Error(err))
			stale = true // catchUp reads what is stored before deciding again
			continue
		}
	}
}

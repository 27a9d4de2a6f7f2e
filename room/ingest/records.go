package ingest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/jsapi"
	"github.com/roompub/roompub/validate"
)

// roomState is the gate's view of one room's stored records: the
// relation rules' index and how far it has read the room's record subject.
type roomState struct {
	mu sync.Mutex
	// loaded: the index has been brought up to the stream head at least
	// once. From then on it is kept current by this gate's own appends,
	// and every append says which last sequence it expects: another
	// gate's append in between makes the server refuse it, and the index
	// is brought up to date before deciding again.
	// Written under mu; AppendRecords's checker reads it without (a hint).
	loaded    atomic.Bool
	streamSeq uint64 // last record read from the room's record subject
	// count is the number of messages on the room's record subject up to
	// streamSeq, every one of them whether it counts for the rules or
	// not: the next record's position (checkpoint.RecordPosition).
	// Written under mu, read without it as a hint by AppendRecords's
	// checker.
	count atomic.Uint64
	// marked: the room's records have markers (markers.go), and the
	// relation rules are the server's; RecordIndex is then nil.
	marked *markedRoom
	// RecordIndex: the relation rules of a room without markers, read
	// whole from the stream (catchUp).
	*validate.RecordIndex
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

func newRoomState() *roomState { return &roomState{} }

// loadRoom brings r up to the stream head: on markers when the stream has
// them on and the room's records are marked (loadMarked), else by reading
// every record after r.streamSeq into the index (catchUp).
func (g *Gate) loadRoom(ctx context.Context, roomID string, r *roomState) error {
	if g.markers && r.RecordIndex == nil {
		ok, err := g.loadMarked(ctx, roomID, r)
		if err != nil || ok {
			return err
		}
		r.marked, r.streamSeq = nil, 0
		r.count.Store(0)
	}
	return g.catchUp(ctx, roomID, r)
}

// catchUp reads every record stored on the room's record subject after
// r.streamSeq, in stream order, into the index, as the stream leader has
// them (see leaderMsg).
func (g *Gate) catchUp(ctx context.Context, roomID string, r *roomState) error {
	if r.RecordIndex == nil {
		r.RecordIndex = validate.NewRecordIndex()
	}
	subj := g.subjects.Records(roomID)
	// One warning per catch-up, not per message: a raw writer flooding the
	// subject must not flood the log too.
	var ignored int
	var firstSeq, lastSeq uint64
	var firstErr error
	defer func() {
		if ignored > 0 {
			g.log.Warn("unverifiable records in stream: ignored by the gate", zap.String("room", roomID), zap.Int("count", ignored),
				zap.Uint64("first_stream_seq", firstSeq), zap.Uint64("last_stream_seq", lastSeq), zap.NamedError("first_error", firstErr))
		}
	}()
	for {
		m, err := g.leaderMsg(ctx, map[string]any{"seq": r.streamSeq + 1, "next_by_subj": subj})
		if err != nil {
			return fmt.Errorf("read records of %s: %w", roomID, err)
		}
		if m == nil {
			return nil
		}
		r.streamSeq = m.Sequence
		r.count.Add(1)
		g.recordsRead.Add(1)
		// Only records that pass every rule count for the relation rules:
		// a record a compromised writer put straight into the stream must
		// not block a genuine one (idempotency_conflict, run_conflict).
		// Subscribers and audits report such records.
		rec, err := g.v.StoredRecord(m.Data, events.Location{Seq: m.Sequence}, roomID)
		if err != nil {
			if ignored == 0 {
				firstSeq, firstErr = m.Sequence, err
			}
			ignored, lastSeq = ignored+1, m.Sequence
			continue
		}
		r.Add(rec, m.Sequence)
	}
}

// AppendRecord decides one execution record (any JSON formatting; it is
// stored in its RFC 8785 form). The room is the record's room/id.
func (g *Gate) AppendRecord(ctx context.Context, raw []byte) room.RecordReply {
	return g.appendRecordHeld(ctx, raw, nil)
}

// appendRecordHeld is AppendRecord for a request holding hold, a place in
// the ingest service's concurrency limit, which it gives back while it
// waits for the room's lock.
func (g *Gate) appendRecordHeld(ctx context.Context, raw []byte, hold *slotHold) room.RecordReply {
	start := time.Now()
	res := g.appendRecord(ctx, raw, hold)
	g.makeDurable(res.Item.Outcome, func(err error) { res.Item = notDurable(res.Item, err) })
	g.observe(room.KindExecution, res.Item, start)
	return res
}

// AppendRecords decides several execution records, in order, as
// AppendRecord would decide each one after the other: a record is decided
// against the rooms as the records before it left them, and each one that
// passes is stored as its own message with its own synchronous publish,
// exactly as AppendRecord stores it. It returns one reply per record, in
// order, each with Item.Index its position in raws.
//
// What it saves over one AppendRecord per record: the checks
// that need no stream (parse, schema, canonical form, signature, trust)
// run on a second goroutine for the next records while one is being
// stored, at most recordsAhead records ahead. A record that is refused or
// a duplicate does not stop the ones behind it (records are independent);
// the first one that fails (store unavailable, ctx done) does: every
// record after it is OutcomeSkipped, so nothing is stored out of order
// (the client sends them again).
func (g *Gate) AppendRecords(ctx context.Context, raws [][]byte) []room.RecordReply {
	return g.appendRecords(ctx, raws, nil)
}

// appendRecords is AppendRecords for a request holding hold, a place in
// the ingest service's concurrency limit, which it gives back while a
// record waits for its room's lock.
func (g *Gate) appendRecords(ctx context.Context, raws [][]byte, hold *slotHold) []room.RecordReply {
	out := make([]room.RecordReply, len(raws))
	// flight is where one room's records of this request stand: next is
	// the room's count after the last record the storer finished (known
	// once the room has been read), sent and finished the records the
	// checker passed on and the storer is done with. The next record of the
	// room lands at next + sent - finished if the ones between are stored
	// and no other append comes in between, the usual case; a wrong guess
	// (a record ahead refused or a duplicate, another gate's append) only
	// costs storeRecord a second signature.
	type flight struct {
		room           *roomState // the room's state and record subject, looked up once
		subj           string
		mu             sync.Mutex
		known          bool
		next           uint64
		sent, finished uint64
	}
	type checked struct {
		rec    *events.Record
		reply  room.RecordReply
		pre    presigned
		flight *flight
		start  time.Time
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := make(chan checked, recordsAhead)
	go func() {
		defer close(ch)
		flights := map[string]*flight{}
		for _, raw := range raws {
			if ctx.Err() != nil {
				return
			}
			c := checked{start: time.Now()}
			c.rec, c.reply = g.checkRecord(raw)
			if c.rec != nil && g.key != nil {
				roomID := c.rec.RoomID()
				c.flight = flights[roomID]
				if c.flight == nil {
					c.flight = &flight{room: g.room(roomID), subj: g.subjects.Records(roomID)}
					flights[roomID] = c.flight
				}
				c.pre.hashed, c.pre.content = true, checkpoint.ContentHash(c.rec.Canonical())
				f := c.flight
				f.mu.Lock()
				if !f.known && f.room.loaded.Load() {
					f.known, f.next = true, f.room.count.Load() // nothing of this request stored there yet
				}
				known, pos := f.known, f.next+f.sent-f.finished
				f.sent++
				f.mu.Unlock()
				if known {
					c.pre.position, c.pre.att = pos, g.attest(roomID, f.subj, checkpoint.RecordPosition(pos), c.pre.content)
				}
			}
			select {
			case ch <- c:
			case <-ctx.Done():
				return
			}
		}
	}()
	i := 0
	stop := "" // why the records from i on are not looked at
	for c := range ch {
		reply := c.reply
		if c.rec != nil {
			reply = g.storeRecord(ctx, c.rec, reply, c.pre, hold)
		}
		if f := c.flight; f != nil {
			f.mu.Lock()
			f.finished++
			if f.room.loaded.Load() {
				f.known, f.next = true, f.room.count.Load()
			}
			f.mu.Unlock()
		}
		reply.Item.Index = i
		g.makeDurable(reply.Item.Outcome, func(err error) { reply.Item = notDurable(reply.Item, err) })
		g.observe(room.KindExecution, reply.Item, c.start)
		out[i] = reply
		i++
		if reply.Item.Outcome == room.OutcomeFailed {
			stop = "an earlier record of the request failed"
			break
		}
	}
	if stop == "" && i < len(raws) {
		stop = context.Cause(ctx).Error() // the caller's ctx ended between two records
	}
	cancel()
	// The checker reads raws: it is done with them before the call returns.
	for range ch {
	}
	for ; i < len(raws); i++ {
		out[i].Item = room.ItemResult{Index: i, Outcome: room.OutcomeSkipped, Reason: "not looked at: " + stop}
	}
	return out
}

// recordsAhead is how many checked records AppendRecords keeps ready
// ahead of the one being stored. A record's checks take about a third of
// its synchronous store, so one would do; the second absorbs a record
// whose checks take longer (a refusal with many problems).
const recordsAhead = 2

func (g *Gate) appendRecord(ctx context.Context, raw []byte, hold *slotHold) room.RecordReply {
	rec, reply := g.checkRecord(raw)
	if rec == nil {
		return reply
	}
	return g.storeRecord(ctx, rec, reply, presigned{}, hold)
}

// checkRecord applies every rule that needs no stream (in the order of
// docs/design.md, "Refusal codes and their order", up to trust, then the room id's control characters and subject form). It returns the record and
// a reply naming its room and execution/ref to go on with, or nil and the
// final reply (refused, or failed for an error that is not a refusal).
// It touches no gate state, so records can be checked ahead of the one
// being stored (AppendRecords).
func (g *Gate) checkRecord(raw []byte) (*events.Record, room.RecordReply) {
	rec, err := g.v.Record(raw, events.Location{})
	var reply room.RecordReply
	if rec != nil {
		reply.RoomID = rec.RoomID()
		reply.Item.Hash = rec.ComputedRef()
	}
	if err != nil {
		var ref *events.Refusal
		if !errors.As(err, &ref) {
			reply.Item = failed(0, err)
			return nil, reply
		}
		reply.Item = room.RefusedItem(0, ref.Problems)
		if rec != nil {
			reply.Item.Hash = rec.ComputedRef()
		}
		return nil, reply
	}
	if err := validate.CheckRoomID(rec.RoomID()); err != nil {
		// The schema's pattern lets a control character through, which
		// no checkpoint of the room could name (validate.CheckRoomID).
		var ref *events.Refusal
		if errors.As(err, &ref) {
			for i := range ref.Problems {
				ref.Problems[i].At.Pointer = "/room~1id"
			}
			reply.Item = room.RefusedItem(0, ref.Problems)
			reply.Item.Hash = rec.ComputedRef()
			return nil, reply
		}
	}
	if err := g.subjects.CheckRoom(rec.RoomID()); err != nil {
		reply.Item = room.RefusedItem(0, []events.Problem{{Code: events.TooLarge, At: events.Location{Pointer: "/room~1id"}, Reason: err.Error()}})
		reply.Item.Hash = rec.ComputedRef()
		return nil, reply
	}
	return rec, reply
}

// presigned is what AppendRecords's checker worked out for a record ahead
// of its store: its content hash and, when the room's position for it
// could be foreseen, its attestation at that position. storeRecord uses
// the attestation only if the record does land at that position, and
// signs again otherwise. The zero value is nothing worked out.
type presigned struct {
	hashed   bool
	content  [32]byte
	position uint64 // the position att was signed for
	att      string // "": none
}

// readyToAppend is what a record's append checks first, on either path:
// appends not paused (Pause), and across partitions the room placed here
// before its first message (a cache hit after that). A refusal to append
// now is the failed item to answer (a room another gate placed elsewhere
// is sent again by the client); err is a read to wait out, as the stream's
// (the placement bucket's leader out of reach for now).
func (g *Gate) readyToAppend(ctx context.Context, roomID string) (*room.ItemResult, error) {
	if perr := g.pausedErr(); perr != nil {
		item := failed(0, perr)
		return &item, nil
	}
	if g.placeRoom == nil {
		return nil, nil
	}
	if err := g.placeRoom(ctx, roomID); err != nil {
		if errors.Is(err, errMisrouted) {
			item := failed(0, err)
			return &item, nil
		}
		return nil, err
	}
	return nil, nil
}

// storeRecord decides a record checkRecord passed against its room's
// stored records (duplicate, then the stream-side rules) and stores it.
// reply is checkRecord's. While another request holds the room's lock,
// it waits without hold's place (lockIdle): one identity's records queued
// on a room must not take every place from the others' requests.
func (g *Gate) storeRecord(ctx context.Context, rec *events.Record, reply room.RecordReply, pre presigned, hold *slotHold) room.RecordReply {
	at := events.Location{}
	roomID := rec.RoomID()
	r := g.room(roomID)
	if err := lockIdle(ctx, &r.mu, hold); err != nil {
		reply.Item = failed(0, err)
		return reply
	}
	defer r.mu.Unlock()
	subj := g.subjects.Records(roomID)
	digest := rec.ContentDigest()
	content := pre.content // checkpoint.ContentHash of the record, with a key
	if g.key != nil && !pre.hashed {
		content = checkpoint.ContentHash(rec.Canonical())
	}
	retryUntil := time.Now().Add(retryWindow)
	// stale: the index must be brought up to the stream head before the
	// next decision; fresh: it was during this call.
	stale, fresh := !r.loaded.Load(), false
	for attempt := 0; ; attempt++ {
		if attempt >= g.attempts {
			reply.Item = failed(0, fmt.Errorf("gave up after %d attempts", attempt))
			return reply
		}
		if stale {
			if err := g.loadRoom(ctx, roomID, r); err != nil {
				if !g.waitRead(ctx, err, &attempt, retryUntil) {
					reply.Item = failed(0, err)
					return reply
				}
				continue
			}
			stale, fresh = false, true
			r.loaded.Store(true)
		}
		if reason, err := g.roomBlocked(ctx, roomID); err != nil || reason != "" {
			if err != nil {
				if !g.waitRead(ctx, err, &attempt, retryUntil) {
					reply.Item = failed(0, err)
					return reply
				}
				continue
			}
			reply.Item = room.RefusedItem(0, []events.Problem{{Code: events.StoreLost, At: at, Reason: reason}})
			reply.Item.Hash = rec.ComputedRef()
			return reply
		}
		if r.marked != nil {
			out, again, err := g.storeMarkedIn(ctx, rec, r, reply, pre, content, fresh)
			switch {
			case err == nil && !again:
				return out
			case err == nil:
				// Decide again on the room and markers as they are now;
				// a batch in flight ahead may hold its subjects a moment.
				stale = true
				if attempt > 0 && !jsapi.Sleep(ctx, jsapi.Backoff(attempt)) {
					reply.Item = failed(0, ctx.Err())
					return reply
				}
				continue
			}
			if !g.waitRead(ctx, err, &attempt, retryUntil) {
				reply.Item = failed(0, err)
				return reply
			}
			stale = true
			continue
		}
		// The index only grows, in stream order: a record found in it is
		// stored there whatever came later.
		if seq, ok := r.Stored(digest); ok {
			reply.Item = room.ItemResult{Outcome: room.OutcomeDuplicate, Hash: rec.ComputedRef(), StreamSeq: seq, Subject: subj}
			return reply
		}
		if ps := r.Problems(rec, at); len(ps) > 0 {
			if !fresh {
				// A refusal is final: decide it on the stream as it is now
				// (the same record may have been stored meanwhile).
				stale = true
				continue
			}
			reply.Item = room.RefusedItem(0, ps)
			reply.Item.Hash = rec.ComputedRef()
			return reply
		}
		msg := &nats.Msg{Subject: subj, Data: rec.Canonical(), Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, digest)
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(r.streamSeq, 10))
		// The position is the record's ordinal on the subject if it lands
		// right after r.streamSeq, which the expected sequence makes sure
		// of; after a catch-up it is signed again.
		att := pre.att
		if pre.att == "" || pre.position != r.count.Load() {
			att = g.attest(roomID, subj, checkpoint.RecordPosition(r.count.Load()), content)
		} else if g.presigned != nil {
			g.presigned.Add(1)
		}
		if att != "" {
			msg.Header.Set(checkpoint.AttestationHeader, att)
		}
		if tl := g.tooLarge(msg, at, 0, 1); tl != nil {
			reply.Item = room.RefusedItem(0, tl)
			reply.Item.Hash = rec.ComputedRef()
			return reply
		}
		if item, err := g.readyToAppend(ctx, roomID); item != nil || err != nil {
			if item != nil {
				reply.Item = *item
				return reply
			}
			if !g.waitRead(ctx, err, &attempt, retryUntil) {
				reply.Item = failed(0, err)
				return reply
			}
			continue
		}
		g.expect([]*nats.Msg{msg}, func(int) ([32]byte, string) { return content, "" })
		ack, err := g.publish(ctx, msg)
		g.unstored(msg, ack, err)
		switch {
		case err == nil && !ack.Duplicate:
			g.stored(ack.Sequence, []*nats.Msg{msg}, func(int) ([32]byte, string) { return content, "" })
			r.streamSeq = ack.Sequence
			r.count.Add(1)
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
			stale = true // another gate appended to the room: catch up, decide again
			continue
		case jsapi.IsStoreFull(err):
			reply.Item = failed(0, errStoreFull(err))
			return reply
		case jsapi.IsRetryable(err):
			stale = true
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
			stale = true // catchUp reads what is stored before deciding again
			continue
		}
	}
}

package ingest

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/jsapi"
	"github.com/roompub/roompub/validate"
)

// Record markers (docs/design.md, "Record markers"): on a stream that
// turns them on, the relation rules are kept by the server. A record is
// appended in one atomic batch with a marker per rule it takes part in,
// each appended with the expected last sequence of its subject, so a
// second record of an idempotency/key or run/ref, or a record of a
// decision/ref whose latest record has an unknown outcome, makes the
// server refuse the whole batch. The gate then reads the markers it
// expected to be free (last by subject), checks the record each names, and
// refuses with the rule's code or decides again. It keeps nothing per
// record: restarted, it reads the room's head and count, not its records.

// markedRoom is what the gate keeps of a room whose records have markers.
type markedRoom struct {
	// format: the room's format marker is stored (else the room holds no
	// record yet, and the first batch stores it).
	format bool
	// expect holds, per marker subject, the last sequence the gate found
	// on it where that is not 0 and the next marker may still follow: a
	// decision's latest marker, or a marker whose record does not hold it
	// (written around the gate). Cleared when it grows past maxExpect; a
	// missing entry costs one refused batch and a read.
	expect map[string]lastMarker
}

// lastMarker is the last marker the gate knows on a subject: its stream
// sequence, and for a decision whose latest record has an unknown outcome
// that record's (the decision is closed: nothing more may follow).
type lastMarker struct {
	seq, unknown uint64
}

const maxExpect = 4096

func (m *markedRoom) setExpect(subj string, last lastMarker) {
	if m.expect == nil || len(m.expect) >= maxExpect {
		m.expect = map[string]lastMarker{}
	}
	m.expect[subj] = last
}

// loadMarked brings r up to the room's head when the room's records are
// marked, and reports whether they are: the room's format marker is
// stored, or the room holds no record yet. A room with records and no
// format marker (written before markers) is not: its rules stay with the
// index (catchUp). Reads go to the stream leader: a record decision rests
// on them.
func (g *Gate) loadMarked(ctx context.Context, roomID string, r *roomState) (bool, error) {
	subj := g.subjects.Records(roomID)
	for try := 0; ; try++ {
		before, err := g.leaderMsg(ctx, map[string]any{"last_by_subj": subj})
		if err != nil {
			return false, fmt.Errorf("read the last record of %s: %w", roomID, err)
		}
		counts, err := jsapi.SubjectCounts(ctx, g.nc, g.streamName(), subj, g.timeout)
		if err != nil {
			return false, fmt.Errorf("count the records of %s: %w", roomID, err)
		}
		after, err := g.leaderMsg(ctx, map[string]any{"last_by_subj": subj})
		if err != nil {
			return false, fmt.Errorf("read the last record of %s: %w", roomID, err)
		}
		// The stream only grows: the same last record before and after the
		// count means the count is of the records up to it.
		if seqOf(before) != seqOf(after) {
			if try < 10 {
				continue
			}
			return false, fmt.Errorf("the records of %s grow too fast to count", roomID)
		}
		n := counts[subj]
		// Read after the count: a marked room's first record and its
		// format marker are stored together, so a counted record of a
		// marked room has its format marker there by now.
		format := r.marked != nil && r.marked.format
		if !format && n > 0 {
			ok, err := g.formatMarked(ctx, roomID)
			if err != nil {
				return false, fmt.Errorf("read the format marker of %s: %w", roomID, err)
			}
			if !ok {
				return false, nil
			}
			format = true
		}
		if r.marked == nil {
			r.marked = &markedRoom{}
		}
		r.marked.format = format
		r.streamSeq = seqOf(after)
		r.count.Store(n)
		return true, nil
	}
}

// formatMarked reports whether roomID's format marker is stored
// (room.FormatMarked, read from the stream leader). Anything else on the
// subject was written around the gate, and must not turn a room whose
// records were stored before markers (and so have none) over to the
// markers' rules, under which its keys and runs would look free.
func (g *Gate) formatMarked(ctx context.Context, roomID string) (bool, error) {
	return room.FormatMarked(func(seq uint64, subj string) (uint64, []byte, bool, error) {
		m, err := g.leaderMsg(ctx, map[string]any{"seq": seq, "next_by_subj": subj})
		if err != nil || m == nil {
			return 0, nil, false, err
		}
		return m.Sequence, m.Data, true, nil
	}, g.subjects.Records(roomID), g.subjects.Marker(roomID, room.MarkFormat, ""))
}

func seqOf(m *jetstream.RawStreamMsg) uint64 {
	if m == nil {
		return 0
	}
	return m.Sequence
}

// markerSpec is one marker of a record's batch.
type markerSpec struct {
	kind  room.MarkerKind
	value string
	subj  string
}

// recordMarkers lists rec's markers in batch order: key, run, decision,
// then instance, and the format marker for a room's first record (format:
// the room's is not stored yet). The first two or three are the ones a
// rule reads (markedHeld).
func recordMarkers(subjects room.Subjects, rec *events.Record, format bool) []markerSpec {
	roomID := rec.RoomID()
	spec := func(k room.MarkerKind, v string) markerSpec {
		return markerSpec{kind: k, value: v, subj: subjects.Marker(roomID, k, v)}
	}
	out := []markerSpec{spec(room.MarkKey, rec.IdempotencyKey()), spec(room.MarkRun, rec.RunRef())}
	if d := rec.DecisionRef(); d != "" {
		out = append(out, spec(room.MarkDecision, d))
	}
	if env, ok := rec.EnvironmentRef(); ok {
		out = append(out, spec(room.MarkInstance, env))
	}
	if format {
		out = append(out, spec(room.MarkFormat, ""))
	}
	return out
}

// markerMsgs is the markers of specs (recordMarkers) as they follow rec in
// its batch: the i-th names the record i+1 messages before it, a
// decision's carries the outcome, an instance's the record's position pos
// on its record subject. Each has an empty header for the caller's
// expected last subject sequence.
func markerMsgs(rec *events.Record, specs []markerSpec, pos uint64) []*nats.Msg {
	digest := rec.ContentDigest()
	out := make([]*nats.Msg, len(specs))
	for i, s := range specs {
		mk := room.Marker{Record: digest, Offset: uint64(i + 1)}
		switch s.kind {
		case room.MarkDecision:
			mk.Outcome = rec.Outcome()
		case room.MarkInstance:
			mk.Position = &pos
		}
		out[i] = &nats.Msg{Subject: s.subj, Data: mk.Encode(), Header: nats.Header{}}
	}
	return out
}

// markerHolder returns the record that holds subj's marker of kind k for
// value in roomID: for a key or run, the stored record the first genuine
// marker names; for a decision, the latest. A marker is genuine when it
// is the one the gate stores in its record's batch (genuine). last is the
// subject's last stream sequence (0: none).
func (g *Gate) markerHolder(ctx context.Context, roomID string, s markerSpec) (held *validate.HeldBy, outcome string, last uint64, err error) {
	if s.kind != room.MarkDecision {
		// The gate stores a key's or run's marker only on an empty
		// subject, or after messages none of which is genuine: the first
		// genuine one is the gate's, and on a subject nobody wrote around
		// the gate, the first message. A later copy naming a replayed
		// record must not move the key.
		first, err := g.leaderMsg(ctx, map[string]any{"seq": 1, "next_by_subj": s.subj})
		if err != nil || first == nil {
			return nil, "", 0, err
		}
		if h, out, ok, err := g.genuine(ctx, roomID, s, first); err != nil || ok {
			return h, out, first.Sequence, err
		}
		m, err := g.leaderMsg(ctx, map[string]any{"last_by_subj": s.subj})
		if err != nil || m == nil {
			return nil, "", 0, err
		}
		h, out, err := g.scanMarkers(ctx, roomID, s, first.Sequence+1, m.Sequence, true)
		return h, out, m.Sequence, err
	}
	m, err := g.leaderMsg(ctx, map[string]any{"last_by_subj": s.subj})
	if err != nil || m == nil {
		return nil, "", 0, err
	}
	last = m.Sequence
	if h, out, ok, err := g.genuine(ctx, roomID, s, m); err != nil || ok {
		return h, out, last, err
	}
	// The last marker was written around the gate: the genuine one, if
	// any, is earlier (a gate appends one only where none is genuine).
	h, out, err := g.scanMarkers(ctx, roomID, s, 1, last-1, false)
	return h, out, last, err
}

// scanMarkers returns the first (first) or the last genuine marker of s
// on its subject between stream seqs from and to (inclusive), or nil.
func (g *Gate) scanMarkers(ctx context.Context, roomID string, s markerSpec, from, to uint64, first bool) (*validate.HeldBy, string, error) {
	var found *validate.HeldBy
	var outcome string
	for seq := from; seq <= to; {
		m, err := g.leaderMsg(ctx, map[string]any{"seq": seq, "next_by_subj": s.subj})
		if err != nil {
			return nil, "", err
		}
		if m == nil || m.Sequence > to {
			break
		}
		h, out, ok, err := g.genuine(ctx, roomID, s, m)
		if err != nil {
			return nil, "", err
		}
		if ok {
			found, outcome = h, out
			if first {
				break
			}
		}
		seq = m.Sequence + 1
	}
	return found, outcome, nil
}

// genuine checks marker message m of spec s: it is the marker the gate
// stores in its record's batch when the record at its offset is roomID's,
// passes every stateless rule, has the marker's content digest and holds
// value (and, for a decision, the outcome it says), and the offset is the
// one its kind has in a record's batch (recordMarkers: key 1, run 2,
// decision 3). A decision's record must also be the one its key's first
// genuine marker names: a copy of an earlier run's record written around
// the gate, followed by a marker at the right offset, must not reopen a
// decision its unknown outcome closed.
func (g *Gate) genuine(ctx context.Context, roomID string, s markerSpec, m *jetstream.RawStreamMsg) (*validate.HeldBy, string, bool, error) {
	mk, err := room.ParseMarker(m.Data)
	if err != nil || mk.Offset != room.MarkerOffset(s.kind) {
		return nil, "", false, nil
	}
	seq := mk.RecordSeq(m.Sequence)
	if seq == 0 {
		return nil, "", false, nil
	}
	rm, err := g.leaderMsg(ctx, map[string]any{"seq": seq})
	if err != nil || rm == nil || rm.Subject != g.subjects.Records(roomID) {
		return nil, "", false, err
	}
	rec, err := g.v.StoredRecord(rm.Data, events.Location{Seq: seq}, roomID)
	if err != nil || !mk.Names(rec, s.kind, s.value) {
		return nil, "", false, nil
	}
	if s.kind == room.MarkDecision {
		key := markerSpec{kind: room.MarkKey, value: rec.IdempotencyKey(), subj: g.subjects.Marker(roomID, room.MarkKey, rec.IdempotencyKey())}
		h, _, _, err := g.markerHolder(ctx, roomID, key)
		if err != nil || h == nil || h.Seq != seq {
			return nil, "", false, err
		}
	}
	return &validate.HeldBy{Digest: mk.Record, Seq: seq}, rec.Outcome(), true, nil
}

// markedHeld reads what the room holds against rec (validate.Held) from
// its markers, and notes in m what the next markers must follow.
func (g *Gate) markedHeld(ctx context.Context, rec *events.Record, m *markedRoom, specs []markerSpec) (validate.Held, error) {
	var held validate.Held
	// In reverse batch order: another gate's batch stored meanwhile becomes
	// visible message by message, in its order, so a marker read held has
	// every marker before it in its batch held when read after it. The
	// first rule the record breaks (its key's) is then the one seen, as a
	// decision one record after the other would give.
	for i := len(specs) - 1; i >= 0; i-- {
		s := specs[i]
		if s.kind == room.MarkFormat {
			// A room's first record: its format marker follows whatever
			// was written on the subject around the gate, which would
			// otherwise refuse every first batch of the room.
			fm, err := g.leaderMsg(ctx, map[string]any{"last_by_subj": s.subj})
			if err != nil {
				return held, err
			}
			if fm != nil {
				m.setExpect(s.subj, lastMarker{seq: fm.Sequence})
			}
			continue
		}
		if s.kind != room.MarkKey && s.kind != room.MarkRun && s.kind != room.MarkDecision {
			continue
		}
		h, outcome, last, err := g.markerHolder(ctx, rec.RoomID(), s)
		if err != nil {
			return held, err
		}
		if last > 0 && (h == nil || s.kind == room.MarkDecision) {
			lm := lastMarker{seq: last}
			if h != nil && outcome == "unknown" {
				lm.unknown = h.Seq
			}
			m.setExpect(s.subj, lm)
		}
		switch {
		case h == nil:
		case s.kind == room.MarkKey:
			held.Key = h
		case s.kind == room.MarkRun:
			held.Run = h
		case outcome == "unknown":
			held.Unknown = h.Seq
		}
	}
	return held, nil
}

// storeMarked decides rec on the room's markers and stores it with them
// in one atomic batch. r.mu is held and r is loaded (loadMarked). With
// check, the markers a rule reads are read first (the batch before was
// refused, or the room was just loaded after one); without, the batch is
// sent as if they were free, and the server says if they are not. It
// returns the final reply, or again when the batch was refused for a
// marker or the room's last record: the caller loads the room and calls
// again with check.
func (g *Gate) storeMarked(ctx context.Context, rec *events.Record, r *roomState, reply room.RecordReply, att string, content [32]byte, check bool) (_ room.RecordReply, again bool, err error) {
	roomID := rec.RoomID()
	subj := g.subjects.Records(roomID)
	digest := rec.ContentDigest()
	specs := recordMarkers(g.subjects, rec, !r.marked.format)
	if d := rec.DecisionRef(); !check && d != "" && r.marked.expect[g.subjects.Marker(roomID, room.MarkDecision, d)].unknown != 0 {
		// The decision is closed as this gate last saw it; the server
		// would take the batch (it expects only that nothing came after),
		// so every rule is read as for a refusal.
		check = true
	}
	if check {
		held, err := g.markedHeld(ctx, rec, r.marked, specs)
		if err != nil {
			return reply, false, err
		}
		// Every record holds its idempotency/key: the same record sent
		// again finds itself there.
		if held.Key != nil && held.Key.Digest == digest {
			reply.Item = room.ItemResult{Outcome: room.OutcomeDuplicate, Hash: rec.ComputedRef(), StreamSeq: held.Key.Seq, Subject: subj}
			return reply, false, nil
		}
		if ps := validate.RelationProblems(rec, events.Location{}, held); len(ps) > 0 {
			reply.Item = room.RefusedItem(0, ps)
			reply.Item.Hash = rec.ComputedRef()
			return reply, false, nil
		}
	}
	msgs := make([]*nats.Msg, 0, 1+len(specs))
	// No Nats-Msg-Id: the key marker makes a record's second append fail
	// whenever it comes, not only within the duplicate window, and the
	// server keeps no id per record.
	rm := &nats.Msg{Subject: subj, Data: rec.Canonical(), Header: nats.Header{}}
	rm.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(r.streamSeq, 10))
	if att != "" {
		rm.Header.Set(checkpoint.AttestationHeader, att)
	}
	if tl := g.tooLarge(rm, events.Location{}, 0, 1); tl != nil {
		reply.Item = room.RefusedItem(0, tl)
		reply.Item.Hash = rec.ComputedRef()
		return reply, false, nil
	}
	msgs = append(msgs, rm)
	// The expected last sequence puts the record at position count.
	decision, decisionAt := "", uint64(0) // the decision marker's subject and offset
	for i, m := range markerMsgs(rec, specs, r.count.Load()) {
		switch s := specs[i]; s.kind {
		case room.MarkInstance:
			// Instance markers only index; the others hold a rule: each
			// follows what the gate last saw on its subject (0: nothing).
		case room.MarkDecision:
			decision, decisionAt = s.subj, uint64(i+1)
			fallthrough
		default:
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(r.marked.expect[s.subj].seq, 10))
		}
		msgs = append(msgs, m)
	}
	if att != "" {
		g.expect([]*nats.Msg{rm}, func(int) ([32]byte, string) { return content, "" })
	}
	tctx, cancel := context.WithTimeout(ctx, g.timeout)
	// One round trip: no acknowledgement of the first message.
	ack, err := jetstreamext.PublishMsgBatch(tctx, g.js, msgs, jetstreamext.BatchFlowControl{AckTimeout: g.timeout})
	cancel()
	if err != nil {
		g.unstored(rm, nil, err)
	}
	var apiErr *jetstream.APIError
	isAPI := errors.As(err, &apiErr)
	switch {
	case err == nil:
		first := ack.Sequence - uint64(len(msgs)) + 1 // a batch is stored at consecutive sequences
		if g.attested != nil && att != "" {
			// The whole batch, so the checkpointer takes it from memory:
			// the markers, without a header, are no leaves.
			out := make([]room.StoredMsg, len(msgs))
			out[0] = room.StoredMsg{Subject: subj, Header: att, Content: content}
			for i, m := range msgs[1:] {
				out[i+1] = room.StoredMsg{Subject: m.Subject}
			}
			g.attested.Stored(first, out)
		}
		r.streamSeq = first
		r.count.Add(1)
		r.marked.format = true
		if decision != "" {
			lm := lastMarker{seq: first + decisionAt}
			if rec.Outcome() == "unknown" {
				lm.unknown = first
			}
			r.marked.setExpect(decision, lm)
		}
		reply.Item = room.ItemResult{Outcome: room.OutcomeStored, Hash: rec.ComputedRef(), StreamSeq: first, Subject: subj}
		return reply, false, nil
	case jsapi.IsWrongLastSequence(err) || (isAPI && apiErr.ErrorCode == errCodeBatchDuplicate):
		// A marker's subject or the room's records moved on: nothing of
		// the batch was stored.
		return reply, true, nil
	case isAPI && apiErr.ErrorCode == errCodeBatchDisabled:
		return reply, false, fmt.Errorf("the stream turns record markers on but refuses atomic batches: %w", err)
	case isAPI && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum:
		reply.Item = room.RefusedItem(0, []events.Problem{{Code: events.TooLarge, Reason: apiErr.Description}})
		reply.Item.Hash = rec.ComputedRef()
		return reply, false, nil
	case jsapi.IsStoreFull(err):
		reply.Item = failed(0, errStoreFull(err))
		return reply, false, nil
	case jsapi.IsRetryable(err) || (!isAPI && ctx.Err() == nil):
		// No leader for now, or no clear answer: the batch is all or
		// nothing, and the next try reads what is stored first.
		return reply, false, err
	default:
		reply.Item = failed(0, err)
		return reply, false, nil
	}
}

// storeMarkedIn is storeRecord's step on a marked room: what any append
// checks first (readyToAppend), the record's attestation at its position,
// then storeMarked.
func (g *Gate) storeMarkedIn(ctx context.Context, rec *events.Record, r *roomState, reply room.RecordReply, pre presigned, content [32]byte, check bool) (room.RecordReply, bool, error) {
	roomID := rec.RoomID()
	if item, err := g.readyToAppend(ctx, roomID); item != nil || err != nil {
		if item != nil {
			reply.Item = *item
		}
		return reply, false, err
	}
	att, ahead := pre.att, pre.att != "" && pre.position == r.count.Load()
	if !ahead {
		att = g.attest(roomID, g.subjects.Records(roomID), checkpoint.RecordPosition(r.count.Load()), content)
	}
	out, again, err := g.storeMarked(ctx, rec, r, reply, att, content, check)
	if ahead && g.presigned != nil && err == nil && out.Item.Outcome == room.OutcomeStored {
		g.presigned.Add(1)
	}
	return out, again, err
}

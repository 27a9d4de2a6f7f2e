package ingest

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	"go.uber.org/zap"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/jsapi"
)

// DamagedRoom is a room the survey found damaged beyond its chains. Its
// latest checkpoint covers more leaves than the stream still holds for
// it: Size is the checkpoint's tree size, Held the messages on the room's
// journal and record subjects now (fewer than Size: at least Size - Held
// admitted leaves are gone; Size 0: no such damage). Or its record
// subject lost records: the last record, at stream seq RecordsBefore, is
// attested at an ordinal RecordsLost above the one the stream gives it
// (0: none).
//
// Or, from the checkpointer (NoteContradiction), Contradiction says how
// the room's latest checkpoint contradicts the messages the stream holds:
// a message the server can no longer read (its state file kept a damaged
// block's count), or one changed.
type DamagedRoom struct {
	RoomID        string
	Size          uint64
	Held          uint64
	RecordsLost   uint64
	RecordsBefore uint64
	Contradiction string
}

// Survey is what Survey found: how many chains and rooms it looked at,
// and which of them the store lost acknowledged messages of.
type Survey struct {
	ChainsSeen, RoomsSeen int
	Damaged               []DamagedChain
	DamagedRooms          []DamagedRoom
}

// lastBatch is how many subjects one multi_last direct get asks for.
const lastBatch = 256

// Survey looks over the whole stream for what the store lost without
// replaying it (docs/reliability.md, "When the store loses what it
// acknowledged"): one paged count of the messages on every subject
// (jsapi.SubjectCounts), the last message of each chain's subject and the
// latest checkpoint of each room (batched direct gets), on
// GateOptions.SurveyConn. Its requests grow with the number of chains and
// rooms, never with the stream's messages; the server's work for them
// grows with the message blocks that hold the chains' heads, which it
// loads on the first read after its start.
//
//   - A chain whose subject holds fewer messages than its last entry's
//     position + 1, or whose last message is attested (by a trusted
//     publisher) as not the last of its batch, is read again as an
//     append would read it (its head, then the whole chain when still
//     short), which closes it when positions are missing
//     (events.StoreLost) and names them.
//   - With a publisher key: a room whose latest checkpoint signed by a
//     trusted publisher has a larger tree than the messages on its
//     journal and record subjects is damaged (reported; its chains stay
//     open unless they show a hole of their own).
//
// Damaged rooms are logged at error level and kept for DamagedRooms.
// Errors: a read that failed (the survey stops; what it found stays).
func (g *Gate) Survey(ctx context.Context) (Survey, error) {
	var out Survey
	// Chains, records and checkpoints only: a room's record markers (one
	// subject per idempotency key, run, decision and instance) are never
	// listed.
	counts := map[string]uint64{}
	var err error
	root := g.subjects.Root()
	for _, filter := range []string{root + ".*.journal.*.*", root + ".*.exec", root + ".*.checkpoint"} {
		var c map[string]uint64
		if c, err = jsapi.SubjectCounts(ctx, g.surveyNC, g.streamName(), filter, g.timeout); err != nil {
			return out, err
		}
		maps.Copy(counts, c)
	}
	held := map[string]uint64{} // room -> messages on its leaf subjects
	var chains, checkpoints, execs []string
	for subj, n := range counts {
		p, err := g.subjects.Parse(subj)
		if err != nil {
			continue // not a room subject: the readers' bad_subject
		}
		switch p.Kind {
		case room.KindJournal:
			chains = append(chains, subj)
			held[p.RoomID] += n
		case room.KindExecution:
			held[p.RoomID] += n
			execs = append(execs, subj)
		case room.KindCheckpoint:
			checkpoints = append(checkpoints, subj)
		}
	}
	slices.Sort(chains)
	slices.Sort(checkpoints)
	slices.Sort(execs)
	out.ChainsSeen, out.RoomsSeen = len(chains), len(held)
	delLo, _, err := g.deletedSeqs(ctx, g.surveyNC)
	if err != nil {
		return out, err
	}
	err = g.lastEach(ctx, chains, true, func(subj string, m jsapi.Msg) error {
		if m.Seq == 0 {
			// Counted, but no last message returned: the server can no
			// longer read it (a damaged block, its state file kept).
			p, _ := g.subjects.Parse(subj)
			_, err := g.Head(ctx, p.Chain) // judges the chain (lastReadable)
			return err
		}
		e, err := events.ParseEntry(m.Data)
		if err != nil {
			return nil // not an entry: not the chain's head (the readers refuse it)
		}
		// A last message whose trusted attestation places more after
		// it ends a batch the store cut (batchTail).
		// So does a chain that ends after stream seqs the stream shows
		// deleted: the server's count for its subject may still hold
		// them (judgeLoss reads it if it spans them).
		if seq, ok := e.Seq(); !ok || seq < 0 || (counts[subj] >= uint64(seq)+1 && g.batchTail(m.Raw()) == 0 && (delLo == 0 || m.Seq < delLo)) {
			return nil
		}
		p, _ := g.subjects.Parse(subj)
		_, err = g.Head(ctx, p.Chain) // judges the chain (noteLoss)
		return err
	})
	if err != nil {
		return out, err
	}
	if g.trust != nil {
		var rooms []DamagedRoom
		err = g.lastEach(ctx, checkpoints, false, func(subj string, m jsapi.Msg) error {
			p, _ := g.subjects.Parse(subj)
			ck, err := checkpoint.Parse(m.Data, p.RoomID, g.trust)
			if err != nil {
				return nil // not a trusted checkpoint: says nothing of what was acknowledged
			}
			if ck.Size > held[p.RoomID] {
				rooms = append(rooms, DamagedRoom{RoomID: p.RoomID, Size: ck.Size, Held: held[p.RoomID]})
			}
			return nil
		})
		if err != nil {
			return out, err
		}
		if rooms, err = g.surveyRecords(ctx, execs, counts, rooms); err != nil {
			return out, err
		}
		g.noteRooms(rooms)
		out.DamagedRooms = rooms
	}
	out.Damaged = g.Damaged()
	if g.trust != nil {
		// What operators acknowledged of the damaged rooms
		// (Unacknowledged).
		seen := map[string]bool{}
		for _, d := range out.Damaged {
			seen[d.RoomID] = true
		}
		for _, d := range g.DamagedRooms() { // the survey's and those found contradicted
			seen[d.RoomID] = true
		}
		for _, id := range slices.Sorted(maps.Keys(seen)) {
			if _, err := g.notices(ctx, id); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// lastEach calls each with the last message of every subject of subjs
// that has one, lastBatch subjects a multi_last direct get; a subject the
// reply left out (the reply's byte bound) is read alone. With unread, a
// subject of subjs (each counted by the server) whose last message the
// server does not return is passed too, with a zero Msg.
func (g *Gate) lastEach(ctx context.Context, subjs []string, unread bool, each func(subj string, m jsapi.Msg) error) error {
	for len(subjs) > 0 {
		part := subjs[:min(lastBatch, len(subjs))]
		subjs = subjs[len(part):]
		msgs, err := g.lastOf(ctx, part)
		if err != nil {
			return err
		}
		for _, subj := range part {
			m, ok := msgs[subj]
			if !ok {
				raw, err := g.lastOn(ctx, subj, false)
				if err != nil {
					return fmt.Errorf("last message on %s: %w", subj, err)
				}
				switch {
				case raw != nil:
					m = jsapi.Msg{Seq: raw.Sequence, Subject: raw.Subject, Header: raw.Header, Data: raw.Data}
				case unread:
					m = jsapi.Msg{Subject: subj} // Seq 0: none returned
				default:
					continue
				}
			}
			if err := each(subj, m); err != nil {
				return err
			}
		}
	}
	return nil
}

// lastOf is one multi_last direct get of subjs, by subject; nil (and no
// error) when no server answers direct gets (lastEach reads each alone).
func (g *Gate) lastOf(ctx context.Context, subjs []string) (map[string]jsapi.Msg, error) {
	msgs, err := jsapi.DirectBatch(ctx, g.surveyNC, g.streamName(), jsapi.BatchRequest{MultiLast: subjs, Batch: len(subjs), MaxBytes: 16 << 20}, g.timeout)
	if err != nil && !jsapi.IsRetryable(err) {
		return nil, err
	}
	out := make(map[string]jsapi.Msg, len(msgs))
	for _, m := range msgs {
		out[m.Subject] = m
	}
	return out, nil
}

// DamagedRooms returns the rooms the last Survey found damaged and those
// the checkpointer said contradict their checkpoint (NoteContradiction),
// one entry per room, sorted by room id; empty when none.
func (g *Gate) DamagedRooms() []DamagedRoom {
	g.lossMu.Lock()
	defer g.lossMu.Unlock()
	return g.damagedRoomsLocked()
}

func (g *Gate) damagedRoomsLocked() []DamagedRoom {
	out := slices.Clone(g.damagedRooms)
	for id, why := range g.contradictions {
		i := slices.IndexFunc(out, func(r DamagedRoom) bool { return r.RoomID == id })
		if i < 0 {
			out = append(out, DamagedRoom{RoomID: id})
			i = len(out) - 1
		}
		out[i].Contradiction = why
	}
	slices.SortFunc(out, func(a, b DamagedRoom) int { return cmp.Compare(a.RoomID, b.RoomID) })
	return out
}

// NoteContradiction records what the checkpointer found of roomID: its
// latest checkpoint contradicts the messages the stream holds as trusted
// here (reason), or matches them again (""). That is a store that lost or
// changed messages (a damaged block the server's kept state file still
// counts), or messages attested by a key no longer trusted: the gate
// reports the room (DamagedRooms, /healthz) and reads the chains of the
// room whole when it judges them (judgeLoss), but does not refuse the
// room for it. checkpointer.Options.OnContradiction calls it in serve;
// the checkpointer logs it.
func (g *Gate) NoteContradiction(roomID, reason string) {
	g.lossMu.Lock()
	if reason == "" {
		delete(g.contradictions, roomID)
	} else {
		g.contradictions[roomID] = reason
	}
	g.anyDamage.Store(len(g.damaged) > 0 || len(g.damagedRooms) > 0 || len(g.contradictions) > 0)
	n := len(g.damagedRoomsLocked())
	g.lossMu.Unlock()
	g.roomsObserved(n)
	if reason != "" {
		g.Recheck() // chains judged before: judged again, read whole
	}
}

// roomsObserved tells a LossObserver how many rooms DamagedRooms lists.
func (g *Gate) roomsObserved(n int) {
	if lo, ok := g.obs.(LossObserver); ok {
		lo.RoomsDamaged(g.streamName(), n)
	}
}

// contradicted reports whether the checkpointer said roomID's checkpoint
// contradicts its messages.
func (g *Gate) contradicted(roomID string) bool {
	if !g.anyDamage.Load() {
		return false
	}
	g.lossMu.Lock()
	defer g.lossMu.Unlock()
	return g.contradictions[roomID] != ""
}

// noteRooms keeps rooms as the damaged rooms, logging each newly found at
// error level.
func (g *Gate) noteRooms(rooms []DamagedRoom) {
	g.lossMu.Lock()
	old := g.damagedRooms
	g.damagedRooms = rooms
	g.anyDamage.Store(len(g.damaged) > 0 || len(rooms) > 0 || len(g.contradictions) > 0)
	n := len(g.damagedRoomsLocked())
	g.lossMu.Unlock()
	g.roomsObserved(n)
	for _, r := range rooms {
		if slices.Contains(old, r) {
			continue
		}
		g.log.Error("the store lost acknowledged messages of a room: "+r.What(),
			zap.String("room", r.RoomID), zap.Uint64("checkpoint_size", r.Size), zap.Uint64("held", r.Held),
			zap.Uint64("records_lost", r.RecordsLost), zap.Uint64("records_before_stream_seq", r.RecordsBefore))
	}
}

// surveyRecords adds to rooms (merged by room, sorted) the rooms whose
// record subject lost records: a record's attested position is its
// ordinal on the subject (checkpoint.RecordPosition), so when the last
// record is attested at an ordinal above the count the stream holds
// before it, records before it are gone. The search for its ordinal is
// bounded by the messages the stream shows deleted (none deleted: an
// attestation that does not verify is a message no publisher admitted,
// which the readers refuse, not a loss).
func (g *Gate) surveyRecords(ctx context.Context, execs []string, counts map[string]uint64, rooms []DamagedRoom) ([]DamagedRoom, error) {
	var deleted uint64
	s, err := g.js.Stream(ctx, g.streamName())
	if err != nil {
		return rooms, err
	}
	if st := s.CachedInfo().State; st.NumDeleted > 0 || st.FirstSeq > 1 {
		deleted = uint64(st.NumDeleted) + max(st.FirstSeq, 1) - 1
	}
	err = g.lastEach(ctx, execs, false, func(subj string, m jsapi.Msg) error {
		p, _ := g.subjects.Parse(subj)
		header, content := checkpoint.AttestationOf(m.Header), checkpoint.ContentHash(m.Data)
		held := counts[subj]
		if held == 0 || deleted == 0 {
			return nil
		}
		if _, err := g.trust.VerifyAttestation(header, p.RoomID, subj, checkpoint.RecordPosition(held-1), content); err == nil {
			return nil
		}
		for lost := uint64(1); lost <= deleted; lost++ {
			if _, err := g.trust.VerifyAttestation(header, p.RoomID, subj, checkpoint.RecordPosition(held-1+lost), content); err == nil {
				i := slices.IndexFunc(rooms, func(r DamagedRoom) bool { return r.RoomID == p.RoomID })
				if i < 0 {
					rooms = append(rooms, DamagedRoom{RoomID: p.RoomID})
					i = len(rooms) - 1
				}
				rooms[i].RecordsLost, rooms[i].RecordsBefore = lost, m.Seq
				return nil
			}
		}
		return nil
	})
	slices.SortFunc(rooms, func(a, b DamagedRoom) int { return cmp.Compare(a.RoomID, b.RoomID) })
	return rooms, err
}

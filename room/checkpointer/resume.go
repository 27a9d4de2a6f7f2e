package checkpointer

import (
	"context"
	"maps"
	"slices"

	"go.uber.org/zap"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/jsapi"
)

// How a room with a checkpoint was rebuilt at start, the values of the
// outcome label of roompub_checkpoint_resumed_rooms_total: resumed, or
// why its latest checkpoint could not be resumed from.
const (
	resumeOK           = "resumed"
	resumeNoHeader     = "no_header"     // no checkpoint.ResumeHeader (written before it, or by hand)
	resumeUnsigned     = "unsigned"      // no checkpoint.ResumeSignatureHeader that verifies for the note and header
	resumeMalformed    = "malformed"     // the header does not parse, or names a leaf at or after the checkpoint
	resumeBadNote      = "bad_note"      // not a checkpoint of the room a trusted publisher signed
	resumeOtherKey     = "other_key"     // signed by another trusted publisher than this one
	resumeLeafMismatch = "leaf_mismatch" // the message at the leaf's seq is not that leaf
	resumeBadRange     = "bad_range"     // the compact range does not hash to the checkpoint's root
	resumeTrustChanged = "trust_changed" // the tree was built trusting other publishers (or another origin)
	resumeUnreadable   = "unreadable"    // a read failed
	resumeContradicted = "contradicted"  // Options.ReadWhole: an earlier run found its checkpoint contradicted
)

// resume rebuilds, before the catch-up read, each room whose latest
// checkpoint this checkpointer's key signed with a checkpoint.ResumeHeader
// that verifies (resumeRoom), and returns the stream seq the catch-up read
// starts at: the lowest of those rooms' resume points (their first
// message after their last leaf but their checkpoints: roomFrom), of the
// first messages of the rooms that have leaf subjects but
// were not resumed (read from their first message, as before), and, with
// a deployment log, of the seq after the last room checkpoint of this
// stream in it. Rooms are listed as Survey lists them: the stream's
// per-subject counts of the checkpoint, journal and exec subjects; reads
// grow with the rooms, not with the messages. A failed listing reads the
// whole stream.
func (c *Checkpointer) resume(ctx context.Context) uint64 {
	nc, root := c.js.Conn(), c.subjects.Root()
	from := c.startSeq + 1
	counts := map[string]map[string]uint64{}
	for _, f := range []string{root + ".*.checkpoint", root + ".*.journal.*.*", root + ".*.exec"} {
		n, err := jsapi.SubjectCounts(ctx, nc, c.streamName, f, room.DefaultTimeout)
		if err != nil {
			c.log.Warn("checkpointer: cannot list the rooms: reading the whole stream", zap.Error(err))
			return 1
		}
		counts[f] = n
	}
	execs := counts[root+".*.exec"]
	leafRooms := map[string]bool{}
	for _, f := range []string{root + ".*.journal.*.*", root + ".*.exec"} {
		for subj := range counts[f] {
			if p, err := c.subjects.Parse(subj); err == nil {
				leafRooms[p.RoomID] = true
			}
		}
	}
	done := map[string]bool{} // the rooms resumed
	for _, subj := range slices.Sorted(maps.Keys(counts[root+".*.checkpoint"])) {
		p, err := c.subjects.Parse(subj)
		if err != nil || p.Kind != room.KindCheckpoint {
			continue
		}
		if slices.Contains(c.readWhole, p.RoomID) {
			c.m.resumed.WithLabelValues(resumeContradicted).Inc()
			c.log.Warn("checkpointer: an earlier run found the room's checkpoint contradicting its messages: reading it from its first message",
				zap.String("room", p.RoomID))
			continue
		}
		r, why, err := c.resumeRoom(ctx, p.RoomID, subj, execs[c.subjects.Records(p.RoomID)])
		c.m.resumed.WithLabelValues(why).Inc()
		if r == nil {
			// Loudly: this room costs a read from its first message.
			c.log.Warn("checkpointer: cannot resume the room from its latest checkpoint: reading it from its first message",
				zap.String("room", p.RoomID), zap.String("why", why), zap.Error(err))
			continue
		}
		c.mu.Lock() // the lag metric reads the rooms
		c.rooms[r.id] = r
		c.mu.Unlock()
		done[r.id] = true
		from = min(from, r.from)
	}
	for _, id := range slices.Sorted(maps.Keys(leafRooms)) {
		if done[id] {
			continue
		}
		m, err := jsapi.LeaderGetRaw(ctx, nc, c.streamName, room.DefaultTimeout, map[string]any{"seq": 1, "next_by_subj": c.subjects.Room(id)})
		if err != nil {
			c.log.Warn("checkpointer: cannot find a room's first message: reading the whole stream", zap.String("room", id), zap.Error(err))
			return 1
		}
		if m != nil {
			from = min(from, m.Sequence)
		}
	}
	if d := c.dep; d != nil {
		d.mu.Lock()
		from = min(from, d.sources[c.streamName]+1)
		d.mu.Unlock()
	}
	c.log.Info("checkpointer: resuming", zap.Int("rooms_resumed", len(done)), zap.Int("rooms_read_whole", len(leafRooms)-len(done)),
		zap.Uint64("from_stream_seq", from), zap.Uint64("last_stream_seq", c.startSeq))
	return from
}

// resumeRoom returns roomID's state as of its latest checkpoint (the last
// message on subj) and where it is read from (roomFrom), from the checkpoint's resume header, verified rather
// than trusted: the note is a checkpoint of the room signed by this
// checkpointer's key, and so is the header (checkpoint.VerifyResume: its
// record count and leaf seq are tied to nothing the note signs); the
// header parses, names a leaf before the
// checkpoint and the publishers this checkpointer trusts
// (checkpoint.TrustDigest: trusting others, the tree would be another);
// the message at that seq is a leaf subject of the room whose
// leaf hash is the header's last leaf; the compact range with that leaf
// hashes to the signed root at its size (checkpoint.ResumeLedger); the
// record count is no larger than the messages on the room's exec subject
// (records). Otherwise nil and why (a resume* reason) and the error.
func (c *Checkpointer) resumeRoom(ctx context.Context, roomID, subj string, records uint64) (*ckRoom, string, error) {
	nc := c.js.Conn()
	m, err := jsapi.LeaderGetRaw(ctx, nc, c.streamName, room.DefaultTimeout, map[string]any{"last_by_subj": subj})
	if err != nil || m == nil {
		return nil, resumeUnreadable, err
	}
	hv := m.Header.Get(checkpoint.ResumeHeader)
	if hv == "" {
		return nil, resumeNoHeader, nil
	}
	ck, err := checkpoint.Parse(m.Data, roomID, c.trust)
	if err != nil {
		return nil, resumeBadNote, err
	}
	if ck.Signer != c.nodeID {
		return nil, resumeOtherKey, nil
	}
	if err := c.trust.VerifyResume(ck.Signer, m.Data, hv, m.Header.Get(checkpoint.ResumeSignatureHeader)); err != nil {
		return nil, resumeUnsigned, err
	}
	rs, err := checkpoint.ParseResume(hv)
	if err != nil {
		return nil, resumeMalformed, err
	}
	if rs.LeafSeq >= m.Sequence || rs.Records > records {
		return nil, resumeMalformed, nil
	}
	if rs.Trust != c.trustDigest {
		return nil, resumeTrustChanged, nil
	}
	lm, err := jsapi.LeaderGetRaw(ctx, nc, c.streamName, room.DefaultTimeout, map[string]any{"seq": rs.LeafSeq})
	if err != nil || lm == nil {
		return nil, resumeUnreadable, err
	}
	p, err := c.subjects.Parse(lm.Subject)
	if err != nil || p.RoomID != roomID || !p.Kind.Leaf() || lm.Sequence != rs.LeafSeq ||
		checkpoint.LeafHash(roomID, lm.Subject, checkpoint.ContentHash(lm.Data)) != rs.Last {
		return nil, resumeLeafMismatch, err
	}
	l, err := checkpoint.ResumeLedger(ck, m.Sequence, rs)
	if err != nil {
		return nil, resumeBadRange, err
	}
	from, err := c.roomFrom(ctx, roomID, rs.LeafSeq)
	if err != nil {
		return nil, resumeUnreadable, err
	}
	return &ckRoom{id: roomID, ledger: c.boundLedger(l, roomID), execCount: rs.Records, from: from, resumedAt: m.Sequence, ckptSeq: m.Sequence,
		leafSeq: rs.LeafSeq, leafExec: rs.Records}, resumeOK, nil
}

// roomFromSteps bounds how many checkpoints after a room's last leaf
// roomFrom steps over: one, the resume checkpoint, as a rule.
const roomFromSteps = 16

// roomFrom returns the stream seq from which roomID must be read, its
// last leaf being at leafSeq: its first message after leafSeq that is not
// on its checkpoint subject (those up to the resume checkpoint are its
// predecessor's, the resume checkpoint the subject's last), or, when
// there is none, the seq after the stream's last at start: a quiet room
// costs the catch-up read nothing.
func (c *Checkpointer) roomFrom(ctx context.Context, roomID string, leafSeq uint64) (uint64, error) {
	next, ck := leafSeq+1, c.subjects.Checkpoint(roomID)
	for range roomFromSteps {
		m, err := jsapi.LeaderGetRaw(ctx, c.js.Conn(), c.streamName, room.DefaultTimeout, map[string]any{"seq": next, "next_by_subj": c.subjects.Room(roomID)})
		switch {
		case err != nil:
			return 0, err
		case m == nil:
			return max(next, c.startSeq+1), nil
		case m.Subject != ck:
			return m.Sequence, nil
		}
		next = m.Sequence + 1
	}
	return next, nil
}

// passedOver handles a message of r before where r resumed (r.from, for a
// checkpoint r.resumedAt): the checkpointer that wrote r's resume
// checkpoint handled it (roomFrom found none of r's messages between r's
// last leaf and r.from but checkpoints), and it is passed over. A checkpoint among them is
// still the subject's last read (a write expects it) and, signed by a
// trusted publisher, offered to the deployment log, which skips what it
// holds. c.mu is held.
func (c *Checkpointer) passedOver(r *ckRoom, seq uint64, kind room.Kind, data []byte) bool {
	if kind == room.KindCheckpoint {
		if seq >= r.resumedAt {
			return false
		}
		c.decide(nil, c.batches.Pass(seq))
		r.ckptSeq = max(r.ckptSeq, seq)
		if c.dep != nil {
			if _, err := checkpoint.Parse(data, r.id, c.trust); err == nil {
				c.dep.offer(c.streamName, seq, data)
			}
		}
		return true
	}
	if seq >= r.from {
		return false
	}
	c.decide(nil, c.batches.Pass(seq))
	return true
}

package checkpointer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	"golang.org/x/mod/sumdb/note"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/jsapi"
)

// What a message that is no leaf is logged as.
const (
	notLeafUnattested = "checkpointer: a message without attestation is not a leaf"
	notLeafNoEntry    = "checkpointer: an attested journal message that is no entry is not a leaf"
	notLeafRefused    = "checkpointer: a message whose attestation does not verify is not a leaf"
)

// handleLocked handles the message at stream sequence seq, in stream
// order: data, its attestation header and its HeaderOwner as read, or,
// with own, a message of a batch the gate of this process stored (own its
// content hash; data nil), which is admitted without reading it (the
// caller has ended the batch held open: follow). c.mu is held.
func (c *Checkpointer) handleLocked(seq uint64, subject string, data []byte, header, owner string, own *[32]byte) {
	var err error
	p, ok := c.parsed[subject]
	if !ok {
		if p, err = c.subjects.Parse(subject); err != nil {
			return // not a room subject: nothing of any room's tree
		}
		if len(c.parsed) >= ckSubjectCache {
			clear(c.parsed)
		}
		c.parsed[subject] = p
	}
	r := c.rooms[p.RoomID]
	if r == nil {
		r = &ckRoom{id: p.RoomID, ledger: c.boundLedger(checkpoint.NewLedger(), p.RoomID)}
		c.rooms[p.RoomID] = r
	}
	if r.from != 0 && c.passedOver(r, seq, p.Kind, data) {
		return
	}
	if p.Kind == room.KindCheckpoint {
		c.decide(nil, c.batches.Pass(seq))
		c.readCheckpoint(r, seq, data)
		return
	}
	if !p.Kind.Leaf() { // a loss notice: no leaf of the room's tree
		c.decide(nil, c.batches.Pass(seq))
		return
	}
	position := ""
	if p.Kind == room.KindExecution {
		position = checkpoint.RecordPosition(r.execCount)
		r.execCount++
	}
	var content [32]byte
	if own != nil {
		content = *own
	} else {
		content = checkpoint.ContentHash(data)
	}
	q := ckHeld{r: r, seq: seq, subject: subject, leaf: checkpoint.LeafHash(r.id, subject, content), exec: r.execCount}
	st := checkpoint.Statement{Room: r.id, Subject: subject, Position: position, Content: content}
	// The gate's announcement of the message, if any, is forgotten now;
	// it vouches for the message only at the position announced.
	ref, announced := c.own.take(content, subject, header)
	announced = announced && ref.at(p.Kind, position, owner)
	switch {
	case own != nil:
		// The gate attested it and the server acknowledged it stored at
		// seq, in a whole batch: a leaf.
		c.take(r, q)
	case header == "":
		c.decide(nil, c.batches.Pass(seq))
		c.notLeaf(r, notLeafUnattested, seq, subject, nil)
	case announced:
		// The gate's own, read from the stream: admitted without its
		// signature checked once its batch is read whole, each message
		// announced in the batch whose signature its last carries (a
		// journal entry's position is worked out only if the batch turns
		// out to hold messages the gate did not announce in it).
		if p.Kind == room.KindJournal {
			c.decide(&q, c.batches.Vouch(seq, header, st, data, owner, *ref.sig))
		} else {
			c.decide(&q, c.batches.Vouch(seq, header, st, nil, "", *ref.sig))
		}
	default:
		// Another publisher's, or this one's before a restart: verified
		// once its whole batch has been read.
		if p.Kind == room.KindJournal {
			if st.Position, err = checkpoint.EntryPosition(data, owner); err != nil {
				c.decide(nil, c.batches.Pass(seq))
				c.notLeaf(r, notLeafNoEntry, seq, subject, err)
				return
			}
		}
		c.decide(&q, c.batches.Add(seq, header, st))
	}
}

// decide applies the collector's verdicts vs, which decide, in stream
// order, the messages held and then q (nil: a message that is no batch's,
// already told to the collector), all of them or all but the batch it
// holds open now, and keeps the undecided ones held. c.mu is held.
func (c *Checkpointer) decide(q *ckHeld, vs []checkpoint.BatchVerdict) {
	all := c.held
	if q != nil {
		all = append(all, *q)
	}
	i := 0
	for _, v := range vs {
		for i < len(all) && all[i].seq != v.ID {
			i++ // cannot happen: verdicts come in stream order, one per message
		}
		if i == len(all) {
			break
		}
		h := all[i]
		i++
		if v.Err != nil {
			c.notLeaf(h.r, notLeafRefused, h.seq, h.subject, v.Err)
			continue
		}
		c.take(h.r, h)
	}
	keep := all[len(all)-c.batches.Pending():]
	n := copy(all, keep)
	clear(all[n:])
	c.held = all[:n]
}

// settleStuck refuses the batches still incomplete once the reader has
// handled the last message on the room subjects, as the stream leader has
// it, and nothing came for a second: an atomic batch is stored whole
// before any of it can be read, so they never complete (a forged header).
// NumPending alone does not tell: a message of a batch just stored may be
// delivered saying fewer of it follow. With force (Stop, after catchUp),
// they are refused at once.
func (c *Checkpointer) settleStuck(ctx context.Context, force bool) {
	c.mu.Lock()
	quiet := c.batches.Pending() > 0 && c.lastPending == 0 && time.Since(c.lastAt) >= time.Second
	c.mu.Unlock()
	if !force && !quiet {
		return
	}
	if !force {
		last, err := jsapi.LeaderGetRaw(ctx, c.js.Conn(), c.stream.CachedInfo().Config.Name, room.DefaultTimeout, map[string]any{"last_by_subj": c.subjects.All()})
		if err != nil || last == nil || c.handled.Load() < last.Sequence {
			return // not read whole yet (or no answer): later
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.batches.Pending() > 0 {
		c.decide(nil, c.batches.Flush())
	}
}

// boundLedger bounds l, roomID's new tree, by c.bounds and returns it;
// one that cannot be bounded (the bounds are checked at Start, so only a
// ledger bounded already) keeps its leaves in memory, as before bounds.
func (c *Checkpointer) boundLedger(l *checkpoint.Ledger, roomID string) *checkpoint.Ledger {
	if err := l.Bound(c.bounds); err != nil {
		c.log.Warn("checkpointer: the room's leaves stay in memory", zap.String("room", roomID), zap.Error(err))
	}
	return l
}

// take adds an admitted message to r's tree.
func (c *Checkpointer) take(r *ckRoom, q ckHeld) {
	if r.treeErr != nil {
		return // the tree is lost until a restart rebuilds it (loseTree)
	}
	r.ledger.Append(q.leaf)
	r.leafSeq, r.leafExec = q.seq, q.exec
	if r.grewAt.IsZero() {
		r.grewAt = time.Now()
	}
	uncovered := r.ledger.Size() - max(r.ledger.Covered(), r.written)
	if uncovered >= c.every {
		select {
		case c.due <- struct{}{}:
		default:
		}
	}
	if r.ledger.Size()-r.ledger.Covered() > uint64(c.bounds.Window) {
		// Past the window the tree writes leaves to its file: say once
		// when it cannot, and give the tree up when what it wrote cannot
		// be read back.
		st := r.ledger.LeafStats()
		if st.WriteErr != nil && !r.spillWarned {
			r.spillWarned = true
			c.log.Warn("checkpointer: the room's uncovered leaves cannot be written to a file: they stay in memory, 32 bytes each, until a checkpoint covers them",
				zap.String("room", r.id), zap.Uint64("uncovered", uncovered), zap.Error(st.WriteErr))
		}
		if st.ReadErr != nil {
			c.loseTree(r, st.ReadErr)
		}
	}
}

// loseTree gives up r's tree, whose leaves written to its file cannot be
// read back (checkpoint.ErrLeafSpill: the file's disk failed, or filled
// while compacting): its roots can no longer be computed, so the room
// gets no checkpoint and its later leaves and checkpoints are passed over
// (no memory grows for it) until a restart rebuilds the tree from the
// room's latest checkpoint or its first message. Not a contradiction:
// nothing is said of the room's messages. Counted in
// roompub_checkpoint_rooms_blocked and logged once. c.mu is held.
func (c *Checkpointer) loseTree(r *ckRoom, err error) {
	if r.treeErr != nil {
		return
	}
	r.treeErr = err
	c.m.blocked.Inc()
	c.log.Error("checkpointer: the room's tree lost the leaves it wrote to its file: no checkpoint will be written for the room until serve restarts",
		zap.String("room", r.id), zap.Uint64("size", r.ledger.Size()), zap.Error(err))
}

// notLeaf counts and logs a message that is no leaf: the room's first at
// warn level, later ones at debug level, so writing into a room raw cannot
// flood the log (roompub_checkpoint_unadmitted_messages_total counts them
// all).
func (c *Checkpointer) notLeaf(r *ckRoom, what string, seq uint64, subject string, err error) {
	c.m.unadmitted.Inc()
	log := c.log.Debug
	if !r.warned {
		r.warned, log = true, c.log.Warn
		what += " (the room's first; later ones are logged at debug level)"
	}
	log(what, zap.String("room", r.id), zap.Uint64("stream_seq", seq), zap.String("subject", subject), zap.Error(err))
}

// readCheckpoint checks a checkpoint read at seq against the room's tree,
// which holds every leaf before it in stream order, by the readers' rules
// (checkpoint.(*Ledger).Check: no smaller than the latest that matched, no
// larger than the tree, consistent with the latest, the tree's root at its
// size); one that matches becomes the latest.
func (c *Checkpointer) readCheckpoint(r *ckRoom, seq uint64, data []byte) {
	r.ckptSeq = max(r.ckptSeq, seq)
	ck, err := checkpoint.Parse(data, r.id, c.trust)
	if err != nil {
		// Not a checkpoint a trusted publisher signed for this room:
		// anyone who can get a message onto the subject could write it,
		// so it tells nothing of the room and is set aside. Only a
		// trusted signature makes a contradiction evidence of a fork.
		c.setAside(r, seq, data, err)
		return
	}
	if r.treeErr != nil {
		return // nothing to check it against (loseTree)
	}
	if err := r.ledger.Check(ck); err != nil {
		if errors.Is(err, checkpoint.ErrLeafSpill) {
			c.loseTree(r, err) // not a verdict on the room: its leaves are lost here
			return
		}
		if r.bad == "" {
			c.m.blocked.Inc()
		}
		r.bad = err.Error()
		// Told before it is logged: whoever reads the log line (an
		// operator, a test) finds /healthz and the gate saying it too.
		if c.onContradiction != nil {
			c.onContradiction(r.id, fmt.Sprintf("its checkpoint at stream seq %d (size %d) contradicts the messages the stream holds: %s", seq, ck.Size, r.bad))
		}
		c.log.Error("checkpointer: the room's latest checkpoint contradicts its messages: no checkpoint will be written for the room",
			zap.String("room", r.id), zap.Uint64("stream_seq", seq), zap.String("signer", ck.Signer), zap.String("reason", r.bad))
		return
	}
	if err := r.ledger.Accept(ck, seq); err != nil { // cannot fail: Check passed
		c.log.Error("checkpointer: accepting the room's checkpoint", zap.String("room", r.id), zap.Error(err))
		return
	}
	if r.bad != "" {
		c.m.blocked.Dec()
		if c.onContradiction != nil {
			c.onContradiction(r.id, "")
		}
		c.log.Info("checkpointer: the room's latest checkpoint matches its messages again", zap.String("room", r.id), zap.Uint64("stream_seq", seq))
	}
	r.bad = ""
	if c.dep != nil {
		c.dep.offer(c.streamName, seq, data)
	}
	if ck.Size == r.ledger.Size() {
		r.grewAt = time.Time{}
	}
}

// Reasons a message on a checkpoint subject is set aside, the values of
// the reason label of roompub_checkpoint_set_aside_total.
const (
	asideMalformed    = "malformed"     // not a signed note in the form Sign writes
	asideOtherRoom    = "other_room"    // its origin line names another room
	asideUntrusted    = "untrusted"     // no signature by a trusted publisher
	asideBadSignature = "bad_signature" // a signature under a trusted name that does not verify
)

// setAside passes over the message at seq on r's checkpoint subject, which
// is not a checkpoint of r signed by a trusted publisher (err says why): it
// is counted, logged (the room's first at warn level, later ones at debug
// level, so writing junk onto the subject cannot flood the log) and
// otherwise ignored: the room's latest checkpoint stays the last valid
// one, and the room's checkpoints go on. r.ckptSeq has moved past it: the
// next write expects it as the subject's last message. c.mu is held.
func (c *Checkpointer) setAside(r *ckRoom, seq uint64, data []byte, err error) {
	why, signer := asideMalformed, ""
	var badSig *note.InvalidSignatureError
	u, uerr := checkpoint.ParseUnverified(data)
	if uerr == nil {
		signer = u.Signer
	}
	switch {
	case uerr == nil && u.Room != r.id:
		why = asideOtherRoom
	case errors.Is(err, checkpoint.ErrUntrustedPublisher):
		why = asideUntrusted
	case errors.As(err, &badSig):
		why = asideBadSignature
	}
	c.m.setAside.WithLabelValues(why).Inc()
	log, msg := c.log.Debug, "checkpointer: a message on the room's checkpoint subject is not a checkpoint signed by a trusted publisher: set aside"
	if !r.asideWarned {
		r.asideWarned, log = true, c.log.Warn
		msg += " (the room's first; later ones are logged at debug level)"
	}
	log(msg, zap.String("room", r.id), zap.Uint64("stream_seq", seq), zap.String("why", why), zap.String("signer", signer), zap.Error(err))
}

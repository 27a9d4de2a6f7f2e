package checkpointer

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/jsapi"
)

// writer writes due checkpoints until ctx is done.
func (c *Checkpointer) writer(ctx context.Context) {
	defer close(c.wdone)
	tick := time.NewTicker(min(max(c.interval/4, 10*time.Millisecond), time.Second))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			c.settleStuck(ctx, false)
		case <-c.due:
		}
		_ = c.writeDue(ctx, false)
	}
}

// dueCheckpoint is a checkpoint to write: a room's tree as it was.
type dueCheckpoint struct {
	r      *ckRoom
	size   uint64
	root   [32]byte
	expect uint64
	resume string // its checkpoint.ResumeHeader value; "" when none could be made
}

// finalAttempts bounds how often a final checkpoint is written again after
// a checkpoint stored on the room's subject since it was last read.
const finalAttempts = 3

// writeDue writes the checkpoint of every room that is due (every room
// whose tree grew, with final) and whose lease it holds or takes. It
// returns the errors of writes that failed. A write the writer had in
// flight when Stop cut it off may be stored anyway, after Stop's read of
// the stream: the final write, which expects the subject's previous
// message, is then refused, reads the subject on and is written again
// (readCheckpointsOn), up to finalAttempts times.
func (c *Checkpointer) writeDue(ctx context.Context, final bool) error {
	var errs []error
	var only map[*ckRoom]bool
	var leased []string // final: rooms left to another publisher's lease
	written := 0        // final: checkpoints written
	defer func() {
		if final {
			// What an operator who stopped serve for its final checkpoints
			// looks for; the rooms not counted had one covering them.
			c.log.Info("checkpointer: final checkpoints written", zap.Int("rooms", written))
		}
		if len(leased) > 0 {
			// Not an error (the lease's holder, or the next start, writes
			// it), but an operator who stopped serve for its final
			// checkpoints must hear that these got none.
			c.log.Warn("checkpointer: no final checkpoint for rooms whose lease another publisher holds (one killed holds it until it lapses); the holder or the next start writes it",
				zap.Int("rooms", len(leased)), zap.Strings("first_rooms", leased[:min(len(leased), 10)]), zap.Duration("lease_ttl", c.ttl))
		}
	}()
	for attempt := 1; ; attempt++ {
		due, skipped := c.dueNow(final, only)
		if attempt == 1 {
			leased = append(leased, skipped...)
		}
		only = nil
		for _, d := range due {
			if ctx.Err() != nil {
				break
			}
			if !c.holdLease(ctx, d.r) {
				if final && attempt == 1 {
					leased = append(leased, d.r.id)
				}
				continue
			}
			err := c.write(ctx, d)
			if errors.Is(err, errCheckpointMoved) {
				if attempt < finalAttempts {
					if only == nil {
						only = map[*ckRoom]bool{}
					}
					only[d.r] = true
					continue
				}
				err = fmt.Errorf("final checkpoint of %s at size %d: %w %d times", d.r.id, d.size, err, attempt)
			}
			if err != nil {
				errs = append(errs, err)
			} else {
				written++
			}
		}
		if only == nil {
			return errors.Join(errs...)
		}
	}
}

// dueNow returns the checkpoints due now: of every room in only, or of all
// when only is nil; with final, also the rooms left out because another
// publisher holds their lease.
func (c *Checkpointer) dueNow(final bool, only map[*ckRoom]bool) (due []dueCheckpoint, leased []string) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.caughtUp {
		return nil, nil
	}
	for _, r := range c.rooms {
		if only != nil && !only[r] {
			continue
		}
		size, covered := r.ledger.Size(), max(r.ledger.Covered(), r.written)
		if size <= covered || r.bad != "" || r.treeErr != nil || c.lost[r.id] != "" || (!final && now.Before(r.waitTill)) {
			continue
		}
		if r.lease.rev == 0 && now.Before(r.lease.retryAt) {
			if final {
				leased = append(leased, r.id)
			}
			continue // another publisher's lease, for now (lease is the writer's: this is it)
		}
		if final || size-covered >= c.every || now.Sub(r.grewAt) >= c.interval {
			root, err := r.ledger.RootAt(size)
			if errors.Is(err, checkpoint.ErrLeafSpill) {
				c.loseTree(r, err)
				continue
			}
			if err != nil { // cannot happen: the base is a checkpoint's size, below size
				c.log.Error("checkpointer: the room's root", zap.String("room", r.id), zap.Error(err))
				continue
			}
			d := dueCheckpoint{r: r, size: size, root: root, expect: r.ckptSeq}
			rs, err := r.ledger.ResumeAt(size)
			if errors.Is(err, checkpoint.ErrLeafSpill) {
				c.loseTree(r, err)
				continue
			}
			if err == nil {
				rs.LeafSeq, rs.Records, rs.Trust = r.leafSeq, r.leafExec, c.trustDigest
				d.resume = rs.String()
			}
			due = append(due, d)
		}
	}
	return due, leased
}

// sign signs the due checkpoint of r: under the room's origin and a key
// named by it with a deployment origin, else the room-id form.
func (c *Checkpointer) sign(r *ckRoom, d dueCheckpoint) ([]byte, error) {
	origin := c.trust.Origin()
	if origin == "" {
		return checkpoint.Sign(c.signer, r.id, d.size, d.root)
	}
	origin = checkpoint.RoomOrigin(origin, r.id)
	if r.signer == nil {
		s, err := checkpoint.NewNamedNoteSigner(c.key, origin)
		if err != nil {
			return nil, err
		}
		r.signer = s
	}
	return checkpoint.Sign(r.signer, origin, d.size, d.root)
}

// write appends one checkpoint.
func (c *Checkpointer) write(ctx context.Context, d dueCheckpoint) error {
	r := d.r
	signed, err := c.sign(r, d)
	if err != nil {
		c.log.Error("checkpointer: cannot sign the room's checkpoint", zap.String("room", r.id), zap.Error(err))
		c.mu.Lock()
		r.waitTill = time.Now().Add(c.interval)
		c.mu.Unlock()
		return err
	}
	msg := &nats.Msg{Subject: c.subjects.Checkpoint(r.id), Data: signed, Header: nats.Header{}}
	// From content, as every roompub append (docs/design.md, "Appends and
	// races"): the same
	// checkpoint written twice is stored once.
	msg.Header.Set(jetstream.MsgIDHeader, "ckpt:"+hex.EncodeToString(d.root[:])+":"+strconv.FormatUint(d.size, 10)+":"+room.RoomToken(r.id))
	msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(d.expect, 10))
	if d.resume != "" {
		// What a successor needs to go on from this checkpoint without
		// reading the room's leaves again (resume); beside the note, which
		// it leaves as readers know it, signed with it.
		if sig, err := checkpoint.SignResume(c.key, signed, d.resume); err == nil {
			msg.Header.Set(checkpoint.ResumeHeader, d.resume)
			msg.Header.Set(checkpoint.ResumeSignatureHeader, sig)
		} else {
			c.log.Warn("checkpointer: cannot sign the resume state: the checkpoint goes without it", zap.String("room", r.id), zap.Error(err))
		}
	}
	pctx, cancel := jsapi.WithDefaultTimeout(ctx, room.DefaultTimeout)
	ack, err := c.js.PublishMsg(pctx, msg, jetstream.WithRetryAttempts(0))
	cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err == nil:
		r.written = max(r.written, d.size)
		r.ckptSeq = max(r.ckptSeq, ack.Sequence)
		if r.ledger.Size() == d.size {
			r.grewAt = time.Time{}
		} else {
			r.grewAt = time.Now()
		}
		if !ack.Duplicate {
			c.m.written.Inc()
			c.log.Debug("checkpoint written", zap.String("room", r.id), zap.Uint64("size", d.size), zap.Uint64("stream_seq", ack.Sequence))
			if c.stopping && c.dep != nil {
				// Not read back: the stream is no longer followed.
				c.finalWrites = append(c.finalWrites, srcCheckpoint{seq: ack.Sequence, note: signed})
			}
		}
		return nil
	case jsapi.IsWrongLastSequence(err) && c.stopping:
		// The stream is no longer followed: read what the subject holds
		// past the last message read, and write again.
		c.mu.Unlock()
		rerr := c.readCheckpointsOn(ctx, r)
		c.mu.Lock()
		if rerr != nil {
			return fmt.Errorf("final checkpoint of %s at size %d: reading the checkpoints stored since: %w", r.id, d.size, rerr)
		}
		return errCheckpointMoved
	case jsapi.IsWrongLastSequence(err):
		// A checkpoint this reader has not read yet: it is checked when
		// read, and the room is decided again after.
		r.waitTill = time.Now().Add(time.Second)
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("checkpoint of %s at size %d: %w", r.id, d.size, err)
	default:
		r.waitTill = time.Now().Add(min(c.interval, 5*time.Second))
		c.log.Warn("checkpointer: writing the room's checkpoint failed", zap.String("room", r.id), zap.Uint64("size", d.size), zap.Error(err))
		return fmt.Errorf("checkpoint of %s at size %d: %w", r.id, d.size, err)
	}
}

// errCheckpointMoved: a final write found a checkpoint stored on the
// room's subject since the one it expected.
var errCheckpointMoved = errors.New("a checkpoint was stored on the room's subject since the last one read")

// readCheckpointsOn reads the messages on r's checkpoint subject past the
// last one read (r.ckptSeq), each checked as follow checks it
// (readCheckpoint). Once the stream is no longer followed, these are what
// a write expecting r.ckptSeq was refused for: a write of this
// checkpointer cut off before its answer, or another writer's.
func (c *Checkpointer) readCheckpointsOn(ctx context.Context, r *ckRoom) error {
	subject := c.subjects.Checkpoint(r.id)
	c.mu.Lock()
	seq := r.ckptSeq + 1
	c.mu.Unlock()
	for {
		gctx, cancel := jsapi.WithDefaultTimeout(ctx, room.DefaultTimeout)
		m, err := c.stream.GetMsg(gctx, seq, jetstream.WithGetMsgSubject(subject))
		cancel()
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.readCheckpoint(r, m.Sequence, m.Data)
		c.mu.Unlock()
		seq = m.Sequence + 1
	}
}

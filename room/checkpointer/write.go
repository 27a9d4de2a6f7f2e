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

// writeDue writes the checkpoint of every room that is due (every room
// whose tree grew, with final) and whose lease it holds or takes. It
// returns the errors of writes that failed.
func (c *Checkpointer) writeDue(ctx context.Context, final bool) error {
	now := time.Now()
	var due []dueCheckpoint
	c.mu.Lock()
	if !c.caughtUp {
		c.mu.Unlock()
		return nil
	}
	for _, r := range c.rooms {
		size, covered := r.ledger.Size(), max(r.ledger.Covered(), r.written)
		if size <= covered || r.bad != "" || r.treeErr != nil || c.lost[r.id] != "" || (!final && now.Before(r.waitTill)) {
			continue
		}
		if r.lease.rev == 0 && now.Before(r.lease.retryAt) {
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
	c.mu.Unlock()
	var errs []error
	for _, d := range due {
		if ctx.Err() != nil {
			break
		}
		if !c.holdLease(ctx, d.r) {
			continue
		}
		if err := c.write(ctx, d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
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

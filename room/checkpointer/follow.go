package checkpointer

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/jsapi"
)

// ckPullMessages and ckPullBytes size the reader's batch direct gets:
// few requests while it reads every message of the stream, and replies the
// server sends in one go (it stops at the byte limit, after at least one
// message).
// ckCatchUpMessages is the catch-up read's: the server's cost per batch
// (it counts what is pending under the filter first) then matters little;
// the byte limit still holds each reply to about 4 MiB.
const (
	ckPullMessages    = 1024
	ckCatchUpMessages = 8192
	ckPullBytes       = 4 << 20
)

// follow handles the stream from where the catch-up read ended, in stream
// order: a batch the gate told it stored (Stored) that starts exactly at
// the next sequence is taken from memory whole, without reading it;
// anything else (others' messages, checkpoints, the gate's batches whose
// acknowledgement has not come or that were not kept) is read from the
// stream leader, once the batches announced before the gap was seen are
// acknowledged or ckGapWait has passed. It returns when ctx is done.
func (c *Checkpointer) follow(ctx context.Context) {
	defer close(c.fdone)
	select {
	case <-c.switched:
	case <-ctx.Done():
		return
	}
	nc, name, all := c.js.Conn(), c.stream.CachedInfo().Config.Name, c.subjects.All()
	c.mu.Lock()
	c.acked.advance(c.next) // what the gate stored before was read by the catch-up
	c.mu.Unlock()
	var gapSince time.Time
	retried := false
	run := 0 // messages read from the stream since the last from memory
	// fromGate: the last message handled came from memory. The next one
	// is most likely the gate's next append, whose acknowledgement has
	// not come yet (one record at a time, the next is acknowledged about
	// a millisecond later): wait for it, up to ckOwnWait, before asking
	// the leader, or each append costs a read of the stream that finds
	// nothing. Short, as others' messages wait for it too.
	fromGate := false
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-c.acked.wake:
		case <-t.C:
		case <-ctx.Done():
			return false
		}
		return true
	}
	for ctx.Err() == nil {
		c.mu.Lock()
		next := c.next
		c.mu.Unlock()
		if b, ok := c.acked.take(next); ok {
			// The whole batch, in stream order, as if read.
			gapSince = time.Time{}
			n := uint64(len(b))
			c.mu.Lock()
			c.lastPending, c.lastAt = 0, time.Now()
			// One atomic batch, stored whole at consecutive sequences (the
			// server's acknowledgement says where): it ends the batch held
			// open, if any, and needs no reassembly.
			c.decide(nil, c.batches.Pass(next))
			for i := range b {
				c.handleLocked(next+uint64(i), b[i].Subject, nil, b[i].Header, "", &b[i].Content)
			}
			c.next = next + n
			c.handled.Store(next + n - 1)
			c.mu.Unlock()
			c.fromMemory.Add(n)
			fromGate, run = true, 0
			continue
		}
		if fromGate {
			fromGate = false
			if !wait(ckOwnWait) {
				return
			}
			continue
		}
		now := time.Now()
		if gapSince.IsZero() {
			gapSince = now
		}
		gen := c.acked.expects.Load()
		if gw := time.Duration(c.gapWait.Load()); c.acked.waiting(gapSince, now, gw) {
			if !wait(gw / 20) {
				return
			}
			continue
		}
		// The gap runs up to the next batch kept in memory. A message (a
		// checkpoint, say) is read with a leader read, and so is the
		// first of a run, or nothing, when idle (the leader has what was
		// just acknowledged); once a run goes on it is read with batch
		// direct gets, at the catch-up read's pace.
		upTo, kept := c.acked.nextKept(next)
		var msgs []gapMsg
		var err error
		if run < 2 || (kept && upTo == next+1) {
			var m *jetstream.RawStreamMsg
			if m, err = jsapi.LeaderGetRaw(ctx, nc, name, room.DefaultTimeout, map[string]any{"seq": next, "next_by_subj": all}); m != nil {
				msgs = []gapMsg{{seq: m.Sequence, subject: m.Subject, data: m.Data, header: checkpoint.AttestationOf(m.Header), owner: m.Header.Get(room.HeaderOwner)}}
			}
		} else {
			limit := ckPullMessages
			if kept {
				limit = int(min(uint64(limit), upTo-next))
			}
			msgs, err = c.readBatch(ctx, next, limit)
		}
		if err != nil {
			if ctx.Err() == nil {
				c.readFailed(next, err)
				wait(time.Second)
			}
			continue
		}
		c.readOK()
		if len(msgs) == 0 { // nothing at or after next yet
			gapSince, run = time.Time{}, 0
			if !wait(ckIdlePoll) {
				return
			}
			continue
		}
		if !retried && len(msgs) == 1 && c.acked.expects.Load() != gen {
			// The gate announced a batch since the wait was decided: the
			// message read may be its first, stored before its
			// acknowledgement came. Decide again (once: others' messages
			// are read on). A pull of a run is handled as read: dropping
			// it would read it twice.
			retried, gapSince = true, time.Time{}
			continue
		}
		retried, gapSince = false, time.Time{}
		c.mu.Lock()
		c.lastPending, c.lastAt = 0, time.Now()
		for _, m := range msgs {
			c.handleLocked(m.seq, m.subject, m.data, m.header, m.owner, nil)
		}
		last := msgs[len(msgs)-1].seq
		c.next = last + 1
		c.handled.Store(last)
		c.mu.Unlock()
		c.sawUpTo(last + msgs[len(msgs)-1].pending)
		c.readGaps.Add(uint64(len(msgs)))
		run += len(msgs)
		// A kept batch this read passed, or landed in, is read on from
		// the stream (take wants a batch starting exactly at next).
		c.acked.advance(last + 1)
	}
}

// gapMsg is a message follow read from the stream.
type gapMsg struct {
	seq     uint64
	subject string
	data    []byte
	header  string // its checkpoint.AttestationHeader value
	owner   string // its HeaderOwner value (an owned chain's entry)
	pending uint64 // messages of the room subjects after it, as the read was served
}

// catchUpRead is the read at start: the stream's room messages from
// readFrom on (resume), in stream order, with batch direct gets
// (catchUpFetch, which fetches the next batch while this one is
// handled), up to the stream's
// last sequence at start; then follow goes on from there. It creates no
// consumer. It returns when it is over or ctx is done.
func (c *Checkpointer) catchUpRead(ctx context.Context) {
	defer close(c.cdone)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches, end := make(chan []gapMsg, 2), make(chan uint64, 1)
	go c.catchUpFetch(ctx, batches, end)
	for msgs := range batches {
		c.mu.Lock()
		c.handleRun(msgs)
		c.mu.Unlock()
		c.catchUpMsgs.Add(uint64(len(msgs)))
		if c.catchUpPause != nil {
			select {
			case <-c.catchUpPause:
			case <-ctx.Done():
				return
			}
		}
	}
	select {
	case seq := <-end:
		c.mu.Lock()
		c.switchLocked(seq)
		c.clearReadWholeLocked()
		c.mu.Unlock()
	default: // ctx is done
	}
}

// clearReadWholeLocked tells, once the catch-up read is done, that each
// room of Options.ReadWhole it found no contradiction in matches its
// checkpoint (OnContradiction with reason ""): the store was restored, or
// the room was never damaged.
func (c *Checkpointer) clearReadWholeLocked() {
	if c.onContradiction == nil {
		return
	}
	for _, id := range c.readWhole {
		if r := c.rooms[id]; r == nil || r.bad == "" {
			c.onContradiction(id, "")
		}
	}
}

// catchUpFetch reads batches for catchUpRead, in stream order, from
// readFrom to the stream's last sequence at start, then sends the
// last sequence read on end and closes batches (without end when ctx is
// done). If the replica that served a read has nothing more short of the
// last sequence, the leader is asked whether anything is left: a replica
// that lags is read again after ckIdlePoll; the stream's last messages may
// be on other subjects.
func (c *Checkpointer) catchUpFetch(ctx context.Context, batches chan<- []gapMsg, end chan<- uint64) {
	defer close(batches)
	nc, name, all := c.js.Conn(), c.stream.CachedInfo().Config.Name, c.subjects.All()
	next := c.readFrom
	fail := func(err error) {
		if ctx.Err() == nil {
			c.readFailed(next, err)
			jsapi.Sleep(ctx, time.Second)
		}
	}
	send := func(msgs []gapMsg) bool {
		select {
		case batches <- msgs:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for ctx.Err() == nil {
		msgs, err := c.readBatch(ctx, next, c.catchUpBatch)
		if err != nil {
			fail(err)
			continue
		}
		if len(msgs) > 0 {
			last := msgs[len(msgs)-1]
			if !send(msgs) {
				return
			}
			if last.seq >= c.startSeq {
				end <- last.seq
				return
			}
			next = last.seq + 1
			if last.pending > 0 {
				continue
			}
		}
		m, err := jsapi.LeaderGetRaw(ctx, nc, name, room.DefaultTimeout, map[string]any{"seq": next, "next_by_subj": all})
		switch {
		case err != nil:
			fail(err)
		case m == nil:
			end <- next - 1
			return
		default:
			jsapi.Sleep(ctx, ckIdlePoll)
		}
	}
}

// handleRun handles msgs, read in stream order, as catchUpRead does. c.mu
// is held.
func (c *Checkpointer) handleRun(msgs []gapMsg) {
	for _, m := range msgs {
		c.lastPending, c.lastAt = m.pending, time.Now()
		c.handleLocked(m.seq, m.subject, m.data, m.header, m.owner, nil)
		c.handled.Store(m.seq)
	}
	if len(msgs) > 0 {
		m := msgs[len(msgs)-1]
		c.sawUpTo(m.seq + m.pending)
	}
}

// switchLocked ends the catch-up read, which handled the stream up to
// seq: writes may begin, follow goes on at seq+1. c.mu is held.
func (c *Checkpointer) switchLocked(seq uint64) {
	if !c.caughtUp {
		c.caughtUp = true
		c.log.Info("checkpointer caught up with the stream", zap.Uint64("stream_seq", seq), zap.Int("rooms", len(c.rooms)))
	}
	c.next = seq + 1
	if c.handled.Load() < seq { // nothing of the room subjects after the last message read
		c.handled.Store(seq)
	}
	close(c.switched)
}

// readBatch reads up to limit messages of the room subjects from stream
// sequence next on, those stored already (it does not wait for more), with
// one batch direct get (ADR-31, "Direct Get": {"seq", "next_by_subj",
// "batch", "max_bytes"} on $JS.API.DIRECT.GET.<stream>; the room stream
// has allow_direct, CheckStreamConfig), so reading needs no consumer: a
// stream whose consumers are at their limit (nats-server's
// default_max_consumers, 1,000 per stream unless the stream or account
// sets one) is read all the same. The byte limit holds at least one
// message of the largest size. None: nothing is there yet (where the read
// was served: any replica may answer).
func (c *Checkpointer) readBatch(ctx context.Context, next uint64, limit int) ([]gapMsg, error) {
	nc := c.js.Conn()
	// The whole stream, not the room subjects' filter (jsapi.WholeStream):
	// a message on another subject is no room's leaf (handleLocked).
	msgs, err := jsapi.DirectBatch(ctx, nc, c.streamName, jsapi.BatchRequest{Seq: next, NextBySubj: jsapi.WholeStream, Batch: limit,
		MaxBytes: max(ckPullBytes, 2*int(nc.MaxPayload()))}, room.DefaultTimeout)
	if err != nil {
		return nil, err
	}
	out := make([]gapMsg, len(msgs))
	for i, m := range msgs {
		out[i] = gapMsg{seq: m.Seq, subject: m.Subject, data: m.Data, header: checkpoint.AttestationOf(m.Header),
			owner: m.Header.Get(room.HeaderOwner), pending: m.Pending}
	}
	return out, nil
}

// catchUp waits until the reader has handled the stream's last message.
func (c *Checkpointer) catchUp(ctx context.Context) error {
	ictx, cancel := jsapi.WithDefaultTimeout(ctx, room.DefaultTimeout)
	info, err := c.stream.Info(ictx)
	cancel()
	if err != nil {
		return err
	}
	last := info.State.LastSeq
	for c.handled.Load() < last {
		if c.js.Conn().IsClosed() {
			return fmt.Errorf("read %d of %d messages: the connection is closed", c.handled.Load(), last)
		}
		if !jsapi.Sleep(ctx, 10*time.Millisecond) {
			c.mu.Lock()
			cerr := c.consErr
			c.mu.Unlock()
			return fmt.Errorf("read %d of %d messages: %w (%v)", c.handled.Load(), last, ctx.Err(), cerr)
		}
	}
	c.mu.Lock()
	c.caughtUp = true
	c.mu.Unlock()
	return nil
}

// readFailed records a failed read of the room stream at next, retried
// every second: logged at warn level when its error differs from the one
// logged before, else at debug level, so a stream deleted under serve
// (which the stream guard reports) is not a warning a second.
func (c *Checkpointer) readFailed(next uint64, err error) {
	c.mu.Lock()
	c.consErr = err
	repeat := c.readErrLogged == err.Error()
	c.readErrLogged = err.Error()
	c.mu.Unlock()
	c.readFailing.Store(true)
	log := c.log.Warn
	if repeat {
		log = c.log.Debug
	}
	log("checkpointer: reading the room stream", zap.Uint64("stream_seq", next), zap.Error(err))
}

// readOK notes a read of the room stream that succeeded: after failures,
// once, at info level.
func (c *Checkpointer) readOK() {
	if !c.readFailing.Load() {
		return
	}
	c.readFailing.Store(false)
	c.mu.Lock()
	c.readErrLogged = ""
	c.mu.Unlock()
	c.log.Info("checkpointer: the room stream reads again")
}

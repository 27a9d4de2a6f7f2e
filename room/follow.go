package room

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/roompub/roompub/validate"
)

// FollowOptions configures Follow; the zero value of each field is its
// default, except Durable and Validator, which are required.
type FollowOptions struct {
	Stream   string   // default DefaultStream
	Subjects Subjects // default prefix "rooms"
	// Rooms to follow; empty follows every room.
	Rooms []string
	// Durable names the durable consumer: the server remembers, under this
	// name, what the application has acknowledged.
	Durable string
	// Validator verifies every message; it should check host trust.
	Validator *validate.Validator
	// OnSetAside receives every message that fails verification (after
	// the rebuild, so each once per delivery). It must not block long.
	OnSetAside func(SetAside)
	// AckWait is how long the server waits for an ack before it delivers a
	// message again; default 30s.
	AckWait time.Duration
	Logger  *zap.Logger
	// Ready, when set, is called once the rebuild is done and live
	// delivery starts, with the stream sequence the rebuild reached.
	Ready func(rebuiltTo uint64)
}

// Handler receives verified events in stream order. Returning nil
// acknowledges the event: it is never delivered again, also not after a
// restart. Returning an error stops Follow without acknowledging it, so
// it is delivered again on the next start.
type Handler func(context.Context, *Event) error

// ErrHandler wraps the error a Handler returned.
var ErrHandler = errors.New("handler")

// Follow subscribes to rooms with a durable JetStream consumer and hands
// handle every verified event, once, in stream order; messages that fail
// verification go to OnSetAside (and are acknowledged, so they never
// block the room). Before live delivery it rebuilds the verification state
// (chain heads, the rooms' record indexes) by replaying the stream up to
// the consumer's acknowledgement floor, so a restarted subscriber checks
// new messages against everything before them. Messages are prepared in
// parallel as they arrive (as in Audit) and decided, handed out and
// acknowledged one at a time in stream order. It returns nil when ctx is
// done, after acknowledging what was handled.
func Follow(ctx context.Context, js jetstream.JetStream, o FollowOptions, handle Handler) error {
	if o.Validator == nil || o.Durable == "" {
		return fmt.Errorf("%w: follow needs a validator and a durable name", ErrGate)
	}
	log := o.Logger
	if log == nil {
		log = zap.NewNop()
	}
	name := o.Stream
	if name == "" {
		name = DefaultStream
	}
	if o.AckWait <= 0 {
		o.AckWait = 30 * time.Second
	}
	cctx, cancel := withDefaultTimeout(ctx)
	st, err := js.Stream(cctx, name)
	if err != nil {
		cancel()
		return fmt.Errorf("stream %s: %w", name, err)
	}
	cons, err := st.CreateOrUpdateConsumer(cctx, jetstream.ConsumerConfig{
		Durable:        o.Durable,
		Description:    "roompub subscriber",
		FilterSubjects: filters(o.Subjects, o.Rooms),
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        o.AckWait,
		MaxAckPending:  256,
		MaxDeliver:     -1,
	})
	if err != nil {
		cancel()
		return fmt.Errorf("consumer %s: %w", o.Durable, err)
	}
	ci, err := cons.Info(cctx)
	if err == nil && ci.NumAckPending > 0 {
		// An earlier run stopped (crash, handler error) with messages
		// delivered but not acknowledged. The server would deliver them
		// again only after AckWait, behind newer ones: out of stream
		// order, so the newer ones would look like a gap. Deliver again
		// from the acknowledgement floor instead.
		_, err = js.ResetConsumer(cctx, name, o.Durable)
	}
	cancel()
	if err != nil {
		return fmt.Errorf("consumer %s: %w", o.Durable, err)
	}
	r := NewReader(o.Validator, o.Subjects)
	r.evidence = nil // no caller can reach it: per-record memory for nothing
	floor := ci.AckFloor.Stream
	if floor > 0 {
		// Already handled or set aside before the restart: only the state.
		produce := func(ctx context.Context, emit func(*batch) bool) error {
			return replay(ctx, st, int(js.Conn().MaxPayload()), o.Subjects, o.Rooms, 1, time.Time{}, floor, emit)
		}
		if err := runOrdered(ctx, r, produce, func(b *batch) error {
			for i := range b.xs {
				r.decide(&b.xs[i], false)
			}
			return nil
		}); err != nil {
			return fmt.Errorf("rebuild: %w", err)
		}
	}
	log.Info("subscriber rebuilt", zap.String("durable", o.Durable), zap.Uint64("ack_floor", floor))
	if o.Ready != nil {
		o.Ready(floor)
	}
	// Live: fetched messages are prepared in parallel as they arrive and
	// decided, handed out and acknowledged one by one in stream order.
	produce := func(pctx context.Context, emit func(*batch) bool) error {
		for {
			if pctx.Err() != nil {
				return nil
			}
			fb, err := cons.Fetch(followFetch, jetstream.FetchMaxWait(time.Second))
			if err != nil {
				if pctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("fetch: %w", err)
			}
			ch := fb.Messages()
			for msg := range ch {
				b := newBatch()
				if err := addFetched(b, msg); err != nil {
					return err
				}
				// Take what has already arrived too, without waiting.
			more:
				for len(b.xs) < followBatch {
					select {
					case msg, ok := <-ch:
						if !ok {
							break more
						}
						if err := addFetched(b, msg); err != nil {
							return err
						}
					default:
						break more
					}
				}
				if !emit(b) {
					return nil
				}
			}
			if err := fb.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
				if pctx.Err() != nil {
					return nil
				}
				log.Warn("fetch", zap.Error(err))
			}
		}
	}
	last := floor
	err = runOrdered(ctx, r, produce, func(b *batch) error {
		for i := range b.xs {
			if ctx.Err() != nil {
				// Stop now: the rest is unacknowledged and is delivered
				// again, from the ack floor, on the next start.
				return errStopped
			}
			x, msg := &b.xs[i], b.msgs[i]
			seq := x.m.Seq
			if seq <= last {
				// Delivered again (an ack that was lost): already handled.
				_ = msg.Ack()
				continue
			}
			ev, aside := r.apply(x)
			if aside != nil {
				if o.OnSetAside != nil {
					o.OnSetAside(*aside)
				}
			} else if err := handle(ctx, ev); err != nil {
				_ = msg.Nak()
				return fmt.Errorf("%w: stream seq %d: %w", ErrHandler, seq, err)
			}
			// Synchronous: once handle returned, the ack is on the server
			// before the next message, so a crash repeats nothing handled.
			actx, acancel := context.WithTimeout(context.Background(), DefaultTimeout)
			err := msg.DoubleAck(actx)
			acancel()
			if err != nil {
				return fmt.Errorf("ack stream seq %d: %w", seq, err)
			}
			last = seq
		}
		return nil
	})
	if errors.Is(err, errStopped) || (err == nil && ctx.Err() != nil) {
		return nil
	}
	return err
}

// Follow's fetches: followFetch messages per pull (at most MaxAckPending,
// 256, are ever unacknowledged), prepared in batches of up to followBatch
// that have already arrived.
const (
	followFetch = 64
	followBatch = 16
)

// errStopped stops Follow's pipeline when its context is done.
var errStopped = errors.New("stopped")

// addFetched adds a fetched message to b.
func addFetched(b *batch, msg jetstream.Msg) error {
	meta, err := msg.Metadata()
	if err != nil {
		return fmt.Errorf("fetch: %w", err)
	}
	b.add(StreamMsg{Subject: msg.Subject(), Seq: meta.Sequence.Stream, Data: msg.Data(), Time: meta.Timestamp}, msg)
	return nil
}

package reader

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/jsapi"
)

// durablePull fetches Follow's live messages from its durable consumer and
// makes sure this run receives every delivery of it, one after the other.
// The server numbers each delivery of a consumer (the consumer sequence,
// redeliveries included), so a delivery missing from that count went to
// another pull request: one a stopped run left on the server (it lives
// until it expires), or another subscriber using the same durable. Its
// message would come back only after AckWait, behind newer ones, and the
// newer ones would pass for the next in stream order; so the run waits
// for the other pull requests to lapse and has the consumer deliver again
// from its acknowledgement floor (docs/cli.md, "One run per durable").
type durablePull struct {
	js      jetstream.JetStream
	cons    jetstream.Consumer
	stream  string
	durable string
	filters []string // the consumer's filter subjects
	log     *zap.Logger
	tell    func(string) // FollowOptions.OnResync
	// next is the consumer sequence the next delivery must carry.
	next uint64
	// taken is the highest stream seq this run received in order (the
	// ack floor at the start): the run's own acks never pass it.
	taken uint64
	// resyncs holds when the run re-delivered after a missing delivery,
	// within followResyncWindow of the last one.
	resyncs []time.Time
	// mu orders acknowledgements and resyncs: an ack of a delivery made
	// before a reset would get no reply (the server takes it for a
	// message not delivered yet), so none is sent once a resync began.
	mu sync.Mutex
	// epoch counts resyncs; a delivery of an earlier epoch is not
	// acknowledged, its message is delivered again.
	epoch uint64
	// settleFor bounds how long a resync waits for other pull requests to
	// lapse (FollowOptions.settle).
	settleFor time.Duration
}

// Bounds of durablePull: a resync waits up to followSettle for the other
// pull requests on the consumer to lapse (Follow's own last at most a
// fetch, idleFor), and more than followMaxResyncs resyncs, each within
// followResyncWindow of the one before, stop Follow: deliveries keep going
// elsewhere, so another subscriber is using the durable.
const (
	followSettle        = 3 * time.Second
	followMaxResyncs    = 5
	followResyncWindow  = time.Minute
	followSettlePolling = 50 * time.Millisecond
	// An ack not confirmed is sent again for up to followAckRetry (a
	// server restarting under serve), after pauses from followAckPause
	// doubling to 2 s.
	followAckRetry = 30 * time.Second
	followAckPause = 100 * time.Millisecond
)

// ErrDurableShared: deliveries of Follow's durable consumer keep going to
// pull requests that are not this run's, so another subscriber is using
// the durable; one durable serves one run at a time, in stream order.
var ErrDurableShared = errors.New("another subscriber is using the durable")

// start readies the consumer for a run and returns its acknowledgement
// floor (a stream seq). When an earlier run left messages delivered but
// not acknowledged (a crash, a handler error, a stop) or a pull request
// still waiting, it waits for those requests to lapse and delivers again
// from the floor: the server would deliver the unacknowledged ones again
// only after AckWait, behind newer ones.
func (p *durablePull) start(ctx context.Context) (uint64, error) {
	ci, err := p.info(ctx)
	if err != nil {
		return 0, err
	}
	floor := ci.AckFloor.Stream
	if ci.NumAckPending > 0 || ci.NumWaiting > 0 {
		if floor, err = p.redeliver(ctx); err != nil {
			return 0, err
		}
	} else {
		// A delivery after this snapshot that is not this run's numbers
		// the next one past p.next.
		p.next = ci.Delivered.Consumer + 1
	}
	p.taken = floor
	return floor, nil
}

// inOrder reports whether the delivery numbered consumer (of the message
// at stream seq stream) is the one this run expects next, and counts it
// when it is.
func (p *durablePull) inOrder(consumer, stream uint64) bool {
	if consumer != p.next {
		return false
	}
	p.next++
	p.taken = max(p.taken, stream)
	return true
}

// resync follows a delivery out of order (got is its consumer sequence):
// the caller has dropped it and everything fetched after it, and no pull
// request of the caller's is waiting. It fails with ErrDurableShared after
// too many resyncs close together.
func (p *durablePull) resync(ctx context.Context, got uint64) error {
	now := time.Now()
	if n := len(p.resyncs); n > 0 && now.Sub(p.resyncs[n-1]) > followResyncWindow {
		p.resyncs = p.resyncs[:0]
	}
	p.resyncs = append(p.resyncs, now)
	if len(p.resyncs) > followMaxResyncs {
		return fmt.Errorf("%w: %w: durable %s: %d deliveries out of order since %s",
			ErrReader, ErrDurableShared, p.durable, len(p.resyncs), p.resyncs[0].UTC().Format(time.RFC3339))
	}
	p.mu.Lock()
	p.epoch++
	p.mu.Unlock()
	why := fmt.Sprintf("durable %s: delivery %d came where %d was due (another pull request took deliveries, or the consumer was reset): delivering again from the ack floor",
		p.durable, got, p.next)
	if p.tell != nil {
		// Told, so only noted in the log: the caller says it its way
		// (the command once on stderr).
		p.tell(why)
		p.log.Info("follow: resync", zap.String("reason", why))
	} else {
		p.log.Warn("follow: resync", zap.String("reason", why))
	}
	floor, err := p.redeliver(ctx)
	if err != nil {
		return err
	}
	if floor <= p.taken {
		return nil
	}
	// The floor also passes messages of other subjects; one of the
	// followed subjects between is one acknowledged by someone else:
	// this run's state has a hole it can never fill, and every later
	// verdict would rest on it.
	hole, err := leaderHasMore(ctx, p.js.Conn(), p.stream, p.filters, p.taken, floor)
	if err != nil {
		return fmt.Errorf("consumer %s: after a reset: %w", p.durable, err)
	}
	if hole {
		return fmt.Errorf("%w: %w: durable %s: its ack floor is stream seq %d, but this run received messages only up to %d: another subscriber acknowledged the others",
			ErrReader, ErrDurableShared, p.durable, floor, p.taken)
	}
	// Past what this run received, only other subjects' messages.
	p.taken = floor
	return nil
}

// ack acknowledges msg, a delivery of epoch, and waits for the server to
// confirm it (room.DefaultTimeout). After a resync it sends nothing and
// reports false: the consumer delivers the message again, and that
// delivery is acknowledged. An ack the server does not confirm (it is
// restarting, its consumer's leader moving) is sent again, up to
// followAckRetry, until ctx is done: a second ack of one delivery is
// answered as the first. Errors: ErrDurableShared (wrapped) when another
// subscriber reset the consumer, ErrReader naming the durable when it was
// deleted, or the last request's error.
func (p *durablePull) ack(ctx context.Context, msg *nats.Msg, epoch uint64) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if epoch != p.epoch {
		return false, nil
	}
	deadline := time.Now().Add(followAckRetry)
	wait := followAckPause
	for {
		actx, cancel := context.WithTimeout(context.Background(), room.DefaultTimeout)
		// A double ack: the server answers once the ack is stored.
		_, err := p.js.Conn().RequestWithContext(actx, msg.Reply, []byte("+ACK"))
		cancel()
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, nats.ErrTimeout) {
			return true, err
		}
		// The server does not answer an ack of a delivery made before a
		// reset of the consumer; this run resets only under mu.
		if meta, merr := msg.Metadata(); merr == nil {
			ci, ierr := p.info(context.Background())
			switch {
			case ierr == nil && ci.Delivered.Consumer < meta.Sequence.Consumer:
				return true, fmt.Errorf("%w: %w: durable %s: the consumer was reset while this run held delivery %d (it now counts %d deliveries): another subscriber reset it",
					ErrReader, ErrDurableShared, p.durable, meta.Sequence.Consumer, ci.Delivered.Consumer)
			case errors.Is(ierr, jetstream.ErrConsumerNotFound):
				return true, p.deleted(fmt.Errorf("an ack not confirmed: %w", err))
			}
		}
		if time.Now().After(deadline) {
			return true, err
		}
		p.log.Warn("follow: ack not confirmed; sending it again", zap.String("durable", p.durable), zap.Error(err))
		if !jsapi.Sleep(ctx, wait) {
			return true, err
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// deleted is Follow's error when its durable was found gone (cause: what
// showed it): the run ends, naming the durable.
func (p *durablePull) deleted(cause error) error {
	return fmt.Errorf("%w: durable %s was deleted while following (%v): its acknowledgement floor is gone, and a new run creates it anew and hands out the rooms' messages from their start",
		ErrReader, p.durable, cause)
}

// redeliver waits, up to settleFor, until no pull request waits on the
// consumer, then resets it to its acknowledgement floor and returns the
// floor (a stream seq). The reset (nats-server's consumer reset, ADR-60)
// forgets the deliveries pending and numbers the next delivery 1, so
// p.next is 1: a delivery taken by another pull request right after the
// reset shows as well.
func (p *durablePull) redeliver(ctx context.Context) (uint64, error) {
	deadline := time.Now().Add(p.settleFor)
	for {
		ci, err := p.info(ctx)
		if err != nil {
			return 0, err
		}
		if ci.NumWaiting == 0 || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(followSettlePolling):
		}
	}
	cctx, cancel := jsapi.WithDefaultTimeout(ctx, room.DefaultTimeout)
	r, err := p.js.ResetConsumer(cctx, p.stream, p.durable)
	cancel()
	if err != nil {
		return 0, fmt.Errorf("consumer %s: reset: %w", p.durable, err)
	}
	if r.ResetSeq == 0 {
		return 0, fmt.Errorf("consumer %s: reset to stream seq 0", p.durable)
	}
	p.next = 1
	return r.ResetSeq - 1, nil
}

// info returns the consumer's info.
func (p *durablePull) info(ctx context.Context) (*jetstream.ConsumerInfo, error) {
	cctx, cancel := jsapi.WithDefaultTimeout(ctx, room.DefaultTimeout)
	defer cancel()
	ci, err := p.cons.Info(cctx)
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", p.durable, err)
	}
	return ci, nil
}

// stopped returns err, or nil when ctx is done (Follow was stopped).
func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

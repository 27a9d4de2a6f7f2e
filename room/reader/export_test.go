package reader

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/validate"
)

// VerifyInBatches verifies msgs with r the way Audit and Follow do:
// prepared on workers in batches of the sizes cut returns (at least one
// message each), decided in stream order. It returns, per message, the
// event or the set-aside.
func VerifyInBatches(r *Reader, msgs []StreamMsg, cut func() int) ([]*Event, []*SetAside) {
	evs := make([]*Event, len(msgs))
	asides := make([]*SetAside, len(msgs))
	i := 0
	produce := func(ctx context.Context, emit func(*batch) bool) error {
		for from := 0; from < len(msgs); {
			to := min(from+max(cut(), 1), len(msgs))
			b := newBatch()
			for _, m := range msgs[from:to] {
				b.add(m, nil)
			}
			if !emit(b) {
				return ctx.Err()
			}
			from = to
		}
		return nil
	}
	err := runOrdered(context.Background(), r, produce, func(b *batch) error {
		for j := range b.xs {
			evs[i], asides[i] = r.apply(&b.xs[j])
			i++
		}
		return nil
	})
	if err != nil {
		panic(err)
	}
	return evs, asides
}

// Verdict is one message's outcome as a reader hands it out: an event, a
// set-aside, or neither (a checkpoint message).
type Verdict struct {
	Event *Event
	Aside *SetAside
}

// LiveFeed returns functions that feed messages, one at a time in stream
// order, to a reader that trusts t, as Follow's live delivery does, and
// tell it that no message came for a while (an empty fetch); each returns
// the verdicts it let out, in stream order.
func LiveFeed(v *validate.Validator, s room.Subjects, t *checkpoint.Trust) (feed func(StreamMsg) []Verdict, idle func() []Verdict) {
	r := NewReader(v, s)
	r.trustPublishers(t)
	r.startLive(followMaxRun, func(*Event, *SetAside) {})
	feed, step := feedVerdicts(r)
	return feed, func() []Verdict { return step(r.idle) }
}

// feedVerdicts returns a function that feeds one message to r as the
// readers do, and one that runs another step of r's (idle, finish); each
// returns the verdicts the call let out, in stream order.
func feedVerdicts(r *Reader) (feed func(StreamMsg) []Verdict, step func(func(collect func(*Event, *SetAside))) []Verdict) {
	var out []Verdict
	collect := func(ev *Event, a *SetAside) { out = append(out, Verdict{ev, a}) }
	step = func(do func(collect func(*Event, *SetAside))) []Verdict {
		out = nil
		do(collect)
		return out
	}
	feed = func(m StreamMsg) []Verdict {
		return step(func(collect func(*Event, *SetAside)) {
			var x prepared
			r.prepare(&x, m, nil)
			r.feed(&x, true, collect)
		})
	}
	return feed, step
}

// FollowMaxRun is the largest batch Follow holds back until it is whole.
const FollowMaxRun = followMaxRun

// AuditFeed returns functions that feed messages, in stream order, to a
// reader that trusts t, as Audit does (optimistic verification), and end
// the read; each returns the verdicts it let out, in stream order.
func AuditFeed(v *validate.Validator, s room.Subjects, t *checkpoint.Trust) (feed func(StreamMsg) []Verdict, end func() []Verdict) {
	r := NewReader(v, s)
	r.trustPublishers(t)
	feed, step := feedVerdicts(r)
	end = func() []Verdict {
		return step(func(collect func(*Event, *SetAside)) { r.finish(true, collect) })
	}
	return feed, end
}

// AuditDirect is Audit with a direct read of batch messages per batch
// get, inFlight requests in flight and up to mergeMax rooms read each with
// its own filter (0: none).
func AuditDirect(ctx context.Context, js jetstream.JetStream, o AuditOptions, batch, inFlight, mergeMax int) (*AuditReport, error) {
	if mergeMax == 0 {
		mergeMax = -1
	}
	rep, _, err := audit(ctx, js, o, auditTuning{direct: directRead{batch: batch, inFlight: inFlight, mergeMax: mergeMax}})
	return rep, err
}

// AuditLeafBounds is Audit with the rooms' leaves in memory bounded by b
// (checkpoint.LeafBounds; a Window larger than any room: unbounded).
func AuditLeafBounds(ctx context.Context, js jetstream.JetStream, o AuditOptions, b checkpoint.LeafBounds) (*AuditReport, error) {
	rep, _, err := audit(ctx, js, o, auditTuning{leaves: b})
	return rep, err
}

// Retained is what a reader holds that could grow with a read: verdicts
// waiting (Queued, and the queue's capacity), spent queue elements kept
// for reuse (Free), leaves whose admission is open (Pending), statements
// of partly covered batches (Lead), leaf hashes held in memory past each
// room's compact range (Leaves), chains and rooms.
type Retained struct {
	Queued, QueueCap, Free, Pending, Lead, Leaves, Chains, Rooms int
}

// Max is the larger of r and o, field by field.
func (r Retained) Max(o Retained) Retained {
	return Retained{max(r.Queued, o.Queued), max(r.QueueCap, o.QueueCap), max(r.Free, o.Free), max(r.Pending, o.Pending),
		max(r.Lead, o.Lead), max(r.Leaves, o.Leaves), max(r.Chains, o.Chains), max(r.Rooms, o.Rooms)}
}

func (r *Reader) retained() Retained {
	m := Retained{Queued: len(r.queue) - r.qhead, QueueCap: cap(r.queue), Free: len(r.free), Chains: len(r.chains), Rooms: len(r.ledgers)}
	for _, l := range r.ledgers {
		m.Pending += len(l.pending)
		m.Lead += len(l.lead)
		m.Leaves += int(l.LeafStats().Held)
	}
	return m
}

// AuditFeedRetained is AuditFeed with a function that measures what the
// reader retains.
func AuditFeedRetained(v *validate.Validator, s room.Subjects, t *checkpoint.Trust) (feed func(StreamMsg) []Verdict, end func() []Verdict, retained func() Retained) {
	return AuditFeedRetainedBounded(v, s, t, checkpoint.LeafBounds{})
}

// AuditFeedRetainedBounded is AuditFeedRetained with the rooms' leaves in
// memory bounded by b.
func AuditFeedRetainedBounded(v *validate.Validator, s room.Subjects, t *checkpoint.Trust, b checkpoint.LeafBounds) (feed func(StreamMsg) []Verdict, end func() []Verdict, retained func() Retained) {
	r := NewReader(v, s)
	r.trustPublishers(t)
	r.leafBounds = b
	feed, step := feedVerdicts(r)
	end = func() []Verdict {
		return step(func(collect func(*Event, *SetAside)) { r.finish(true, collect) })
	}
	return feed, end, r.retained
}

// WithMarkerPage is o reading its instance's markers n per request.
func WithMarkerPage(o InstanceOptions, n int) InstanceOptions {
	o.markerPage = n
	return o
}

// WithGenuineCounter is o adding one to n for each marker whose record it
// reads and judges to decide the relation rules.
func WithGenuineCounter(o InstanceOptions, n *atomic.Int64) InstanceOptions {
	o.onGenuine = func() { n.Add(1) }
	return o
}

// WithBeforeList is o calling fn before it lists each page of instance
// markers after the first, with the page's index.
func WithBeforeList(o InstanceOptions, fn func(page int)) InstanceOptions {
	o.beforeList = fn
	return o
}

// WithFollowSettle returns o with Follow's wait for other pull requests to
// lapse bounded by d.
func WithFollowSettle(o FollowOptions, d time.Duration) FollowOptions {
	o.settle = d
	return o
}

// AuditIdle is Audit with the consumer replay's idle tick set to idle
// (replayIdle), so that a stalled consumer is given up on in
// replayStall ticks of it.
func AuditIdle(ctx context.Context, js jetstream.JetStream, o AuditOptions, idle time.Duration) (*AuditReport, error) {
	rep, _, err := audit(ctx, js, o, auditTuning{direct: directRead{idle: idle}})
	return rep, err
}

package room

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/checkpoint"
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
func LiveFeed(v *validate.Validator, s Subjects, t *checkpoint.Trust) (feed func(StreamMsg) []Verdict, idle func() []Verdict) {
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
func AuditFeed(v *validate.Validator, s Subjects, t *checkpoint.Trust) (feed func(StreamMsg) []Verdict, end func() []Verdict) {
	r := NewReader(v, s)
	r.trustPublishers(t)
	feed, step := feedVerdicts(r)
	end = func() []Verdict {
		return step(func(collect func(*Event, *SetAside)) { r.finish(true, collect) })
	}
	return feed, end
}

// SetAheadWait sets how long a pipelined request waits for the chain to
// get past the request ahead of it, in g.
func (g *Gate) SetAheadWait(d time.Duration) { g.aheadWait.Store(int64(d)) }

// FollowCounts returns how many messages the checkpointer's follow took
// from the gate's acknowledgements without reading them, and how many it
// read.
func (c *Checkpointer) FollowCounts() (fromMemory, read uint64) {
	return c.fromMemory.Load(), c.readGaps.Load()
}

// SetGapWait sets how long follow waits at a gap for batches in flight.
func (c *Checkpointer) SetGapWait(d time.Duration) { c.gapWait.Store(int64(d)) }

// SetLeaseSkew sets how far a lease's time may lie past the TTL or ahead
// of now (DefaultLeaseSkew), so a test can replay a stale lease sooner.
func (c *Checkpointer) SetLeaseSkew(d time.Duration) { c.leaseSkew.Store(int64(d)) }

// SetAckedMax sets how many messages of the gate's acknowledged batches
// the checkpointer keeps in memory (ackedMax); a batch that does not fit
// is read from the stream, whole.
func (c *Checkpointer) SetAckedMax(n int) {
	c.acked.mu.Lock()
	c.acked.max = n
	c.acked.mu.Unlock()
}

// AckedSkipped returns how many batches the gate told the checkpointer of
// that follow did not take from memory (no room for them, or read from the
// stream first).
func (c *Checkpointer) AckedSkipped() uint64 { return c.acked.skipped.Load() }

// PresignedUsed is how many record appends of g carried the attestation
// AppendRecords signed ahead of their store.
func (g *Gate) PresignedUsed() uint64 { return g.presignedUsed.Load() }

// ChainStates is how many chains the gate keeps state of.
func (g *Gate) ChainStates() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.chains)
}

// WithGateClock returns o with now as the clock of its ChainIdle.
func WithGateClock(o GateOptions, now func() time.Time) GateOptions {
	o.now = now
	return o
}

// SweepChains drops the chains idle for ChainIdle now, as the gate does
// on a chain's use once ChainIdle / 2 passed since the last sweep.
func (g *Gate) SweepChains() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sweepLocked(g.now())
}

// FairSlots is the ingest service's fair concurrency limit.
type FairSlots = fairSlots

// NewFairSlots returns a limit of n slots.
func NewFairSlots(n int) *FairSlots { return newFairSlots(n) }

// Acquire takes a slot for identity token (fairSlots.acquire).
func (f *FairSlots) Acquire(ctx context.Context, token string) error { return f.acquire(ctx, token) }

// Release gives a slot back (fairSlots.release).
func (f *FairSlots) Release() { f.release() }

// Waiting is how many requests wait for a slot.
func (f *FairSlots) Waiting() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, q := range f.queues {
		n += len(q)
	}
	return n
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

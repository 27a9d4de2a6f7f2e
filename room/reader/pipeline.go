package reader

import (
	"context"
	"runtime"
	"sync"

	"github.com/nats-io/nats.go"
)

// Parallel verification: messages of a stream are prepared (Reader.prepare:
// subject, parse, entry rules, record rules, signature) on several workers
// and applied (Reader.apply: chain links, positions, room rules) on one
// goroutine in stream order, so the verdicts are those of Reader.Verify
// called on each message in turn.

// batch is a run of consecutive stream messages, prepared by one worker.
type batch struct {
	xs   []prepared
	msgs []*nats.Msg // Follow: the messages to acknowledge, parallel to xs
	// epoch is Follow's: the resyncs of its durable before msgs were
	// fetched (durablePull.epoch).
	epoch uint64
	size  int           // bytes of message data
	done  chan struct{} // closed once every element of xs is prepared
}

// batches recycles batches: a replay goes through a few dozen of them,
// whatever its length.
var batches = sync.Pool{New: func() any {
	return &batch{xs: make([]prepared, 0, batchMsgs)}
}}

// newBatch returns an empty batch.
func newBatch() *batch { return batches.Get().(*batch) }

// release empties b, dropping every reference it holds, for reuse.
func (b *batch) release() {
	clear(b.xs)
	clear(b.msgs)
	b.xs, b.msgs, b.epoch, b.size, b.done = b.xs[:0], b.msgs[:0], 0, 0, nil
	batches.Put(b)
}

func (b *batch) add(m StreamMsg, msg *nats.Msg) {
	b.xs = append(b.xs, prepared{m: m})
	if msg != nil {
		b.msgs = append(b.msgs, msg)
	}
	b.size += len(m.Data)
}

// Bounds of the work in flight between the stream and the applier: a
// batch is cut at batchMsgs messages or batchBytes bytes of data
// (whichever comes first, and always holds one message), and at most
// pipelineDepth batches (twice the workers, on a machine with more than
// four cores) wait to be applied, so a reader holds about (depth+2) ×
// batchBytes of message data at once, whatever the stream's length, plus
// what the client has pulled (pullMaxMessages, pullMaxBytes). A reader
// that trusts publisher keys also holds the verdicts that wait for a
// checkpoint (attested.go: at most maxDeferred messages and
// maxDeferredBytes of their data).
const (
	batchMsgs     = 128
	batchBytes    = 128 << 10
	pipelineDepth = 8
)

// verifyWorkers is how many goroutines prepare messages: GOMAXPROCS.
func verifyWorkers() int { return max(runtime.GOMAXPROCS(0), 1) }

// runOrdered prepares the batches produce emits on verifyWorkers
// goroutines and hands them to consume, on the calling goroutine, in the
// order they were emitted. emit returns false once the pipeline is
// stopping (consume failed or ctx is done); produce should then return.
// When consume returns an error, the batches already emitted are waited
// for but not consumed. runOrdered returns consume's error first, then
// produce's.
func runOrdered(ctx context.Context, r *Reader, produce func(ctx context.Context, emit func(*batch) bool) error, consume func(*batch) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	workers := verifyWorkers()
	depth := max(pipelineDepth, 2*workers)
	work := make(chan *batch, depth)
	order := make(chan *batch, depth)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			subjects := subjectCache{}
			for b := range work {
				for i := range b.xs {
					r.prepare(&b.xs[i], b.xs[i].m, subjects)
				}
				close(b.done)
			}
		})
	}
	var perr error
	go func() {
		defer close(order)
		defer close(work)
		perr = produce(ctx, func(b *batch) bool {
			b.done = make(chan struct{})
			select {
			case order <- b:
			case <-ctx.Done():
				return false
			}
			// Never blocks for long: workers take every batch and
			// depend on nothing.
			work <- b
			return true
		})
	}()
	var cerr error
	for b := range order {
		<-b.done
		if cerr == nil {
			if cerr = consume(b); cerr != nil {
				cancel()
			}
		}
		b.release()
	}
	wg.Wait()
	if cerr != nil {
		return cerr
	}
	return perr
}

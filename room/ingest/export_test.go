package ingest

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
)

// SetAheadWait sets how long a pipelined request waits for the chain to
// get past the request ahead of it, in g.
func (g *Gate) SetAheadWait(d time.Duration) { g.aheadWait.Store(int64(d)) }

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

// WithPresignedCount returns o counting in n the record appends that
// carried the attestation AppendRecords signed ahead of their store.
func WithPresignedCount(o GateOptions, n *atomic.Uint64) GateOptions {
	o.presigned = n
	return o
}

// WithEntryReads returns o counting in n the messages the gate reads to
// find the stored entry a resent line is decided on.
func WithEntryReads(o GateOptions, n *atomic.Uint64) GateOptions {
	o.entryReads = n
	return o
}

// WithLeaderGets returns o counting in n the messages the gate gets from
// the stream leader one at a time (leaderMsg).
func WithLeaderGets(o GateOptions, n *atomic.Uint64) GateOptions {
	o.leaderGets = n
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

// AcquireFirst takes a slot for identity token first among its identity's
// waiting requests (fairSlots.acquireFirst).
func (f *FairSlots) AcquireFirst(ctx context.Context, token string) error {
	return f.acquireFirst(ctx, token)
}

// RecordsRead is how many records g read to bring a room's index up to
// the stream head (none for a room whose records are marked).
func (g *Gate) RecordsRead() uint64 { return g.recordsRead.Load() }

// MarkerBatch is rec's markers as the gate appends them after it in one
// atomic batch (storeMarked), in order and with their offsets, without
// their expected last subject sequences: first adds the room's format
// marker, pos is the record's position on its record subject.
func MarkerBatch(s room.Subjects, rec *events.Record, first bool, pos uint64) []*nats.Msg {
	return markerMsgs(rec, recordMarkers(s, rec, first), pos)
}

// HoldRoom locks the records lock of roomID, as a request storing a
// record there holds it, until release is called.
func (g *Gate) HoldRoom(roomID string) (release func()) {
	r := g.room(roomID)
	r.mu.Lock()
	return r.mu.Unlock
}

// WithAfterHandle returns o running f on each request's goroutine after
// its handler returns, before the request's end is accounted.
func WithAfterHandle(o ServiceOptions, f func()) ServiceOptions {
	o.afterHandle = f
	return o
}

// Places is how many of the service's concurrency slots are free, and
// how many requests wait for one.
func (s *Service) Places() (free, waiting int) {
	s.slots.mu.Lock()
	defer s.slots.mu.Unlock()
	for _, q := range s.slots.queues {
		waiting += len(q)
	}
	return s.slots.free, waiting
}

// HeldIdentities is how many identities the service holds a share of.
func (s *Service) HeldIdentities() int {
	s.quota.mu.Lock()
	defer s.quota.mu.Unlock()
	return len(s.quota.ids)
}

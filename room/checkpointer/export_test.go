package checkpointer

import (
	"time"

	"github.com/roompub/roompub/checkpoint"
)

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

// CatchUpRead returns how many messages the catch-up read at start read
// and the stream seq it started at.
func (c *Checkpointer) CatchUpRead() (msgs, from uint64) { return c.catchUpMsgs.Load(), c.readFrom }

// WithCatchUpPause returns o for a checkpointer whose catch-up read gets
// batch messages at a time and waits on pause after each.
func WithCatchUpPause(o Options, batch int, pause <-chan struct{}) Options {
	o.catchUpBatch, o.catchUpPause = batch, pause
	return o
}

// WithBeforeFinal returns o for a checkpointer whose Stop calls f once the
// stream is no longer followed, before the final checkpoints are written.
func WithBeforeFinal(o Options, f func()) Options {
	o.beforeFinal = f
	return o
}

// RoomTree returns the size and root of the checkpointer's tree of
// roomID, and whether it has the room.
func (c *Checkpointer) RoomTree(roomID string) (size uint64, root [32]byte, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.rooms[roomID]
	if r == nil {
		return 0, [32]byte{}, false
	}
	size = r.ledger.Size()
	root, err := r.ledger.RootAt(size)
	return size, root, err == nil
}

// CaughtUp reports whether the catch-up read at start is over.
func (c *Checkpointer) CaughtUp() bool {
	select {
	case <-c.switched:
		return true
	default:
		return false
	}
}

// RoomLeaves returns the size of the checkpointer's tree of roomID, the
// leaves its latest checkpoint read back covers (the tree's base), and
// what the tree did with its leaves.
func (c *Checkpointer) RoomLeaves(roomID string) (size, covered uint64, stats checkpoint.LeafStats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.rooms[roomID]
	if r == nil {
		return 0, 0, checkpoint.LeafStats{}
	}
	return r.ledger.Size(), r.ledger.Covered(), r.ledger.LeafStats()
}

// LoseTree gives up roomID's tree as a spill file that cannot be read back
// does (loseTree), err being why.
func (c *Checkpointer) LoseTree(roomID string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.rooms[roomID]; r != nil {
		c.loseTree(r, err)
	}
}

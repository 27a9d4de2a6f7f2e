package checkpointer

import (
	"time"
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

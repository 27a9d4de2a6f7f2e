package ingest

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/jsapi"
)

// What the store lost, on the gate's side (docs/reliability.md, "When the
// store loses what it acknowledged"). The gate keeps no record of what it
// acknowledged outside the store, so it judges a chain from what the
// stream still shows: the messages on the chain's subject against its
// head's position. A chain whose head is at seq n holds n+1 entries; fewer
// messages on its subject mean positions below the head are gone, and an
// append would build on the hole. Such a chain is closed: every item sent
// to it is refused events.StoreLost, and a restart does not reopen it, as
// the hole is still in the store.
//
// A chain is judged when the gate first reads its head, and again after
// Recheck (Serve calls it when its stream guard sees the stream lose
// messages): the gate's own appends keep a judged chain whole.

// LossObserver is told how many chains the gate knows to be damaged each
// time that number changes. An Observer that implements it (Metrics does)
// is told; implementations must not block.
type LossObserver interface {
	ChainsDamaged(n int)
}

// DamagedChain is one chain the gate found damaged: where it lives and
// what the store lost of it.
type DamagedChain struct {
	RoomID string
	Chain  events.ChainKey
	Loss   room.ChainLoss
}

// Damaged returns the chains the gate has found damaged since it started,
// sorted by room then chain; empty when none. A chain judged whole again
// (the store was restored from a backup) leaves the list.
func (g *Gate) Damaged() []DamagedChain {
	g.lossMu.Lock()
	defer g.lossMu.Unlock()
	out := slices.Collect(maps.Values(g.damaged))
	slices.SortFunc(out, func(a, b DamagedChain) int {
		return cmp.Or(cmp.Compare(a.RoomID, b.RoomID), cmp.Compare(a.Chain.RunID, b.Chain.RunID), cmp.Compare(a.Chain.CapsuleID, b.Chain.CapsuleID))
	})
	return out
}

// Recheck makes the gate judge every chain again on its next use: Serve
// calls it when the stream shows messages lost since the chains were
// judged.
func (g *Gate) Recheck() { g.lossGen.Add(1) }

// judgeLoss sets c.lost for the chain c holds (loaded, with key's head):
// the stream leader's count of messages on its subject against c.next,
// and, when fewer, the chain read whole to name the missing positions.
func (g *Gate) judgeLoss(ctx context.Context, key events.ChainKey, c *chainState) error {
	gen := g.lossGen.Load()
	if c.next == 0 {
		c.lost, c.lossGen = nil, gen
		return nil
	}
	subj := g.subjects.Journal(c.roomID, key)
	counts, err := jsapi.SubjectCounts(ctx, g.nc, g.streamName(), subj, g.timeout)
	if err != nil {
		return err
	}
	var lost *room.ChainLoss
	if int64(counts[subj]) < c.next {
		if lost, err = g.readLoss(ctx, subj, c.next, max(c.lastSeq, c.streamSeq)); err != nil {
			return err
		}
	}
	c.lost, c.lossGen = lost, gen
	g.noteLoss(key, c.roomID, lost)
	return nil
}

// readLoss reads subj's messages up to stream sequence to and returns the
// positions below next that no entry holds (nil when none): the first
// message at each position counts, whatever else is on the subject.
func (g *Gate) readLoss(ctx context.Context, subj string, next int64, to uint64) (*room.ChainLoss, error) {
	var at map[int64]uint64
	err := g.readChain(ctx, subj, 1, to, func() { at = map[int64]uint64{} }, func(m *jetstream.RawStreamMsg) {
		e, err := events.ParseEntry(m.Data)
		if err != nil {
			return
		}
		if seq, ok := e.Seq(); ok && seq >= 0 && seq < next {
			if _, dup := at[seq]; !dup {
				at[seq] = m.Sequence
			}
		}
	}, func() bool { return int64(len(at)) >= next })
	if err != nil {
		return nil, fmt.Errorf("read chain %s: %w", subj, err)
	}
	return lossOf(at, next), nil
}

// lossOf is the loss of a chain whose stored entries are at (position to
// stream sequence) and whose next position is next: nil when every
// position below next is held.
func lossOf(at map[int64]uint64, next int64) *room.ChainLoss {
	if int64(len(at)) >= next {
		return nil
	}
	loss := &room.ChainLoss{Stored: int64(len(at)), Count: next - int64(len(at))}
	var after uint64
	for p := int64(0); p < next; p++ {
		if s, ok := at[p]; ok {
			after = s
			continue
		}
		run := room.LostRun{From: p, To: p, After: after}
		for run.To+1 < next {
			if _, ok := at[run.To+1]; ok {
				break
			}
			run.To++
		}
		run.Before = at[run.To+1] // 0 when the run reaches next (no head above it)
		loss.Missing = append(loss.Missing, run)
		p = run.To
	}
	return loss
}

// noteLoss records the verdict on one chain: a new or changed loss is
// logged at error level, naming room, chain, positions and stream
// sequences; the damaged count goes to a LossObserver.
func (g *Gate) noteLoss(key events.ChainKey, roomID string, lost *room.ChainLoss) {
	g.lossMu.Lock()
	old, had := g.damaged[key]
	switch {
	case lost == nil && !had:
		g.lossMu.Unlock()
		return
	case lost == nil:
		delete(g.damaged, key)
	case had && old.RoomID == roomID && old.Loss.String() == lost.String():
		g.lossMu.Unlock()
		return
	default:
		g.damaged[key] = DamagedChain{RoomID: roomID, Chain: key, Loss: *lost}
	}
	n := len(g.damaged)
	g.lossMu.Unlock()
	if lost != nil {
		g.log.Error("the store lost acknowledged entries of a chain: the chain is closed (store_lost)",
			zap.String("room", roomID), zap.String("chain", key.RunID+"/"+key.CapsuleID),
			zap.Int64("lost", lost.Count), zap.Int64("stored", lost.Stored), zap.String("missing", lost.String()))
	} else {
		g.log.Warn("a chain the store had lost entries of is whole again (the store was restored)",
			zap.String("room", roomID), zap.String("chain", key.RunID+"/"+key.CapsuleID))
	}
	if lo, ok := g.obs.(LossObserver); ok {
		lo.ChainsDamaged(n)
	}
}

// storeLostItem refuses item i of a request on a chain whose store lost
// positions (c.lost set).
func storeLostItem(i int, c *chainState, e *events.Entry) room.ItemResult {
	seq, _ := e.Seq()
	rf := room.RefusedItem(i, []events.Problem{{Code: events.StoreLost, At: events.Location{Line: i + 1},
		Reason: fmt.Sprintf("the store lost %d of the chain's %d acknowledged entries, %s; the chain is closed, as an append would build on the hole",
			c.lost.Count, c.next, c.lost.String())}})
	rf.Seq, rf.Hash = &seq, e.EntryHash()
	return rf
}

// streamName is the room stream's name.
func (g *Gate) streamName() string { return g.stream.CachedInfo().Config.Name }

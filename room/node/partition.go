package node

import (
	"context"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/ingest"
	"go.uber.org/zap"
)

// partition is what Serve runs for one room stream of the deployment
// (docs/design.md, "Partitions"): its guard, gate, checkpointer and
// survey, and the verdicts /healthz reports.
type partition struct {
	cfg            jetstream.StreamConfig
	subjects       room.Subjects
	guard          *streamGuard
	st             jetstream.Stream
	gate           *ingest.Gate
	ckp            *checkpointer.Checkpointer
	contradictions *contradictionRelay
	surveys        *surveyor
	// healthy holds the last stream check's error, storeLost what the
	// store lost and scrubbed what the last scrub found unreadable,
	// wrapped: atomic.Value panics on a nil interface, and nil is the
	// healthy case.
	healthy, storeLost, scrubbed atomic.Value
}

type checkResult struct{ err error }

// check runs the partition's stream check: a weakened stream pauses its
// gate, a loss found since the last check starts a survey.
func (p *partition) check(ctx, surveyCtx context.Context, log *zap.Logger) {
	// A stream that cannot be read now (no leader during an election, a
	// partition) says nothing about its configuration: the last verdict
	// stands rather than appends pausing until the next check. A stream
	// that is gone stays gone: nothing here, in the gate or in the
	// checkpointer creates it.
	err, known := p.guard.check(ctx)
	if !known {
		return
	}
	p.gate.Pause(err)
	if prev := p.healthy.Load().(checkResult).err; (prev == nil) != (err == nil) {
		if err != nil {
			log.Error("room stream check failed: appends paused", zap.String("stream", p.cfg.Name), zap.Error(err))
		} else {
			log.Info("room stream check passed: appends resumed", zap.String("stream", p.cfg.Name))
		}
	}
	p.healthy.Store(checkResult{err})
	if prev := p.storeLost.Load().(checkResult).err; p.guard.lost != nil && (prev == nil || prev.Error() != p.guard.lost.Error()) {
		// The store lost messages since the chains were judged.
		p.gate.Recheck()
		p.surveys.start(surveyCtx)
	}
	p.storeLost.Store(checkResult{p.guard.lost})
}

// openPlacement opens the deployment's placement bucket: created when the
// layout has several partitions, read when it exists (a deployment that
// has more partitions than asked serves them all), and absent for a
// deployment of one partition that never had more.
func openPlacement(ctx context.Context, js jetstream.JetStream, l room.Layout, replicas int) (*room.Placement, error) {
	var place *room.Placement
	err := setupRetry(ctx, func() (err error) {
		actx, cancel := context.WithTimeout(ctx, setupTry)
		defer cancel()
		place, err = room.OpenPlacement(actx, js, l, replicas, l.Count() > 1)
		return err
	})
	return place, err
}

// partitionMark is the stream mark file of partition i: the option's own
// for the first, beside it with the stream's name for the others.
func partitionMark(mark string, i int, stream string) string {
	if mark == "" || i == 0 {
		return mark
	}
	return mark + "." + stream
}

// lossByPartition sorts the rooms of ServeOptions.AcknowledgeLoss by
// partition: a room placed nowhere is on the first.
func lossByPartition(ctx context.Context, place *room.Placement, rooms []string) ([][]string, error) {
	parts := place.Partitions()
	out := make([][]string, len(parts))
	for _, id := range rooms {
		q, ok, err := place.Room(ctx, id)
		if err != nil {
			return nil, err
		}
		i := 0
		for j, p := range parts {
			if ok && p.Stream == q.Stream {
				i = j
			}
		}
		out[i] = append(out[i], id)
	}
	return out, nil
}

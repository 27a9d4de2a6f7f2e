package node

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/roompub/roompub/room/ingest"
)

// scrubLoop scrubs the partition's stream (ingest.Gate.Scrub) once the
// first survey has ended, then every interval, until ctx ends. What a
// scrub finds unreadable is reported (error log, /healthz,
// roompub_store_unreadable_messages) and a survey started, which closes
// the chains spanning it; a clean scrub clears the report (the store was
// restored). A scrub that fails is logged and tried at the next turn.
func (p *partition) scrubLoop(ctx context.Context, interval time.Duration, metrics *ingest.Metrics, log *zap.Logger) {
	p.surveys.waitFirst(ctx)
	for {
		began := time.Now()
		res, err := p.gate.Scrub(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			log.Warn("scrub: could not read the room stream; trying again at the next scrub", zap.String("stream", p.cfg.Name), zap.Error(err))
		default:
			found := res.Err()
			if found != nil {
				p.surveys.start(ctx)
			} else {
				log.Info("scrub: every message the server counts was read", zap.String("stream", p.cfg.Name),
					zap.Uint64("read", res.Read), zap.Uint64("from_stream_seq", res.FirstSeq), zap.Uint64("to_stream_seq", res.LastSeq), zap.Duration("took", time.Since(began)))
			}
			p.scrubbed.Store(checkResult{found})
			if metrics != nil {
				metrics.StoreUnreadable(p.cfg.Name, res.Unreadable)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

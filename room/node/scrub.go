package node

import (
	"context"
	"errors"
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
//
// Until the first scrub has ended, /healthz is not ok (errNotScrubbed):
// a start after damage must not say ok, nor a re-ship hear "already
// stored", on a store nothing has read yet. A scrub that finds deleted
// messages asks for the stream check at once (checkSoon): the server may
// have found a cut block only as the scrub loaded it, after the start's
// check.
func (p *partition) scrubLoop(ctx context.Context, interval time.Duration, checkSoon func(), metrics *ingest.Metrics, log *zap.Logger) {
	p.surveys.waitFirst(ctx)
	for {
		began := time.Now()
		res, err := p.gate.Scrub(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			log.Warn("scrub: could not read the room stream; trying again at the next scrub", zap.String("stream", p.cfg.Name), zap.Error(err))
			if p.scrubbed.Load().(checkResult).err == errNotScrubbed {
				p.scrubbed.Store(checkResult{}) // not kept unhealthy on a read error: the log says it
			}
		default:
			found := res.Err()
			switch {
			case found != nil:
				p.surveys.start(ctx)
			case res.Deleted > 0:
				log.Info("scrub: every message the server counts was read; it shows some deleted: checking the stream", zap.String("stream", p.cfg.Name),
					zap.Uint64("read", res.Read), zap.Uint64("deleted", res.Deleted), zap.Duration("took", time.Since(began)))
			default:
				log.Info("scrub: every message the server counts was read", zap.String("stream", p.cfg.Name),
					zap.Uint64("read", res.Read), zap.Uint64("from_stream_seq", res.FirstSeq), zap.Uint64("to_stream_seq", res.LastSeq), zap.Duration("took", time.Since(began)))
			}
			if res.Deleted > 0 {
				checkSoon()
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

// errNotScrubbed is /healthz's word until the start's first scrub ends.
var errNotScrubbed = errors.New("starting: the first scrub of the room stream has not ended (messages the server cannot read are found only by reading them)")

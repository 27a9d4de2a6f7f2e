package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/validate"
)

// publisher is roompub's publishing side on one stream, composed as
// `publisher serve --publisher-key` composes it (node.Serve): a gate and,
// with a publisher key, a checkpointer with serve's defaults (a checkpoint
// per room every room.DefaultCheckpointEvery messages or
// room.DefaultCheckpointInterval, and on stop; the default lease bucket)
// on a connection of its own, as serve gives it (its read of every message
// does not queue behind the gate's acks), which the gate tells of its
// attestations (GateOptions.Attested). Without a key (--no-attest) it is the keyless
// gate alone, as serve without --publisher-key.
type publisher struct {
	gate *ingest.Gate
	ckp  *checkpointer.Checkpointer // nil without a key
	ckNC *nats.Conn                 // the checkpointer's connection; nil without a key
	// nodeID names the publisher key; "" without one. The key itself
	// stays in the gate and the checkpointer: it is never printed.
	nodeID string
}

// publisherStopTimeout bounds the checkpointer's final checkpoints, as
// serve bounds them.
const publisherStopTimeout = 30 * time.Second

// startPublisher starts a publisher on nc over the existing stream, with a
// publisher key made for it when attest is set. metrics, when not nil,
// observes the gate; reg, when not nil, gets the checkpointer's metrics.
func startPublisher(ctx context.Context, nc *nats.Conn, stream string, subjects room.Subjects, v *validate.Validator,
	attest bool, batch, inflight int, metrics *ingest.Metrics, reg prometheus.Registerer, log *zap.Logger) (*publisher, error) {
	p := &publisher{}
	gopts := ingest.GateOptions{Stream: stream, Subjects: subjects, Validator: v, Logger: log,
		MaxBatch: batch, MaxInflightBatches: inflight}
	if metrics != nil {
		gopts.Observer = metrics
	}
	if attest {
		key, err := events.GenerateHostKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		p.nodeID = key.NodeID()
		if p.ckNC, err = nats.Connect(nc.ConnectedUrl(), nats.Name("roompub-publisher-checkpointer")); err != nil {
			return nil, err
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		p.ckp, err = checkpointer.Start(cctx, p.ckNC, checkpointer.Options{Key: key, Stream: stream, Subjects: subjects,
			Logger: log, Registerer: reg, Replicas: 1})
		cancel()
		if err != nil {
			p.ckNC.Close()
			return nil, err
		}
		gopts.PublisherKey, gopts.Attested = key, p.ckp
	}
	var err error
	if p.gate, err = ingest.NewGate(ctx, nc, gopts); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// stop writes the checkpointer's final checkpoints and releases its
// leases, as serve does on SIGTERM once every request is decided. It runs
// once; a nil publisher has nothing to stop.
func (p *publisher) stop() error {
	if p == nil || p.ckp == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), publisherStopTimeout)
	defer cancel()
	err := p.ckp.Stop(ctx)
	p.ckNC.Close()
	p.ckp, p.ckNC = nil, nil
	if err != nil {
		return fmt.Errorf("final checkpoints: %w", err)
	}
	return nil
}

// newLogger logs the gate's and the checkpointer's warnings and errors to
// w, one line each; they never log a key.
func newLogger(w io.Writer) *zap.Logger {
	enc := zap.NewDevelopmentEncoderConfig()
	enc.TimeKey = ""
	return zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.Lock(zapcore.AddSync(w)), zap.WarnLevel))
}

// storePath says how roompub stores what its gate accepted, for the
// table's notes.
func (b *bench) storePath() string {
	if b.attested() {
		return "attestation with the publisher key, store; a checkpointer reads the stream and writes signed checkpoints"
	}
	return "store (--no-attest: no publisher key, no checkpointer)"
}

package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/node"
	"github.com/roompub/roompub/validate"
	"github.com/roompub/roompub/witness"
)

// publisher is roompub's publishing side on one stream: node.Serve, what
// `publisher serve` runs, connected to the bench's embedded server, the
// first of the cluster with --replicas 3 (ServerURL), with the stream's
// replicas at --replicas. With a publisher key (not --no-attest) it is `publisher serve --publisher-key`: the gate attests,
// and a checkpointer with serve's defaults, on a connection of its own,
// writes signed checkpoints. Its gate batches as the raw side does
// (--batch, --inflight: serve's --max-batch, --max-inflight-batches).
type publisher struct {
	cancel context.CancelFunc
	done   chan error // Serve's return; nil once stopped
	// errorsLogged counts what Serve logged at error level (a failed stream
	// check, a checkpoint not written, its final checkpoints): any one
	// fails the run.
	errorsLogged atomic.Int64
	// nodeID names the publisher key; "" without one. The key itself
	// stays in Serve: it is never printed.
	nodeID string
}

// publisherOptions is how a publisher attests: not at all (keyless), with
// a key made for it, or with the key and origin of a witnessed deployment,
// whose checkpointer keeps the deployment log cosigned by witnesses.
type publisherOptions struct {
	attest bool
	// every and interval are the checkpointer's Every and Interval (0:
	// its defaults), without a deployment.
	every     int
	interval  time.Duration
	deploy    *deploymentKey // nil: no origin, no deployment log
	witnesses []witness.Witness
}

// writeOptions is how the write rows' publisher attests in the mode
// running.
func (b *bench) writeOptions() publisherOptions {
	o := publisherOptions{attest: b.attested()}
	if b.witnessing() {
		o.deploy, o.witnesses = b.wit.write, b.wit.ws
	}
	return o
}

// startPublisher runs node.Serve on stream until stop, and returns once
// its ingest service answers on servicePrefix ("": the default); with
// po.attest, with a publisher key made for it, or po.deploy's key and
// origin. Two publishers running at once need prefixes of their own: on
// one prefix they share a queue group, and a request could reach the other
// one's stream.
func (b *bench) startPublisher(stream string, subjects room.Subjects, servicePrefix string, v *validate.Validator, po publisherOptions) (*publisher, error) {
	p := &publisher{done: make(chan error, 1)}
	o := node.ServeOptions{
		ServerURL: b.emb.ClientURL(),
		Stream:    stream,
		Subjects:  subjects,
		Replicas:  b.c.Replicas,
		Validator: v,
		Service:   ingest.ServiceOptions{Prefix: servicePrefix, Version: buildVersion()},
		// The gate batches as the raw side does: up to --batch messages
		// per atomic batch, at most --inflight batches open at once.
		MaxBatch:           b.c.Batch,
		MaxInflightBatches: b.c.Inflight,
		Logger:             newLogger(b.out.err, &p.errorsLogged),
	}
	switch {
	case po.deploy != nil:
		o.PublisherKey, p.nodeID = po.deploy.key, po.deploy.key.NodeID()
		o.Checkpoint = checkpointer.Options{Origin: po.deploy.origin, Deployment: checkpointer.DeploymentOptions{Witnesses: po.witnesses}}
	case po.attest:
		key, err := events.GenerateHostKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		o.PublisherKey, p.nodeID = key, key.NodeID()
		o.Checkpoint = checkpointer.Options{Every: po.every, Interval: po.interval}
	}
	ready := make(chan struct{}, 1)
	o.Ready = func(node.ServeInfo) { ready <- struct{}{} }
	var ctx context.Context
	ctx, p.cancel = context.WithCancel(b.ctx)
	go func() { p.done <- node.Serve(ctx, o) }()
	select {
	case <-ready:
		return p, nil
	case err := <-p.done:
		p.cancel()
		if err == nil {
			err = errors.New("it stopped before it served")
		}
		return nil, fmt.Errorf("publisher serve on stream %s: %w", stream, err)
	}
}

// stop stops Serve as SIGTERM stops `publisher serve`: the ingest service
// stops once every request is decided, then the checkpointer writes its
// final checkpoints and releases its leases. It fails when Serve did or
// logged an error. It runs once; a nil publisher has nothing to stop.
func (p *publisher) stop() error {
	if p == nil || p.done == nil {
		return nil
	}
	p.cancel()
	err := <-p.done
	p.done = nil
	if n := p.errorsLogged.Load(); err == nil && n > 0 {
		err = fmt.Errorf("the publisher logged %d errors (above)", n)
	}
	return err
}

// dropStream deletes stream, if there is one, and what Serve remembers of
// it (its mark in room.DefaultStreamsBucket), so that Serve takes the
// stream made next as a first start does, not as a replaced one.
func (b *bench) dropStream(ctx context.Context, stream string) error {
	if err := b.js.DeleteStream(ctx, stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("delete the stream %s of an earlier run: %w", stream, err)
	}
	kv, err := b.js.KeyValue(ctx, room.DefaultStreamsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err == nil {
		err = kv.Delete(ctx, stream)
	}
	if err != nil {
		return fmt.Errorf("forget the mark of stream %s: %w", stream, err)
	}
	return nil
}

// newLogger logs warnings and errors to w, one line each, and counts the
// errors in errs; Serve never logs a key.
func newLogger(w io.Writer, errs *atomic.Int64) *zap.Logger {
	enc := zap.NewDevelopmentEncoderConfig()
	enc.TimeKey = ""
	return zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.Lock(zapcore.AddSync(w)), zap.WarnLevel),
		zap.Hooks(func(e zapcore.Entry) error {
			if e.Level >= zapcore.ErrorLevel {
				errs.Add(1)
			}
			return nil
		}))
}

// storePath says how roompub stores what its gate accepted, for the
// table's notes.
func (b *bench) storePath() string {
	switch {
	case b.witnessing():
		return fmt.Sprintf("attestation with the publisher key, store; a checkpointer reads the stream, writes signed checkpoints and appends them to the deployment log, which %d litewitness processes cosign every second it grew (witnessed)", len(b.wit.ws))
	case b.attested():
		return "attestation with the publisher key, store; a checkpointer reads the stream and writes signed checkpoints"
	}
	return "store (keyless: no publisher key, no checkpointer)"
}

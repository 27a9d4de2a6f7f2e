package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/roompub/roompub/config"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/node"
	"github.com/roompub/roompub/validate"
	"github.com/roompub/roompub/witness"
)

type serveCmd struct {
	config.Serve
}

func (c *serveCmd) Run(s *streams) error {
	log, err := newLogger(c.Logging, s)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	vopts := []validate.Option{validate.WithTrustedHosts(c.TrustedHosts...)}
	if c.SchemaDir != "" {
		vopts = append(vopts, validate.WithSchemaFS(os.DirFS(c.SchemaDir)))
	}
	v, err := validate.New(vopts...)
	if err != nil {
		return err
	}
	connect, secure, err := secureConnect(&c.Serve) // secure.go
	if err != nil {
		return err
	}
	maxPayload, _ := config.ParseSize(c.MaxPayload) // checked by Validate
	maxStore, _ := config.ParseSize(c.MaxStore)     // checked by Validate
	tilesCache, _ := config.ParseSize(c.TilesCache) // checked by Validate
	if maxPayload > 1<<31-1 {
		return fmt.Errorf("%w: --max-payload too large", config.ErrInvalid)
	}
	var publisherKey *events.HostKey
	if c.PublisherKey != "" {
		data, err := config.ReadKeyFile(c.PublisherKey, c.AllowOpenKeyFile)
		if err != nil {
			return fmt.Errorf("%w: --publisher-key: %w", config.ErrInvalid, err)
		}
		// The error names the file, never its content.
		if publisherKey, err = events.ParseHostKey(data); err != nil {
			return fmt.Errorf("%w: --publisher-key %s: not a key made by 'publisher keygen'", config.ErrInvalid, c.PublisherKey)
		}
	}
	var witnesses []witness.Witness
	if c.WitnessPolicy != "" && publisherKey != nil {
		if witnesses, err = config.LoadWitnesses(c.WitnessPolicy, c.Origin, publisherKey.Public()); err != nil {
			return fmt.Errorf("%w: --witness-policy: %w", config.ErrInvalid, err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return node.Serve(ctx, node.ServeOptions{
		ServerURL: c.Server,
		Embedded: embedded.Options{
			Listen:       c.Listen,
			StoreDir:     c.StoreDir,
			SyncInterval: c.SyncInterval,
			MaxPayload:   int32(maxPayload),
			MaxFileStore: maxStore,
			Configure:    secure,
		},
		Connect:    connect,
		Stream:     c.Stream,
		Partitions: c.Partitions,
		Subjects:   room.Subjects{Prefix: c.Prefix},
		Replicas:   c.Replicas,
		// docs/secure-mode.md, "The stream".
		AcceptStream: c.AcceptStream,
		// docs/reliability.md, "Crashes on the cluster".
		StreamMark:    c.StreamMark,
		CheckInterval: c.StreamCheckInterval,
		// docs/reliability.md, "Scrubbing".
		ScrubInterval: c.ScrubInterval,
		// docs/reliability.md, "Loss notices".
		AcknowledgeLoss: c.AcceptLoss,
		// The gate's atomic batches.
		MaxBatch:           c.MaxBatch,
		MaxInflightBatches: c.MaxInflightBatches,
		Validator:          v,
		// Attestations and room checkpoints.
		PublisherKey: publisherKey,
		Checkpoint: checkpointer.Options{
			TrustedPublishers: c.TrustedPublishers,
			Origin:            c.Origin,
			Deployment:        checkpointer.DeploymentOptions{Witnesses: witnesses},
			Every:             c.CheckpointEvery,
			Interval:          c.CheckpointInterval,
			FullRead:          c.CheckpointFullRead,
			LeafDir:           c.CheckpointLeafDir,
		},
		Service:  ingest.ServiceOptions{Version: buildVersion()},
		HTTPAddr: c.HTTP,
		// docs/tiles.md, "The serve endpoint".
		Tiles:  node.TilesOptions{Enabled: c.Tiles, CacheBytes: tilesCache},
		Logger: log,
		Ready: func(info node.ServeInfo) {
			fmt.Fprintf(s.err, "publisher: serving on %s (stream %s, service %s)\n", info.ClientURL, info.Stream, room.ServiceName)
			if info.Tiles != "" {
				fmt.Fprintf(s.err, "publisher: serving tlog-tiles at %s\n", info.Tiles)
			}
		},
	})
}

// newLogger builds the zap logger of a long-running command; logs go to
// stderr.
func newLogger(l config.Logging, s *streams) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(l.Level)
	if err != nil {
		return nil, fmt.Errorf("%w: --log-level: %v", config.ErrInvalid, err)
	}
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	if l.Format == "console" {
		enc = zapcore.NewConsoleEncoder(encCfg)
	} else {
		enc = zapcore.NewJSONEncoder(encCfg)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(s.err), level)), nil
}

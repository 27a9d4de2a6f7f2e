package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/config"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/reader"
	"github.com/roompub/roompub/validate"
)

// receiptFlags ask publisher journal and execution for a witnessed
// receipt (docs/witnesses.md, "Portable evidence"): once shipped, the
// evidence bundle of each chain's head (journal) or each record
// (execution), written into a directory as soon as a deployment
// checkpoint a witness quorum cosigned covers it.
type receiptFlags struct {
	Receipt           string        `name:"receipt" placeholder:"DIR" help:"After shipping, wait for a witnessed checkpoint that covers what was shipped and write the evidence bundle of each chain's head (execution: of each record) into DIR (needs --trusted-publisher and a witness policy)."`
	ReceiptTimeout    time.Duration `name:"receipt-timeout" default:"60s" help:"How long --receipt waits for the witnesses; past it the command names what is not witnessed yet and why, and exits 1 (what was shipped stays stored)."`
	TrustedPublishers []string      `name:"trusted-publisher" placeholder:"NODE_ID" help:"With --receipt: node id of a publisher key whose attestations and checkpoints are trusted (repeatable)." yaml:"trusted-publisher"`
	Stream            string        `name:"stream" default:"ROOMS" help:"With --receipt: the room stream's name." yaml:"stream"`
	Prefix            string        `name:"subject-prefix" default:"rooms" help:"With --receipt: the first token of every room subject." yaml:"subject-prefix"`
	config.WitnessPolicy
}

// validate checks the receipt flags when --receipt is given.
func (r *receiptFlags) validate() error {
	if r.Receipt == "" {
		return nil
	}
	var errs []error
	for _, id := range r.TrustedPublishers {
		if _, err := events.ParseNodeID(id); err != nil {
			errs = append(errs, fmt.Errorf("%w: --trusted-publisher %q: %v", config.ErrInvalid, id, err))
		}
	}
	if len(r.TrustedPublishers) == 0 || !r.WitnessPolicy.Set() {
		errs = append(errs, fmt.Errorf("%w: --receipt needs --trusted-publisher and a witness policy (--witness or --witness-policy, and the deployment's --origin)", config.ErrInvalid))
	}
	if r.ReceiptTimeout <= 0 {
		errs = append(errs, fmt.Errorf("%w: --receipt-timeout must be positive", config.ErrInvalid))
	}
	return errors.Join(append(errs, r.WitnessPolicy.Validate(len(r.TrustedPublishers)))...)
}

// receiptWant is what a receipt covers in one room: entries by hash,
// records by ref.
type receiptWant struct {
	room    string
	entries []string
	refs    []string
}

// receiptPoll is how often a receipt reads the room again; a deployment
// checkpoint is cosigned about a second after the room's.
const receiptPoll = time.Second

// errNotWitnessed: --receipt-timeout passed before a witnessed checkpoint
// covered what was shipped (exitRefused; the messages are stored).
var errNotWitnessed = errors.New("not witnessed within --receipt-timeout")

// write waits, polling every receiptPoll up to --receipt-timeout, until
// every message of wants has a witnessed bundle, then writes them all into
// the receipt directory and names each on out. On timeout it names on errw
// each message still without one and why, and returns errNotWitnessed.
// hosts are the record hosts to trust (the records shipped).
func (r *receiptFlags) write(ctx context.Context, nc *nats.Conn, creds config.Credentials, wants []receiptWant, hosts []string, out, errw io.Writer) error {
	t, err := checkpoint.NewTrust(r.TrustedPublishers...)
	if err != nil {
		return fmt.Errorf("%w: --trusted-publisher: %v", config.ErrInvalid, err)
	}
	witnessing, t, err := r.WitnessPolicy.Policy(t)
	if err != nil {
		return err
	}
	v, err := validate.New(validate.WithTrustedHosts(hosts...))
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	read := config.Replay{Read: "auto"}.ReadMode(creds)
	// Each room on its partition (docs/design.md, "Partitions"); without
	// a placement bucket, --stream alone.
	place, err := reader.OpenLayout(ctx, js, room.Layout{Stream: r.Stream, Subjects: room.Subjects{Prefix: r.Prefix}})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(r.ReceiptTimeout)
	for {
		var bundles []*reader.Evidence
		var missing []error
		for _, w := range wants {
			q, err := place.Locate(ctx, w.room)
			if err != nil {
				return fmt.Errorf("receipt: locating %s: %w", w.room, err)
			}
			bs, err := reader.Export(ctx, js, reader.ExportOptions{Stream: q.Stream, Subjects: q.Subjects, Room: w.room,
				Entries: w.entries, Refs: w.refs, Validator: v, Trust: t, Witnessing: witnessing, Read: read})
			if err != nil && !errors.Is(err, reader.ErrNoSuchMessage) && !errors.Is(err, reader.ErrNotWitnessed) {
				return fmt.Errorf("receipt: reading %s: %w", w.room, err)
			}
			bundles = append(bundles, bs...)
			if err != nil {
				missing = append(missing, unjoin(err)...)
			}
		}
		if len(missing) == 0 {
			return writeReceipts(out, r.Receipt, bundles)
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			for _, e := range missing {
				fmt.Fprintf(errw, "publisher: receipt: %v\n", e)
			}
			return fmt.Errorf("receipt: %d of %d message(s) %w (%s): %w", len(missing), len(missing)+len(bundles), errNotWitnessed, r.ReceiptTimeout, errRefused)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(min(wait, receiptPoll)):
		}
	}
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// writeReceipts writes each bundle into dir (made if missing) by atomic
// rename, named as subscriber export names them, and says so on out.
func writeReceipts(out io.Writer, dir string, bundles []*reader.Evidence) error {
	paths, err := reader.WriteEvidence(dir, bundles)
	if err != nil {
		return err
	}
	for i, path := range paths {
		b := bundles[i]
		fmt.Fprintf(out, "receipt  %s: %s %s, leaf %d, deployment log entry %d\n", path, b.Room, b.Position, b.RoomProof.Index, b.DeploymentProof.Index)
	}
	return nil
}

// addWant adds a record's ref to its room's want, rooms in first-seen
// order.
func addWant(wants []receiptWant, roomID, ref string) []receiptWant {
	for i := range wants {
		if wants[i].room == roomID {
			if !slices.Contains(wants[i].refs, ref) {
				wants[i].refs = append(wants[i].refs, ref)
			}
			return wants
		}
	}
	return append(wants, receiptWant{room: roomID, refs: []string{ref}})
}

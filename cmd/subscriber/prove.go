package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/config"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room/reader"
	"github.com/roompub/roompub/validate"
)

type proveCmd struct {
	config.Reader
	config.Replay
	publisherTrust
	config.WitnessPolicy
	Room  string `name:"room" required:"" placeholder:"ROOM" help:"The room of the message."`
	Ref   string `name:"ref" placeholder:"REF" help:"The execution/ref of an execution record." xor:"what" required:""`
	Entry string `name:"entry" placeholder:"HASH" help:"The entry_hash of a journal entry." xor:"what" required:""`
}

func (c *proveCmd) Validate() error {
	errs := []error{checkRooms([]string{c.Room}), c.publisherTrust.validate(), c.WitnessPolicy.Validate(len(c.TrustedPublishers)), checkWhat(c.Entry, c.Ref)}
	if len(c.TrustedPublishers) == 0 {
		errs = append(errs, fmt.Errorf("%w: prove needs --trusted-publisher (the keys whose checkpoints count)", config.ErrInvalid))
	}
	return errors.Join(errs...)
}

// Run reads the room, verifying everything, and prints the inclusion proof
// of the message against the room's latest verified checkpoint as one
// JSON object; with a witness policy, the message's evidence bundle
// instead (as export writes it). A message that is not there or not
// covered (witnessed) yet is refused (exit 1).
func (c *proveCmd) Run(s *streams) error {
	t, err := c.trust()
	if err != nil {
		return err
	}
	witnessing, t, err := c.Policy(t)
	if err != nil {
		return err
	}
	warn := s.err
	if c.Ref == "" {
		warn = nil // a journal entry: no record's host to trust
	}
	nc, js, v, err := open(&c.Reader, "roompub-subscriber-prove", warn)
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if witnessing != nil {
		return c.bundle(ctx, s, js, v, t, witnessing)
	}
	stream, subjects, err := partitionOf(ctx, js, &c.Reader, nil, c.Room)
	if err != nil {
		return err
	}
	p, err := reader.Prove(ctx, js, reader.ProveOptions{Stream: stream, Subjects: subjects, Room: c.Room, Read: c.ReadMode(c.Credentials),
		Entry: c.Entry, Ref: c.Ref, Validator: v, Trust: t})
	if errors.Is(err, reader.ErrNoSuchMessage) || errors.Is(err, reader.ErrNotCovered) {
		return fmt.Errorf("prove: %w: %w", err, errRefused)
	}
	if err != nil {
		return err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(s.out, "%s\n", b)
	return err
}

// bundle prints the message's evidence bundle (reader.Export).
func (c *proveCmd) bundle(ctx context.Context, s *streams, js jetstream.JetStream, v *validate.Validator, t *checkpoint.Trust, w *reader.Witnessing) error {
	stream, subjects, err := partitionOf(ctx, js, &c.Reader, nil, c.Room)
	if err != nil {
		return err
	}
	o := reader.ExportOptions{Stream: stream, Subjects: subjects, Room: c.Room, Validator: v, Trust: t, Witnessing: w, Read: c.ReadMode(c.Credentials)}
	if c.Entry != "" {
		o.Entries = []string{c.Entry}
	} else {
		o.Refs = []string{c.Ref}
	}
	bundles, err := reader.Export(ctx, js, o)
	if err != nil && !errors.Is(err, reader.ErrNoSuchMessage) && !errors.Is(err, reader.ErrNotWitnessed) {
		return err
	}
	if err != nil {
		return reportMissing(s.err, "prove", err)
	}
	b, err := bundles[0].MarshalJSON()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(s.out, "%s\n", b)
	return err
}

// checkWhat refuses an --entry that is no entry_hash (64 lower-case hex
// digits, seed 000) and a --ref that is no execution/ref (seed 004): a
// lookup of either could match no message, and would say so as if the
// room lacked it.
func checkWhat(entry, ref string) error {
	switch {
	case entry != "" && !events.IsHex64(entry):
		return fmt.Errorf("%w: --entry %q is not an entry_hash: 64 lower-case hex digits", config.ErrInvalid, entry)
	case ref != "" && !events.IsExecutionRef(ref):
		return fmt.Errorf("%w: --ref %q is not an execution/ref: %s and 43 base64url characters", config.ErrInvalid, ref, events.ExecutionRefPrefix)
	}
	return nil
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/roompub/roompub/config"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/reader"
)

type proveCmd struct {
	config.Reader
	config.Replay
	publisherTrust
	Room  string `name:"room" required:"" placeholder:"ROOM" help:"The room of the message."`
	Ref   string `name:"ref" placeholder:"REF" help:"The execution/ref of an execution record." xor:"what" required:""`
	Entry string `name:"entry" placeholder:"HASH" help:"The entry_hash of a journal entry." xor:"what" required:""`
}

func (c *proveCmd) Validate() error {
	errs := []error{checkRooms([]string{c.Room}), c.validate()}
	if len(c.TrustedPublishers) == 0 {
		errs = append(errs, fmt.Errorf("%w: prove needs --trusted-publisher (the keys whose checkpoints count)", config.ErrInvalid))
	}
	return errors.Join(errs...)
}

// Run reads the room, verifying everything, and prints the inclusion proof
// of the message against the room's latest verified checkpoint as one
// JSON object. A message that is not there or not covered yet is refused
// (exit 1).
func (c *proveCmd) Run(s *streams) error {
	t, err := c.trust()
	if err != nil {
		return err
	}
	nc, js, v, err := open(&c.Reader, "roompub-subscriber-prove", s.err)
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p, err := reader.Prove(ctx, js, reader.ProveOptions{Stream: c.Stream, Subjects: room.Subjects{Prefix: c.Prefix}, Room: c.Room, Read: c.ReadMode(c.Credentials),
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

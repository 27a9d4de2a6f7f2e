package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/config"
	"github.com/roompub/roompub/room/reader"
)

type exportCmd struct {
	config.Reader
	config.Replay
	publisherTrust
	config.WitnessPolicy
	Room  string `name:"room" required:"" placeholder:"ROOM" help:"The room of the messages."`
	Entry string `name:"entry" placeholder:"HASH" help:"The entry_hash of a journal entry." xor:"what" required:""`
	Ref   string `name:"ref" placeholder:"REF" help:"The execution/ref of an execution record." xor:"what" required:""`
	Heads bool   `name:"heads" help:"The head (latest verified entry) of every chain of the room." xor:"what" required:""`
	All   bool   `name:"all" help:"Every admitted message of the room (all held in memory while the room is read)." xor:"what" required:""`
	Out   string `name:"out" required:"" placeholder:"DIR" help:"Directory to write one evidence bundle (.roompub-evidence.json) per message into; made if missing."`
}

func (c *exportCmd) Validate() error {
	errs := []error{checkRooms([]string{c.Room}), c.publisherTrust.validate(), c.WitnessPolicy.Validate(len(c.TrustedPublishers)), checkWhat(c.Entry, c.Ref)}
	if len(c.TrustedPublishers) == 0 || !c.WitnessPolicy.Set() {
		errs = append(errs, fmt.Errorf("%w: export needs --trusted-publisher and a witness policy (--witness or --witness-policy, and the deployment's --origin)", config.ErrInvalid))
	}
	return errors.Join(errs...)
}

// Run reads the room and the deployment log, verifying everything, and
// writes the evidence bundle of each message asked for that a witnessed
// deployment checkpoint covers. Exit 1 when one asked for is not there or
// not witnessed yet (each named on stderr, with why), after writing the
// others, or when --heads or --all find no message at all.
func (c *exportCmd) Run(s *streams) error {
	t, err := c.trust()
	if err != nil {
		return err
	}
	witnessing, t, err := c.Policy(t)
	if err != nil {
		return err
	}
	warn := s.err
	if c.Entry != "" || c.Heads {
		warn = nil // journal entries only: no record's host to trust
	}
	nc, js, v, err := open(&c.Reader, "roompub-subscriber-export", warn)
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stream, subjects, err := partitionOf(ctx, js, &c.Reader, nil, c.Room)
	if err != nil {
		return err
	}
	o := reader.ExportOptions{Stream: stream, Subjects: subjects, Room: c.Room, Heads: c.Heads, All: c.All,
		Validator: v, Trust: t, Witnessing: witnessing, Read: c.ReadMode(c.Credentials)}
	if c.Entry != "" {
		o.Entries = []string{c.Entry}
	}
	if c.Ref != "" {
		o.Refs = []string{c.Ref}
	}
	bundles, missing := reader.Export(ctx, js, o)
	if missing != nil && !errors.Is(missing, reader.ErrNoSuchMessage) && !errors.Is(missing, reader.ErrNotWitnessed) {
		return missing // the read failed
	}
	if len(bundles) == 0 && missing == nil {
		// --heads or --all of a room with no admitted message (a mistyped
		// room id reads nothing, as audit's EMPTY says).
		fmt.Fprintf(s.err, "subscriber: export: %s has no admitted message to export\n", c.Room)
		return fmt.Errorf("export: nothing exported: %w", errRefused)
	}
	if err := writeBundles(s.out, c.Out, bundles); err != nil {
		return err
	}
	return reportMissing(s.err, "export", missing)
}

// writeBundles writes each bundle into dir (made if missing) under
// bundleName, by atomic rename, and says so on out.
func writeBundles(out io.Writer, dir string, bundles []*reader.Evidence) error {
	if len(bundles) == 0 {
		return nil
	}
	paths, err := reader.WriteEvidence(dir, bundles)
	if err != nil {
		return err
	}
	for i, path := range paths {
		b := bundles[i]
		fmt.Fprintf(out, "wrote %s: %s %s leaf %d of the room's checkpoint of size %d, deployment log entry %d of the witnessed checkpoint of size %d\n",
			path, b.Room, b.Position, b.RoomProof.Index, roomSize(b), b.DeploymentProof.Index, deploymentSize(b))
	}
	return nil
}

// reportMissing names on w, one per line, what was asked for and has no
// bundle, and returns errRefused when anything is missing.
func reportMissing(w io.Writer, cmd string, missing error) error {
	if missing == nil {
		return nil
	}
	n := 0
	for _, e := range unjoin(missing) {
		fmt.Fprintf(w, "subscriber: %s: %v\n", cmd, e)
		n++
	}
	return fmt.Errorf("%s: %d message(s) without witnessed evidence: %w", cmd, n, errRefused)
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// roomSize and deploymentSize are the sizes the bundle's checkpoints
// claim, for the line that says what was written (verify-proof checks).
func roomSize(b *reader.Evidence) uint64 {
	if c, err := checkpoint.ParseUnverified(b.RoomProof.Checkpoint); err == nil {
		return c.Size
	}
	return 0
}

func deploymentSize(b *reader.Evidence) uint64 {
	if c, err := checkpoint.ParseUnverified(b.DeploymentProof.Checkpoint); err == nil {
		return c.Size
	}
	return 0
}

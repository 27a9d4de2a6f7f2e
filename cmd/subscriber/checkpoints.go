package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/config"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/reader"
)

// publisherTrust is the trusted-publisher flag of the commands that read rooms.
type publisherTrust struct {
	TrustedPublishers []string `name:"trusted-publisher" help:"Node id of a publisher key (made by 'publisher keygen') whose attestations and checkpoints are trusted (repeatable). With it, a message must carry a valid attestation by one of them and every checkpoint must cover its room as read, else checkpoint_mismatch; without it, follow, audit and evidence check neither, and prove and verify-proof refuse to run." placeholder:"NODE_ID" yaml:"trusted-publisher"`
}

// validate reports every bad node id, joined.
func (p *publisherTrust) validate() error {
	var errs []error
	for _, id := range p.TrustedPublishers {
		if _, err := events.ParseNodeID(id); err != nil {
			errs = append(errs, fmt.Errorf("%w: --trusted-publisher %q: %v", config.ErrInvalid, id, err))
		}
	}
	return errors.Join(errs...)
}

// trust returns the trusted keys (an empty set without the flag).
func (p *publisherTrust) trust() (*checkpoint.Trust, error) {
	t, err := checkpoint.NewTrust(p.TrustedPublishers...)
	if err != nil {
		return nil, fmt.Errorf("%w: --trusted-publisher: %v", config.ErrInvalid, err)
	}
	return t, nil
}

// stateDir returns dir, or the default state directory when it is "".
func stateDir(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	if x := os.Getenv("XDG_STATE_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "roompub"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("%w: no --state-dir and no home directory: %v", config.ErrInvalid, err)
	}
	return filepath.Join(home, ".local", "state", "roompub"), nil
}

// checkpointState returns the state of dir when t holds keys, else nil.
func checkpointState(t *checkpoint.Trust, dir string) (*reader.CheckpointState, error) {
	if t.Len() == 0 {
		return nil, nil
	}
	d, err := stateDir(dir)
	if err != nil {
		return nil, err
	}
	return &reader.CheckpointState{Dir: d}, nil
}

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

type verifyProofCmd struct {
	publisherTrust
	File string `arg:"" name:"file" placeholder:"FILE|-" help:"The proof (JSON, as 'subscriber prove' prints it); - reads standard input."`
	JSON bool   `name:"json" help:"Print the verdict as one JSON object."`
}

func (c *verifyProofCmd) Validate() error {
	if len(c.TrustedPublishers) == 0 {
		return fmt.Errorf("%w: verify-proof needs --trusted-publisher", config.ErrInvalid)
	}
	return c.validate()
}

// maxProofBytes bounds what verify-proof reads: a proof is a few KB (at
// most 64 hashes and a signed note).
const maxProofBytes = 1 << 20

// Run checks the proof offline: no server, only the proof, its checkpoint
// and the trusted keys. Exit 0 valid, 1 invalid, 2 usage (a file that
// cannot be read).
func (c *verifyProofCmd) Run(s *streams) error {
	t, err := c.trust()
	if err != nil {
		return err
	}
	var r io.Reader = s.in
	if c.File != "-" {
		f, err := os.Open(c.File)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, maxProofBytes+1))
	if err != nil {
		return err
	}
	var p checkpoint.Proof
	var ck *checkpoint.Checkpoint
	if len(data) > maxProofBytes {
		err = fmt.Errorf("%w: more than %d bytes", checkpoint.ErrBadProof, maxProofBytes)
	} else if err = json.Unmarshal(data, &p); err != nil {
		err = fmt.Errorf("not a proof document: %w", err)
	} else {
		ck, err = p.Verify(t)
	}
	type verdict struct {
		Valid   bool   `json:"valid"`
		Reason  string `json:"reason,omitempty"`
		Room    string `json:"room,omitempty"`
		Subject string `json:"subject,omitempty"`
		// ReportedStreamSeq is the proof's stream_seq as the prover read
		// it: not covered by the signature or the proof.
		ReportedStreamSeq uint64 `json:"reported_stream_seq,omitempty"`
		LeafIndex         uint64 `json:"leaf_index"`
		TreeSize          uint64 `json:"tree_size,omitempty"`
		Signer            string `json:"signer,omitempty"`
	}
	out := verdict{Valid: err == nil}
	if err != nil {
		out.Reason = err.Error()
	} else {
		out.Room, out.Subject, out.ReportedStreamSeq, out.LeafIndex, out.TreeSize, out.Signer = p.Room, p.Subject, p.StreamSeq, p.LeafIndex, ck.Size, ck.Signer
	}
	switch {
	case c.JSON:
		b, _ := json.Marshal(out)
		fmt.Fprintf(s.out, "%s\n", b)
	case err == nil:
		fmt.Fprintf(s.out, "valid: %s (%s) is leaf %d of the checkpoint of size %d signed by %s (stream seq %d as reported by the prover, not proven)\n",
			p.Room, p.Subject, p.LeafIndex, ck.Size, ck.Signer, p.StreamSeq)
	default:
		fmt.Fprintf(s.out, "invalid: %v\n", err)
	}
	if err != nil {
		return fmt.Errorf("verify-proof: %w", errRefused)
	}
	return nil
}

// externalCheckpoints reads audit --checkpoint files.
func externalCheckpoints(files []string) ([]reader.ExternalCheckpoint, error) {
	var out []reader.ExternalCheckpoint
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		out = append(out, reader.ExternalCheckpoint{Name: f, Note: b})
	}
	return out, nil
}

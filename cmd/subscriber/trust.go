package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/config"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/internal/regularfile"
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

// externalCheckpoints reads audit --checkpoint files and refuses, before
// anything is read from the stream, one that is not a checkpoint note
// that t verifies, of one of rooms (reader.ExternalCheckpoint.Check): a
// bad flag value is a usage error, not a message set aside.
func externalCheckpoints(files []string, t *checkpoint.Trust, rooms []string) ([]reader.ExternalCheckpoint, error) {
	var out []reader.ExternalCheckpoint
	for _, f := range files {
		// Not a FIFO's writer to wait for: a checkpoint note is a file.
		b, err := regularfile.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("%w: --checkpoint: %w", config.ErrInvalid, err)
		}
		e := reader.ExternalCheckpoint{Name: f, Note: b}
		if err := e.Check(t, rooms); err != nil {
			return nil, fmt.Errorf("%w: --checkpoint: %w", config.ErrInvalid, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// attestationNote says whether attestations are checked, for people.
func attestationNote(t *checkpoint.Trust) string {
	if t.Len() == 0 {
		return "attestations not checked: no --trusted-publisher"
	}
	return fmt.Sprintf("attestations and checkpoints checked against %d trusted publisher key(s)", t.Len())
}

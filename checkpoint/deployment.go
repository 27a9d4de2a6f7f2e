package checkpoint

import (
	"errors"
	"fmt"

	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"
)

// ErrNoOrigin is returned by ParseDeployment under a Trust without a
// deployment origin: a deployment checkpoint is checked against one.
var ErrNoOrigin = errors.New("no deployment origin to check the checkpoint against")

// EntryLeaf is the deployment log's leaf hash of an entry: the RFC 6962
// leaf hash of its bytes, SHA-256(0x00 || entry), which any C2SP
// tlog-tiles client assumes. An entry is a room checkpoint as stored.
func EntryLeaf(entry []byte) [32]byte {
	return [32]byte(rfc6962.DefaultHasher.HashLeaf(entry))
}

// ParseDeployment verifies a checkpoint of the deployment log under t and
// returns it with Room "": origin line t.Origin(), signed by a trusted key
// named by that origin (C2SP tlog-checkpoint: the key name matches the
// origin), the body in the form Sign writes. Other signature lines, such
// as witness cosignatures (C2SP tlog-cosignature), are left to the
// witness policy. Errors: ErrNoOrigin, or wrap ErrUntrustedPublisher or
// ErrBadCheckpoint.
func ParseDeployment(signed []byte, t *Trust) (*Checkpoint, error) {
	origin := t.Origin()
	if origin == "" {
		return nil, ErrNoOrigin
	}
	if err := refuseBOM(signed); err != nil {
		return nil, err
	}
	vs := &namedVerifiers{t: t, fits: func(name string) bool { return name == origin }}
	n, err := note.Open(signed, vs)
	if err != nil {
		var unverified *note.UnverifiedNoteError
		if errors.As(err, &unverified) {
			return nil, fmt.Errorf("%w: deployment checkpoint signed only by %s", ErrUntrustedPublisher, sigNames(unverified.Note.UnverifiedSigs))
		}
		return nil, fmt.Errorf("%w: %w", ErrBadCheckpoint, err)
	}
	c, err := parseBody(n.Text)
	if err != nil {
		return nil, err
	}
	if c.Origin != origin {
		return nil, fmt.Errorf("%w: origin %q is not the deployment's %q", ErrBadCheckpoint, clip(c.Origin), clip(origin))
	}
	c.Room = ""
	c.Signer = vs.signer[n.Sigs[0].Hash]
	c.Note = signed
	return c, nil
}

// OriginVerifiers are t's trusted keys named by its deployment origin: the
// keys that sign the deployment log's checkpoints (C2SP signed-note), for
// a witness policy's check of the log's signature. With no origin they
// verify nothing.
func (t *Trust) OriginVerifiers() note.Verifiers {
	origin := t.Origin()
	return &namedVerifiers{t: t, fits: func(name string) bool { return origin != "" && name == origin }}
}

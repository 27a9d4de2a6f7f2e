package reader

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/validate"
)

// ErrNoSuchMessage is returned by Prove when the room holds no verified
// message with the entry hash or ref asked for.
var ErrNoSuchMessage = errors.New("no such verified message")

// ErrNotCovered is returned by Prove when the message is admitted but no
// verified checkpoint covers it yet.
var ErrNotCovered = errors.New("not covered by a verified checkpoint")

// ProveOptions configures Prove; Room, Trust, Validator and one of Entry
// or Ref are required.
type ProveOptions struct {
	Stream   string        // default DefaultStream
	Subjects room.Subjects // default prefix "rooms"
	Room     string
	// Entry is the entry_hash of a journal entry; Ref the execution/ref
	// of an execution record. Exactly one is set.
	Entry string
	Ref   string
	// Validator verifies every message of the room; Trust holds the
	// publisher keys whose attestations and checkpoints count.
	Validator *validate.Validator
	Trust     *checkpoint.Trust
	// Read chooses how the room is read (see AuditOptions.Read).
	Read ReadMode
}

// Prove reads the room as a trusting Audit does and returns the RFC 6962
// inclusion proof of the message (the first verified one, in stream order,
// with that entry hash or ref) against the room's latest verified
// checkpoint (subscriber prove). (*checkpoint.Proof).Verify
// checks it offline. Errors: ErrNoSuchMessage, ErrNotCovered, the read's.
func Prove(ctx context.Context, js jetstream.JetStream, o ProveOptions) (*checkpoint.Proof, error) {
	if o.Room == "" || (o.Entry == "") == (o.Ref == "") || o.Trust.Len() == 0 {
		return nil, fmt.Errorf("%w: prove needs a room, trusted publishers and one of an entry hash or a ref", ErrReader)
	}
	var found *Event
	_, r, err := audit(ctx, js, AuditOptions{Stream: o.Stream, Subjects: o.Subjects, Rooms: []string{o.Room}, Validator: o.Validator, Trust: o.Trust, Read: o.Read,
		OnEvent: func(ev *Event) {
			if found == nil && ev.leafOK && (o.Entry != "" && ev.EntryHash == o.Entry || o.Ref != "" && ev.Ref == o.Ref) {
				c := *ev
				c.Entry, c.Record = nil, nil
				found = &c
			}
		}}, auditTuning{fullTrees: true})
	if err != nil {
		return nil, err
	}
	what := "entry_hash " + o.Entry
	if o.Ref != "" {
		what = "execution/ref " + o.Ref
	}
	if found == nil {
		return nil, fmt.Errorf("%w: %s in %s", ErrNoSuchMessage, what, o.Room)
	}
	l := r.ledgers[o.Room]
	if l.refused != "" {
		return nil, fmt.Errorf("%w: %s: %s", ErrNotCovered, o.Room, l.refused)
	}
	latest, _ := l.Latest()
	if latest == nil || found.leaf >= latest.Size {
		size := uint64(0)
		if latest != nil {
			size = latest.Size
		}
		return nil, fmt.Errorf("%w: %s (stream seq %d) is leaf %d of %s; the latest verified checkpoint covers %d", ErrNotCovered, what, found.Seq, found.leaf, o.Room, size)
	}
	path, err := l.InclusionProof(found.leaf, latest.Size)
	if err != nil {
		return nil, err
	}
	return &checkpoint.Proof{Room: o.Room, Subject: found.Subject, StreamSeq: found.Seq, ContentHash: found.content,
		LeafIndex: found.leaf, LeafHash: checkpoint.LeafHash(o.Room, found.Subject, found.content), TreeSize: latest.Size,
		Path: path, Checkpoint: string(latest.Note)}, nil
}

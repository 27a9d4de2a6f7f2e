package reader

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/validate"
)

// ErrNoSuchMessage is returned by Prove when the room holds no verified
// message with the entry hash or ref asked for.
var ErrNoSuchMessage = errors.New("no such verified message")

// SetAsideError is the error of Prove and Export for a message asked for
// that the room holds but sets aside, when no verified message has its
// entry hash or ref: it names the first such message, in stream order,
// with its code and reason, where ErrNoSuchMessage would say the message
// is not there. errors.Is(err, ErrNoSuchMessage) holds: the room holds no
// verified message of it.
type SetAsideError struct {
	What  string   // "entry_hash H" or "execution/ref R"
	Aside SetAside // the message set aside
}

// Error says "execution/ref R in ROOM is set aside at stream seq N
// (SUBJECT): CODE: REASON", and for untrusted_host how to trust the host
// (subscriber's --trusted-host).
func (e *SetAsideError) Error() string {
	msg := fmt.Sprintf("%s in %s is set aside at stream seq %d (%s): %s: %s", e.What, e.Aside.RoomID, e.Aside.Seq, e.Aside.Subject, e.Aside.Code, e.Aside.Reason)
	if e.Aside.Code == events.UntrustedHost {
		host := "NODE_ID"
		for _, p := range e.Aside.Problems {
			if p.Code == events.UntrustedHost && p.Actual != "" {
				host = p.Actual
				break
			}
		}
		msg += " (pass --trusted-host " + host + " if you trust that host)"
	}
	return msg
}

// Is makes a SetAsideError an ErrNoSuchMessage.
func (e *SetAsideError) Is(target error) bool { return target == ErrNoSuchMessage }

// asideOf keeps, per entry hash and ref asked for, the first message of
// roomID set aside that claims it (its entry_hash, or its execution/ref,
// claimed or computed).
type asideOf struct {
	roomID        string
	entries, refs map[string]*SetAside
}

func newAsideOf(roomID string, entries, refs []string) *asideOf {
	f := &asideOf{roomID: roomID, entries: map[string]*SetAside{}, refs: map[string]*SetAside{}}
	for _, h := range entries {
		f.entries[h] = nil
	}
	for _, r := range refs {
		f.refs[r] = nil
	}
	return f
}

// see is an auditTuning.aside.
func (f *asideOf) see(x *prepared, a *SetAside) {
	if a.RoomID != f.roomID {
		return
	}
	keep := func(m map[string]*SetAside, key string) {
		if old, ok := m[key]; ok && old == nil {
			c := *a
			m[key] = &c
		}
	}
	switch {
	case x.e != nil:
		keep(f.entries, x.e.EntryHash())
	case x.rec != nil:
		keep(f.refs, x.rec.ExecutionRef())
		keep(f.refs, x.rec.ComputedRef())
	}
}

// missing is the error for an entry hash (entry) or ref not found
// verified: a *SetAsideError when a message claiming it was set aside,
// else ErrNoSuchMessage.
func (f *asideOf) missing(entry, ref string) error {
	what, a := "entry_hash "+entry, f.entries[entry]
	if ref != "" {
		what, a = "execution/ref "+ref, f.refs[ref]
	}
	if a != nil {
		return &SetAsideError{What: what, Aside: *a}
	}
	return fmt.Errorf("%w: %s in %s", ErrNoSuchMessage, what, f.roomID)
}

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
// checks it offline. Errors: ErrNoSuchMessage (a *SetAsideError when the
// room holds the message but sets it aside), ErrNotCovered, the read's.
func Prove(ctx context.Context, js jetstream.JetStream, o ProveOptions) (*checkpoint.Proof, error) {
	if o.Room == "" || (o.Entry == "") == (o.Ref == "") || o.Trust.Len() == 0 {
		return nil, fmt.Errorf("%w: prove needs a room, trusted publishers and one of an entry hash or a ref", ErrReader)
	}
	var found *Event
	var entries, refs []string
	if o.Entry != "" {
		entries = []string{o.Entry}
	} else {
		refs = []string{o.Ref}
	}
	asides := newAsideOf(o.Room, entries, refs)
	_, r, err := audit(ctx, js, AuditOptions{Stream: o.Stream, Subjects: o.Subjects, Rooms: []string{o.Room}, Validator: o.Validator, Trust: o.Trust, Read: o.Read,
		OnEvent: func(ev *Event) {
			if found == nil && ev.leafOK && (o.Entry != "" && ev.EntryHash == o.Entry || o.Ref != "" && ev.Ref == o.Ref) {
				c := *ev
				c.Entry, c.Record = nil, nil
				found = &c
			}
		}}, auditTuning{fullTrees: true, aside: asides.see})
	if err != nil {
		return nil, err
	}
	what := "entry_hash " + o.Entry
	if o.Ref != "" {
		what = "execution/ref " + o.Ref
	}
	if found == nil {
		return nil, asides.missing(o.Entry, o.Ref)
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

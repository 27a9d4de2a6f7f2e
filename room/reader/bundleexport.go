package reader

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/validate"
)

// ErrNotWitnessed is wrapped by Export's errors for a message asked for
// that no witnessed deployment checkpoint covers yet (*NotWitnessedError
// says why).
var ErrNotWitnessed = errors.New("not witnessed yet")

// NotWitnessedError is Export's error for one message it found but cannot
// give witnessed evidence of yet: which (What, its stream seq and leaf
// index) and why, in words (no room checkpoint covers it, the room
// checkpoint that does is not in the deployment log, or the deployment
// log's latest checkpoint lacks the quorum of cosignatures).
type NotWitnessedError struct {
	Room   string
	What   string // "entry_hash <h>" or "execution/ref <r>"
	Seq    uint64
	Leaf   uint64
	Reason string
}

func (e *NotWitnessedError) Error() string {
	return fmt.Sprintf("%s in %s (stream seq %d, leaf %d) is %v: %s", e.What, e.Room, e.Seq, e.Leaf, ErrNotWitnessed, e.Reason)
}

func (e *NotWitnessedError) Unwrap() error { return ErrNotWitnessed }

// ExportOptions configures Export. Room, Validator, Trust (with the
// deployment origin, checkpoint.Trust.WithOrigin) and Witnessing are
// required, and at least one of Entries, Refs, Heads or All.
type ExportOptions struct {
	Stream   string        // default DefaultStream
	Subjects room.Subjects // default prefix "rooms"
	Room     string
	// The messages asked for: journal entries by entry_hash, execution
	// records by execution/ref (the first verified one of each, in
	// stream order), the head of every chain of the room, or every
	// admitted message of the room. A message asked for twice is
	// exported once.
	Entries []string
	Refs    []string
	Heads   bool
	All     bool

	Validator  *validate.Validator
	Trust      *checkpoint.Trust
	Witnessing *Witnessing
	Read       ReadMode
}

// Export reads the room and the deployment log as Audit with Witnessing
// does (everything verified, every tree kept whole) and returns, in stream
// order, the evidence bundle of each message asked for that a witnessed
// deployment checkpoint covers (docs/witnesses.md, "Portable evidence"):
// its room proof is against the largest checkpoint of the room that the
// latest witnessed deployment checkpoint includes, its deployment proof
// against that deployment checkpoint, cosignatures included.
//
// The error joins one error per message asked for without a bundle:
// ErrNoSuchMessage (an entry hash or ref the room holds no verified
// message of; a *SetAsideError when it holds one set aside), *NotWitnessedError (ErrNotWitnessed); the bundles returned
// are those of the others. A read error or bad options return no bundle.
// The stored bytes of every message asked for are held in memory.
func Export(ctx context.Context, js jetstream.JetStream, o ExportOptions) ([]*Evidence, error) {
	if o.Room == "" || o.Trust.Len() == 0 || o.Trust.Origin() == "" || o.Witnessing == nil || o.Witnessing.Policy == nil ||
		(len(o.Entries) == 0 && len(o.Refs) == 0 && !o.Heads && !o.All) {
		return nil, fmt.Errorf("%w: export needs a room, trusted publishers, the deployment origin, a witness policy and the messages to export", ErrReader)
	}
	wantEntry := map[string]bool{}
	for _, h := range o.Entries {
		wantEntry[h] = true
	}
	wantRef := map[string]bool{}
	for _, r := range o.Refs {
		wantRef[r] = true
	}
	type pick struct {
		ev    *Event
		asked bool // asked for by hash, ref or All, not only as a head
	}
	var picked []*pick                   // stream order
	heads := map[events.ChainKey]*pick{} // each chain's head so far
	asides := newAsideOf(o.Room, o.Entries, o.Refs)
	_, r, err := audit(ctx, js, AuditOptions{Stream: o.Stream, Subjects: o.Subjects, Rooms: []string{o.Room}, Validator: o.Validator,
		Trust: o.Trust, Witnessing: o.Witnessing, Read: o.Read,
		OnEvent: func(ev *Event) {
			if !ev.leafOK || ev.RoomID != o.Room {
				return
			}
			asked := o.All || wantEntry[ev.EntryHash] || wantRef[ev.Ref]
			delete(wantEntry, ev.EntryHash) // the first one only
			delete(wantRef, ev.Ref)
			head := o.Heads && ev.Chain != nil
			if !asked && !head {
				return
			}
			c := *ev
			c.Entry, c.Record = nil, nil
			c.data = bytes.Clone(ev.data)
			p := &pick{ev: &c, asked: asked}
			if head {
				if old := heads[*ev.Chain]; old != nil && !old.asked {
					old.ev = nil // no longer the head, and not asked for otherwise
				}
				heads[*ev.Chain] = p
			}
			picked = append(picked, p)
		}}, auditTuning{fullTrees: true, aside: asides.see})
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, h := range o.Entries {
		if wantEntry[h] { // still wanted: not found
			errs = append(errs, asides.missing(h, ""))
			delete(wantEntry, h)
		}
	}
	for _, ref := range o.Refs {
		if wantRef[ref] {
			errs = append(errs, asides.missing("", ref))
			delete(wantRef, ref)
		}
	}
	var out []*Evidence
	for _, p := range picked {
		if p.ev == nil {
			continue
		}
		e, err := r.evidenceOf(p.ev)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, e)
	}
	return out, errors.Join(errs...)
}

// what names ev for messages.
func (ev *Event) what() string {
	if ev.Ref != "" {
		return "execution/ref " + ev.Ref
	}
	return "entry_hash " + ev.EntryHash
}

// evidenceOf builds ev's bundle from what the audit read, or says why
// it cannot.
func (r *Reader) evidenceOf(ev *Event) (*Evidence, error) {
	notYet := func(format string, args ...any) (*Evidence, error) {
		return nil, &NotWitnessedError{Room: ev.RoomID, What: ev.what(), Seq: ev.Seq, Leaf: ev.leaf, Reason: fmt.Sprintf(format, args...)}
	}
	dr, l := r.deployment, r.ledgers[ev.RoomID]
	switch {
	case dr == nil:
		return notYet("the deployment log was not read")
	case dr.missing != "":
		return notYet("%s", dr.missing)
	case l == nil:
		return notYet("the room has no checkpoint")
	case l.refused != "":
		return notYet("the room is refused: %s", l.refused)
	}
	// The largest room checkpoint within the witnessed size that covers
	// the leaf; else the first one in the log that does, to say why.
	var best, first *roomEntry
	for i, re := range dr.rooms[ev.RoomID] {
		if re.size <= ev.leaf {
			continue
		}
		if first == nil {
			first = &dr.rooms[ev.RoomID][i]
		}
		if dr.witnessed != nil && re.index < dr.witnessed.Size && (best == nil || re.size >= best.size) {
			best = &dr.rooms[ev.RoomID][i]
		}
	}
	if best == nil {
		latest, _ := l.Latest()
		switch {
		case latest == nil || latest.Size <= ev.leaf:
			size := uint64(0)
			if latest != nil {
				size = latest.Size
			}
			return notYet("no verified checkpoint of the room covers it yet (the latest covers %d leaves)", size)
		case first == nil:
			return notYet("the room's checkpoint of size %d that covers it is not in the deployment log yet (the log has %d entries)", latest.Size, dr.tree.Size())
		}
		return notYet("the deployment log's entry %d (the room's checkpoint of size %d) is not covered by a witnessed checkpoint: %s", first.index, first.size, dr.quorumState())
	}
	roomPath, err := l.InclusionProof(ev.leaf, best.size)
	if err != nil {
		return nil, err
	}
	dlPath, err := dr.tree.InclusionProof(best.index, dr.witnessed.Size)
	if err != nil {
		return nil, err
	}
	ckpt := dr.entries[best.index].data
	return &Evidence{Room: ev.RoomID, Subject: ev.Subject, StreamSeq: ev.Seq, Position: ev.position, Attestation: ev.attestation, Data: ev.data,
		RoomProof: &checkpoint.TlogProof{Extra: checkpoint.LeafData(ev.RoomID, ev.Subject, ev.content), Index: ev.leaf, Path: roomPath,
			Checkpoint: slices.Clone(ckpt)},
		DeploymentProof: &checkpoint.TlogProof{Index: best.index, Path: dlPath, Checkpoint: slices.Clone(dr.witnessed.Note)}}, nil
}

// quorumState says where the deployment log's checkpoints stand against
// the quorum, for a message that is not witnessed yet.
func (dr *deploymentView) quorumState() string {
	f := dr.facts
	switch {
	case f.Latest == nil:
		return "the deployment log has no checkpoint that covers its entries yet"
	case f.Witnessed != nil && f.Witnessed.Size >= f.Latest.Size:
		return fmt.Sprintf("the deployment log's latest checkpoint (size %d) is witnessed but does not cover it yet", f.Latest.Size)
	}
	have := uint64(0)
	if f.Witnessed != nil {
		have = f.Witnessed.Size
	}
	cosigned := "no valid cosignature"
	if n := len(f.Latest.Cosigners); n > 0 {
		cosigned = fmt.Sprintf("%d valid cosignature(s) (%s)", n, strings.Join(f.Latest.Cosigners, ", "))
	}
	return fmt.Sprintf("the deployment log's latest checkpoint (size %d) has %s, short of quorum %s (the latest witnessed one has size %d)",
		f.Latest.Size, cosigned, f.Quorum, have)
}

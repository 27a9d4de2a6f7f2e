package checkpoint

import (
	"crypto/ed25519"
	"fmt"
	"slices"
)

// BatchVerdict is a BatchCollector's decision on one message: Err nil means
// the message is attested by Signer (a trusted node id); otherwise Err
// wraps ErrNoAttestation, ErrBadAttestation, ErrUntrustedPublisher or
// ErrIncompleteBatch and Signer is empty.
type BatchVerdict struct {
	ID     uint64
	Signer string
	Err    error
}

// BatchCollector verifies the attestations of messages read in stream
// order, one signature per atomic batch (docs/checkpoints.md): it
// reassembles batches by the readers' rule (BatchRun), holds the messages
// of the batch still open, and verifies each batch once, when its last
// message arrives. It is for the gate and the checkpointer, which verify
// every batch as it becomes whole (the readers hold their messages
// themselves, verify later and follow the same BatchRun). It is not safe
// for concurrent use.
//
// IDs must be the messages' stream sequences, growing from call to call.
// Messages the caller does not pass may lie between them (other subjects);
// Pass tells of one that is no member (a checkpoint, say), which ends the
// open batch at once instead of at the next call.
type BatchCollector struct {
	trust   *Trust
	run     BatchRun
	members []member  // the open batch's, in index order
	entries []entryOf // what Vouch left to work positions out from
	digests [][32]byte
	msg     []byte         // batchMessage's buffer
	out     []BatchVerdict // the verdicts a call returns
}

// maxPresize bounds the room made for a batch's messages when it opens:
// its size is the header's word, so a forged one gets no more.
const maxPresize = 1024

type member struct {
	id      uint64
	st      Statement
	vouched bool
	// sig: with vouched, the signature of the batch the caller's gate
	// made the message's header for.
	sig   [64]byte
	entry int32 // with vouched and st.Position "": 1 + its index in entries; 0: none
}

// entryOf is a vouched journal message's entry and HeaderOwner, whose
// position is worked out only if its batch's signature is checked.
type entryOf struct {
	entry []byte
	owner string
}

// NewBatchCollector returns a collector that admits attestations by the
// keys of t (a nil or empty t admits none).
func NewBatchCollector(t *Trust) *BatchCollector {
	return &BatchCollector{trust: t}
}

// Add takes the next message in stream order: its id, AttestationHeader
// value and statement. It returns the verdicts it could reach, in stream
// order, in a slice valid until the next call: those of the open batch's messages when this message ends it
// incomplete (ErrIncompleteBatch); then this message's at once when its
// header is malformed, empty or untrusted, its statement holds a newline,
// it claims a place in a batch without following the place before
// (ErrIncompleteBatch), or it is a batch of one; or, when it completes its
// batch, one per message of the batch (all refused with ErrBadAttestation
// if the signature does not verify). Otherwise the message is held and Add
// returns nothing for it yet.
func (c *BatchCollector) Add(id uint64, header string, st Statement) []BatchVerdict {
	return c.add(id, header, member{id: id, st: st}, entryOf{})
}

// Vouch is Add for a message whose attestation header the caller's own
// gate made for exactly this message's subject and content, in a batch
// whose signature is sig (the checkpointer's own appends). Its batch is
// reassembled as any other; once whole, a batch whose every message was
// vouched for with the signature its last message carries is admitted
// without that signature being checked, and any other is verified: in the
// compact form the unsigned headers of two batches of one key and size
// are alike, so messages of two announced batches stored as one are
// verified, and refused. st.Position may be left "" with entry the
// message's journal entry and owner its HeaderOwner: the position
// (EntryPosition) is then computed only if the signature has to be
// checked.
func (c *BatchCollector) Vouch(id uint64, header string, st Statement, entry []byte, owner string, sig [64]byte) []BatchVerdict {
	return c.add(id, header, member{id: id, st: st, vouched: true, sig: sig}, entryOf{entry, owner})
}

// Pass tells that the message at id, in stream order, is no attested
// message (a checkpoint, a message that is no entry): it ends the open
// batch, whose verdicts it returns (ErrIncompleteBatch) as Add does.
func (c *BatchCollector) Pass(id uint64) []BatchVerdict {
	return c.ended(c.run.Next(id, "", Attestation{}, false).Ended, c.out[:0])
}

func (c *BatchCollector) add(id uint64, header string, m member, e entryOf) []BatchVerdict {
	a, err := ParseAttestation(header)
	var pub ed25519.PublicKey
	if err == nil {
		var ok bool
		if pub, ok = c.trust.key(a.Signer); !ok {
			err = fmt.Errorf("%w: attestation by %s", ErrUntrustedPublisher, clip(a.Signer))
		} else if m.st.hasNewline() {
			err = fmt.Errorf("%w: room, subject or position holds a newline", ErrBadAttestation)
		}
	}
	s := c.run.Next(id, m.st.Room, a, err == nil)
	done := c.ended(s.Ended, c.out[:0])
	switch s.Place {
	case NotMember:
		return c.keep(append(done, BatchVerdict{ID: id, Err: err}))
	case Stray:
		return c.keep(append(done, BatchVerdict{ID: id, Err: s.Err(a)}))
	}
	if m.vouched && m.st.Position == "" && e.entry != nil {
		c.entries = append(c.entries, e)
		m.entry = int32(len(c.entries))
	}
	if s.Place == Alone {
		one := [1]member{m}
		done = c.verify(done, pub, a, one[:])
		c.reset()
		return c.keep(done)
	}
	if s.Place == Opens && cap(c.members) < a.Count {
		c.members = make([]member, 0, min(a.Count, maxPresize))
	}
	c.members = append(c.members, m)
	if s.Place != Completes {
		return c.keep(done)
	}
	done = c.verify(done, pub, a, c.members)
	c.reset()
	return c.keep(done)
}

// keep makes out the buffer of the next call's verdicts, and returns it.
func (c *BatchCollector) keep(out []BatchVerdict) []BatchVerdict {
	c.out = out
	return out
}

// ended appends the refusals of the messages of b, the batch a message
// ended, to out.
func (c *BatchCollector) ended(b BrokenBatch, out []BatchVerdict) []BatchVerdict {
	if b.Count() == 0 {
		return out
	}
	for i, m := range c.members {
		a := b.A
		a.Index = i
		out = append(out, BatchVerdict{ID: m.id, Err: b.Err(a)})
	}
	c.reset()
	return c.keep(out)
}

func (c *BatchCollector) reset() {
	clear(c.members)
	clear(c.entries)
	c.members, c.entries = c.members[:0], c.entries[:0]
}

// Flush ends the read: the messages of the batch still open are refused
// (ErrIncompleteBatch), in stream order.
func (c *BatchCollector) Flush() []BatchVerdict {
	b, _ := c.run.Break("the read ended there")
	return c.ended(b, c.out[:0])
}

// Pending is the number of messages held, waiting for their batch.
func (c *BatchCollector) Pending() int { return len(c.members) }

// verify decides a whole batch whose members (indices 0..n-1) are given
// and whose last message's attestation is a, and appends their verdicts
// to out: admitted without a signature check when every one was vouched
// for with a's signature, else by its signature over their statements.
func (c *BatchCollector) verify(out []BatchVerdict, pub ed25519.PublicKey, a Attestation, members []member) []BatchVerdict {
	var err error
	for _, m := range members {
		if !m.vouched || m.sig != a.Sig {
			err = c.check(pub, a, members)
			break
		}
	}
	signer := a.Signer
	if err != nil {
		signer = ""
	}
	out = slices.Grow(out, len(members))
	for _, m := range members {
		out = append(out, BatchVerdict{ID: m.id, Signer: signer, Err: err})
	}
	return out
}

// check verifies the signature of a whole batch over its members'
// statements.
func (c *BatchCollector) check(pub ed25519.PublicKey, a Attestation, members []member) error {
	c.digests = slices.Grow(c.digests[:0], len(members))
	var first Statement
	for i := range members {
		st := members[i].st
		if st.Position == "" {
			if members[i].entry == 0 {
				return fmt.Errorf("%w: the position of message %d of a batch of %d by %s is unknown", ErrBadAttestation, i, a.Count, a.Signer)
			}
			e := c.entries[members[i].entry-1]
			pos, err := EntryPosition(e.entry, e.owner)
			if err != nil {
				return err
			}
			st.Position = pos
		}
		if st.hasNewline() {
			return fmt.Errorf("%w: room, subject or position of message %d holds a newline", ErrBadAttestation, i)
		}
		if i == 0 {
			first = st
		}
		c.digests = append(c.digests, st.Digest())
	}
	var ok bool
	if c.msg, ok = verifyDigests(pub, a.Sig, c.digests, c.msg); !ok {
		return badSignature(a.Signer, first, a.Count)
	}
	return nil
}

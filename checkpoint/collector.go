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
// order, one signature per atomic batch (docs/checkpoints.md): it holds each message of
// a batch of more than one until every index of the batch has been seen,
// then verifies the batch once. It is for readers and the checkpointer; it
// is not safe for concurrent use.
//
// IDs must be the messages' stream sequences, in stream order. An atomic
// batch is stored whole, in order and contiguously (ADR-50), so each member
// of a batch must be the one after the previous at the next id (else it is
// refused at once: a replay out of order or interleaved, as the readers
// refuse it), and a batch whose first message seen has id f is complete
// before any message with id >= f+n arrives; a group still incomplete then
// is refused, so a forged header cannot hold a reader's messages back for
// long.
type BatchCollector struct {
	trust   *Trust
	groups  map[batchKey]*batchGroup
	order   []*batchGroup // open groups by first id (may hold closed ones)
	pending int
}

// batchKey names a batch: signer, signature and size.
type batchKey struct {
	signer string
	sig    [64]byte
	count  int
}

type batchGroup struct {
	key     batchKey
	first   uint64
	members []member // arrival order
	inOrder bool     // members[i].index == i for all i
	taken   map[int]bool
	closed  bool
}

type member struct {
	id    uint64
	index int
	st    Statement
}

// NewBatchCollector returns a collector that admits attestations by the
// keys of t (a nil or empty t admits none).
func NewBatchCollector(t *Trust) *BatchCollector {
	return &BatchCollector{trust: t, groups: make(map[batchKey]*batchGroup)}
}

// Add takes the next message in stream order: its id, AttestationHeader
// value and statement. It returns the verdicts it could reach: at once for
// a malformed or untrusted header, for a batch of one, and for a message
// whose index its batch already has (the first message seen per index
// wins; a later one is refused as a duplicate, ErrBadAttestation); one per
// member, in arrival order, when the message completes its batch (all of
// them refused with ErrBadAttestation if the signature does not verify);
// and for the members of batches that can no longer complete because id is
// past their window (ErrIncompleteBatch), oldest first. Otherwise the
// message is held and Add returns nothing for it yet.
func (c *BatchCollector) Add(id uint64, header string, st Statement) (done []BatchVerdict) {
	done = c.expire(id, done)
	a, err := ParseAttestation(header)
	if err != nil {
		return append(done, BatchVerdict{ID: id, Err: err})
	}
	pub, ok := c.trust.key(a.Signer)
	if !ok {
		return append(done, BatchVerdict{ID: id, Err: fmt.Errorf("%w: attestation by %s", ErrUntrustedPublisher, clip(a.Signer))})
	}
	if st.hasNewline() {
		return append(done, BatchVerdict{ID: id, Err: fmt.Errorf("%w: room, subject or position holds a newline", ErrBadAttestation)})
	}
	m := member{id: id, index: a.Index, st: st}
	if a.Count == 1 {
		return append(done, verify(pub, a, []member{m})...)
	}
	key := batchKey{signer: a.Signer, sig: a.Sig, count: a.Count}
	g := c.groups[key]
	if g == nil {
		g = &batchGroup{key: key, first: id, inOrder: true}
		c.groups[key] = g
		c.order = append(c.order, g)
	}
	if g.has(a.Index) {
		return append(done, BatchVerdict{ID: id, Err: fmt.Errorf("%w: a second message %d/%d of one batch by %s", ErrBadAttestation, a.Index, a.Count, a.Signer)})
	}
	if n := len(g.members); n > 0 {
		// An atomic batch is stored whole and in order: each member is
		// the one after the previous at the next id. The readers apply
		// the same rule, so a batch's messages replayed out of order or
		// interleaved with others are refused by both, not admitted here
		// and refused there (which would make every later checkpoint of
		// the room unverifiable for them).
		if last := g.members[n-1]; id != last.id+1 || a.Index != last.index+1 {
			return append(done, BatchVerdict{ID: id, Err: fmt.Errorf("%w: message %d/%d of a batch by %s at id %d does not follow message %d at id %d", ErrBadAttestation, a.Index, a.Count, a.Signer, id, last.index, last.id)})
		}
	}
	g.add(m)
	c.pending++
	if len(g.members) < a.Count {
		return done
	}
	c.close(g)
	return append(done, verify(pub, a, g.members)...)
}

// Flush ends the read: every message still held is refused
// (ErrIncompleteBatch, "incomplete batch: k of n"), in id order.
func (c *BatchCollector) Flush() []BatchVerdict {
	var out []BatchVerdict
	for _, g := range c.order {
		if !g.closed {
			out = g.refuse(out)
			g.closed = true
		}
	}
	clear(c.groups)
	c.order = c.order[:0]
	c.pending = 0
	slices.SortStableFunc(out, func(a, b BatchVerdict) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}

// Pending is the number of messages held, waiting for their batches.
func (c *BatchCollector) Pending() int { return c.pending }

// expire refuses the groups whose window ends before id.
func (c *BatchCollector) expire(id uint64, out []BatchVerdict) []BatchVerdict {
	for len(c.order) > 0 {
		g := c.order[0]
		if !g.closed {
			if id < g.first || id-g.first < uint64(g.key.count) {
				break
			}
			out = g.refuse(out)
			c.close(g)
		}
		c.order[0] = nil
		c.order = c.order[1:]
	}
	if len(c.order) > 2*len(c.groups)+64 { // ids that do not grow: drop closed groups
		c.order = slices.DeleteFunc(c.order, func(g *batchGroup) bool { return g.closed })
	}
	return out
}

func (c *BatchCollector) close(g *batchGroup) {
	g.closed = true
	c.pending -= len(g.members)
	delete(c.groups, g.key)
}

func (g *batchGroup) has(index int) bool {
	if g.inOrder {
		return index < len(g.members)
	}
	return g.taken[index]
}

func (g *batchGroup) add(m member) {
	if g.inOrder && m.index != len(g.members) {
		g.inOrder = false
		g.taken = make(map[int]bool, len(g.members)+1)
		for _, o := range g.members {
			g.taken[o.index] = true
		}
	}
	if !g.inOrder {
		g.taken[m.index] = true
	}
	g.members = append(g.members, m)
}

func (g *batchGroup) refuse(out []BatchVerdict) []BatchVerdict {
	for _, m := range g.members {
		out = append(out, BatchVerdict{ID: m.id, Err: fmt.Errorf("%w: %d of %d messages of a batch by %s", ErrIncompleteBatch, len(g.members), g.key.count, g.key.signer)})
	}
	return out
}

// verify checks the signature of a complete batch whose members (all
// indices 0..n-1, in arrival order) are given and returns their verdicts.
func verify(pub ed25519.PublicKey, a Attestation, members []member) []BatchVerdict {
	digests := make([][32]byte, a.Count)
	for _, m := range members {
		digests[m.index] = m.st.Digest()
	}
	var err error
	if !ed25519.Verify(pub, batchMessage(digests), a.Sig[:]) {
		err = fmt.Errorf("%w: signature by %s does not verify for its batch of %d", ErrBadAttestation, a.Signer, a.Count)
	}
	out := make([]BatchVerdict, len(members))
	for i, m := range members {
		out[i] = BatchVerdict{ID: m.id, Err: err}
		if err == nil {
			out[i].Signer = a.Signer
		}
	}
	return out
}

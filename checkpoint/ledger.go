package checkpoint

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
)

// ErrCheckpointMismatch is wrapped by (*Ledger).Check and CheckOther when a
// checkpoint does not describe the room's tree: it covers more leaves than
// the tree has, fewer than the previous checkpoint, has another root, or is
// not consistent with the previous checkpoint.
var ErrCheckpointMismatch = errors.New("checkpoint does not match the room")

// ErrRolledBack is wrapped by (*Ledger).Check, RolledBack and CheckNewest
// when the room does not extend the checkpoint an earlier read verified
// (Keep): a stream restored from an older copy, or a fork.
var ErrRolledBack = errors.New("rolled back or forked")

// ledgerError is a Ledger's refusal: text says why (for the readers'
// reports and the checkpointer's log), kind is ErrCheckpointMismatch or
// ErrRolledBack, cause what a proof check or the tree said, if anything.
type ledgerError struct {
	kind  error
	text  string
	cause error
}

func (e *ledgerError) Error() string { return e.text }

func (e *ledgerError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.kind}
	}
	return []error{e.kind, e.cause}
}

func mismatch(cause error, format string, args ...any) error {
	return &ledgerError{kind: ErrCheckpointMismatch, text: fmt.Sprintf(format, args...), cause: cause}
}

// ledgerTree is what a Ledger needs of a room's RFC 6962 tree: *Tree or
// *LeanTree.
type ledgerTree interface {
	Size() uint64
	Append(leaf [32]byte)
	RootAt(size uint64) ([32]byte, error)
	Truncate(size uint64) error
	ConsistencyProof(size1, size2 uint64) ([][32]byte, error)
}

// Ledger is one room's trust state, the one implementation of the
// checkpoint rules of docs/checkpoints.md ("Checkpoints", "The readers:
// `--trusted-publisher`, `--state-dir`") that the checkpointer and the
// readers share: the RFC 6962 tree of the room's admitted messages (leaf
// hashes, LeafHash, in stream order), the latest checkpoint that matched
// it, and, for a reader with a state directory, the checkpoint an earlier
// read verified (Keep).
//
// A checkpoint is checked against the tree as read up to it, in stream
// order (Check): its size is no smaller than the latest's and no larger
// than the tree, it is consistent with the latest (an RFC 6962 consistency
// proof built from the tree, RFC 6962 section 2.1.2, verified) and its root
// is the tree's at its size, and a room that reaches the kept checkpoint's
// size extends it. Accept then makes it the latest; a lean ledger folds the
// leaves it covers into a compact range (LeanTree.Advance), as later checks
// need no root below its size. The checkpoint's signature and origin are
// Parse's, before.
//
// A Ledger is not safe for concurrent use.
type Ledger struct {
	tree      ledgerTree
	full      *Tree // tree, when it keeps every node
	latest    *Checkpoint
	latestSeq uint64
	kept      *Checkpoint
	keptOK    bool
}

// NewLedger returns an empty ledger on a LeanTree: O(log n) hashes plus 32
// bytes per leaf after the latest checkpoint (Audit, Follow, the
// checkpointer).
func NewLedger() *Ledger { return &Ledger{tree: NewLeanTree()} }

// NewBoundedLedger returns an empty ledger on a LeanTree bounded by b
// (LeanTree.Bound): O(log n) hashes, at most about b.Window+b.Chunk leaves
// after the latest checkpoint in memory and a hash per chunk of the
// others, which go to a file; the same checks and verdicts as NewLedger's.
// Close removes the file. Errors: b.Chunk not a power of two.
func NewBoundedLedger(b LeafBounds) (*Ledger, error) {
	t := NewLeanTree()
	if err := t.Bound(b); err != nil {
		return nil, err
	}
	return &Ledger{tree: t}, nil
}

// Bound bounds a lean ledger's leaves from now on (LeanTree.Bound): one
// made by NewLedger or ResumeLedger keeps at most about b.Window+b.Chunk
// leaves after the latest checkpoint in memory, with the same checks and
// verdicts. Errors: a full ledger (NewFullLedger), a tree bounded
// already, or b.Chunk not a power of two.
func (l *Ledger) Bound(b LeafBounds) error {
	t, ok := l.tree.(*LeanTree)
	if !ok {
		return errors.New("checkpoint: a full ledger keeps every node: it cannot be bounded")
	}
	return t.Bound(b)
}

// LeafStats is what a bounded ledger's tree did with its leaves
// (LeanTree.LeafStats); zero for a full ledger.
func (l *Ledger) LeafStats() LeafStats {
	if t, ok := l.tree.(*LeanTree); ok {
		return t.LeafStats()
	}
	return LeafStats{}
}

// Close removes a bounded ledger's file of leaves (LeanTree.Close); the
// ledger must not be used after. Other ledgers need no Close.
func (l *Ledger) Close() error {
	if t, ok := l.tree.(*LeanTree); ok {
		return t.Close()
	}
	return nil
}

// NewFullLedger returns an empty ledger on a Tree, which keeps every node:
// roots and proofs at any size (Prove, checkpoints from elsewhere), about
// 64 bytes per leaf.
func NewFullLedger() *Ledger {
	t := NewTree()
	return &Ledger{tree: t, full: t}
}

// Size is the number of leaves: the room's admitted messages so far.
func (l *Ledger) Size() uint64 { return l.tree.Size() }

// Append adds the next admitted message's leaf hash and returns its index.
func (l *Ledger) Append(leaf [32]byte) uint64 {
	i := l.tree.Size()
	l.tree.Append(leaf)
	return i
}

// Truncate drops the leaves from size on (a reader that refuses leaves it
// took optimistically rebuilds from there). Leaves the latest checkpoint
// covers stay: errors wrap ErrTreeSize for a size below its size or above
// Size.
func (l *Ledger) Truncate(size uint64) error {
	if size < l.Covered() {
		return fmt.Errorf("%w: truncate to %d below the latest checkpoint's size %d", ErrTreeSize, size, l.Covered())
	}
	return l.tree.Truncate(size)
}

// RootAt is the root of the first size leaves; a lean ledger has it for
// sizes from Covered() on. Errors wrap ErrTreeSize.
func (l *Ledger) RootAt(size uint64) ([32]byte, error) { return l.tree.RootAt(size) }

// InclusionProof is the RFC 6962 audit path of leaf index at size leaves
// (Tree.InclusionProof); only a full ledger keeps what it needs. Errors
// wrap ErrTreeSize.
func (l *Ledger) InclusionProof(index, size uint64) ([][32]byte, error) {
	if l.full == nil {
		return nil, fmt.Errorf("%w: a lean ledger keeps no inclusion proofs", ErrTreeSize)
	}
	return l.full.InclusionProof(index, size)
}

// Latest is the latest accepted checkpoint (nil: none) and the stream seq
// it was read at.
func (l *Ledger) Latest() (*Checkpoint, uint64) { return l.latest, l.latestSeq }

// Covered is the latest accepted checkpoint's size, 0 without one.
func (l *Ledger) Covered() uint64 {
	if l.latest == nil {
		return 0
	}
	return l.latest.Size
}

// Keep sets the checkpoint of the room an earlier read verified (a
// reader's state directory): until a checkpoint at least as large is
// accepted, Check requires one that reaches its size to be consistent with
// it, and RolledBack reports the room. Call it before any Check.
func (l *Ledger) Keep(c *Checkpoint) { l.kept, l.keptOK = c, false }

// Kept is the checkpoint Keep set (nil: none) and whether an accepted
// checkpoint at least as large was found consistent with it.
func (l *Ledger) Kept() (c *Checkpoint, extended bool) { return l.kept, l.keptOK }

// Check returns why c, read in stream order after the leaves appended so
// far, does not describe the room, or nil. In order:
//
//   - c.Size is no smaller than the latest checkpoint's (a room's tree
//     only grows) and no larger than Size (it cannot cover messages not
//     yet read);
//   - c.Root is the tree's root at c.Size, and c is consistent with the
//     latest checkpoint: the RFC 6962 consistency proof between them,
//     built from the tree, verifies (VerifyConsistency; at the same size,
//     the same root). Past the latest's size the proof alone is checked:
//     the latest's root is the tree's at its size and the leaves it covers
//     never change, so the proof verifies exactly when c.Root is the
//     tree's root at c.Size (the root is computed only to say why not);
//   - when c reaches the kept checkpoint's size (Keep) and no checkpoint
//     did before, c is consistent with it.
//
// Errors wrap ErrCheckpointMismatch (and the proof's or the tree's error)
// or, for the last rule, ErrRolledBack; their text is the readers' reason.
func (l *Ledger) Check(c *Checkpoint) error {
	size := l.tree.Size()
	switch {
	case l.latest != nil && c.Size < l.latest.Size:
		return mismatch(nil, "size %d is smaller than the previous checkpoint's, %d at stream seq %d", c.Size, l.latest.Size, l.latestSeq)
	case c.Size > size:
		return mismatch(nil, "it covers %d messages, but only %d admitted messages of the room precede it", c.Size, size)
	}
	if l.latest != nil && c.Size > l.latest.Size {
		if err := l.consistent(l.latest, c); err != nil {
			if rerr := l.rootIs(c); rerr != nil {
				return rerr
			}
			return mismatch(err, "not consistent with the previous checkpoint (size %d at stream seq %d): %v", l.latest.Size, l.latestSeq, err)
		}
	} else {
		if err := l.rootIs(c); err != nil {
			return err
		}
		if l.latest != nil {
			if err := l.consistent(l.latest, c); err != nil { // the same size: the same root
				return mismatch(err, "not consistent with the previous checkpoint (size %d at stream seq %d): %v", l.latest.Size, l.latestSeq, err)
			}
		}
	}
	if l.kept != nil && !l.keptOK && c.Size >= l.kept.Size {
		if err := l.consistent(l.kept, c); err != nil {
			return &ledgerError{kind: ErrRolledBack, cause: err, text: fmt.Sprintf("%v: this reader verified a checkpoint of size %d (root %s) before, and the checkpoint of size %d is not consistent with it: %v",
				ErrRolledBack, l.kept.Size, hexRoot(l.kept.Root), c.Size, err)}
		}
	}
	return nil
}

// rootIs returns the mismatch when c.Root is not the tree's root at c.Size.
func (l *Ledger) rootIs(c *Checkpoint) error {
	root, err := l.tree.RootAt(c.Size)
	if err != nil {
		return mismatch(err, "%v", err)
	}
	if root != c.Root {
		return mismatch(nil, "root %s at size %d, but the room's admitted messages give %s", hexRoot(c.Root), c.Size, hexRoot(root))
	}
	return nil
}

// consistent verifies an RFC 6962 consistency proof, built from the tree,
// from old to c (old.Size <= c.Size <= Size).
func (l *Ledger) consistent(old, c *Checkpoint) error {
	proof, err := l.tree.ConsistencyProof(old.Size, c.Size)
	if err != nil {
		return err
	}
	return VerifyConsistency(old.Size, c.Size, proof, old.Root, c.Root)
}

// Accept makes c, read at stream seq, the latest checkpoint; c must have
// passed Check. A lean ledger folds the leaves c covers into its compact
// range. Errors wrap ErrTreeSize when c covers more leaves than the tree
// has or fewer than the latest checkpoint (the ledger is then unchanged).
func (l *Ledger) Accept(c *Checkpoint, seq uint64) error {
	if c.Size > l.tree.Size() || c.Size < l.Covered() {
		return fmt.Errorf("%w: accept a checkpoint of size %d in a tree of %d leaves, the latest checkpoint at %d", ErrTreeSize, c.Size, l.tree.Size(), l.Covered())
	}
	if t, ok := l.tree.(*LeanTree); ok {
		if err := t.Advance(c.Size); err != nil {
			return err
		}
	}
	l.latest, l.latestSeq = c, seq
	if l.kept != nil && c.Size >= l.kept.Size {
		l.keptOK = true
	}
	return nil
}

// RolledBack returns, for a room whose kept checkpoint (Keep) no accepted
// checkpoint reached, why it is rolled back or forked (wrapping
// ErrRolledBack); else nil. A reader asks once the room is read.
func (l *Ledger) RolledBack() error {
	if l.kept == nil || l.keptOK {
		return nil
	}
	newest := "no checkpoint of the room was verified"
	if l.latest != nil {
		newest = "the newest verified checkpoint has size " + strconv.FormatUint(l.latest.Size, 10)
	}
	return &ledgerError{kind: ErrRolledBack, text: fmt.Sprintf("%v: this reader verified a checkpoint of size %d (root %s) before; %s",
		ErrRolledBack, l.kept.Size, hexRoot(l.kept.Root), newest)}
}

// CheckNewest judges the room by its newest checkpoint on the stream
// (newest, at stream seq; nil: none), before reading it (Follow's start):
// a room whose newest checkpoint is smaller than the kept one (Keep), or
// as large with another root, is rolled back or forked (wrapping
// ErrRolledBack); without a checkpoint, RolledBack's verdict.
func (l *Ledger) CheckNewest(newest *Checkpoint, seq uint64) error {
	switch {
	case l.kept == nil:
		return nil
	case newest == nil:
		return l.RolledBack()
	case newest.Size < l.kept.Size || newest.Size == l.kept.Size && newest.Root != l.kept.Root:
		return &ledgerError{kind: ErrRolledBack, text: fmt.Sprintf("%v: this reader verified a checkpoint of size %d (root %s) before; the newest on the stream has size %d (root %s, stream seq %d)",
			ErrRolledBack, l.kept.Size, hexRoot(l.kept.Root), newest.Size, hexRoot(newest.Root), seq)}
	}
	return nil
}

// CheckOther returns why c, a checkpoint of the room obtained elsewhere
// (another reader, a witness: audit --checkpoint), does not describe the
// room as read, or nil: its size within Size, its root the tree's at its
// size, and consistent with the latest checkpoint (a proof from the
// smaller to the larger). A lean ledger has no roots below Covered(): use
// a full one. Errors wrap ErrCheckpointMismatch.
func (l *Ledger) CheckOther(c *Checkpoint) error {
	if c.Size > l.tree.Size() {
		return mismatch(nil, "the room as read has %d admitted messages: this copy of the room is behind the checkpoint, or forked", l.tree.Size())
	}
	root, err := l.tree.RootAt(c.Size)
	if err != nil {
		return mismatch(err, "%v", err)
	}
	if root != c.Root {
		return mismatch(nil, "forked: the room as read has root %s at size %d, the checkpoint %s", hexRoot(root), c.Size, hexRoot(c.Root))
	}
	if l.latest != nil {
		old, now := c, l.latest
		if c.Size > l.latest.Size {
			old, now = l.latest, c
		}
		if err := l.consistent(old, now); err != nil {
			return mismatch(err, "not consistent with the room's checkpoint of size %d at stream seq %d: %v", l.latest.Size, l.latestSeq, err)
		}
	}
	return nil
}

func hexRoot(h [32]byte) string { return hex.EncodeToString(h[:]) }

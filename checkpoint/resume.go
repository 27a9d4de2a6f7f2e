package checkpoint

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"

	"github.com/roompub/roompub/events"
)

// ResumeHeader is the header of a checkpoint message that carries what a
// successor of the checkpointer that wrote it needs to go on with the
// room's tree without reading its leaves again (Resume). It rides beside
// the signed note, which it leaves unchanged: readers that do not know it
// ignore it (docs/checkpoints.md, "Resuming").
const ResumeHeader = "Roompub-Resume"

// ResumeSignatureHeader carries the publisher's signature of a checkpoint
// message's ResumeHeader value, bound to the message's note (SignResume).
// The note's own signature covers the note only; without this one, a copy
// of the message stored with the header changed (a record count, a leaf
// seq) would be resumed from, and the successor would sign trees no
// reader builds.
const ResumeSignatureHeader = "Roompub-Resume-Signature"

// resumeTag starts every resume statement's signed message, so a resume
// signature can never be taken for another roompub signature (leaseTag's
// reasoning: a checkpoint note's second line is a decimal size of at most
// 20 digits, never the 64 hex digits here).
const resumeTag = "roompub-checkpoint-resume/v1\n"

// resumeMessage is what the publisher key signs for a resume header value
// of the checkpoint message whose data is note:
//
//	"roompub-checkpoint-resume/v1\n" + hex(SHA-256(note)) + "\n" + value + "\n"
func resumeMessage(note []byte, value string) []byte {
	sum := sha256.Sum256(note)
	b := make([]byte, 0, len(resumeTag)+2*len(sum)+len(value)+2)
	b = append(b, resumeTag...)
	b = hex.AppendEncode(b, sum[:])
	b = append(b, '\n')
	b = append(b, value...)
	return append(b, '\n')
}

// SignResume returns the ResumeSignatureHeader value by which k vouches
// for value, the ResumeHeader of the checkpoint message whose data is note:
// the unpadded base64url Ed25519 signature of resumeMessage. Errors are
// k's.
func SignResume(k *events.HostKey, note []byte, value string) (string, error) {
	hk, err := signingKey(k)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(ed25519.Sign(hk.priv, resumeMessage(note, value))), nil
}

// VerifyResume checks sig, a ResumeSignatureHeader value, over value, the
// ResumeHeader of the checkpoint message whose data is note, by nodeID
// (the note's signer). Errors wrap ErrBadResume (no signature, not 64
// bytes of unpadded base64url, or one that does not verify) or
// ErrUntrustedPublisher (nodeID not in t).
func (t *Trust) VerifyResume(nodeID string, note []byte, value, sig string) error {
	if sig == "" {
		return fmt.Errorf("%w: no %s (written before it, or by hand)", ErrBadResume, ResumeSignatureHeader)
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(sig)
	if err != nil || len(raw) != ed25519.SignatureSize {
		return fmt.Errorf("%w: the signature is not %d bytes of unpadded base64url", ErrBadResume, ed25519.SignatureSize)
	}
	pub, ok := t.key(nodeID)
	if !ok {
		return fmt.Errorf("%w: resume state by %s", ErrUntrustedPublisher, clip(nodeID))
	}
	if !ed25519.Verify(pub, resumeMessage(note, value), raw) {
		return fmt.Errorf("%w: the signature by %s does not verify for this note and header", ErrBadResume, nodeID)
	}
	return nil
}

// resumeVersion is the first field of a ResumeHeader value.
const resumeVersion = "1"

// ErrBadResume is wrapped by ParseResume and ResumeLedger when a resume
// header is malformed or does not hash to the checkpoint's root.
var ErrBadResume = errors.New("bad resume state")

// Resume is a room's state as of a checkpoint of size n > 0, which a
// successor verifies against the checkpoint (ResumeLedger) rather than
// trusts:
//
//   - Prefix, the compact range (merkle/compact, largest subtree first) of
//     the first n-1 leaves, and Last, the leaf hash n-1: together they
//     hash to the checkpoint's root;
//   - LeafSeq, the stream seq of the message whose leaf is Last: a
//     successor checks that message's leaf hash and reads the room on
//     from LeafSeq+1;
//   - Records, the number of messages on the room's exec subject up to
//     LeafSeq (the next record's position, RecordPosition);
//   - Trust, the TrustDigest of the publishers whose attestations built
//     the tree: a successor that trusts others would build another tree,
//     and does not resume.
//
// LeafSeq and Records are tied to nothing the note signs, so the header
// value goes with a signature of its own (SignResume, VerifyResume).
type Resume struct {
	LeafSeq uint64
	Records uint64
	Trust   string
	Last    [32]byte
	Prefix  [][32]byte
}

// TrustDigest names the rules a room's tree was built under: the first
// 8 bytes, in hex, of the SHA-256 of t's origin and its trusted node ids,
// sorted, one a line.
func TrustDigest(t *Trust) string {
	h := sha256.Sum256([]byte(t.Origin() + "\n" + strings.Join(t.NodeIDs(), "\n")))
	return hex.EncodeToString(h[:8])
}

// String is the header value: "1 <LeafSeq> <Records> <Trust> <Last>" and
// the Prefix hashes, space separated, hashes in standard base64.
func (r Resume) String() string {
	var b strings.Builder
	b.WriteString(resumeVersion)
	b.WriteByte(' ')
	b.WriteString(strconv.FormatUint(r.LeafSeq, 10))
	b.WriteByte(' ')
	b.WriteString(strconv.FormatUint(r.Records, 10))
	b.WriteByte(' ')
	b.WriteString(r.Trust)
	for _, h := range append([][32]byte{r.Last}, r.Prefix...) {
		b.WriteByte(' ')
		b.WriteString(base64.StdEncoding.EncodeToString(h[:]))
	}
	return b.String()
}

// ParseResume parses a ResumeHeader value (Resume.String). Errors wrap
// ErrBadResume.
func ParseResume(s string) (Resume, error) {
	var r Resume
	f := strings.Split(s, " ")
	if len(f) < 5 || len(f) > 5+64 {
		return r, fmt.Errorf("%w: %d fields", ErrBadResume, len(f))
	}
	if f[0] != resumeVersion {
		return r, fmt.Errorf("%w: version %.8q", ErrBadResume, f[0])
	}
	var err error
	if r.LeafSeq, err = strconv.ParseUint(f[1], 10, 64); err != nil || r.LeafSeq == 0 {
		return r, fmt.Errorf("%w: leaf seq %.24q", ErrBadResume, f[1])
	}
	if r.Records, err = strconv.ParseUint(f[2], 10, 64); err != nil {
		return r, fmt.Errorf("%w: records %.24q", ErrBadResume, f[2])
	}
	if d, err := hex.DecodeString(f[3]); err != nil || len(d) != 8 {
		return r, fmt.Errorf("%w: trust digest %.24q", ErrBadResume, f[3])
	}
	r.Trust = f[3]
	hs := make([][32]byte, len(f)-4)
	for i, v := range f[4:] {
		d, err := base64.StdEncoding.DecodeString(v)
		if err != nil || len(d) != 32 {
			return r, fmt.Errorf("%w: hash %d is not 32 bytes of base64", ErrBadResume, i)
		}
		hs[i] = [32]byte(d)
	}
	r.Last, r.Prefix = hs[0], hs[1:]
	return r, nil
}

// ResumeAt returns the ledger's Resume as of size leaves (Covered() <
// size <= Size(), a lean ledger), with LeafSeq and Records zero: the
// caller knows where the leaf was read. Errors wrap ErrTreeSize.
func (l *Ledger) ResumeAt(size uint64) (Resume, error) {
	t, ok := l.tree.(*LeanTree)
	if !ok || size == 0 || size-1 < t.baseSize || size > t.Size() {
		return Resume{}, fmt.Errorf("%w: no resume state at size %d", ErrTreeSize, size)
	}
	var f foldRange
	if err := t.rangeAt(&f, size-1); err != nil {
		return Resume{}, err
	}
	var last [32]byte
	if err := t.leaves(size-1, size, func(l [32]byte) { last = l }); err != nil {
		return Resume{}, err
	}
	return Resume{Last: last, Prefix: append([][32]byte(nil), f.h[:f.n]...)}, nil
}

// ResumeLedger returns a lean ledger of c's room as of c, read at stream
// seq, from r: r's Prefix must be a compact range of c.Size-1 leaves (one
// hash per bit set) that, with r.Last appended, hashes to c.Root. c is
// the latest checkpoint, its leaves folded. c's signature is the caller's
// to check (Parse). Errors wrap ErrBadResume.
func ResumeLedger(c *Checkpoint, seq uint64, r Resume) (*Ledger, error) {
	if c.Size == 0 {
		return nil, fmt.Errorf("%w: a checkpoint of size 0", ErrBadResume)
	}
	if n := bits.OnesCount64(c.Size - 1); len(r.Prefix) != n {
		return nil, fmt.Errorf("%w: %d hashes for the compact range of %d leaves, want %d", ErrBadResume, len(r.Prefix), c.Size-1, n)
	}
	var f foldRange
	f.n, f.end = copy(f.h[:], r.Prefix), c.Size-1
	f.push(r.Last)
	if root := f.root(); root != c.Root {
		return nil, fmt.Errorf("%w: the compact range hashes to %s at size %d, the checkpoint's root is %s", ErrBadResume, hexRoot(root), c.Size, hexRoot(c.Root))
	}
	t := &LeanTree{baseSize: c.Size, tailStart: c.Size, base: append([][32]byte(nil), f.h[:f.n]...)}
	return &Ledger{tree: t, latest: c, latestSeq: seq}, nil
}

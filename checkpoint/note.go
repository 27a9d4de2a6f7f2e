package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/roompub/roompub/events"
	"github.com/transparency-dev/formats/log"
	"golang.org/x/mod/sumdb/note"
)

// Checkpoint is a parsed, signed C2SP tlog-checkpoint of one room: the
// room's tree had Size leaves with root hash Root when Signer signed it.
// Two forms verify (docs/checkpoints.md, "Origins"): the C2SP form, whose
// origin line is RoomOrigin(deployment, room) and whose key name is that
// origin, and the form written before deployments had origins, whose
// origin line is the room id and whose key name is the node id.
type Checkpoint struct {
	Room   string   // the room id the origin names (ParseUnverified: the origin line when it names no room)
	Origin string   // the note's origin line
	Size   uint64   // number of leaves covered
	Root   [32]byte // RFC 6962 root hash at Size
	Signer string   // node id of the (first) trusted key that signed it; ParseUnverified: the name on the first signature
	Note   []byte   // the signed note as received
}

// validOrigin reports whether s can be a checkpoint's origin line: non-empty
// UTF-8 without control characters (C2SP tlog-checkpoint; signed notes
// allow no control characters but newline, and a newline would end the
// line).
func validOrigin(s string) bool {
	if s == "" || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// Sign returns the signed note of the checkpoint (origin line origin,
// size, root) by s: the C2SP tlog-checkpoint body of
// formats/log.Checkpoint.Marshal, signed as a C2SP signed note by
// x/mod/sumdb/note. No extension lines. The origin is RoomOrigin for a
// deployment with an origin (and s is named by it: NewNamedNoteSigner),
// else the room id. Errors wrap ErrBadCheckpoint for an origin that cannot
// be an origin line, or are the signer's.
func Sign(s note.Signer, origin string, size uint64, root [32]byte) ([]byte, error) {
	if !validOrigin(origin) {
		return nil, fmt.Errorf("%w: %q cannot be an origin line", ErrBadCheckpoint, clip(origin))
	}
	body := log.Checkpoint{Origin: origin, Size: size, Hash: root[:]}.Marshal()
	signed, err := note.Sign(&note.Note{Text: string(body)}, s)
	if err != nil {
		return nil, fmt.Errorf("sign checkpoint of %s at size %d: %w", origin, size, err)
	}
	return signed, nil
}

// Parse verifies a signed checkpoint note of roomID under t and returns it.
// It requires a valid signature by a trusted key (and no invalid signature
// by one: note.Open), a 32-byte root, the body in the exact form Sign
// writes (no extension lines, no leading zeros), and one of the two forms
// of origin: RoomOrigin(d, roomID) signed under a key named by that
// origin, where d is t's origin when it has one (Trust.WithOrigin) and
// any deployment origin otherwise; or roomID itself signed under a key
// named by its node id (checkpoints written before origins). Errors wrap
// ErrUntrustedPublisher (well-formed, of roomID, but no trusted key signed
// it) or ErrBadCheckpoint (anything else, such as an origin of another
// room, whoever signed it).
func Parse(signed []byte, roomID string, t *Trust) (*Checkpoint, error) {
	if err := refuseBOM(signed); err != nil {
		return nil, err
	}
	vs := roomVerifiers(t, roomID)
	n, err := note.Open(signed, vs)
	if err != nil {
		var unverified *note.UnverifiedNoteError
		if errors.As(err, &unverified) {
			if c, perr := parseBody(unverified.Note.Text); perr == nil {
				id, d, ok := RoomOfOrigin(c.Origin)
				switch {
				case c.Origin != roomID && (!ok || id != roomID):
					// Another room's checkpoint: only the room's own
					// names are offered to note.Open, so a trusted key
					// looks untrusted here; the origin is the fault.
					return nil, originNotRoom(c.Origin, roomID)
				case ok && t.Origin() != "" && d != t.Origin():
					return nil, fmt.Errorf("%w: origin %q is of deployment %q, not %q", ErrBadCheckpoint, clip(c.Origin), clip(d), clip(t.Origin()))
				}
			}
			return nil, fmt.Errorf("%w: checkpoint signed only by %s", ErrUntrustedPublisher, sigNames(unverified.Note.UnverifiedSigs))
		}
		return nil, fmt.Errorf("%w: %w", ErrBadCheckpoint, err)
	}
	c, err := parseBody(n.Text)
	if err != nil {
		return nil, err
	}
	sig := n.Sigs[0]
	if c.Origin == roomID {
		if !t.Trusts(sig.Name) {
			return nil, fmt.Errorf("%w: origin %q is the room id, so the key must be named by its node id, not %q", ErrBadCheckpoint, clip(c.Origin), clip(sig.Name))
		}
		c.Signer = sig.Name
	} else {
		id, d, ok := RoomOfOrigin(c.Origin)
		switch {
		case !ok || id != roomID:
			return nil, originNotRoom(c.Origin, roomID)
		case t.origin != "" && d != t.origin:
			return nil, fmt.Errorf("%w: origin %q is of deployment %q, not %q", ErrBadCheckpoint, clip(c.Origin), clip(d), clip(t.origin))
		case sig.Name != c.Origin:
			return nil, fmt.Errorf("%w: key name %q does not match origin %q", ErrBadCheckpoint, clip(sig.Name), clip(c.Origin))
		}
		c.Signer = vs.signer[sig.Hash]
	}
	c.Room = roomID
	c.Note = signed
	return c, nil
}

// refuseBOM refuses a note that starts with a byte order mark, as a file
// saved "UTF-8 with BOM" does: note.Open would call it a bad signature
// (the signature is over the text without the mark), and the mark is
// invisible.
func refuseBOM(signed []byte) error {
	if events.HasBOM(signed) {
		return fmt.Errorf("%w: %s", ErrBadCheckpoint, events.BOMReason("the note", "a signed note"))
	}
	return nil
}

// originNotRoom is Parse's error for a checkpoint whose origin is not
// roomID's: naming the room it is of, when it is a room origin.
func originNotRoom(origin, roomID string) error {
	if id, _, ok := RoomOfOrigin(origin); ok {
		return fmt.Errorf("%w: origin %q is of room %q, not %q", ErrBadCheckpoint, clip(origin), clip(id), clip(roomID))
	}
	return fmt.Errorf("%w: origin %q is not room %q", ErrBadCheckpoint, clip(origin), clip(roomID))
}

// namedVerifiers are the trusted keys under the names a checkpoint may
// carry: each key's node id when nodeIDs is set (the room-id form), and
// every name fits accepts (an origin). The key hash of C2SP signed-note
// covers the name, so each name gives each key its own hash; signer maps
// those of origin names back to node ids.
type namedVerifiers struct {
	t       *Trust
	nodeIDs bool
	fits    func(name string) bool
	signer  map[uint32]string
}

// roomVerifiers are the names of roomID's checkpoints: node ids, and the
// room's origin (RoomOrigin; of t's deployment, or of any deployment when
// t has none).
func roomVerifiers(t *Trust, roomID string) *namedVerifiers {
	return &namedVerifiers{t: t, nodeIDs: true, fits: func(name string) bool {
		id, d, ok := RoomOfOrigin(name)
		return ok && id == roomID && (t.Origin() == "" || d == t.Origin())
	}}
}

// Verifier implements note.Verifiers.
func (vs *namedVerifiers) Verifier(name string, hash uint32) (note.Verifier, error) {
	t := vs.t
	if t == nil {
		return nil, &note.UnknownVerifierError{Name: name, KeyHash: hash}
	}
	if t.Trusts(name) {
		if !vs.nodeIDs {
			return nil, &note.UnknownVerifierError{Name: name, KeyHash: hash}
		}
		return t.verifiers.Verifier(name, hash)
	}
	if !vs.fits(name) {
		return nil, &note.UnknownVerifierError{Name: name, KeyHash: hash}
	}
	for _, nodeID := range t.ids {
		vkey, err := note.NewEd25519VerifierKey(name, t.keys[nodeID])
		if err != nil {
			break // a name x/mod refuses: no key of this name verifies
		}
		v, err := note.NewVerifier(vkey)
		if err != nil || v.KeyHash() != hash {
			continue
		}
		if vs.signer == nil {
			vs.signer = map[uint32]string{}
		}
		vs.signer[hash] = nodeID
		return v, nil
	}
	return nil, &note.UnknownVerifierError{Name: name, KeyHash: hash}
}

// ParseUnverified parses a checkpoint note without checking any signature,
// for messages to humans (which key signed, which size). Signer is the name
// on the first signature line. Errors wrap ErrBadCheckpoint.
func ParseUnverified(signed []byte) (*Checkpoint, error) {
	if err := refuseBOM(signed); err != nil {
		return nil, err
	}
	_, err := note.Open(signed, note.VerifierList())
	var unverified *note.UnverifiedNoteError
	if !errors.As(err, &unverified) {
		// With no verifiers, Open can only fail this way for a well-formed note.
		return nil, fmt.Errorf("%w: %w", ErrBadCheckpoint, err)
	}
	n := unverified.Note
	c, err := parseBody(n.Text)
	if err != nil {
		return nil, err
	}
	c.Signer = n.UnverifiedSigs[0].Name
	c.Note = signed
	if id, _, ok := RoomOfOrigin(c.Origin); ok {
		c.Room = id
	}
	return c, nil
}

// parseBody reads a tlog-checkpoint body with formats/log and accepts it
// only in its canonical form (what Marshal would write), so one checkpoint
// has one encoding.
func parseBody(text string) (*Checkpoint, error) {
	var lc log.Checkpoint
	rest, err := lc.Unmarshal([]byte(text))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadCheckpoint, err)
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: extension lines after the root hash (roompub writes none)", ErrBadCheckpoint)
	}
	if len(lc.Hash) != 32 {
		return nil, fmt.Errorf("%w: root hash is %d bytes, want 32", ErrBadCheckpoint, len(lc.Hash))
	}
	if !bytes.Equal(lc.Marshal(), []byte(text)) {
		return nil, fmt.Errorf("%w: body is not in canonical form", ErrBadCheckpoint)
	}
	return &Checkpoint{Room: lc.Origin, Origin: lc.Origin, Size: lc.Size, Root: to32(lc.Hash)}, nil
}

func sigNames(sigs []note.Signature) string {
	var b bytes.Buffer
	for i, s := range sigs {
		if i == 3 {
			fmt.Fprintf(&b, " and %d more", len(sigs)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(clip(s.Name))
	}
	return b.String()
}

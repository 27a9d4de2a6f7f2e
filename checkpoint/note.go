package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/transparency-dev/formats/log"
	"golang.org/x/mod/sumdb/note"
)

// Checkpoint is a parsed, signed C2SP tlog-checkpoint of one room: the
// room's tree had Size leaves with root hash Root when Signer signed it.
type Checkpoint struct {
	Room   string   // the note's origin line: the room id exactly
	Size   uint64   // number of leaves covered
	Root   [32]byte // RFC 6962 root hash at Size
	Signer string   // node id of the (first) trusted key that signed it; ParseUnverified: of the first signature
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

// Sign returns the signed note of the checkpoint (origin roomID, size, root)
// by s: the C2SP tlog-checkpoint body of formats/log.Checkpoint.Marshal,
// signed as a C2SP signed note by x/mod/sumdb/note. No extension lines.
// Errors wrap ErrBadCheckpoint for a room id that cannot be an origin line,
// or are the signer's.
func Sign(s note.Signer, roomID string, size uint64, root [32]byte) ([]byte, error) {
	if !validOrigin(roomID) {
		return nil, fmt.Errorf("%w: room id %q cannot be an origin line", ErrBadCheckpoint, clip(roomID))
	}
	body := log.Checkpoint{Origin: roomID, Size: size, Hash: root[:]}.Marshal()
	signed, err := note.Sign(&note.Note{Text: string(body)}, s)
	if err != nil {
		return nil, fmt.Errorf("sign checkpoint of %s at size %d: %w", roomID, size, err)
	}
	return signed, nil
}

// Parse verifies a signed checkpoint note of roomID under t and returns it.
// It requires a valid signature by a trusted key (and no invalid signature
// by one: note.Open), origin == roomID, a 32-byte root, and the body in the
// exact form Sign writes (no extension lines, no leading zeros). Errors wrap
// ErrUntrustedPublisher (well-formed, but no trusted key signed it) or
// ErrBadCheckpoint (anything else).
func Parse(signed []byte, roomID string, t *Trust) (*Checkpoint, error) {
	n, err := note.Open(signed, t.Verifiers())
	if err != nil {
		var unverified *note.UnverifiedNoteError
		if errors.As(err, &unverified) {
			return nil, fmt.Errorf("%w: checkpoint signed only by %s", ErrUntrustedPublisher, sigNames(unverified.Note.UnverifiedSigs))
		}
		return nil, fmt.Errorf("%w: %w", ErrBadCheckpoint, err)
	}
	c, err := parseBody(n.Text)
	if err != nil {
		return nil, err
	}
	if c.Room != roomID {
		return nil, fmt.Errorf("%w: origin %q is not room %q", ErrBadCheckpoint, clip(c.Room), clip(roomID))
	}
	c.Signer = n.Sigs[0].Name
	c.Note = signed
	return c, nil
}

// ParseUnverified parses a checkpoint note without checking any signature,
// for messages to humans (which key signed, which size). Signer is the name
// on the first signature line. Errors wrap ErrBadCheckpoint.
func ParseUnverified(signed []byte) (*Checkpoint, error) {
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
	return &Checkpoint{Room: lc.Origin, Size: lc.Size, Root: to32(lc.Hash)}, nil
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

package witness

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/note"
)

// Key types of a signed-note verifier key (C2SP signed-note): 0x01 is a
// plain Ed25519 note key, what a log signs checkpoints with; 0x04 is an
// Ed25519 cosignature/v1 key (C2SP tlog-cosignature), what a witness
// cosigns with.
const (
	keyTypeEd25519     = 0x01
	keyTypeCosignature = 0x04
)

// cosignatureSize is a cosignature/v1 signature without its key hash: an
// 8-byte big-endian timestamp then a 64-byte Ed25519 signature.
const cosignatureSize = 8 + ed25519.SignatureSize

// ErrNotCosignatureKey is wrapped by ParseVerifierKey's error when the key
// is well formed but of another type than 0x04, most likely a log's
// Ed25519 note key (0x01) given where a witness's key belongs.
var ErrNotCosignatureKey = errors.New("not a cosignature/v1 key (type 0x04)")

// Verifier checks a witness's cosignatures (C2SP tlog-cosignature, Ed25519,
// cosignature/v1). It is a note.Verifier: Verify is given the note text and
// a signature without its 4-byte key hash.
type Verifier struct {
	name string
	hash uint32
	key  ed25519.PublicKey
}

var _ note.Verifier = (*Verifier)(nil)

// ParseVerifierKey parses a cosignature verifier key,
// "name+hash+base64(0x04 || 32-byte Ed25519 public key)" (C2SP
// signed-note "verifier keys", C2SP tlog-cosignature). The name must be a
// valid key name (non-empty UTF-8, no Unicode space, no '+'); hash is 8
// lowercase hex digits and must equal the first 4 bytes, big-endian, of
// SHA-256(name || "\n" || 0x04 || key); the key is exactly 33 bytes. A
// well-formed key of another type is refused with an error wrapping
// ErrNotCosignatureKey.
func ParseVerifierKey(vkey string) (*Verifier, error) {
	name, rest, ok1 := strings.Cut(vkey, "+")
	hexHash, b64, ok2 := strings.Cut(rest, "+")
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("witness: verifier key %q: want name+hash+key", vkey)
	}
	if !validName(name) {
		return nil, fmt.Errorf("witness: verifier key %q: invalid key name", vkey)
	}
	h, err := strconv.ParseUint(hexHash, 16, 32)
	if err != nil || len(hexHash) != 8 || strings.ToLower(hexHash) != hexHash {
		return nil, fmt.Errorf("witness: verifier key %q: key hash is not 8 lowercase hex digits", vkey)
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(b64)
	if err != nil || len(raw) == 0 {
		return nil, fmt.Errorf("witness: verifier key %q: key is not base64", vkey)
	}
	if raw[0] != keyTypeCosignature {
		if raw[0] == keyTypeEd25519 {
			return nil, fmt.Errorf("witness: verifier key %q: type 0x01 is a log's Ed25519 note key: %w", vkey, ErrNotCosignatureKey)
		}
		return nil, fmt.Errorf("witness: verifier key %q: type 0x%02x: %w", vkey, raw[0], ErrNotCosignatureKey)
	}
	if len(raw) != 1+ed25519.PublicKeySize {
		return nil, fmt.Errorf("witness: verifier key %q: key is %d bytes, want %d", vkey, len(raw), 1+ed25519.PublicKeySize)
	}
	if keyHash(name, raw) != uint32(h) {
		return nil, fmt.Errorf("witness: verifier key %q: key hash %s does not match the name and key", vkey, hexHash)
	}
	return &Verifier{name: name, hash: uint32(h), key: bytes.Clone(raw[1:])}, nil
}

// NewVerifierKey encodes a witness's name and Ed25519 public key as a
// cosignature verifier key (C2SP tlog-cosignature), the form
// ParseVerifierKey reads.
func NewVerifierKey(name string, pub ed25519.PublicKey) (string, error) {
	if !validName(name) {
		return "", fmt.Errorf("witness: invalid key name %q", name)
	}
	if len(pub) != ed25519.PublicKeySize {
		return "", fmt.Errorf("witness: public key is %d bytes, want %d", len(pub), ed25519.PublicKeySize)
	}
	raw := append([]byte{keyTypeCosignature}, pub...)
	return fmt.Sprintf("%s+%08x+%s", name, keyHash(name, raw), base64.StdEncoding.EncodeToString(raw)), nil
}

// keyHash is the key ID of C2SP signed-note: the first 4 bytes, big-endian,
// of SHA-256(name || "\n" || type || key).
func keyHash(name string, typedKey []byte) uint32 {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte("\n"))
	h.Write(typedKey)
	return binary.BigEndian.Uint32(h.Sum(nil))
}

// validName is C2SP signed-note's key name rule, the one
// golang.org/x/mod/sumdb/note applies to signature lines.
func validName(name string) bool {
	return name != "" && utf8.ValidString(name) &&
		strings.IndexFunc(name, unicode.IsSpace) < 0 && !strings.Contains(name, "+")
}

// Name is the witness's key name, the one its signature lines carry.
func (v *Verifier) Name() string { return v.name }

// KeyHash is the 4-byte key ID its signature lines start with.
func (v *Verifier) KeyHash() uint32 { return v.hash }

// PublicKey is the witness's Ed25519 public key.
func (v *Verifier) PublicKey() ed25519.PublicKey { return bytes.Clone(v.key) }

// String is the verifier key, as ParseVerifierKey reads it.
func (v *Verifier) String() string {
	return fmt.Sprintf("%s+%08x+%s", v.name, v.hash,
		base64.StdEncoding.EncodeToString(append([]byte{keyTypeCosignature}, v.key...)))
}

// Verify reports whether sig, a timestamped signature (8-byte big-endian
// POSIX time, then 64 bytes of Ed25519), signs the message
// "cosignature/v1\ntime <T>\n" || msg, msg being the note text (C2SP
// tlog-cosignature, "Ed25519 signed message"). A timestamp above 2^63-1 does
// not verify.
func (v *Verifier) Verify(msg, sig []byte) bool {
	if len(sig) != cosignatureSize {
		return false
	}
	t := binary.BigEndian.Uint64(sig)
	if t > math.MaxInt64 {
		return false
	}
	return ed25519.Verify(v.key, cosignedMessage(t, msg), sig[8:])
}

func cosignedMessage(t uint64, text []byte) []byte {
	m := make([]byte, 0, 40+len(text))
	m = append(m, "cosignature/v1\ntime "...)
	m = strconv.AppendUint(m, t, 10)
	m = append(m, '\n')
	return append(m, text...)
}

// Timestamp is the time a cosignature says it was made, in whole seconds
// (C2SP tlog-cosignature timestamped_signature). It does not verify the
// signature; it refuses a line of another key (name and key hash), one
// that is not base64 or not 4+8+64 bytes long, and a time above 2^63-1.
func (v *Verifier) Timestamp(sig note.Signature) (time.Time, error) {
	if sig.Name != v.name || sig.Hash != v.hash {
		return time.Time{}, fmt.Errorf("witness: signature of %s+%08x, not of %s+%08x", sig.Name, sig.Hash, v.name, v.hash)
	}
	raw, err := base64.StdEncoding.DecodeString(sig.Base64)
	if err != nil || len(raw) != 4+cosignatureSize || binary.BigEndian.Uint32(raw) != v.hash {
		return time.Time{}, fmt.Errorf("witness: malformed cosignature of %s", v.name)
	}
	t := binary.BigEndian.Uint64(raw[4:])
	if t > math.MaxInt64 {
		return time.Time{}, fmt.Errorf("witness: cosignature of %s has time %d above 2^63-1", v.name, t)
	}
	return time.Unix(int64(t), 0).UTC(), nil
}

// verifyLine reports whether sig is v's valid cosignature over text.
func (v *Verifier) verifyLine(text []byte, sig note.Signature) bool {
	if sig.Name != v.name || sig.Hash != v.hash {
		return false
	}
	raw, err := base64.StdEncoding.DecodeString(sig.Base64)
	if err != nil || len(raw) != 4+cosignatureSize || binary.BigEndian.Uint32(raw) != v.hash {
		return false
	}
	return v.Verify(text, raw[4:])
}

package checkpoint

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/roompub/roompub/events"
	"golang.org/x/mod/sumdb/note"
)

// AttestationHeader is the NATS header that carries a publisher's
// attestation of a message: "<node id> <base64url-raw Ed25519 signature>"
// (issue 9).
const AttestationHeader = "Roompub-Attestation"

// attestationTag starts every attestation's signed message (issue 9), so
// the signature can never be replayed as any other roompub signature.
const attestationTag = "roompub-attestation/v1\n"

// JournalPosition is the attested position of a journal entry: "seq:" +
// the entry's chain seq in decimal (issue 9).
func JournalPosition(seq int64) string { return "seq:" + strconv.FormatInt(seq, 10) }

// RecordPosition is the attested position of an execution record: "index:"
// + the 0-based ordinal of the message among all messages on the room's
// exec subject in stream order, in decimal (issue 9).
func RecordPosition(index uint64) string { return "index:" + strconv.FormatUint(index, 10) }

// attestationMessage is what the Ed25519 key signs (issue 9), with no
// hashing beyond Ed25519's own:
//
//	"roompub-attestation/v1\n" + roomID + "\n" + subject + "\n" + position + "\n" + hex(content) + "\n"
func attestationMessage(roomID, subject, position string, content [32]byte) []byte {
	b := make([]byte, 0, len(attestationTag)+len(roomID)+len(subject)+len(position)+2*len(content)+4)
	b = append(b, attestationTag...)
	b = append(b, roomID...)
	b = append(b, '\n')
	b = append(b, subject...)
	b = append(b, '\n')
	b = append(b, position...)
	b = append(b, '\n')
	b = hex.AppendEncode(b, content[:])
	return append(b, '\n')
}

// Attest returns the AttestationHeader value by which k attests that the
// message with content hash content is on subject of roomID at position
// (JournalPosition or RecordPosition). Fields must hold no newline (room
// ids, subjects and positions never do); VerifyAttestation refuses any that
// does. It panics only if k holds no usable Ed25519 key, which no
// events.HostKey constructor produces.
func Attest(k *events.HostKey, roomID, subject, position string, content [32]byte) string {
	hk, err := signingKey(k)
	if err != nil {
		panic("checkpoint.Attest: " + err.Error())
	}
	sig := ed25519.Sign(hk.priv, attestationMessage(roomID, subject, position, content))
	return hk.nodeID + " " + base64.RawURLEncoding.EncodeToString(sig)
}

// Trust is a set of trusted publisher keys, named by node id (issue 9:
// --trusted-publisher). It is immutable after NewTrust and safe for
// concurrent use. A nil *Trust trusts nobody.
type Trust struct {
	keys      map[string]ed25519.PublicKey
	ids       []string // sorted
	verifiers note.Verifiers
}

// NewTrust returns the set of the given node ids; duplicates collapse. It
// fails on the first id that is not a canonical Ed25519 node id
// (events.ErrBadDIDKey). An empty set is allowed and trusts nobody.
func NewTrust(nodeIDs ...string) (*Trust, error) {
	t := &Trust{keys: make(map[string]ed25519.PublicKey, len(nodeIDs))}
	var vs []note.Verifier
	for _, id := range nodeIDs {
		if _, dup := t.keys[id]; dup {
			continue
		}
		pub, err := parseNodeID(id)
		if err != nil {
			return nil, fmt.Errorf("trusted publisher: %w", err)
		}
		v, err := NewNoteVerifier(id)
		if err != nil {
			return nil, fmt.Errorf("trusted publisher: %w", err)
		}
		t.keys[id] = pub
		t.ids = append(t.ids, id)
		vs = append(vs, v)
	}
	slices.Sort(t.ids)
	t.verifiers = note.VerifierList(vs...)
	return t, nil
}

// Len is the number of trusted keys.
func (t *Trust) Len() int {
	if t == nil {
		return 0
	}
	return len(t.ids)
}

// NodeIDs returns the trusted node ids, sorted (for messages to humans).
func (t *Trust) NodeIDs() []string {
	if t == nil {
		return nil
	}
	return slices.Clone(t.ids)
}

// Trusts reports whether nodeID is in the set.
func (t *Trust) Trusts(nodeID string) bool {
	if t == nil {
		return false
	}
	_, ok := t.keys[nodeID]
	return ok
}

// Verifiers returns the signed-note verifiers of the trusted keys, for
// note.Open (C2SP signed-note).
func (t *Trust) Verifiers() note.Verifiers {
	if t == nil {
		return note.VerifierList()
	}
	return t.verifiers
}

// parseAttestation splits a header value into node id and signature. The
// form is exact: one space, a canonical node id, 86 characters of unpadded
// base64url (RFC 4648 section 5, strict) encoding 64 bytes.
func parseAttestation(header string) (nodeID string, sig []byte, err error) {
	if header == "" {
		return "", nil, ErrNoAttestation
	}
	nodeID, b64, ok := strings.Cut(header, " ")
	if !ok || nodeID == "" || strings.Contains(b64, " ") {
		return "", nil, fmt.Errorf("%w: header %q is not \"<node id> <signature>\"", ErrBadAttestation, clip(header))
	}
	if !strings.HasPrefix(nodeID, events.NodeIDPrefix) {
		return "", nil, fmt.Errorf("%w: %q is not a node id", ErrBadAttestation, clip(nodeID))
	}
	if len(b64) != base64.RawURLEncoding.EncodedLen(ed25519.SignatureSize) {
		return "", nil, fmt.Errorf("%w: signature is %d characters, want %d", ErrBadAttestation, len(b64), base64.RawURLEncoding.EncodedLen(ed25519.SignatureSize))
	}
	sig, err = base64.RawURLEncoding.Strict().DecodeString(b64)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return "", nil, fmt.Errorf("%w: signature is not unpadded base64url of %d bytes", ErrBadAttestation, ed25519.SignatureSize)
	}
	return nodeID, sig, nil
}

// AttestationSigner returns the node id a well-formed header names if that
// key is trusted, without checking the signature: the optimistic path of
// issue 9, where a covering checkpoint authenticates the leaf instead.
// Errors: ErrNoAttestation, ErrBadAttestation (malformed),
// ErrUntrustedPublisher.
func (t *Trust) AttestationSigner(header string) (string, error) {
	nodeID, _, err := parseAttestation(header)
	if err != nil {
		return "", err
	}
	if !t.Trusts(nodeID) {
		return "", fmt.Errorf("%w: attestation by %s", ErrUntrustedPublisher, clip(nodeID))
	}
	return nodeID, nil
}

// VerifyAttestation checks an AttestationHeader value against the message
// it is on and returns the signer's node id. Errors: ErrNoAttestation
// (empty header), ErrBadAttestation (malformed, a field with a newline, or a
// signature that does not verify for this room, subject, position and
// content), ErrUntrustedPublisher (a well-formed header by a key not in t).
func (t *Trust) VerifyAttestation(header, roomID, subject, position string, content [32]byte) (signer string, err error) {
	nodeID, sig, err := parseAttestation(header)
	if err != nil {
		return "", err
	}
	pub, ok := t.key(nodeID)
	if !ok {
		return "", fmt.Errorf("%w: attestation by %s", ErrUntrustedPublisher, clip(nodeID))
	}
	if strings.ContainsRune(roomID, '\n') || strings.ContainsRune(subject, '\n') || strings.ContainsRune(position, '\n') {
		return "", fmt.Errorf("%w: room, subject or position holds a newline", ErrBadAttestation)
	}
	if !ed25519.Verify(pub, attestationMessage(roomID, subject, position, content), sig) {
		return "", fmt.Errorf("%w: signature by %s does not verify for %s %s %s", ErrBadAttestation, nodeID, clip(subject), clip(position), hex.EncodeToString(content[:]))
	}
	return nodeID, nil
}

func (t *Trust) key(nodeID string) (ed25519.PublicKey, bool) {
	if t == nil {
		return nil, false
	}
	pub, ok := t.keys[nodeID]
	return pub, ok
}

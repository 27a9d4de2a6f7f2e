package events

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
)

// SignatureAlg is the only signature algorithm of seed 004.
const SignatureAlg = "ed25519+domain-v1"

// ExecutionDomain separates execution record signatures from any other use
// of a host key (seed 004).
const ExecutionDomain = "corpus-experiment-task-pack-execution.v1"

// signatureTag starts every ed25519+domain-v1 message (seed 004).
const signatureTag = "orbiplex-sig-v1\x00"

// Signature is the signature object of a record.
type Signature struct {
	Alg       string `json:"alg"`
	Value     string `json:"value"`      // unpadded base64url, 86 characters
	KeyPublic string `json:"key/public"` // did:key method-specific id, "z6Mk…"
}

// ErrBadSignature is returned by VerifySignature when the signature does not
// verify, is not unpadded base64url of 64 bytes, or names another algorithm.
var ErrBadSignature = errors.New("signature does not verify")

// SigningMessage is m of ed25519+domain-v1: SHA-256 of the tag
// "orbiplex-sig-v1\x00", u32be(len(domain)), domain, u64be(len(payload)),
// payload (seed 004). Ed25519 signs these 32 bytes.
func SigningMessage(domain string, payload []byte) [32]byte {
	h := sha256.New()
	var n [8]byte
	h.Write([]byte(signatureTag))
	binary.BigEndian.PutUint32(n[:4], uint32(len(domain)))
	h.Write(n[:4])
	h.Write([]byte(domain))
	binary.BigEndian.PutUint64(n[:], uint64(len(payload)))
	h.Write(n[:])
	h.Write(payload)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// VerifySignature checks sig over payload in domain. The key is taken from
// sig.KeyPublic, which must be the key's did:key method-specific id as
// EncodeDIDKey writes it ("z…"): the signature does not sign it, and the
// record's host/node-id is compared with it as a string, so one key has
// one form. Errors wrap ErrBadSignature or ErrBadDIDKey.
func VerifySignature(sig Signature, domain string, payload []byte) error {
	if sig.Alg != SignatureAlg {
		return fmt.Errorf("%w: alg %q is not %q", ErrBadSignature, sig.Alg, SignatureAlg)
	}
	pub, err := decodeCanonicalDIDKey(sig.KeyPublic)
	if err != nil {
		return err
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(sig.Value)
	if err != nil || len(raw) != ed25519.SignatureSize {
		return fmt.Errorf("%w: value is not unpadded base64url of %d bytes", ErrBadSignature, ed25519.SignatureSize)
	}
	m := SigningMessage(domain, payload)
	if !ed25519.Verify(pub, m[:], raw) {
		return ErrBadSignature
	}
	return nil
}

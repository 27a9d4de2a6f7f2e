package events

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"

	"github.com/mr-tron/base58"
)

// NodeIDPrefix starts every host/node-id: "node:did:key:" + key/public
// (seed 004).
const NodeIDPrefix = "node:did:key:"

// ed25519Multicodec is the multicodec varint of ed25519-pub, 0xed 0x01, that
// prefixes the key inside a did:key (W3C did:key method).
var ed25519Multicodec = [2]byte{0xed, 0x01}

// ErrBadDIDKey is wrapped by DecodeDIDKey and ParseNodeID.
var ErrBadDIDKey = errors.New("not an Ed25519 did:key")

// EncodeDIDKey returns the did:key method-specific id of pub: "z" +
// base58btc(0xed 0x01 ‖ key), the form of key/public.
func EncodeDIDKey(pub ed25519.PublicKey) string {
	buf := make([]byte, 0, 2+ed25519.PublicKeySize)
	buf = append(buf, ed25519Multicodec[:]...)
	buf = append(buf, pub...)
	return "z" + base58.Encode(buf)
}

// DecodeDIDKey parses "z…" (with or without a "did:key:" prefix) into an
// Ed25519 public key. Errors wrap ErrBadDIDKey.
func DecodeDIDKey(s string) (ed25519.PublicKey, error) {
	s = strings.TrimPrefix(s, "did:key:")
	if !strings.HasPrefix(s, "z") {
		return nil, fmt.Errorf("%w: %q lacks the base58btc multibase prefix z", ErrBadDIDKey, short(s))
	}
	raw, err := base58.Decode(s[1:])
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadDIDKey, err)
	}
	if len(raw) != 2+ed25519.PublicKeySize || raw[0] != ed25519Multicodec[0] || raw[1] != ed25519Multicodec[1] {
		return nil, fmt.Errorf("%w: want multicodec 0xed01 and %d key bytes", ErrBadDIDKey, ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(raw[2:]), nil
}

// NodeID returns "node:did:key:" + EncodeDIDKey(pub).
func NodeID(pub ed25519.PublicKey) string { return NodeIDPrefix + EncodeDIDKey(pub) }

// ParseNodeID returns the public key a host/node-id names. The id must
// be NodeID of that key, byte for byte: trust and evidence are looked up
// by the id's string, so one key has one id ("node:did:key:did:key:z…"
// names no key). Errors wrap ErrBadDIDKey.
func ParseNodeID(id string) (ed25519.PublicKey, error) {
	if !strings.HasPrefix(id, NodeIDPrefix) {
		return nil, fmt.Errorf("%w: %q does not start with %q", ErrBadDIDKey, short(id), NodeIDPrefix)
	}
	return decodeCanonicalDIDKey(id[len(NodeIDPrefix):])
}

// decodeCanonicalDIDKey is DecodeDIDKey of s that must be the key's
// method-specific id exactly as EncodeDIDKey writes it ("z…", no
// "did:key:" prefix): the form records and node ids compare as strings.
func decodeCanonicalDIDKey(s string) (ed25519.PublicKey, error) {
	if !strings.HasPrefix(s, "z") {
		return nil, fmt.Errorf("%w: %q is not a did:key method-specific id (z…)", ErrBadDIDKey, short(s))
	}
	pub, err := DecodeDIDKey(s)
	if err != nil {
		return nil, err
	}
	if EncodeDIDKey(pub) != s {
		return nil, fmt.Errorf("%w: %q is not the key's canonical did:key", ErrBadDIDKey, short(s))
	}
	return pub, nil
}

func short(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

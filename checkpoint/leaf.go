package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/transparency-dev/merkle/rfc6962"
)

// leafTag starts every leaf's data, so a leaf can never be
// mistaken for any other roompub hash input.
const leafTag = "roompub-leaf/v1\n"

// ContentHash is SHA-256 of a stored message's data: the canonical bytes on
// the stream.
func ContentHash(data []byte) [32]byte { return sha256.Sum256(data) }

// LeafData is the data of a room's Merkle leaf:
//
//	"roompub-leaf/v1\n" + roomID + "\n" + subject + "\n" + lowercase-hex(content) + "\n"
//
// Room ids and subjects hold no newline (docs/design.md, "Subjects and room
// ids"), which makes the
// encoding injective.
func LeafData(roomID, subject string, content [32]byte) []byte {
	return appendLeafData(make([]byte, 0, len(leafTag)+len(roomID)+len(subject)+2*len(content)+3), roomID, subject, content)
}

func appendLeafData(b []byte, roomID, subject string, content [32]byte) []byte {
	b = append(b, leafTag...)
	b = append(b, roomID...)
	b = append(b, '\n')
	b = append(b, subject...)
	b = append(b, '\n')
	b = hex.AppendEncode(b, content[:])
	return append(b, '\n')
}

// LeafHash is the RFC 6962 leaf hash (SHA-256 of 0x00 || data) of
// LeafData(roomID, subject, content): rfc6962.DefaultHasher.HashLeaf's
// value (TestHashesMatchRFC6962), hashed from a stack buffer when the data
// fits one, as for every leaf of a room whose id is not unusually long,
// instead of a hash state allocated per call (the checkpointer and every
// reader hash each message's leaf, so an allocation per message counts).
func LeafHash(roomID, subject string, content [32]byte) [32]byte {
	var buf [512]byte
	return sha256.Sum256(appendLeafData(append(buf[:0], rfc6962.RFC6962LeafHashPrefix), roomID, subject, content))
}

// NodeHash is the RFC 6962 hash of an interior node, SHA-256(0x01 || l ||
// r): rfc6962.DefaultHasher.HashChildren's value (TestHashesMatchRFC6962)
// without a hash state allocated per call.
func NodeHash(l, r [32]byte) [32]byte {
	var b [1 + 2*sha256.Size]byte
	b[0] = rfc6962.RFC6962NodeHashPrefix
	copy(b[1:], l[:])
	copy(b[1+sha256.Size:], r[:])
	return sha256.Sum256(b[:])
}

// HashChildren is NodeHash in the form merkle/compact and merkle/proof
// call: it returns rfc6962.DefaultHasher.HashChildren(l, r), through
// NodeHash when both are 32 bytes long.
func HashChildren(l, r []byte) []byte {
	if len(l) != sha256.Size || len(r) != sha256.Size {
		return rfc6962.DefaultHasher.HashChildren(l, r)
	}
	h := NodeHash([32]byte(l), [32]byte(r))
	return h[:]
}

// to32 copies a SHA-256 sized slice into an array; shorter input leaves
// zeros (callers check lengths where input is untrusted).
func to32(b []byte) [32]byte {
	var h [32]byte
	copy(h[:], b)
	return h
}

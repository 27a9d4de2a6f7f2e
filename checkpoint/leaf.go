package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/transparency-dev/merkle/rfc6962"
)

// leafTag starts every leaf's data (issue 9), so a leaf can never be
// mistaken for any other roompub hash input.
const leafTag = "roompub-leaf/v1\n"

// ContentHash is SHA-256 of a stored message's data: the canonical bytes on
// the stream (issue 9).
func ContentHash(data []byte) [32]byte { return sha256.Sum256(data) }

// LeafData is the data of a room's Merkle leaf (issue 9):
//
//	"roompub-leaf/v1\n" + roomID + "\n" + subject + "\n" + lowercase-hex(content) + "\n"
//
// Room ids and subjects hold no newline (DESIGN.md), which makes the
// encoding injective.
func LeafData(roomID, subject string, content [32]byte) []byte {
	b := make([]byte, 0, len(leafTag)+len(roomID)+len(subject)+2*len(content)+3)
	b = append(b, leafTag...)
	b = append(b, roomID...)
	b = append(b, '\n')
	b = append(b, subject...)
	b = append(b, '\n')
	b = hex.AppendEncode(b, content[:])
	return append(b, '\n')
}

// LeafHash is the RFC 6962 leaf hash (SHA-256 of 0x00 || data) of
// LeafData(roomID, subject, content).
func LeafHash(roomID, subject string, content [32]byte) [32]byte {
	return to32(rfc6962.DefaultHasher.HashLeaf(LeafData(roomID, subject, content)))
}

// to32 copies a SHA-256 sized slice into an array; shorter input leaves
// zeros (callers check lengths where input is untrusted).
func to32(b []byte) [32]byte {
	var h [32]byte
	copy(h[:], b)
	return h
}

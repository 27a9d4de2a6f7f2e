package checkpoint

import (
	"bytes"
	"crypto/ed25519"
	"testing"

	"github.com/roompub/roompub/events"
)

// testKey returns a deterministic host key; different b, different key.
func testKey(b byte) *events.HostKey {
	return events.NewHostKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{b}, ed25519.SeedSize)))
}

func mustTrust(t testing.TB, ids ...string) *Trust {
	t.Helper()
	tr, err := NewTrust(ids...)
	if err != nil {
		t.Fatalf("NewTrust: %v", err)
	}
	return tr
}

func mustSigner(t testing.TB, k *events.HostKey) interface {
	Name() string
	KeyHash() uint32
	Sign([]byte) ([]byte, error)
} {
	t.Helper()
	s, err := NewNoteSigner(k)
	if err != nil {
		t.Fatalf("NewNoteSigner: %v", err)
	}
	return s
}

// leafN is the leaf hash of the n-th message of a test room.
func leafN(room string, n int) [32]byte {
	return LeafHash(room, "roompub.r.journal.x", ContentHash([]byte{byte(n), byte(n >> 8), byte(n >> 16)}))
}

// treeOf returns a tree of the first n leaves of room.
func treeOf(room string, n int) *Tree {
	tr := NewTree()
	for i := range n {
		tr.Append(leafN(room, i))
	}
	return tr
}

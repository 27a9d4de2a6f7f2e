package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/transparency-dev/merkle/rfc6962"
)

func TestLeafData(t *testing.T) {
	c := ContentHash([]byte("hello\n"))
	if got, want := hex.EncodeToString(c[:]), "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"; got != want {
		t.Fatalf("ContentHash = %s, want %s", got, want)
	}
	got := string(LeafData("room:a/b.c", "roompub.cm9vbTphL2IuYw.journal.x", c))
	want := "roompub-leaf/v1\nroom:a/b.c\nroompub.cm9vbTphL2IuYw.journal.x\n5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03\n"
	if got != want {
		t.Fatalf("LeafData =\n%q\nwant\n%q", got, want)
	}
	// RFC 6962 section 2.1: MTH({d}) = SHA-256(0x00 || d).
	wantLeaf := sha256.Sum256(append([]byte{0}, want...))
	if got := LeafHash("room:a/b.c", "roompub.cm9vbTphL2IuYw.journal.x", c); got != wantLeaf {
		t.Fatalf("LeafHash = %x, want %x", got, wantLeaf)
	}
}

func TestLeafHashBindsEveryField(t *testing.T) {
	c := ContentHash([]byte("x"))
	base := LeafHash("room:a", "s.journal", c)
	c2 := c
	c2[31] ^= 1
	for name, h := range map[string][32]byte{
		"room":    LeafHash("room:b", "s.journal", c),
		"subject": LeafHash("room:a", "s.exec", c),
		"content": LeafHash("room:a", "s.journal", c2),
		"shift":   LeafHash("room:a\ns", "journal", c),
	} {
		if h == base {
			t.Errorf("changing %s left the leaf hash unchanged", name)
		}
	}
}

func TestPositions(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{JournalPosition(0), "seq:0"},
		{JournalPosition(12345), "seq:12345"},
		{RecordPosition(0), "index:0"},
		{RecordPosition(18446744073709551615), "index:18446744073709551615"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// TestHashesMatchRFC6962: LeafHash, NodeHash and HashChildren, which hash
// without allocating a hash state, give merkle/rfc6962's values: leaves of
// room ids from empty to longer than the stack buffer (so both of
// LeafHash's paths), interior nodes of random hashes, and HashChildren's
// fallback for inputs that are not 32 bytes.
func TestHashesMatchRFC6962(t *testing.T) {
	rng := rand.New(rand.NewPCG(6962, 8))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	for _, n := range []int{0, 1, 7, 100, 400, 460, 470, 600, 3000} {
		roomID := "room:" + strings.Repeat("é", n/2)
		subject := "rooms." + strings.Repeat("x", n) + ".exec"
		content := [32]byte(random(32))
		want := rfc6962.DefaultHasher.HashLeaf(LeafData(roomID, subject, content))
		if got := LeafHash(roomID, subject, content); !bytes.Equal(got[:], want) {
			t.Errorf("leaf of a %d-byte room id: %x, rfc6962 %x", len(roomID), got, want)
		}
	}
	for range 200 {
		l, r := [32]byte(random(32)), [32]byte(random(32))
		want := rfc6962.DefaultHasher.HashChildren(l[:], r[:])
		if got := NodeHash(l, r); !bytes.Equal(got[:], want) {
			t.Fatalf("node %x %x: %x, rfc6962 %x", l, r, got, want)
		}
		if got := HashChildren(l[:], r[:]); !bytes.Equal(got, want) {
			t.Fatalf("HashChildren %x %x: %x, rfc6962 %x", l, r, got, want)
		}
	}
	for _, lens := range [][2]int{{0, 0}, {31, 32}, {32, 33}, {64, 1}} {
		l, r := random(lens[0]), random(lens[1])
		if got, want := HashChildren(l, r), rfc6962.DefaultHasher.HashChildren(l, r); !bytes.Equal(got, want) {
			t.Errorf("HashChildren of %d and %d bytes: %x, rfc6962 %x", lens[0], lens[1], got, want)
		}
	}
}

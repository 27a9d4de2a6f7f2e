package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
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

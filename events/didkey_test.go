package events_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"github.com/mr-tron/base58"

	"github.com/roompub/roompub/events"
)

func TestDIDKeyRoundTrip(t *testing.T) {
	for range 20 {
		pub, _, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		s := events.EncodeDIDKey(pub)
		if !strings.HasPrefix(s, "z6Mk") {
			t.Errorf("EncodeDIDKey = %s, want the z6Mk prefix of an Ed25519 did:key", s)
		}
		got, err := events.DecodeDIDKey(s)
		if err != nil {
			t.Fatalf("DecodeDIDKey(%s): %v", s, err)
		}
		if !got.Equal(pub) {
			t.Fatalf("DecodeDIDKey(EncodeDIDKey(k)) = %x, want %x", got, pub)
		}
		if got, err := events.DecodeDIDKey("did:key:" + s); err != nil || !got.Equal(pub) {
			t.Errorf("DecodeDIDKey(did:key:%s) = %x, %v", s, got, err)
		}
		id := events.NodeID(pub)
		if id != "node:did:key:"+s {
			t.Errorf("NodeID = %s", id)
		}
		if got, err := events.ParseNodeID(id); err != nil || !got.Equal(pub) {
			t.Errorf("ParseNodeID(%s) = %x, %v", id, got, err)
		}
	}
}

func TestDIDKeyReferenceHost(t *testing.T) {
	pub, err := events.DecodeDIDKey(refHostDIDKey)
	if err != nil {
		t.Fatal(err)
	}
	if len(pub) != ed25519.PublicKeySize {
		t.Fatalf("%d key bytes", len(pub))
	}
	if got := events.EncodeDIDKey(pub); got != refHostDIDKey {
		t.Errorf("re-encoded %s, want %s", got, refHostDIDKey)
	}
	// key/public of verified.json is the key that signed it.
	rec, err := events.ParseRecord(readRef(t, "execution-records", "verified.json"))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Signature().KeyPublic != refHostDIDKey {
		t.Fatalf("verified.json key/public %s", rec.Signature().KeyPublic)
	}
	if got, err := events.ParseNodeID(rec.HostNodeID()); err != nil || !got.Equal(pub) {
		t.Errorf("ParseNodeID(host/node-id) = %x, %v", got, err)
	}
}

func TestDecodeDIDKeyRefuses(t *testing.T) {
	hk, _ := seededKey(5)
	key := []byte(hk.Public())
	enc := func(prefix []byte, body []byte) string {
		return "z" + base58.Encode(append(bytes.Clone(prefix), body...))
	}
	tests := []struct{ name, in string }{
		{"empty", ""},
		{"no multibase prefix", strings.TrimPrefix(hk.DIDKey(), "z")},
		{"base64 multibase", "m" + hk.DIDKey()[1:]},
		{"upper-case Z", "Z" + hk.DIDKey()[1:]},
		{"not base58", "z6Mk0OIl"},
		{"only z", "z"},
		{"x25519 multicodec", enc([]byte{0xec, 0x01}, key)},
		{"secp256k1 multicodec", enc([]byte{0xe7, 0x01}, append(key, 0))},
		{"no multicodec", enc(nil, key)},
		{"31 key bytes", enc([]byte{0xed, 0x01}, key[:31])},
		{"33 key bytes", enc([]byte{0xed, 0x01}, append(bytes.Clone(key), 0))},
		{"did:web", "did:web:example.com"},
		{"double did:key prefix", "did:key:did:key:" + hk.DIDKey()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := events.DecodeDIDKey(tt.in)
			if !errors.Is(err, events.ErrBadDIDKey) || got != nil {
				t.Errorf("DecodeDIDKey(%q) = %x, %v; want nil, ErrBadDIDKey", tt.in, got, err)
			}
		})
	}
	for _, id := range []string{"", hk.DIDKey(), "did:key:" + hk.DIDKey(), "node:did:web:x", "node:did:key:zzz", "NODE:did:key:" + hk.DIDKey(),
		"node:did:key:did:key:" + hk.DIDKey(), events.NodeID(hk.Public()) + " ", "node:did:key: " + hk.DIDKey()} {
		if _, err := events.ParseNodeID(id); !errors.Is(err, events.ErrBadDIDKey) {
			t.Errorf("ParseNodeID(%q) error = %v, want ErrBadDIDKey", id, err)
		}
	}
}

// FuzzParseNodeID: a host/node-id from a record or a flag names an
// Ed25519 key or is refused (ErrBadDIDKey) without a panic, and an id
// that parses is the canonical id of the key it names (NodeID): one key,
// one id, since trust is looked up by the id's string.
func FuzzParseNodeID(f *testing.F) {
	f.Add("node:did:key:z6MkqB3fVxzXFbVUK2q1GPrLQzaxgwDGGVuxkDzaf5tsLnpo")
	f.Add("node:did:key:z")
	f.Add("node:did:key:did:key:z6Mk")
	f.Add("z6MkqB3fVxzXFbVUK2q1GPrLQzaxgwDGGVuxkDzaf5tsLnpo")
	f.Fuzz(func(t *testing.T, id string) {
		pub, err := events.ParseNodeID(id)
		if err != nil {
			if !errors.Is(err, events.ErrBadDIDKey) {
				t.Fatalf("ParseNodeID(%q): %v does not wrap ErrBadDIDKey", id, err)
			}
			return
		}
		if len(pub) != ed25519.PublicKeySize {
			t.Fatalf("ParseNodeID(%q): a key of %d bytes", id, len(pub))
		}
		if canon := events.NodeID(pub); canon != id {
			t.Fatalf("ParseNodeID(%q) parsed, but the key's id is %q", id, canon)
		}
		back, err := events.ParseNodeID(events.NodeID(pub))
		if err != nil || !bytes.Equal(back, pub) {
			t.Fatalf("ParseNodeID(%q): its canonical id %q names %x, %v", id, events.NodeID(pub), back, err)
		}
	})
}

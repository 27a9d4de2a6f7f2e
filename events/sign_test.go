package events_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/roompub/roompub/events"
)

// signingMessage is seed 004's m, written out independently of the package.
func signingMessage(domain string, payload []byte) []byte {
	var b bytes.Buffer
	b.WriteString("orbiplex-sig-v1\x00")
	b.Write(binary.BigEndian.AppendUint32(nil, uint32(len(domain))))
	b.WriteString(domain)
	b.Write(binary.BigEndian.AppendUint64(nil, uint64(len(payload))))
	b.Write(payload)
	sum := sha256.Sum256(b.Bytes())
	return sum[:]
}

func TestSigningMessage(t *testing.T) {
	for _, payload := range [][]byte{nil, []byte("{}"), bytes.Repeat([]byte("p"), 70_000)} {
		m := events.SigningMessage(events.ExecutionDomain, payload)
		if want := signingMessage(events.ExecutionDomain, payload); !bytes.Equal(m[:], want) {
			t.Errorf("SigningMessage(len %d) = %x, want %x", len(payload), m, want)
		}
	}
	// The lengths are framed: moving a byte from domain to payload changes m.
	a := events.SigningMessage("ab", []byte("c"))
	b := events.SigningMessage("a", []byte("bc"))
	if a == b {
		t.Error("domain and payload are not length-framed")
	}
}

func TestReferenceSignaturesVerify(t *testing.T) {
	for _, name := range []string{"verified.json", "refused.json", "foreign-evidence.json"} {
		t.Run(name, func(t *testing.T) {
			rec, err := events.ParseRecord(readRef(t, "execution-records", name))
			if err != nil {
				t.Fatal(err)
			}
			if err := events.VerifySignature(rec.Signature(), events.ExecutionDomain, rec.SigningPayload()); err != nil {
				t.Fatalf("upstream signature does not verify: %v", err)
			}
			if err := events.VerifySignature(rec.Signature(), "another-domain.v1", rec.SigningPayload()); !errors.Is(err, events.ErrBadSignature) {
				t.Errorf("verifies in another domain: %v", err)
			}
		})
	}
}

func TestSignRecordRoundTrip(t *testing.T) {
	key, priv := seededKey(1)
	m := members(t, readRef(t, "execution-records", "verified.json"))
	before, err := events.CanonicalWithout(m)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := events.SignRecord(m, key)
	if err != nil {
		t.Fatal(err)
	}
	if after, err := events.CanonicalWithout(m); err != nil || !bytes.Equal(after, before) {
		t.Error("SignRecord modified its argument")
	}
	if rec.HostNodeID() != key.NodeID() || rec.HostNodeID() != "node:did:key:"+key.DIDKey() {
		t.Errorf("host/node-id %s, want %s", rec.HostNodeID(), key.NodeID())
	}
	sig := rec.Signature()
	if sig.Alg != "ed25519+domain-v1" || sig.KeyPublic != key.DIDKey() || len(sig.Value) != 86 {
		t.Errorf("signature %+v", sig)
	}
	if rec.ExecutionRef() != rec.ComputedRef() {
		t.Errorf("execution/ref %s, computed %s", rec.ExecutionRef(), rec.ComputedRef())
	}
	if err := events.VerifySignature(sig, events.ExecutionDomain, rec.SigningPayload()); err != nil {
		t.Fatalf("round trip: %v", err)
	}
	// The signature is plain Ed25519 over m, checkable without this package.
	raw, err := base64.RawURLEncoding.DecodeString(sig.Value)
	if err != nil {
		t.Fatal(err)
	}
	if !ed25519.Verify(priv.Public().(ed25519.PublicKey), signingMessage(events.ExecutionDomain, rec.SigningPayload()), raw) {
		t.Error("signature does not verify with crypto/ed25519 over an independently built message")
	}
	// Deterministic: the same members and key give the same bytes.
	again, err := events.SignRecord(rec.Object(), key)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Canonical(), rec.Canonical()) {
		t.Error("re-signing a signed record changed it")
	}
	// The record is already canonical JSON.
	canon, err := events.Canonicalize(rec.Canonical())
	if err != nil || !bytes.Equal(canon, rec.Canonical()) {
		t.Errorf("Canonical() is not canonical: %v", err)
	}
}

func TestVerifySignatureRefuses(t *testing.T) {
	key, _ := seededKey(2)
	other, _ := seededKey(3)
	rec, err := events.SignRecord(members(t, readRef(t, "execution-records", "verified.json")), key)
	if err != nil {
		t.Fatal(err)
	}
	good := rec.Signature()
	payload := rec.SigningPayload()
	lastFlipped := []byte(good.Value)
	// The last of 86 characters carries 2 bits and 4 zero padding bits:
	// a strict decoder refuses a non-zero padding bit.
	lastFlipped[85] = base64URLFlipPadding(lastFlipped[85])

	tests := []struct {
		name    string
		sig     events.Signature
		payload []byte
		domain  string
		want    error
	}{
		{"other alg", events.Signature{Alg: "ed25519", Value: good.Value, KeyPublic: good.KeyPublic}, payload, events.ExecutionDomain, events.ErrBadSignature},
		{"other key", events.Signature{Alg: good.Alg, Value: good.Value, KeyPublic: other.DIDKey()}, payload, events.ExecutionDomain, events.ErrBadSignature},
		{"bad key", events.Signature{Alg: good.Alg, Value: good.Value, KeyPublic: "z6Mk"}, payload, events.ExecutionDomain, events.ErrBadDIDKey},
		// The signature signs no key/public: a prefix would give the key
		// a second host/node-id ("node:did:key:did:key:z…").
		{"did:key: prefixed key", events.Signature{Alg: good.Alg, Value: good.Value, KeyPublic: "did:key:" + good.KeyPublic}, payload, events.ExecutionDomain, events.ErrBadDIDKey},
		{"padded value", events.Signature{Alg: good.Alg, Value: good.Value + "==", KeyPublic: good.KeyPublic}, payload, events.ExecutionDomain, events.ErrBadSignature},
		{"std base64 value", events.Signature{Alg: good.Alg, Value: strings.NewReplacer("-", "+", "_", "/").Replace(good.Value) + "+", KeyPublic: good.KeyPublic}, payload, events.ExecutionDomain, events.ErrBadSignature},
		{"short value", events.Signature{Alg: good.Alg, Value: good.Value[:84], KeyPublic: good.KeyPublic}, payload, events.ExecutionDomain, events.ErrBadSignature},
		{"padding bit set", events.Signature{Alg: good.Alg, Value: string(lastFlipped), KeyPublic: good.KeyPublic}, payload, events.ExecutionDomain, events.ErrBadSignature},
		{"empty", events.Signature{}, payload, events.ExecutionDomain, events.ErrBadSignature},
		{"other domain", good, payload, "corpus-experiment-task-pack-execution.v2", events.ErrBadSignature},
		{"payload with a space", good, append([]byte(" "), payload...), events.ExecutionDomain, events.ErrBadSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := events.VerifySignature(tt.sig, tt.domain, tt.payload); !errors.Is(err, tt.want) {
				t.Errorf("VerifySignature = %v, want %v", err, tt.want)
			}
		})
	}
	if err := events.VerifySignature(good, events.ExecutionDomain, payload); err != nil {
		t.Fatalf("control: %v", err)
	}
	t.Run("every byte of the payload", func(t *testing.T) {
		p := bytes.Clone(payload)
		for i := range p {
			p[i] ^= 0x01
			if err := events.VerifySignature(good, events.ExecutionDomain, p); !errors.Is(err, events.ErrBadSignature) {
				t.Fatalf("flipping payload byte %d: %v", i, err)
			}
			p[i] ^= 0x01
		}
	})
}

// base64URLFlipPadding returns the base64url character whose 6-bit value
// differs from c's in its lowest bit.
func base64URLFlipPadding(c byte) byte {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	return alphabet[strings.IndexByte(alphabet, c)^1]
}

func TestSignRecordReplacesSignerFields(t *testing.T) {
	key, _ := seededKey(4)
	m := members(t, readRef(t, "execution-records", "verified.json"))
	m["room/id"] = "room:other"
	rec, err := events.SignRecord(m, key)
	if err != nil {
		t.Fatal(err)
	}
	if rec.HostNodeID() == "node:did:key:"+refHostDIDKey || rec.ExecutionRef() == "corpus-task-pack-execution:sha256:PEaap8mlrUCWgXaNN_ov8LMrV0U6McBdaRiHIbFzaS0" {
		t.Error("SignRecord kept the old host/node-id or execution/ref")
	}
	if rec.RoomID() != "room:other" {
		t.Errorf("room/id %s", rec.RoomID())
	}
	if err := events.VerifySignature(rec.Signature(), events.ExecutionDomain, rec.SigningPayload()); err != nil {
		t.Fatal(err)
	}
}

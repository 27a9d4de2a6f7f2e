package checkpoint

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"
	"weak"

	"github.com/roompub/roompub/events"
)

const (
	tRoom    = "room:test/a.b"
	tSubject = "roompub.cm9vbTp0ZXN0L2EuYg.journal.cnVu.Y2Fw"
)

func TestAttestRoundTrip(t *testing.T) {
	k := testKey(1)
	c := ContentHash([]byte(`{"seq":0}` + "\n"))
	pos := JournalPosition(0)
	h := Attest(k, tRoom, tSubject, pos, c)

	f := strings.Split(h, " ")
	if len(f) != 3 || f[0] != k.NodeID() || len(f[1]) != 86 || f[2] != "0/1" {
		t.Fatalf("header %q: want %q, 86 characters and 0/1, one space apart", h, k.NodeID())
	}
	// The signed message is exactly the batch format's for one statement,
	// signed by plain Ed25519.
	raw, err := base64.RawURLEncoding.DecodeString(f[1])
	if err != nil {
		t.Fatal(err)
	}
	stmt := sha256.Sum256([]byte(tRoom + "\n" + tSubject + "\nseq:0\n" + hex.EncodeToString(c[:]) + "\n"))
	full := "roompub-attestation/v1\n1\n" + hex.EncodeToString(stmt[:]) + "\n"
	if !ed25519.Verify(k.Public(), []byte(full), raw) {
		t.Fatal("signature is not Ed25519 over the attested batch message")
	}

	tr := mustTrust(t, k.NodeID())
	signer, err := tr.VerifyAttestation(h, tRoom, tSubject, pos, c)
	if err != nil || signer != k.NodeID() {
		t.Fatalf("VerifyAttestation = %q, %v; want %q, nil", signer, err, k.NodeID())
	}
	if got, err := tr.AttestationSigner(h); err != nil || got != k.NodeID() {
		t.Fatalf("AttestationSigner = %q, %v", got, err)
	}
	// Deterministic (Ed25519): the same inputs give the same header.
	if h2 := Attest(k, tRoom, tSubject, pos, c); h2 != h {
		t.Fatal("Attest is not deterministic")
	}
	if got := HeaderLen(k.NodeID(), 0, 1, FormCompact); got != len(h) {
		t.Fatalf("HeaderLen = %d, header is %d", got, len(h))
	}
}

func TestAttestationBindsEveryField(t *testing.T) {
	k := testKey(1)
	tr := mustTrust(t, k.NodeID())
	c := ContentHash([]byte("entry"))
	c2 := c
	c2[0] ^= 0x80
	h := Attest(k, tRoom, tSubject, RecordPosition(7), c)
	for _, tc := range []struct {
		name               string
		room, subject, pos string
		content            [32]byte
	}{
		{"room", "room:test/a.c", tSubject, RecordPosition(7), c},
		{"subject", tRoom, tSubject + ".x", RecordPosition(7), c},
		{"position index", tRoom, tSubject, RecordPosition(8), c},
		{"position kind", tRoom, tSubject, "seq:7", c},
		{"content", tRoom, tSubject, RecordPosition(7), c2},
		{"newline in room", tRoom + "\n", tSubject, RecordPosition(7), c},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tr.VerifyAttestation(h, tc.room, tc.subject, tc.pos, tc.content)
			if !errors.Is(err, ErrBadAttestation) {
				t.Fatalf("err = %v, want ErrBadAttestation", err)
			}
		})
	}
}

func TestAttestationUntrusted(t *testing.T) {
	k1, k2 := testKey(1), testKey(2)
	c := ContentHash([]byte("entry"))
	h := Attest(k2, tRoom, tSubject, JournalPosition(3), c)
	for name, tr := range map[string]*Trust{
		"other key": mustTrust(t, k1.NodeID()),
		"empty":     mustTrust(t),
		"nil":       nil,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := tr.VerifyAttestation(h, tRoom, tSubject, JournalPosition(3), c); !errors.Is(err, ErrUntrustedPublisher) {
				t.Fatalf("VerifyAttestation err = %v, want ErrUntrustedPublisher", err)
			}
			if _, err := tr.AttestationSigner(h); !errors.Is(err, ErrUntrustedPublisher) {
				t.Fatalf("AttestationSigner err = %v, want ErrUntrustedPublisher", err)
			}
		})
	}
	// A header naming a trusted key but carrying another key's signature.
	forged := k1.NodeID() + h[strings.IndexByte(h, ' '):]
	if _, err := mustTrust(t, k1.NodeID(), k2.NodeID()).VerifyAttestation(forged, tRoom, tSubject, JournalPosition(3), c); !errors.Is(err, ErrBadAttestation) {
		t.Fatalf("forged: err = %v, want ErrBadAttestation", err)
	}
}

func TestAttestationMalformed(t *testing.T) {
	k := testKey(1)
	tr := mustTrust(t, k.NodeID())
	c := ContentHash([]byte("entry"))
	h := Attest(k, tRoom, tSubject, JournalPosition(0), c)
	f := strings.Split(h, " ")
	id, sig := f[0], f[1]
	if _, err := tr.VerifyAttestation("", tRoom, tSubject, JournalPosition(0), c); !errors.Is(err, ErrNoAttestation) {
		t.Fatalf("empty: err = %v, want ErrNoAttestation", err)
	}
	if _, err := ParseAttestation(""); err != ErrNoAttestation {
		t.Fatalf("ParseAttestation(\"\") err = %v, want ErrNoAttestation", err)
	}
	flipped := []byte(sig)
	flipped[10] ^= 'A' ^ 'B'
	if flipped[10] == sig[10] {
		flipped[10] = 'C'
	}
	for name, hv := range map[string]string{
		"no space":         id + sig + " 0/1",
		"two spaces":       id + "  " + sig + " 0/1",
		"two spaces after": id + " " + sig + "  0/1",
		"trailing space":   h + " ",
		"leading space":    " " + h,
		"four fields":      h + " x",
		"old form":         id + " " + sig,
		"only id":          id,
		"only id, space":   id + " ",
		"not a node id":    "did:key:" + strings.TrimPrefix(id, events.NodeIDPrefix) + " " + sig + " 0/1",
		"padded":           id + " " + sig + "== 0/1",
		"std base64":       id + " " + strings.NewReplacer("-", "+", "_", "/").Replace(sig) + " 0/1",
		"short signature":  id + " " + sig[:85] + " 0/1",
		"long signature":   id + " " + sig + "A 0/1",
		"not base64":       id + " " + strings.Repeat("!", 86) + " 0/1",
		"nonzero pad bits": id + " " + sig[:85] + nonCanonicalLast(sig[85]) + " 0/1",
		"flipped":          id + " " + string(flipped) + " 0/1",
		"index 1 of 1":     id + " " + sig + " 1/1",
		"index = count":    id + " " + sig + " 2/2",
		"count 0":          id + " " + sig + " 0/0",
		"leading zero i":   id + " " + sig + " 00/1",
		"leading zero n":   id + " " + sig + " 0/01",
		"plus sign":        id + " " + sig + " +0/1",
		"negative":         id + " " + sig + " -1/1",
		"no slash":         id + " " + sig + " 01",
		"two slashes":      id + " " + sig + " 0/1/1",
		"empty index":      id + " " + sig + " /1",
		"empty count":      id + " " + sig + " 0/",
		"count too large":  id + " " + sig + " 0/1000001",
		"long count":       id + " " + sig + " 0/10000000",
		"hex":              id + " " + sig + " 0/a",
		"tab":              id + " " + sig + "\t0/1",
	} {
		t.Run(name, func(t *testing.T) {
			if name == "std base64" && !strings.ContainsAny(sig, "-_") {
				t.Skip("signature has no base64url-only characters")
			}
			_, err := tr.VerifyAttestation(hv, tRoom, tSubject, JournalPosition(0), c)
			if !errors.Is(err, ErrBadAttestation) {
				t.Fatalf("VerifyAttestation err = %v, want ErrBadAttestation", err)
			}
			if name == "flipped" {
				return // well-formed; only the signature is wrong
			}
			if _, err := ParseAttestation(hv); !errors.Is(err, ErrBadAttestation) {
				t.Fatalf("ParseAttestation err = %v, want ErrBadAttestation", err)
			}
			if _, err := tr.AttestationSigner(hv); !errors.Is(err, ErrBadAttestation) {
				t.Fatalf("AttestationSigner err = %v, want ErrBadAttestation", err)
			}
		})
	}
	// The largest batch is allowed.
	a, err := ParseAttestation(id + " " + sig + " 999999/1000000")
	if err != nil || a.Index != 999999 || a.Count != MaxBatch || a.Signer != id {
		t.Fatalf("ParseAttestation of the largest batch = %+v, %v", a, err)
	}
}

// nonCanonicalLast returns a last character that encodes the same final 4
// data bits as c with unused low bits set, which strict base64
// decoding must refuse.
func nonCanonicalLast(c byte) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	i := strings.IndexByte(alphabet, c)
	return string(alphabet[i|3])
}

func TestNewTrust(t *testing.T) {
	k1, k2 := testKey(1), testKey(2)
	tr := mustTrust(t, k2.NodeID(), k1.NodeID(), k2.NodeID())
	if tr.Len() != 2 {
		t.Fatalf("Len = %d, want 2 (duplicates collapse)", tr.Len())
	}
	if !tr.Trusts(k1.NodeID()) || tr.Trusts(testKey(3).NodeID()) {
		t.Fatal("Trusts is wrong")
	}
	if got := mustTrust(t).Len(); got != 0 {
		t.Fatalf("empty Len = %d", got)
	}
	var nilTrust *Trust
	if nilTrust.Len() != 0 {
		t.Fatal("nil Len")
	}
	id := k1.NodeID()
	for name, bad := range map[string]string{
		"empty":       "",
		"did key":     strings.TrimPrefix(id, "node:"),
		"bad base58":  id[:len(id)-1] + "0",
		"short":       id[:len(id)-2],
		"space":       id + " ",
		"wrong codec": events.NodeIDPrefix + "z6LS" + id[len(events.NodeIDPrefix)+4:],
	} {
		if _, err := NewTrust(k2.NodeID(), bad); !errors.Is(err, events.ErrBadDIDKey) {
			t.Errorf("%s: NewTrust(%q) err = %v, want ErrBadDIDKey", name, bad, err)
		}
	}
}

// TestKeyCache checks that the cached key is the key (two HostKey values of
// one key attest identically) and that a collected HostKey leaves the
// cache.
func TestKeyCache(t *testing.T) {
	c := ContentHash([]byte("x"))
	a, b := testKey(9), testKey(9)
	if Attest(a, tRoom, tSubject, "seq:1", c) != Attest(b, tRoom, tSubject, "seq:1", c) {
		t.Fatal("one key, two headers")
	}
	var wp weak.Pointer[events.HostKey]
	func() {
		k := testKey(10)
		_ = Attest(k, tRoom, tSubject, "seq:1", c)
		wp = weak.Make(k)
	}()
	if _, ok := hostKeys.Load(wp); !ok {
		t.Fatal("Attest did not cache the key")
	}
	cached := true
	for i := 0; i < 100 && cached; i++ {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
		_, cached = hostKeys.Load(wp)
	}
	if cached {
		t.Fatal("the cache kept a collected key")
	}
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
}

// TestJournalPositionOwner: the owner an OwnedJournalPosition names, and
// what is no journal position.
func TestJournalPositionOwner(t *testing.T) {
	for _, tc := range []struct {
		pos   string
		owner string
		ok    bool
	}{
		{OwnedJournalPosition(7, ""), "", true},
		{OwnedJournalPosition(7, "alice"), "alice", true},
		{OwnedJournalPosition(0, "a b"), "a b", true},
		{"seq:7 owner:", "", false},
		{"seq:07", "", false},
		{"seq:", "", false},
		{"seq:x owner:alice", "", false},
		{RecordPosition(7), "", false},
		{NoticePosition, "", false},
		{"", "", false},
	} {
		if owner, ok := JournalPositionOwner(tc.pos); owner != tc.owner || ok != tc.ok {
			t.Errorf("JournalPositionOwner(%q) = %q, %v; want %q, %v", tc.pos, owner, ok, tc.owner, tc.ok)
		}
	}
}

// TestAttestationOf: a message's attestation header is its one value;
// several are joined by ", ", which ParseAttestation refuses
// (TestCheckpointerTwoAttestationValues), so no role admits a message on
// the first of its values.
func TestAttestationOf(t *testing.T) {
	const v = "node:did:key:z6Mk 1/2"
	for _, c := range []struct {
		h    map[string][]string
		want string
	}{
		{nil, ""},
		{map[string][]string{AttestationHeader: {v}}, v},
		{map[string][]string{AttestationHeader: {v, "junk"}}, v + ", junk"},
		{map[string][]string{"roompub-attestation": {v}}, ""}, // header names are exact in NATS
	} {
		if got := AttestationOf(c.h); got != c.want {
			t.Errorf("AttestationOf(%v) = %q, want %q", c.h, got, c.want)
		}
	}
}

package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/transparency-dev/formats/log"
	"golang.org/x/mod/sumdb/note"
)

func TestCheckpointRoundTrip(t *testing.T) {
	k := testKey(1)
	s := mustSigner(t, k)
	root := sha256.Sum256([]byte("root"))
	signed, err := Sign(s, tRoom, 1234, root)
	if err != nil {
		t.Fatal(err)
	}
	// C2SP tlog-checkpoint body, then a blank line and one signature line.
	wantBody := fmt.Sprintf("%s\n1234\n%s\n\n— %s ", tRoom, base64.StdEncoding.EncodeToString(root[:]), k.NodeID())
	if !bytes.HasPrefix(signed, []byte(wantBody)) {
		t.Fatalf("note =\n%s\nwant prefix\n%s", signed, wantBody)
	}
	c, err := Parse(signed, tRoom, mustTrust(t, k.NodeID()))
	if err != nil {
		t.Fatal(err)
	}
	if c.Room != tRoom || c.Size != 1234 || c.Root != root || c.Signer != k.NodeID() || !bytes.Equal(c.Note, signed) {
		t.Fatalf("Parse = %+v", c)
	}
	u, err := ParseUnverified(signed)
	if err != nil {
		t.Fatal(err)
	}
	if u.Room != tRoom || u.Size != 1234 || u.Root != root || u.Signer != k.NodeID() {
		t.Fatalf("ParseUnverified = %+v", u)
	}
	// Ed25519 is deterministic, so is the note.
	again, _ := Sign(s, tRoom, 1234, root)
	if !bytes.Equal(again, signed) {
		t.Fatal("Sign is not deterministic")
	}
}

// TestNoteKeyInterop checks the key name and hash against x/mod's own
// Ed25519 verifier key (C2SP signed-note): a note signed by NewNoteSigner
// opens under note.NewVerifier(note.NewEd25519VerifierKey(node id, pub)).
func TestNoteKeyInterop(t *testing.T) {
	k := testKey(5)
	s := mustSigner(t, k)
	vkey, err := note.NewEd25519VerifierKey(k.NodeID(), k.Public())
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	if s.Name() != k.NodeID() || s.KeyHash() != v.KeyHash() {
		t.Fatalf("signer %s/%08x, x/mod verifier %s/%08x", s.Name(), s.KeyHash(), v.Name(), v.KeyHash())
	}
	// The key hash per C2SP signed-note: SHA-256(name || "\n" || 0x01 || pub)[:4].
	sum := sha256.Sum256(append(append([]byte(k.NodeID()+"\n"), 0x01), k.Public()...))
	if want := uint32(sum[0])<<24 | uint32(sum[1])<<16 | uint32(sum[2])<<8 | uint32(sum[3]); s.KeyHash() != want {
		t.Fatalf("key hash %08x, want %08x", s.KeyHash(), want)
	}
	signed, err := Sign(s, tRoom, 1, sha256.Sum256(nil))
	if err != nil {
		t.Fatal(err)
	}
	n, err := note.Open(signed, note.VerifierList(v))
	if err != nil || len(n.Sigs) != 1 || n.Sigs[0].Name != k.NodeID() {
		t.Fatalf("note.Open = %+v, %v", n, err)
	}
	// formats/log's own checkpoint parser accepts it too.
	lc, _, _, err := log.ParseCheckpoint(signed, tRoom, v)
	if err != nil || lc.Size != 1 || lc.Origin != tRoom {
		t.Fatalf("log.ParseCheckpoint = %+v, %v", lc, err)
	}
	ours, err := NewNoteVerifier(k.NodeID())
	if err != nil || ours.Name() != v.Name() || ours.KeyHash() != v.KeyHash() {
		t.Fatalf("NewNoteVerifier = %v, %v", ours, err)
	}
	if _, err := NewNoteVerifier("node:did:key:zzz"); err == nil {
		t.Fatal("NewNoteVerifier accepted a bad node id")
	}
}

func TestCheckpointRefused(t *testing.T) {
	k1, k2 := testKey(1), testKey(2)
	s1, s2 := mustSigner(t, k1), mustSigner(t, k2)
	root := sha256.Sum256([]byte("root"))
	signed, err := Sign(s1, tRoom, 10, root)
	if err != nil {
		t.Fatal(err)
	}
	trust1 := mustTrust(t, k1.NodeID())

	if _, err := Parse(signed, "room:test/a.c", trust1); !errors.Is(err, ErrBadCheckpoint) {
		t.Errorf("wrong origin: err = %v, want ErrBadCheckpoint", err)
	}
	if _, err := Parse(signed, tRoom, mustTrust(t, k2.NodeID())); !errors.Is(err, ErrUntrustedPublisher) {
		t.Errorf("untrusted: err = %v, want ErrUntrustedPublisher", err)
	}
	if _, err := Parse(signed, tRoom, nil); !errors.Is(err, ErrUntrustedPublisher) {
		t.Errorf("nil trust: err = %v, want ErrUntrustedPublisher", err)
	}
	// Tampered body: size 10 -> 11 under the same signature.
	tampered := bytes.Replace(signed, []byte("\n10\n"), []byte("\n11\n"), 1)
	if _, err := Parse(tampered, tRoom, trust1); !errors.Is(err, ErrBadCheckpoint) {
		t.Errorf("tampered: err = %v, want ErrBadCheckpoint", err)
	}
	// A flipped byte of the root hash line.
	i := bytes.Index(signed, []byte("\n\n")) - 3
	flipped := bytes.Clone(signed)
	flipped[i] ^= 'A' ^ 'B'
	if _, err := Parse(flipped, tRoom, trust1); err == nil {
		t.Errorf("flipped root byte: accepted")
	}

	// Two signatures, only the second trusted: accepted, Signer is it.
	both, err := note.Sign(&note.Note{Text: string(signed[:bytes.Index(signed, []byte("\n\n"))+1])}, s2, s1)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(both, tRoom, trust1)
	if err != nil || c.Signer != k1.NodeID() {
		t.Fatalf("two signatures: %+v, %v", c, err)
	}
	// ... and a bad signature by a trusted key spoils the note (note.Open).
	lines := strings.Split(string(both), "\n")
	for j, l := range lines {
		if strings.HasPrefix(l, "— "+k2.NodeID()) {
			b := []byte(l)
			b[len(b)-5] ^= 1 // stays base64, changes the signature bytes
			lines[j] = string(b)
		}
	}
	var invalid *note.InvalidSignatureError
	if _, err := Parse([]byte(strings.Join(lines, "\n")), tRoom, mustTrust(t, k1.NodeID(), k2.NodeID())); !errors.Is(err, ErrBadCheckpoint) || !errors.As(err, &invalid) {
		t.Errorf("invalid trusted signature: err = %v, want ErrBadCheckpoint wrapping note.InvalidSignatureError", err)
	}
}

func TestCheckpointMalformed(t *testing.T) {
	k := testKey(1)
	s := mustSigner(t, k)
	tr := mustTrust(t, k.NodeID())
	root := sha256.Sum256([]byte("root"))
	r64 := base64.StdEncoding.EncodeToString(root[:])
	for name, body := range map[string]string{
		"extension line": tRoom + "\n5\n" + r64 + "\nextra\n",
		"leading zero":   tRoom + "\n05\n" + r64 + "\n",
		"negative":       tRoom + "\n-5\n" + r64 + "\n",
		"short root":     tRoom + "\n5\n" + base64.StdEncoding.EncodeToString(root[:31]) + "\n",
		"no root":        tRoom + "\n5\n",
		"empty origin":   "\n5\n" + r64 + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			signed, err := note.Sign(&note.Note{Text: body}, s)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Parse(signed, tRoom, tr); !errors.Is(err, ErrBadCheckpoint) {
				t.Errorf("Parse err = %v, want ErrBadCheckpoint", err)
			}
			if _, err := ParseUnverified(signed); !errors.Is(err, ErrBadCheckpoint) {
				t.Errorf("ParseUnverified err = %v, want ErrBadCheckpoint", err)
			}
		})
	}
	for _, bad := range []string{"", "no signature\n", "room:x\n1\nAAAA\n\n— bad line\n"} {
		if _, err := ParseUnverified([]byte(bad)); !errors.Is(err, ErrBadCheckpoint) {
			t.Errorf("ParseUnverified(%q) err = %v", bad, err)
		}
	}
	for _, room := range []string{"", "room:a\nb", "room:\x01"} {
		if _, err := Sign(s, room, 1, root); !errors.Is(err, ErrBadCheckpoint) {
			t.Errorf("Sign(%q) err = %v, want ErrBadCheckpoint", room, err)
		}
	}
}

// TestCheckpointBOM: a note file saved "UTF-8 with BOM" is refused
// naming the mark, not as a bad signature (the signature is over the
// text without it), by every reader of a signed note, room or
// deployment checkpoint alike.
func TestCheckpointBOM(t *testing.T) {
	k := testKey(1)
	s := mustSigner(t, k)
	tr, err := mustTrust(t, k.NodeID()).WithOrigin(tOrigin)
	if err != nil {
		t.Fatal(err)
	}
	bom := func(b []byte, err error) []byte {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte{0xef, 0xbb, 0xbf}, b...)
	}
	room := bom(Sign(s, RoomOrigin(tOrigin, tRoom), 5, sha256.Sum256(nil)))
	legacy := bom(Sign(s, tRoom, 5, sha256.Sum256(nil)))
	deployment := bom(Sign(s, tOrigin, 5, sha256.Sum256(nil)))
	const want = "bad checkpoint: the note starts with a UTF-8 byte order mark (bytes EF BB BF): a signed note is UTF-8 without one"
	for name, parse := range map[string]func() (*Checkpoint, error){
		"Parse":                 func() (*Checkpoint, error) { return Parse(room, tRoom, tr) },
		"Parse, room-id origin": func() (*Checkpoint, error) { return Parse(legacy, tRoom, tr) },
		"ParseUnverified":       func() (*Checkpoint, error) { return ParseUnverified(room) },
		"ParseDeployment":       func() (*Checkpoint, error) { return ParseDeployment(deployment, tr) },
	} {
		if c, err := parse(); !errors.Is(err, ErrBadCheckpoint) || err.Error() != want {
			t.Errorf("%s = %+v, %v; want %q", name, c, err, want)
		}
	}
}

// TestTrustVerifiers: the Trust's note verifiers open a note signed by any
// trusted key and report other keys as unverified.
func TestTrustVerifiers(t *testing.T) {
	k1, k2, k3 := testKey(1), testKey(2), testKey(3)
	tr := mustTrust(t, k1.NodeID(), k2.NodeID(), k1.NodeID())
	body := &note.Note{Text: tRoom + "\n3\n" + base64.StdEncoding.EncodeToString(make([]byte, 32)) + "\n"}
	signed, err := note.Sign(body, mustSigner(t, k3), mustSigner(t, k2))
	if err != nil {
		t.Fatal(err)
	}
	n, err := note.Open(signed, tr.Verifiers())
	if err != nil || len(n.Sigs) != 1 || n.Sigs[0].Name != k2.NodeID() || len(n.UnverifiedSigs) != 1 || n.UnverifiedSigs[0].Name != k3.NodeID() {
		t.Fatalf("note.Open = %+v, %v", n, err)
	}
	if _, err := tr.Verifiers().Verifier(k3.NodeID(), 0); err == nil {
		t.Fatal("an untrusted key has a verifier")
	}
	var nilTrust *Trust
	if _, err := note.Open(signed, nilTrust.Verifiers()); err == nil {
		t.Fatal("nil Trust verified a note")
	}
	if got := tr.NodeIDs(); len(got) != 2 || got[0] > got[1] {
		t.Fatalf("NodeIDs = %v", got)
	}
}

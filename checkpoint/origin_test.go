package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"

	"unicode/utf8"

	"golang.org/x/mod/sumdb/note"
)

const tOrigin = "evidence.example.org/roompub"

func TestRoomSegment(t *testing.T) {
	for _, c := range []struct{ room, seg string }{
		{"room:eval-csv", "eval-csv"},
		{"room:a+b", "a%2Bb"},
		{"room:a/b:c", "a%2Fb%3Ac"},
		{"room:.", "%2E"},
		{"room:..", "%2E%2E"},
		{"room:100%", "100%25"},
		{"room:é", "%C3%A9"},
		{"room:x_y~z", "x_y~z"},
		{"room:room:x", "room%3Ax"},
	} {
		if got := RoomSegment(c.room); got != c.seg {
			t.Errorf("RoomSegment(%q) = %q, want %q", c.room, got, c.seg)
		}
		back, ok := ParseRoomSegment(c.seg)
		if !ok || back != c.room {
			t.Errorf("ParseRoomSegment(%q) = %q, %v; want %q", c.seg, back, ok, c.room)
		}
		o := RoomOrigin(tOrigin, c.room)
		if want := tOrigin + "/room/" + c.seg; o != want {
			t.Errorf("RoomOrigin = %q, want %q", o, want)
		}
		if strings.ContainsAny(o, "+ ") {
			t.Errorf("RoomOrigin(%q) = %q holds a character a key name cannot", c.room, o)
		}
		id, d, ok := RoomOfOrigin(o)
		if !ok || id != c.room || d != tOrigin {
			t.Errorf("RoomOfOrigin(%q) = %q, %q, %v", o, id, d, ok)
		}
	}
	// One spelling per room: whatever RoomSegment would not write is refused.
	for _, seg := range []string{"", "a+b", "a.b", "a/b", "%2b", "%41", "%4", "%", "a%ZZ", "%C3", "é"} {
		if id, ok := ParseRoomSegment(seg); ok {
			t.Errorf("ParseRoomSegment(%q) = %q, want refused", seg, id)
		}
	}
	for _, o := range []string{"room:x", "/room/x", "a/room/", "a/room/a.b"} {
		if id, d, ok := RoomOfOrigin(o); ok {
			t.Errorf("RoomOfOrigin(%q) = %q, %q, want none", o, id, d)
		}
	}
}

func TestCheckOrigin(t *testing.T) {
	if err := CheckOrigin(tOrigin); err != nil {
		t.Fatal(err)
	}
	for o, want := range map[string]string{
		"":                           "empty",
		"https://example.org/r":      "scheme",
		"example.org/r/":             "'/'",
		"/example.org":               "'/'",
		"example.org/a b":            "' '",
		"example.org/a+b":            "'+'",
		"example.org/é":              "printable ASCII",
		strings.Repeat("a", 256):     "256 bytes",
		"example.org/\x7f":           "printable ASCII",
		"example.org/roompub\nother": "printable ASCII",
		"example.org/room/b":         "which room origins are made of",
	} {
		err := CheckOrigin(o)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckOrigin(%q) = %v, want an error with %q", o, err, want)
		}
	}
}

// TestCheckpointWithOrigin checks the C2SP form: origin line and key name
// are the room's origin, any signed-note verifier of that name and key
// opens it, Parse maps the signature back to the node id, and the form
// written before origins still verifies beside it.
func TestCheckpointWithOrigin(t *testing.T) {
	k := testKey(1)
	origin := RoomOrigin(tOrigin, tRoom)
	s, err := NewNamedNoteSigner(k, origin)
	if err != nil {
		t.Fatal(err)
	}
	root := sha256.Sum256([]byte("root"))
	signed, err := Sign(s, origin, 77, root)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(signed, []byte(origin+"\n77\n")) || !bytes.Contains(signed, []byte("\n— "+origin+" ")) {
		t.Fatalf("note =\n%s", signed)
	}
	vkey, err := note.NewEd25519VerifierKey(origin, k.Public())
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := note.Open(signed, note.VerifierList(v)); err != nil {
		t.Fatalf("x/mod's verifier: %v", err)
	}
	trust := mustTrust(t, testKey(9).NodeID(), k.NodeID())
	pinned, err := trust.WithOrigin(tOrigin)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range []*Trust{trust, pinned} {
		c, err := Parse(signed, tRoom, tr)
		if err != nil {
			t.Fatal(err)
		}
		if c.Room != tRoom || c.Origin != origin || c.Size != 77 || c.Root != root || c.Signer != k.NodeID() {
			t.Fatalf("Parse = %+v", c)
		}
	}
	u, err := ParseUnverified(signed)
	if err != nil || u.Room != tRoom || u.Origin != origin || u.Signer != origin {
		t.Fatalf("ParseUnverified = %+v, %v", u, err)
	}
	legacy, err := Sign(mustSigner(t, k), tRoom, 78, root)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := Parse(legacy, tRoom, pinned); err != nil || c.Origin != tRoom || c.Signer != k.NodeID() {
		t.Fatalf("a checkpoint written before origins: %+v, %v", c, err)
	}

	other, _ := trust.WithOrigin("other.example.org/roompub")
	if _, err := Parse(signed, tRoom, other); !errors.Is(err, ErrBadCheckpoint) || !strings.Contains(err.Error(), `is of deployment "`+tOrigin+`", not "other.example.org/roompub"`) {
		t.Fatalf("another deployment's trust: %v", err)
	}
	// Another room's checkpoint, by a trusted key: the origin is the
	// fault, whoever signed it.
	wantOther := `bad checkpoint: origin "` + origin + `" is of room "` + tRoom + `", not "room:other"`
	for _, tr := range []*Trust{trust, mustTrust(t, testKey(9).NodeID())} {
		if _, err := Parse(signed, "room:other", tr); !errors.Is(err, ErrBadCheckpoint) || err.Error() != wantOther {
			t.Fatalf("another room: %v, want %s", err, wantOther)
		}
	}
	if _, err := Parse(signed, tRoom, mustTrust(t, testKey(9).NodeID())); !errors.Is(err, ErrUntrustedPublisher) {
		t.Fatalf("untrusted key: %v", err)
	}

	// The origin form signed under the node id name: the key name does not
	// match the origin.
	mixed, _ := Sign(mustSigner(t, k), origin, 77, root)
	if _, err := Parse(mixed, tRoom, trust); !errors.Is(err, ErrBadCheckpoint) || !strings.Contains(err.Error(), "does not match origin") {
		t.Fatalf("node-id key name on an origin: %v", err)
	}
	// The room-id form signed under the origin name.
	swapped, _ := Sign(s, tRoom, 77, root)
	if _, err := Parse(swapped, tRoom, trust); err == nil {
		t.Fatal("origin key name on a room-id origin verified")
	}
	// Another room's origin signed under that room's name.
	o2 := RoomOrigin(tOrigin, "room:other")
	s2, _ := NewNamedNoteSigner(k, o2)
	n2, _ := Sign(s2, o2, 77, root)
	if _, err := Parse(n2, tRoom, trust); err == nil {
		t.Fatal("another room's checkpoint verified")
	}
}

// FuzzRoomSegment: every room id round-trips, every accepted segment is
// the one spelling RoomSegment writes.
func FuzzRoomSegment(f *testing.F) {
	for _, s := range []string{"eval-csv", "a%2Bb", "%C3%A9", "%2E", "", "%"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if id, ok := ParseRoomSegment(s); ok {
			if RoomSegment(id) != s {
				t.Fatalf("ParseRoomSegment(%q) = %q, which RoomSegment writes as %q", s, id, RoomSegment(id))
			}
		}
		id := roomIDPrefix + s
		seg := RoomSegment(id)
		if back, ok := ParseRoomSegment(seg); s != "" && utf8.ValidString(id) && (!ok || back != id) {
			t.Fatalf("room %q: segment %q parses as %q, %v", id, seg, back, ok)
		}
	})
}

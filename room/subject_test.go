package room_test

import (
	"errors"
	"strings"
	"testing"
	"unicode"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
)

func TestEncodeToken(t *testing.T) {
	cases := []struct{ id, token string }{
		{"", "~"},
		{"alpha", "alpha"},
		{"A-Z_0-9:x", "A-Z_0-9:x"},
		{"a.b", "a~2Eb"},
		{"run.1:2", "run~2E1:2"},
		{"a/b/c", "a~2Fb~2Fc"},
		{"*", "~2A"},
		{">", "~3E"},
		{"a b", "a~20b"},
		{"\t\n\r", "~09~0A~0D"},
		{"~", "~7E"},
		{"~7E", "~7E7E"},
		{"é", "~C3~A9"},
		{"a\u00a0b", "a~C2~A0b"},
		{"日本", "~E6~97~A5~E6~9C~AC"},
		{"\x00\xff", "~00~FF"},
		{"..", "~2E~2E"},
		{"$JS.API", "~24JS~2EAPI"},
	}
	for _, c := range cases {
		if got := room.EncodeToken(c.id); got != c.token {
			t.Errorf("EncodeToken(%q) = %q, want %q", c.id, got, c.token)
		}
		got, err := room.DecodeToken(c.token)
		if err != nil || got != c.id {
			t.Errorf("DecodeToken(%q) = %q, %v; want %q", c.token, got, err, c.id)
		}
	}
}

func TestDecodeTokenRefuses(t *testing.T) {
	for _, tok := range []string{
		"",    // no token at all
		"a.b", // '.' is never in a token
		"a b", // nor white space
		"*", ">", "a*",
		"~2e",  // lower-case hex: EncodeToken writes upper case
		"~41",  // 'A' needs no escape
		"~3A",  // ':' needs no escape
		"~2",   // truncated escape
		"a~",   // truncated escape
		"~~7E", // '~' must be escaped itself
		"~G0",  // not hex
		"é",    // raw non-ASCII
		"a/b",
	} {
		if got, err := room.DecodeToken(tok); !errors.Is(err, room.ErrBadToken) {
			t.Errorf("DecodeToken(%q) = %q, %v; want ErrBadToken", tok, got, err)
		}
	}
}

func TestSubjectsParse(t *testing.T) {
	rooms := []string{"room:alpha", "room:a.b/c:d", "room:*", "room:>", "room:~x~", "room:é日本", "room:room:x", "room:" + strings.Repeat(".", 507)}
	chains := []events.ChainKey{{RunID: "run-1", CapsuleID: "cap-1"}, {RunID: "run.1:x", CapsuleID: "cap.2:y"}, {RunID: "*", CapsuleID: ">"}, {RunID: "a b", CapsuleID: "~"}}
	for _, prefix := range []string{"", "rooms", "other-prefix"} {
		s := room.Subjects{Prefix: prefix}
		want := prefix
		if want == "" {
			want = "rooms"
		}
		if s.All() != want+".>" {
			t.Fatalf("All() = %q", s.All())
		}
		for _, r := range rooms {
			subj := s.Records(r)
			if !strings.HasPrefix(subj, want+".") || strings.ContainsAny(subj, "*> \t") || strings.Count(subj, ".") != 2 {
				t.Fatalf("Records(%q) = %q", r, subj)
			}
			p, err := s.Parse(subj)
			if err != nil || p != (room.Parsed{Kind: room.KindExecution, RoomID: r}) {
				t.Fatalf("Parse(%q) = %+v, %v", subj, p, err)
			}
			if filter := s.Room(r); filter != strings.TrimSuffix(subj, "exec")+">" {
				t.Fatalf("Room(%q) = %q", r, filter)
			}
			ck := s.Checkpoint(r)
			if ck != strings.TrimSuffix(subj, "exec")+"checkpoint" {
				t.Fatalf("Checkpoint(%q) = %q", r, ck)
			}
			if p, err := s.Parse(ck); err != nil || p != (room.Parsed{Kind: room.KindCheckpoint, RoomID: r}) {
				t.Fatalf("Parse(%q) = %+v, %v", ck, p, err)
			}
			for _, k := range chains {
				subj := s.Journal(r, k)
				if strings.ContainsAny(subj, "*> \t") || strings.Count(subj, ".") != 4 {
					t.Fatalf("Journal(%q, %v) = %q", r, k, subj)
				}
				p, err := s.Parse(subj)
				if err != nil || p != (room.Parsed{Kind: room.KindJournal, RoomID: r, Chain: k}) {
					t.Fatalf("Parse(%q) = %+v, %v", subj, p, err)
				}
				any := s.ChainAnyRoom(k)
				if any != want+".*"+subj[strings.Index(subj, ".journal."):] {
					t.Fatalf("ChainAnyRoom(%v) = %q for %q", k, any, subj)
				}
			}
		}
	}
	// Exact forms.
	s := room.Subjects{}
	k := events.ChainKey{RunID: "run.1", CapsuleID: "cap:1"}
	if got := s.Journal("room:a.b", k); got != "rooms.a~2Eb.journal.run~2E1.cap:1" {
		t.Fatalf("Journal = %q", got)
	}
	if got := s.ChainAnyRoom(k); got != "rooms.*.journal.run~2E1.cap:1" {
		t.Fatalf("ChainAnyRoom = %q", got)
	}
	if got := s.Records("room:a.b"); got != "rooms.a~2Eb.exec" {
		t.Fatalf("Records = %q", got)
	}
	if got := s.Room("room:a.b"); got != "rooms.a~2Eb.>" {
		t.Fatalf("Room = %q", got)
	}
	if got := s.Checkpoint("room:a.b"); got != "rooms.a~2Eb.checkpoint" {
		t.Fatalf("Checkpoint = %q", got)
	}
	for _, bad := range []string{"", "rooms", "rooms.a", "other.a.exec", "rooms.a.exec.x", "rooms.a.journal.r", "rooms.a.journal.r.c.x",
		"rooms.a.journal.r~2e.c", "rooms.a~2e.exec", "rooms.a.records", "rooms..exec", "rooms.a.journal..c",
		"rooms.a.checkpoint.x", "rooms.a.checkpoints", "rooms.a~2e.checkpoint", "rooms..checkpoint", "rooms.checkpoint", "other.a.checkpoint"} {
		if p, err := s.Parse(bad); !errors.Is(err, room.ErrBadToken) {
			t.Errorf("Parse(%q) = %+v, %v; want ErrBadToken", bad, p, err)
		}
	}
}

// FuzzTokenRoundTrip: EncodeToken is injective, reversible and yields one
// subject token; DecodeToken accepts only what EncodeToken produces.
func FuzzTokenRoundTrip(f *testing.F) {
	for _, s := range []string{"", "~", "~7E", "a.b", "a b", "*", ">", "é", "\x00\xff", "~2e", "~41", "a~", "run.1:x", "room:a/b", "~20~"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok := room.EncodeToken(s)
		if tok == "" || strings.ContainsAny(tok, ".*>") || strings.IndexFunc(tok, unicode.IsSpace) >= 0 {
			t.Fatalf("EncodeToken(%q) = %q", s, tok)
		}
		for i := 0; i < len(tok); i++ {
			if tok[i] < 0x21 || tok[i] > 0x7e {
				t.Fatalf("EncodeToken(%q) = %q holds byte %#x", s, tok, tok[i])
			}
		}
		back, err := room.DecodeToken(tok)
		if err != nil || back != s {
			t.Fatalf("DecodeToken(EncodeToken(%q)) = %q, %v", s, back, err)
		}
		// s as a token: when it decodes, it is the one encoding of its id.
		id, err := room.DecodeToken(s)
		if err != nil {
			if !errors.Is(err, room.ErrBadToken) {
				t.Fatalf("DecodeToken(%q): %v does not wrap ErrBadToken", s, err)
			}
			return
		}
		if again := room.EncodeToken(id); again != s {
			t.Fatalf("DecodeToken(%q) = %q, which encodes to %q", s, id, again)
		}
	})
}

// FuzzSubjectsParse: Parse never panics, refuses with ErrBadToken, and
// whatever it accepts is the one subject its parts build (Records,
// Journal, Checkpoint), so no two subjects name one room's stream.
func FuzzSubjectsParse(f *testing.F) {
	s := room.Subjects{}
	for _, subj := range []string{"rooms.a.exec", "rooms.a.checkpoint", "rooms.a~2Eb.journal.r.c", "rooms.a.checkpoint.x", "rooms..exec",
		"rooms.a~2e.checkpoint", "other.a.exec", "rooms.a.journal.r", "rooms.~.exec", "rooms.a.journal.~.~"} {
		f.Add(subj)
	}
	f.Fuzz(func(t *testing.T, subj string) {
		p, err := s.Parse(subj)
		if err != nil {
			if !errors.Is(err, room.ErrBadToken) {
				t.Fatalf("Parse(%q): %v does not wrap ErrBadToken", subj, err)
			}
			return
		}
		var back string
		switch p.Kind {
		case room.KindExecution:
			back = s.Records(p.RoomID)
		case room.KindCheckpoint:
			back = s.Checkpoint(p.RoomID)
		case room.KindJournal:
			back = s.Journal(p.RoomID, p.Chain)
		default:
			t.Fatalf("Parse(%q) = kind %q", subj, p.Kind)
		}
		if back != subj || !strings.HasPrefix(p.RoomID, room.RoomIDPrefix) {
			t.Fatalf("Parse(%q) = %+v, which builds %q", subj, p, back)
		}
	})
}

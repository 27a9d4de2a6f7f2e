package room_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/roompub/roompub/room"
)

func TestServiceSubject(t *testing.T) {
	for _, tc := range []struct {
		subject, token, endpoint string
		err                      bool
	}{
		{"roompub.v1.journal", room.Anonymous, room.EndpointJournal, false},
		{"roompub.v1.head", room.Anonymous, room.EndpointHead, false},
		{"roompub.v1.harness-1.records", "harness-1", room.EndpointRecords, false},
		{"roompub.v1.a~2Eb~40lab.execution", "a~2Eb~40lab", room.EndpointExecution, false},
		{"roompub.v1.UACDWCYDZU2Z4Q4YUXLLMDVJMEBZ6R6XNFN7YMWLB3FZFQAK2QLYQNA6.head", "UACDWCYDZU2Z4Q4YUXLLMDVJMEBZ6R6XNFN7YMWLB3FZFQAK2QLYQNA6", room.EndpointHead, false},
		{"roompub.v1.journal.journal", "journal", room.EndpointJournal, false},
		{"roompub.v1", "", "", true},
		{"roompub.v1.", "", "", true},
		{"roompub.v1.delete", "", "", true},
		{"roompub.v1.a.b.journal", "", "", true},  // two tokens
		{"roompub.v1.a~2e.journal", "", "", true}, // lower-case escape: no token IdentityToken makes
		{"roompub.v1.a~41.journal", "", "", true}, // needless escape
		{"roompub.v1.~.journal", "", "", true},    // the empty identity is the anonymous one
		{"roompub.v2.journal", "", "", true},      // another prefix
		{"xroompub.v1.journal", "", "", true},
	} {
		token, endpoint, err := room.ParseServiceSubject("", tc.subject)
		if tc.err {
			if !errors.Is(err, room.ErrServiceSubject) {
				t.Errorf("%q: %q %q %v, want ErrServiceSubject", tc.subject, token, endpoint, err)
			}
			continue
		}
		if err != nil || token != tc.token || endpoint != tc.endpoint {
			t.Errorf("%q: %q %q %v, want %q %q", tc.subject, token, endpoint, err, tc.token, tc.endpoint)
		}
		if back := room.ServiceSubject("", token, endpoint); back != tc.subject {
			t.Errorf("%q: ServiceSubject gives %q", tc.subject, back)
		}
	}
	if got := room.IdentityToken("harness.two@lab"); got != "harness~2Etwo~40lab" {
		t.Errorf("IdentityToken: %q", got)
	}
	if got := room.InboxPrefix(room.IdentityToken("h-1")); got != "_INBOX_h-1" {
		t.Errorf("InboxPrefix: %q", got)
	}
}

func TestCheckReply(t *testing.T) {
	for _, tc := range []struct {
		token, reply string
		ok           bool
	}{
		{"h-1", "_INBOX_h-1.abc.1", true},
		{"h-1", "_INBOX_h-1.x", true},
		{"h-1", "_INBOX_h-1.", false},
		{"h-1", "_INBOX_h-1", false},
		{"h-1", "_INBOX_h-10.x", false}, // another user's inbox that starts alike
		{"h-1", "_INBOX.x", false},
		{"h-1", "_INBOX_h-2.x", false},
		{"h-1", "_INBOX_h-1.*", false},
		{"h-1", "_INBOX_h-1.>", false},
		{"h-1", "_INBOX_h-1.a..b", false},
		{"h-1", "_INBOX_h-1.a b", false},
		{"h-1", "$JS.API.STREAM.DELETE.ROOMS", false},
		{"h-1", "", false},
		{room.Anonymous, "_INBOX.abc.1", true},
		{room.Anonymous, "_INBOX_custom.abc", true},
		{room.Anonymous, "_INBOX", false},
		{room.Anonymous, "_INBOX.", false},
		{room.Anonymous, "$JS.API.STREAM.DELETE.ROOMS", false},
		{room.Anonymous, "rooms.a.checkpoint", false},
		{room.Anonymous, "$KV.ROOMPUB_CHECKPOINT_LEASES.a", false},
		{room.Anonymous, "_INBOX.>", false},
		{room.Anonymous, "", false},
	} {
		err := room.CheckReply(tc.token, tc.reply)
		if (err == nil) != tc.ok {
			t.Errorf("CheckReply(%q, %q) = %v, want ok %v", tc.token, tc.reply, err, tc.ok)
		}
	}
}

// FuzzServiceSubject: parsing never panics, what parses builds back to
// the same subject, and an accepted reply is under the identity's inbox.
func FuzzServiceSubject(f *testing.F) {
	f.Add("roompub.v1.h-1.journal", "_INBOX_h-1.x")
	f.Add("roompub.v1.head", "_INBOX.x.y")
	f.Add("roompub.v1.a~2Eb.records", "$JS.API.STREAM.DELETE.ROOMS")
	f.Add("roompub.v1.~.journal", "_INBOX_.x")
	f.Fuzz(func(t *testing.T, subject, reply string) {
		token, endpoint, err := room.ParseServiceSubject("", subject)
		if err != nil {
			return
		}
		if back := room.ServiceSubject("", token, endpoint); back != subject {
			t.Fatalf("%q parses to %q %q, which builds %q", subject, token, endpoint, back)
		}
		if room.CheckReply(token, reply) != nil {
			return
		}
		inbox := room.InboxPrefix(token) + "."
		if token == room.Anonymous {
			inbox = room.DefaultInboxPrefix
		}
		if !strings.HasPrefix(reply, inbox) {
			t.Fatalf("reply %q accepted for %q", reply, token)
		}
		for _, tok := range strings.Split(reply, ".") {
			if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n") {
				t.Fatalf("reply %q accepted with token %q", reply, tok)
			}
		}
	})
}

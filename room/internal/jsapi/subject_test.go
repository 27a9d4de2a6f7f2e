package jsapi_test

import (
	"testing"

	"github.com/roompub/roompub/room/internal/jsapi"
)

func TestSubjectMatches(t *testing.T) {
	for _, c := range []struct {
		filter, subject string
		want            bool
	}{
		{"rooms.>", "rooms.a.exec", true},
		{"rooms.>", "rooms", false},
		{"rooms.a.>", "rooms.a.journal.r.c", true},
		{"rooms.a.>", "rooms.a", false},
		{"rooms.a.>", "rooms.ab.exec", false},
		{"rooms.a.>", "rooms.b.exec", false},
		{"rooms.*.exec", "rooms.a.exec", true},
		{"rooms.*.exec", "rooms.a.exec.x", false},
		{"rooms.*.exec", "rooms.a.journal", false},
		{"rooms.a.exec", "rooms.a.exec", true},
		{"rooms.a.exec", "rooms.a", false},
		{"other.>", "rooms.a.exec", false},
		{">", "rooms", true},
		{"rooms.>", "rooms.", false},
	} {
		if got := jsapi.SubjectMatches(c.filter, c.subject); got != c.want {
			t.Errorf("SubjectMatches(%q, %q) = %v", c.filter, c.subject, got)
		}
	}
}

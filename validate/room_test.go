package validate_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/validate"
)

// TestCheckRoomID: seed 004's room/id form (room: and non-space
// characters by ECMA-262 \s, at most 512 characters, UTF-8), and no C0
// control character or DEL, which the pattern admits but no checkpoint
// origin line holds; CheckRoomIDForm, the readers' check, takes those.
func TestCheckRoomID(t *testing.T) {
	for _, c := range []struct {
		id     string
		reason string // "" when accepted
	}{
		{"room:x", ""},
		{"room:x.y*>~2E/ü€😀", ""},
		{"room:" + strings.Repeat("é", 507), ""},
		{"room:" + strings.Repeat("é", 508), "1 to 507 non-space"},
		{"room:", "1 to 507 non-space"},
		{"rooms:x", "1 to 507 non-space"},
		{"room:a b", "1 to 507 non-space"},
		{"room:a\u00a0b", "1 to 507 non-space"}, // no-break space is ECMA-262 \s
		{"room:a\u2028b", "1 to 507 non-space"},
		{"room:a\xffb", "1 to 507 non-space"},
		{"room:a\x00b", "control character U+0000 at byte 6"},
		{"room:\x1b[31m", "control character U+001B at byte 5"},
		{"room:a\x7f", "control character U+007F at byte 6"},
		{"room:éa\u0085b", ""}, // C1 (not \s in ECMA-262): a signed note's text may hold it
		{"room:a\u009f", ""},
	} {
		err := validate.CheckRoomID(c.id)
		if c.reason == "" {
			if err != nil {
				t.Errorf("%q: %v", c.id, err)
			}
			continue
		}
		var ref *events.Refusal
		if !errors.As(err, &ref) || ref.Code != events.BadRequest || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("%q: %v, want bad_request with %q", c.id, err, c.reason)
		}
	}
}

// TestCheckRoomIDForm: readers name a room by the seed's form alone, so
// one stored before the gate refused control characters can be named.
func TestCheckRoomIDForm(t *testing.T) {
	for _, id := range []string{"room:a\x01b", "room:a\x7f", "room:a\u0085b"} {
		if err := validate.CheckRoomIDForm(id); err != nil {
			t.Errorf("%q: %v", id, err)
		}
	}
	for _, id := range []string{"room:", "room:a b", "room:a\xffb", "room:" + strings.Repeat("x", 508)} {
		if err := validate.CheckRoomIDForm(id); err == nil {
			t.Errorf("%q accepted", id)
		}
	}
}

package validate_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/validate"
)

// TestCheckRoomID: seed 004's room/id form (room: and non-space
// characters by ECMA-262 \s, at most 512 characters, UTF-8), and no
// control character, which the pattern admits but no checkpoint origin
// line holds.
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
		{"room:éa\u0085b", "control character U+0085 at byte 8"}, // C1, not \s in ECMA-262
		{"room:a\u009f", "control character U+009F at byte 6"},
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

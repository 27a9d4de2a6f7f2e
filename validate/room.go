package validate

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/roompub/roompub/events"
)

// MaxRoomIDLength is room/id's maxLength in characters (seed 004).
const MaxRoomIDLength = 512

var roomIDPattern = mustECMA(`^room:[^\s]+$`)

// mustECMA compiles a constant ECMA-262 pattern, as the schemas' own are
// compiled.
func mustECMA(pattern string) interface{ MatchString(string) bool } {
	re, err := newECMAEngine(0).compile(pattern)
	if err != nil {
		panic(err) // a constant pattern
	}
	return re
}

// CheckRoomID reports whether id is a room id as seed 004's room/id
// defines it: "room:" and at least one non-space character (ECMA-262 \s),
// at most 512 characters, valid UTF-8. Journals use the same form
// (docs/design.md, "Subjects and room ids"). roompub also refuses a
// control character (Unicode Cc: C0, DEL, C1), which the pattern lets
// through: a room id is the origin line of its checkpoints in the room-id
// form, and a signed note's text holds no control character (C2SP
// signed-note), so such a room could never be checkpointed; printed, it
// would also reach an operator's terminal raw. The error is an
// *events.Refusal with code bad_request.
func CheckRoomID(id string) error {
	if n := utf8.RuneCountInString(id); n > MaxRoomIDLength || !utf8.ValidString(id) || !roomIDPattern.MatchString(id) {
		return events.NewRefusal([]events.Problem{{Code: events.BadRequest,
			Reason: fmt.Sprintf("room id must be \"room:\" and 1 to %d non-space characters", MaxRoomIDLength-5)}})
	}
	if i := strings.IndexFunc(id, unicode.IsControl); i >= 0 {
		r, _ := utf8.DecodeRuneInString(id[i:])
		return events.NewRefusal([]events.Problem{{Code: events.BadRequest,
			Reason: fmt.Sprintf("room id holds the control character %U at byte %d: no checkpoint could name the room", r, i)}})
	}
	return nil
}

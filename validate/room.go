package validate

import (
	"fmt"
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
// at most 512 characters. Journals use the same form (docs/design.md,
// "Subjects and room ids"). The
// error is an *events.Refusal with code bad_request.
func CheckRoomID(id string) error {
	if n := utf8.RuneCountInString(id); n > MaxRoomIDLength || !utf8.ValidString(id) || !roomIDPattern.MatchString(id) {
		return events.NewRefusal([]events.Problem{{Code: events.BadRequest,
			Reason: fmt.Sprintf("room id must be \"room:\" and 1 to %d non-space characters", MaxRoomIDLength-5)}})
	}
	return nil
}

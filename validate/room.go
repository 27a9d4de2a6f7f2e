package validate

import (
	"fmt"
	"strings"
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

// CheckRoomIDForm reports whether id is a room id as seed 004's room/id
// defines it: "room:" and at least one non-space character (ECMA-262 \s),
// at most 512 characters, valid UTF-8. Journals use the same form
// (docs/design.md, "Subjects and room ids"). Readers name rooms by it, so
// a room stored before CheckRoomID's stricter rule can still be named.
// The error is an *events.Refusal with code bad_request.
func CheckRoomIDForm(id string) error {
	if n := utf8.RuneCountInString(id); n > MaxRoomIDLength || !utf8.ValidString(id) || !roomIDPattern.MatchString(id) {
		return events.NewRefusal([]events.Problem{{Code: events.BadRequest,
			Reason: fmt.Sprintf("room id must be \"room:\" and 1 to %d non-space characters", MaxRoomIDLength-5)}})
	}
	return nil
}

// CheckRoomID reports whether the gate takes id as a room id: the seed's
// form (CheckRoomIDForm) without a C0 control character (U+0000 to
// U+001F) or DEL (U+007F), which the pattern lets through. A room id is
// the origin line of its checkpoints in the room-id form, and a signed
// note's text holds none of them (C2SP signed-note), so such a room could
// never be checkpointed (docs/design.md, "Subjects and room ids"). The
// error is an *events.Refusal with code bad_request.
func CheckRoomID(id string) error {
	if err := CheckRoomIDForm(id); err != nil {
		return err
	}
	if i := strings.IndexFunc(id, func(r rune) bool { return r < 0x20 || r == 0x7f }); i >= 0 {
		return events.NewRefusal([]events.Problem{{Code: events.BadRequest,
			Reason: fmt.Sprintf("room id holds the control character %U at byte %d: no checkpoint could name the room", id[i], i)}})
	}
	return nil
}

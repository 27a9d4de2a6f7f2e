package validate

import (
	"fmt"
	"unicode/utf8"
)

// MaxEnvironmentRefLength is environment/ref's maxLength in characters
// (the execution record schema, seed 004).
const MaxEnvironmentRefLength = 512

var environmentRefPattern = mustECMA(`^[a-z][a-z0-9-]*:[^\s]+$`)

// CheckEnvironmentRef reports whether ref is an instance as an execution
// record's environment/ref names one (the schema's pattern, seed 004): a
// lower-case kind, ":" and at least one non-space character (ECMA-262
// \s), at most 512 characters, as in "environment:qmail-01". A reader
// asked for another string would find nothing and say so as if the
// instance had no records; the error says what the form is.
func CheckEnvironmentRef(ref string) error {
	if n := utf8.RuneCountInString(ref); n > MaxEnvironmentRefLength || !utf8.ValidString(ref) || !environmentRefPattern.MatchString(ref) {
		return fmt.Errorf("%q is not an environment/ref: a lower-case kind, \":\" and 1 or more non-space characters, at most %d in all (e.g. environment:qmail-01)",
			ref, MaxEnvironmentRefLength)
	}
	return nil
}

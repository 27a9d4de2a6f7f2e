package events

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// IDPattern is the upstream harness's ID_PATTERN (envelope.js): what
// run_id and capsule_id must match in capsule.json and in every entry. The
// pattern is ASCII, so RE2 and JavaScript agree on it.
var IDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

// CapsuleFile is what CheckCapsule found in a capsule directory's
// capsule.json: the identity strings it holds (empty where a member is
// missing or not a string) and every invalid_capsule problem, in the
// upstream's order (docs/upstream.md, "Check order"). A capsule is valid
// when Problems is empty.
type CapsuleFile struct {
	Meta     CapsuleMeta
	Problems []Problem
}

// CheckCapsule applies the upstream harness's capsule.json rules
// (metadataFailure in capsule.js) to raw, the file's bytes; file names it
// in locations. The rules, each an invalid_capsule problem with the member
// named in its JSON pointer:
//   - strict JSON holding an object (I-JSON, so a duplicate key is refused
//     where JSON.parse keeps the last one: a deliberate divergence);
//   - "schema" is "capsule-envelope/v1";
//   - run_id and capsule_id match IDPattern;
//   - harness_version and task_family are strings that are not blank once
//     JavaScript's String.prototype.trim has removed white space;
//   - created_at is exactly what Date.prototype.toISOString writes for the
//     instant it names (CanonicalISOTime).
//
// Members other than these are allowed, as upstream.
func CheckCapsule(raw []byte, file string) CapsuleFile {
	at := Location{File: file}
	obj, _, err := DecodeObject(raw)
	if err != nil {
		reason := "capsule.json is not a strict JSON object: " + err.Error()
		if HasBOM(raw) {
			reason = BOMReason("capsule.json", "a capsule file") + " (" + err.Error() + ")"
		}
		return CapsuleFile{Problems: []Problem{{Code: InvalidCapsule, At: at, Reason: reason}}}
	}
	var c CapsuleFile
	field := func(key string) (string, bool) {
		s, ok := obj[key].(string)
		return s, ok
	}
	refuse := func(key, reason, actual string) {
		c.Problems = append(c.Problems, Problem{Code: InvalidCapsule, At: withPointer(at, "/"+key),
			Reason: "capsule.json " + reason, Actual: actual})
	}
	if s, ok := field("schema"); !ok || s != EntrySchema {
		refuse("schema", fmt.Sprintf("schema must be %q", EntrySchema), describe(obj["schema"]))
	}
	c.Meta.RunID, _ = field("run_id")
	c.Meta.CapsuleID, _ = field("capsule_id")
	c.Meta.HarnessVersion, _ = field("harness_version")
	c.Meta.TaskFamily, _ = field("task_family")
	for _, key := range [...]string{"run_id", "capsule_id"} {
		if s, ok := field(key); !ok || !IDPattern.MatchString(s) {
			refuse(key, key+" must be a string matching "+IDPattern.String(), describe(obj[key]))
		}
	}
	for _, key := range [...]string{"harness_version", "task_family"} {
		if s, ok := field(key); !ok || strings.TrimFunc(s, IsJSWhiteSpace) == "" {
			refuse(key, key+" must be a string that is not blank", describe(obj[key]))
		}
	}
	if s, ok := field("created_at"); !ok || !CanonicalISOTime(s) {
		refuse("created_at", "created_at must be a canonical ISO timestamp, as Date.prototype.toISOString writes it (YYYY-MM-DDTHH:mm:ss.sssZ)", describe(obj["created_at"]))
	}
	return c
}

// describe renders a decoded JSON value for a problem's Actual.
func describe(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	default:
		return fmt.Sprintf("%v", v)
	}
}

// IsJSWhiteSpace reports whether r is ECMAScript WhiteSpace or
// LineTerminator (ECMA-262, what String.prototype.trim and \s remove):
// U+0009–U+000D, U+0020, U+00A0, U+1680, U+2000–U+200A, U+2028, U+2029,
// U+202F, U+205F, U+3000 and U+FEFF.
func IsJSWhiteSpace(r rune) bool {
	switch {
	case r >= 0x09 && r <= 0x0d, r == 0x20, r == 0xa0, r == 0x1680,
		r >= 0x2000 && r <= 0x200a, r == 0x2028, r == 0x2029,
		r == 0x202f, r == 0x205f, r == 0x3000, r == 0xfeff:
		return true
	}
	return false
}

// maxJSTime bounds an ECMAScript time value: ±8.64e15 ms from the epoch
// (ECMA-262, "Time Values and Time Range").
const maxJSTime = 8_640_000_000_000_000

// CanonicalISOTime reports whether s is exactly what
// Date.prototype.toISOString writes (ECMA-262, "Date Time String Format"):
// YYYY-MM-DDTHH:mm:ss.sssZ in UTC, with milliseconds, for years 0 to 9999,
// and ±YYYYYY-MM-DDTHH:mm:ss.sssZ for years outside them, naming a real
// calendar instant within the ECMAScript time range. It is the upstream's
// created_at rule: new Date(s).toISOString() === s.
func CanonicalISOTime(s string) bool {
	var year int
	var rest string
	switch {
	case len(s) == 24:
		y, ok := digits(s[:4])
		if !ok {
			return false
		}
		year, rest = y, s[4:]
	case len(s) == 27 && (s[0] == '+' || s[0] == '-'):
		y, ok := digits(s[1:7])
		if !ok {
			return false
		}
		if s[0] == '-' {
			y = -y
		}
		if y >= 0 && y <= 9999 { // toISOString writes these years with four digits
			return false
		}
		year, rest = y, s[7:]
	default:
		return false
	}
	// rest is "-MM-DDTHH:mm:ss.sssZ".
	if len(rest) != 20 || rest[0] != '-' || rest[3] != '-' || rest[6] != 'T' || rest[9] != ':' ||
		rest[12] != ':' || rest[15] != '.' || rest[19] != 'Z' {
		return false
	}
	var v [6]int
	for i, span := range [...][2]int{{1, 3}, {4, 6}, {7, 9}, {10, 12}, {13, 15}, {16, 19}} {
		n, ok := digits(rest[span[0]:span[1]])
		if !ok {
			return false
		}
		v[i] = n
	}
	month, day, hour, minute, sec, ms := v[0], v[1], v[2], v[3], v[4], v[5]
	if month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || sec > 59 {
		return false
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, ms*int(time.Millisecond), time.UTC)
	if t.Day() != day || t.Month() != time.Month(month) { // Feb 30 and the like
		return false
	}
	ums := t.UnixMilli()
	return ums >= -maxJSTime && ums <= maxJSTime
}

// digits parses s, ASCII digits only.
func digits(s string) (int, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

package validate

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/schemas"
)

// envelopeSchemaSHA256 is the SHA-256 of the capsule-envelope.schema.json
// that envelopeValid encodes (seed 000, as embedded). The fast check is
// used only when the envelope schema in use has exactly these bytes: a
// schema directory with another envelope (--schema-dir), or a later edit
// of the embedded file, makes every entry go to jsonschema.
const envelopeSchemaSHA256 = "f3b0131afb1af05e4f4a3d9887cd7cfc658e10bf89ab629d13109ea5f3724c78"

// fastEnvelopeApplies reports whether the envelope schema compiled from
// layers (the first that has the file wins, as in fileLoader) is the one
// envelopeValid encodes.
func fastEnvelopeApplies(layers []fs.FS) bool {
	for _, fsys := range layers {
		data, err := fs.ReadFile(fsys, schemas.EnvelopeFile)
		if err != nil {
			continue
		}
		sum := sha256.Sum256(data)
		return hex.EncodeToString(sum[:]) == envelopeSchemaSHA256
	}
	return false
}

// envelopeKeys are the envelope's 13 required members, and with
// additionalProperties false its only ones, in RFC 8785 (byte) order, the
// order Entry.Fields lists them in; the fast path matches them as it reads
// a line (Entry.HasEnvelopeKeys).
var envelopeKeys = events.EnvelopeKeys

// isEffectClass: effect_class's enum, SE0 to SE4.
func isEffectClass(t string) bool {
	return len(t) == 3 && t[0] == 'S' && t[1] == 'E' && '0' <= t[2] && t[2] <= '4'
}

// isLineage: lineage's enum.
func isLineage(t string) bool {
	switch t {
	case "plan", "attempt", "interaction", "environment", "strategy":
		return true
	}
	return false
}

// payloadType is the type the envelope's payload allowlist gives a key.
type payloadType uint8

const (
	payloadString payloadType = iota + 1
	payloadNumber
	payloadInteger
	payloadIntegerOrNull
)

// payloadTypeOf is the envelope's payload allowlist (additionalProperties
// false): the type it gives key, 0 for a key it does not list. A switch,
// not a map: no hashing for every member of every payload.
func payloadTypeOf(key string) payloadType {
	switch key {
	case "task_id", "task_family", "tool", "tool_call_id", "args_hash", "response_hash", "status",
		"model", "message", "note", "decision", "reason", "variant", "digest", "path", "fixture_key",
		"stage", "verdict", "branch_id", "parent_branch_id", "summary":
		return payloadString
	case "duration_ms", "cost_usd", "score":
		return payloadNumber
	case "tokens_in", "tokens_out", "passed", "failed", "total", "hits":
		return payloadInteger
	case "exit_code":
		return payloadIntegerOrNull
	}
	return 0
}

// envelopeValid reports whether fields certainly satisfy the embedded
// envelope schema. false means only "not certain": jsonschema decides, and
// reports the problems. Every rule is the schema's, made stricter where
// jsonschema's own reading has edges (an integer written with an exponent,
// a leap second, a lower-case 't'): those go to jsonschema.
func envelopeValid(fields []events.Field) bool {
	if len(fields) != len(envelopeKeys) {
		return false
	}
	for i := range fields {
		if fields[i].Key != envelopeKeys[i] {
			return false
		}
	}
	return envelopeValuesValid(fields, false, false, checkedIDs{})
}

// envelopeValuesValid is envelopeValid for fields whose keys are
// envelopeKeys, known already (Entry.HasEnvelopeKeys): the values alone.
// hashMatches says entry_hash is the entry's computed hash
// (Entry.HashMatches), hexHashes that both hashes were read as 64 hex
// digits (Entry.HashesHex): either way certainly their pattern's; ids
// are run_id and capsule_id values known to match theirs. The
// rules are written out member by member, not a loop with a call and a
// switch for each of the 13.
func envelopeValuesValid(fields []events.Field, hashMatches, hexHashes bool, ids checkedIDs) bool {
	if len(fields) != len(envelopeKeys) {
		return false
	}
	f := (*[len(envelopeKeys)]events.Field)(fields)
	const str = events.KindString
	if f[0].Kind != str || f[1].Kind != str || f[2].Kind != str || f[3].Kind != str || f[4].Kind != str ||
		f[5].Kind != str || f[6].Kind != str || f[8].Kind != str || f[9].Kind != str || f[11].Kind != str ||
		f[12].Kind != str || f[7].Kind != events.KindObject {
		return false
	}
	return (ids.capsuleID != "" && f[0].Text == ids.capsuleID || isID(f[0].Text)) && isEffectClass(f[1].Text) &&
		(hashMatches || hexHashes || isHex64(f[2].Text)) && f[3].Text != "" &&
		isKind(f[4].Text) && isLineage(f[5].Text) && (hexHashes || isHex64(f[6].Text)) &&
		(ids.runID != "" && f[8].Text == ids.runID || isID(f[8].Text)) && f[9].Text == events.EntrySchema && isNonNegativeInteger(&f[10]) &&
		f[11].Text != "" && isDateTime(f[12].Text) && payloadValid(f[7].Members)
}

// payloadField is the payload of fields that envelopeValid accepted.
func payloadField(fields []events.Field) []events.Field { return fields[7].Members }

func payloadValid(members []events.Field) bool {
	for i := range members {
		f := &members[i]
		switch payloadTypeOf(f.Key) {
		case payloadString:
			if !isString(f) {
				return false
			}
		case payloadNumber:
			if f.Kind != events.KindNumber {
				return false
			}
		case payloadInteger:
			if !isInteger(f) {
				return false
			}
		case payloadIntegerOrNull:
			if f.Kind != events.KindNull && !isInteger(f) {
				return false
			}
		default: // not allowlisted
			return false
		}
	}
	return true
}

func isString(f *events.Field) bool { return f.Kind == events.KindString }

// isInteger: a number written with digits only (and a sign) is an
// integer for JSON Schema; canonical numbers with a fraction or an
// exponent go to jsonschema, which decides with big.Rat.
func isInteger(f *events.Field) bool {
	if f.Kind != events.KindNumber {
		return false
	}
	s := f.Text
	if s != "" && s[0] == '-' {
		s = s[1:]
	}
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return s != ""
}

func isNonNegativeInteger(f *events.Field) bool {
	return isInteger(f) && f.Text[0] != '-'
}

// Byte classes of the envelope's patterns.
var (
	idFirst  = byteClass("A-Z", "a-z", "0-9")                     // run_id, capsule_id: [A-Za-z0-9]
	idRest   = byteClass("A-Z", "a-z", "0-9", ".", "_", ":", "-") // [A-Za-z0-9._:-]
	kindRest = byteClass("a-z", "0-9", "_", ".", "-")             // kind: [a-z0-9_.-]
)

// byteClass builds a table of the bytes in the given ranges ("a-z") and
// single bytes.
func byteClass(parts ...string) *[256]bool {
	var t [256]bool
	for _, p := range parts {
		lo, hi := p[0], p[len(p)-1]
		for c := int(lo); c <= int(hi); c++ {
			t[c] = true
		}
	}
	return &t
}

func allIn(s string, class *[256]bool) bool {
	for i := 0; i < len(s); i++ {
		if !class[s[i]] {
			return false
		}
	}
	return true
}

// isID: ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$ (run_id, capsule_id).
func isID(s string) bool {
	return len(s) >= 1 && len(s) <= 128 && idFirst[s[0]] && allIn(s[1:], idRest)
}

// isKind: ^[a-z][a-z0-9_.-]{0,63}$.
func isKind(s string) bool {
	return len(s) >= 1 && len(s) <= 64 && 'a' <= s[0] && s[0] <= 'z' && allIn(s[1:], kindRest)
}

// isHex64: ^[0-9a-f]{64}$ (events.IsHex64, which the fast path also
// reads the envelope's two hashes with).
var isHex64 = events.IsHex64

// isDateTime accepts "YYYY-MM-DDTHH:MM:SS[.fraction](Z|+hh:mm|-hh:mm)"
// with a real calendar date (the same time.Parse call jsonschema v6 makes),
// hours to 23, minutes and seconds to 59 (RFC 3339 §5.6; what v6's
// date-time format asserts, without its leap-second and lower-case cases).
func isDateTime(s string) bool {
	if len(s) < 20 || s[10] != 'T' || s[13] != ':' || s[16] != ':' {
		return false
	}
	if !isDate(s[:10]) {
		return false
	}
	h, okH := twoDigits(s[11:13])
	m, okM := twoDigits(s[14:16])
	sec, okS := twoDigits(s[17:19])
	if !okH || !okM || !okS || h > 23 || m > 59 || sec > 59 {
		return false
	}
	rest := s[19:]
	if rest[0] == '.' {
		n := 1
		for n < len(rest) && isDigit(rest[n]) {
			n++
		}
		if n == 1 {
			return false
		}
		rest = rest[n:]
	}
	if rest == "Z" {
		return true
	}
	if len(rest) != 6 || rest[0] != '+' && rest[0] != '-' || rest[3] != ':' {
		return false
	}
	zh, okZH := twoDigits(rest[1:3])
	zm, okZM := twoDigits(rest[4:6])
	return okZH && okZM && zh <= 23 && zm <= 59
}

// isDate accepts what time.Parse("2006-01-02", s) accepts, the call
// jsonschema v6's date-time format makes: four digits of year, a month
// from 01 to 12 and a day of that month (Gregorian leap years), without
// time.Parse's cost for every entry. FuzzIsDate holds the two
// equal.
func isDate(s string) bool {
	if len(s) != 10 || s[4] != '-' || s[7] != '-' {
		return false
	}
	y1, ok1 := twoDigits(s[0:2])
	y2, ok2 := twoDigits(s[2:4])
	m, okM := twoDigits(s[5:7])
	d, okD := twoDigits(s[8:10])
	if !ok1 || !ok2 || !okM || !okD || m < 1 || m > 12 || d < 1 {
		return false
	}
	y := y1*100 + y2
	days := [...]int{31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}[m-1]
	if m == 2 && y%4 == 0 && (y%100 != 0 || y%400 == 0) {
		days = 29
	}
	return d <= days
}

func twoDigits(s string) (int, bool) {
	if len(s) != 2 || !isDigit(s[0]) || !isDigit(s[1]) {
		return 0, false
	}
	return int(s[0]-'0')*10 + int(s[1]-'0'), true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

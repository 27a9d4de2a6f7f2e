package validate

import (
	"time"

	"github.com/roompub/roompub/events"
)

// WithPatternTimeout sets how long one regexp2 match of a pattern outside
// the linear class may run (defaultPatternTimeout).
func WithPatternTimeout(d time.Duration) Option {
	return func(o *options) error {
		o.patternTimeout = d
		return nil
	}
}

// CheckEntrySchema is CheckEntry without the envelope fast check: the
// oracle the fast check is held against.
func (v *Validator) CheckEntrySchema(e *events.Entry, at events.Location) []events.Problem {
	return v.checkEntrySchema(e, at)
}

// EnvelopeValid is the envelope fast check.
var EnvelopeValid = envelopeValid

// EnvelopeSchemaProblems validates e's object with jsonschema alone.
func (v *Validator) EnvelopeSchemaProblems(e *events.Entry) []events.Problem {
	return v.schemas.check(false, e.Object(), events.InvalidEntry, events.Location{})
}

// FastEnvelope reports whether the envelope fast check is on.
func (v *Validator) FastEnvelope() bool { return v.schemas.fastEnvelope }

// MatchSecret is the canary check: the upstream name of the first canary
// s matches, or "".
func MatchSecret(s string) string {
	if c := matchSecret(s); c != nil {
		return c.name
	}
	return ""
}

// IsDate is the envelope's date check (the date of a date-time).
var IsDate = isDate

// MatchSecretPatterns is MatchSecret with the patterns alone, without the
// literal prefilter.
func MatchSecretPatterns(s string) string {
	units := codeUnitView(s)
	for _, c := range secretCanaries {
		if c.re.MatchString(units) {
			return c.name
		}
	}
	return ""
}

// SecretCanaryNames are the canaries' upstream names, in order.
func SecretCanaryNames() []string {
	names := make([]string, len(secretCanaries))
	for i, c := range secretCanaries {
		names[i] = c.name
	}
	return names
}

// CodeUnitView is the string the canaries' patterns run over.
var CodeUnitView = codeUnitView

// TranslateECMA is the linear-class translator (pattern.go).
var TranslateECMA = translateECMA

// CompileLinear is compileLinear with the matcher as a func; seq reports
// whether it is the seqMatcher.
func CompileLinear(expr string) (match func(string) bool, seq bool, ok bool) {
	m, ok := compileLinear(expr)
	if !ok {
		return nil, false, false
	}
	_, seq = m.(*seqMatcher)
	return m.MatchString, seq, true
}

// CheckRecordSchema is CheckRecord without the record fast check: the
// oracle the fast check is held against.
func (v *Validator) CheckRecordSchema(rec *events.Record, at events.Location) []events.Problem {
	return v.checkRecord(rec, at, false)
}

// RecordShapeValid is the record fast check.
var RecordShapeValid = recordShapeValid

// RecordSchemaProblems validates rec's object with jsonschema alone.
func (v *Validator) RecordSchemaProblems(rec *events.Record) []events.Problem {
	return v.schemas.check(true, rec.Object(), events.SchemaInvalid, events.Location{})
}

// FastRecord reports whether the record fast check is on.
func (v *Validator) FastRecord() bool { return v.schemas.fastRecord }

// CompileSchemas compiles the root schemas now, as their first use would.
func (v *Validator) CompileSchemas() error { return v.schemas.compile() }

// IsHex64 is the envelope's check of entry_hash and parent_hash.
var IsHex64 = isHex64

// MayHold is the canaries' prefilter: bit k is clear when s cannot hold
// the literal of canary k.
var MayHold = mayHold

// CanaryNeeds are the literals the prefilter looks for, one a canary, in
// order.
func CanaryNeeds() []string {
	needs := make([]string, len(secretCanaries))
	for i, c := range secretCanaries {
		needs[i] = c.need
	}
	return needs
}

// IsID is the envelope's check of run_id and capsule_id.
var IsID = isID

// CapsuleCheck is the entry check of a capsule's journal, whose
// capsule.json holds meta.
func (v *Validator) CapsuleCheck(meta events.CapsuleMeta) events.EntryCheck {
	return v.capsuleCheck(meta)
}

// CanaryMinBytes is the length below which no string matches a canary.
var CanaryMinBytes = canaryMinBytes

// IsDateTime is the envelope's check of ts.
var IsDateTime = isDateTime

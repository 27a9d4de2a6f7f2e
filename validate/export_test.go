package validate

import "github.com/roompub/roompub/events"

// CheckEntrySchema is CheckEntry without the envelope fast check: the
// oracle the fast check is held against.
func (v *Validator) CheckEntrySchema(e *events.Entry, at events.Location) []events.Problem {
	return v.checkEntrySchema(e, at)
}

// EnvelopeValid is the envelope fast check.
var EnvelopeValid = envelopeValid

// EnvelopeSchemaProblems validates e's object with jsonschema alone.
func (v *Validator) EnvelopeSchemaProblems(e *events.Entry) []events.Problem {
	return schemaProblems(v.schemas.envelope, e.Object(), events.InvalidEntry, events.Location{})
}

// FastEnvelope reports whether the envelope fast check is on.
func (v *Validator) FastEnvelope() bool { return v.schemas.fastEnvelope }

// MatchSecret is the canary check; MatchSecretPatterns is the same with
// the patterns alone, without the literal prefilter.
var MatchSecret = matchSecret

func MatchSecretPatterns(s string) string {
	for _, c := range secretCanaries {
		if c.re.MatchString(s) {
			return c.name
		}
	}
	return ""
}

// TranslateECMA is the linear-class translator (pattern.go).
var TranslateECMA = translateECMA

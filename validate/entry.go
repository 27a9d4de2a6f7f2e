package validate

import (
	"encoding/json"
	"sort"

	"github.com/roompub/roompub/events"
)

// CheckEntry applies the entry-level rules of seed 000 to e: the envelope
// JSON Schema (draft-07, formats asserted), the default-deny payload (only
// strings, numbers and null: no nested objects, arrays or booleans, whatever
// the schema directory allows) and the secret canaries. Every problem is
// events.InvalidEntry with a JSON pointer and a reason naming the rule. It
// has the events.EntryCheck signature.
//
// With the embedded envelope schema, an entry from events' fast path whose
// members are the envelope's (their names matched as the line was read)
// and certainly satisfy it (envelopeValid) skips jsonschema and the map:
// its payload then holds only allowlisted strings, numbers and nulls, so
// only the secret canaries remain to run. Any other entry is checked by
// jsonschema, which finds and words the problems.
func (v *Validator) CheckEntry(e *events.Entry, at events.Location) []events.Problem {
	return v.checkEntry(e, at, checkedIDs{})
}

// checkedIDs are a capsule's run_id and capsule_id when they match the
// envelope's pattern for them ("" when not): an entry's that are the
// same strings take that verdict instead of being read again.
type checkedIDs struct{ runID, capsuleID string }

// capsuleCheck is CheckEntry for the entries of a capsule whose
// capsule.json holds meta: its run_id and capsule_id are checked against
// the envelope's pattern once (checkedIDs), not in every entry that
// repeats them.
func (v *Validator) capsuleCheck(meta events.CapsuleMeta) events.EntryCheck {
	var ids checkedIDs
	if isID(meta.RunID) {
		ids.runID = meta.RunID
	}
	if isID(meta.CapsuleID) {
		ids.capsuleID = meta.CapsuleID
	}
	return func(e *events.Entry, at events.Location) []events.Problem { return v.checkEntry(e, at, ids) }
}

func (v *Validator) checkEntry(e *events.Entry, at events.Location, ids checkedIDs) []events.Problem {
	if v.schemas.fastEnvelope {
		if fields, ok := e.Fields(); ok && e.HasEnvelopeKeys() && envelopeValuesValid(fields, e.HashMatches(), e.HashesHex(), ids) {
			return canaryProblems(payloadField(fields), at)
		}
	}
	return v.checkEntrySchema(e, at)
}

// checkEntrySchema is CheckEntry by jsonschema and the decoded map.
func (v *Validator) checkEntrySchema(e *events.Entry, at events.Location) []events.Problem {
	obj := e.Object()
	problems := v.schemas.check(false, obj, events.InvalidEntry, at)
	payload, ok := obj["payload"].(map[string]any)
	if !ok {
		return problems
	}
	keys := make([]string, 0, len(payload))
	for k := range payload {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		loc := at
		loc.Pointer = pointer([]string{"payload", k})
		switch val := payload[k].(type) {
		case string:
			if c := matchSecret(val); c != nil {
				problems = append(problems, events.Problem{Code: events.InvalidEntry, At: loc, Reason: c.reason()})
			}
		case json.Number, nil:
		default:
			problems = append(problems, events.Problem{Code: events.InvalidEntry, At: loc,
				Reason: "payload values must be strings, numbers or null, not " + jsonType(val)})
		}
	}
	return problems
}

// canaryProblems runs the secret canaries over the string members of a
// payload that envelopeValid accepted, in key order: what the payload
// rules of checkEntrySchema find in such a payload (its keys are ASCII, so
// RFC 8785 order is sort.Strings order).
func canaryProblems(payload []events.Field, at events.Location) []events.Problem {
	var problems []events.Problem
	for i := range payload {
		f := &payload[i]
		if f.Kind != events.KindString || len(f.Text) < canaryMinBytes {
			continue // matchSecret's first test, without the call
		}
		if c := matchSecret(f.Text); c != nil {
			loc := at
			loc.Pointer = pointer([]string{"payload", f.Key})
			problems = append(problems, events.Problem{Code: events.InvalidEntry, At: loc, Reason: c.reason()})
		}
	}
	return problems
}

func jsonType(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case bool:
		return "a boolean"
	default:
		return "this type"
	}
}

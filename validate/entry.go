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
func (v *Validator) CheckEntry(e *events.Entry, at events.Location) []events.Problem {
	obj := e.Object()
	problems := schemaProblems(v.schemas.envelope, obj, events.InvalidEntry, at)
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
			if name := matchSecret(val); name != "" {
				problems = append(problems, events.Problem{Code: events.InvalidEntry, At: loc,
					Reason: "secret canary: payload string looks like " + name + " (value withheld)"})
			}
		case json.Number, nil:
		default:
			problems = append(problems, events.Problem{Code: events.InvalidEntry, At: loc,
				Reason: "payload values must be strings, numbers or null, not " + jsonType(val)})
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

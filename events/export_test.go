package events

import "unicode/utf8"

// ParseEntryGeneral is the general path alone (jcs, encoding/json, the
// preimage re-serialised from the map): the oracle of the fast path.
func ParseEntryGeneral(line []byte) (*Entry, error) {
	if !utf8.Valid(line) {
		_, err := Canonicalize(line)
		return nil, err
	}
	return parseGeneral(line)
}

// ParseEntryFast is the fast path alone: nil when it does not apply.
func ParseEntryFast(line []byte) *Entry {
	if !utf8.Valid(line) {
		return nil
	}
	return parseCanonical(line)
}

// CanonicalNumber is the fast path's number rule.
var CanonicalNumber = canonicalNumber

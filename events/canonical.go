package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// ErrNotJSON is wrapped by Canonicalize and DecodeObject for input that is
// not one strict JSON value: invalid UTF-8, a lone surrogate, a duplicate
// key, a number out of IEEE 754 range, or anything RFC 8259 rejects.
var ErrNotJSON = errors.New("not strict JSON")

// ErrNotObject is wrapped by DecodeObject, ParseEntry and ParseRecord for
// input that is strict JSON but not an object. A journal line like that is
// invalid_entry, as the upstream verifier has it ("envelope must be a plain
// data object"), not corrupt_entry: it is JSON, only not an envelope.
var ErrNotObject = errors.New("a JSON object is required")

// Canonicalize returns the RFC 8785 (JCS) canonical form of one JSON value.
// Input must be I-JSON (RFC 7493): UTF-8, unique keys, no lone surrogates,
// numbers within IEEE 754 double range; anything else wraps ErrNotJSON.
func Canonicalize(raw []byte) ([]byte, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, fmt.Errorf("%w: empty input", ErrNotJSON)
	}
	if !utf8.Valid(raw) {
		return nil, fmt.Errorf("%w: invalid UTF-8", ErrNotJSON)
	}
	out, err := jcs.Transform(raw)
	if err != nil {
		if at, c, ok := rawControl(raw); ok {
			// jcs says "Unterminated string literal" of it.
			return nil, fmt.Errorf("%w: control character U+%04X unescaped inside a string at byte %d", ErrNotJSON, c, at)
		}
		return nil, fmt.Errorf("%w: %v", ErrNotJSON, err)
	}
	return out, nil
}

// rawControl finds the first control character (below U+0020) inside a
// string of raw, which RFC 8259 requires escaped: its byte offset and
// value.
func rawControl(raw []byte) (at int, c byte, ok bool) {
	in, escaped := false, false
	for i, b := range raw {
		switch {
		case !in:
			in = b == '"'
		case escaped:
			escaped = false
		case b == '\\':
			escaped = true
		case b == '"':
			in = false
		case b < 0x20:
			return i, b, true
		}
	}
	return 0, 0, false
}

// DecodeObject canonicalises raw and decodes it into a map whose numbers are
// json.Number, so no precision is lost before a schema sees them. It returns
// the canonical bytes alongside. Errors wrap ErrNotJSON, or ErrNotObject
// when the value is strict JSON but not an object.
func DecodeObject(raw []byte) (map[string]any, []byte, error) {
	canon, err := Canonicalize(raw)
	if err != nil {
		return nil, nil, err
	}
	if err := objectRequired(canon); err != nil {
		return nil, nil, err
	}
	obj, err := decodeCanonical(canon)
	if err != nil {
		return nil, nil, err
	}
	return obj, canon, nil
}

// objectRequired returns an error wrapping ErrNotObject, saying what the
// value is, unless the canonical JSON value canon is an object.
func objectRequired(canon []byte) error {
	what := "a number or literal"
	switch {
	case bytes.HasPrefix(canon, []byte("{")):
		return nil
	case bytes.HasPrefix(canon, []byte("[")):
		what = "an array"
	case bytes.HasPrefix(canon, []byte(`"`)):
		what = "a string"
	}
	return fmt.Errorf("%w, not %s", ErrNotObject, what)
}

func decodeCanonical(canon []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(canon))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		// Cannot happen for JCS output; kept so a library bug is an error, not a panic.
		return nil, fmt.Errorf("%w: %v", ErrNotJSON, err)
	}
	return obj, nil
}

// CanonicalWithout returns the RFC 8785 form of obj with the named top-level
// members left out; obj itself is not changed. This is the preimage of
// entry_hash (without "entry_hash"), execution/ref (without "signature" and
// "execution/ref") and the signature payload (without "signature").
func CanonicalWithout(obj map[string]any, omit ...string) ([]byte, error) {
	sub := make(map[string]any, len(obj))
	for k, v := range obj {
		sub[k] = v
	}
	for _, k := range omit {
		delete(sub, k)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(sub); err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	return Canonicalize(buf.Bytes())
}

package events_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/roompub/roompub/events"
)

func addSeeds(f *testing.F) {
	for _, p := range [][]string{
		{"capsule-journals", "single-entry.json"},
		{"capsule-journals", "single-entry.canonical.txt"},
		{"capsule-journals", "canonical", "capsule.json"},
		{"execution-records", "verified.json"},
		{"execution-records", "refused.json"},
	} {
		f.Add(readRef(f, p...))
	}
	for _, line := range refJournalLines(f) {
		f.Add(line)
	}
	for _, s := range []string{
		`{"a":1.0,"b":"\u0041","c":[1e21,-0,0.1]}`,
		`{"\ufb01":1,"\ud83d\ude00":2}`,
		`{"a":"\ud800"}`,
		`{"a":1,"a":2}`,
		"{\"a\":\"\xff\"}",
		`[[[[[]]]]]`,
		` "s" `,
	} {
		f.Add([]byte(s))
	}
}

// FuzzCanonicalize: RFC 8785 output is a fixed point, valid UTF-8, the same
// JSON value as the input, and only strict JSON is accepted.
func FuzzCanonicalize(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := events.Canonicalize(in)
		if err != nil {
			if !errors.Is(err, events.ErrNotJSON) {
				t.Fatalf("error %v does not wrap ErrNotJSON", err)
			}
			return
		}
		if !json.Valid(in) {
			t.Fatalf("accepted %q, which encoding/json rejects", in)
		}
		if !utf8.Valid(out) {
			t.Fatalf("output %q is not UTF-8", out)
		}
		again, err := events.Canonicalize(out)
		if err != nil {
			t.Fatalf("Canonicalize(%q) = %q, which does not canonicalise: %v", in, out, err)
		}
		if !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %q -> %q -> %q", in, out, again)
		}
		var vin, vout any
		if err := json.Unmarshal(in, &vin); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(out, &vout); err != nil {
			t.Fatalf("output %q is not JSON: %v", out, err)
		}
		if !reflect.DeepEqual(vin, vout) {
			t.Fatalf("value changed: %q -> %q", in, out)
		}
	})
}

// FuzzParseEntry: any line either fails as ErrNotJSON or yields an entry
// whose canonical bytes are a fixed point and whose computed hash is the
// SHA-256 of its canonical form without entry_hash; the chain verifier
// never panics and accepts only a canonical line.
func FuzzParseEntry(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, line []byte) {
		e, err := events.ParseEntry(line)
		v := events.NewChainVerifier(nil, nil)
		ce, problems := v.Check(line, events.Location{Line: 1})
		if err != nil {
			if !errors.Is(err, events.ErrNotJSON) {
				t.Fatalf("error %v does not wrap ErrNotJSON", err)
			}
			want := events.CorruptEntry
			if !utf8.Valid(line) {
				want = events.NonCanonical // DESIGN.md: invalid UTF-8 is non_canonical
			}
			if ce != nil || len(problems) != 1 || problems[0].Code != want {
				t.Fatalf("Check on a line ParseEntry refuses: %v %v", ce, problems)
			}
			return
		}
		canon, err := events.Canonicalize(e.Canonical())
		if err != nil || !bytes.Equal(canon, e.Canonical()) {
			t.Fatalf("Canonical() %q is not canonical: %v", e.Canonical(), err)
		}
		pre, err := events.CanonicalWithout(e.Object(), "entry_hash")
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(pre); hex.EncodeToString(sum[:]) != e.ComputedHash() {
			t.Fatalf("ComputedHash %s is not sha256 of %q", e.ComputedHash(), pre)
		}
		if ce == nil {
			t.Fatal("Check returned no entry for a line ParseEntry accepts")
		}
		if len(problems) == 0 {
			// Without an entry check (package validate's), a missing
			// entry_hash is the schema's to refuse; a present one must match.
			claimed, isString := e.Object()["entry_hash"].(string)
			if !bytes.Equal(line, e.Canonical()) || isString && claimed != e.ComputedHash() || v.Next() != 1 || v.Head() != e.EntryHash() {
				t.Fatalf("accepted a line that breaks the chain rules: %q", line)
			}
		} else if v.Next() != 0 {
			t.Fatal("advanced past a refused line")
		}
	})
}

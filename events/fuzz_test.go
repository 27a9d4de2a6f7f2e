package events_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gowebpki/jcs"

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
		// seqs LineSeq reads, and ones it does not
		`{"seq":0}`,
		`{"seq":-1}`,
		`{ "\u0073eq" : 4 }`,
		`{"seq":1.0}`,
		`{"seq":1e3}`,
		`{"seq":"7"}`,
		`{"seq":9223372036854775808}`,
		`{"seq":4611686018427387904}`,
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

// FuzzParseEntry: any line either fails as ErrNotJSON or ErrNotObject or
// yields an entry whose canonical bytes are a fixed point and whose
// computed hash is the SHA-256 of its canonical form without entry_hash
// (for an entry without lone surrogates, whose map is exact: the other
// ones are FuzzEntryLoneSurrogates'); the chain verifier never panics and
// accepts only a canonical line; LineSeq reads the seq encoding/json
// reads (jsonSeq), and nothing from a line ParseEntry refuses.
func FuzzParseEntry(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, line []byte) {
		e, err := events.ParseEntry(line)
		v := events.NewChainVerifier(nil, nil)
		ce, problems := v.Check(line, events.Location{Line: 1})
		le, seq := events.LineSeq(line)
		if err != nil && (le != nil || seq != -1) {
			t.Fatalf("LineSeq of a line ParseEntry refuses: %v, %d", le, seq)
		}
		if want, ok, known := jsonSeq(line); err == nil && known {
			if !ok {
				want = -1
			}
			if (le != nil) != ok || seq != want {
				t.Fatalf("LineSeq(%q) = %v, %d; jcs and encoding/json read seq %d (%v)", line, le, seq, want, ok)
			}
		}
		if err != nil {
			want := events.CorruptEntry
			switch {
			case errors.Is(err, events.ErrNotObject):
				want = events.InvalidEntry // the upstream: "envelope must be a plain data object"
			case !errors.Is(err, events.ErrNotJSON):
				t.Fatalf("error %v wraps neither ErrNotJSON nor ErrNotObject", err)
			}
			if !utf8.Valid(line) {
				want = events.NonCanonical // docs/design.md, "Refusal codes and their order": invalid UTF-8 is non_canonical
			}
			if ce != nil || len(problems) != 1 || problems[0].Code != want {
				t.Fatalf("Check on a line ParseEntry refuses: %v %v", ce, problems)
			}
			return
		}
		again, err := events.ParseEntry(e.Canonical())
		if err != nil || !bytes.Equal(again.Canonical(), e.Canonical()) || again.ComputedHash() != e.ComputedHash() {
			t.Fatalf("Canonical() %q is not canonical: %v", e.Canonical(), err)
		}
		if !holdsLoneSurrogate(e.Canonical()) {
			canon, err := events.Canonicalize(e.Canonical())
			if err != nil || !bytes.Equal(canon, e.Canonical()) {
				t.Fatalf("Canonical() %q is not RFC 8785: %v", e.Canonical(), err)
			}
			pre, err := events.CanonicalWithout(e.Object(), "entry_hash")
			if err != nil {
				t.Fatal(err)
			}
			if sum := sha256.Sum256(pre); hex.EncodeToString(sum[:]) != e.ComputedHash() {
				t.Fatalf("ComputedHash %s is not sha256 of %q", e.ComputedHash(), pre)
			}
		}
		if ce == nil {
			t.Fatal("Check returned no entry for a line ParseEntry accepts")
		}
		if len(problems) == 0 {
			// Without an entry check (package validate's), a missing
			// entry_hash is the schema's to refuse; a present one must match.
			_, isString := e.Object()["entry_hash"].(string)
			if !bytes.Equal(line, e.Canonical()) || isString && e.EntryHash() != e.ComputedHash() || v.Next() != 1 || v.Head() != e.EntryHash() {
				t.Fatalf("accepted a line that breaks the chain rules: %q", line)
			}
		} else if v.Next() != 0 {
			t.Fatal("advanced past a refused line")
		}
	})
}

// jsonSeq is the oracle of LineSeq on a line ParseEntry accepts: the
// "seq" of the line's RFC 8785 form (by jcs; 1.0 and 1e3 are 1 and 1000)
// as encoding/json decodes it, if that is an integer that fits an int64.
// known is false when jcs cannot say (a lone surrogate).
func jsonSeq(line []byte) (seq int64, ok, known bool) {
	canon, err := jcs.Transform(line)
	if err != nil {
		return 0, false, false
	}
	d := json.NewDecoder(bytes.NewReader(canon))
	d.UseNumber()
	var obj map[string]any
	if d.Decode(&obj) != nil {
		return 0, false, false
	}
	n, ok := obj["seq"].(json.Number)
	if !ok {
		return 0, false, true
	}
	seq, err = strconv.ParseInt(string(n), 10, 64)
	return seq, err == nil, true
}

// FuzzEntryFastPath holds the fast path (one pass over a canonical line,
// the preimage cut out of it) against the general path (jcs, encoding/json,
// CanonicalWithout) on every input: when the fast path takes a line, jcs
// must say the line is canonical and both paths must build the same entry
// (canonical bytes, entry hash, decoded object, accessors, chain problems);
// when it declines a line, the line must not be a canonical one of the
// simple shape.
func FuzzEntryFastPath(f *testing.F) {
	addSeeds(f)
	for _, line := range sampleLines(f) {
		f.Add(line)
	}
	for _, s := range []string{
		`{"a":1,"entry_hash":{"b":2},"z":null}`, `{"entry_hash":"x","z":1}`, `{"a":"\u001f\b"}`, `{"a":1e+21,"b":-0.5}`,
		`{"a":{"b":true,"c":false}}`, `{"B":1,"a":2}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		compareFastPath(t, line)
	})
}

// FuzzCanonicalNumber holds the fast path's number rule against jcs: a
// number token is taken as canonical exactly when jcs leaves it unchanged,
// and every ES6 rendering of a double is taken.
func FuzzCanonicalNumber(f *testing.F) {
	for _, s := range []string{"0", "-0", "1e+21", "123456789012345", "0.1", "5e-324", "1e309", "01"} {
		f.Add(s, 1.5)
	}
	f.Add("9007199254740993", 1e21)
	f.Add("-1.7976931348623157e+308", 5e-324)
	f.Add("0.000001", 9.999999999999999e-7) // either side of the plain-notation range
	f.Add("-123.456", 999999999999999900000.0)
	f.Fuzz(func(t *testing.T, s string, x float64) {
		canon, err := jcs.Transform([]byte(s))
		want := err == nil && string(canon) == s && s != "" && (s[0] == '-' || '0' <= s[0] && s[0] <= '9')
		if got := events.CanonicalNumber(s); got != want {
			t.Fatalf("CanonicalNumber(%q) = %v, jcs says %v (%q, %v)", s, got, want, canon, err)
		}
		if es6, err := jcs.NumberToJSON(x); err == nil && !events.CanonicalNumber(es6) {
			t.Fatalf("CanonicalNumber(%q), the ES6 form of %v, is false", es6, x)
		}
	})
}

// FuzzCheckCapsule: any capsule.json bytes give problems that are all
// invalid_capsule in the file, each at most once per member; a capsule
// without problems holds the four identity strings on the id pattern, and
// a created_at CanonicalISOTime accepts is one time.Parse reads back.
func FuzzCheckCapsule(f *testing.F) {
	addSeeds(f)
	f.Add([]byte(`{"capsule_id":"c","created_at":"+275760-09-13T00:00:00.000Z","harness_version":"\u3000h","run_id":"r","schema":"capsule-envelope/v1","task_family":"f"}`))
	f.Add([]byte(`{"capsule_id":"c","created_at":"2024-02-29T23:59:59.999Z","harness_version":"h","run_id":"r:1.a_b-c","schema":"capsule-envelope/v1","task_family":"\ufeff"}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		c := events.CheckCapsule(raw, "capsule.json")
		seen := map[string]bool{}
		for _, p := range c.Problems {
			if p.Code != events.InvalidCapsule || p.At.File != "capsule.json" || p.Reason == "" {
				t.Fatalf("problem %+v", p)
			}
			if seen[p.At.Pointer] {
				t.Fatalf("two problems at %q: %v", p.At.Pointer, c.Problems)
			}
			seen[p.At.Pointer] = true
		}
		if len(c.Problems) == 0 {
			m := c.Meta
			if !events.IDPattern.MatchString(m.RunID) || !events.IDPattern.MatchString(m.CapsuleID) || m.HarnessVersion == "" || m.TaskFamily == "" {
				t.Fatalf("accepted %q with metadata %+v", raw, m)
			}
		}
	})
}

// FuzzCanonicalISOTime: a string CanonicalISOTime accepts in its four-digit
// form is one Go reads back as the same instant and writes identically.
func FuzzCanonicalISOTime(f *testing.F) {
	for _, s := range []string{"2026-01-01T00:00:00.000Z", "+010000-01-01T00:00:00.000Z", "2024-02-29T12:00:00.000Z", "2026-02-30T00:00:00.000Z", "-000001-12-31T23:59:59.999Z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !events.CanonicalISOTime(s) || len(s) != 24 {
			return
		}
		tm, err := time.Parse("2006-01-02T15:04:05.000Z", s)
		if err != nil || tm.Format("2006-01-02T15:04:05.000Z") != s {
			t.Fatalf("CanonicalISOTime(%q) but Go reads %v, %v", s, tm, err)
		}
	})
}

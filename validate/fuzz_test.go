package validate_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/validate"
)

func addRecordSeeds(f *testing.F) {
	for _, name := range []string{
		"verified.json", "refused.json", "foreign-evidence.json",
		"invalid/inline-output.json", "invalid/refused-without-code.json", "invalid/verified-without-instance.json",
	} {
		f.Add(readRef(f, "execution-records", name))
	}
	key, _ := testKey(11)
	f.Add(signed(f, recordMembers(f), key))
	f.Add([]byte(`{"schema/v":1}`))
	f.Add([]byte("")) // empty_input, no record
}

// FuzzRecord: validate.Record never panics, reports only refusals, and a
// record it accepts re-verifies from its canonical bytes with the same
// identity.
func FuzzRecord(f *testing.F) {
	addRecordSeeds(f)
	v := newValidator(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		rec, err := v.Record(raw, events.Location{})
		if err != nil {
			var ref *events.Refusal
			if !errors.As(err, &ref) || len(ref.Problems) == 0 || ref.Problems[0].Code != ref.Code {
				t.Fatalf("error %v is not a well-formed refusal", err)
			}
			if unparsed := ref.Code == events.MalformedJSON || ref.Code == events.EmptyInput; (rec == nil) != unparsed {
				t.Fatalf("code %s with record %v", ref.Code, rec != nil)
			}
			return
		}
		if rec.ExecutionRef() != rec.ComputedRef() {
			t.Fatalf("accepted a record whose execution/ref %s is not %s", rec.ExecutionRef(), rec.ComputedRef())
		}
		again, err := v.Record(rec.Canonical(), events.Location{})
		if err != nil {
			t.Fatalf("accepted record does not re-verify from its canonical bytes: %v", err)
		}
		if !bytes.Equal(again.Canonical(), rec.Canonical()) || again.ContentDigest() != rec.ContentDigest() {
			t.Fatal("re-verification changed the record")
		}
	})
}

func addJournalSeeds(f *testing.F) {
	raw := readRef(f, "capsule-journals", "canonical", "journal.ndjson")
	for _, line := range bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n")) {
		f.Add(line)
	}
	for _, line := range chainLines(f, 1, func(_ int, m map[string]any) {
		payload(m)["note"] = "n"
		payload(m)["score"] = -0.5
	}) {
		f.Add(line)
	}
	f.Add([]byte(`{"seq":0}`))
	f.Add([]byte(`{"a":"\ud800"}`))
	f.Add([]byte("\x91")) // not UTF-8: non_canonical, no entry
}

// FuzzChainCheck feeds one line to a chain verifier with the real entry
// rules: it never panics, a line that is not JSON is exactly one
// corrupt_entry (non_canonical when it is not UTF-8, invalid_entry when it
// is JSON but not an object), and an accepted line is canonical,
// hash-correct and linked to the zero hash.
func FuzzChainCheck(f *testing.F) {
	addJournalSeeds(f)
	v := newValidator(f)
	f.Fuzz(func(t *testing.T, line []byte) {
		chain := v.NewChain(nil)
		e, problems := chain.Check(line, events.Location{Line: 1})
		if e == nil {
			_, err := events.ParseEntry(line)
			want := events.CorruptEntry
			switch {
			case !utf8.Valid(line):
				want = events.NonCanonical // checked before parsing, as upstream does
			case errors.Is(err, events.ErrNotObject):
				want = events.InvalidEntry
			}
			if len(problems) != 1 || problems[0].Code != want {
				t.Fatalf("no entry, problems %v", problems)
			}
			if err == nil {
				t.Fatal("Check calls a line corrupt that ParseEntry accepts")
			}
			return
		}
		if len(problems) > 0 {
			if events.NewRefusal(problems).Code != problems[0].Code || chain.Next() != 0 {
				t.Fatal("refused line advanced the chain")
			}
			return
		}
		seq, ok := e.Seq()
		if !bytes.Equal(line, e.Canonical()) || e.EntryHash() != e.ComputedHash() || e.ParentHash() != events.ZeroHash || !ok || seq != 0 {
			t.Fatalf("accepted a line that breaks the chain rules: %q", line)
		}
		if chain.Next() != 1 || chain.Head() != e.EntryHash() {
			t.Fatal("accepted line did not advance the chain")
		}
	})
}

// FuzzJournal verifies whole journals: never panics, refusals are
// well-formed and bounded, and an accepted journal ends in a newline and is
// valid throughout.
func FuzzJournal(f *testing.F) {
	f.Add(readRef(f, "capsule-journals", "canonical", "journal.ndjson"))
	f.Add(journalBytes(chainLines(f, 3, nil)...))
	f.Add([]byte("\n\n"))
	f.Add([]byte(""))
	v := newValidator(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := v.Journal(bytes.NewReader(data), "j", nil)
		if res.Valid > res.Entries || len(res.Head) != 64 {
			t.Fatalf("result %+v", res)
		}
		if err != nil {
			var ref *events.Refusal
			if !errors.As(err, &ref) || len(ref.Problems) == 0 || len(ref.Problems) > events.MaxProblems {
				t.Fatalf("error %v is not a well-formed refusal", err)
			}
			return
		}
		if len(data) == 0 || data[len(data)-1] != '\n' || res.Valid != res.Entries || res.Entries != bytes.Count(data, []byte("\n")) {
			t.Fatalf("accepted %q with result %+v", data, res)
		}
	})
}

// FuzzEnvelopeFastCheck holds the envelope fast check against jsonschema
// v6 on every line that parses: the fast check never calls valid what
// jsonschema refuses, and CheckEntry's problems are exactly those of the
// jsonschema path. Seeded with the real entries of testdata, which the
// fuzzer mutates.
func FuzzEnvelopeFastCheck(f *testing.F) {
	addJournalSeeds(f)
	for _, line := range sampleEntryLines(f) {
		f.Add(line)
	}
	v := newValidator(f)
	f.Fuzz(func(t *testing.T, line []byte) {
		e, err := events.ParseEntry(line)
		if err != nil {
			return
		}
		compareEnvelopeCheck(t, v, e)
	})
}

// FuzzEnvelopeValues sets one member of a valid entry (top level, or the
// payload's when key starts with "payload.") to a fuzzed string, number,
// or literal, and compares the fast check with jsonschema on the result.
func FuzzEnvelopeValues(f *testing.F) {
	for _, s := range []struct {
		key, val string
		as       byte
	}{
		{"ts", "2026-09-02T00:00:00Z", 's'}, {"ts", "2026-09-02T23:59:60+01:00", 's'}, {"run_id", "a:b", 's'},
		{"kind", "tool.call", 's'}, {"seq", "1e+21", 'n'}, {"seq", "-0", 'n'}, {"payload.exit_code", "null", 'l'},
		{"payload.tokens_in", "12.5", 'n'}, {"payload.message", "AKIAABCDEFGHIJKLMNOP", 's'}, {"effect_class", "SE3", 's'},
		{"parent_hash", events.ZeroHash, 's'}, {"lineage", "plan", 's'}, {"payload.cost_usd", "0.0003", 'n'},
	} {
		f.Add(s.key, s.val, s.as)
	}
	v := newValidator(f)
	f.Fuzz(func(t *testing.T, key, val string, as byte) {
		var value any = val
		switch as % 3 {
		case 1:
			if !json.Valid([]byte(val)) {
				return
			}
			value = json.RawMessage(val)
		case 2:
			switch val {
			case "null":
				value = nil
			case "true", "false":
				value = val == "true"
			}
		}
		m := entryMembers(0, events.ZeroHash)
		if k, ok := strings.CutPrefix(key, "payload."); ok {
			payload(m)[k] = value
		} else {
			m[key] = value
		}
		raw, err := json.Marshal(m)
		if err != nil {
			return
		}
		canon, err := events.Canonicalize(raw)
		if err != nil {
			return
		}
		e, err := events.ParseEntry(canon)
		if err != nil {
			t.Fatalf("canonical %q does not parse: %v", canon, err)
		}
		compareEnvelopeCheck(t, v, e)
	})
}

// FuzzIsDate holds the envelope's date check to the time.Parse call
// jsonschema v6's date-time format makes.
func FuzzIsDate(f *testing.F) {
	for _, s := range []string{"2026-09-02", "2024-02-29", "2023-02-29", "1900-02-29", "2000-02-29", "0000-02-29",
		"9999-12-31", "2026-13-01", "2026-00-10", "2026-04-31", "2026-4-30", "+026-04-30", "2026-04-3a", "2026-04-00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, err := time.Parse("2006-01-02", s)
		if got, want := validate.IsDate(s), err == nil; got != want {
			t.Fatalf("IsDate(%q) = %v, time.Parse says %v (%v)", s, got, want, err)
		}
	})
}

// FuzzSecretCanaries holds the secret canaries (literal prefilter, then
// RE2 over the code-unit view) to the upstream's patterns under ECMA-262
// (the regexp2 reference over UTF-16 code units): the same first canary,
// or none, for every string; and the prefilter to the patterns alone.
// Seeded with canarySeeds, every edge of every pattern.
func FuzzSecretCanaries(f *testing.F) {
	for _, s := range canarySeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := validate.MatchSecret(s)
		if want := ecmaSecret(t, s); got != want {
			t.Fatalf("MatchSecret(%+q) = %q, ECMA-262 says %q", s, got, want)
		}
		if pat := validate.MatchSecretPatterns(s); pat != got {
			t.Fatalf("MatchSecret(%+q) = %q, the patterns alone say %q", s, got, pat)
		}
	})
}

// FuzzPatternLinear: whenever compileLinear accepts a pattern, its matcher
// (seqMatcher or Go's regexp), Go's regexp on the translation, and regexp2 (ECMAScript|Unicode, as ecmaEngine.compile configures it) give every
// input the same MatchString verdict. Inputs are valid UTF-8, as every JSON
// string jsonschema sees is. regexp2's budget never makes a verdict here: a
// match still running after 200 ms (an exponential backtrack the class
// allows, e.g. (a*)*b, which Go's regexp matches in linear time) is skipped.
// Patterns up to 64 bytes and inputs up to 256 bytes keep executions short.
func FuzzPatternLinear(f *testing.F) {
	for _, p := range []string{
		`^[0-9a-f]{64}$`, `^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`, `^sha256:[A-Za-z0-9_-]{43}$`,
		`^[a-z][a-z0-9-]*:[^\s]+$`, `^[a-z0-9]+(?:-[a-z0-9]+)*$`, `^[a-z][a-z0-9-]*[:/][^\s]+$`,
		`^z[A-Za-z0-9]+$`, `[^\s\d]|\S{2,3}?`, `(a|\u00a0)*\W$`, `.\w[\x00-\x1f-]`,
		`^\d*[:/]\S+$`, `^[^a-f]{0,3}a+\s?$`, `^.*é[^\w]{2}$`,
	} {
		for _, s := range []string{"", "room:a\u00a0b", "a\u2028", "\u180e\u0085\ufeff", "\v\f\x00", "\U0001f600\ufffd", "abc\n"} {
			f.Add(p, s)
		}
	}
	f.Fuzz(func(t *testing.T, pattern, input string) {
		if !utf8.ValidString(input) || len(pattern) > 64 || len(input) > 256 {
			return
		}
		match, seq, ok := validate.CompileLinear(pattern)
		if !ok {
			return // left to regexp2
		}
		src, _ := validate.TranslateECMA(pattern)
		lin := regexp.MustCompile(src) // compileLinear compiled it
		ora, err := regexp2.Compile(pattern, regexp2.ECMAScript|regexp2.Unicode)
		if err != nil {
			return // ecmaEngine.compile refuses it before trying the translation
		}
		ora.MatchTimeout = 200 * time.Millisecond
		want, err := ora.MatchString(input)
		if err != nil {
			t.Skip(err)
		}
		if got := lin.MatchString(input); got != want {
			t.Fatalf("pattern %q (Go %q) on %+q: Go regexp %v, regexp2 %v", pattern, src, input, got, want)
		}
		if got := match(input); got != want {
			t.Fatalf("pattern %q (seqMatcher %v) on %+q: compileLinear %v, regexp2 %v", pattern, seq, input, got, want)
		}
	})
}

// FuzzRecordShape holds the record fast check against jsonschema v6 on
// every input that parses as a record: the fast check never calls valid
// what jsonschema refuses, and CheckRecord's problems are exactly those of
// the jsonschema path. Seeded with the records of testdata and a sample of
// their one-change mutations, which the fuzzer mutates further.
func FuzzRecordShape(f *testing.F) {
	addRecordSeeds(f)
	for _, raw := range sampleRecords(f) {
		f.Add(raw)
	}
	for i, m := range mutations(recordMembers(f)) {
		if i%40 == 0 {
			raw, err := json.Marshal(m)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(raw)
		}
	}
	v := newValidator(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		rec, err := events.ParseRecord(raw)
		if err != nil {
			return
		}
		compareRecordCheck(t, v, rec)
	})
}

// FuzzRecordShapeValues sets one member of a valid record to a fuzzed
// string, JSON value or literal and compares the fast check with
// jsonschema on the result. key is a member name, or a path of member
// names and array indexes joined by "." ("candidate.ref", "evidence.0.step/id").
func FuzzRecordShapeValues(f *testing.F) {
	for _, s := range []struct {
		key, val string
		as       byte
	}{
		{"recorded-at", "2026-09-02T23:59:60+01:00", 's'}, {"schema/v", "1.0", 'n'}, {"room/id", "room:a\u00a0b", 's'},
		{"outcome", "refused", 's'}, {"refusal/code", "hil/denied", 's'}, {"evidence.0.step/id", "a--b", 's'},
		{"candidate.artifact/type", "inquirium.candidate-plan.v1", 's'}, {"signature.key/public", "z6Mk", 's'},
		{"target.binding/ref", "operator-task-local-binding:x", 's'}, {"environment/ref", "null", 'l'},
		{"evidence", `[]`, 'n'}, {"idempotency/key", "é", 's'}, {"candidate/adoption-ref", "x", 's'},
	} {
		f.Add(s.key, s.val, s.as)
	}
	v := newValidator(f)
	f.Fuzz(func(t *testing.T, key, val string, as byte) {
		var value any = val
		switch as % 3 {
		case 1:
			d := json.NewDecoder(strings.NewReader(val))
			d.UseNumber()
			if err := d.Decode(&value); err != nil || d.More() {
				return
			}
		case 2:
			switch val {
			case "null":
				value = nil
			case "true", "false":
				value = val == "true"
			}
		}
		m := recordMembers(t)
		var cur any = m
		steps := strings.Split(key, ".")
		for i, step := range steps {
			last := i == len(steps)-1
			switch c := cur.(type) {
			case map[string]any:
				if last {
					c[step] = value
				} else {
					cur = c[step]
				}
			case []any:
				n, err := strconv.Atoi(step)
				if err != nil || n < 0 || n >= len(c) {
					return
				}
				if last {
					c[n] = value
				} else {
					cur = c[n]
				}
			default:
				return
			}
		}
		raw, err := json.Marshal(m)
		if err != nil {
			return
		}
		rec, err := events.ParseRecord(raw)
		if err != nil {
			t.Fatalf("%s does not parse: %v", raw, err)
		}
		compareRecordCheck(t, v, rec)
	})
}

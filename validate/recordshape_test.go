package validate_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/schemas"
	"github.com/roompub/roompub/validate"
)

// compareRecordCheck fails t when the record fast check says "valid" for
// a record jsonschema refuses, or when CheckRecord (with the fast check)
// and the jsonschema path give different problems. It reports whether the
// fast check took the record.
func compareRecordCheck(t testing.TB, v *validate.Validator, rec *events.Record) bool {
	t.Helper()
	at := events.Location{File: "r.json", Line: 1}
	fast := validate.RecordShapeValid(rec.Object())
	if fast {
		if ps := v.RecordSchemaProblems(rec); len(ps) > 0 {
			t.Fatalf("fast check accepts %q, jsonschema refuses it: %v", rec.Canonical(), ps)
		}
	}
	got, want := v.CheckRecord(rec, at), v.CheckRecordSchema(rec, at)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("CheckRecord(%q):\n got %v\nwant %v", rec.Canonical(), got, want)
	}
	return fast
}

// sampleRecords returns every execution record of the reference vectors
// and the samples.
func sampleRecords(tb testing.TB) [][]byte {
	tb.Helper()
	var out [][]byte
	for _, pat := range []string{
		filepath.Join(refDir, "execution-records", "*.json"),
		filepath.Join(refDir, "execution-records", "invalid", "*.json"),
		filepath.Join("..", "testdata", "samples", "records", "*.json"),
	} {
		files, err := filepath.Glob(pat)
		if err != nil {
			tb.Fatal(err)
		}
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				tb.Fatal(err)
			}
			out = append(out, raw)
		}
	}
	if len(out) < 9 {
		tb.Fatalf("only %d sample records", len(out))
	}
	return out
}

// decodeRecord decodes raw as ParseRecord's map does (json.Number).
func decodeRecord(tb testing.TB, raw []byte) map[string]any {
	tb.Helper()
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		tb.Fatal(err)
	}
	return m
}

// deepCopy copies a decoded JSON value.
func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = deepCopy(e)
		}
		return s
	}
	return v
}

// leafPath is a path to a value in a decoded record: map keys and slice
// indexes (as int).
type leafPath []any

// paths lists every path in v (objects, arrays and leaves), parents first.
func paths(v any, prefix leafPath, out *[]leafPath) {
	*out = append(*out, append(leafPath(nil), prefix...))
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			paths(x[k], append(prefix, k), out)
		}
	case []any:
		for i, e := range x {
			paths(e, append(prefix, i), out)
		}
	}
}

// valueAt returns the value at p in root and a setter for it.
func valueAt(root any, p leafPath) (any, func(any)) {
	cur := root
	set := func(any) {}
	for _, step := range p {
		switch k := step.(type) {
		case string:
			m := cur.(map[string]any)
			cur = m[k]
			set = func(v any) { m[k] = v }
		case int:
			s := cur.([]any)
			cur = s[k]
			set = func(v any) { s[k] = v }
		}
	}
	return cur, set
}

// mutations returns records derived from m, each with one change: every
// member of every object dropped, an unknown member added, every value
// replaced by values of every type, every string edited next to its
// pattern's and length's borders, and the members the if/then rules read
// set in every combination.
func mutations(m map[string]any) []map[string]any {
	var out []map[string]any
	var ps []leafPath
	paths(m, nil, &ps)
	edit := func(p leafPath, v any) {
		c := deepCopy(m).(map[string]any)
		_, set := valueAt(c, p)
		if len(p) == 0 {
			return
		}
		set(v)
		out = append(out, c)
	}
	zoo := []any{nil, true, false, json.Number("1"), json.Number("1.0"), json.Number("-1"), json.Number("1e0"),
		json.Number("2"), "", "x", "1", []any{}, map[string]any{}}
	for _, p := range ps {
		val, _ := valueAt(m, p)
		switch x := val.(type) {
		case map[string]any:
			for k := range x {
				c := deepCopy(m).(map[string]any)
				obj, _ := valueAt(c, p)
				delete(obj.(map[string]any), k)
				out = append(out, c)
			}
			for _, extra := range []string{"x", "Outcome", "environment/ref", "refusal/code", "candidate/adoption-ref"} {
				if _, has := x[extra]; has {
					continue
				}
				c := deepCopy(m).(map[string]any)
				obj, _ := valueAt(c, p)
				obj.(map[string]any)[extra] = "environment:qmail-01"
				out = append(out, c)
			}
		case []any:
			edit(p, append(deepCopy(x).([]any), deepCopy(x).([]any)...))
			edit(p, []any{})
			if len(x) > 0 {
				edit(p, x[1:])
				var many []any
				for len(many) < 32 {
					many = append(many, deepCopy(x[0]))
				}
				edit(p, many)
				edit(p, append(many, deepCopy(x[0])))
			}
		case string:
			for _, s := range stringEdits(x) {
				edit(p, s)
			}
		}
		for _, z := range zoo {
			edit(p, deepCopy(z))
		}
	}
	// outcome × refusal/code × environment/ref.
	for _, outcome := range []any{"verified", "verification-failed", "refused", "cancelled", "unknown", "Refused", nil} {
		for _, code := range []any{"hil/denied", "run/budget-exhausted", "hil/other", nil, "absent"} {
			for _, env := range []any{"environment:qmail-01", "environment:other", "absent"} {
				c := deepCopy(m).(map[string]any)
				for k, v := range map[string]any{"outcome": outcome, "refusal/code": code, "environment/ref": env} {
					if v == "absent" {
						delete(c, k)
					} else {
						c[k] = v
					}
				}
				out = append(out, c)
			}
		}
	}
	return out
}

// dateTimes are date-time edge cases (RFC 3339 and jsonschema v6's
// reading of it).
var dateTimes = []string{
	"2026-09-02T00:00:00Z", "2026-09-02t00:00:00Z", "2026-09-02T00:00:00z", "2026-02-29T00:00:00Z", "2028-02-29T00:00:00Z",
	"2026-09-02T23:59:60Z", "2026-12-31T23:59:60Z", "2026-09-02T00:00:60Z", "2026-09-02T24:00:00Z", "2026-09-02T00:00:00.Z",
	"2026-09-02T00:00:00+23:59", "2026-09-02T00:00:00+24:00", "2026-09-02T00:00:00-00:00", "2026-09-02T00:00:00+0000",
	"2026-13-02T00:00:00Z", "0000-01-01T00:00:00Z", "2026-09-02 00:00:00Z", "2026-09-02T00:00:00.123456789Z",
	"2026-09-02T00:00:00Z ", "2026-9-02T00:00:00Z", "2026-09-02T00:60:00Z", "2026-04-31T00:00:00Z", "2026-09-02T00:00:00+01:60",
}

// stringEdits returns s edited next to the borders of the rules a string
// member can have: one character more, fewer, changed (to an ASCII letter,
// a digit, '-', '_', a space, U+00A0, 'é', upper case), padded to the
// lengths the schemas bound (in code points, with 'a' and with 'é'), and
// every date-time edge case.
func stringEdits(s string) []string {
	out := []string{s + "a", s + " ", s + "\u00a0", s + "é", s + "=", " " + s, "A" + s}
	if s != "" {
		r := []rune(s)
		out = append(out, string(r[1:]), string(r[:len(r)-1]))
		for _, i := range []int{0, len(r) / 2, len(r) - 1} {
			for _, c := range []rune{'a', 'Z', '0', '-', '_', ' ', '\u00a0', 'é', '/', ':', '.', '\t'} {
				e := append([]rune(nil), r...)
				e[i] = c
				out = append(out, string(e))
			}
		}
		out = append(out, strings.ToUpper(s))
	}
	for _, n := range []int{43, 44, 86, 87, 127, 128, 129, 256, 257, 511, 512, 513} {
		for _, c := range []string{"a", "é"} {
			if k := n - len([]rune(s)); k > 0 {
				out = append(out, s+strings.Repeat(c, k))
			}
		}
	}
	return append(out, dateTimes...)
}

// parseMutated turns a decoded record into a parsed one through its JSON.
func parseMutated(tb testing.TB, m map[string]any) *events.Record {
	tb.Helper()
	raw, err := json.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	rec, err := events.ParseRecord(raw)
	if err != nil {
		tb.Fatalf("%s: %v", raw, err)
	}
	return rec
}

// TestRecordShapeTakesRealRecords: the fast check accepts every sample
// record that jsonschema accepts, and agrees with jsonschema on all.
func TestRecordShapeTakesRealRecords(t *testing.T) {
	v := newValidator(t)
	if !v.FastRecord() {
		t.Fatal("record fast check is off with the embedded schemas")
	}
	taken := 0
	for _, raw := range sampleRecords(t) {
		rec, err := events.ParseRecord(raw)
		if err != nil {
			t.Fatal(err)
		}
		fast := compareRecordCheck(t, v, rec)
		if len(v.RecordSchemaProblems(rec)) == 0 {
			if !fast {
				t.Errorf("fast check declines a valid record: %s", raw)
			}
			taken++
		}
	}
	key, _ := testKey(11)
	if !compareRecordCheck(t, v, mustParse(t, signed(t, recordMembers(t), key))) {
		t.Error("fast check declines a freshly signed record")
	}
	if taken < 6 {
		t.Fatalf("only %d valid sample records", taken)
	}
}

func mustParse(tb testing.TB, raw []byte) *events.Record {
	tb.Helper()
	rec, err := events.ParseRecord(raw)
	if err != nil {
		tb.Fatal(err)
	}
	return rec
}

// TestRecordShapeDifferential: every sample record and thousands of
// one-change mutations of each, checked against jsonschema one by one.
// Both verdicts must occur often, or the mutations prove little. Under
// the race detector every tenth mutation is checked.
func TestRecordShapeDifferential(t *testing.T) {
	v := newValidator(t)
	n, taken, refused := 0, 0, 0
	step, least := 1, 5000
	if raceEnabled { // a sample: the race detector makes this ten times slower
		step, least = 10, 500
	}
	seen := map[string]bool{}
	for _, raw := range sampleRecords(t) {
		if canon := string(mustParse(t, raw).Canonical()); seen[canon] {
			continue // the samples repeat some reference records
		} else {
			seen[canon] = true
		}
		for i, m := range mutations(decodeRecord(t, raw)) {
			if raceEnabled && i%step != 0 {
				continue
			}
			rec := parseMutated(t, m)
			if compareRecordCheck(t, v, rec) {
				taken++
			}
			if len(v.RecordSchemaProblems(rec)) > 0 {
				refused++
			}
			n++
		}
	}
	t.Logf("%d mutated records: fast check took %d, jsonschema refused %d", n, taken, refused)
	if n < least || taken < n/10 || refused < n/2 {
		t.Fatalf("%d mutated records: fast check took %d, jsonschema refused %d", n, taken, refused)
	}
}

// TestRecordShapeOnlyForTheEmbeddedSchemas: a schema directory that
// overlays the record schema or any file it references with other bytes
// turns the fast check off; identical copies, or a directory with only
// the envelope, leave it on.
func TestRecordShapeOnlyForTheEmbeddedSchemas(t *testing.T) {
	envelope, err := schemasFile(schemas.EnvelopeFile)
	if err != nil {
		t.Fatal(err)
	}
	files := []string{schemas.RecordFile, "operator-task-common.v1.schema.json",
		"corpus-reasoning-experiment-proposal.v1.schema.json", "corpus-reasoning-experiment-proposal.v2.schema.json",
		"corpus-task-pack-candidate-adoption.v1.schema.json"}
	all := fstest.MapFS{}
	for _, name := range files {
		data, err := schemasFile(name)
		if err != nil {
			t.Fatal(err)
		}
		all[name] = &fstest.MapFile{Data: data}
	}
	cases := []struct {
		name string
		fsys fstest.MapFS
		want bool
	}{
		{"identical copies", all, true},
		{"envelope only", fstest.MapFS{schemas.EnvelopeFile: {Data: envelope}}, true},
	}
	for _, name := range files {
		changed := fstest.MapFS{}
		for k, f := range all {
			changed[k] = f
		}
		changed[name] = &fstest.MapFile{Data: append(bytes.Clone(all[name].Data), ' ')}
		cases = append(cases, struct {
			name string
			fsys fstest.MapFS
			want bool
		}{"one more byte in " + name, changed, false})
		cases = append(cases, struct {
			name string
			fsys fstest.MapFS
			want bool
		}{"the record schema and " + name + ", one more byte", fstest.MapFS{schemas.RecordFile: all[schemas.RecordFile], name: {Data: changed[name].Data}}, false})
	}
	for _, c := range cases {
		v := newValidator(t, validate.WithSchemaFS(c.fsys))
		if v.FastRecord() != c.want {
			t.Errorf("%s: fast check %v, want %v", c.name, v.FastRecord(), c.want)
		}
	}
}

// TestRecordShapeKeywordEdges: values next to the borders jsonschema v6
// reads differently from a plain reading (const 1 written otherwise, leap
// seconds, code points against bytes), each checked against jsonschema.
func TestRecordShapeKeywordEdges(t *testing.T) {
	v := newValidator(t)
	base := recordMembers(t)
	edits := map[string][]any{
		"schema/v":        {json.Number("1"), json.Number("1.0"), json.Number("1e0"), json.Number("10e-1"), json.Number("-0"), json.Number("0"), "1", true},
		"idempotency/key": {"", "é", strings.Repeat("é", 256), strings.Repeat("é", 257), strings.Repeat("a", 257), "\u0000", "a b"},
		"recorded-at":     {"2026-09-25T12:15:00+01:00", "2026-09-25T12:15:00.5Z", "2026-06-30T23:59:60Z"},
		"refusal/code":    {"hil/denied", "HIL/denied", 1},
		"room/id":         {"room:" + strings.Repeat("é", 507), "room:" + strings.Repeat("é", 508), "room:\u2028", "room:\ufeff", "room:\u180e", "room:a\u0085"},
		"environment/ref": {"a:b", "a-:b", "-a:b", "a:", "ab", "a1-2:x"},
	}
	for key, vals := range edits {
		for _, val := range vals {
			c := deepCopy(base).(map[string]any)
			c[key] = val
			compareRecordCheck(t, v, parseMutated(t, c))
		}
	}
	for _, id := range []string{"a", "a-b", "a--b", "-a", "a-", "A", "a1-2b", strings.Repeat("a", 128), strings.Repeat("a", 129), "é"} {
		c := deepCopy(base).(map[string]any)
		c["evidence"].([]any)[0].(map[string]any)["step/id"] = id
		compareRecordCheck(t, v, parseMutated(t, c))
	}
	for _, kp := range []string{"z", "z1", "zé", "Z1", "z" + strings.Repeat("a", 127), "z" + strings.Repeat("a", 128)} {
		c := deepCopy(base).(map[string]any)
		c["signature"].(map[string]any)["key/public"] = kp
		compareRecordCheck(t, v, parseMutated(t, c))
	}
	for _, at := range []string{"inquirium.candidate-plan.v1", "operator-task-experiment-candidate.v1", "x"} {
		c := deepCopy(base).(map[string]any)
		c["candidate"].(map[string]any)["artifact/type"] = at
		compareRecordCheck(t, v, parseMutated(t, c))
	}
	for _, r := range []string{"a/b", "a:b", "a b", "ab", "a/" + strings.Repeat("é", 508), "a/" + strings.Repeat("é", 510)} {
		c := deepCopy(base).(map[string]any)
		c["candidate"].(map[string]any)["ref"] = r
		compareRecordCheck(t, v, parseMutated(t, c))
	}
	// A record whose JSON text is not canonical (the jcs path of ParseRecord).
	raw := readRef(t, "execution-records", "verified.json")
	compareRecordCheck(t, v, mustParse(t, bytes.Replace(raw, []byte(`"schema/v": 1`), []byte(`"schema/v": 1.0`), 1)))
	compareRecordCheck(t, v, mustParse(t, bytes.Replace(raw, []byte(`"schema/v": 1`), []byte(`"schema/v": 1e0`), 1)))
}

// BenchmarkRecordShape is the record fast check alone on verified.json's
// decoded members; BenchmarkRecordShapeJSONSchema is jsonschema v6 alone
// on the same (what the fast check saves per record).
func BenchmarkRecordShape(b *testing.B) {
	obj := mustParse(b, readRef(b, "execution-records", "verified.json")).Object()
	b.ReportAllocs()
	for b.Loop() {
		if !validate.RecordShapeValid(obj) {
			b.Fatal("declined")
		}
	}
}

func BenchmarkRecordShapeJSONSchema(b *testing.B) {
	v := newValidator(b)
	rec := mustParse(b, readRef(b, "execution-records", "verified.json"))
	b.ReportAllocs()
	for b.Loop() {
		if ps := v.RecordSchemaProblems(rec); len(ps) > 0 {
			b.Fatal(ps)
		}
	}
}

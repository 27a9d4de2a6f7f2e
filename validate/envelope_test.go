package validate_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/schemas"
	"github.com/roompub/roompub/validate"
)

// compareEnvelopeCheck fails t when the envelope fast check says "valid"
// for an entry jsonschema refuses, or when CheckEntry (with the fast
// check) and the jsonschema path give different problems.
func compareEnvelopeCheck(t *testing.T, v *validate.Validator, e *events.Entry) {
	t.Helper()
	at := events.Location{File: "j", Line: 3}
	if fields, ok := e.Fields(); ok && validate.EnvelopeValid(fields) {
		if ps := v.EnvelopeSchemaProblems(e); len(ps) > 0 {
			t.Fatalf("fast check accepts %q, jsonschema refuses it: %v", e.Canonical(), ps)
		}
	}
	got, want := v.CheckEntry(e, at), v.CheckEntrySchema(e, at)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("CheckEntry(%q):\n got %v\nwant %v", e.Canonical(), got, want)
	}
}

// sampleEntryLines returns every journal line of the reference vectors and
// the samples.
func sampleEntryLines(tb testing.TB) [][]byte {
	tb.Helper()
	var lines [][]byte
	for _, pat := range []string{
		filepath.Join(refDir, "capsule-journals", "*", "journal.ndjson"),
		filepath.Join("..", "testdata", "samples", "capsules", "*", "journal.ndjson"),
		filepath.Join("..", "testdata", "samples", "widened", "*", "journal.ndjson"),
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
			for _, l := range bytes.Split(raw, []byte("\n")) {
				if len(l) > 0 {
					lines = append(lines, l)
				}
			}
		}
	}
	if len(lines) < 20 {
		tb.Fatalf("only %d sample lines", len(lines))
	}
	return lines
}

// TestEnvelopeFastCheckTakesRealEntries: the fast check accepts every
// valid sample entry, and agrees with jsonschema on all of them.
func TestEnvelopeFastCheckTakesRealEntries(t *testing.T) {
	v := newValidator(t)
	if !v.FastEnvelope() {
		t.Fatal("fast envelope check is off with the embedded schemas")
	}
	taken := 0
	for _, line := range sampleEntryLines(t) {
		e, err := events.ParseEntry(line)
		if err != nil {
			continue
		}
		compareEnvelopeCheck(t, v, e)
		fields, ok := e.Fields()
		if len(v.EnvelopeSchemaProblems(e)) == 0 {
			if !ok || !validate.EnvelopeValid(fields) {
				t.Errorf("fast check declines a valid entry: %q", line)
			}
			taken++
		}
	}
	if taken == 0 {
		t.Fatal("no valid sample entry")
	}
}

// TestEnvelopeFastCheckEdges: values next to each rule's border, checked
// against jsonschema one by one.
func TestEnvelopeFastCheckEdges(t *testing.T) {
	v := newValidator(t)
	edits := map[string][]any{
		"ts": {"2026-09-02T00:00:00Z", "2026-09-02t00:00:00Z", "2026-09-02T00:00:00z", "2026-02-29T00:00:00Z", "2028-02-29T00:00:00Z",
			"2026-09-02T23:59:60Z", "2026-09-02T00:00:60Z", "2026-09-02T24:00:00Z", "2026-09-02T00:00:00.Z", "2026-09-02T00:00:00+23:59",
			"2026-09-02T00:00:00+24:00", "2026-09-02T00:00:00-00:00", "2026-09-02T00:00:00+0000", "2026-13-02T00:00:00Z", "0000-01-01T00:00:00Z",
			"2026-09-02 00:00:00Z", "2026-09-02T00:00:00.123456789Z", "2026-09-02T00:00:00Z ", "2026-9-02T00:00:00Z", 5},
		"run_id":          {"a", "A.b:c-d_e", "-a", "", "a/b", "é", string(bytes.Repeat([]byte("a"), 128)), string(bytes.Repeat([]byte("a"), 129)), "a\n"},
		"kind":            {"a", "A", "a.b-c_d9", "9a", string(bytes.Repeat([]byte("a"), 64)), string(bytes.Repeat([]byte("a"), 65)), "a\n"},
		"seq":             {0, -1, 1.5, json.Number("1e+21"), "0", nil, 9007199254740993},
		"effect_class":    {"SE4", "SE5", "se0", "SE"},
		"lineage":         {"plan", "strategy", "other", ""},
		"harness_version": {"", "x", "é", 1},
		"parent_hash":     {events.ZeroHash, events.ZeroHash[:63], events.ZeroHash + "0", "A" + events.ZeroHash[1:]},
		"schema":          {"capsule-envelope/v2", 1},
		"extra":           {"x"},
	}
	for key, values := range edits {
		for _, val := range values {
			lines := chainLines(t, 1, func(_ int, m map[string]any) { m[key] = val })
			e, err := events.ParseEntry(lines[0])
			if err != nil {
				t.Fatal(err)
			}
			compareEnvelopeCheck(t, v, e)
		}
	}
	payloadEdits := map[string][]any{
		"exit_code":   {nil, 0, -3, 1.5, json.Number("1e+21"), "0", true},
		"duration_ms": {1, 1.5, nil, "1"},
		"tokens_in":   {1, 1.5, nil},
		"message":     {"", 1, nil, "sk-abcdefghijklmnopqrstuvwxyz"},
		"unknown":     {"x"},
		"score":       {json.Number("-1e-7")},
	}
	for key, values := range payloadEdits {
		for _, val := range values {
			lines := chainLines(t, 1, func(_ int, m map[string]any) { payload(m)[key] = val })
			e, err := events.ParseEntry(lines[0])
			if err != nil {
				t.Fatal(err)
			}
			compareEnvelopeCheck(t, v, e)
		}
	}
}

// TestIsHex64: every byte at every position, and the lengths
// around 64, as ^[0-9a-f]{64}$ reads them byte by byte.
func TestIsHex64(t *testing.T) {
	isHex := func(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' }
	for pos := range 64 {
		for c := range 256 {
			b := []byte(events.ZeroHash)
			b[pos] = byte(c)
			if got, want := validate.IsHex64(string(b)), isHex(byte(c)); got != want {
				t.Errorf("IsHex64 with %#x at %d = %v, want %v", c, pos, got, want)
			}
		}
	}
	for _, s := range []string{"", events.ZeroHash[:63], events.ZeroHash + "0", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"} {
		if got, want := validate.IsHex64(s), len(s) == 64; got != want {
			t.Errorf("IsHex64(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestIsID: every byte at every position of ids from one byte to beyond
// two words, and the lengths around 128, as
// ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$ reads them byte by byte.
func TestIsID(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)
	for n := 1; n <= 19; n++ {
		for pos := range n {
			for c := range 256 {
				b := []byte(strings.Repeat("a", n))
				b[pos] = byte(c)
				if got, want := validate.IsID(string(b)), re.Match(b); got != want {
					t.Errorf("IsID(%q) = %v, want %v", b, got, want)
				}
			}
		}
	}
	for _, n := range []int{0, 127, 128, 129, 200} {
		s := strings.Repeat("Z9._:-", 40)[:n]
		if n > 0 {
			s = "r" + s[1:]
		}
		if got, want := validate.IsID(s), re.MatchString(s); got != want {
			t.Errorf("IsID of %d bytes = %v, want %v", n, got, want)
		}
	}
}

// TestEnvelopeFastCheckOnlyForTheEmbeddedSchema: another envelope schema
// in a schema directory turns the fast check off; an identical copy, or a
// directory without an envelope, leaves it on.
func TestEnvelopeFastCheckOnlyForTheEmbeddedSchema(t *testing.T) {
	embedded, err := schemasFile(schemas.EnvelopeFile)
	if err != nil {
		t.Fatal(err)
	}
	record, err := schemasFile(schemas.RecordFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		fsys fstest.MapFS
		want bool
	}{
		{"identical copy", fstest.MapFS{schemas.EnvelopeFile: {Data: embedded}}, true},
		{"record only", fstest.MapFS{schemas.RecordFile: {Data: record}}, true},
		{"one more byte", fstest.MapFS{schemas.EnvelopeFile: {Data: append(bytes.Clone(embedded), ' ')}}, false},
	} {
		v := newValidator(t, validate.WithSchemaFS(c.fsys))
		if v.FastEnvelope() != c.want {
			t.Errorf("%s: fast check %v, want %v", c.name, v.FastEnvelope(), c.want)
		}
	}
}

// TestIsDateTime: every byte of a date-time replaced by a digit or not
// one, and the fields at their bounds, as time.Parse reads the date and
// the RFC 3339 grammar the rest (a leap second and a lower-case 't' or
// 'z' are jsonschema's to decide, so not taken); each verdict also held
// to jsonschema through an entry.
func TestIsDateTime(t *testing.T) {
	v := newValidator(t)
	valid := func(s string) bool {
		re := regexp.MustCompile(`^(\d{4}-\d{2}-\d{2})T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$`)
		m := re.FindStringSubmatch(s)
		return m != nil && validate.IsDate(m[1])
	}
	cases := []string{"2026-09-02T00:00:00Z", "2026-09-02T23:59:59.123+23:59", "2024-02-29T12:00:00Z", "2023-02-29T12:00:00Z",
		"2000-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2026-04-31T00:00:00Z", "2026-12-31T24:00:00Z", "2026-12-31T23:60:00Z",
		"2026-12-31T23:59:60Z", "2026-00-10T00:00:00Z", "2026-13-10T00:00:00Z", "2026-01-00T00:00:00Z", "2026-01-32T00:00:00Z",
		"2026-09-02T00:00:00.Z", "2026-09-02T00:00:00+24:00", "2026-09-02T00:00:00-00:60", "2026-09-02T00:00:00", "2026-09-02t00:00:00Z"}
	base := "2026-09-03T14:30:04.017Z"
	for i := range base {
		for _, c := range []byte{'0', '9', '/', ':', 'a', '-', 'T', 'Z', '+'} {
			b := []byte(base)
			b[i] = c
			cases = append(cases, string(b))
		}
	}
	for _, s := range cases {
		if got, want := validate.IsDateTime(s), valid(s); got != want {
			t.Errorf("IsDateTime(%q) = %v, want %v", s, got, want)
		}
		line := chainLines(t, 1, func(_ int, m map[string]any) { m["ts"] = s })[0]
		e, err := events.ParseEntry(line)
		if err != nil {
			t.Fatal(err)
		}
		compareEnvelopeCheck(t, v, e)
	}
}

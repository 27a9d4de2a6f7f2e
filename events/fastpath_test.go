package events_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gowebpki/jcs"

	"github.com/roompub/roompub/events"
)

// fieldsObject converts the fast representation to what encoding/json
// decodes with UseNumber, to compare it with Object.
func fieldsObject(fields []events.Field) map[string]any {
	obj := make(map[string]any, len(fields))
	for _, f := range fields {
		switch f.Kind {
		case events.KindString:
			obj[f.Key] = f.Text
		case events.KindNumber:
			obj[f.Key] = json.Number(f.Text)
		case events.KindBool:
			obj[f.Key] = f.Text == "true"
		case events.KindNull:
			obj[f.Key] = nil
		case events.KindObject:
			obj[f.Key] = fieldsObject(f.Members)
		default:
			panic("unknown kind")
		}
	}
	return obj
}

// simpleShape reports whether a decoded object is what the fast path
// represents: printable ASCII keys needing no escape, values scalars or
// (at the top) objects of scalars.
func simpleShape(obj map[string]any, depth int) bool {
	for k, v := range obj {
		for i := 0; i < len(k); i++ {
			if k[i] < 0x20 || k[i] > 0x7e || k[i] == '"' || k[i] == '\\' {
				return false
			}
		}
		switch v := v.(type) {
		case []any:
			return false
		case map[string]any:
			if depth >= 2 || !simpleShape(v, depth+1) {
				return false
			}
		}
	}
	return true
}

// compareFastPath fails t when the fast path's answer for line differs
// from the general path's (jcs and encoding/json), or when the fast path
// declines a line it should take.
func compareFastPath(t *testing.T, line []byte) {
	t.Helper()
	fast := events.ParseEntryFast(line)
	slow, slowErr := events.ParseEntryGeneral(line)
	got, gotErr := events.ParseEntry(line)
	if (gotErr == nil) != (slowErr == nil) || gotErr != nil && gotErr.Error() != slowErr.Error() {
		t.Fatalf("ParseEntry(%q) error %v, general path %v", line, gotErr, slowErr)
	}
	if fast == nil {
		if slowErr == nil {
			canon, err := jcs.Transform(line)
			if err == nil && bytes.Equal(canon, line) && simpleShape(slow.Object(), 1) {
				t.Fatalf("fast path declined a canonical line of the simple shape: %q", line)
			}
			sameEntry(t, line, got, slow)
		}
		return
	}
	// The fast path took the line: it must be valid UTF-8 (which the fast
	// path checks as it reads) and exactly canonical by jcs.
	if !utf8.Valid(line) {
		t.Fatalf("fast path took %q, which is not valid UTF-8", line)
	}
	canon, err := jcs.Transform(line)
	if err != nil || !bytes.Equal(canon, line) {
		t.Fatalf("fast path took %q, which jcs canonicalises to %q (%v)", line, canon, err)
	}
	if slowErr != nil {
		t.Fatalf("fast path took %q, which the general path refuses: %v", line, slowErr)
	}
	sameEntry(t, line, fast, slow)
	sameEntry(t, line, got, slow)
	fields, ok := fast.Fields()
	if !ok || !reflect.DeepEqual(fieldsObject(fields), slow.Object()) {
		t.Fatalf("Fields of %q are not the decoded object", line)
	}
	if keys := fieldKeys(fields); fast.HasEnvelopeKeys() != slices.Equal(keys, events.EnvelopeKeys[:]) || got.HasEnvelopeKeys() != fast.HasEnvelopeKeys() {
		t.Fatalf("%q: HasEnvelopeKeys %v (ParseEntry's %v) for the members %q", line, fast.HasEnvelopeKeys(), got.HasEnvelopeKeys(), keys)
	}
	if want := fast.HasEnvelopeKeys() && events.IsHex64(fast.EntryHash()) && events.IsHex64(fast.ParentHash()); fast.HashesHex() != want {
		t.Fatalf("%q: HashesHex %v, want %v", line, fast.HashesHex(), want)
	}
	if !simpleShape(slow.Object(), 1) {
		t.Fatalf("fast path took %q, which is not of the simple shape", line)
	}
}

// fieldKeys lists the keys of fields, in order.
func fieldKeys(fields []events.Field) []string {
	keys := make([]string, len(fields))
	for i, f := range fields {
		keys[i] = f.Key
	}
	return keys
}

// sameEntry compares every observable of two entries.
func sameEntry(t *testing.T, line []byte, a, b *events.Entry) {
	t.Helper()
	seqA, okA := a.Seq()
	seqB, okB := b.Seq()
	if !bytes.Equal(a.Canonical(), b.Canonical()) || a.ComputedHash() != b.ComputedHash() ||
		a.EntryHash() != b.EntryHash() || a.ParentHash() != b.ParentHash() || a.Metadata() != b.Metadata() ||
		seqA != seqB || okA != okB || !reflect.DeepEqual(a.Object(), b.Object()) ||
		a.HashMatches() != b.HashMatches() || a.HashMatches() != (a.EntryHash() == a.ComputedHash()) {
		t.Fatalf("entries of %q differ:\n%q %s %s %q %v %v %d %v\n%q %s %s %q %v %v %d %v", line,
			a.Canonical(), a.ComputedHash(), a.EntryHash(), a.ParentHash(), a.Metadata(), a.Object(), seqA, okA,
			b.Canonical(), b.ComputedHash(), b.EntryHash(), b.ParentHash(), b.Metadata(), b.Object(), seqB, okB)
	}
	// The chain rules see the same thing.
	for _, meta := range []*events.CapsuleMeta{nil, {RunID: "r", CapsuleID: "c", HarnessVersion: "h", TaskFamily: "t"}} {
		va, vb := events.NewChainVerifier(meta, nil), events.NewChainVerifier(meta, nil)
		pa := va.CheckLine(a, line, events.Location{Line: 1})
		pb := vb.CheckLine(b, line, events.Location{Line: 1})
		if !reflect.DeepEqual(pa, pb) {
			t.Fatalf("chain problems of %q differ:\n%v\n%v", line, pa, pb)
		}
	}
}

// sampleLines returns every journal line under testdata: the reference
// vectors and the samples.
func sampleLines(tb testing.TB) [][]byte {
	tb.Helper()
	var files []string
	for _, pat := range []string{
		filepath.Join(refDir, "capsule-journals", "*", "journal.ndjson"),
		filepath.Join("..", "testdata", "samples", "capsules", "*", "journal.ndjson"),
		filepath.Join("..", "testdata", "samples", "widened", "*", "journal.ndjson"),
	} {
		m, err := filepath.Glob(pat)
		if err != nil {
			tb.Fatal(err)
		}
		files = append(files, m...)
	}
	var lines [][]byte
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
	if len(lines) < 20 {
		tb.Fatalf("only %d sample lines found", len(lines))
	}
	return lines
}

// TestFastPathTakesRealEntries: every canonical line of the reference and
// sample journals goes through the fast path, with the general path's
// result.
func TestFastPathTakesRealEntries(t *testing.T) {
	fast := 0
	for _, line := range sampleLines(t) {
		compareFastPath(t, line)
		if events.ParseEntryFast(line) != nil {
			fast++
		}
	}
	for _, line := range refJournalLines(t) {
		if events.ParseEntryFast(line) == nil {
			t.Fatalf("reference line takes the general path: %q", line)
		}
	}
	if fast == 0 {
		t.Fatal("no sample line took the fast path")
	}
}

// TestFastPathEdges: lines next to the fast path's borders, each compared
// with the general path.
func TestFastPathEdges(t *testing.T) {
	for _, s := range []string{
		`{}`, `{"a":{}}`, `{"":1}`, `{"entry_hash":"x"}`, `{"a":1,"entry_hash":"x"}`, `{"entry_hash":"x","z":1}`,
		`{"a":1,"entry_hash":{"b":2},"z":null}`, `{"entry_hash":1}`,
		`{"a":"\u001f\b\t\n\f\r\"\\"}`, `{"a":"\u0008"}`, `{"a":"\u001F"}`, `{"a":"\u0041"}`, `{"a":"\/"}`, `{"a":"\u007f"}`,
		"{\"a\":\"\x7f\u2028é\"}", `{"a":"\ud83d\ude00"}`, `{"a":"\ud800"}`,
		`{"a":1e21}`, `{"a":1e+21}`, `{"a":-0}`, `{"a":0}`, `{"a":-1}`, `{"a":00}`, `{"a":1.0}`, `{"a":0.1}`, `{"a":1E+21}`,
		`{"a":123456789012345}`, `{"a":1234567890123456}`, `{"a":9007199254740993}`, `{"a":1e-7}`, `{"a":0.000001}`,
		`{"a":1e400}`, `{"a":-}`, `{"a":1.}`, `{"a":.5}`, `{"a":+1}`, `{"a":0x10}`,
		// Fractions at plainDecimal's borders, then followed by more of
		// a number.
		`{"a":-0.5}`, `{"a":-0}`, `{"a":00.5}`, `{"a":0.50}`, `{"a":0.0000001}`, `{"a":0.0000012}`, `{"a":0.00000123}`,
		`{"a":123456789012345.6}`, `{"a":12345678901234.5}`, `{"a":0.123456789012345}`, `{"a":0.1234567890123456}`,
		`{"a":0.000001234567890123}`, `{"a":0.0000012345678901234}`, `{"a":9.99}`, `{"a":10.01}`, `{"a":1.5e3}`,
		`{"a":1.5.5}`, `{"a":1.5-}`, `{"a":0.0}`, `{"a":1.10}`, `{"a":100}`, `{"a":-100.25}`, `{"a":1.`,
		`{"a":true,"b":false,"c":null}`, `{"a":tru}`, `{"a":truex}`, `{"a":nul}`,
		`{"b":1,"a":2}`, `{"a":1,"a":2}`, `{"a":1,"B":2}`, `{"B":1,"a":2}`, `{"a":[1]}`, `{"a":{"b":{"c":1}}}`,
		`{"é":1}`, `{"a\n":1}`, `{"a":1} `, ` {"a":1}`, `{"a" :1}`, `{"a":1,}`, `{"a":1`, `{"a":"x`, `{"a`, `{`, `"a"`, `[]`, `1`,
		`{"a":{"b":1,"b":2}}`, `{"a":{"c":1,"b":2}}`, `{"a":{}}`, "{\"a\":\"\x01\"}",
		// Two-byte UTF-8 at its edges: overlong, a bad or missing
		// continuation byte, the first and last of the form.
		"{\"a\":\"\xc0\x80\"}", "{\"a\":\"\xc1\xbf\"}", "{\"a\":\"\xc2\x7f\"}", "{\"a\":\"\xc2\xc0\"}", "{\"a\":\"\xc2\"}",
		"{\"a\":\"\xc2\x80\xdf\xbf\"}", "{\"a\":\"\xdf\"}", "{\"a\":\"x\xdf",
		// Three-byte UTF-8 around the form taken without a call (E1 to
		// EC): overlong (E0), surrogates (ED), cut, bad continuations.
		"{\"a\":\"\xe0\x80\x80\"}", "{\"a\":\"\xe0\xa0\x80\"}", "{\"a\":\"\xe1\x80\x80\xec\xbf\xbf\"}",
		"{\"a\":\"\xed\x9f\xbf\"}", "{\"a\":\"\xed\xa0\x80\"}", "{\"a\":\"\xee\x80\x80\xef\xbf\xbf\"}",
		"{\"a\":\"\xe1\x80\"}", "{\"a\":\"\xe1\x80", "{\"a\":\"\xe1\xc0\x80\"}", "{\"a\":\"\xe1\x80\x7f\"}",
		"{\"a\":\"\xe2\x80\xa8\u2028\"}",
	} {
		compareFastPath(t, []byte(s))
	}
	for _, line := range chainLines(t, 3, func(i int, m map[string]any) {
		m["payload"].(map[string]any)["score"] = []float64{0.5, 1e21, 1e-7, 123.456}[i]
	}) {
		compareFastPath(t, line)
		if events.ParseEntryFast(line) == nil {
			t.Fatalf("a canonical entry takes the general path: %q", line)
		}
	}
}

// TestCanonicalNumber compares the fast path's number rule with jcs.
func TestCanonicalNumber(t *testing.T) {
	for _, s := range []string{"0", "-0", "1", "-1", "10", "1e21", "1e+21", "1e+20", "100000000000000000000", "123456789012345",
		"1234567890123456", "0.1", "1.5", "1.50", "1e-7", "1e-6", "0.000001", "5e-324", "1.7976931348623157e+308", "1e309", "01", "1.", "-", "",
		"-0.5", "0.50", "123.456", "-123.456", "0.0000009999", "9.999e-7", "0.000001000", "999999999999999900000", "999999999999999999999",
		"1e20", "0.30000000000000004", "0.3000000000000000444", "1.0", "-0.0", "12.34e1", "00.5", ".5", "+1.5", "1.5e0",
		// fractions of up to 15 significant digits, decided without a float, and their neighbours
		"0.0000015", "0.00000015", "-0.000001", "123456789012.345", "1234567890123.456", "0.100000000000001",
		"0.1000000000000001", "9.99999999999999", "99999999999999.9", "999999999999999.9", "0.000012345678901234",
		"5.", "5.-1", "1.2.3", "0.", "-.5", "1.5a", "0.05", "10.25", "2.5000000000000001"} {
		canon, err := jcs.Transform([]byte(s))
		want := err == nil && string(canon) == s
		if got := events.CanonicalNumber(s); got != want {
			t.Errorf("CanonicalNumber(%q) = %v, jcs says %v (%q, %v)", s, got, want, canon, err)
		}
	}
}

// TestArenaEntries: entries parsed through one arena, as a journal
// worker parses a batch, equal those ParseEntry makes alone, across the
// arena's chunk borders (in the entry and its payload) and after lines
// the fast path gave up on part-way, whose members stay in the arena
// unused; an entry stays what it was when later lines fill the arena; and
// after a reset, the reused slots hold nothing of what they held.
func TestArenaEntries(t *testing.T) {
	var lines [][]byte
	for _, l := range append(sampleLines(t), chainLines(t, 600, nil)...) {
		lines = append(lines, l)
		// Canonical up to a member after the last of the entry or of its
		// payload (the first object to close): the scan fails there.
		switch len(lines) % 7 {
		case 3:
			lines = append(lines, append(bytes.Clone(l[:len(l)-1]), `,"zz":01}`...))
		case 5:
			if end := bytes.IndexByte(l, '}'); end < len(l)-1 {
				lines = append(lines, slices.Concat(l[:end], []byte(`,"zz":01`), l[end:]))
			}
		}
	}
	var a events.Arena
	type parsed struct {
		line []byte
		e    *events.Entry
	}
	var all []parsed
	for _, line := range lines {
		got, gotErr := events.ParseInArena(line, &a)
		want, wantErr := events.ParseEntry(line)
		if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
			t.Fatalf("%q: error %v, ParseEntry's %v", line, gotErr, wantErr)
		}
		if got != nil {
			sameEntry(t, line, got, want)
			all = append(all, parsed{line, got})
		}
	}
	for _, p := range all {
		want, _ := events.ParseEntry(p.line)
		sameEntry(t, p.line, p.e, want)
	}
	// Reset, as a linked batch's arena is: the same lines in the reverse
	// order parse into slots old members and entries filled, and come
	// out as ParseEntry makes them, none of the old values left over.
	a.Reset()
	for i := len(lines) - 1; i >= 0; i-- {
		got, _ := events.ParseInArena(lines[i], &a)
		if want, _ := events.ParseEntry(lines[i]); got != nil {
			sameEntry(t, lines[i], got, want)
			gotFields, _ := got.Fields()
			wantFields, _ := want.Fields()
			if !reflect.DeepEqual(gotFields, wantFields) || got.HasEnvelopeKeys() != want.HasEnvelopeKeys() {
				t.Fatalf("%q: fields after a reset\n%+v\nParseEntry's\n%+v", lines[i], gotFields, wantFields)
			}
		}
	}
}

// TestEnvelopeOfOtherKinds: a line of the envelope's members in which one
// holds a value of another kind than the envelope gives it is read by
// name, and still has the envelope's members (and, its hashes being hex,
// HashesHex), as a line of the right kinds has.
func TestEnvelopeOfOtherKinds(t *testing.T) {
	for _, c := range []struct {
		key      string
		value    any
		hashesOK bool
	}{
		{"capsule_id", 7, true}, {"ts", nil, true}, {"seq", "0", true}, {"payload", "p", true},
		{"run_id", map[string]any{"a": "b"}, true}, {"payload", nil, true}, {"parent_hash", 1, false},
		{"entry_hash", true, false},
	} {
		lines := chainLines(t, 1, func(_ int, m map[string]any) { m[c.key] = c.value })
		line := lines[0]
		if c.key == "entry_hash" {
			// NewEntry sets entry_hash: put the value in its place.
			e, err := events.ParseEntry(line)
			if err != nil {
				t.Fatal(err)
			}
			line = bytes.Replace(line, []byte(`"`+e.EntryHash()+`"`), []byte("true"), 1)
		}
		e := events.ParseEntryFast(line)
		if e == nil {
			t.Fatalf("%s = %v: the fast path declined %s", c.key, c.value, line)
		}
		if !e.HasEnvelopeKeys() || e.HashesHex() != c.hashesOK {
			t.Errorf("%s = %v: HasEnvelopeKeys %v, HashesHex %v, want true, %v", c.key, c.value, e.HasEnvelopeKeys(), e.HashesHex(), c.hashesOK)
		}
		compareFastPath(t, line)
	}
}

// TestEntryHashTakenUnread: the fast path takes an envelope line's
// entry_hash of 64 bytes between quotes without reading them, and reads
// the line again when they are not the digest and not 64 hex digits.
// Each of these lines is compared with the general path: 64 bytes that
// hide an escaped quote, an invalid byte, upper-case or other letters,
// wrong hex; and strings of every length around 64, so that some leave a
// quote 65 bytes after theirs.
func TestEntryHashTakenUnread(t *testing.T) {
	line := chainLines(t, 1, nil)[0]
	e, err := events.ParseEntry(line)
	if err != nil {
		t.Fatal(err)
	}
	hash := `"` + e.EntryHash() + `"`
	values := []string{
		strings.Repeat("a", 31) + `\"` + strings.Repeat("b", 31), "\xff" + strings.Repeat("0", 63),
		strings.Repeat("z", 64), strings.Repeat("A", 64), strings.Repeat("0", 64), strings.Repeat("\\\\", 32),
		strings.Repeat("\u00e9", 32), strings.Repeat("0", 63) + "\x01",
	}
	for n := range 80 {
		values = append(values, strings.Repeat("a", n))
	}
	for _, v := range values {
		compareFastPath(t, bytes.Replace(line, []byte(hash), []byte(`"`+v+`"`), 1))
	}
	if got := events.ParseEntryFast(line); got == nil || !got.HashMatches() || !got.HashesHex() {
		t.Fatalf("the entry itself: %v", got)
	}
}

// TestFastPathKeyBytes: member names of one byte to beyond two words
// with a byte a name may not hold as it is (a control, '"', '\\', DEL, a
// byte of 0x80 and above) or one it may, at every position; each line
// compared with the general path.
func TestFastPathKeyBytes(t *testing.T) {
	for n := 1; n <= 18; n++ {
		for pos := range n {
			for _, c := range []byte{0x00, 0x1f, ' ', '"', '\\', 0x7f, 0x80, 0xc3, 0xff, 'z', '~'} {
				name := []byte(strings.Repeat("a", n))
				name[pos] = c
				compareFastPath(t, []byte(`{"`+string(name)+`":1,"~~~":{"`+string(name)+`":"x"}}`))
			}
		}
	}
}

package events_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gowebpki/jcs"

	"github.com/roompub/roompub/events"
)

// divergenceDir is the upstream's verdicts on cases where it and roompub
// once disagreed (testdata/upstream-divergences).
var divergenceDir = filepath.Join("..", "testdata", "upstream-divergences")

// TestLoneSurrogateReference: the upstream writer's line with a lone
// surrogate parses, is canonical, and its entry_hash verifies.
func TestLoneSurrogateReference(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(divergenceDir, "lone_surrogate", "journal.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	line := bytes.TrimSuffix(raw, []byte("\n"))
	e, problems := events.NewChainVerifier(nil, nil).Check(line, events.Location{Line: 1})
	if e == nil || len(problems) != 0 {
		t.Fatalf("Check: %v %v", e, problems)
	}
	const want = "d8e5f46c78fbcf905d9ab4eee745d664d2852e1bcbb3048ac62cd343d6da1af7"
	if e.ComputedHash() != want || e.EntryHash() != want || !bytes.Equal(e.Canonical(), line) {
		t.Fatalf("computed %s, claimed %s, canonical %q", e.ComputedHash(), e.EntryHash(), e.Canonical())
	}
	// The map for the schema has U+FFFD where the surrogate was.
	if got := e.Object()["payload"].(map[string]any)["message"]; got != "a\ufffdb" {
		t.Errorf("Object payload.message = %q", got)
	}
}

// TestStringifyCanonicalForm: lone surrogates are canonical as \udxxx in
// lower case; everything else is written as RFC 8785 writes it.
func TestStringifyCanonicalForm(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`"\ud800"`, `"\ud800"`},
		{`"\uD800"`, `"\ud800"`},
		{`"\uDBFF\u0041"`, `"\udbffA"`},
		{`"\udc00\ud800"`, `"\udc00\ud800"`},                       // low then high: two lone ones
		{`"\ud800\ud800\udc00"`, "\"\\ud800\U00010000\""},          // a lone high, then a pair
		{`"\ud83d\ude00"`, "\"\U0001F600\""},                       // an escaped pair is the character
		{`"\uD83D\uDE00\ud83d"`, "\"\U0001F600\\ud83d\""},          // either case
		{`"x\ud800"`, `"x\ud800"`},                                 // at the end
		{`"\ud800\\udc00"`, `"\ud800\\udc00"`},                     // an escaped backslash: text, not a low surrogate
		{`"\u0000\u001f\u007f\b\/"`, "\"\\u0000\\u001f\x7f\\b/\""}, // controls as RFC 8785
		{`{"b":"\udfff","a":[1.0,-0,1e21,"\ud800"]}`, `{"a":[1,0,1e+21,"\ud800"],"b":"\udfff"}`},
		{` { "\ud800" : 1 } `, `{"\ud800":1}`},
	} {
		got, _, err := events.Stringify([]byte(tt.in))
		if err != nil || string(got) != tt.want {
			t.Errorf("Stringify(%s) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
}

// TestStringifyKeyOrder: members are sorted by UTF-16 code units, where a
// lone surrogate sorts between U+D7FF and U+E000 and an astral character
// by its high surrogate (unlike UTF-8 byte order).
func TestStringifyKeyOrder(t *testing.T) {
	in := `{"\uffff":0,"\ue000":1,"\udc00":2,"\ud800\udc00":3,"\ud800":4,"\ud7ff":5,"\udbff":6,"\ud800\udc01":7,"z":8}`
	want := "{\"z\":8,\"\ud7ff\":5,\"\\ud800\":4,\"\U00010000\":3,\"\U00010001\":7,\"\\udbff\":6,\"\\udc00\":2,\"\ue000\":1,\"\uffff\":0}"
	got, lone, err := events.Stringify([]byte(in))
	if err != nil || !lone || string(got) != want {
		t.Fatalf("Stringify = %s, %v, %v; want %s", got, lone, err, want)
	}
}

// TestStringifyRefuses: what jcs refuses stays refused with lone
// surrogates about: duplicate keys (compared as code units), numbers
// beyond a double, nesting over jcs's limit, invalid UTF-8, bad JSON.
func TestStringifyRefuses(t *testing.T) {
	deep := strings.Repeat(`[`, 10001) + `"\ud800"` + strings.Repeat(`]`, 10001)
	for _, in := range []string{
		`{"\ud800":1,"\uD800":2}`, `{"a":"\ud800","a":"\ud800"}`, `{"\ud83d\ude00":1,"` + "\U0001F600" + `":2}`,
		`{"a":"\ud800","b":1e400}`, `["\ud800",-1e309]`, deep,
		"{\"a\":\"\\ud800\xff\"}", "{\"a\":\"\\ud800\",\"b\":\"\xed\xa0\x80\"}", // an encoded surrogate is not UTF-8
		`{"a":"\ud800}`, `{"a":"\ud80"}`, `{"a":"\ud80g"}`, `{"a":"\x"}`, "{\"a\":\"\\ud800\x01\"}",
		`{"a":"\ud800",}`, `["\ud800",]`, `{"a":"\ud800"} x`, `{"a" "\ud800"}`, `{"a":01,"b":"\ud800"}`,
		`{"a":1.,"b":"\ud800"}`, `{"a":tru,"b":"\ud800"}`, `{"a":"\ud800"`, `{'a':"\ud800"}`, ``, ` `,
	} {
		if got, _, err := events.Stringify([]byte(in)); !errors.Is(err, events.ErrNotJSON) {
			t.Errorf("Stringify(%.60q) = %s, %v; want ErrNotJSON", in, got, err)
		}
	}
	ok := strings.Repeat(`[`, 10000) + `"\ud800"` + strings.Repeat(`]`, 10000)
	if _, _, err := events.Stringify([]byte(ok)); err != nil {
		t.Errorf("10,000 levels: %v", err)
	}
}

// TestLoneSurrogateLines: the verdicts of lines with surrogate escapes
// and of lines that are JSON but not an object: ParseLine's code, or
// non_canonical when the line is not its entry's canonical bytes.
func TestLoneSurrogateLines(t *testing.T) {
	for _, tt := range []struct {
		line string
		want events.Code // of ParseLine and the canonical check; "" for none
	}{
		{`{"a":"\ud800"}`, ""},
		{`{"a":"\uD800"}`, events.NonCanonical},
		{`{"a":"\ud83d\ude00"}`, events.NonCanonical},
		{"{\"a\":\"\U0001F600\"}", ""},
		{`{"a":"\ud83d\ud83d"}`, ""},
		{`{"b":"\ud800","a":1}`, events.NonCanonical},
		{`{"a":"\ud800"} `, events.NonCanonical},
		{`{"a":"\ud800","a":1}`, events.CorruptEntry},
		{`{"a":"\ud800","b":1e400}`, events.CorruptEntry},
		{`["\ud800"]`, events.InvalidEntry},
		{`"\udc00"`, events.InvalidEntry},
		{`[]`, events.InvalidEntry},
		{`null`, events.InvalidEntry},
		{`1`, events.InvalidEntry},
		{`"x"`, events.InvalidEntry},
		{` `, events.CorruptEntry},
		{``, events.CorruptEntry},
	} {
		at := events.Location{Line: 3}
		for _, parse := range []func([]byte, events.Location) (*events.Entry, []events.Problem){events.ParseLine, events.ParseLineOwned} {
			e, problems := parse([]byte(tt.line), at)
			var got events.Code
			switch {
			case e == nil && len(problems) == 1 && problems[0].At == at:
				got = problems[0].Code
			case e == nil:
				t.Fatalf("%s: %v", tt.line, problems)
			case !bytes.Equal(e.Canonical(), []byte(tt.line)):
				got = events.NonCanonical
			}
			if got != tt.want {
				t.Errorf("%s: %q %v, want %q", tt.line, got, problems, tt.want)
			}
		}
	}
}

// TestLoneSurrogateMetadataExact: strings that differ only in their lone
// surrogates are different strings to the chain rules, as to the
// upstream's !== (the map for the schema has U+FFFD for both).
func TestLoneSurrogateMetadataExact(t *testing.T) {
	a, err := events.ParseEntry([]byte(`{"harness_version":"h\ud800","run_id":"r\udc00","seq":1}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := events.ParseEntry([]byte(`{"harness_version":"h\ud801","run_id":"r\udc00","seq":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if a.Metadata() == b.Metadata() {
		t.Errorf("metadata %q equals %q", a.Metadata(), b.Metadata())
	}
	if a.Object()["harness_version"] != b.Object()["harness_version"] {
		t.Errorf("Object: %q %q, both want U+FFFD", a.Object()["harness_version"], b.Object()["harness_version"])
	}
	if a.Metadata().HarnessVersion != "h\xed\xa0\x80" || a.RunID() != "r\xed\xb0\x80" {
		t.Errorf("accessors %q %q, want WTF-8", a.Metadata().HarnessVersion, a.RunID())
	}
	if seq, ok := a.Seq(); !ok || seq != 1 {
		t.Errorf("Seq = %d, %v", seq, ok)
	}
	meta := events.CapsuleMeta{HarnessVersion: "h\ufffd", RunID: "r\ufffd"}
	ps := events.NewChainVerifier(&meta, nil).CheckEntry(a, events.Location{Line: 1})
	if len(ps) == 0 || ps[len(ps)-1].Code != events.MetadataMismatch {
		t.Errorf("U+FFFD in capsule.json matches a lone surrogate: %v", ps)
	}
}

// TestMayHoldSurrogateEscape: the cheap test sends every line with a
// surrogate escape to the upstream-form parser, and few others.
func TestMayHoldSurrogateEscape(t *testing.T) {
	for in, want := range map[string]bool{
		`{"a":"\ud800"}`: true, `{"a":"\uDBFF"}`: true, `{"a":"\udc00"}`: true, `{"a":"\uDfFf"}`: true,
		`{"a":"\\ud800"}`: true, // text, but the parsers agree on it
		`{"a":"\ud7ff"}`:  false, `{"a":"\ue000"}`: false, `{"a":"\u0041"}`: false, `{"a":"\u"}`: false,
		`{"a":"\ud"}`: false, `{"a":"\ud8"}`: true, `{"a":"ud800"}`: false, `{}`: false,
	} {
		if got := events.MayHoldSurrogateEscape([]byte(in)); got != want {
			t.Errorf("MayHoldSurrogateEscape(%s) = %v, want %v", in, got, want)
		}
	}
	if line := []byte(`{"a":"\ud800"}`); events.ParseEntryFast(line) != nil {
		t.Error("the fast path took a line with a lone surrogate")
	}
}

// FuzzStringifyMatchesJCS holds the upstream-form parser and writer equal
// to jcs on every input without a lone surrogate: the same verdict and
// the same canonical bytes; and, for entries, the same entry as the jcs
// general path. With a lone surrogate it may accept what jcs refuses, and
// nothing else.
func FuzzStringifyMatchesJCS(f *testing.F) {
	addSeeds(f)
	for _, s := range []string{
		`{"a":"\ud800"}`, `{"a":"\uD83D\uDE00","b":[1e400]}`, `{"\ud800":1,"\uD800":2}`, `{"a":"\ud800\\udc00"}`,
		`["\udc00",{"z":"\ud83d","y":0.1}]`, `{"entry_hash":"\ud800","seq":7,"run_id":"\u0041"}`, `"\ud800"`, "\t[\n]\r",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		canon, lone, err := events.Stringify(in)
		want, jerr := jcs.Transform(in)
		switch {
		case err != nil && !errors.Is(err, events.ErrNotJSON):
			t.Fatalf("error %v does not wrap ErrNotJSON", err)
		case jerr == nil && (err != nil || lone || !bytes.Equal(canon, want)):
			t.Fatalf("Stringify(%q) = %q, %v, %v; jcs %q", in, canon, lone, err, want)
		case jerr != nil && err == nil && !lone:
			t.Fatalf("Stringify(%q) = %q without a lone surrogate; jcs refuses: %v", in, canon, jerr)
		}
		if err == nil {
			again, loneAgain, err := events.Stringify(canon)
			if err != nil || loneAgain != lone || !bytes.Equal(again, canon) || !utf8.Valid(canon) {
				t.Fatalf("Stringify(%q) = %q, not a fixed point: %q %v", in, canon, again, err)
			}
		}
		if !utf8.Valid(in) {
			return
		}
		ej, ejErr := events.ParseEntryJCS(in)
		es, esErr := events.ParseEntrySurrogates(in)
		switch {
		case ejErr == nil && esErr != nil:
			t.Fatalf("ParseEntrySurrogates(%q): %v; jcs path takes it", in, esErr)
		case ejErr == nil:
			sameEntry(t, in, es, ej)
		case esErr == nil && !lone:
			t.Fatalf("ParseEntrySurrogates(%q) takes a line without a lone surrogate that jcs refuses: %v", in, ejErr)
		case !lone && errors.Is(ejErr, events.ErrNotObject) != errors.Is(esErr, events.ErrNotObject):
			t.Fatalf("%q: jcs path %v, surrogate path %v", in, ejErr, esErr)
		}
	})
}

// FuzzEntryLoneSurrogates generates an entry rich in lone surrogates from
// its input, renders it in some valid way and holds the parsed entry to
// the model: canonical bytes, entry_hash preimage, accessors, and
// non_canonical exactly when the rendering is not the canonical bytes.
func FuzzEntryLoneSurrogates(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	f.Add(bytes.Repeat([]byte{2, 0xd8, 7, 3, 0xff, 4}, 20))
	f.Add(bytes.Repeat([]byte{7, 255, 3, 2, 1, 9}, 40))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkModelEntry(t, &chooser{data: data})
	})
}

// checkModelEntry generates one entry with c and checks it against the
// model; it returns the rendered line and the model's canonical bytes.
func checkModelEntry(t *testing.T, c *chooser) (line, canon []byte) {
	t.Helper()
	v := genEntry(c)
	canon = v.canonical(nil, "")
	pre := v.canonical(nil, "entry_hash")
	line = v.render(nil, c)
	sum := sha256.Sum256(pre)
	for _, l := range [][]byte{line, canon} {
		e, problems := events.ParseLine(l, events.Location{Line: 1})
		if e == nil {
			t.Fatalf("ParseLine(%q): %v", l, problems)
		}
		if !bytes.Equal(e.Canonical(), canon) || e.ComputedHash() != hex.EncodeToString(sum[:]) {
			t.Fatalf("ParseLine(%q): canonical %q hash %s; want %q %x", l, e.Canonical(), e.ComputedHash(), canon, sum)
		}
		nonCanon := false
		for _, p := range events.NewChainVerifier(nil, nil).CheckLine(e, l, events.Location{Line: 1}) {
			nonCanon = nonCanon || p.Code == events.NonCanonical
		}
		if nonCanon != !bytes.Equal(l, canon) {
			t.Fatalf("%q: non_canonical %v, canonical %q", l, nonCanon, canon)
		}
		for _, m := range []struct {
			key string
			got string
		}{{"run_id", e.RunID()}, {"capsule_id", e.CapsuleID()}, {"harness_version", e.Metadata().HarnessVersion},
			{"task_family", e.Metadata().TaskFamily}, {"parent_hash", e.ParentHash()}, {"entry_hash", e.EntryHash()}} {
			want := ""
			if mv, ok := v.member(m.key); ok && mv.kind == vString {
				want = wtf8(mv.units)
			}
			if m.got != want {
				t.Fatalf("%q: %s = %q, want %q", l, m.key, m.got, want)
			}
		}
	}
	return line, canon
}

// TestEntryModel runs the model check on seeded entries.
func TestEntryModel(t *testing.T) {
	c := &chooser{r: rand.New(rand.NewPCG(1, 2))}
	lone := 0
	for range 3000 {
		_, canon := checkModelEntry(t, c)
		if holdsLoneSurrogate(canon) {
			lone++
		}
	}
	if lone < 1000 {
		t.Fatalf("only %d of 3000 entries hold a lone surrogate", lone)
	}
}

// holdsLoneSurrogate reports whether canonical JSON text holds a lone
// surrogate: the only \ud escapes canonical text has.
func holdsLoneSurrogate(canon []byte) bool {
	for i := 0; i+2 < len(canon); i++ {
		if canon[i] == '\\' {
			if canon[i+1] == 'u' && canon[i+2] == 'd' {
				return true
			}
			i++
		}
	}
	return false
}

// nodeCanonical is the upstream's canonical form and entry_hash, in
// JavaScript: for each input line, the SHA-256 hex of the key-sorted
// JSON.stringify of the value without entry_hash, a tab, and the
// key-sorted JSON.stringify of the value. Sorted objects are built with
// defineProperty, as the upstream builds them.
const nodeCanonical = `'use strict';
const crypto = require('crypto');
const sorted = v => {
  if (v === null || typeof v !== 'object') return v;
  if (Array.isArray(v)) return v.map(sorted);
  const out = {};
  for (const k of Object.keys(v).sort()) {
    Object.defineProperty(out, k, { value: sorted(v[k]), enumerable: true, writable: true, configurable: true });
  }
  return out;
};
const out = [];
for (const line of require('fs').readFileSync(0, 'utf8').split('\n')) {
  if (line === '') continue;
  const v = JSON.parse(line);
  const rest = {};
  for (const k of Object.keys(v)) {
    if (k !== 'entry_hash') Object.defineProperty(rest, k, { value: v[k], enumerable: true, writable: true, configurable: true });
  }
  const hash = crypto.createHash('sha256').update(JSON.stringify(sorted(rest)), 'utf8').digest('hex');
  out.push(hash + '\t' + JSON.stringify(sorted(v)));
}
process.stdout.write(out.join('\n') + '\n');
`

// TestStringifyMatchesNode is the golden test against JavaScript itself:
// thousands of entries with lone surrogates, pairs (escaped or not),
// controls and astral characters, half of them rendered in non-canonical
// ways, whose canonical bytes and entry_hash node computes as the
// upstream does.
// roompub's must be identical, and so must the model's.
func TestStringifyMatchesNode(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the golden test against JavaScript's JSON.stringify is skipped")
	}
	const n = 4000
	c := &chooser{r: rand.New(rand.NewPCG(8785, 2019))}
	models := make([]jsv, n)
	var in bytes.Buffer
	for i := range models {
		models[i] = genEntry(c)
		if i%2 == 0 {
			in.Write(models[i].canonical(nil, ""))
		} else {
			in.Write(models[i].render(nil, c))
		}
		in.WriteByte('\n')
	}
	lines := bytes.Split(bytes.TrimSuffix(in.Bytes(), []byte("\n")), []byte("\n"))
	cmd := exec.Command(node, "-e", nodeCanonical)
	cmd.Stdin = bytes.NewReader(in.Bytes())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.Bytes())
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	i, lone, nonCanon := 0, 0, 0
	for ; sc.Scan(); i++ {
		hash, canon, ok := strings.Cut(sc.Text(), "\t")
		if !ok || i >= n {
			t.Fatalf("node line %d: %q", i, sc.Text())
		}
		if model := models[i].canonical(nil, ""); string(model) != canon {
			t.Fatalf("line %d %q: model %q, node %q", i, lines[i], model, canon)
		}
		e, err := events.ParseEntry(lines[i])
		if err != nil {
			t.Fatalf("line %d %q: %v", i, lines[i], err)
		}
		if string(e.Canonical()) != canon || e.ComputedHash() != hash {
			t.Fatalf("line %d %q:\nroompub %q %s\nnode    %q %s", i, lines[i], e.Canonical(), e.ComputedHash(), canon, hash)
		}
		if holdsLoneSurrogate(e.Canonical()) {
			lone++
		}
		if string(lines[i]) != canon {
			nonCanon++
		}
	}
	if err := sc.Err(); err != nil || i != n {
		t.Fatalf("node gave %d lines of %d: %v", i, n, err)
	}
	if lone < n/3 || nonCanon < n/3 || nonCanon > n/2 {
		t.Fatalf("%d entries with lone surrogates, %d rendered non-canonically, of %d", lone, nonCanon, n)
	}
	t.Logf("%d entries agree with node: %d with lone surrogates, %d rendered non-canonically", n, lone, nonCanon)
}

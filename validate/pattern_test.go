package validate

import (
	"encoding/json"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dlclark/regexp2/v2"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/schemas"
)

// boundaryRunes sit on either side of every edge of the classes the
// translator writes (\s, \S, \d, \w, ., ASCII ranges) and beyond the BMP.
var boundaryRunes = []rune{
	0x00, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x1f, 0x20, 0x21,
	'/', '0', '9', ':', '@', 'A', 'Z', '[', '^', '_', '`', 'a', 'f', 'g', 'z', '{', '-', '.', 0x7f,
	0x80, 0x85, 0x9f, 0xa0, 0xa1, 0x17f, 0x167f, 0x1680, 0x1681, 0x180e,
	0x1fff, 0x2000, 0x2005, 0x200a, 0x200b, 0x2027, 0x2028, 0x2029, 0x202a,
	0x202e, 0x202f, 0x2030, 0x205e, 0x205f, 0x2060, 0x212a, 0x2fff, 0x3000, 0x3001,
	0xd7ff, 0xe000, 0xfefe, 0xfeff, 0xff00, 0xfffd, 0xffff, 0x10000, 0x1f600, 0x10ffff,
}

// oracle is regexp2 as ecmaEngine.compile configures it, without a budget.
func oracle(tb testing.TB, expr string) *regexp2.Regexp {
	tb.Helper()
	re, err := regexp2.Compile(expr, regexp2.ECMAScript|regexp2.Unicode)
	if err != nil {
		tb.Fatalf("regexp2 %q: %v", expr, err)
	}
	return re
}

func linear(tb testing.TB, expr string) linearMatcher {
	tb.Helper()
	re, ok := compileLinear(expr)
	if !ok {
		src, tok := translateECMA(expr)
		tb.Fatalf("%q is not in the linear class (translated %v: %q)", expr, tok, src)
	}
	return re
}

// agree fails tb unless Go's regexp and regexp2 give s the same verdict; it
// returns the verdict.
func agree(tb testing.TB, expr string, lin linearMatcher, ora *regexp2.Regexp, s string) bool {
	tb.Helper()
	want, err := ora.MatchString(s)
	if err != nil {
		tb.Fatalf("regexp2 %q on %q: %v", expr, s, err)
	}
	if got := lin.MatchString(s); got != want {
		src, _ := translateECMA(expr)
		tb.Fatalf("pattern %q (Go %q, %T) on %q (%+q): linear %v, regexp2 %v", expr, src, lin, s, s, got, want)
	}
	return want
}

// embeddedPatterns lists every "pattern" keyword value in the embedded
// schemas.
func embeddedPatterns(tb testing.TB) []string {
	tb.Helper()
	seen := map[string]bool{}
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && k == "pattern" && !seen[s] {
					seen[s] = true
					out = append(out, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	err := fs.WalkDir(schemas.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".json") {
			return err
		}
		data, err := fs.ReadFile(schemas.FS(), p)
		if err != nil {
			return err
		}
		var doc any
		if err := json.Unmarshal(data, &doc); err != nil {
			return err
		}
		walk(doc)
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	if len(out) < 10 {
		tb.Fatalf("only %d embedded patterns found", len(out))
	}
	return out
}

// literalPrefix is the text between a leading ^ and the first
// metacharacter: "^room:[^\\s]+$" gives "room:".
func literalPrefix(expr string) string {
	s := strings.TrimPrefix(expr, "^")
	if i := strings.IndexAny(s, `[(\.*+?{|$`); i >= 0 {
		return s[:i]
	}
	return s
}

// variants returns s and s with each boundary rune put before, into and
// after it and in place of its first, middle and last code point, and with
// line terminators around it.
func variants(s string) []string {
	r := []rune(s)
	out := []string{s, s + "\n", "\n" + s, s + "\r\n", s + "\u2028", " " + s, s + " ", "", strings.Repeat(s, 2)}
	for _, b := range boundaryRunes {
		bs := string(b)
		out = append(out, bs, bs+s, s+bs)
		if len(r) == 0 {
			continue
		}
		for _, i := range []int{0, len(r) / 2, len(r) - 1} {
			out = append(out,
				string(r[:i])+bs+string(r[i:]),
				string(r[:i])+bs+string(r[i+1:]))
		}
	}
	return out
}

// TestLinearEmbeddedPatterns: every pattern of the embedded schemas is in
// the linear class, and Go's regexp gives regexp2's verdict on valid
// values and on every boundary-rune variant of them.
func TestLinearEmbeddedPatterns(t *testing.T) {
	b64 := strings.Repeat("Ab9_-", 20)
	tails := []string{
		strings.Repeat("0123456789abcdef", 4), b64[:43], b64[:86], b64[:42], b64[:44],
		"abc", "a-b-c", "a--b", "x:y", "room:abc", "a/b", "abc:def/ghi", "a", "A", "z6MkhaXgBZD", "r1.b_c:d-e",
		strings.Repeat("a", 128), strings.Repeat("a", 129), strings.Repeat("a", 64), strings.Repeat("a", 65),
	}
	checked := 0
	for _, expr := range embeddedPatterns(t) {
		lin, ora := linear(t, expr), oracle(t, expr)
		matched := 0
		for _, tail := range tails {
			for _, base := range []string{literalPrefix(expr) + tail, tail} {
				if agree(t, expr, lin, ora, base) {
					matched++
				}
				for _, s := range variants(base) {
					agree(t, expr, lin, ora, s)
					checked++
				}
			}
		}
		if matched == 0 {
			t.Errorf("%q: no valid value among the bases; the true side is untested", expr)
		}
	}
	t.Logf("%d embedded patterns, %d strings in all", len(embeddedPatterns(t)), checked)
}

// genPattern builds a random pattern of the linear class.
func genPattern(r *rand.Rand, depth int) string {
	var b strings.Builder
	alts := 1
	if r.IntN(4) == 0 {
		alts = 2 + r.IntN(2)
	}
	for a := range alts {
		if a > 0 {
			b.WriteByte('|')
		}
		if r.IntN(5) == 0 {
			b.WriteByte('^')
		}
		for range r.IntN(4) {
			b.WriteString(genAtom(r, depth))
			b.WriteString(genQuant(r))
		}
		if r.IntN(5) == 0 {
			b.WriteByte('$')
		}
	}
	return b.String()
}

var (
	genLiterals = []string{"a", "b", "0", "-", ":", "_", "é", "😀", "\u00a0", " ", "\\.", "\\$", "\\^", "\\/", "\\[", "\\]", "\\(", "\\)", "\\{", "\\}", "\\|", "\\\\", "\\*", "\\+", "\\?"}
	genEscapes  = []string{`\d`, `\D`, `\s`, `\S`, `\w`, `\W`, `\t`, `\n`, `\v`, `\f`, `\r`, `\x41`, `\x0b`, `\u00A0`, `\u2028`, `\uFEFF`, `\u180e`, `.`}
	genClassSgl = []string{"a", "b", "z", "0", "9", "_", ":", "é", "😀", " ", `\-`, `\]`, `\\`, `\^`, `\t`, `\v`, `\x85`, `\u00a0`, `\u2029`, `\uFFFD`, "\u3000"}
	genClassSet = []string{`\d`, `\D`, `\s`, `\S`, `\w`, `\W`}
	genRanges   = []string{"a-z", "A-Z", "0-9", "a-f", `\x00-\x1f`, `\u2000-\u200a`, `\u2000-\u200b`, "\u00a0-\u00ff", "😀-😂", `\u0080-\uFFFF`, " -~"}
)

func genAtom(r *rand.Rand, depth int) string {
	switch n := r.IntN(10); {
	case n < 3:
		return genLiterals[r.IntN(len(genLiterals))]
	case n < 5:
		return genEscapes[r.IntN(len(genEscapes))]
	case n < 8:
		var b strings.Builder
		b.WriteByte('[')
		if r.IntN(2) == 0 {
			b.WriteByte('^')
		}
		if r.IntN(6) == 0 {
			b.WriteByte('-')
		}
		for range 1 + r.IntN(3) {
			switch r.IntN(3) {
			case 0:
				b.WriteString(genClassSgl[r.IntN(len(genClassSgl))])
			case 1:
				b.WriteString(genClassSet[r.IntN(len(genClassSet))])
			default:
				b.WriteString(genRanges[r.IntN(len(genRanges))])
			}
		}
		if r.IntN(6) == 0 {
			b.WriteByte('-')
		}
		b.WriteByte(']')
		return b.String()
	default:
		if depth >= 2 {
			return "a"
		}
		open := "(?:"
		if r.IntN(2) == 0 {
			open = "("
		}
		return open + genPattern(r, depth+1) + ")"
	}
}

func genQuant(r *rand.Rand) string {
	q := []string{"", "", "", "*", "+", "?", "{2}", "{0,1}", "{1,}", "{2,3}", "{0}", "{3,}"}[r.IntN(12)]
	if q != "" && r.IntN(4) == 0 {
		q += "?"
	}
	return q
}

var genInputRunes = append([]rune("aab0-:_é😀 ."), boundaryRunes...)

func genInput(r *rand.Rand) string {
	n := r.IntN(7)
	out := make([]rune, n)
	for i := range out {
		out[i] = genInputRunes[r.IntN(len(genInputRunes))]
	}
	return string(out)
}

// TestLinearGeneratedPatterns: random patterns of the class, all accepted
// by the translator, agree with regexp2 on random strings over the
// boundary runes.
func TestLinearGeneratedPatterns(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 2026))
	patterns, inputs := 1500, 200
	if testing.Short() {
		patterns = 200
	}
	matches := 0
	for range patterns {
		expr := genPattern(r, 0)
		lin, ora := linear(t, expr), oracle(t, expr)
		for _, s := range genInputsN(r, inputs) {
			if agree(t, expr, lin, ora, s) {
				matches++
			}
		}
	}
	if matches == 0 {
		t.Fatal("no input matched any pattern")
	}
}

func genInputsN(r *rand.Rand, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = genInput(r)
	}
	return out
}

// TestLinearTranslation pins a few translations and the patterns left to
// regexp2.
func TestLinearTranslation(t *testing.T) {
	for expr, want := range map[string]string{
		`^[0-9a-f]{64}$`:        `^[\x{30}-\x{39}\x{61}-\x{66}]{64}$`,
		`^[^\s]+$`:              `^[\x{0}-\x{8}\x{E}-\x{1F}\x{21}-\x{9F}\x{A1}-\x{167F}\x{1681}-\x{1FFF}\x{200B}-\x{2027}\x{202A}-\x{202E}\x{2030}-\x{205E}\x{2060}-\x{2FFF}\x{3001}-\x{FEFE}\x{FF00}-\x{10FFFF}]+$`,
		`^a(?:-b)*?$`:           `^[\x{61}](?:[\x{2D}][\x{62}])*?$`,
		`x|(y)`:                 `[\x{78}]|(?:[\x{79}])`,
		`[-a]`:                  `[\x{2D}\x{61}]`,
		`[a-]`:                  `[\x{2D}\x{61}]`,
		`a{2,}b{1,1000}`:        `[\x{61}]{2,}[\x{62}]{1,1000}`,
		`\u00a0\x41\/`:          `[\x{A0}][\x{41}][\x{2F}]`,
		`[^\s\S]`:               `[^\x{0}-\x{10FFFF}]`,
		`.`:                     `[\x{0}-\x{9}\x{B}-\x{C}\x{E}-\x{2027}\x{202A}-\x{10FFFF}]`,
		"\u3000[😀-😂]":           `[\x{3000}][\x{1F600}-\x{1F602}]`,
		`^sha256:[A-Za-z0-9_-]`: `^[\x{73}][\x{68}][\x{61}][\x{32}][\x{35}][\x{36}][\x{3A}][\x{2D}\x{30}-\x{39}\x{41}-\x{5A}\x{5F}\x{61}-\x{7A}]`,
	} {
		if got, ok := translateECMA(expr); !ok || got != want {
			t.Errorf("translateECMA(%q) = %q, %v; want %q", expr, got, ok, want)
		}
	}
	for _, expr := range []string{
		`\b`, `\B`, `a\1`, `(a)\1`, `(?=a)`, `(?!a)`, `(?<=a)`, `(?<n>a)`, `(?i)a`, `(?m)^a`, `\p{L}`, `\P{L}`,
		`[]`, `[^]`, `[a-[b]]`, `[[]`, `[\b]`, `[z-a]`, `[\d-z]`, `[a-\d]`, `[a-b-c]`, `a{1001}`, `a{2,1}`, `a{,2}`, `a{`, `a}`, `]`,
		`\u{41}`, `\ud83d\ude00`, `\x4`, `\u004`, `\cA`, `\0`, `\k<n>`, `\a`, `\e`, `\-`, `\A`, `\z`, `\Z`, `\G`,
		`a**`, `a+*`, `^*`, `$+`, `*`, `+a`, `?`, `(a`, `a)`, `(?:a`, "\xff", `a{99999}`,
	} {
		if got, ok := translateECMA(expr); ok {
			t.Errorf("translateECMA(%q) = %q; want it left to regexp2", expr, got)
		}
	}
}

// TestLinearIgnoresBudget pins today's bug: regexp2's 250 ms budget ran out
// under load and valid values were refused as not matching
// ^[0-9a-f]{64}$. With a budget of 1 ns, which no regexp2 match can meet,
// the embedded patterns still validate the reference journal and records:
// the linear engine does not read the budget.
func TestLinearIgnoresBudget(t *testing.T) {
	budget := newECMAEngine(time.Nanosecond)
	for _, expr := range embeddedPatterns(t) {
		re, err := budget.compile(expr)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := re.(linearRegexp); !ok {
			t.Errorf("embedded pattern %q compiled to %T, not the linear engine", expr, re)
		}
		if re.(interface{ String() string }).String() != expr {
			t.Errorf("%q: String() = %q", expr, re)
		}
	}
	v, err := New(WithPatternTimeout(time.Nanosecond))
	if err != nil {
		t.Fatal(err)
	}
	if got := v.schemas.patterns.timeout; got != time.Nanosecond {
		t.Fatalf("the validator's pattern budget is %v, want 1ns", got)
	}
	data := readRefInternal(t, "capsule-journals", "canonical", "journal.ndjson")
	n := 0
	for i, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		e, err := events.ParseEntry([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		if ps := v.checkEntrySchema(e, events.Location{Line: i + 1}); len(ps) != 0 {
			t.Errorf("line %d: %v", i+1, ps)
		}
		n++
	}
	for _, name := range []string{"verified.json", "refused.json"} {
		rec, err := events.ParseRecord(readRefInternal(t, "execution-records", name))
		if err != nil {
			t.Fatal(err)
		}
		if ps := v.schemas.check(true, rec.Object(), events.SchemaInvalid, events.Location{}); len(ps) != 0 {
			t.Errorf("%s: %v", name, ps)
		}
	}
	if n == 0 {
		t.Fatal("no journal entries")
	}
}

// TestBacktrackingBudgetReason: a pattern outside the linear class (from a
// custom schema directory) still runs on regexp2 with its budget, and a
// value refused because the budget ran out says so instead of "does not
// match".
func TestBacktrackingBudgetReason(t *testing.T) {
	eng := newECMAEngine(time.Nanosecond)
	c := jsonschema.NewCompiler()
	c.UseRegexpEngine(eng.compile)
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(`{"type":"string","pattern":"^(a+)+(?=b)"}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddResource("file:///p.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("file:///p.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := sch.Pattern.(ecmaRegexp); !ok {
		t.Fatalf("^(a+)+(?=b) compiled to %T; want regexp2", sch.Pattern)
	}
	// A genuine mismatch keeps jsonschema's reason.
	ps := eng.schemaProblems(sch, "b", events.InvalidEntry, events.Location{})
	if len(ps) != 1 || ps[0].Reason != "schema: 'b' does not match pattern '^(a+)+(?=b)' (keyword pattern)" {
		t.Fatalf("got %v", ps)
	}
	// 2^40 paths: no budget of 1 ns is met.
	in := strings.Repeat("a", 40) + "!"
	ps = eng.schemaProblems(sch, in, events.InvalidEntry, events.Location{})
	want := "schema: '" + in + "' could not be matched against pattern '^(a+)+(?=b)' within 1ns (a backtracking pattern outside the linear class); refused (keyword pattern)"
	if len(ps) != 1 || ps[0].Reason != want || ps[0].Code != events.InvalidEntry {
		t.Fatalf("got %v\nwant %s", ps, want)
	}
}

// readRefInternal reads a file of testdata/reference (helpers_test.go's
// readRef is in the external test package).
func readRefInternal(tb testing.TB, parts ...string) []byte {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join(append([]string{"..", "testdata", "reference"}, parts...)...))
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// BenchmarkPattern matches each embedded pattern against a valid value of
// the shape the journals and records carry, on regexp2 (as ecmaEngine.compile
// configured it before the linear engine, with its budget) and on the
// linear engine.
func BenchmarkPattern(b *testing.B) {
	b64 := strings.Repeat("Ab9_-", 20)
	values := map[string]string{
		`^[0-9a-f]{64}$`:                      strings.Repeat("3251349a", 8),
		`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`: "run-2026-09-02.r17:a",
		`^sha256:[A-Za-z0-9_-]{43}$`:          "sha256:" + b64[:43],
		`^[a-z][a-z0-9-]*:[^\s]+$`:            "room:eval-harness/2026",
		`^[a-z0-9]+(?:-[a-z0-9]+)*$`:          "corpus-task-pack-7",
	}
	for _, engine := range []string{"regexp2", "linear"} {
		b.Run(engine, func(b *testing.B) {
			type pv struct {
				m func(string) bool
				s string
			}
			var all []pv
			for expr, s := range values {
				if engine == "linear" {
					all = append(all, pv{linear(b, expr).MatchString, s})
				} else {
					re := oracle(b, expr)
					re.MatchTimeout = 250 * time.Millisecond
					all = append(all, pv{ecmaRegexp{re}.MatchString, s})
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				for _, p := range all {
					if !p.m(p.s) {
						b.Fatal(p.s)
					}
				}
			}
		})
	}
}

// genSeqPattern builds a random pattern of seqMatcher's shape or close to
// it: ^ items $, items drawn so that the disjointness rule holds often and
// fails often.
func genSeqPattern(r *rand.Rand) string {
	var b strings.Builder
	b.WriteByte('^')
	atoms := []string{"a", "b", ":", "-", "é", "😀", `\d`, `\s`, `\S`, `\w`, `\W`, `.`, `[a-f]`, `[^a-f]`, `[0-9a-f]`, `[^\s]`, `[a-z0-9-]`, `[:/]`, `[A-Za-z0-9_-]`, `\u00a0`, `[\u2000-\u200b]`, `[^]`}
	for range 1 + r.IntN(4) {
		a := atoms[r.IntN(len(atoms))]
		if a == `[^]` {
			a = `[^:]`
		}
		b.WriteString(a)
		b.WriteString([]string{"", "", "*", "+", "?", "{2}", "{0,3}", "{1,}", "{2,4}", "{0}"}[r.IntN(10)])
	}
	b.WriteByte('$')
	return b.String()
}

// TestSeqMatcher: where compileLinear picks seqMatcher, it agrees with
// regexp2 and with Go's regexp on the translation; the simple embedded
// patterns take it.
func TestSeqMatcher(t *testing.T) {
	r := rand.New(rand.NewPCG(30, 11))
	seq, other := 0, 0
	for range 3000 {
		expr := genSeqPattern(r)
		m := linear(t, expr)
		if _, ok := m.(*seqMatcher); !ok {
			other++
			continue
		}
		seq++
		src, _ := translateECMA(expr)
		re, ora := regexp.MustCompile(src), oracle(t, expr)
		for _, s := range append(genInputsN(r, 150), "ab", "a:b", "0123abcdef", "aa::bb", "é😀", "a\u00a0b") {
			want := agree(t, expr, m, ora, s)
			if re.MatchString(s) != want {
				t.Fatalf("%q on %+q: Go regexp %v, regexp2 %v", expr, s, !want, want)
			}
		}
		// Invalid UTF-8: seqMatcher reads it as Go's regexp does.
		for _, s := range []string{"\xff", "a\xffb", "\xed\xa0\x80", "\xf0\x9f\x98", "ab\xc3"} {
			if m.MatchString(s) != re.MatchString(s) {
				t.Fatalf("%q on %+q: seqMatcher %v, Go regexp %v", expr, s, m.MatchString(s), re.MatchString(s))
			}
		}
	}
	if seq < 500 || other < 100 {
		t.Fatalf("generator covers seqMatcher %d times, Go regexp %d times", seq, other)
	}
	for _, expr := range []string{`^[0-9a-f]{64}$`, `^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`, `^sha256:[A-Za-z0-9_-]{43}$`, `^[a-z][a-z0-9-]*:[^\s]+$`, `^[a-z][a-z0-9-]*[:/][^\s]+$`, `^room:[^\s]+$`} {
		if m := linear(t, expr); reflect.TypeOf(m) != reflect.TypeFor[*seqMatcher]() {
			t.Errorf("%q: %T, want *seqMatcher", expr, m)
		}
	}
	for _, expr := range []string{`^[a-z0-9]+(?:-[a-z0-9]+)*$`, `^[a-z]*[a-z0-9]$`, `^a*b?$`, `^a*b?c$`, `a$`, `^a`, `^a|b$`} {
		if m := linear(t, expr); reflect.TypeOf(m) != reflect.TypeFor[*regexp.Regexp]() {
			t.Errorf("%q: %T, want *regexp.Regexp", expr, m)
		}
	}
}

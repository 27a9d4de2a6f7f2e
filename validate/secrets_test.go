package validate_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf16"

	"github.com/dlclark/regexp2/v2"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/validate"
)

// upstreamCanaries are the upstream harness's secret canaries as its
// verifier (envelope.js) writes them, in its order: name and JavaScript
// regular expression literal, verbatim.
func upstreamCanaries() []struct{ name, literal string } {
	return []struct{ name, literal string }{
		{"private_key_block", `/-----BEGIN [A-Z ]*PRIVATE KEY-----/`},
		{"aws_access_key", `/\bAKIA[0-9A-Z]{16}\b/`},
		{"openai_style_key", `/\bsk-[A-Za-z0-9_-]{20,}\b/`},
		{"github_token", `/\bgh[pousr]_[A-Za-z0-9]{30,}\b/`},
		{"slack_token", `/\bxox[abpr]-[A-Za-z0-9-]{10,}\b/`},
		{"stripe_key", `/\b[sr]k_(?:live|test)_[A-Za-z0-9]{16,}\b/`},
		{"bearer_header", `/\bBearer\s+[A-Za-z0-9._~+/=-]{20,}/`},
		{"jwt", `/\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\b/`},
		{"env_assignment", `/\b(?:API_KEY|SECRET|TOKEN|PASSWORD|PASSWD)\s*=\s*\S{8,}/i`},
	}
}

// ecmaCanary is an upstream canary compiled by regexp2.
type ecmaCanary struct {
	name string
	re   *regexp2.Regexp
}

// ecmaCanaries is the ECMA-262 reference: the upstream literals compiled
// by regexp2 v2.13.0 in ECMAScript mode without its Unicode option, which
// is JavaScript without the u flag as far as these patterns go (read in
// its syntax/charclass.go, syntax/tree.go and runner.go, and held to node
// by TestSecretCanariesNode):
//
//   - \s and \S are ecmaSpace, JavaScript's WhiteSpace and LineTerminator;
//   - \b uses IsECMAWordCharWithOptions, [A-Za-z0-9_] (it adds ſ and the
//     Kelvin sign only with IgnoreCase and Unicode together);
//   - with i, a literal letter becomes those of its Go simple-fold orbit
//     whose ecmaLegacyCase (single-unit uppercase, never from >= 128 to
//     < 128, as Canonicalize) is its own: for an ASCII letter, its two
//     cases. Non-ASCII letters, where Go's simple mappings and JavaScript's
//     full toUpperCase could part, are in no canary.
//
// regexp2 matches by rune, so ecmaSecret gives it the UTF-16 code units of
// the string, one rune each.
var ecmaCanaries = sync.OnceValue(func() []ecmaCanary {
	var cs []ecmaCanary
	for _, u := range upstreamCanaries() {
		end := strings.LastIndexByte(u.literal, '/')
		opts := regexp2.ECMAScript
		for _, flag := range u.literal[end+1:] {
			if flag != 'i' {
				panic("upstream canary " + u.name + ": flag " + string(flag))
			}
			opts |= regexp2.IgnoreCase
		}
		cs = append(cs, ecmaCanary{u.name, regexp2.MustCompile(u.literal[1:end], opts)})
	}
	return cs
})

// codeUnits returns s as JavaScript sees it, one rune per UTF-16 code
// unit. []rune reads an invalid UTF-8 byte as U+FFFD, as RE2 does.
func codeUnits(s string) []rune {
	u := utf16.Encode([]rune(s))
	rs := make([]rune, len(u))
	for i, c := range u {
		rs[i] = rune(c)
	}
	return rs
}

// ecmaSecret is the upstream's verdict on s by the reference: the name of
// the first canary that matches, or "".
func ecmaSecret(tb testing.TB, s string) string {
	tb.Helper()
	units := codeUnits(s)
	for _, c := range ecmaCanaries() {
		ok, err := c.re.MatchRunes(units)
		if err != nil {
			tb.Fatalf("regexp2 %s on %+q: %v", c.name, s, err)
		}
		if ok {
			return c.name
		}
	}
	return ""
}

// jsSpaces are ECMA-262's \s, one string each.
func jsSpaces() []string {
	return []string{"\t", "\n", "\v", "\f", "\r", " ", "\u00a0", "\u1680", "\u2000", "\u2001", "\u2002", "\u2003",
		"\u2004", "\u2005", "\u2006", "\u2007", "\u2008", "\u2009", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f",
		"\u3000", "\ufeff"}
}

// notSpaces are characters another definition of white space takes
// (Unicode's, Go's, RE2's) or that look blank, and JavaScript's \s does
// not.
func notSpaces() []string {
	return []string{"\u0085", "\u180e", "\u200b", "\u200c", "\u2060", "\x1c", "\x1f", "\x00"}
}

// cat joins pieces, so that no literal in these files is a secret a
// scanner would flag.
func cat(parts ...string) string { return strings.Join(parts, "") }

// canarySeeds are strings at every edge of the canaries: each canary, its
// length floor and one below, each character class's neighbours, every
// JavaScript space and a few that are not, astral characters (two code
// units), U+FFFD, characters whose case maps to ASCII letters, and word
// boundaries at both ends. They are few enough for the fuzzer to take in
// well inside its five seconds in make test.
func canarySeeds() []string {
	r := strings.Repeat
	var out []string
	add := func(s ...string) { out = append(out, s...) }
	emoji, astralLetter := "\U0001F600", "\U0001D400" // 😀, MATHEMATICAL BOLD CAPITAL A
	// bounded adds s with a word unit, a non-word unit and an astral
	// character on either side.
	bounded := func(s string) {
		add(s)
		for _, e := range []string{"x", "-", emoji} {
			add(e+s, s+e)
		}
	}
	for _, c := range canaries() {
		add(c.value)
	}

	pem, key := cat("-----BEG", "IN "), cat("PRIVATE", " KEY", "-----")
	for _, mid := range []string{"", "RSA ", "RSA2 ", "rsa ", "OPEN SSH ", "\u00a0", "\t"} {
		add(pem + mid + key)
	}
	add(pem+key[:len(key)-1], cat("----BEG", "IN "+key))

	aws := cat("AK", "IA")
	bounded(aws + r("Z3", 8))
	add(aws+r("Q", 15), aws+r("Q", 17), aws+r("q", 16), aws+r("Q", 15)+emoji, "_"+aws+r("Q", 16))

	sk := cat("s", "k-")
	bounded(sk + r("aZ_-", 5))
	add(sk+r("a", 19), sk+r("a", 21), sk+r("a", 19)+"-", cat("ta", sk)+r("a", 26), cat("S", "K-")+r("a", 20))

	bearer := cat("Bear", "er")
	bounded(bearer + " " + r("t0k.", 5))
	for _, sp := range append(jsSpaces(), notSpaces()...) {
		add(bearer + sp + r("a/", 10))
	}
	add(bearer+" "+r("a", 19), bearer+"\t\u00a0"+r("~", 21), "bear"+"er "+r("a", 20), bearer+r("a", 20), bearer+" "+r(emoji, 20))

	for _, t := range []string{"p", "o", "u", "s", "r", "x", "P"} {
		add(cat("g", "h", t, "_") + r("x9Y", 10))
	}
	bounded(cat("g", "hp_") + r("a", 30))
	add(cat("g", "hp_")+r("a", 29), cat("g", "hp_")+r("a", 29)+"_", cat("g", "hp_")+r("a", 29)+emoji)

	for _, t := range []string{"a", "b", "p", "r", "c", "B"} {
		add(cat("xo", "x", t, "-") + r("1-", 5))
	}
	bounded(cat("xo", "xb-") + r("q", 10))
	add(cat("xo", "xb-")+r("a", 9), cat("xo", "xb-")+r("a", 9)+"-", cat("xo", "xb-")+r("-", 10), cat("xo", "xb-123"))

	jwt := func(a, b, c int) string {
		return cat("ey", "J") + r("a", a) + "." + r("b", b) + "." + r("c", c)
	}
	bounded(jwt(10, 10, 10))
	add(jwt(9, 10, 10), jwt(10, 9, 10), jwt(10, 10, 9), jwt(10, 10, 9)+"-", jwt(1, 1, 1), cat("ey", "J")+r("-", 10)+".."+r("c", 10))

	for _, p := range []string{"sk_live_", "rk_test_", "pk_live_", "sk_prod_", "rk_live", "Sk_test_"} {
		add(p + r("Q7", 8))
	}
	bounded("rk_test_" + r("Q7", 8))
	add("sk_live_"+r("Q", 15), "sk_live_"+r("Q", 15)+emoji)

	for _, kw := range []string{"API_KEY", "api_key", "Api_Key", "SECRET", "secret", "TOKEN", "ToKeN", "PASSWORD",
		"password", "PASSWD", "API-KEY", "APIKEY", "PASS", "DB_PASSWORD", "MY_TOKEN", "MY-TOKEN", "x.token", "tokens"} {
		add(cat(kw[:2], kw[2:], "=") + r("h", 8))
	}
	tok := cat("TO", "KEN")
	bounded(tok + "=" + r("h", 8))
	add(tok+"="+r("h", 7), tok+" = '"+r("h", 5)+"'", tok+" = '"+r("h", 6)+"'", tok+"=="+r("=", 7), tok+"='abcdefg'")
	for _, sp := range append(jsSpaces(), notSpaces()...) {
		add(tok+sp+"="+r("a", 8), tok+"="+sp+r("a", 8), tok+"="+r(sp, 8))
	}
	for _, n := range []int{3, 4} {
		add(tok+"="+r(emoji, n), tok+"="+r(astralLetter, n), tok+"=a"+r(emoji, n), tok+"=\t"+r(emoji, n))
	}
	add(tok+"="+r("\ufffd", 7), tok+"="+r("\ufffd", 8), tok+"="+r("\u0080", 8))
	// Case mappings to ASCII that /i without u does not take: ſ (s), ı (i),
	// the Kelvin sign (k), and dotted İ (i).
	for _, kw := range []string{"\u017fecret", "SECRE\u017f", "api_\u212aey", "to\u212aen", "ap\u0131_key", "AP\u0130_KEY",
		"pa\u017f\u017fwd", "\u017f" + tok, "\u212a" + tok, "\u0131" + tok} {
		add(kw + "=" + r("a", 8))
	}
	add("", " ", "=", "\u0080", "\ufffd", emoji, r(emoji, 9), "gh_ k_ eyJ. xox- sk-", cat("to", "ken = 'abc'"))
	return out
}

// secretCorpus is canarySeeds, each also between the units of edges, and
// n random strings over pieces of the canaries, white space (JavaScript's
// and not), astral characters and case look-alikes, from a fixed seed.
func secretCorpus(n int) []string {
	r := strings.Repeat
	edges := []string{"x", "_", "-", ".", " ", "\u00a0", "\u0085", "é", "\U0001F600", "\ufffd", "9", "Z"}
	pieces := []string{
		cat("-----BEG", "IN "), "PRIVATE KEY-----", "RSA ", "A", cat("AK", "IA"), cat("s", "k-"), "sk", "-", "_",
		"gh", "p", "o", "u", "s", "r", "xox", "a", "b", cat("k_", "live_"), "k_test_", "Bearer", "bearer",
		cat("ey", "J"), ".", "=", "'", "\"", "TOKEN", "token", "SeCrEt", "API_KEY", "password", "PASSWD", "MY_",
		"task", "x", "9", "Z", "é", "\U0001F600", "\U0001D400", "\ufffd", "\u0080", "\u017f", "\u0131", "\u212a",
		r("a", 8), r("Q", 10), r("7", 16), r("z9", 10), r("x", 30), "/", "~", "+",
	}
	pieces = append(pieces, jsSpaces()...)
	pieces = append(pieces, notSpaces()...)
	var out []string
	for _, s := range canarySeeds() {
		out = append(out, s)
		for _, e := range edges {
			out = append(out, e+s, s+e)
		}
	}
	rnd := rand.New(rand.NewPCG(17, 2026))
	for range n {
		var b strings.Builder
		for range 1 + rnd.IntN(12) {
			b.WriteString(pieces[rnd.IntN(len(pieces))])
		}
		out = append(out, b.String())
	}
	return out
}

// nodeCanaries is a node program: with the upstream's [name, literal]
// pairs for %s, it reads a JSON array of strings on stdin and prints, as a
// JSON array, the name of the first canary each string matches, or null.
const nodeCanaries = `const canaries = [%s];
const input = JSON.parse(require("fs").readFileSync(0, "utf8"));
const out = input.map((s) => {
  for (const [name, re] of canaries) if (re.test(s)) return name;
  return null;
});
process.stdout.write(JSON.stringify(out));
`

// TestSecretCanariesNode is the golden test: node, which runs the
// upstream's own patterns, decides a corpus, and the canaries and the
// regexp2 reference must give its verdict on every string.
func TestSecretCanariesNode(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not on PATH: the canaries are not checked against JavaScript itself (FuzzSecretCanaries still holds them to the regexp2 reference)")
	}
	var lits []string
	for _, u := range upstreamCanaries() {
		name, _ := json.Marshal(u.name)
		lits = append(lits, "["+string(name)+", "+u.literal+"]")
	}
	corpus := secretCorpus(4000)
	in, err := json.Marshal(corpus)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, "-e", fmt.Sprintf(nodeCanaries, strings.Join(lits, ", ")))
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	outJSON, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.Bytes())
	}
	var verdicts []*string
	if err := json.Unmarshal(outJSON, &verdicts); err != nil || len(verdicts) != len(corpus) {
		t.Fatalf("node printed %d verdicts for %d strings (%v)", len(verdicts), len(corpus), err)
	}
	matches := map[string]int{}
	for i, s := range corpus {
		want := ""
		if verdicts[i] != nil {
			want = *verdicts[i]
			matches[want]++
		}
		if got := validate.MatchSecret(s); got != want {
			t.Errorf("MatchSecret(%+q) = %q, node says %q", s, got, want)
		}
		if ref := ecmaSecret(t, s); ref != want {
			t.Errorf("regexp2 reference on %+q = %q, node says %q", s, ref, want)
		}
	}
	total := 0
	for _, n := range matches {
		total += n
	}
	t.Logf("%d strings (%d seeds), %d matched by node: %v", len(corpus), len(canarySeeds()), total, matches)
	for _, name := range validate.SecretCanaryNames() {
		if matches[name] == 0 {
			t.Errorf("no string of the corpus is a %s", name)
		}
	}
}

// TestSecretCanaryNames: the canaries are the upstream's, in its order.
func TestSecretCanaryNames(t *testing.T) {
	var want []string
	for _, u := range upstreamCanaries() {
		want = append(want, u.name)
	}
	if got := validate.SecretCanaryNames(); !slices.Equal(got, want) {
		t.Fatalf("canaries %v, upstream %v", got, want)
	}
}

// TestSecretCanaryDivergences holds the canaries to the upstream on the
// two classes where roompub's patterns once differed from it, through the
// matcher, CheckEntry (fast path), the jsonschema path and a journal.
func TestSecretCanaryDivergences(t *testing.T) {
	r := strings.Repeat
	// canary_roompub_broader: the upstream accepts these (word boundaries,
	// length floors, exact capitals).
	accepted := []string{
		cat("ta", "sk-") + "abcdefghijklmnopqrstuvwxyz",
		cat("xo", "xb-123"),
		cat("ey", "Ja.b.c"),
		cat("MY_TO", "KEN=") + "abcdefghij",
		cat("xAK", "IA") + r("Z3", 8),
		cat("-----BEG", "IN RSA2 PRI", "VATE KEY-----"),
		cat("-----BEG", "IN rsa PRI", "VATE KEY-----"),
		cat("AK", "IA") + r("Z3", 8) + "x",
		cat("g", "hp_") + r("x9Y", 10) + "_",
		cat("s", "k_live_") + r("Q7", 7),
		cat("\u017fecret", "=") + r("a", 8),
		cat("to\u212aen", "=") + r("a", 8),
	}
	// canary_roompub_narrower: the upstream refuses these (\S counts quotes;
	// JavaScript's \s holds \v and Unicode spaces; astral characters are two
	// units).
	refused := []struct{ name, s string }{
		{"env_assignment", cat("to", "ken='abcdefg'")},
		{"bearer_header", cat("Bear", "er\u00a0") + r("t0k.", 5)},
		{"bearer_header", cat("Bear", "er\v") + r("t0k.", 5)},
		{"bearer_header", cat("Bear", "er\u3000\ufeff") + r("t0k.", 5)},
		{"env_assignment", cat("SEC", "RET\u00a0=") + r("h", 8)},
		{"env_assignment", cat("SEC", "RET=\u2028") + r("h", 8)},
		{"env_assignment", cat("TO", "KEN=") + r("\U0001F600", 4)},
		{"env_assignment", cat("my-to", "ken=") + r("h", 8)},
	}
	v := newValidator(t)
	if !v.FastEnvelope() {
		t.Fatal("the default validator has no envelope fast path")
	}
	check := func(t *testing.T, s, name string) {
		t.Helper()
		if got := validate.MatchSecret(s); got != name {
			t.Errorf("MatchSecret(%+q) = %q, want %q", s, got, name)
		}
		if ref := ecmaSecret(t, s); ref != name {
			t.Errorf("reference on %+q = %q, want %q", s, ref, name)
		}
		lines := chainLines(t, 1, func(_ int, m map[string]any) { payload(m)["message"] = s })
		e, err := events.ParseEntry(lines[0])
		if err != nil {
			t.Fatal(err)
		}
		if fields, ok := e.Fields(); !ok || !validate.EnvelopeValid(fields) {
			t.Fatalf("entry with %+q is not on the fast path", s)
		}
		at := events.Location{File: "j", Line: 1}
		fast, slow := v.CheckEntry(e, at), v.CheckEntrySchema(e, at)
		if fmt.Sprint(fast) != fmt.Sprint(slow) {
			t.Errorf("%+q: CheckEntry %v, jsonschema path %v", s, fast, slow)
		}
		_, jerr := v.Journal(bytes.NewReader(journalBytes(lines...)), "j", nil)
		if name == "" {
			if len(fast) != 0 || jerr != nil {
				t.Errorf("%+q refused: %v, %v", s, fast, jerr)
			}
			return
		}
		wantReason := "secret canary " + name + " ("
		if len(fast) != 1 || fast[0].Code != events.InvalidEntry || fast[0].At.Pointer != "/payload/message" ||
			!strings.HasPrefix(fast[0].Reason, wantReason) || strings.Contains(fast[0].Reason, s) {
			t.Errorf("%+q: problems %v, want one invalid_entry at /payload/message, %q…", s, fast, wantReason)
		}
		expectRefusal(t, jerr, want{events.InvalidEntry, 1, "/payload/message"})
	}
	t.Run("accepted", func(t *testing.T) {
		for _, s := range accepted {
			check(t, s, "")
		}
	})
	t.Run("refused", func(t *testing.T) {
		for _, c := range refused {
			check(t, c.s, c.name)
		}
	})
}

// TestSecretCanariesNoAllocs: a string without an astral character is
// matched where it lies, whether or not a pattern runs on it.
func TestSecretCanariesNoAllocs(t *testing.T) {
	for _, s := range []string{
		"step 3: ran the slugify tests, 12 passed",
		cat("to", "ken=") + "short",
		cat("to", "ken=") + "abcdefgh ok",
		"na\u00efve caf\u00e9 = \u00a0\u3000 x",
	} {
		// Under the race detector sync.Pool drops items at random (by
		// design), so regexp's pooled machines are allocated now and then.
		if n := testing.AllocsPerRun(100, func() { validate.MatchSecret(s) }); n != 0 && !raceEnabled {
			t.Errorf("MatchSecret(%+q): %v allocations", s, n)
		}
		if validate.CodeUnitView(s) != s {
			t.Errorf("CodeUnitView(%+q) changed it", s)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"a\U0001F600b", "a\u0080\u0080b"},
		{"\U0010FFFF\U00010000", "\u0080\u0080\u0080\u0080"},
		{"\xf0\x9f\x98", "\xf0\x9f\x98"},             // cut short: three U+FFFD
		{"\xf4\x90\x80\x80", "\xf4\x90\x80\x80"},     // above U+10FFFF: four U+FFFD
		{"\xe2\xf0\x9f\x98\x80", "\xe2\u0080\u0080"}, // invalid byte, then an astral character
	} {
		if got := validate.CodeUnitView(c.in); got != c.want {
			t.Errorf("CodeUnitView(%+q) = %+q, want %+q", c.in, got, c.want)
		}
		if got, want := len(codeUnits(c.in)), len([]rune(c.want)); got != want {
			t.Errorf("%+q: %d UTF-16 units, the view has %d runes", c.in, got, want)
		}
	}
}

// TestMayHold: every canary's literal, at every position of strings
// shorter than a word, of a word and of up to two words and a part, is
// seen by the prefilter; a string of none of their bytes is not.
func TestMayHold(t *testing.T) {
	for k, need := range validate.CanaryNeeds() {
		for n := len(need); n <= 2*8+7; n++ {
			for at := 0; at+len(need) <= n; at++ {
				s := strings.Repeat(".", at) + need + strings.Repeat(".", n-at-len(need))
				if validate.MayHold(s)&(1<<k) == 0 {
					t.Errorf("MayHold(%q) misses %q", s, need)
				}
			}
		}
	}
	for n := range 2*8 + 8 {
		if s := strings.Repeat("az09 .", 4)[:n]; validate.MayHold(s) != 0 {
			t.Errorf("MayHold(%q) = %#x, want 0", s, validate.MayHold(s))
		}
	}
}

// TestCanaryMinBytes: the shortest string a canary matches is as long as
// canaryMinBytes says (an env_assignment: TOKEN, '=' and eight more), and
// a string of the patterns' own bytes one shorter matches none.
func TestCanaryMinBytes(t *testing.T) {
	if validate.CanaryMinBytes != 14 {
		t.Fatalf("CanaryMinBytes = %d, want 14", validate.CanaryMinBytes)
	}
	s := cat("TO", "KEN=") + "abcdefgh"
	if got := validate.MatchSecretPatterns(s); got != "env_assignment" {
		t.Fatalf("MatchSecretPatterns(%q) = %q, want env_assignment", s, got)
	}
	if got := validate.MatchSecretPatterns(s[:len(s)-1]); got != "" {
		t.Fatalf("MatchSecretPatterns(%q) = %q, want none", s[:len(s)-1], got)
	}
}

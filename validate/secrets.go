package validate

import (
	"math/bits"
	"regexp"
	"regexp/syntax"
	"strings"
	"unicode/utf8"
)

// The secret canaries are the upstream harness's (envelope.js, the
// enforcing implementation): nine JavaScript regular expressions, each
// applied with pattern.test to every payload string; a match refuses the
// entry, nothing is redacted. A port must give their verdict exactly, so
// each is written here in Go's linear-time RE2 syntax with its ECMA-262
// meaning (no u flag) spelled out:
//
//   - JavaScript matches over UTF-16 code units, so the patterns run over
//     codeUnitView(s), in which an astral character is two units.
//   - \s is JavaScript's WhiteSpace and LineTerminator set (jsSpace), not
//     RE2's ASCII one; \S is its complement, written [^...].
//   - \b is RE2's own: an ASCII word boundary, \w = [0-9A-Za-z_] on one
//     side only, which is ECMA-262's without the u flag.
//   - /i without u folds the keywords' letters to ASCII only (Canonicalize
//     never maps a unit >= 128 to one < 128), so each letter is written
//     [Xx]: RE2's (?i) would also take ſ (U+017F) for s and the Kelvin
//     sign (U+212A) for k.
//
// The test reference compiles the upstream texts with regexp2's ECMAScript
// mode over UTF-16 code units; FuzzSecretCanaries holds matchSecret equal
// to it, and TestSecretCanariesNode holds both to node.

// jsSpace is the body of a class of ECMA-262 \s: WhiteSpace (TAB, VT, FF,
// SP, NBSP, ZWNBSP, Zs) and LineTerminator. U+0085 and U+180E are not in it.
const jsSpace = `\x09-\x0d\x20\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff}`

// secretCanary is one of the upstream's secret patterns.
type secretCanary struct {
	name string         // the upstream's name, as its refusals give it
	what string         // what it finds, for people
	need string         // a literal every match holds
	at   int            // the byte of need looked for first: one rare in text
	re   *regexp.Regexp // the pattern over codeUnitView
}

// reason words a refusal by this canary without the value.
func (c *secretCanary) reason() string {
	return "secret canary " + c.name + " (" + c.what + "): payload string matches it (value withheld)"
}

// secretCanaries are the upstream's canaries in its order, which is the
// order a string's first match is reported in.
//
// need is a literal every match of re contains; a string without it cannot
// match, so the pattern is not run on it (most payload strings hold none of
// them). FuzzSecretCanaries holds this against the patterns alone.
var secretCanaries = []secretCanary{
	{"private_key_block", "a PEM private key block", "-----BEGIN ", 7, regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----`)},
	{"aws_access_key", "an AWS access key id", "AKIA", 1, regexp.MustCompile(`\bAKIA[0-9A-Z]{16}\b`)},
	{"openai_style_key", "an sk- API key", "sk-", 1, regexp.MustCompile(`\bsk-[A-Za-z0-9_-]{20,}\b`)},
	{"github_token", "a GitHub token", "gh", 0, regexp.MustCompile(`\bgh[pousr]_[A-Za-z0-9]{30,}\b`)},
	{"slack_token", "a Slack token", "xox", 0, regexp.MustCompile(`\bxox[abpr]-[A-Za-z0-9-]{10,}\b`)},
	{"stripe_key", "a Stripe key", "k_", 1, regexp.MustCompile(`\b[sr]k_(?:live|test)_[A-Za-z0-9]{16,}\b`)},
	{"bearer_header", "a Bearer header", "Bearer", 0, regexp.MustCompile(`\bBearer[` + jsSpace + `]+[A-Za-z0-9._~+/=-]{20,}`)},
	{"jwt", "a JWT", "eyJ", 2, regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\b`)},
	{"env_assignment", "a credential assignment", "=", 0, regexp.MustCompile(`\b(?:` + asciiCaseless("API_KEY|SECRET|TOKEN|PASSWORD|PASSWD") +
		`)[` + jsSpace + `]*=[` + jsSpace + `]*[^` + jsSpace + `]{8,}`)},
}

// asciiCaseless writes each ASCII letter of expr as the class of its two
// cases: what /i without the u flag matches for it.
func asciiCaseless(expr string) string {
	var b strings.Builder
	for _, r := range expr {
		switch {
		case 'A' <= r && r <= 'Z':
			b.WriteString("[" + string(r) + string(r+'a'-'A') + "]")
		case 'a' <= r && r <= 'z':
			b.WriteString("[" + string(r-'a'+'A') + string(r) + "]")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// needsAt maps a byte to the canaries (bit k: secretCanaries[k]) whose
// need holds it at its at, so that one pass over a string finds which
// needs it may hold instead of one strings.Contains per canary (the
// canaries were half of the entry rules' time). The byte is a rare one
// ("eyJ" is looked for at its 'J', not its 'e'), so that few strings hold
// any.
var needsAt = func() (t [256]uint16) {
	if len(secretCanaries) > 16 {
		panic("validate: more secret canaries than needsAt's bits")
	}
	for k, c := range secretCanaries {
		t[c.need[c.at]] |= 1 << k
	}
	return t
}()

// mayHold is the union of needsAt over the bytes of s: bit k is clear when
// s cannot hold secretCanaries[k].need. Eight bytes at a time, the last
// eight of a string of eight or more read as a word too (again in part),
// so that no byte is looked at on its own but in a string shorter than
// a word.
func mayHold(s string) uint16 {
	var m uint16
	i := 0
	for ; len(s)-i >= 8; i += 8 {
		w := s[i : i+8]
		m |= needsAt[w[0]] | needsAt[w[1]] | needsAt[w[2]] | needsAt[w[3]] |
			needsAt[w[4]] | needsAt[w[5]] | needsAt[w[6]] | needsAt[w[7]]
	}
	switch {
	case i == len(s):
	case len(s) >= 8:
		w := s[len(s)-8:]
		m |= needsAt[w[0]] | needsAt[w[1]] | needsAt[w[2]] | needsAt[w[3]] |
			needsAt[w[4]] | needsAt[w[5]] | needsAt[w[6]] | needsAt[w[7]]
	default:
		for ; i < len(s); i++ {
			m |= needsAt[s[i]]
		}
	}
	return m
}

// canaryMinBytes is the length of the shortest string any canary can
// match: each pattern's shortest match in code units (minRunes), the
// least of them. A code unit of codeUnitView is a rune of at least one
// byte, and the view has the bytes of s, so a shorter string matches
// none (most payload strings are such: ids, names, statuses).
var canaryMinBytes = func() int {
	least := -1
	for _, c := range secretCanaries {
		re, err := syntax.Parse(c.re.String(), syntax.Perl)
		if err != nil {
			panic("validate: canary " + c.name + ": " + err.Error())
		}
		if n := minRunes(re); least < 0 || n < least {
			least = n
		}
	}
	return least
}()

// minRunes is the fewest runes a match of re holds.
func minRunes(re *syntax.Regexp) int {
	switch re.Op {
	case syntax.OpLiteral:
		return len(re.Rune)
	case syntax.OpCharClass, syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		return 1
	case syntax.OpCapture, syntax.OpPlus:
		return minRunes(re.Sub[0])
	case syntax.OpRepeat:
		return re.Min * minRunes(re.Sub[0])
	case syntax.OpConcat:
		n := 0
		for _, sub := range re.Sub {
			n += minRunes(sub)
		}
		return n
	case syntax.OpAlternate:
		n := -1
		for _, sub := range re.Sub {
			if m := minRunes(sub); n < 0 || m < n {
				n = m
			}
		}
		return max(n, 0)
	}
	return 0 // empty, assertions, star, quest: none needed
}

// matchSecret returns the first canary, in the upstream's order, that s
// matches, or nil.
func matchSecret(s string) *secretCanary {
	if len(s) < canaryMinBytes {
		return nil
	}
	may := mayHold(s)
	if may == 0 {
		return nil
	}
	var found uint16 // bit k: s holds secretCanaries[k].need
	for m := may; m != 0; {
		k := bits.TrailingZeros16(m)
		m &^= 1 << k
		if strings.Contains(s, secretCanaries[k].need) {
			found |= 1 << k
		}
	}
	if found == 0 {
		return nil
	}
	units := codeUnitView(s)
	for found != 0 {
		k := bits.TrailingZeros16(found)
		found &^= 1 << k
		if secretCanaries[k].re.MatchString(units) {
			return &secretCanaries[k]
		}
	}
	return nil
}

// astralUnit stands for each UTF-16 surrogate of an astral character in
// codeUnitView: like a surrogate it is one unit, not \s, not \w and in no
// class of the canaries. Two of them take the four bytes the character
// took.
const astralUnit = "\u0080"

// codeUnitView returns s with each astral character (four UTF-8 bytes, two
// UTF-16 code units) replaced by two astralUnits, so that RE2, which
// matches by code point, counts what JavaScript counts: `TOKEN=` and four
// emoji are eight \S units. A string without one is returned as is, with no
// allocation; every other code point is one unit in both.
//
// A lone surrogate (a JSON \udXXX escape) reaches Go as U+FFFD, and an
// invalid UTF-8 byte is read as U+FFFD by RE2 and by []rune alike: one
// unit, not \s, not \w and in no class, which is what a lone surrogate is
// to every canary, so the verdict is the one JavaScript gives the original.
func codeUnitView(s string) string {
	var b []byte
	for i := 0; i < len(s); i++ {
		// A byte >= 0xF0 is never a continuation byte, so it starts a
		// code point wherever RE2 decodes s.
		if s[i] < 0xf0 {
			continue
		}
		if _, size := utf8.DecodeRuneInString(s[i:]); size == 4 {
			if b == nil {
				b = []byte(s)
			}
			copy(b[i:], astralUnit+astralUnit)
			i += 3
		}
	}
	if b == nil {
		return s
	}
	return string(b)
}

package validate

import (
	"math/bits"
	"regexp"
	"strings"
)

// secretCanaries are the upstream harness's secret patterns
// (reference/capsule-journals/README.md): a payload string matching one
// refuses the entry; nothing is redacted. These are roompub's own rules, not
// JSON Schema patterns, so Go's linear-time RE2 is the right engine.
//
// need is a literal every match of re contains; a string without it cannot
// match, so the pattern is not run on it (most payload strings hold none of
// them). FuzzSecretCanaries holds this against the patterns alone.
var secretCanaries = []struct {
	name string
	need string
	re   *regexp.Regexp
}{
	{"a PEM private key block", "-----BEGIN ", regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----`)},
	{"an AWS access key id", "AKIA", regexp.MustCompile(`AKIA[0-9A-Z]{16}`)},
	{"an sk- API key", "sk-", regexp.MustCompile(`sk-[A-Za-z0-9_-]{20,}`)},
	{"a GitHub token", "gh", regexp.MustCompile(`gh[pousr]_[A-Za-z0-9]{30,}`)},
	{"a Slack token", "xox", regexp.MustCompile(`xox[abpr]-[A-Za-z0-9-]+`)},
	{"a Stripe key", "k_", regexp.MustCompile(`[sr]k_(?:live|test)_[A-Za-z0-9]{16,}`)},
	{"a Bearer header", "Bearer", regexp.MustCompile(`Bearer\s+[A-Za-z0-9._~+/=-]{20,}`)},
	{"a JWT", "eyJ", regexp.MustCompile(`eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+`)},
	{"a credential assignment", "=", regexp.MustCompile(`(?i)(?:api_key|secret|token|password|passwd)\s*=\s*['"]?[^\s'"]{8,}`)},
}

// needsAt maps a byte to the canaries (bit k: secretCanaries[k]) whose
// need starts with it, so that one pass over a string finds every need it
// holds instead of one strings.Contains per canary (issue 8: the canaries
// were half of the entry rules' time).
var needsAt = func() (t [256]uint16) {
	if len(secretCanaries) > 16 {
		panic("validate: more secret canaries than needsAt's bits")
	}
	for k, c := range secretCanaries {
		t[c.need[0]] |= 1 << k
	}
	return t
}()

// matchSecret returns the name of the first canary s matches, or "".
func matchSecret(s string) string {
	var found uint16 // bit k: s holds secretCanaries[k].need
	for i := 0; i < len(s); i++ {
		m := needsAt[s[i]] &^ found
		for m != 0 {
			k := bits.TrailingZeros16(m)
			m &^= 1 << k
			if strings.HasPrefix(s[i:], secretCanaries[k].need) {
				found |= 1 << k
			}
		}
	}
	for found != 0 {
		k := bits.TrailingZeros16(found)
		found &^= 1 << k
		if secretCanaries[k].re.MatchString(s) {
			return secretCanaries[k].name
		}
	}
	return ""
}

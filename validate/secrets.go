package validate

import (
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

// matchSecret returns the name of the first canary s matches, or "".
func matchSecret(s string) string {
	for _, c := range secretCanaries {
		if strings.Contains(s, c.need) && c.re.MatchString(s) {
			return c.name
		}
	}
	return ""
}

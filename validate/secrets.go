package validate

import "regexp"

// secretCanaries are the upstream harness's secret patterns
// (reference/capsule-journals/README.md): a payload string matching one
// refuses the entry; nothing is redacted. These are roompub's own rules, not
// JSON Schema patterns, so Go's linear-time RE2 is the right engine.
var secretCanaries = []struct {
	name string
	re   *regexp.Regexp
}{
	{"a PEM private key block", regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----`)},
	{"an AWS access key id", regexp.MustCompile(`AKIA[0-9A-Z]{16}`)},
	{"an sk- API key", regexp.MustCompile(`sk-[A-Za-z0-9_-]{20,}`)},
	{"a GitHub token", regexp.MustCompile(`gh[pousr]_[A-Za-z0-9]{30,}`)},
	{"a Slack token", regexp.MustCompile(`xox[abpr]-[A-Za-z0-9-]+`)},
	{"a Stripe key", regexp.MustCompile(`[sr]k_(?:live|test)_[A-Za-z0-9]{16,}`)},
	{"a Bearer header", regexp.MustCompile(`Bearer\s+[A-Za-z0-9._~+/=-]{20,}`)},
	{"a JWT", regexp.MustCompile(`eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+`)},
	{"a credential assignment", regexp.MustCompile(`(?i)(?:api_key|secret|token|password|passwd)\s*=\s*['"]?[^\s'"]{8,}`)},
}

// matchSecret returns the name of the first canary s matches, or "".
func matchSecret(s string) string {
	for _, c := range secretCanaries {
		if c.re.MatchString(s) {
			return c.name
		}
	}
	return ""
}

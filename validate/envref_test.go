package validate_test

import (
	"strings"
	"testing"

	"github.com/roompub/roompub/validate"
)

// TestCheckEnvironmentRef: the execution record schema's environment/ref
// form, its length bound in characters.
func TestCheckEnvironmentRef(t *testing.T) {
	for _, ok := range []string{"environment:qmail-01", "env:x", "a:b", "k8s-pod:ns/name@sha256:ab", "environment:" + strings.Repeat("é", 500)} {
		if err := validate.CheckEnvironmentRef(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "qmail-01", "env/x", "Environment:x", "9env:x", "environment:", "environment: x", "environment:x\n", " environment:x",
		"environment:" + strings.Repeat("x", 501), "environment:\xff"} {
		if err := validate.CheckEnvironmentRef(bad); err == nil || !strings.Contains(err.Error(), "is not an environment/ref") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

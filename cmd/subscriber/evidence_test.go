package main

import (
	"strings"
	"testing"

	"github.com/roompub/roompub/config"
)

// TestEvidenceInstanceForm: an --instance that is not an environment/ref
// is refused before anything is read (exit 2), naming the form; a reader
// asked for "qmail-01" would otherwise find no record and print an empty
// result as if the instance had none.
func TestEvidenceInstanceForm(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"qmail-01", "env/x", " environment:x", "environment:x ", "environment:", "Environment:x", "environment:a b", ":x", ""} {
		status, _, stderr := invoke(t, "", "evidence", "--server", "nats://127.0.0.1:1", "--instance", bad)
		if status != config.ExitUsage || !strings.Contains(stderr, "is not an environment/ref") || !strings.Contains(stderr, "e.g. environment:qmail-01") {
			t.Errorf("--instance %q: status %d, %s", bad, status, stderr)
		}
	}
	status, _, stderr := invoke(t, "", "evidence", "--server", "nats://127.0.0.1:1", "--instance", "environment:qmail-01")
	if status == config.ExitOK || strings.Contains(stderr, "environment/ref") {
		t.Errorf("a good --instance, no server: status %d, %s", status, stderr)
	}
}

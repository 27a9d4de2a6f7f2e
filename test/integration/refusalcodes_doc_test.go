package integration

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestRefusalCodesDocHasRowPerCode keeps the table of docs/refusal-codes.md
// in step with events/refusal.go: every code declared there has a row.
func TestRefusalCodesDocHasRowPerCode(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(root, "events", "refusal.go"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "refusal-codes.md"))
	if err != nil {
		t.Fatal(err)
	}
	codes := regexp.MustCompile(`\bCode = "([a-z_]+)"`).FindAllStringSubmatch(string(src), -1)
	if len(codes) < 20 {
		t.Fatalf("found only %d codes in events/refusal.go", len(codes))
	}
	for _, m := range codes {
		if !strings.Contains(string(doc), "\n| `"+m[1]+"` | ") {
			t.Errorf("docs/refusal-codes.md has no row for refusal code %s", m[1])
		}
	}
}

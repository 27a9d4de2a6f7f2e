package layout

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestEveryTestPackageRuns: every package with a test file is matched by
// a package pattern of a go test line the Makefile's test targets run
// (unit, integration, test-faults): a new package's tests would
// otherwise never run in make test, and CI would not know. test/breakers
// holds opt-in attacks, run by hand (CONTRIBUTING.md).
func TestEveryTestPackageRuns(t *testing.T) {
	root := filepath.Join("..", "..")
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, line := range regexp.MustCompile(`(?m)^\t\$\(GO\) test .*$`).FindAll(mk, -1) {
		for _, f := range strings.Fields(string(line)) {
			if strings.HasPrefix(f, "./") {
				patterns = append(patterns, f)
			}
		}
	}
	if len(patterns) < 5 {
		t.Fatalf("found only %v in the Makefile's go test lines", patterns)
	}
	covered := func(dir string) bool {
		return slices.ContainsFunc(patterns, func(p string) bool {
			if base, ok := strings.CutSuffix(p, "/..."); ok {
				return dir == base || strings.HasPrefix(dir, base+"/")
			}
			return dir == p
		})
	}
	dirs := map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != root {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, "_test.go") {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			dirs["./"+filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 10 {
		t.Fatalf("found only %d packages with tests", len(dirs))
	}
	for dir := range dirs {
		if !covered(dir) && dir != "./test/breakers" {
			t.Errorf("%s has tests that no go test line of the Makefile runs (patterns %v)", dir, patterns)
		}
	}
}

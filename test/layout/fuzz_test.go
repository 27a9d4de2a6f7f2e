package layout

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestEveryFuzzTargetRuns: every package with a Fuzz target is in the
// Makefile's FUZZ_PKGS, which make test and make fuzz run; a package
// moved or added would otherwise drop its targets without a word.
func TestEveryFuzzTargetRuns(t *testing.T) {
	root := filepath.Join("..", "..")
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^FUZZ_PKGS := (.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile sets no FUZZ_PKGS")
	}
	listed := strings.Fields(string(m[1]))
	var found []string
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "func Fuzz") {
				rel, _ := filepath.Rel(root, filepath.Dir(path))
				pkg := "./" + filepath.ToSlash(rel)
				if !slices.Contains(found, pkg) {
					found = append(found, pkg)
				}
				break
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) == 0 {
		t.Fatal("found no Fuzz target at all")
	}
	for _, pkg := range found {
		if !slices.Contains(listed, pkg) {
			t.Errorf("%s has Fuzz targets but is not in the Makefile's FUZZ_PKGS", pkg)
		}
	}
}

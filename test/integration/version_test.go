package integration

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMakeBuildStampsVersion: the commands `make build` puts in its bin
// directory print the checkout's `git describe --tags --always --dirty` for
// --version, not "(devel)".
func TestMakeBuildStampsVersion(t *testing.T) {
	for _, tool := range []string{"make", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: %v", tool, err)
		}
	}
	describe := exec.Command("git", "describe", "--tags", "--always", "--dirty")
	describe.Dir = root
	out, err := describe.Output()
	if err != nil {
		t.Skipf("not a git checkout: git describe: %v", err)
	}
	want := strings.TrimSpace(string(out))
	bin := t.TempDir()
	build := exec.Command("make", "--no-print-directory", "build", "BIN="+bin)
	build.Dir = root
	if msg, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, msg)
	}
	for _, cmd := range []string{"publisher", "subscriber", "roompub-bench"} {
		r := execIn(t, root, filepath.Join(bin, cmd), "--version")
		if got := strings.TrimSpace(r.stdout); r.status != 0 || got != want {
			t.Errorf("%s --version: exit %d, %q (stderr %q); want %q", cmd, r.status, got, r.stderr, want)
		}
	}
}

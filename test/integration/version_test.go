package integration

import (
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMakeBuildStampsVersion: the commands `make build` puts in its bin
// directory print the checkout's `git describe --tags --always --dirty` for
// --version, not "(devel)", and the stamped publisher serves: a release's
// tag (v0.1.0, v0.1.0-13-g0c663f9) must reach the ingest service in a form
// micro takes.
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
	// Serve with the stamped binary, and with a tag's stamp.
	for _, version := range []string{want, "v0.1.0"} {
		stamped := bin
		if version != want {
			stamped = t.TempDir()
			build := exec.Command("make", "--no-print-directory", "build", "BIN="+stamped, "VERSION="+version)
			build.Dir = root
			if msg, err := build.CombinedOutput(); err != nil {
				t.Fatalf("make build VERSION=%s: %v\n%s", version, err, msg)
			}
		}
		serveWith(t, filepath.Join(stamped, "publisher"), t.TempDir())
	}
}

// serveWith starts `publisher serve` of binary pub on a fresh store,
// fails t unless it says it serves within 20 s, and stops it.
func serveWith(t *testing.T, pub, store string) {
	t.Helper()
	log := &syncBuffer{}
	cmd := exec.Command(pub, "serve", "--listen", "127.0.0.1:-1", "--store-dir", store, "--trusted-host", trustedHost)
	cmd.Dir = root
	cmd.Env = childEnv()
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-exited
	}()
	deadline := time.After(20 * time.Second)
	for !servingRE.MatchString(log.String()) {
		select {
		case <-exited:
			t.Fatalf("%s serve exited before serving:\n%s", pub, log)
		case <-deadline:
			t.Fatalf("%s serve did not serve within 20 s:\n%s", pub, log)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

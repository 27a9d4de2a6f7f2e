//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
)

// TestOpenNKeyRefused: an --nkey seed that group or others may read is
// refused, exit 2, naming the file, its mode and the fix, by every command
// that connects; --allow-open-key-file takes it.
func TestOpenNKeyRefused(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	nk := filepath.Join(t.TempDir(), "solver.nk")
	if err := os.WriteFile(nk, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(nk, 0o640); err != nil {
		t.Fatal(err)
	}
	conn := []string{"--nkey", nk, "--server", "nats://127.0.0.1:1", "--timeout", "1s"}
	want := nk + ": permissions 0640 are too open: a private key file must be accessible by its owner only (run chmod 600 " + nk + ", or pass --allow-open-key-file)"
	for _, args := range [][]string{
		append([]string{"audit"}, conn...),
		append([]string{"evidence", "--instance", "environment:x"}, conn...),
		append([]string{"follow", "--room", "room:x", "--durable", "d", "--state-dir", t.TempDir()}, conn...),
		append([]string{"prove", "--room", "room:x", "--entry", strings.Repeat("0", 64), "--trusted-publisher", "node:did:key:z6MkqB3fVxzXFbVUK2q1GPrLQzaxgwDGGVuxkDzaf5tsLnpo"}, conn...),
	} {
		status, _, stderr := invoke(t, "", args...)
		if status != 2 || !strings.Contains(stderr, want) {
			t.Errorf("%s: status %d, stderr %q; want 2 and %q", args[0], status, stderr, want)
		}
	}
	status, _, stderr := invoke(t, "", append([]string{"audit", "--allow-open-key-file"}, conn...)...)
	if status != 2 || strings.Contains(stderr, "too open") || !strings.Contains(stderr, "127.0.0.1:1") {
		t.Errorf("audit --allow-open-key-file: status %d, stderr %q; want the connection's error", status, stderr)
	}
}

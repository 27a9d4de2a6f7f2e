package main

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roompub/roompub/config"
)

// TestCheckpointFileFIFO: an audit --checkpoint naming a FIFO is refused
// at once (exit 2, naming its kind), not read until a writer comes.
func TestCheckpointFileFIFO(t *testing.T) {
	t.Parallel()
	fifo := filepath.Join(t.TempDir(), "note")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFO here: %v", err)
	}
	type result struct {
		status int
		stderr string
	}
	done := make(chan result, 1)
	go func() {
		status, _, stderr := invoke(t, "", "audit", "--server", "nats://127.0.0.1:1", "--checkpoint", fifo,
			"--trusted-publisher", "node:did:key:z6Mkon3Necd6NkkyfoGoHxid2znGc59LU3K7mubaRcFbLfLX")
		done <- result{status, stderr}
	}()
	select {
	case r := <-done:
		if r.status != config.ExitUsage || !strings.Contains(r.stderr, "--checkpoint") || !strings.Contains(r.stderr, "regular file") {
			t.Errorf("status %d, %s", r.status, r.stderr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("audit --checkpoint FIFO still waiting after 10s")
	}
}

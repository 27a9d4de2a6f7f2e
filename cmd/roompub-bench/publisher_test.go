package main

import (
	"bytes"
	"strings"
	"sync/atomic"
	"testing"
)

// TestLoggerCountsErrors: the publisher's logger writes warnings and
// errors, and counts the errors, which fail the run (publisher.stop).
func TestLoggerCountsErrors(t *testing.T) {
	var buf bytes.Buffer
	var n atomic.Int64
	log := newLogger(&buf, &n)
	log.Info("not shown")
	log.Warn("a warning")
	log.Error("final checkpoints")
	if n.Load() != 1 {
		t.Errorf("%d errors counted, want 1", n.Load())
	}
	if out := buf.String(); strings.Contains(out, "not shown") || !strings.Contains(out, "a warning") || !strings.Contains(out, "final checkpoints") {
		t.Errorf("logged %q", out)
	}
}

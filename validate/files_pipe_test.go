//go:build unix

package validate_test

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/validate"
)

// TestVerifyPathPipe: an input that reports no size (a FIFO here; a pipe
// or a device alike) is read at most a record's worth before it is
// streamed as a journal, so a 100 MB line through a FIFO gets the verdict
// the same bytes get in a regular file, in bounded memory (a breaker's
// verify of /dev/zero grew by 0.5 GB a second; of a 200 MB line through
// a pipe, 1.4 GB).
func TestVerifyPathPipe(t *testing.T) {
	dir := t.TempDir()
	content := append(bytes.Repeat([]byte("a"), 100<<20), '\n')
	file := filepath.Join(dir, "file.ndjson")
	if err := os.WriteFile(file, content, 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("no FIFO here:", err)
	}
	v := newValidator(t)
	want, err := v.VerifyPath(file)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err == nil {
			_, err = w.Write(content)
			w.Close()
		}
		done <- err
	}()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got, err := v.VerifyPath(fifo)
	runtime.ReadMemStats(&after)
	if werr := <-done; werr != nil {
		t.Fatal(werr)
	}
	if err != nil {
		t.Fatal(err)
	}
	if got.OK || want.OK || got.Kind != validate.KindJournal || got.Code != want.Code || got.Code != events.CorruptEntry ||
		got.Reason != want.Reason || got.At != fifo+":1" || want.At != file+":1" {
		t.Fatalf("through a FIFO: %+v\nin a file: %+v", got, want)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 128<<20 {
		t.Fatalf("verifying 100 MB through a FIFO allocated %d MB; it was 875 before the read was bounded, 68 after", alloc>>20)
	}
}

package regularfile_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roompub/roompub/internal/regularfile"
)

// TestOpenRefusesWhatIsNotARegularFile: a FIFO with no writer, a device, a
// directory and a symbolic link to a FIFO are refused at once with
// ErrNotRegular and their kind; a regular file (and a link to one) is
// read; a missing file keeps fs.ErrNotExist.
func TestOpenRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "journal.ndjson")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	for name, kind := range map[string]string{fifo: "a FIFO", link: "a FIFO", os.DevNull: "a device", dir: "a directory"} {
		done := make(chan error, 1)
		go func() { _, err := regularfile.ReadFile(name); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, regularfile.ErrNotRegular) || !strings.Contains(err.Error(), kind) || !strings.Contains(err.Error(), name) {
				t.Errorf("%s: %v, want ErrNotRegular naming the file and %q", name, err, kind)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: still blocked after 10 s", name)
		}
	}
	regular := filepath.Join(dir, "capsule.json")
	if err := os.WriteFile(regular, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rlink := filepath.Join(dir, "rlink")
	if err := os.Symlink(regular, rlink); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{regular, rlink} {
		if b, err := regularfile.ReadFile(name); err != nil || string(b) != "{}\n" {
			t.Errorf("%s: %q, %v", name, b, err)
		}
	}
	if _, err := regularfile.Open(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
}

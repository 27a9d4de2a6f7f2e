//go:build unix

package embedded_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/roompub/roompub/room/embedded"
)

// TestEmbeddedStoreLocked: a second embedded server on a store directory
// in use fails to start, naming the directory and the holder's pid,
// instead of writing over the first one's store (a breaker lost
// acknowledged messages that way); the first keeps serving, and once it
// has shut down the store is free again.
func TestEmbeddedStoreLocked(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	a, err := embedded.Start(embedded.Options{Listen: "127.0.0.1:-1", StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	b, err := embedded.Start(embedded.Options{Listen: "127.0.0.1:-1", StoreDir: dir})
	if err == nil {
		b.Shutdown()
		a.Shutdown()
		t.Fatal("a second server started on a store in use")
	}
	if !errors.Is(err, embedded.ErrServer) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "in use by another server (pid "+strconv.Itoa(os.Getpid())+")") {
		t.Fatalf("second server: %v; want ErrServer naming %s and pid %d", err, dir, os.Getpid())
	}
	if !a.NATSServer().JetStreamEnabled() || !a.NATSServer().Running() {
		t.Fatal("the first server stopped serving")
	}
	a.Shutdown()
	c, err := embedded.Start(embedded.Options{Listen: "127.0.0.1:-1", StoreDir: dir})
	if err != nil {
		t.Fatalf("the store is still locked after the first server shut down: %v", err)
	}
	c.Shutdown()
}

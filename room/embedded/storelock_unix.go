//go:build unix

package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// storeLockName is the file in a JetStream store directory that the
// embedded server holding the store keeps locked.
const storeLockName = "roompub.lock"

// lockStore takes an exclusive flock(2) on dir's lock file, so that a
// second embedded server on the same store fails to start instead of
// writing over the first one's files: two servers on one store lose
// acknowledged messages (nats-server does not guard its store against
// another process). The lock goes with the process, so a killed server
// leaves nothing to clean up. The returned file holds it until closed.
func lockStore(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("store directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, storeLockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store directory %s: lock: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := ""
		if b, rerr := os.ReadFile(path); rerr == nil && len(b) > 0 {
			holder = " (pid " + strings.TrimSpace(string(b)) + ")"
		}
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("store directory %s is in use by another server%s: two servers on one store lose data; stop it, or use another --store-dir", dir, holder)
		}
		return nil, fmt.Errorf("store directory %s: lock %s: %w", dir, path, err)
	}
	// Who holds it, for the message above; the lock, not this, decides.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

//go:build !unix

package embedded

import "os"

// lockStore does not lock on systems without flock(2): there, run one
// server per store directory yourself.
func lockStore(dir string) (*os.File, error) { return nil, nil }

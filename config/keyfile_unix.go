//go:build unix

package config

import "os"

// keyFileOpen reports whether mode lets group or others read, write or
// execute the file: ssh's rule for private keys.
func keyFileOpen(mode os.FileMode) bool { return mode.Perm()&0o077 != 0 }

//go:build !unix

package config

import "os"

// keyFileOpen is false where there are no Unix permissions to check (the
// mode Go reports there does not say who else may read the file).
func keyFileOpen(os.FileMode) bool { return false }

package config

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrOpenKeyFile is wrapped by ReadKeyFile and CheckKeyFile when a private
// key file is open to group or others.
var ErrOpenKeyFile = errors.New("a private key file must be accessible by its owner only")

// ReadKeyFile reads the private key file at path (a host or publisher key,
// an nkey seed, a creds file). Unless allowOpen, a file that group or
// others may read or write is refused as ssh refuses such a private key:
// the error wraps ErrOpenKeyFile, names the file and its mode, and says to
// run chmod 600. Other errors are the file system's. Where Unix
// permissions do not exist, nothing is checked.
func ReadKeyFile(path string, allowOpen bool) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// The mode of the file opened, not of a name that may change meanwhile.
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := checkKeyMode(path, fi.Mode(), allowOpen); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

// CheckKeyFile is ReadKeyFile's check for a private key file that another
// library reads (nats.go reads --nkey and --creds itself, and again on
// every reconnect). Errors are ReadKeyFile's.
func CheckKeyFile(path string, allowOpen bool) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	return checkKeyMode(path, fi.Mode(), allowOpen)
}

// checkKeyMode refuses mode for the key file at path when it is open to
// group or others (keyFileOpen), unless allowOpen.
func checkKeyMode(path string, mode os.FileMode, allowOpen bool) error {
	if allowOpen || !keyFileOpen(mode) {
		return nil
	}
	return fmt.Errorf("%s: permissions %04o are too open: %w (run chmod 600 %s, or pass --allow-open-key-file)",
		path, mode.Perm(), ErrOpenKeyFile, path)
}

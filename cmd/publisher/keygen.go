package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/internal/regularfile"
)

type keygenCmd struct {
	Out   string `name:"out" required:"" placeholder:"FILE" help:"File to write the private key to (PEM PKCS #8, mode 0600)."`
	Force bool   `name:"force" help:"Replace FILE if it exists."`
}

func (c *keygenCmd) Run(s *streams) error {
	key, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		return err
	}
	pem, err := key.MarshalPEM()
	if err != nil {
		return err
	}
	if err := writeSecretFile(c.Out, pem, c.Force); err != nil {
		return err
	}
	_, err = fmt.Fprintln(s.out, key.NodeID())
	return err
}

// writeSecretFile writes data to path with mode 0600. Without force it
// refuses to replace an existing file (fs.ErrExist); with force it replaces
// it atomically, so the file never holds a partial key or a looser mode,
// and only a regular file: a symlink, a device (a breaker's --force
// replaced /dev/full), a directory or a FIFO is left as it is (an error
// wrapping fs.ErrExist).
func writeSecretFile(path string, data []byte, force bool) error {
	if fi, err := os.Lstat(path); force && err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (%s); --force replaces only a regular file: %w", path, regularfile.Kind(fi.Mode()), fs.ErrExist)
	}
	if !force {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s already exists; use --force to replace it: %w", path, fs.ErrExist)
		}
		if err != nil {
			return err
		}
		return finishSecretFile(f, data, path)
	}
	// os.CreateTemp creates the file with mode 0600.
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	if err := finishSecretFile(f, data, f.Name()); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	return nil
}

// finishSecretFile writes data to f, syncs and closes it, and removes name
// if any step fails.
func finishSecretFile(f *os.File, data []byte, name string) error {
	_, err := f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(name)
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

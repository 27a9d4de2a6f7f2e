// Package regularfile opens the files roompub reads as input (journals,
// capsule.json, records, config files) only when they are regular files.
//
// Opening a FIFO for reading blocks until a writer opens it, and a device
// such as /dev/zero never ends: a shipment or a check given one would hang
// in a system call that no signal interrupts. Open asks the kernel not to
// block (O_NONBLOCK, which regular files ignore), checks the type of what
// it opened, and refuses anything else with ErrNotRegular.
package regularfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrNotRegular is wrapped by the error of Open and ReadFile for a path
// that names a directory, FIFO, device, socket or anything else that is
// not a regular file (a symbolic link is followed to what it names).
var ErrNotRegular = errors.New("not a regular file")

// Open opens name for reading if it is a regular file. Errors: those of
// os.OpenFile and Stat (fs.ErrNotExist and the like, as *fs.PathError),
// or one wrapping ErrNotRegular that names the file's kind.
func Open(name string) (*os.File, error) {
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: %w (%s)", name, ErrNotRegular, Kind(fi.Mode()))
	}
	return f, nil
}

// ReadFile is os.ReadFile for a regular file (Open's errors).
func ReadFile(name string) ([]byte, error) {
	f, err := Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// Kind names the type of a file mode for an error message: "a directory",
// "a FIFO", "a device", "a socket", "a symbolic link", "a regular file",
// or "an irregular file".
func Kind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "an irregular file"
}

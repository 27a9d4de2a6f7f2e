package node

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// StaleState is a stream of a JetStream store whose state file nats-server
// would not use at start: it then rebuilds the stream's state from the
// block files, and cuts each block at its first record that fails its
// checksum or its length check, on disk (fd.Truncate), dropping every
// message from there to the block's end (nats-server v2.15.2,
// fileStore.recoverFullState, recoverMsgs and
// msgBlock.rebuildStateFromBufLocked; docs/operations.md, "Backup and
// restore").
type StaleState struct {
	// Account is the JetStream account's directory ("$G" without
	// accounts); Stream the stream's name.
	Account string `json:"account"`
	Stream  string `json:"stream"`
	// Reason says why: the state file is missing, or older than a block.
	Reason string `json:"reason"`
}

// String is "stream <name>: <reason>".
func (s StaleState) String() string { return "stream " + s.Stream + ": " + s.Reason }

// stateFile is nats-server's state file of a stream, in its msgs
// directory (streamStreamStateFile); blockSuffix ends its block files.
const (
	stateFile   = "index.db"
	blockSuffix = ".blk"
)

// StaleStates lists the streams of the JetStream store under storeDir
// (embedded.Options.StoreDir) whose state an embedded server started on it
// would rebuild from the block files: a stream with a non-empty block file
// and no state file msgs/index.db (a crash before the server wrote it, or
// a state file the server found damaged and removed), or a state file
// older (mtime) than a block file (a crash after appends the state file
// does not hold: the server, comparing the last block's last checksum
// with the one the state file records, rebuilds). On a clean stop the
// server writes the state file after the blocks, so a fresh store has
// none. A state file the server would find damaged (checksum) is not seen
// here, nor a block cut on a file system whose mtimes are coarser than
// the writes. An empty or missing store has none.
func StaleStates(storeDir string) ([]StaleState, error) {
	dirs, err := filepath.Glob(filepath.Join(storeDir, "jetstream", "*", "streams", "*", "msgs"))
	if err != nil {
		return nil, err
	}
	var out []StaleState
	for _, dir := range dirs {
		reason, err := staleReason(dir)
		if err != nil {
			return nil, err
		}
		if reason != "" {
			stream := filepath.Dir(dir)
			out = append(out, StaleState{Account: filepath.Base(filepath.Dir(filepath.Dir(stream))), Stream: filepath.Base(stream), Reason: reason})
		}
	}
	return out, nil
}

// staleReason says why the stream state in msgs directory dir is stale,
// "" when it is not.
func staleReason(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var newest string
	var newestAt time.Time
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), blockSuffix) {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			return "", err
		}
		if fi.Size() > 0 && (newest == "" || fi.ModTime().After(newestAt)) {
			newest, newestAt = e.Name(), fi.ModTime()
		}
	}
	if newest == "" {
		return "", nil // nothing to rebuild from, nothing to cut
	}
	fi, err := os.Stat(filepath.Join(dir, stateFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "its state file msgs/" + stateFile + " is missing", nil
	case err != nil:
		return "", err
	case fi.ModTime().Before(newestAt):
		return fmt.Sprintf("its state file msgs/%s (%s) is older than block file %s (%s)", stateFile,
			fi.ModTime().UTC().Format(time.RFC3339Nano), newest, newestAt.UTC().Format(time.RFC3339Nano)), nil
	}
	return "", nil
}

// CutBlock is a block file of a stream that an embedded server, rebuilding
// the stream's state, cut short or removed.
type CutBlock struct {
	Account string `json:"account"`
	Stream  string `json:"stream"`
	// Block is the file's name (1.blk); Bytes its size before, Left after
	// (0 when removed).
	Block string `json:"block"`
	Bytes int64  `json:"bytes"`
	Left  int64  `json:"left"`
}

// String is "stream <name>: block <file> cut from <bytes> to <left> bytes".
func (c CutBlock) String() string {
	return fmt.Sprintf("stream %s: block %s cut from %d to %d bytes", c.Stream, c.Block, c.Bytes, c.Left)
}

// cutBlocks compares the block files of the stale streams in store with
// those of its copy, which a server ran on.
func cutBlocks(store, copied string, stale []StaleState) []CutBlock {
	var out []CutBlock
	for _, s := range stale {
		rel := filepath.Join("jetstream", s.Account, "streams", s.Stream, "msgs")
		entries, err := os.ReadDir(filepath.Join(store, rel))
		if err != nil {
			continue
		}
		for _, e := range entries {
			if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), blockSuffix) {
				continue
			}
			before, err := e.Info()
			if err != nil {
				continue
			}
			var left int64
			if after, err := os.Stat(filepath.Join(copied, rel, e.Name())); err == nil {
				left = after.Size()
			}
			if left < before.Size() {
				out = append(out, CutBlock{Account: s.Account, Stream: s.Stream, Block: e.Name(), Bytes: before.Size(), Left: left})
			}
		}
	}
	return out
}

// copyStore copies directory src into a new directory made under parent,
// and returns the copy's path. Only directories and regular files are
// copied (a JetStream store holds nothing else); anything else fails the
// copy, which is then removed.
func copyStore(src, parent string) (dst string, err error) {
	if err := os.MkdirAll(parent, 0o750); err != nil {
		return "", err
	}
	dst, err = os.MkdirTemp(parent, ".roompub-store-copy-")
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dst)
			dst = ""
		}
	}()
	err = filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			if rel == "." {
				return nil
			}
			return os.Mkdir(to, 0o750)
		case d.Type().IsRegular():
			return copyFile(path, to)
		}
		return fmt.Errorf("%s is neither a directory nor a regular file", path)
	})
	if err != nil {
		return "", fmt.Errorf("copy the store %s into %s: %w", src, parent, err)
	}
	return dst, nil
}

// copyFile copies regular file src to a new file dst (mode 0600).
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

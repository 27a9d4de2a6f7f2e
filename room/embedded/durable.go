package embedded

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// NameSyncer returns a function that makes the names of stream's files
// durable, which nats-server leaves to chance: it fsyncs a message block
// before it acknowledges what the block holds (sync_interval: always), but
// never the directories it creates, nor msgs/ when it starts a new block
// file there. After a power loss, a filesystem that keeps only what was
// fsynced (POSIX's rule) can then drop the block, or the whole stream,
// with messages it acknowledged (docs/reliability.md, "What nats-server
// does").
//
// The function fsyncs, on its first call, every directory from the store
// directory's parent down to the stream's msgs/, and on later calls msgs/ whenever
// its modification time moved: a new block file. A call costs one stat
// when nothing changed. Callers run it after the server acknowledged
// appends and before they report them stored (ingest.GateOptions.Durable).
// It returns an error when the stream's directory cannot be found or a
// directory cannot be fsynced; it is safe for concurrent use.
func (e *Server) NameSyncer(stream string) func() error {
	d := &nameSync{root: e.dir, stream: stream}
	return d.sync
}

// racyWindow is how recent a directory's modification time may be and
// still not count as synced: a file created in the same clock tick as
// the last look leaves the time as it was.
const racyWindow = 100 * time.Millisecond

type nameSync struct {
	root, stream string
	mu           sync.Mutex
	msgs         string    // the stream's msgs/ directory, once found
	synced       time.Time // msgs/'s modification time at its last fsync, once older than racyWindow
}

func (d *nameSync) sync() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.msgs == "" {
		if err := d.syncTree(); err != nil {
			return err
		}
	}
	fi, err := os.Stat(d.msgs)
	if err != nil {
		d.msgs = "" // the stream was removed or made anew: find it again
		return fmt.Errorf("stream %s: %w", d.stream, err)
	}
	m := fi.ModTime()
	if m.Equal(d.synced) {
		return nil
	}
	if err := syncDir(d.msgs); err != nil {
		return err
	}
	if time.Since(m) > racyWindow {
		d.synced = m
	}
	return nil
}

// syncTree finds the stream's directory (jetstream/<account>/streams/<stream>)
// and fsyncs every directory from the store down to its msgs/, deepest
// first, so that each name is durable before the one that leads to it.
func (d *nameSync) syncTree() error {
	found, err := filepath.Glob(filepath.Join(d.root, "jetstream", "*", "streams", d.stream, "msgs"))
	if err != nil || len(found) != 1 {
		return fmt.Errorf("stream %s: %d message directories under %s (%v)", d.stream, len(found), d.root, err)
	}
	for dir := found[0]; ; dir = filepath.Dir(dir) {
		if err := syncDir(dir); err != nil {
			return err
		}
		if dir == filepath.Clean(d.root) || dir == filepath.Dir(dir) {
			break
		}
	}
	// The store directory's own name, which serve may have made.
	if err := syncDir(filepath.Dir(filepath.Clean(d.root))); err != nil {
		return err
	}
	d.msgs, d.synced = found[0], time.Time{}
	return nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

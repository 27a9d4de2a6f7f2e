package node

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/room/embedded"
)

// ErrStaleState is wrapped by OnStore's error when an embedded server
// started on the store would rebuild a stream's state (StaleStates), and
// o.CopyDir does not let it work on a copy.
var ErrStaleState = errors.New("the embedded server would rebuild a stream's state from its block files, cutting any damaged block")

// StoreOptions say how OnStore reaches a store.
type StoreOptions struct {
	// Server is the embedded server's options: Server.StoreDir is the store
	// (default ./data, as embedded.Start's), Server.Listen defaults to a
	// free loopback port.
	Server embedded.Options
	// CopyDir, when set, is for a command that only reads (backup): when
	// the server would rebuild a stream's state at start (StaleStates),
	// OnStore copies the store into a new directory under CopyDir, runs
	// the server on the copy and removes it after, so the store itself is
	// not written (but for its lock file, which holds the command's pid).
	// The copy needs as much free space there as the store's size. Unset
	// (restore, which writes), such a store is refused (ErrStaleState)
	// before the server starts.
	CopyDir string
}

// StoreRun is what OnStore found and did.
type StoreRun struct {
	// Stale are the streams whose state the server would rebuild.
	Stale []StaleState
	// Copy is the copy of the store the server ran on, removed when
	// OnStore returns; "" when it ran on the store itself.
	Copy string
	// Cut are the block files of the Stale streams the server cut or
	// removed in the copy as it rebuilt their state, as found once f
	// returned: what the store itself would have lost.
	Cut []CutBlock
}

// OnStore starts the embedded server on the store directory
// o.Server.StoreDir without serving anything (no stream is created,
// checked or marked), runs f on a connection to it, and shuts the server
// down: how publisher backup and restore reach the store of an embedded
// deployment while serve is stopped (docs/operations.md, "Backup and
// restore"). A store whose streams' state the server would rebuild is
// copied first, or refused (StoreOptions.CopyDir). The store's lock,
// held throughout, makes it fail while a serve holds the store. It
// returns f's error, or why the server did not start.
func OnStore(o StoreOptions, f func(*nats.Conn) error) (StoreRun, error) {
	so := o.Server
	if so.Listen == "" {
		so.Listen = "127.0.0.1:-1"
	}
	if so.StoreDir == "" {
		so.StoreDir = "./data"
	}
	store := so.StoreDir
	stale, err := StaleStates(store)
	if err != nil {
		return StoreRun{}, fmt.Errorf("store directory %s: %w", store, err)
	}
	run := StoreRun{Stale: stale}
	if len(stale) > 0 {
		names := make([]string, len(stale))
		for i, s := range stale {
			names[i] = s.String()
		}
		if o.CopyDir == "" {
			return run, fmt.Errorf("%w: store directory %s: %s; back it up first (publisher backup --store-dir works on a copy of the store)",
				ErrStaleState, store, strings.Join(names, "; "))
		}
		unlock, err := embedded.LockStore(store)
		if err != nil {
			return run, err
		}
		defer unlock()
		if run.Copy, err = copyStore(store, o.CopyDir); err != nil {
			return run, err
		}
		defer os.RemoveAll(run.Copy)
		so.StoreDir = run.Copy
	}
	srv, err := embedded.Start(so)
	if err != nil {
		return run, err
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL(), nats.Name("roompub-publisher-store"))
	if err != nil {
		return run, fmt.Errorf("connect to the embedded server on %s: %w", so.StoreDir, err)
	}
	defer nc.Close()
	err = f(nc)
	if run.Copy != "" {
		run.Cut = cutBlocks(store, run.Copy, stale)
	}
	return run, err
}

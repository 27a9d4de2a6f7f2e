// Package tilesource reads roompub's logs from JetStream as tiles.Source
// values, so package tiles can serve them as C2SP tlog-tiles
// (docs/tiles.md, "The serve endpoint"): the deployment log (Deployment)
// and each room's log (Rooms, Room).
//
// It reads with batch direct gets (jsapi.DirectBatch, ADR-31) and creates
// no consumer. It decides which messages are a room's leaves and which
// checkpoints count by the checkpoint package's rules (BatchCollector,
// Parse, ParseDeployment, Ledger), never by rules of its own, and serves
// a checkpoint only once the entries as read have its root at its size.
//
// Memory does not grow with the logs' entries beyond a sparse index: the
// stream position of every 256th entry (TileWidth), 24 bytes per 256
// entries, built as the log is read, from which Entries starts a tile's
// read. The rest of a log's state is the checkpoint rules' (a
// checkpoint.Ledger on a LeanTree: O(log n) hashes plus 32 bytes per
// entry past the latest matching checkpoint, at most
// checkpoint.DefaultLeafWindow and a chunk of them, the older ones in a
// file in Options.LeafDir) and the atomic batch being read.
//
// tilesource imports checkpoint, room, room/internal/jsapi, tiles and
// nats.go; never the NATS server (test/layout).
package tilesource

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/jsapi"
	"github.com/roompub/roompub/tiles"
)

// ErrNoCheckpoint is returned by Checkpoint (wrapped) while a log has no
// checkpoint that verifies and that the entries as read match: nothing
// can be served yet.
var ErrNoCheckpoint = errors.New("tilesource: no verified checkpoint matches the log yet")

// ErrClosed is returned (wrapped) by a log's reads after Rooms.Close or
// Deployment.Close.
var ErrClosed = errors.New("tilesource: the log was closed")

// ErrShort is returned by Entries (wrapped) when the stream gave fewer
// entries than the index says it holds: messages the log served before are
// gone (a purged or lost stream).
var ErrShort = errors.New("tilesource: the stream holds fewer entries than it did")

// DefaultMaxAge is how long a log's checkpoint, once read, is served
// before the stream is read again: C2SP tlog-tiles lets a checkpoint be a
// few seconds old, and one read per second bounds what clients polling
// the checkpoint cost the stream.
const DefaultMaxAge = time.Second

// Options configure the sources. Trust is required.
type Options struct {
	// Stream and Subjects name the room stream (default room.DefaultStream
	// and the default prefix); Deployment names the deployment log's
	// stream and subjects (the zero value: room.DeploymentLog's defaults).
	Stream     string
	Subjects   room.Subjects
	Deployment room.DeploymentLog
	// Placement, on a deployment of several partitions, says which room
	// stream holds a room (docs/design.md, "Partitions"); nil: every room
	// is on Stream.
	Placement *room.Placement
	// Trust names the publishers whose attestations admit a room's
	// messages and whose checkpoints count (checkpoint.NewTrust of serve's
	// key and --trusted-publisher). The deployment log needs its origin
	// (Trust.WithOrigin): ParseDeployment checks against it; with one, a
	// room's checkpoint is served only under checkpoint.RoomOrigin of it,
	// the name a tlog client verifies.
	Trust *checkpoint.Trust
	// Timeout bounds each direct get's reply; default room.DefaultTimeout.
	Timeout time.Duration
	// MaxAge is how long a checkpoint is served before the stream is read
	// again; default DefaultMaxAge.
	MaxAge time.Duration
	// LeafDir is where a log keeps its leaf hashes past its latest
	// matching checkpoint once they are more than
	// checkpoint.DefaultLeafWindow (a log whose checkpoints stopped):
	// an unlinked file per log, made only then, 32 bytes a leaf
	// (checkpoint.LeafBounds); "" is os.TempDir(). Close removes them.
	LeafDir string
}

func (o *Options) defaults() error {
	if o.Trust == nil {
		return errors.New("tilesource: Options.Trust is required")
	}
	if o.Stream == "" {
		o.Stream = room.DefaultStream
	}
	if o.Timeout <= 0 {
		o.Timeout = room.DefaultTimeout
	}
	if o.MaxAge <= 0 {
		o.MaxAge = DefaultMaxAge
	}
	return nil
}

// newLedger returns a log's ledger, its leaves past the latest matching
// checkpoint bounded in memory (Options.LeafDir).
func newLedger(o *Options) *checkpoint.Ledger {
	l, err := checkpoint.NewBoundedLedger(checkpoint.LeafBounds{Dir: o.LeafDir})
	if err != nil { // not reached: the default chunk is a power of two
		return checkpoint.NewLedger()
	}
	return l
}

// closeLedger closes *l, the ledger of a log whose scanMu the caller
// holds, and leaves nil there: the log's later scans fail ErrClosed.
func closeLedger(l **checkpoint.Ledger) error {
	if *l == nil {
		return nil
	}
	err := (*l).Close()
	*l = nil
	return err
}

// Reads are batch direct gets of pullMessages messages and at most
// pullBytes (or twice the largest payload the server takes, as one
// message is always sent whole).
const (
	pullMessages = 1024
	pullBytes    = 4 << 20
)

// mark is where the read of a tile starts: the stream seq of a message,
// and what a read from there needs to know of what came before.
type mark struct {
	seq   uint64 // where to read from
	leaf  uint64 // the index of the first entry read from there
	execs uint64 // room logs: messages on the room's exec subject before seq
}

// logState is what Deployment and Room share: the served checkpoint and
// the sparse index, under mu; the reads of the stream, one at a time,
// under scanMu.
type logState struct {
	nc     *nats.Conn
	stream string
	o      *Options

	scanMu sync.Mutex // held while the stream is read; guards next and the log's scan state
	next   uint64     // the next stream seq to read

	mu    sync.Mutex
	note  []byte    // the served checkpoint, as stored
	size  int64     // its size
	index []mark    // index[k]: where entry k*TileWidth's read starts
	at    time.Time // when the stream was last read to its end
}

// served returns the checkpoint, if the stream was read within MaxAge.
func (l *logState) served() (note []byte, size int64, fresh bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.note, l.size, !l.at.IsZero() && time.Since(l.at) < l.o.MaxAge
}

// checkpoint returns the served checkpoint, reading the stream with scan
// first when the last read is older than MaxAge; one read at a time, the
// others waiting for it.
func (l *logState) checkpoint(ctx context.Context, scan func(ctx context.Context) error) ([]byte, int64, error) {
	note, size, fresh := l.served()
	if !fresh {
		l.scanMu.Lock()
		if note, size, fresh = l.served(); !fresh {
			err := scan(ctx)
			if err == nil {
				l.mu.Lock()
				l.at = time.Now()
				l.mu.Unlock()
			}
			note, size, _ = l.served()
			if err != nil {
				l.scanMu.Unlock()
				return nil, 0, err
			}
		}
		l.scanMu.Unlock()
	}
	if note == nil {
		return nil, 0, ErrNoCheckpoint
	}
	return note, size, nil
}

// serve makes note, at size, the served checkpoint.
func (l *logState) serve(note []byte, size uint64) {
	l.mu.Lock()
	l.note, l.size = note, int64(size)
	l.mu.Unlock()
}

// indexAt records where entry k*TileWidth's read starts, k = len(index).
func (l *logState) indexAt(m mark) {
	l.mu.Lock()
	l.index = append(l.index, m)
	l.mu.Unlock()
}

// start returns where the read of entry i starts; false when the log has
// not been read that far.
func (l *logState) start(i int64) (mark, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := i / tiles.TileWidth
	if i < 0 || k >= int64(len(l.index)) {
		return mark{}, false
	}
	return l.index[k], true
}

// read reads the messages on filter from stream seq from on, in stream
// order, batch at a time, handing each to each until it returns false or
// the stream has none left.
func (l *logState) read(ctx context.Context, filter string, from uint64, batch int, each func(m jsapi.Msg) bool) error {
	for {
		msgs, err := jsapi.DirectBatch(ctx, l.nc, l.stream, jsapi.BatchRequest{Seq: from, NextBySubj: filter, Batch: batch,
			MaxBytes: max(pullBytes, 2*int(l.nc.MaxPayload()))}, l.o.Timeout)
		if err != nil {
			return fmt.Errorf("tilesource: read %s from seq %d: %w", l.stream, from, err)
		}
		if len(msgs) == 0 {
			return nil
		}
		for _, m := range msgs {
			if !each(m) {
				return nil
			}
		}
		last := msgs[len(msgs)-1]
		from = last.Seq + 1
		if last.Pending == 0 {
			return nil
		}
	}
}

package tilesource

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/room/internal/jsapi"
)

// Deployment is the deployment log (docs/witnesses.md, "The deployment
// log") as a tiles.Source: its entries are the messages on the log's
// entry subject, in stream order, each a room checkpoint note as stored
// (leaf hash checkpoint.EntryLeaf); its checkpoint is the latest message
// on the log's checkpoint subject that checkpoint.ParseDeployment verifies
// and that the entries as read match (checkpoint.Ledger's rules: its root
// at its size, consistent with the one before), served whole, witness
// cosignature lines included, so a client with a witness policy can check
// them. Memory: 24 bytes per 256 entries, plus 32 bytes per entry past
// that checkpoint up to checkpoint.DefaultLeafWindow and a chunk (the
// others in a file, Options.LeafDir). Safe for concurrent use.
type Deployment struct {
	logState
	ledger  *checkpoint.Ledger // scanMu
	entries uint64             // entries read; scanMu
}

// NewDeployment returns the deployment log of o.Deployment's stream, read
// through nc. Errors: Options.Trust missing, or without an origin
// (checkpoint.ErrNoOrigin).
func NewDeployment(nc *nats.Conn, o Options) (*Deployment, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if o.Trust.Origin() == "" {
		return nil, fmt.Errorf("tilesource: the deployment log: %w", checkpoint.ErrNoOrigin)
	}
	d := &Deployment{ledger: newLedger(&o)}
	d.logState = logState{nc: nc, stream: o.Deployment.StreamName(), o: &o, next: 1}
	return d, nil
}

// Checkpoint implements tiles.Source: the latest matching checkpoint and
// its size, in entries, reading what the stream holds past the last read
// when that is older than Options.MaxAge. Errors: ErrNoCheckpoint
// (wrapped) while none matches, or the read's.
func (d *Deployment) Checkpoint(ctx context.Context) ([]byte, int64, error) {
	return d.checkpoint(ctx, d.scan)
}

// Close removes the log's file of leaf hashes (Options.LeafDir) once a
// read under way ends; later calls of Checkpoint fail ErrClosed.
func (d *Deployment) Close() error {
	d.scanMu.Lock()
	defer d.scanMu.Unlock()
	return closeLedger(&d.ledger)
}

// scan reads the log from where the last scan stopped. scanMu is held.
func (d *Deployment) scan(ctx context.Context) error {
	if d.ledger == nil {
		return fmt.Errorf("the deployment log: %w", ErrClosed)
	}
	dl := d.o.Deployment
	return d.read(ctx, dl.Subjects().All(), d.next, pullMessages, func(m jsapi.Msg) bool {
		d.next = m.Seq + 1
		switch m.Subject {
		case dl.Entry():
			if d.entries%tilesWidth == 0 {
				d.indexAt(mark{seq: m.Seq, leaf: d.entries})
			}
			d.ledger.Append(checkpoint.EntryLeaf(m.Data))
			d.entries++
		case dl.Checkpoint():
			ck, err := checkpoint.ParseDeployment(m.Data, d.o.Trust)
			if err != nil || d.ledger.Check(ck) != nil {
				return true // not the publisher's, or the entries contradict it: never served
			}
			if err := d.ledger.Accept(ck, m.Seq); err != nil {
				return true // not reached: Check passed
			}
			d.serve(m.Data, ck.Size)
		}
		return true
	})
}

// Entries implements tiles.Source: the entries [start, end), read from
// the index's mark at or before start. Errors: ErrShort (wrapped), or the
// read's.
func (d *Deployment) Entries(ctx context.Context, start, end int64) ([][]byte, error) {
	mk, ok := d.start(start)
	if !ok || end < start {
		return nil, fmt.Errorf("tilesource: entries [%d, %d) are beyond the log as read", start, end)
	}
	out := make([][]byte, 0, end-start)
	if end == start {
		return out, nil
	}
	i := int64(mk.leaf)
	err := d.read(ctx, d.o.Deployment.Entry(), mk.seq, int(min(end-int64(mk.leaf), pullMessages)), func(m jsapi.Msg) bool {
		if i >= start {
			out = append(out, m.Data)
		}
		i++
		return i < end
	})
	if err != nil {
		return nil, err
	}
	if int64(len(out)) != end-start {
		return nil, fmt.Errorf("%w: entries [%d, %d) of the deployment log: %d read", ErrShort, start, end, len(out))
	}
	return out, nil
}

package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/ingest"
)

// Rooms found contradicting their checkpoint, remembered across starts
// (docs/reliability.md, "When the store loses what it acknowledged"). A
// checkpointer resumed from a room's latest checkpoint does not read what
// precedes it, so a message the store lost before it (a damaged block
// whose state file was kept) is found only by a read from the room's
// first message (--checkpoint-full-read). What such a read finds is kept
// until a later read finds the room matching again: a normal start reads
// those rooms whole again (checkpointer.Options.ReadWhole), /healthz names
// them from its first answer, and no checkpoint is written for them.

// contradictedMemory keeps, per room stream, the rooms found
// contradicting their checkpoint and why.
type contradictedMemory interface {
	// load returns the rooms and reasons kept (empty when none).
	load(ctx context.Context) (map[string]string, error)
	// apply records changes: a reason keeps the room, "" forgets it.
	apply(ctx context.Context, changes map[string]string) error
	// where names the place in messages.
	where() string
}

// contradictedRecord is what a contradictedMemory holds, as JSON.
type contradictedRecord struct {
	Stream string            `json:"stream"`
	Rooms  map[string]string `json:"rooms"` // room id -> reason
}

// contradictedFile is the memory of an embedded server's stream: a file in
// its store directory, beside the stream mark, written only by the
// process that holds the store's lock.
type contradictedFile struct{ path, stream string }

// contradictedFileOf is the memory of stream name in storeDir:
// roompub-contradicted-<name>.json.
func contradictedFileOf(storeDir, name string) contradictedFile {
	return contradictedFile{path: filepath.Join(storeDir, "roompub-contradicted-"+name+".json"), stream: name}
}

func (f contradictedFile) where() string { return f.path }

func (f contradictedFile) load(context.Context) (map[string]string, error) {
	data, err := os.ReadFile(f.path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("rooms found contradicted %s: %w", f.path, err)
	}
	return decodeContradicted(data, f.stream, f.path)
}

func (f contradictedFile) apply(ctx context.Context, changes map[string]string) error {
	rooms, err := f.load(ctx)
	if err != nil {
		return err
	}
	merge(rooms, changes)
	if len(rooms) == 0 {
		if err := os.Remove(f.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("rooms found contradicted %s: %w", f.path, err)
		}
		return nil
	}
	data, err := json.Marshal(contradictedRecord{Stream: f.stream, Rooms: rooms})
	if err != nil {
		return err
	}
	if err := writeAtomic(f.path, ".roompub-contradicted-*.tmp", append(data, '\n')); err != nil {
		return fmt.Errorf("rooms found contradicted %s: %w", f.path, err)
	}
	return nil
}

// contradictedKey is the memory of a stream on a server of serve's own: a
// key of the streams bucket (<stream>.contradicted), which every publisher
// of the stream shares: updates are compare-and-set, merged.
type contradictedKey struct {
	kv     jetstream.KeyValue
	key    string
	stream string
}

func (k contradictedKey) where() string { return "key " + k.key + " of bucket " + k.kv.Bucket() }

func (k contradictedKey) load(ctx context.Context) (map[string]string, error) {
	rooms, _, err := k.get(ctx)
	return rooms, err
}

func (k contradictedKey) get(ctx context.Context) (map[string]string, uint64, error) {
	e, err := k.kv.Get(ctx, k.key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return map[string]string{}, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("rooms found contradicted (%s): %w", k.where(), err)
	}
	rooms, err := decodeContradicted(e.Value(), k.stream, k.where())
	return rooms, e.Revision(), err
}

func (k contradictedKey) apply(ctx context.Context, changes map[string]string) error {
	return updateKey(ctx, k.kv, k.key, "rooms found contradicted ("+k.where()+")", func() ([]byte, uint64, bool, error) {
		rooms, rev, err := k.get(ctx)
		if err != nil {
			return nil, 0, false, err
		}
		merge(rooms, changes)
		data, err := json.Marshal(contradictedRecord{Stream: k.stream, Rooms: rooms})
		return data, rev, err == nil, err
	})
}

// decodeContradicted reads a contradictedRecord of stream; where names it
// in errors.
func decodeContradicted(data []byte, stream, where string) (map[string]string, error) {
	var r contradictedRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("rooms found contradicted %s: %w", where, err)
	}
	if r.Stream != stream {
		return nil, fmt.Errorf("rooms found contradicted %s: kept for stream %q, serve's is %q", where, r.Stream, stream)
	}
	if r.Rooms == nil {
		r.Rooms = map[string]string{}
	}
	return r.Rooms, nil
}

// merge applies changes to rooms: a reason keeps the room, "" forgets it.
func merge(rooms, changes map[string]string) {
	for id, why := range changes {
		if why == "" {
			delete(rooms, id)
		} else {
			rooms[id] = why
		}
	}
}

// contradictionRelay hands the checkpointer's word on rooms whose latest
// checkpoint contradicts their messages to the gate
// (ingest.Gate.NoteContradiction), and to the memory kept across starts
// (persist). What comes before the gate exists (the checkpointer starts
// first, and the memory's rooms before it) is kept and handed over by
// attach.
type contradictionRelay struct {
	mu      sync.Mutex
	gate    *ingest.Gate
	pending map[string]string
	// The memory's changes not yet applied, and persist's wake-up.
	mem     contradictedMemory // nil: nothing kept
	changes map[string]string
	kick    chan struct{}
	// found, when set, is called (not blocking) for a room newly found
	// contradicted once the gate knows it: serve surveys again, which
	// reads the room's loss notices (/healthz leaves out what they cover).
	found func()
}

func newContradictionRelay(mem contradictedMemory) *contradictionRelay {
	return &contradictionRelay{pending: map[string]string{}, mem: mem, changes: map[string]string{}, kick: make(chan struct{}, 1)}
}

// remembered loads the rooms the memory keeps, hands them to the gate as
// found (with what was found then), and returns them sorted: the rooms
// the checkpointer reads whole.
func (r *contradictionRelay) remembered(ctx context.Context) ([]string, error) {
	if r.mem == nil {
		return nil, nil
	}
	rooms, err := r.mem.load(ctx)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, why := range rooms {
		r.pending[id] = "an earlier run found: " + why
	}
	return slices.Sorted(maps.Keys(rooms)), nil
}

// note is the checkpointer's OnContradiction: it must not block.
func (r *contradictionRelay) note(roomID, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mem != nil {
		r.changes[roomID] = reason
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
	if r.gate != nil {
		r.gate.NoteContradiction(roomID, reason)
		if reason != "" && r.found != nil {
			r.found()
		}
		return
	}
	r.pending[roomID] = reason
}

func (r *contradictionRelay) attach(g *ingest.Gate) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gate = g
	for id, why := range r.pending {
		if why != "" {
			g.NoteContradiction(id, why)
		}
	}
	r.pending = nil
}

// persist applies the noted changes to the memory until ctx ends, and
// once more then (within 5 s): a change that could not be applied is
// logged and tried again at the next one, a later change of the same room
// winning.
func (r *contradictionRelay) persist(ctx context.Context, log *zap.Logger) {
	if r.mem == nil {
		return
	}
	flush := func(ctx context.Context) {
		r.mu.Lock()
		changes := r.changes
		r.changes = map[string]string{}
		r.mu.Unlock()
		if len(changes) == 0 {
			return
		}
		actx, cancel := context.WithTimeout(ctx, room.DefaultTimeout)
		err := r.mem.apply(actx, changes)
		cancel()
		if err == nil {
			return
		}
		log.Warn("rooms found contradicting their checkpoint: not kept for the next start", zap.String("where", r.mem.where()), zap.Error(err))
		r.mu.Lock()
		for id, why := range changes {
			if _, newer := r.changes[id]; !newer {
				r.changes[id] = why
			}
		}
		r.mu.Unlock()
	}
	for {
		select {
		case <-r.kick:
			flush(ctx)
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			flush(fctx)
			cancel()
			return
		}
	}
}

// onFound sets what note calls for a room newly found contradicted.
func (r *contradictionRelay) onFound(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.found = f
}

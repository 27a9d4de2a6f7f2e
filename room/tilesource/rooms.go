package tilesource

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/jsapi"
	"github.com/roompub/roompub/tiles"
)

const tilesWidth = tiles.TileWidth

// Rooms holds the room logs of one room stream, each made on first
// request (Room) and kept: one Room's state per room asked for that has
// a matching checkpoint. A name that is no room, or a room with no such
// checkpoint yet, costs one direct get and keeps nothing. Safe for
// concurrent use.
type Rooms struct {
	nc *nats.Conn
	o  Options

	mu     sync.Mutex
	rooms  map[string]*Room
	closed bool
}

// Close removes the rooms' files of leaf hashes (Options.LeafDir), each
// once a read under way of its room ends; later calls of Room, Resolve
// and a kept Room's Checkpoint fail ErrClosed. It returns the files'
// errors.
func (rs *Rooms) Close() error {
	rs.mu.Lock()
	rooms := rs.rooms
	rs.rooms, rs.closed = map[string]*Room{}, true
	rs.mu.Unlock()
	var errs []error
	for _, r := range rooms {
		errs = append(errs, r.close())
	}
	return errors.Join(errs...)
}

// NewRooms returns the room logs of o.Stream, read through nc. Errors:
// Options.Trust missing.
func NewRooms(nc *nats.Conn, o Options) (*Rooms, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	return &Rooms{nc: nc, o: o, rooms: map[string]*Room{}}, nil
}

// Resolve is a tiles.Resolver: segment is checkpoint.RoomSegment of a
// room id, as a request spelled it. An error wrapping tiles.ErrUnknownLog
// (404) for a segment RoomSegment cannot have written, a room whose
// checkpoint subject holds no message, or one with no checkpoint that
// verifies and matches its messages; a read's error otherwise (500).
func (rs *Rooms) Resolve(ctx context.Context, segment string) (tiles.Source, error) {
	roomID, ok := checkpoint.ParseRoomSegment(segment)
	if !ok {
		return nil, fmt.Errorf("%w: %q names no room", tiles.ErrUnknownLog, segment)
	}
	return rs.Room(ctx, roomID)
}

// Room returns roomID's log, read up to its latest matching checkpoint.
// Errors as Resolve's.
func (rs *Rooms) Room(ctx context.Context, roomID string) (*Room, error) {
	rs.mu.Lock()
	r, closed := rs.rooms[roomID], rs.closed
	rs.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if r == nil {
		if err := rs.o.Subjects.CheckRoom(roomID); err != nil {
			return nil, fmt.Errorf("%w: %v", tiles.ErrUnknownLog, err)
		}
		ro := rs.o // the room's partition
		if ro.Placement != nil {
			q, ok, err := ro.Placement.Room(ctx, roomID)
			if err != nil {
				return nil, fmt.Errorf("tilesource: look up room %q: %w", roomID, err)
			}
			if !ok {
				return nil, fmt.Errorf("%w: room %q is placed on no partition", tiles.ErrUnknownLog, roomID)
			}
			ro.Stream, ro.Subjects = q.Stream, q.Subjects
		}
		// One direct get tells a room that never had a checkpoint, so a
		// request for any name costs no scan and keeps nothing.
		probe, err := jsapi.DirectBatch(ctx, rs.nc, ro.Stream, jsapi.BatchRequest{Seq: 1, NextBySubj: ro.Subjects.Checkpoint(roomID), Batch: 1}, ro.Timeout)
		if err != nil {
			return nil, fmt.Errorf("tilesource: look up room %q: %w", roomID, err)
		}
		if len(probe) == 0 {
			return nil, fmt.Errorf("%w: room %q has no checkpoint", tiles.ErrUnknownLog, roomID)
		}
		rs.mu.Lock()
		if rs.closed {
			rs.mu.Unlock()
			return nil, ErrClosed
		}
		if r = rs.rooms[roomID]; r == nil {
			r = newRoom(rs.nc, &ro, roomID)
			rs.rooms[roomID] = r
		}
		rs.mu.Unlock()
	}
	// Within MaxAge of the last read this reads nothing; a room kept
	// after a failed first read is read again here.
	if _, _, err := r.Checkpoint(ctx); err != nil {
		if errors.Is(err, ErrNoCheckpoint) {
			rs.mu.Lock()
			dropped := rs.rooms[roomID] == r
			if dropped {
				delete(rs.rooms, roomID)
			}
			rs.mu.Unlock()
			if dropped {
				_ = r.close() // its file, if its leaves spilled: nothing is kept of it
			}
			return nil, fmt.Errorf("%w: room %q: %w", tiles.ErrUnknownLog, roomID, err)
		}
		return nil, err
	}
	return r, nil
}

// Room is one room's log as a tiles.Source (docs/checkpoints.md): its
// entries are checkpoint.LeafData of the room's admitted messages (journal
// and exec messages whose atomic batch carries a valid attestation by a
// trusted publisher, checkpoint.BatchCollector), in stream order, so each
// entry's RFC 6962 leaf hash is the room tree's leaf (checkpoint.LeafHash);
// its checkpoint is the latest on the room's checkpoint subject that
// checkpoint.Parse verifies and that the leaves as read match
// (checkpoint.Ledger's rules), and the log is served up to its size.
// Memory: 24 bytes per 256 entries, 32 bytes per entry past that
// checkpoint up to checkpoint.DefaultLeafWindow and a chunk (the others in
// a file, Options.LeafDir), and the atomic batch being read. Safe for
// concurrent use.
type Room struct {
	logState
	id     string
	origin string             // the origin a served checkpoint carries; "": any Parse takes
	ledger *checkpoint.Ledger // scanMu
	sc     scanner            // scanMu
}

func newRoom(nc *nats.Conn, o *Options, roomID string) *Room {
	r := &Room{id: roomID, ledger: newLedger(o), sc: newScanner(o, roomID, mark{seq: 1})}
	if d := o.Trust.Origin(); d != "" {
		r.origin = checkpoint.RoomOrigin(d, roomID)
	}
	r.logState = logState{nc: nc, stream: o.Stream, o: o, next: 1}
	return r
}

// ID is the room's id.
func (r *Room) ID() string { return r.id }

// Checkpoint implements tiles.Source: the latest matching checkpoint and
// its size, in entries, reading what the stream holds of the room past
// the last read when that is older than Options.MaxAge. Errors:
// ErrNoCheckpoint (wrapped) while none matches, or the read's.
func (r *Room) Checkpoint(ctx context.Context) ([]byte, int64, error) {
	return r.checkpoint(ctx, r.scan)
}

// close closes the room's ledger once a read under way ends.
func (r *Room) close() error {
	r.scanMu.Lock()
	defer r.scanMu.Unlock()
	return closeLedger(&r.ledger)
}

// scan reads the room from where the last scan stopped. scanMu is held.
func (r *Room) scan(ctx context.Context) error {
	if r.ledger == nil {
		return fmt.Errorf("room %q: %w", r.id, ErrClosed)
	}
	return r.read(ctx, r.o.Subjects.Room(r.id), r.next, pullMessages, func(m jsapi.Msg) bool {
		r.next = m.Seq + 1
		p, ok := r.sc.feed(m, func(i uint64, h held, start mark) {
			if i%tilesWidth == 0 {
				r.indexAt(start)
			}
			r.ledger.Append(checkpoint.LeafHash(r.id, h.subject, h.content))
		})
		if ok && p.Kind == room.KindCheckpoint {
			r.readCheckpoint(m)
		}
		return true
	})
}

// readCheckpoint checks the checkpoint message m against the leaves read
// before it, as the checkpointer and the readers do. scanMu is held.
func (r *Room) readCheckpoint(m jsapi.Msg) {
	ck, err := checkpoint.Parse(m.Data, r.id, r.o.Trust)
	if err != nil || r.ledger.Check(ck) != nil {
		return // not a trusted publisher's, or the leaves contradict it: never served
	}
	if err := r.ledger.Accept(ck, m.Seq); err != nil {
		return // not reached: Check passed
	}
	// A checkpoint of the room-id form (before the deployment had an
	// origin) still counts for the rules, but a tlog client verifies the
	// note under the room's origin.
	if r.origin == "" || ck.Origin == r.origin {
		r.serve(m.Data, ck.Size)
	}
}

// Entries implements tiles.Source: the entries [start, end), read from
// the index's mark at or before start, their admission decided again
// from there by the same rules. Errors: ErrShort (wrapped), or the read's.
func (r *Room) Entries(ctx context.Context, start, end int64) ([][]byte, error) {
	mk, ok := r.start(start)
	if !ok || end < start {
		return nil, fmt.Errorf("tilesource: entries [%d, %d) are beyond room %q as read", start, end, r.id)
	}
	out := make([][]byte, 0, end-start)
	if end == start {
		return out, nil
	}
	sc := newScanner(r.o, r.id, mk)
	done := false
	// At least one message per entry up to end; a few more for what is
	// no leaf (checkpoints, refused messages) before the next request.
	batch := int(min(end-int64(mk.leaf)+16, pullMessages))
	err := r.read(ctx, r.o.Subjects.Room(r.id), mk.seq, batch, func(m jsapi.Msg) bool {
		sc.feed(m, func(i uint64, h held, _ mark) {
			if int64(i) >= start && int64(i) < end {
				out = append(out, checkpoint.LeafData(r.id, h.subject, h.content))
			}
			done = done || int64(i)+1 >= end
		})
		return !done
	})
	if err != nil {
		return nil, err
	}
	if int64(len(out)) != end-start {
		return nil, fmt.Errorf("%w: entries [%d, %d) of room %q: %d read", ErrShort, start, end, r.id, len(out))
	}
	return out, nil
}

// scanner decides, in stream order, which of a room's messages are leaves
// by the checkpointer's rule: a journal or exec message is one when its
// whole atomic batch verifies (checkpoint.BatchCollector) under the
// statement of its room, subject, position (a journal entry's
// checkpoint.EntryPosition, an exec message's checkpoint.RecordPosition
// of its ordinal on the exec subject) and content hash. Started at a
// mark, whose seq is the first message of a batch or of none, it decides
// every later message as a scan from the stream's start does: the batch
// open before the mark would have ended there anyway (checkpoint.BatchRun).
type scanner struct {
	roomID string
	subs   room.Subjects
	bc     *checkpoint.BatchCollector
	execs  uint64 // messages read on the exec subject
	leaves uint64 // leaves so far
	held   []held // the messages given to bc whose verdict is still to come, in stream order
}

// held is a message waiting for its batch's verdict.
type held struct {
	seq     uint64
	subject string
	content [32]byte
	execs   uint64 // scanner.execs before it
}

func newScanner(o *Options, roomID string, at mark) scanner {
	return scanner{roomID: roomID, subs: o.Subjects, bc: checkpoint.NewBatchCollector(o.Trust), execs: at.execs, leaves: at.leaf}
}

// feed takes the room's next message in stream order and calls leaf for
// each message it admits, in stream order, with its leaf index and the
// mark of its batch's first message. It returns m's subject parsed (false:
// none of the room's).
func (s *scanner) feed(m jsapi.Msg, leaf func(i uint64, h held, start mark)) (room.Parsed, bool) {
	p, err := s.subs.Parse(m.Subject)
	if err != nil || p.RoomID != s.roomID {
		return p, false
	}
	h := held{seq: m.Seq, subject: m.Subject, execs: s.execs}
	var position string
	switch p.Kind {
	case room.KindExecution:
		position = checkpoint.RecordPosition(s.execs)
		s.execs++
	case room.KindJournal:
		if position, err = checkpoint.EntryPosition(m.Data, m.Header.Get(room.HeaderOwner)); err != nil {
			s.decide(s.bc.Pass(m.Seq), leaf) // no entry: no leaf
			return p, true
		}
	default: // checkpoints and loss notices are no leaves
		s.decide(s.bc.Pass(m.Seq), leaf)
		return p, true
	}
	h.content = checkpoint.ContentHash(m.Data)
	s.held = append(s.held, h)
	st := checkpoint.Statement{Room: s.roomID, Subject: m.Subject, Position: position, Content: h.content}
	s.decide(s.bc.Add(m.Seq, checkpoint.AttestationOf(m.Header), st), leaf)
	return p, true
}

// decide applies the verdicts of one call of the collector, in stream
// order: one per held message. The admitted ones of one call are one
// batch's (a call ends at most one batch incomplete, refused, before
// deciding its own), so its first admitted message is the batch's first.
func (s *scanner) decide(vs []checkpoint.BatchVerdict, leaf func(i uint64, h held, start mark)) {
	i := 0
	var start *mark
	for _, v := range vs {
		for i < len(s.held) && s.held[i].seq < v.ID {
			i++ // not reached: every message given gets one verdict, in order
		}
		if i == len(s.held) || s.held[i].seq != v.ID {
			continue
		}
		h := s.held[i]
		i++
		if v.Err != nil {
			continue
		}
		if start == nil {
			start = &mark{seq: h.seq, leaf: s.leaves, execs: h.execs}
		}
		leaf(s.leaves, h, *start)
		s.leaves++
	}
	n := copy(s.held, s.held[i:])
	clear(s.held[n:])
	s.held = s.held[:n]
}

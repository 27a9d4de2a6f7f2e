package ingest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
)

// Gates decides appends over a deployment's partitions (docs/design.md,
// "Partitions"): one Gate per room stream, each deciding its own rooms
// exactly as the one gate of a deployment without partitions does. A
// request goes to the gate of its room's partition (room.Placement.Propose);
// a new room is placed by that gate just before its first message is
// appended (room.Placement.Record), so a refused request places nothing. A chain's first entry is
// claimed in the placement bucket before it is appended, so a capsule
// lands in one room across partitions as the room stream's own expected
// sequence keeps it in one room within a partition.
type Gates struct {
	place *room.Placement
	gates []*Gate // by partition, as place lists them
}

// NewGates returns the gates of place's partitions: gates[i] must be the
// gate of place.Partitions()[i]. It sets each gate's chain claim. With one
// partition it is that gate alone.
func NewGates(place *room.Placement, gates ...*Gate) (*Gates, error) {
	parts := place.Partitions()
	if len(gates) != len(parts) {
		return nil, fmt.Errorf("%w: %d gates for %d partitions", ErrGate, len(gates), len(parts))
	}
	gs := &Gates{place: place, gates: gates}
	for i, g := range gates {
		if g.streamName() != parts[i].Stream || g.subjects.Root() != parts[i].Subjects.Root() {
			return nil, fmt.Errorf("%w: gate %d serves %s, partition %d is %s", ErrGate, i, g.streamName(), i, parts[i].Stream)
		}
		if len(gates) > 1 {
			self, part := g, parts[i]
			g.claim = func(ctx context.Context, key events.ChainKey, roomID string) (string, error) {
				return gs.claimChain(ctx, self, key, roomID)
			}
			g.placeRoom = func(ctx context.Context, roomID string) error {
				q, err := place.Record(ctx, roomID, part)
				if err == nil && q.Stream != part.Stream {
					err = fmt.Errorf("%w: %s is placed on %s by another gate meanwhile; send again", errMisrouted, roomID, q.Stream)
				}
				return err
			}
		}
	}
	return gs, nil
}

// SingleGate is the Gates of a deployment of one partition.
func SingleGate(g *Gate) *Gates {
	return &Gates{gates: []*Gate{g}}
}

// Gate returns partition i's gate.
func (gs *Gates) Gate(i int) *Gate { return gs.gates[i] }

// Len is how many partitions the gates serve.
func (gs *Gates) Len() int { return len(gs.gates) }

// errMisrouted: a room was placed by another gate on another partition
// between Propose and the first append; nothing was stored, and the
// request, sent again, goes to the recorded partition.
var errMisrouted = errors.New("room placed elsewhere")

// forRoom returns the gate of roomID's partition, or of the partition it
// would be placed on when it is new: that gate records the placement just
// before it appends the room's first message (Gate.placeRoom).
func (gs *Gates) forRoom(ctx context.Context, roomID string) (*Gate, error) {
	if len(gs.gates) == 1 {
		return gs.gates[0], nil
	}
	// A read that may be tried again (no responder, no answer in time)
	// is, as the gate's own reads are, for up to retryWindow.
	var q room.Partition
	var err error
	until := time.Now().Add(retryWindow)
	for attempt := 0; ; attempt++ {
		if q, _, err = gs.place.Propose(ctx, roomID, gs.holds); err == nil {
			break
		}
		if !gs.gates[0].waitRead(ctx, err, &attempt, until) {
			return nil, err
		}
	}
	for _, g := range gs.gates {
		if g.streamName() == q.Stream {
			return g, nil
		}
	}
	return nil, fmt.Errorf("%w: %s is placed on %s, which this serve does not serve", room.ErrPlacement, roomID, q.Stream)
}

// holds reports whether partition q holds a message of roomID: a room
// written before placements were recorded stays where it is. Only the
// first partition can hold one (every other was made with the bucket,
// and a room is placed before its first message), so the others are not
// asked: a partition without a leader for now then holds up no other
// partition's new rooms. The first one is read from any replica, which
// has such an old room whatever it lags.
func (gs *Gates) holds(ctx context.Context, q room.Partition, roomID string) (bool, error) {
	g := gs.gates[0]
	if g.streamName() != q.Stream {
		return false, nil
	}
	m, err := g.lastOn(ctx, q.Subjects.Room(roomID), false)
	return m != nil, err
}

// claimChain claims key for roomID (room.Placement.ClaimChain), on behalf
// of self, the gate of roomID's partition, about to append the chain's
// first entry. A chain on the first partition written before claims were
// recorded (no claim, in a deployment that had one partition then) is
// found by its subjects there and wins.
func (gs *Gates) claimChain(ctx context.Context, self *Gate, key events.ChainKey, roomID string) (string, error) {
	// First the first partition: a chain written there before claims
	// existed (the others were made with the bucket, and claim every
	// chain) is recorded as its room's, so every later claim names it.
	// Any replica has such an old chain.
	if g := gs.gates[0]; g != self {
		m, err := g.lastOn(ctx, g.subjects.ChainAnyRoom(key), false)
		if err != nil {
			return "", err
		}
		if m != nil {
			p, err := g.subjects.Parse(m.Subject)
			if err != nil {
				return "", err
			}
			return gs.place.ClaimChain(ctx, key, p.RoomID)
		}
	}
	return gs.place.ClaimChain(ctx, key, roomID)
}

// appendJournal is Gate.appendJournal on roomID's partition.
func (gs *Gates) appendJournal(ctx context.Context, roomID, owner string, body []byte, capsule *events.CapsuleMeta, t *orderTicket, after int64) (room.JournalReply, error) {
	if err := gs.gates[0].subjects.CheckRoom(roomID); err != nil || len(gs.gates) == 1 {
		// A room id too long for a subject is refused by the gate alone.
		return gs.gates[0].appendJournal(ctx, roomID, owner, body, capsule, t, after)
	}
	g, err := gs.forRoom(ctx, roomID)
	if err != nil {
		return room.JournalReply{}, err
	}
	return g.appendJournal(ctx, roomID, owner, body, capsule, t, after)
}

// recordRoom is the room a record names (its "room/id" member), or "" when its bytes
// are not a JSON object naming one: the first partition's gate then
// refuses it.
func recordRoom(raw []byte) string {
	obj, _, err := events.DecodeObject(raw)
	if err != nil {
		return ""
	}
	id, _ := obj["room/id"].(string)
	return id
}

// recordGate is the gate that decides a record: its room's partition's, or
// the first one's for a record that names no room it could be placed by.
func (gs *Gates) recordGate(ctx context.Context, raw []byte) (*Gate, error) {
	if len(gs.gates) == 1 {
		return gs.gates[0], nil
	}
	id := recordRoom(raw)
	if id == "" || gs.gates[0].subjects.CheckRoom(id) != nil {
		return gs.gates[0], nil
	}
	return gs.forRoom(ctx, id)
}

// AppendRecord is Gate.AppendRecord on the record's room's partition.
func (gs *Gates) AppendRecord(ctx context.Context, raw []byte) room.RecordReply {
	return gs.appendRecord(ctx, raw, nil)
}

// appendRecord is AppendRecord for a request of the ingest service, which
// waits for its room without its place hold.
func (gs *Gates) appendRecord(ctx context.Context, raw []byte, hold *slotHold) room.RecordReply {
	g, err := gs.recordGate(ctx, raw)
	if err != nil {
		return room.RecordReply{RoomID: recordRoom(raw), Item: failed(0, err)}
	}
	return g.appendRecordHeld(ctx, raw, hold)
}

// AppendRecords is Gate.AppendRecords with each record decided by its
// room's partition's gate: the records of one partition in their order,
// the partitions one after the other (no rule spans two rooms, so none
// spans two partitions).
func (gs *Gates) AppendRecords(ctx context.Context, raws [][]byte) []room.RecordReply {
	return gs.appendRecords(ctx, raws, nil)
}

// appendRecords is AppendRecords for a request of the ingest service,
// which waits for each record's room without its place hold.
func (gs *Gates) appendRecords(ctx context.Context, raws [][]byte, hold *slotHold) []room.RecordReply {
	if len(gs.gates) == 1 {
		return gs.gates[0].appendRecords(ctx, raws, hold)
	}
	out := make([]room.RecordReply, len(raws))
	byGate := map[*Gate][]int{}
	var order []*Gate
	for i, raw := range raws {
		g, err := gs.recordGate(ctx, raw)
		if err != nil {
			out[i] = room.RecordReply{RoomID: recordRoom(raw), Item: failed(i, err)}
			continue
		}
		if _, ok := byGate[g]; !ok {
			order = append(order, g)
		}
		byGate[g] = append(byGate[g], i)
	}
	for _, g := range order {
		idx := byGate[g]
		sub := make([][]byte, len(idx))
		for j, i := range idx {
			sub[j] = raws[i]
		}
		for j, r := range g.appendRecords(ctx, sub, hold) {
			r.Item.Index = idx[j]
			out[idx[j]] = r
		}
	}
	return out
}

// Head is Gate.Head on the partition that holds the chain: each
// partition's gate is asked in turn until one knows the chain.
func (gs *Gates) Head(ctx context.Context, key events.ChainKey) (room.ChainHead, error) {
	var head room.ChainHead
	for _, g := range gs.gates {
		h, err := g.Head(ctx, key)
		if err != nil {
			return room.ChainHead{}, err
		}
		if h.Next > 0 || h.RoomID != "" {
			return h, nil
		}
		head = h
	}
	return head, nil
}

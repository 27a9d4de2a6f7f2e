package reader

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/jsapi"
)

// maxHomeScan bounds the messages chainHomes reads past ones that are no
// entry of the chain (written around the gate) before it gives up.
const maxHomeScan = 64

// chainHomes returns the lookup a reader of some rooms of stream makes
// when it meets a chain: the room whose subject holds the chain's first
// entry on the stream (its first message on any room's subject of the
// chain that parses as an entry of it), as the gate and a whole-stream
// reader decide it ("a chain lives in one room", docs/design.md). A
// reader of room Y alone would otherwise serve, as Y's, copies of a chain
// that lives in room X written around the gate (without trusted
// publishers: with them, copies fail their attestation). It returns ""
// when it cannot tell (an error, or no entry within maxHomeScan
// messages): the reader then takes the chain's room as its own.
func chainHomes(ctx context.Context, nc *nats.Conn, stream string, subjects room.Subjects, timeout time.Duration) func(events.ChainKey, string) string {
	return func(key events.ChainKey, roomID string) string {
		filter := subjects.ChainAnyRoom(key)
		seq := uint64(1)
		for range maxHomeScan {
			gctx, cancel := context.WithTimeout(ctx, timeout)
			m, err := jsapi.DirectGet(gctx, nc, stream, map[string]any{"seq": seq, "next_by_subj": filter})
			cancel()
			if err != nil || m == nil {
				return ""
			}
			if p, err := subjects.Parse(m.Subject); err == nil {
				if p.RoomID == roomID {
					return roomID
				}
				if e, err := events.ParseEntry(m.Data); err == nil && e.RunID() == key.RunID && e.CapsuleID() == key.CapsuleID {
					return p.RoomID
				}
			}
			seq = m.Seq + 1
		}
		return ""
	}
}

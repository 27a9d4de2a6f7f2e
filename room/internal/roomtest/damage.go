package roomtest

import (
	"bytes"
	"context"
	"os"
	"path/filepath"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
)

// Damage flips one byte in the middle of the first place marker occurs in
// the room stream's block files, as a bit flip on disk would, and removes
// the stream's state file (index.db), as a crash leaves it stale: e must
// be stopped (Stop), and the server, rebuilding its state from the blocks
// when it starts again, drops the message that holds it. (With its state
// file whole, the server finds the flip only when the message is read.)
// Use a marker only one message holds (an entry_hash, say).
func (e *Env) Damage(marker []byte) { e.damage(marker, false) }

// DamageKeepingState is Damage with the stream's state file kept, as a
// clean stop leaves it: the server trusts it on start, counts the damaged
// message as stored, and finds the damage only when the message is read
// (a direct get answers 404, a batch read skips it).
func (e *Env) DamageKeepingState(marker []byte) { e.damage(marker, true) }

func (e *Env) damage(marker []byte, keepState bool) {
	t := e.T
	t.Helper()
	if e.Srv != nil {
		t.Fatal("Damage: stop the server first")
	}
	blocks, err := filepath.Glob(filepath.Join(e.Dir, "jetstream", "*", "streams", e.streamName(), "msgs", "*.blk"))
	if err != nil || len(blocks) == 0 {
		t.Fatalf("Damage: no block file of stream %s under %s (%v)", e.streamName(), e.Dir, err)
	}
	for _, path := range blocks {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		i := bytes.Index(data, marker)
		if i < 0 {
			continue
		}
		data[i+len(marker)/2] ^= 0x01
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if keepState {
			return
		}
		if err := os.Remove(filepath.Join(filepath.Dir(path), "index.db")); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("Damage: %q is in no block file of stream %s", marker, e.streamName())
}

func (e *Env) streamName() string {
	if e.Stream != nil {
		return e.Stream.CachedInfo().Config.Name
	}
	return "ROOMS"
}

// ChainWithHole stores chain a around a hole: a[:100] (stream seqs 1 to
// 100), over 8 MB of messages the gate never sees on rooms.filler.exec
// (so that what follows is in the second block file: the server's block
// size for a stream without limits), b[:100], then a[100:150]; it then
// stops e, damages a[50] (Damage) and starts e again. The server drops
// the rest of the first block: a loses positions 50..99 from inside the
// stream, b loses nothing. It returns the stream seq of a[100], which
// the hole is before. a needs 150 entries, b 100. It ships through e's
// ingest service, or through via when given (an attesting gate, say:
// its connection is closed by the restart).
func (e *Env) ChainWithHole(roomID string, a, b []*events.Entry, via ...func(body []byte) room.JournalReply) (at100 uint64) {
	t := e.T
	t.Helper()
	send := func(body []byte) room.JournalReply { return e.ShipJournal(roomID, body) }
	if len(via) > 0 {
		send = via[0]
	}
	ship := func(part []*events.Entry) uint64 {
		r := send(Lines(part))
		if r.Stored != len(part) {
			t.Fatalf("ship: %+v", r)
		}
		return r.Items[0].StreamSeq
	}
	ship(a[:100])
	filler := make([]byte, 950_000)
	for range 9 {
		if _, err := e.Js.Publish(context.Background(), "rooms.filler.exec", filler); err != nil {
			t.Fatal(err)
		}
	}
	ship(b[:100])
	at100 = ship(a[100:150])
	e.Stop()
	e.Damage([]byte(a[50].EntryHash()))
	e.Start()
	return at100
}

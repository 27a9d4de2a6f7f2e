package roomtest

import (
	"bytes"
	"cmp"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

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
	e.T.Helper()
	if e.Srv != nil {
		e.T.Fatal("Damage: stop the server first")
	}
	DamageStore(e.T, e.Dir, e.streamName(), marker, keepState)
}

// DamageStore is Env.Damage (keepState false) or Env.DamageKeepingState
// (true) on the store directory of a stopped embedded server (serve's
// StoreDir, say), in the block files of stream.
func DamageStore(t testing.TB, storeDir, stream string, marker []byte, keepState bool) {
	t.Helper()
	path, data, at := blockWith(t, storeDir, stream, marker, "Damage")
	data[at+len(marker)/2] ^= 0x01
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if keepState {
		return
	}
	if err := os.Remove(filepath.Join(filepath.Dir(path), "index.db")); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
}

// TruncateBlockAt cuts the room stream's block file that holds marker
// just before it, keeping the stream's state file, as a block whose tail
// a crash lost: e must be stopped. The server, started again, shows the
// messages from there to the block's end deleted, while its per-subject
// counts (from the kept state file) still hold them.
func (e *Env) TruncateBlockAt(marker []byte) {
	t := e.T
	t.Helper()
	if e.Srv != nil {
		t.Fatal("TruncateBlockAt: stop the server first")
	}
	path, _, at := blockWith(t, e.Dir, e.streamName(), marker, "TruncateBlockAt")
	if err := os.Truncate(path, int64(at)); err != nil {
		t.Fatal(err)
	}
}

// CutBlockAt flips a bit of the length of the n-th (0-based) message on
// subject in the room stream's block files, as a torn write leaves a
// record: e must be stopped, and the server, when it starts again, keeps
// the block only up to the message before (the messages from there to
// the block's end are gone, the stream's last sequence with them when the
// block was its last). It relies on the server's record layout (a 4-byte
// length, 8-byte sequence and timestamp, 2-byte subject length, then the
// subject).
func (e *Env) CutBlockAt(subject string, n int) {
	t := e.T
	t.Helper()
	if e.Srv != nil {
		t.Fatal("CutBlockAt: stop the server first")
	}
	const before = 4 + 8 + 8 + 2 // length, sequence, timestamp, subject length
	subj := []byte(subject)
	left := n // occurrences still to pass, over the blocks in order
	for _, path := range blockFiles(t, e.Dir, e.streamName(), "CutBlockAt") {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; ; left-- {
			i := bytes.Index(data[off:], subj)
			if i < 0 {
				break
			}
			at := off + i
			off = at + len(subj)
			if left > 0 {
				continue
			}
			if at < before {
				t.Fatalf("CutBlockAt: %s at offset %d of %s has no record header before it", subject, at, path)
			}
			data[at-before] ^= 0x01
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("CutBlockAt: message %d on %s is in no block file of stream %s", n, subject, e.streamName())
}

// blockFiles returns the block files of stream under storeDir in block
// order (2.blk before 10.blk), failing t (naming what, the caller) when
// there is none.
func blockFiles(t testing.TB, storeDir, stream, what string) []string {
	t.Helper()
	blocks, err := filepath.Glob(filepath.Join(storeDir, "jetstream", "*", "streams", stream, "msgs", "*.blk"))
	if err != nil || len(blocks) == 0 {
		t.Fatalf("%s: no block file of stream %s under %s (%v)", what, stream, storeDir, err)
	}
	number := func(path string) int {
		n, _ := strconv.Atoi(strings.TrimSuffix(filepath.Base(path), ".blk"))
		return n
	}
	slices.SortFunc(blocks, func(a, b string) int { return cmp.Compare(number(a), number(b)) })
	return blocks
}

// blockWith returns the first block file of stream under storeDir that
// holds marker, its bytes and the marker's offset in them, failing t
// (naming what) when none does.
func blockWith(t testing.TB, storeDir, stream string, marker []byte, what string) (path string, data []byte, at int) {
	t.Helper()
	for _, path := range blockFiles(t, storeDir, stream, what) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if at := bytes.Index(data, marker); at >= 0 {
			return path, data, at
		}
	}
	t.Fatalf("%s: %q is in no block file of stream %s", what, marker, stream)
	return "", nil, 0
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

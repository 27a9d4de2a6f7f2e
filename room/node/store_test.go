package node_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/backup"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/node"
)

// storeMessages is how many messages fillStore appends: all in the room
// stream's first block file (8 MB for a stream without limits).
const storeMessages = 2013

// storeMarker is the payload's unique start of message seq: what
// roomtest.DamageStore looks for.
func storeMarker(seq int) []byte { return fmt.Appendf(nil, "message-%05d.", seq) }

// fillStore appends storeMessages messages of 800 bytes to e's room
// stream, after more, a function run with the server up halfway (at
// message half, 0 for none), records the stream's mark in the store
// directory as serve does, and stops e.
func fillStore(t *testing.T, e *roomtest.Env, half int, more func()) {
	t.Helper()
	ctx := context.Background()
	for seq := 1; seq <= storeMessages; seq++ {
		if seq == half+1 && more != nil {
			more()
		}
		data := append(storeMarker(seq), bytes.Repeat([]byte("x"), 786)...)
		if _, err := e.Js.Publish(ctx, "rooms.fill.exec", data); err != nil {
			t.Fatal(err)
		}
	}
	info, err := e.Stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.LastSeq != storeMessages {
		t.Fatalf("filled %d messages, want %d", info.State.LastSeq, storeMessages)
	}
	mark := room.StreamMark{Stream: room.DefaultStream, Created: info.Created, FirstSeq: 1, LastSeq: storeMessages}
	b, _ := json.Marshal(mark)
	if err := os.WriteFile(room.StreamMarkFile(e.Dir, room.DefaultStream), b, 0o600); err != nil {
		t.Fatal(err)
	}
	e.Stop()
}

// blockFile is the room stream's first block file in store.
func blockFile(t *testing.T, store string) string {
	t.Helper()
	return filepath.Join(store, "jetstream", "$G", "streams", room.DefaultStream, "msgs", "1.blk")
}

// fileSum is the SHA-256 of file path and its size.
func fileSum(t *testing.T, path string) ([32]byte, int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b), int64(len(b))
}

// backupOnStore backs the room stream of store up into a new directory
// with node.OnStore as publisher backup does (the copy beside the
// backup), and returns what OnStore did, the backup and the loss.
func backupOnStore(t *testing.T, store string) (node.StoreRun, backup.Result, *backup.Loss) {
	t.Helper()
	mark, err := room.ReadStreamMarkFile(room.StreamMarkFile(store, room.DefaultStream))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "backups", "rooms")
	var res backup.Result
	var loss *backup.Loss
	run, err := node.OnStore(node.StoreOptions{Server: embedded.Options{StoreDir: store}, CopyDir: filepath.Dir(out)}, func(nc *nats.Conn) (err error) {
		ctx := context.Background()
		if res, err = backup.Backup(ctx, nc, room.DefaultStream, out); err != nil {
			return err
		}
		loss, err = backup.CheckLoss(ctx, nc, room.DefaultStream, mark)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if run.Copy != "" {
		if _, err := os.Stat(run.Copy); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the copy %s is still there after OnStore: %v", run.Copy, err)
		}
		if filepath.Dir(run.Copy) != filepath.Dir(out) {
			t.Fatalf("the copy %s is not beside the backup %s", run.Copy, out)
		}
	}
	return run, res, loss
}

// TestBackupOnStoreMissingState: a message of the room stream's block
// damaged and the stream's state file removed, as a crash leaves it.
// Started on the store, the server would cut the block at the damaged
// message; backup runs it on a copy instead: the store's block file keeps
// every byte, the backup holds the 399 messages before the damage, and the
// loss names the 1,614 after it, seqs 400 to 2013, from the stream mark.
func TestBackupOnStoreMissingState(t *testing.T) {
	e := roomtest.NewEnv(t)
	fillStore(t, e, 0, nil)
	roomtest.DamageStore(t, e.Dir, room.DefaultStream, storeMarker(400), false)
	blk := blockFile(t, e.Dir)
	sumBefore, size := fileSum(t, blk)

	run, res, loss := backupOnStore(t, e.Dir)

	if sum, _ := fileSum(t, blk); sum != sumBefore {
		t.Fatal("backup changed the store's block file")
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(blk), "index.db")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("backup wrote the store's state file: %v", err)
	}
	if len(run.Stale) != 1 || run.Stale[0].Stream != room.DefaultStream || run.Stale[0].Reason != "its state file msgs/index.db is missing" || run.Copy == "" {
		t.Fatalf("OnStore: %+v, want the room stream's state found missing and a copy", run)
	}
	if len(run.Cut) != 1 || run.Cut[0].Block != "1.blk" || run.Cut[0].Bytes != size || run.Cut[0].Left >= size || run.Cut[0].Left == 0 {
		t.Fatalf("cut blocks %+v, want 1.blk cut short of %d bytes", run.Cut, size)
	}
	if res.Messages != 399 || res.FirstSeq != 1 || res.LastSeq != 399 {
		t.Fatalf("backup %+v, want 399 messages, seqs 1 to 399", res)
	}
	if loss == nil || loss.Tail != storeMessages-399 || loss.Inside != 0 || loss.Front != 0 || loss.LastSeq != 399 || loss.Mark == nil {
		t.Fatalf("loss %+v, want 1614 missing after seq 399", loss)
	}
	want := "1614 messages missing after the stream's last, stream seqs 400 to 2013: the stream ends at seq 399, its mark remembers seq 2013"
	if l := loss.Lines(); len(l) != 1 || l[0] != want {
		t.Fatalf("loss lines %q, want %q", l, want)
	}
}

// TestBackupOnStoreStaleState: the stream's state file from before the
// last 1,013 messages (a crash after them), a message before it damaged.
// The server, rebuilding on the copy, cuts the block at seq 400 and keeps
// the last sequence the old state file remembers (1,000): the backup
// names 601 messages gone from inside the stream and 1,013 after it.
func TestBackupOnStoreStaleState(t *testing.T) {
	e := roomtest.NewEnv(t)
	const half = 1000
	var old []byte
	state := func() string { return filepath.Join(filepath.Dir(blockFile(t, e.Dir)), "index.db") }
	fillStore(t, e, half, func() {
		e.Stop() // writes the state file of the first 1,000
		var err error
		if old, err = os.ReadFile(state()); err != nil {
			t.Fatal(err)
		}
		e.Start()
	})
	if err := os.WriteFile(state(), old, 0o600); err != nil {
		t.Fatal(err)
	}
	hourAgo := time.Now().Add(-time.Hour)
	if err := os.Chtimes(state(), hourAgo, hourAgo); err != nil {
		t.Fatal(err)
	}
	roomtest.DamageStore(t, e.Dir, room.DefaultStream, storeMarker(400), true)
	blk := blockFile(t, e.Dir)
	sumBefore, _ := fileSum(t, blk)
	stateBefore, _ := fileSum(t, state())

	run, res, loss := backupOnStore(t, e.Dir)

	if sum, _ := fileSum(t, blk); sum != sumBefore {
		t.Fatal("backup changed the store's block file")
	}
	if sum, _ := fileSum(t, state()); sum != stateBefore {
		t.Fatal("backup changed the store's state file")
	}
	if len(run.Stale) != 1 || run.Copy == "" || len(run.Cut) != 1 {
		t.Fatalf("OnStore: %+v, want the room stream's state found stale, a copy and its block cut", run)
	}
	if res.Messages != 399 || res.LastSeq != half {
		t.Fatalf("backup %+v, want 399 messages, last seq %d", res, half)
	}
	if loss == nil || loss.Inside != half-399 || len(loss.InsideSeqs) != half-399 || loss.InsideSeqs[0] != 400 || loss.Tail != storeMessages-half {
		t.Fatalf("loss %+v, want %d inside from seq 400 and %d after seq %d", loss, half-399, storeMessages-half, half)
	}
}

// TestBackupOnStoreFresh: an undamaged store after a clean stop: its
// state file is fresh, so the server runs on the store itself, no copy,
// and the backup holds every message with nothing missing.
func TestBackupOnStoreFresh(t *testing.T) {
	e := roomtest.NewEnv(t)
	fillStore(t, e, 0, nil)
	if stale, err := node.StaleStates(e.Dir); err != nil || len(stale) != 0 {
		t.Fatalf("StaleStates of a cleanly stopped store: %v, %v; want none", stale, err)
	}
	run, res, loss := backupOnStore(t, e.Dir)
	if run.Copy != "" || len(run.Stale) != 0 || len(run.Cut) != 0 {
		t.Fatalf("OnStore: %+v, want it on the store itself", run)
	}
	if res.Messages != storeMessages || res.LastSeq != storeMessages || loss != nil {
		t.Fatalf("backup %+v, loss %+v; want %d messages, nothing missing", res, loss, storeMessages)
	}
}

// TestBackupOnStoreUnreadable: a damaged message with the server's state
// file kept: the server trusts the state file, counts the message, and
// the snapshot skips it, as it cannot read it; the backup names it
// (Loss.Unreadable) where it used to say nothing was missing.
func TestBackupOnStoreUnreadable(t *testing.T) {
	e := roomtest.NewEnv(t)
	fillStore(t, e, 0, nil)
	roomtest.DamageStore(t, e.Dir, room.DefaultStream, storeMarker(400), true)
	_, _, loss := backupOnStore(t, e.Dir)
	if loss == nil || loss.Unreadable != 1 || !slices.Equal(loss.UnreadableSeqs, []uint64{400}) || loss.Inside != 0 || loss.Tail != 0 {
		t.Fatalf("loss %+v, want 1 unreadable at stream seq 400", loss)
	}
	if l := loss.Lines(); len(l) != 1 || !strings.HasPrefix(l[0], "1 messages the server counts but cannot read (stream seqs [400])") {
		t.Fatalf("lines %q", l)
	}
}

// TestRestoreOnStaleStore: restore writes the store, so OnStore without a
// copy directory refuses a store whose stream's state the server would
// rebuild, before starting it: the block file keeps every byte.
func TestRestoreOnStaleStore(t *testing.T) {
	e := roomtest.NewEnv(t)
	fillStore(t, e, 0, nil)
	roomtest.DamageStore(t, e.Dir, room.DefaultStream, storeMarker(400), false)
	sumBefore, _ := fileSum(t, blockFile(t, e.Dir))
	ran := false
	_, err := node.OnStore(node.StoreOptions{Server: embedded.Options{StoreDir: e.Dir}}, func(*nats.Conn) error { ran = true; return nil })
	if !errors.Is(err, node.ErrStaleState) || ran {
		t.Fatalf("OnStore without a copy directory: %v (f ran: %v), want ErrStaleState before the server starts", err, ran)
	}
	if sum, _ := fileSum(t, blockFile(t, e.Dir)); sum != sumBefore {
		t.Fatal("the refused OnStore changed the store's block file")
	}
}

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/embedded"
)

// backupStore makes a store holding the room stream with n messages
// (message-<seq>. and padding, all in its first block file) and its
// stream mark, as serve leaves it stopped, and returns the store and the
// block file.
func backupStore(t *testing.T, n int) (store, block string) {
	t.Helper()
	store = filepath.Join(t.TempDir(), "store")
	srv, err := embedded.Start(embedded.Options{StoreDir: store, Listen: "127.0.0.1:-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	st, err := room.EnsureStream(ctx, js, room.StreamConfig("", room.Subjects{}, 1), room.Subjects{})
	if err != nil {
		t.Fatal(err)
	}
	for seq := 1; seq <= n; seq++ {
		if _, err := js.Publish(ctx, "rooms.fill.exec", fmt.Appendf(nil, "message-%05d.%s", seq, bytes.Repeat([]byte("x"), 500))); err != nil {
			t.Fatal(err)
		}
	}
	mark, _ := json.Marshal(room.StreamMark{Stream: room.DefaultStream, Created: st.CachedInfo().Created, FirstSeq: 1, LastSeq: uint64(n)})
	if err := os.WriteFile(room.StreamMarkFile(store, room.DefaultStream), mark, 0o600); err != nil {
		t.Fatal(err)
	}
	return store, filepath.Join(store, "jetstream", "$G", "streams", room.DefaultStream, "msgs", "1.blk")
}

// TestBackupDamagedStore: a store whose room stream has message 100 of
// 500 damaged and no state file (a crash): backup --store-dir leaves the
// block file as it was, writes the backup of the 99 messages the server
// reads, prints INCOMPLETE with the 401 missing, stream seqs 100 to 500,
// and exits 1; --json says the same. restore --store-dir, which writes,
// refuses the store before starting the server (exit 2). The same store
// undamaged is backed up whole, exit 0.
func TestBackupDamagedStore(t *testing.T) {
	store, block := backupStore(t, 500)
	status, stdout, stderr := invoke(t, "backup", "--store-dir", store, filepath.Join(t.TempDir(), "whole"))
	if status != exitOK || !strings.HasPrefix(stdout, "BACKED UP  stream ROOMS: 500 messages, seqs 1 to 500") || strings.Count(stdout, "\n") != 1 {
		t.Fatalf("backup of the undamaged store: status %d\n%s%s", status, stdout, stderr)
	}

	data, err := os.ReadFile(block)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(data, []byte("message-00100."))
	if i < 0 {
		t.Fatal("message 100 is not in the block file")
	}
	data[i+7] ^= 0x01
	if err := os.WriteFile(block, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(filepath.Dir(block), "index.db")); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)

	out := filepath.Join(t.TempDir(), "damaged")
	status, stdout, stderr = invoke(t, "backup", "--store-dir", store, out)
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if status != exitRefused || len(lines) != 4 || !strings.HasPrefix(lines[0], "INCOMPLETE stream ROOMS: 99 messages, seqs 1 to 99,") ||
		lines[1] != "           401 messages missing after the stream's last, stream seqs 100 to 500: the stream ends at seq 99, its mark remembers seq 500" ||
		!strings.HasPrefix(lines[2], "           stream ROOMS: block 1.blk cut from "+fmt.Sprint(len(data))+" to ") ||
		!strings.Contains(lines[2], " bytes by the server's rebuild, on the copy: its messages from byte ") ||
		lines[3] != "           stream ROOMS: its state file msgs/index.db is missing; the server rebuilt its state on a copy of the store, which is unchanged" ||
		!strings.Contains(stderr, "backup incomplete: stream ROOMS lacks messages it held") {
		t.Fatalf("backup of the damaged store: status %d, want %d\n%s%s", status, exitRefused, stdout, stderr)
	}
	if after, err := os.ReadFile(block); err != nil || sha256.Sum256(after) != sum {
		t.Fatalf("backup changed the store's block file (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(out, "backup.json")); err != nil {
		t.Fatalf("the backup of what is left is not there: %v", err)
	}

	status, stdout, _ = invoke(t, "backup", "--store-dir", store, "--json", filepath.Join(t.TempDir(), "json"))
	var rep struct {
		Messages uint64 `json:"messages"`
		Loss     struct {
			Tail    uint64 `json:"tail"`
			LastSeq uint64 `json:"last_seq"`
		} `json:"loss"`
		Cut []struct {
			Block string `json:"block"`
		} `json:"cut_blocks"`
		Rebuilt []struct {
			Stream string `json:"stream"`
		} `json:"rebuilt"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || status != exitRefused || rep.Messages != 99 || rep.Loss.Tail != 401 || rep.Loss.LastSeq != 99 ||
		len(rep.Cut) != 1 || rep.Cut[0].Block != "1.blk" || len(rep.Rebuilt) != 1 || rep.Rebuilt[0].Stream != room.DefaultStream {
		t.Fatalf("backup --json of the damaged store: status %d, %v\n%s", status, err, stdout)
	}

	status, _, stderr = invoke(t, "restore", "--store-dir", store, out)
	if status != exitUsage || !strings.Contains(stderr, "would rebuild a stream's state") || !strings.Contains(stderr, "stream ROOMS: its state file msgs/index.db is missing") {
		t.Fatalf("restore into the damaged store: status %d, want %d\n%s", status, exitUsage, stderr)
	}
	if after, err := os.ReadFile(block); err != nil || sha256.Sum256(after) != sum {
		t.Fatalf("restore changed the store's block file (%v)", err)
	}
}

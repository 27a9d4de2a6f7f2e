package integration

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/events"
)

// TestStoreLossReported: a copy of the v0.1.0 store whose block file lost
// its second half while serve was stopped is served; the server drops the
// lost messages as deleted, and serve says so: an error line, the metric
// roompub_store_lost_messages, and /healthz not ok with the reason. The
// undamaged store shows 0 (TestStoreV010).
func TestStoreLossReported(t *testing.T) {
	t.Parallel()
	store := filepath.Join(t.TempDir(), "store")
	copyTree(t, filepath.Join(root, v010Dir, "store"), store)
	blk := filepath.Join(store, "jetstream", "$G", "streams", "ROOMS", "msgs", "1.blk")
	if err := os.Truncate(blk, 50_000); err != nil {
		t.Fatal(err)
	}
	srv := startServe(t, store, true, "--listen", "127.0.0.1:-1", "--store-dir", store, "--trusted-host", v010Host, "--http", "127.0.0.1:0")

	want := map[string]string{"roompub_store_lost_messages": wantLost}
	if got := scrapeMetrics(t, srv.log.String(), want); got["roompub_store_lost_messages"] != wantLost {
		t.Errorf("roompub_store_lost_messages = %q, want %s\n%s", got["roompub_store_lost_messages"], wantLost, srv.log)
	}
	status, body := getHealth(t, srv.log.String())
	if status != http.StatusServiceUnavailable || !strings.Contains(body, "the store lost acknowledged messages: "+wantLost+" messages are gone, between stream seqs") {
		t.Errorf("/healthz: %d %q, want 503 naming %s lost messages", status, body, wantLost)
	}
	found := false
	for _, l := range logLines(t, srv.log.String()) {
		if l.Level == "error" && strings.HasPrefix(l.Msg, "room stream: the store lost acknowledged messages") {
			found = true
		}
	}
	if !found {
		t.Errorf("serve logged no error naming the loss:\n%s", srv.log)
	}
}

// wantLost is how many messages nats-server drops from the v0.1.0 store's
// block when it is cut at 50,000 of its 100,814 bytes.
const wantLost = "51"

// getHealth reads serve's /healthz (its address from the "publisher
// serving" log line): the status and the body.
func getHealth(t *testing.T, log string) (int, string) {
	t.Helper()
	addr := ""
	for _, l := range logLines(t, log) {
		if l.Msg == "publisher serving" {
			addr = l.HTTP
		}
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestStoreLostChainClosed: serve (with a publisher key) stores chain A
// around 8 MB of other messages, so that A's positions 100.. and chain B
// are in the stream's second block file; a flipped byte in the first
// block, while serve is stopped, makes the server drop A's positions
// 50..99 (and the rest of that block) on restart. Serve then says so
// without any append (its survey): an error line naming room, chain and
// positions, roompub_store_damaged_chains 1 and roompub_store_damaged_rooms
// 1 (the room's checkpoint covers 250 leaves, 200 are held), the room's
// checkpoints blocked (roompub_checkpoint_rooms_blocked 1), /healthz 503
// naming the chain. `publisher journal` of A never says "already stored":
// it is refused store_lost at line 51, exit 1, and stores nothing; B goes
// on.
func TestStoreLostChainClosed(t *testing.T) {
	t.Parallel()
	key := newPublisherKey(t)
	store := filepath.Join(t.TempDir(), "store")
	const roomID = "room:lossy"
	args := []string{"--checkpoint-interval", "1h", "--http", "127.0.0.1:0"}
	srv := startKeyed(t, store, key, args...)
	metaA := events.CapsuleMeta{RunID: "run-20261202-lossy-a", CapsuleID: "cap-lossy-a", HarnessVersion: "ecc-eval-harness/1.4.2", TaskFamily: "slugify"}
	metaB := events.CapsuleMeta{RunID: "run-20261202-lossy-b", CapsuleID: "cap-lossy-b", HarnessVersion: "ecc-eval-harness/1.4.2", TaskFamily: "slugify"}
	a, b := entries(t, metaA, 160), entries(t, metaB, 110)
	shipTo(t, srv.url, roomID, capsuleOf(t, metaA, a[:100]), 0, 100)
	nc, err := nats.Connect(srv.url)
	if err != nil {
		t.Fatal(err)
	}
	filler := make([]byte, 950_000)
	for range 9 {
		if _, err := nc.Request("rooms.filler.exec", filler, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	nc.Close()
	shipTo(t, srv.url, roomID, capsuleOf(t, metaB, b[:100]), 0, 100)
	at100 := shipTo(t, srv.url, roomID, capsuleOf(t, metaA, a[:150]), 100, 50).Head.StreamSeq - 49
	srv.stop() // the final checkpoint covers the room's 250 leaves

	flipInBlock(t, store, a[50], false)

	srv = startKeyed(t, store, key, args...)
	positions := fmt.Sprintf("positions 50-99 (between stream seqs 50 and %d)", at100)
	// The checkpointer writes no more checkpoints of the room: they would
	// sign leaves the store lost.
	want := map[string]string{"roompub_store_damaged_chains": "1", "roompub_store_damaged_rooms": "1", "roompub_checkpoint_rooms_blocked": "1"}
	deadline := time.Now().Add(10 * time.Second)
	for got := scrapeMetrics(t, srv.log.String(), want); !maps.Equal(got, want); got = scrapeMetrics(t, srv.log.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("metrics %v, want %v\n%s", got, want, srv.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	status, body := getHealth(t, srv.log.String())
	if status != http.StatusServiceUnavailable || !strings.Contains(body, "the store lost acknowledged entries of 1 chains (closed: store_lost): "+roomID+" "+metaA.RunID+"/"+metaA.CapsuleID+": 50 lost ("+positions+")") ||
		!strings.Contains(body, "the store lost acknowledged messages of 1 rooms: "+roomID+": its latest checkpoint covers 250 leaves, the stream holds 200") {
		t.Errorf("/healthz: %d %q", status, body)
	}
	logged := false
	for _, l := range logLines(t, srv.log.String()) {
		if l.Level == "error" && strings.HasPrefix(l.Msg, "the store lost acknowledged entries of a chain") && strings.Contains(srv.log.String(), `"missing":"`+positions+`"`) {
			logged = true
		}
	}
	if !logged {
		t.Errorf("no error line naming the chain's lost positions:\n%s", srv.log)
	}

	r := runPub(t, nil, "journal", "--server", srv.url, "--room", roomID, capsuleOf(t, metaA, a))
	if r.status != 1 || strings.Contains(r.stdout, "already stored (nothing new)") || !strings.Contains(r.stdout, "0 stored, 0 duplicate, 0 already stored") ||
		!strings.Contains(r.stdout, "store_lost at ") || !strings.Contains(r.stdout, "journal.ndjson:51: the store lost 50 of the chain's 150 acknowledged entries, "+positions) {
		t.Errorf("journal of A: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	// B lost nothing, but the room did: no append to it until an operator
	// acknowledges the loss.
	dirB := capsuleOf(t, metaB, b)
	r = runPub(t, nil, "journal", "--server", srv.url, "--room", roomID, dirB)
	if r.status != 1 || !strings.Contains(r.stdout, "store_lost at ") || !strings.Contains(r.stdout, "no loss notice covers it: no append to the room until an operator acknowledges the loss (publisher serve --acknowledge-loss "+roomID+")") {
		t.Errorf("journal of B before the notice: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	// The operator acknowledges it: serve restarted with --acknowledge-loss
	// writes the notice; B goes on, A stays closed, /healthz is ok but for
	// the stream's deleted messages, which only a restore clears.
	srv.stop()
	srv = startKeyed(t, store, key, append(args, "--acknowledge-loss", roomID)...)
	deadline = time.Now().Add(10 * time.Second)
	for !strings.Contains(srv.log.String(), "acknowledge-loss: loss notice written") {
		if time.Now().After(deadline) {
			t.Fatalf("no loss notice written:\n%s", srv.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	shipTo(t, srv.url, roomID, dirB, 100, 10)
	status, body = getHealth(t, srv.log.String())
	if status != http.StatusServiceUnavailable || strings.Contains(body, "chains (closed") || !strings.Contains(body, "the store lost acknowledged messages: ") {
		t.Errorf("/healthz after the notice: %d %q; want only the stream's lost messages", status, body)
	}
	r = runPub(t, nil, "journal", "--server", srv.url, "--room", roomID, capsuleOf(t, metaA, a))
	if r.status != 1 || !strings.Contains(r.stdout, "journal.ndjson:51: the store lost 50 of the chain's 150 acknowledged entries") {
		t.Errorf("journal of A after the notice: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}

	// The reader: the room refused, chain A broken where its entries
	// resume after the hole (gap), B whole; exit 1; the notice shown,
	// attested by the publisher.
	rep, res := ckAudit(t, ckArgs(srv.url, key.id, "audit", "--json", "--state-dir", t.TempDir(), "--room", roomID)...)
	if len(rep.Notices) != 1 || !rep.Notices[0].Verified || rep.Notices[0].Signer != key.id || len(rep.Notices[0].Notice.Chains) != 1 ||
		rep.Notices[0].Notice.Chains[0].Loss.Count != 50 || rep.Notices[0].Notice.Checkpoint == nil || rep.Notices[0].Notice.Checkpoint.Size != 250 {
		t.Errorf("audit's notices: %+v", rep.Notices)
	}
	text := subRun(t, ckArgs(srv.url, key.id, "audit", "--state-dir", t.TempDir(), "--room", roomID)...)
	if !strings.Contains(text.stdout, "loss notice for "+roomID+" at stream seq ") || !strings.Contains(text.stdout, "chain "+metaA.RunID+"/"+metaA.CapsuleID+" lost 50 of the chain's 150 acknowledged entries: "+positions) {
		t.Errorf("audit text: %s", text.stdout)
	}
	verdicts := map[string]string{}
	gapAt := uint64(0)
	for _, c := range rep.Chains {
		verdicts[c.Chain.RunID] = c.Verdict
		if c.Chain.RunID == metaA.RunID && c.Broken != nil && c.Broken.Code == "gap" {
			gapAt = c.Broken.Seq
		}
	}
	if res.status != 1 || verdicts[metaB.RunID] != "ok" || verdicts[metaA.RunID] == "ok" || gapAt != at100 {
		t.Errorf("audit: exit %d, chains %v, A broken by gap at stream seq %d (want %d)\n%s%s", res.status, verdicts, gapAt, at100, res.stdout, res.stderr)
	}
}

// entryHash is the entry_hash of one journal line.
func entryHash(t *testing.T, line []byte) string {
	t.Helper()
	e, err := events.ParseEntry(line)
	if err != nil {
		t.Fatal(err)
	}
	return e.EntryHash()
}

// TestStoreLostStateFileKept: with a publisher key, a flipped byte in the
// block while the server's state file (index.db) is kept: the server
// counts the damaged entry as stored and shows no deletion, but the
// checkpointer, reading the room, finds its checkpoint contradicting the
// messages. Serve then treats the room as damaged: an error line,
// /healthz 503 naming the room, and a new chain into it refused
// store_lost (exit 1) until a notice or a restore.
func TestStoreLostStateFileKept(t *testing.T) {
	t.Parallel()
	key := newPublisherKey(t)
	store := filepath.Join(t.TempDir(), "store")
	const roomID = "room:kept"
	args := []string{"--checkpoint-interval", "1h", "--http", "127.0.0.1:0"}
	srv := startKeyed(t, store, key, args...)
	metaA := events.CapsuleMeta{RunID: "run-20261202-kept-a", CapsuleID: "cap-kept-a", HarnessVersion: "ecc-eval-harness/1.4.2", TaskFamily: "slugify"}
	metaC := events.CapsuleMeta{RunID: "run-20261202-kept-c", CapsuleID: "cap-kept-c", HarnessVersion: "ecc-eval-harness/1.4.2", TaskFamily: "slugify"}
	a := entries(t, metaA, 100)
	shipTo(t, srv.url, roomID, capsuleOf(t, metaA, a), 0, 100)
	srv.stop() // the final checkpoint covers the 100 entries
	flipInBlock(t, store, a[50], true)

	// Resuming from the final checkpoint would not read entry 50 again:
	// the full read re-checks what the store holds.
	srv = startKeyed(t, store, key, append(args, "--checkpoint-full-read")...)
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(srv.log.String(), "the room's latest checkpoint contradicts its messages") {
		if time.Now().After(deadline) {
			t.Fatalf("no error about the room:\n%s", srv.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	status, body := getHealth(t, srv.log.String())
	if status != http.StatusServiceUnavailable || !strings.Contains(body, "the store lost acknowledged messages of 1 rooms: "+roomID+": its checkpoint at stream seq 101 (size 100) contradicts the messages the stream holds") {
		t.Errorf("/healthz: %d %q", status, body)
	}
	// The shipper of A: the gate reads the contradicted room's chain
	// whole, finds position 50 gone, and closes it.
	r := runPub(t, nil, "journal", "--server", srv.url, "--room", roomID, capsuleOf(t, metaA, a))
	if r.status != 1 || !strings.Contains(r.stdout, "journal.ndjson:51: the store lost 1 of the chain's 100 acknowledged entries, positions 50 (between stream seqs 50 and 52)") {
		t.Errorf("journal of A: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	// A's hole is in the room: with a publisher key, the room waits for a
	// loss notice.
	r = runPub(t, nil, "journal", "--server", srv.url, "--room", roomID, capsuleOf(t, metaC, entries(t, metaC, 5)))
	if r.status != 1 || !strings.Contains(r.stdout, "no loss notice covers it") {
		t.Errorf("a new chain into the room: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
}

// flipInBlock flips one byte of line's entry_hash in the room stream's
// first block file of the stopped serve's store, as a bit flip on disk
// would, and removes the stream's state file (index.db) unless keepState:
// a server that rebuilds its state drops the rest of the block, one that
// kept it finds the damage only when the message is read.
func flipInBlock(t *testing.T, store string, line []byte, keepState bool) {
	t.Helper()
	blk := filepath.Join(store, "jetstream", "$G", "streams", "ROOMS", "msgs", "1.blk")
	data, err := os.ReadFile(blk)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(data, []byte(entryHash(t, line)))
	if i < 0 {
		t.Fatal("the entry is not in the first block file")
	}
	data[i+10] ^= 1
	if err := os.WriteFile(blk, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if !keepState {
		if err := os.Remove(filepath.Join(filepath.Dir(blk), "index.db")); err != nil {
			t.Fatal(err)
		}
	}
}
